"""Training-loss curves fitted to a job's reported loss history (B8 Optimus, B9 SLAQ).

Two forms, each with a non-negative scale a, a positive shape and a non-negative asymptote c:

* inverse (Optimus, B8): l(k) = 1/(beta0 k + beta1) + beta2, written c + a/(k + b) with
  a = 1/beta0, b = beta1/beta0, c = beta2 (O(1/k) convergence);
* exponential: l(k) = c + a exp(-r k) (linear convergence).

For a fixed shape (b or r) the loss is linear in (a, c), so the fit is a non-negative least
squares in two variables, solved in closed form; the shape is searched on a log grid and
refined by golden-section search in its bracket. Weights let SLAQ favour recent points. Many
histories are fitted at once (`fit_many`, vectorized over jobs). Steps are the job's own unit
(iterations); losses are >= 0 and finite, steps >= 0 and strictly increasing (checked at the
wire).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from apportion.solver.model import FloatArray

MIN_POINTS = 3
"""Fewest points a fit needs (three parameters)."""
GRID_POINTS = 48
"""Shapes tried on the log grid before the refinement."""
REFINE_STEPS = 40
"""Golden-section steps in the grid bracket (its width shrinks by 0.618 each)."""
SHAPE_SPAN = (1e-4, 1e4)
"""Range of the shape relative to the history's step span (b / span, r * span)."""
FLAT = 1e-12
"""A fitted decrease below this fraction of the losses is rounding noise: the curve is flat."""
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


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
    """(J, G, N) the shape function at every step (J, N) for every shape (J, G)."""
    if form is CurveForm.INVERSE:
        return np.asarray(1.0 / (steps[:, None, :] + shapes[:, :, None]), np.float64)
    return np.asarray(np.exp(-shapes[:, :, None] * steps[:, None, :]), np.float64)


