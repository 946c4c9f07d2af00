"""Training-loss curves fitted to a job's reported loss history (B8 Optimus, B9 SLAQ).

Two forms, each with a non-negative scale a, a positive shape and a non-negative asymptote c:

* inverse (Optimus, B8): l(k) = 1/(beta0 k + beta1) + beta2, written c + a/(k + b) with
  a = 1/beta0, b = beta1/beta0, c = beta2 (O(1/k) convergence);
* exponential: l(k) = c + a exp(-r k) (linear convergence).

For a fixed shape (b or r) the loss is linear in (a, c), so the fit is a non-negative least
squares in two variables, solved in closed form; the shape is searched on a log grid and
refined by a bounded scalar search. Weights let SLAQ favour recent points. Steps are the job's
own unit (iterations); losses are >= 0 and finite, steps >= 0 and strictly increasing (checked
at the wire).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from scipy.optimize import minimize_scalar

from apportion.solver.model import FloatArray

MIN_POINTS = 3
"""Fewest points a fit needs (three parameters)."""
GRID_POINTS = 48
"""Shapes tried on the log grid before the scalar refinement."""
SHAPE_SPAN = (1e-4, 1e4)
"""Range of the shape relative to the history's step span (b / span, r * span)."""
FLAT = 1e-12
"""A fitted decrease below this fraction of the losses is rounding noise: the curve is flat."""


class CurveForm(StrEnum):
    INVERSE = "inverse"
    EXPONENTIAL = "exponential"


@dataclass(frozen=True)
class LossCurve:
    """A fitted loss curve (module docstring); `residual` is the weighted RMS error (loss
    units)."""

    form: CurveForm
    scale: float
    """a >= 0 (loss units; loss units x steps for the inverse form)."""
    shape: float
    """b > 0 (steps, inverse form) or r > 0 (1/steps, exponential form)."""
    asymptote: float
    """c >= 0: the loss the curve tends to (loss units)."""
    residual: float

    def excess(self, steps: FloatArray | float) -> FloatArray:
        """l(k) - c (loss units)."""
        k = np.asarray(steps, np.float64)
        if self.form is CurveForm.INVERSE:
            return np.asarray(self.scale / (k + self.shape), np.float64)
        return np.asarray(self.scale * np.exp(-self.shape * k), np.float64)

    def loss(self, steps: FloatArray | float) -> FloatArray:
        """l(k) (loss units)."""
        return np.asarray(self.asymptote + self.excess(steps), np.float64)

    def convergence_step(self, first_step: float, fraction: float) -> float:
        """The step at which the excess over the asymptote has fallen to `fraction` (in (0, 1))
        of its value at `first_step`; `first_step` itself for a flat curve (a = 0)."""
        if self.scale <= 0:
            return first_step
        if self.form is CurveForm.INVERSE:  # a/(k + b) = fraction a/(k1 + b)
            return (first_step + self.shape) / fraction - self.shape
        return first_step + math.log(1.0 / fraction) / self.shape


def _basis(form: CurveForm, steps: FloatArray, shapes: FloatArray) -> FloatArray:
    """(G, N) the curve's shape function at every step for every shape."""
    if form is CurveForm.INVERSE:
        return np.asarray(1.0 / (steps[None, :] + shapes[:, None]), np.float64)
    return np.asarray(np.exp(-shapes[:, None] * steps[None, :]), np.float64)


