"""Independent reference formulations of Gavel's LP family (A2.5-A2.8, docs/policies/gavel.md).

Written directly from the document with plain cvxpy on dense (m, n) variables, without any
code of `apportion.formulations`: B1-B3 plus the B4 mask, the objectives as the document
states them (finish-time fairness with `inv_pos` per job, as Gavel writes it), and
scipy's HiGHS for the feasibility LP used as the finish-time-fairness certificate.
"""

from __future__ import annotations

from dataclasses import dataclass

import cvxpy as cp
import numpy as np
from numpy.typing import NDArray
from scipy.optimize import linprog

Array = NDArray[np.float64]


@dataclass(frozen=True)
class Inst:
    """T (m, n) steps/s, s (m,), W (n,), optional R (m,) steps, t (m,) s, C (m,) s, w (m,)."""

    T: Array
    s: Array
    W: Array
    R: Array
    t: Array
    C: Array
    w: Array

    @property
    def allowed(self) -> NDArray[np.bool_]:
        return (self.T > 0) & (self.s[:, None] <= self.W[None, :])


def _base(inst: Inst, X: cp.Variable) -> list[cp.Constraint]:
    cons = [X >= 0, cp.sum(X, axis=1) <= 1, inst.s @ X <= inst.W]
    blocked = ~inst.allowed
    if blocked.any():
        cons.append(cp.multiply(blocked.astype(float), X) == 0)
    return cons


def _solve(prob: cp.Problem) -> float:
    prob.solve(solver=cp.CLARABEL)
    assert prob.status == cp.OPTIMAL, prob.status
    return float(prob.value)


def max_sum(inst: Inst, mult: Array | None = None) -> float:
    """max sum_ij mult_i T[i,j] X[i,j]."""
    m, n = inst.T.shape
    mult = np.ones(m) if mult is None else mult
    X = cp.Variable((m, n))
    obj = cp.sum(cp.multiply(mult[:, None] * inst.T, X))
    return _solve(cp.Problem(cp.Maximize(obj), _base(inst, X)))


def cost_lexicographic(inst: Inst, cost: Array, q: Array | None) -> tuple[float, float]:
    """(min total shortfall, then max sum T/cost X with that shortfall); q (m,) NaN = no SLO.
    Costs must be > 0 here."""
    m, n = inst.T.shape
    X = cp.Variable((m, n))
    cons = _base(inst, X)
    thr = cp.sum(cp.multiply(inst.T, X), axis=1)
    short = 0.0
    if q is not None and np.any(~np.isnan(q)):
        idx = np.flatnonzero(~np.isnan(q))
        e = cp.Variable(idx.size)
        cons += [e >= 0, e <= 1, thr[idx] / q[idx] + e >= 1]
        short = _solve(cp.Problem(cp.Minimize(cp.sum(e)), cons))
        cons.append(cp.sum(e) <= short * (1 + 1e-7) + 1e-9)
    value = _solve(cp.Problem(cp.Maximize(cp.sum(cp.multiply(inst.T / cost[None, :], X))), cons))
    return short, value


def makespan(inst: Inst) -> float:
    """min makespan = 1 / max z s.t. thr_i >= R_i z (jobs with R > 0)."""
    m, n = inst.T.shape
    X = cp.Variable((m, n))
    z = cp.Variable()
    act = inst.R > 0
    thr = cp.sum(cp.multiply(inst.T, X), axis=1)
    cons = [*_base(inst, X), thr[np.flatnonzero(act)] >= cp.multiply(inst.R[act], z)]
    return 1.0 / _solve(cp.Problem(cp.Maximize(z), cons))


def isolated(inst: Inst) -> Array:
    """iso_i, Gavel's formula over the jobs given."""
    m = inst.T.shape[0]
    share = (inst.W[None, :] / m) / inst.s[:, None]
    share = share / np.maximum(1.0, share.sum(axis=1, keepdims=True))
    return np.asarray((inst.T * share).sum(axis=1))


def ftf_inv_pos(inst: Inst) -> float:
    """Gavel's convex form: min max_i w_i (t_i + R_i inv_pos(thr_i)) / D_i (all R_i > 0)."""
    m, n = inst.T.shape
    iso = isolated(inst)
    D = (inst.C + inst.R / iso) / inst.w
    X = cp.Variable((m, n))
    thr = cp.sum(cp.multiply(inst.T, X), axis=1)
    terms = [(inst.t[i] + inst.R[i] * cp.inv_pos(thr[i])) / D[i] for i in range(m)]
    prob = cp.Problem(cp.Minimize(cp.max(cp.hstack(terms))), _base(inst, X))
    prob.solve(solver=cp.CLARABEL)
    assert prob.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE), prob.status
    return float(prob.value)


def ftf_level_feasible(inst: Inst, level: float) -> bool:
    """Is there X with rho_i(X) <= level for all i? LP thr_i(X) >= R_i/(level D_i - t_i) with
    scipy's HiGHS (False when some level D_i <= t_i)."""
    m, n = inst.T.shape
    iso = isolated(inst)
    D = (inst.C + inst.R / iso) / inst.w
    denom = level * D - inst.t
    if np.any(denom <= 0):
        return False
    need = inst.R / denom
    k = m * n
    a_ub = []
    b_ub = []
    for i in range(m):
        row = np.zeros(k)
        row[i * n : (i + 1) * n] = -inst.T[i] / need[i]  # row scaled to O(1)
        a_ub.append(row)
        b_ub.append(-1.0)
        row = np.zeros(k)
        row[i * n : (i + 1) * n] = 1
        a_ub.append(row)
        b_ub.append(1.0)
    for j in range(n):
        row = np.zeros(k)
        row[j::n] = inst.s
        a_ub.append(row)
        b_ub.append(inst.W[j])
    bounds = [(0, None if inst.allowed.reshape(-1)[c] else 0) for c in range(k)]
    res = linprog(
        np.zeros(k), A_ub=np.array(a_ub), b_ub=np.array(b_ub), bounds=bounds, method="highs"
    )
    return bool(res.status == 0)