def _nonnegative_fit(
    u: FloatArray, loss: FloatArray, weight: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """For every job j and shape g: min sum_k w_jk (a u_jgk + c - l_jk)^2 over a, c >= 0 in
    closed form (the interior solution if it is non-negative, else the better of the faces
    a = 0 and c = 0). u (J, G, N), loss and weight (J, N), weights summing to 1 per job.
    Returns (a, c, weighted sum of squares), each (J, G)."""
    w = weight[:, None, :]
    y = loss[:, None, :]
    mu = (u * w).sum(axis=2)
    ml = (y * w).sum(axis=2)
    du = u - mu[:, :, None]
    var = (du * du * w).sum(axis=2)
    cov = (du * (y - ml[:, :, None]) * w).sum(axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        a_in = np.where(var > 0, cov / var, 0.0)
    c_in = ml - a_in * mu
    uu = (u * u * w).sum(axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        a_face = np.maximum(np.where(uu > 0, (u * y * w).sum(axis=2) / uu, 0.0), 0.0)
    candidates = [
        (a_in, c_in),
        (np.zeros_like(mu), np.maximum(ml, 0.0)),
        (a_face, np.zeros_like(mu)),
    ]
    best_a = np.zeros_like(mu)
    best_c = np.zeros_like(mu)
    best_sse = np.full_like(mu, np.inf)
    for a, c in candidates:
        ok = (a >= 0) & (c >= 0)
        resid = a[:, :, None] * u + c[:, :, None] - y
        sse = np.where(ok, (resid * resid * w).sum(axis=2), np.inf)
        better = sse < best_sse
        best_a = np.where(better, a, best_a)
        best_c = np.where(better, c, best_c)
        best_sse = np.where(better, sse, best_sse)
    return best_a, best_c, best_sse


def fit_many(
    steps: Sequence[FloatArray],
    loss: Sequence[FloatArray],
    form: CurveForm = CurveForm.INVERSE,
    weight: Sequence[FloatArray] | None = None,
) -> list[LossCurve]:
    """The least-squares curve of `form` through every history (steps[j], loss[j]) with
    weights weight[j] (default 1). Each needs at least `MIN_POINTS` points with strictly
    increasing steps >= 0."""
    J = len(steps)
    if J == 0:
        return []
    sizes = [len(s) for s in steps]
    if min(sizes) < MIN_POINTS:
        raise ValueError(f"a loss curve needs at least {MIN_POINTS} points, got {min(sizes)}")
    N = max(sizes)
    k = np.zeros((J, N))
    y = np.zeros((J, N))
    w = np.zeros((J, N))
    for j in range(J):
        size = sizes[j]
        k[j, :size] = steps[j]
        k[j, size:] = steps[j][-1]  # padding: weight 0
        y[j, :size] = loss[j]
        w[j, :size] = 1.0 if weight is None else weight[j]
    w /= w.sum(axis=1, keepdims=True)
    span = np.maximum(np.asarray([s[-1] - s[0] for s in steps], np.float64), 1.0)
    unit = span if form is CurveForm.INVERSE else 1.0 / span
    lo, hi = SHAPE_SPAN
    logs = np.log(unit)[:, None] + np.linspace(math.log(lo), math.log(hi), GRID_POINTS)[None, :]
    a, c, sse = _nonnegative_fit(_basis(form, k, np.exp(logs)), y, w)
    g = np.argmin(sse, axis=1)
    rows = np.arange(J)
    best_log = logs[rows, g]
    best = (a[rows, g], c[rows, g], sse[rows, g])
    left = logs[rows, np.maximum(g - 1, 0)]
    right = logs[rows, np.minimum(g + 1, GRID_POINTS - 1)]

    def at(points: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        fa, fc, fs = _nonnegative_fit(_basis(form, k, np.exp(points)[:, None]), y, w)
        return fa[:, 0], fc[:, 0], fs[:, 0]

    c_point = right - _GOLDEN * (right - left)
    d_point = left + _GOLDEN * (right - left)
    fc, fd = at(c_point)[2], at(d_point)[2]
    for _ in range(REFINE_STEPS):
        lower = fc < fd  # the minimum is in [left, d]; else in [c, right]
        right = np.where(lower, d_point, right)
        left = np.where(lower, left, c_point)
        new_c = np.where(lower, right - _GOLDEN * (right - left), d_point)
        new_d = np.where(lower, c_point, left + _GOLDEN * (right - left))
        value = at(np.where(lower, new_c, new_d))[2]
        fc, fd = np.where(lower, value, fd), np.where(lower, fc, value)
        c_point, d_point = new_c, new_d
    middle = 0.5 * (left + right)
    ra, rc, rs = at(middle)
    better = rs < best[2]
    scale = np.where(better, ra, best[0])
    asymptote = np.where(better, rc, best[1])
    sse_best = np.where(better, rs, best[2])
    shape = np.exp(np.where(better, middle, best_log))
    peak = _basis(form, k, shape[:, None])[:, 0, :].max(axis=1)
    flat = scale * peak <= FLAT * np.maximum(np.abs(y).max(axis=1), 1e-300)
    scale = np.where(flat, 0.0, scale)  # rounding noise: a flat curve
    return [LossCurve(form, float(scale[j]), float(shape[j]), float(asymptote[j]),
                      math.sqrt(max(float(sse_best[j]), 0.0))) for j in range(J)]


def fit(
    steps: FloatArray,
    loss: FloatArray,
    form: CurveForm = CurveForm.INVERSE,
    weight: FloatArray | None = None,
) -> LossCurve:
    """`fit_many` for one history."""
    return fit_many([np.asarray(steps, np.float64)], [np.asarray(loss, np.float64)], form,
                    None if weight is None else [np.asarray(weight, np.float64)])[0]


def recency_weights(count: int, decay: float) -> FloatArray:
    """Weight decay^(points after it) per point: the latest point weighs 1 (SLAQ's emphasis on
    recent iterations); decay = 1 weighs all points equally."""
    return np.asarray(decay ** np.arange(count - 1, -1, -1, dtype=np.float64), np.float64)


def best_fits(
    steps: Sequence[FloatArray], loss: Sequence[FloatArray],
    weight: Sequence[FloatArray] | None = None,
) -> list[LossCurve]:
    """Per history, the better (lower weighted residual) of the inverse and exponential fits;
    the inverse form on ties."""
    inverse = fit_many(steps, loss, CurveForm.INVERSE, weight)
    exponential = fit_many(steps, loss, CurveForm.EXPONENTIAL, weight)
    return [e if e.residual < i.residual else i for i, e in zip(inverse, exponential,
                                                                strict=True)]


def best_fit(steps: FloatArray, loss: FloatArray, weight: FloatArray | None = None) -> LossCurve:
    """`best_fits` for one history."""
    return best_fits([steps], [loss], None if weight is None else [weight])[0]
