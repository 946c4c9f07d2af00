"""Independent reference for water filling with tenants (A2.4, docs/policies/gavel.md).

Written from the design document's pseudo-code only, sharing no code with
`apportion.formulations`:

* `dense_model` states the feasible set as plain dense arrays: one variable per (job, type)
  cell and, with `pairs`, per (listed pair, type) cell (A2.2 verbatim: no grouping, no
  pruning), with u_i = thr_i / prop_i per variable, the budget and capacity rows and the
  blocked cells (A1.2 B4; compat gavel keeps cells with s_i > W[j]);
* `tenant_weights` computes the effective weights of A2.4 with loops over the tenants;
* `water_filling` runs "our exact algorithm": per round one LP (scipy's HiGHS) for t*, then,
  instead of duals, one LP per active job: it freezes exactly when it cannot rise while every
  other active job keeps r_k + t* weight_k / s_k (which is the set of rows with a positive
  dual in some optimal dual, by strict complementarity);
* `gavel_water_filling` runs Gavel's algorithm as A2.4 writes it: the LP with big-M terms,
  then the MILP test with 1.0001 / 1e-5 (scipy's HiGHS MILP); an infeasible MILP freezes every
  active job, as Gavel's exception path does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from apportion.solver.model import Problem, TenantSharing

Array = NDArray[np.float64]
Mask = NDArray[np.bool_]

FLOOR = 1e-9
"""Absolute relaxation of the running values imposed in the reference LPs."""
BLOCKED = 1e-7
"""A job whose best rise is below this (relative to max(1, its value)) cannot rise."""


@dataclass(frozen=True)
class DenseModel:
    """u = U @ v for variables v >= 0 with v <= upper, budget/capacity rows A @ v <= b."""

    U: Array
    A: Array
    b: Array
    upper: Array
    s: Array


def dense_model(problem: Problem, pairs: bool = False, gavel: bool = False) -> DenseModel:
    jobs = problem.jobs
    T = jobs.throughput
    W = problem.cluster.count.astype(float)
    s = jobs.scale_factor.astype(float)
    m, n = T.shape
    prop = (T * W[None, :]).sum(axis=1) / W.sum()
    allowed = T > 0
    if not gavel:
        allowed &= s[:, None] <= W[None, :]
    columns: list[tuple[Array, Array, int, float, bool]] = []  # u, budget use, type, devices, ok
    for i in range(m):
        for j in range(n):
            u = np.zeros(m)
            u[i] = T[i, j] / prop[i]
            use = np.zeros(m)
            use[i] = 1.0
            columns.append((u, use, j, s[i], bool(allowed[i, j])))
    coloc = problem.colocations
    if pairs and coloc is not None:
        for p in range(coloc.job_a.size):  # a pair holds its s devices once
            a, b = int(coloc.job_a[p]), int(coloc.job_b[p])
            for j in range(n):
                u = np.zeros(m)
                u[a] = coloc.throughput_a[p, j] / prop[a]
                u[b] = coloc.throughput_b[p, j] / prop[b]
                use = np.zeros(m)
                use[a] = use[b] = 1.0
                columns.append((u, use, j, s[a], bool(allowed[a, j] and allowed[b, j])))
    U = np.column_stack([c[0] for c in columns])
    budget = np.column_stack([c[1] for c in columns])
    devices = np.zeros((n, len(columns)))
    for col, (_, _, j, d, _) in enumerate(columns):
        devices[j, col] = d
    upper = np.array([np.inf if c[4] else 0.0 for c in columns])
    A = np.vstack([budget, devices])
    b = np.concatenate([np.ones(m), W])
    return DenseModel(U, A, b, upper, s)


def tenant_weights(problem: Problem, frozen: Mask) -> Array:
    """weight_i of A2.4 for the next round; 0 for frozen jobs."""
    jobs = problem.jobs
    spec = {t.name: t for t in problem.tenants}
    weight = np.zeros(jobs.num_jobs)
    members: dict[str, list[int]] = {}
    for i in range(jobs.num_jobs):
        if frozen[i]:
            continue
        if not jobs.tenant[i]:
            weight[i] = jobs.priority_weight[i]
        else:
            members.setdefault(jobs.tenant[i], []).append(i)
    for name, live in members.items():
        tenant_weight = spec[name].weight if name in spec else 1.0
        fifo = name in spec and spec[name].sharing is TenantSharing.FIFO
        if fifo:
            oldest = min(live, key=lambda i: (jobs.arrival_time_s[i], jobs.ids[i]))
            weight[oldest] = tenant_weight
        else:
            total = sum(jobs.priority_weight[i] for i in live)
            for i in live:
                weight[i] = tenant_weight * jobs.priority_weight[i] / total
    return weight


@dataclass
class Outcome:
    value: Array
    """Frozen (or running) value of every job, u units."""
    frozen: Mask
    rounds: list[tuple[float, list[int], Array]] = field(default_factory=list)
    """(rise t*, jobs frozen, running values after the round)."""
    first_level: float = 0.0


def max_rise(model: DenseModel, rate: Array, lower: Array, cap: float | None = None
           ) -> tuple[float, Array]:
    """max t s.t. u >= lower + t rate, base rows; returns (t*, v)."""
    V = model.U.shape[1]
    # variables [v, t]
    A_ub = [np.hstack([model.A, np.zeros((model.A.shape[0], 1))]),
            np.hstack([-model.U, rate[:, None]])]
    b_ub = [model.b, -lower]
    if cap is not None:
        A_ub.append(np.concatenate([np.zeros(V), [1.0]])[None, :])
        b_ub.append(np.array([cap]))
    c = np.zeros(V + 1)
    c[-1] = -1.0
    bounds = [(0, u if np.isfinite(u) else None) for u in model.upper] + [(None, None)]
    res = linprog(c, A_ub=np.vstack(A_ub), b_ub=np.concatenate(b_ub), bounds=bounds,
                  method="highs")
    assert res.status == 0, res.message
    return float(res.x[-1]), res.x[:V]


def _max_u(model: DenseModel, i: int, lower: Array) -> float:
    """max u_i s.t. u >= lower, base rows."""
    V = model.U.shape[1]
    bounds = [(0, u if np.isfinite(u) else None) for u in model.upper]
    res = linprog(-model.U[i], A_ub=np.vstack([model.A, -model.U]),
                  b_ub=np.concatenate([model.b, -lower]), bounds=bounds, method="highs")
    assert res.status == 0, res.message
    return float(-res.fun) if V else 0.0


def water_filling(problem: Problem, model: DenseModel) -> Outcome:
    """A2.4 "Our exact algorithm", freezing by per-job rise tests."""
    m = problem.jobs.num_jobs
    frozen = np.zeros(m, dtype=bool)
    value = np.zeros(m)
    out = Outcome(value, frozen)
    while True:
        weight = tenant_weights(problem, frozen)
        active = ~frozen & (weight > 0)
        if not active.any():
            break
        rate = np.where(active, weight / model.s, 0.0)
        t, _ = max_rise(model, rate, value - FLOOR)
        t = max(t, 0.0)
        if not out.rounds:
            out.first_level = t
        value = value + t * rate
        newly = []
        for i in np.flatnonzero(active):
            others = value - FLOOR
            best = _max_u(model, int(i), others)
            if best <= value[i] + BLOCKED * max(1.0, value[i]):
                newly.append(int(i))
        if not newly:  # cannot happen in exact arithmetic; keep the loop finite
            newly = [int(np.flatnonzero(active)[0])]
        frozen = frozen.copy()
        frozen[newly] = True
        out.rounds.append((t, newly, value.copy()))
    out.value, out.frozen = value, frozen
    return out


def gavel_water_filling(problem: Problem, model: DenseModel) -> Outcome:
    """Gavel's algorithm (A2.4, compat-gavel): LP with big-M terms, then the MILP test."""
    m, V = model.U.shape
    big_m = float(np.max(model.U * model.s[:, None]))
    frozen = np.zeros(m, dtype=bool)
    value = np.zeros(m)
    out = Outcome(value, frozen)
    while not frozen.all():
        weight = tenant_weights(problem, frozen)
        active = ~frozen & (weight > 0)
        if not active.any():
            break
        rate = np.where(active, weight / model.s, 0.0)
        # min over i of p_i s_i (u_i - r_i) + A_i: the frozen / weight-0 terms are M
        cap = big_m if (~active).any() else None
        c, _ = max_rise(model, rate, value - FLOOR, cap)
        if not out.rounds:
            out.first_level = c
        value = value + c * rate
        # MILP: variables [v, z]
        z_fixed = ~active
        eye = np.eye(m)
        rows = [
            (np.hstack([model.U, -big_m * eye]), -np.inf, 1.0001 * value - 1e-5),
            (np.hstack([-model.U, big_m * eye]), -np.inf, big_m - 1.0001 * value),
            (np.hstack([-model.U, np.zeros((m, m))]), -np.inf, -(value - FLOOR)),
            (np.hstack([model.A, np.zeros((model.A.shape[0], m))]), -np.inf, model.b),
        ]
        constraints = [LinearConstraint(sp.csr_matrix(a), lo, hi) for a, lo, hi in rows]
        upper = np.concatenate([model.upper, np.where(z_fixed, 0.0, 1.0)])
        res = milp(np.concatenate([np.zeros(V), -np.ones(m)]), constraints=constraints,
                   integrality=np.concatenate([np.zeros(V), np.ones(m)]),
                   bounds=Bounds(np.zeros(V + m), upper))
        if res.status == 0:
            can_rise = np.round(res.x[V:]) > 0
        else:  # Gavel: the MILP raises, z is taken as all zeros
            assert res.status == 2, res.message  # infeasible
            can_rise = np.zeros(m, dtype=bool)
        newly = np.flatnonzero(active & ~can_rise).tolist()
        out.rounds.append((c, newly, value.copy()))
        if not newly:
            break
        frozen = frozen.copy()
        frozen[newly] = True
    out.value, out.frozen = value, frozen
    return out