def _nonnegative_fit(
    u: FloatArray, loss: FloatArray, weight: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per row of u (G, N): min sum_k w_k (a u_k + c - l_k)^2 over a, c >= 0, in closed form
    (the interior solution if it is non-negative, else the better of the two faces a = 0 and
    c = 0). Returns (a, c, weighted sum of squares), each (G,)."""
    w = weight / weight.sum()
    mu = u @ w
    ml = float(loss @ w)
    du = u - mu[:, None]
    var = (du * du) @ w
    cov = du @ (w * (loss - ml))
    with np.errstate(divide="ignore", invalid="ignore"):
        a_in = np.where(var > 0, cov / var, 0.0)
    c_in = ml - a_in * mu
    uu = (u * u) @ w
    with np.errstate(divide="ignore", invalid="ignore"):
        a_face = np.maximum(np.where(uu > 0, (u @ (w * loss)) / uu, 0.0), 0.0)
    candidates = [
        (a_in, c_in),
        (np.zeros_like(mu), np.full_like(mu, max(ml, 0.0))),
        (a_face, np.zeros_like(mu)),
    ]
    best_a = np.zeros_like(mu)
    best_c = np.zeros_like(mu)
    best_sse = np.full_like(mu, np.inf)
    for a, c in candidates:
        ok = (a >= 0) & (c >= 0)
        resid = a[:, None] * u + c[:, None] - loss[None, :]
        sse = np.where(ok, (resid * resid) @ w, np.inf)
        better = sse < best_sse
        best_a = np.where(better, a, best_a)
        best_c = np.where(better, c, best_c)
        best_sse = np.where(better, sse, best_sse)
    return best_a, best_c, best_sse


def fit(
    steps: FloatArray,
    loss: FloatArray,
    form: CurveForm = CurveForm.INVERSE,
    weight: FloatArray | None = None,
) -> LossCurve:
    """The least-squares curve of `form` through (steps, loss), weights `weight` (default 1).

    Needs at least `MIN_POINTS` points with strictly increasing steps >= 0."""
    k = np.asarray(steps, np.float64)
    y = np.asarray(loss, np.float64)
    w = np.ones_like(k) if weight is None else np.asarray(weight, np.float64)
    if k.size < MIN_POINTS:
        raise ValueError(f"a loss curve needs at least {MIN_POINTS} points, got {k.size}")
    span = max(float(k[-1] - k[0]), 1.0)
    lo, hi = SHAPE_SPAN
    unit = span if form is CurveForm.INVERSE else 1.0 / span
    grid = unit * np.logspace(math.log10(lo), math.log10(hi), GRID_POINTS)
    a, c, sse = _nonnegative_fit(_basis(form, k, grid), y, w)
    g = int(np.argmin(sse))
    left = math.log(grid[max(g - 1, 0)])
    right = math.log(grid[min(g + 1, grid.size - 1)])
    best = (float(a[g]), float(grid[g]), float(c[g]), float(sse[g]))
    if right > left:
        def objective(log_shape: float) -> float:
            shape = np.array([math.exp(log_shape)])
            return float(_nonnegative_fit(_basis(form, k, shape), y, w)[2][0])

        found = minimize_scalar(objective, bounds=(left, right), method="bounded",
                                options={"xatol": 1e-6})
        shape = math.exp(float(found.x))
        fa, fc, fs = _nonnegative_fit(_basis(form, k, np.array([shape])), y, w)
        if float(fs[0]) < best[3]:
            best = (float(fa[0]), shape, float(fc[0]), float(fs[0]))
    scale, shape, asymptote, sse_best = best
    peak = float(_basis(form, k, np.array([shape])).max())
    if scale * peak <= FLAT * max(float(np.abs(y).max()), 1e-300):  # rounding noise: flat
        scale = 0.0
    return LossCurve(form, scale, shape, asymptote, math.sqrt(max(sse_best, 0.0)))


def recency_weights(count: int, decay: float) -> FloatArray:
    """Weight decay^(points after it) per point: the latest point weighs 1 (SLAQ's emphasis on
    recent iterations); decay = 1 weighs all points equally."""
    return np.asarray(decay ** np.arange(count - 1, -1, -1, dtype=np.float64), np.float64)


def best_fit(steps: FloatArray, loss: FloatArray, weight: FloatArray | None = None) -> LossCurve:
    """The better (lower weighted residual) of the inverse and exponential fits; the inverse
    form on ties."""
    inverse = fit(steps, loss, CurveForm.INVERSE, weight)
    exponential = fit(steps, loss, CurveForm.EXPONENTIAL, weight)
    return exponential if exponential.residual < inverse.residual else inverse
