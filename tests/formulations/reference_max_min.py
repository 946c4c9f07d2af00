"""Independent reference for weighted max-min fairness (A2.1, docs/policies/gavel.md).

Written from the design document only, not from `apportion.formulations`:

* `coefficients` builds prop_i and a[i,j] (A1.3, A2.1) and the allowed cells (A1.2 B4);
* `reference_optimum` states the LP in plain cvxpy (one variable per cell, blocked cells
  fixed to 0 by an equality) and solves it with Clarabel (falling back to ECOS);
* `brute_force_optimum` enumerates every basic solution of the LP in (X, t) space with numpy
  (A2.1 "How to prove it" item 11) for tiny instances;
* `dual_objective` evaluates the A2.1 dual at given multipliers (y, pi) with the smallest
  feasible sigma, i.e. a proven upper bound on t*.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import cvxpy as cp
import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]
Mask = NDArray[np.bool_]


@dataclass(frozen=True)
class Instance:
    """Raw inputs (A1.1): T (m, n) steps/s (0 = cannot run), W (n,) devices per type,
    s (m,) scale factors, w (m,) priority weights."""

    T: Array
    W: Array
    s: Array
    w: Array

    def __repr__(self) -> str:
        """Exact (round-trip) values, so a falsifying example can be pasted back."""
        return (f"Instance(T=np.array({self.T.tolist()!r}), W=np.array({self.W.tolist()!r}), "
                f"s=np.array({self.s.tolist()!r}), w=np.array({self.w.tolist()!r}))")

    @property
    def m(self) -> int:
        return int(self.T.shape[0])

    @property
    def n(self) -> int:
        return int(self.T.shape[1])


def allowed_cells(inst: Instance) -> Mask:
    """B4: a job may use type j only if T[i,j] > 0 and s_i <= W[j]."""
    return np.asarray((inst.T > 0) & (inst.s[:, None] <= inst.W[None, :]), dtype=np.bool_)


def coefficients(inst: Instance, agnostic: bool = False) -> Array:
    """a[i,j] = s_i T[i,j] / (w_i prop_i) on allowed cells, 0 elsewhere, with
    prop_i = sum_j T[i,j] W[j] / sum_k W[k]. The agnostic variant uses T = 1 where T > 0."""
    thr = (inst.T > 0).astype(np.float64) if agnostic else inst.T.astype(np.float64)
    total = float(inst.W.sum())
    prop = np.array([sum(thr[i, j] * inst.W[j] for j in range(inst.n)) / total
                     for i in range(inst.m)])
    a = np.zeros((inst.m, inst.n))
    ok = allowed_cells(inst)
    for i in range(inst.m):
        for j in range(inst.n):
            if ok[i, j]:
                a[i, j] = inst.s[i] * thr[i, j] / (inst.w[i] * prop[i])
    return a


@dataclass(frozen=True)
class ReferenceSolution:
    t: float
    X: Array
    status: str


def reference_optimum(a: Array, s: Array, W: Array) -> ReferenceSolution:
    """max t s.t. t <= sum_j a X, s @ X <= W, X 1 <= 1, X >= 0, X = 0 where a == 0."""
    m, n = a.shape
    blocked = (a <= 0).astype(np.float64)
    X = cp.Variable((m, n), nonneg=True)
    t = cp.Variable()
    constraints = [
        t <= cp.sum(cp.multiply(a, X), axis=1),
        s @ X <= W,
        cp.sum(X, axis=1) <= 1,
        cp.multiply(blocked, X) == 0,
    ]
    problem = cp.Problem(cp.Maximize(t), constraints)
    try:
        problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    except cp.error.SolverError:
        problem.solve(solver=cp.ECOS, abstol=1e-10, reltol=1e-10, feastol=1e-10)
    if problem.status != cp.OPTIMAL:
        problem.solve(solver=cp.ECOS, abstol=1e-10, reltol=1e-10, feastol=1e-10)
    assert problem.status == cp.OPTIMAL, f"reference LP status {problem.status}"
    return ReferenceSolution(float(t.value), np.asarray(X.value, dtype=np.float64),
                             str(problem.status))


def brute_force_optimum(a: Array, s: Array, W: Array, tol: float = 1e-9) -> float:
    """Largest t over all vertices of {(x, t)}: x = X on allowed cells (a > 0).

    Rows G z <= h: level (t - a x <= 0), capacity (s x <= W), budget (sum x <= 1), x >= 0.
    The polyhedron is pointed (x >= 0 and the level rows pin every direction) and t is bounded
    above, so the maximum of t is attained at a vertex: choose d = dim(z) rows, solve them as
    equalities, keep the feasible solutions."""
    m, n = a.shape
    cells = [(i, j) for i in range(m) for j in range(n) if a[i, j] > 0]
    nv = len(cells)
    d = nv + 1
    rows: list[Array] = []
    rhs: list[float] = []
    for i in range(m):  # level
        g = np.zeros(d)
        g[-1] = 1.0
        for v, (ci, cj) in enumerate(cells):
            if ci == i:
                g[v] = -a[ci, cj]
        rows.append(g)
        rhs.append(0.0)
    for j in range(n):  # capacity
        g = np.zeros(d)
        for v, (ci, cj) in enumerate(cells):
            if cj == j:
                g[v] = s[ci]
        rows.append(g)
        rhs.append(float(W[j]))
    for i in range(m):  # time budget
        g = np.zeros(d)
        for v, (ci, _) in enumerate(cells):
            if ci == i:
                g[v] = 1.0
        rows.append(g)
        rhs.append(1.0)
    for v in range(nv):  # x >= 0
        g = np.zeros(d)
        g[v] = -1.0
        rows.append(g)
        rhs.append(0.0)
    G = np.array(rows)
    h = np.array(rhs)
    subsets = np.array(list(combinations(range(G.shape[0]), d)), dtype=np.int64)
    mats = G[subsets]
    vecs = h[subsets]
    det = np.linalg.det(mats)
    ok = np.abs(det) > 1e-10
    if not ok.any():
        raise AssertionError("no basis found")
    z = np.linalg.solve(mats[ok], vecs[ok][..., None])[..., 0]
    feasible = np.all(z @ G.T <= h[None, :] + tol * np.maximum(1.0, np.abs(h))[None, :], axis=1)
    if not feasible.any():
        raise AssertionError("no feasible vertex found")
    return float(z[feasible, -1].max())


def dual_objective(a: Array, s: Array, W: Array, y: Array, pi: Array) -> tuple[float, Array]:
    """A2.1 dual at (y / sum y, pi) with sigma_i = max(0, max_{j allowed} y_i a_ij - s_i pi_j),
    the smallest sigma making (y, pi, sigma) dual feasible. Returns (objective, sigma).

    Requires y >= 0, pi >= 0, sum y > 0 (checked by the caller)."""
    y = y / y.sum()
    allowed = a > 0
    slack = np.where(allowed, y[:, None] * a - s[:, None] * pi[None, :], 0.0)
    sigma = np.maximum(0.0, slack.max(axis=1))
    return float(W @ pi + sigma.sum()), sigma
