"""Lexicographic (water-filling) max-min fairness with hierarchical tenants, formulations.md A2.4.

Levels. Job i's normalized throughput is u_i(X) = thr_i(X) / prop_i (A1.3) and its level in
an iteration is l_i = s_i u_i / weight_i, where weight_i is the job's effective weight:
* a job without a tenant (`Job.tenant` empty): its priority weight w_i;
* a job of a tenant e in FAIRNESS mode: E_e w_i / (sum of w_k over e's jobs not yet frozen);
* a job of a tenant e in FIFO mode: E_e for the oldest (arrival, then id) job of e not yet
  frozen, 0 for the others (they wait for their turn).
Weights are recomputed after every freeze, as Gavel does (A2.4).

Progressive filling. Each round solves

    LP_k:  maximize t  s.t.  base constraints (A1.2 B1-B4);
                             l_i(X) >= t       for every active job (not frozen, weight > 0);
                             u_i(X) >= f_i     for every frozen job (its frozen value),

then freezes every active job whose level row has a positive dual, at f_i = t* weight_i / s_i.

Why this is exact (no MILP, no big-M, unlike Gavel). By complementary slackness, a row with a
positive multiplier in *some* optimal dual is tight in *every* optimal primal: such a job
cannot be raised above t* without lowering a job that is no better off, so freezing it at t* is
what max-min fairness prescribes. Conversely, when the dual is strictly complementary (the
interior-point method returns the analytic centre of the optimal face, which is), a job with a
zero multiplier has slack in some optimal solution, so it can still rise and must not be
frozen. Every round freezes at least one job (the multipliers of the level rows sum to 1), so
there are at most m rounds; a job wrongly left active is frozen in a later round at the same t.
The freeze levels in order form the leximin certificate, checked in the tests by trying to
raise each job while keeping every job that is no better off at its level.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.formulations.lp import solve_lp
from apportion.formulations.max_min_fairness import certify, level_coefficients
from apportion.formulations.normalizers import repair_time_share
from apportion.solver.deadline import Deadline
from apportion.solver.model import (
    Compat,
    FloatArray,
    Problem,
    SolveOptions,
    SolverPreference,
    TenantSharing,
)
from apportion.solver.parameters import WaterFillingParameters
from apportion.solver.result import Certificate, JobStatus, ModelSize, Plan, Termination

FREEZE_THRESHOLD = 1e-6
"""A level row's dual counts as positive above this fraction of the largest dual."""
FROZEN_SLACK = 1e-7
"""Frozen rows are imposed at (1 - FROZEN_SLACK) of their value: absorbs solver noise and
keeps an interior for the interior-point method (well inside the 1e-6 tolerance)."""


@dataclass(frozen=True)
class FreezeRound:
    """One round of progressive filling: the level reached and the jobs frozen at it."""

    level: float
    jobs: NDArray[np.int64]


def newly_frozen(duals: FloatArray, active: NDArray[np.bool_]) -> NDArray[np.bool_]:
    """The active rows to freeze after a round: level-row duals above FREEZE_THRESHOLD of the
    largest (at least the largest, which exact arithmetic guarantees: the duals sum to 1)."""
    top = duals.max() if duals.size else 0.0
    newly = active & (duals > FREEZE_THRESHOLD * top) if top > 0 else np.zeros(active.size, bool)
    if not newly.any():
        newly = np.zeros(active.size, dtype=bool)
        newly[np.flatnonzero(active)[np.argmax(duals[active])]] = True
    return np.asarray(newly, dtype=bool)


def filling_termination(status: str, rounds: list[FreezeRound]) -> Termination:
    """The certificate's termination after the last LP's `status`."""
    if status == "optimal":
        return Termination.OPTIMAL
    if status == "time_limit":
        return Termination.FEASIBLE if rounds else Termination.NO_SOLUTION
    return Termination.ERROR


def rounds_detail(rounds: list[FreezeRound]) -> str:
    """The first 20 rounds' levels and freeze counts, for `Certificate.detail`."""
    detail = "; ".join(f"round {k + 1}: level {r.level:.9g}, {r.jobs.size} frozen"
                       for k, r in enumerate(rounds[:20]))
    if len(rounds) > 20:
        detail += f"; ... {len(rounds)} rounds in all"
    return detail


def effective_weights(problem: Problem, frozen: NDArray[np.bool_]) -> FloatArray:
    """(m,) weight_i for the next round (module docstring); 0 for frozen jobs."""
    jobs = problem.jobs
    m = jobs.num_jobs
    spec = {tenant.name: tenant for tenant in problem.tenants}
    weight = np.where(frozen, 0.0, jobs.priority_weight)
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(jobs.tenant):
        if name:
            groups.setdefault(name, []).append(i)
    for name, members in groups.items():
        idx = np.array(members)
        live = idx[~frozen[idx]]
        weight[idx] = 0.0
        if live.size == 0:
            continue
        tenant = spec.get(name)
        share = tenant.weight if tenant is not None else 1.0
        if tenant is not None and tenant.sharing is TenantSharing.FIFO:
            oldest = min(live, key=lambda i: (jobs.arrival_time_s[i], jobs.ids[i]))
            weight[oldest] = share
        else:
            w = jobs.priority_weight[live]
            weight[live] = share * w / w.sum()
    assert weight.shape == (m,)
    return weight


def _round_lp(
    u_coef: FloatArray,
    level_scale: FloatArray,
    active: NDArray[np.bool_],
    frozen_value: FloatArray,
    frozen: NDArray[np.bool_],
    s: FloatArray,
    W: FloatArray,
    time_limit_s: float,
    fallback: bool = True,
) -> tuple[str, float, FloatArray, FloatArray, FloatArray, float, tuple[int, int, int]]:
    """LP_k; returns (status, t, X, level-row duals (m,), capacity duals (n,), solve time s,
    (variables, rows, nonzeros))."""
    m, n = u_coef.shape
    ii, jj = np.nonzero(u_coef > 0)
    nv = ii.size
    act = np.nonzero(active)[0]
    frz = np.nonzero(frozen)[0]
    row_of_job = np.full(m, -1)
    row_of_job[act] = np.arange(act.size)
    row_of_job[frz] = act.size + np.arange(frz.size)
    objective_rows = act.size + frz.size
    in_rows = row_of_job[ii] >= 0
    coef = np.where(active[ii], level_scale[ii], 1.0) * u_coef[ii, jj]
    rows = [
        row_of_job[ii][in_rows], objective_rows + jj, objective_rows + n + ii, np.arange(act.size)
    ]
    cols = [np.arange(nv)[in_rows], np.arange(nv), np.arange(nv), np.full(act.size, nv)]
    vals = [-coef[in_rows], s[ii], np.ones(nv), np.ones(act.size)]
    shape = (objective_rows + n + m, nv + 1)
    matrix = sp.csc_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=shape
    )
    b = np.concatenate(
        [np.zeros(act.size), -(1 - FROZEN_SLACK) * frozen_value[frz], W, np.ones(m)]
    )
    c = np.zeros(nv + 1)
    c[nv] = 1.0
    result = solve_lp(c, matrix, b, SolverPreference.CLARABEL, time_limit_s=time_limit_s)
    if fallback and result.status in ("error", "infeasible"):
        # Late rounds are nearly degenerate (many tight frozen rows); simplex copes. Its
        # vertex duals are optimal too, so freezing on them stays exact (it may freeze fewer
        # jobs per round, never a wrong one).
        slow = solve_lp(c, matrix, b, SolverPreference.HIGHS, time_limit_s=time_limit_s)
        result = replace(slow, solve_time_s=slow.solve_time_s + result.solve_time_s)
    X = np.zeros((m, n))
    t = 0.0
    duals = np.zeros(m)
    prices = np.zeros(n)
    if result.x.size:
        X[ii, jj] = np.maximum(result.x[:nv], 0.0)
        t = float(result.x[nv])
        duals[act] = np.maximum(result.row_dual[: act.size], 0.0)
        prices = result.row_dual[objective_rows : objective_rows + n]
    dims = (nv + 1, shape[0], int(matrix.nnz))
    return result.status, t, X, duals, prices, result.solve_time_s, dims


def solve_policy(
    problem: Problem,
    parameters: WaterFillingParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Entry point registered as `hierarchical_max_min_fairness`."""
    params = parameters
    started = time.perf_counter()
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    formulation = "water filling (A2.4), progressive filling with LP duals" + (
        ", heterogeneity-agnostic" if params.heterogeneity_agnostic else ""
    )
    if m == 0:
        cert = Certificate(Termination.OPTIMAL, True, 0.0, 0.0, formulation=formulation,
                           detail="no jobs")
        return Plan.empty(0, n, cert)
    # a with unit weights: a = s * u_coef, so u_coef = T / prop on allowed cells.
    unit = replace(problem, jobs=replace(problem.jobs, priority_weight=np.ones(m)))
    a, _, _ = level_coefficients(unit, params.heterogeneity_agnostic, compat)
    s = problem.jobs.scale_factor.astype(np.float64)
    u_coef = a / s[:, None]
    W = problem.cluster.count.astype(np.float64)
    frozen = np.zeros(m, dtype=bool)
    frozen_value = np.zeros(m)
    job_level = np.zeros(m)
    job_dual = np.zeros(m)
    rounds: list[FreezeRound] = []
    X = np.zeros((m, n))
    solve_time = 0.0
    status = "optimal"
    size = (0, 0, 0)
    # Batch freezing at caps (fixed weights only; module docstring): no job can exceed
    # cap_u = its normalized throughput with all its time on its best type.
    fixed_weights = not any(problem.jobs.tenant)
    cap_u = u_coef.max(axis=1)
    batch = 0
    while not frozen.all():
        weight = effective_weights(problem, frozen)
        active = ~frozen & (weight > 0)
        remaining = 0.0
        if options.time_limit_s > 0:
            remaining = options.time_limit_s - (time.perf_counter() - started)
            if remaining <= 0:
                status = "time_limit"
                break
        level_scale = np.divide(s, weight, out=np.zeros(m), where=weight > 0)
        cap_level = level_scale * cap_u
        take = np.zeros(0, dtype=np.int64)
        if fixed_weights and batch > 0:
            order = np.flatnonzero(active)[np.argsort(cap_level[active], kind="stable")]
            take = order[: min(batch, order.size - 1)]
        while True:
            trial_frozen = frozen.copy()
            trial_frozen[take] = True
            trial_value = frozen_value.copy()
            trial_value[take] = cap_u[take]
            status, t, X_round, duals, prices, seconds, size = _round_lp(
                u_coef, level_scale, active & ~trial_frozen, trial_value, trial_frozen, s, W,
                remaining, fallback=take.size == 0,
            )
            solve_time += seconds
            held = take.size == 0 or (
                status == "optimal" and t >= cap_level[take].max() * (1 - 1e-9)
            )
            if held:
                break
            batch //= 2
            take = take[:batch]
        if status != "optimal":
            break
        X = X_round
        if take.size:  # every job of the batch sits at its cap: freeze it there
            frozen_value[take] = cap_u[take]
            job_level[take] = cap_level[take]
            frozen[take] = True
            rounds.append(FreezeRound(float(cap_level[take].max()), take))
            batch *= 2
        active &= ~frozen
        if not rounds:  # the first round is A2.1's LP: keep what certifies it
            first_scale, first_duals, first_prices = level_scale, duals, prices
        newly = newly_frozen(duals, active)
        frozen_value[newly] = t / level_scale[newly]
        job_level[newly] = t
        job_dual[newly] = duals[newly]
        frozen |= newly
        rounds.append(FreezeRound(t, np.flatnonzero(newly)))
        # A round whose frozen jobs all sit at their caps suggests more will: try a batch.
        at_cap = np.all(np.abs(cap_level[newly] - t) <= 1e-7 * max(t, 1e-12))
        if fixed_weights and at_cap:
            batch = max(batch, 8)
    X = repair_time_share(X, u_coef > 0, s, W)
    normalized = np.einsum("ij,ij->i", u_coef, X)
    violation = max(  # of the returned plan, after the repair
        float(np.max(s @ X - W, initial=0.0)),
        float(np.max(X.sum(axis=1) - 1.0, initial=0.0)),
    )
    termination = filling_termination(status, rounds)
    first_level: float | None = None
    bound: float | None = None
    if rounds:
        # Round 1 is the weighted max-min LP (A2.1): its optimum is the smallest level of
        # the final plan (frozen rows keep it), proven by the repaired dual bound.
        weighted = first_scale[:, None] * u_coef
        levels = np.einsum("ij,ij->i", weighted, X)
        first_level = float(np.min(levels[first_scale > 0]))
        bound = certify(weighted, s, W, X, first_duals, first_prices).bound
    cert = Certificate(
        termination=termination,
        maximize=True,
        objective=first_level,
        bound=bound,
        solver="clarabel",
        formulation=f"{formulation}; {len(rounds)} LP rounds",
        build_time_s=time.perf_counter() - started - solve_time,
        solve_time_s=solve_time,
        model_size=ModelSize(*size, 0),
        max_violation=violation,
        detail=rounds_detail(rounds),
    )
    return Plan(
        time_share=X,
        effective_throughput=np.einsum("ij,ij->i", problem.jobs.throughput, X),
        normalized_throughput=normalized,
        objective_value=job_level,
        job_dual=job_dual,
        accelerator_prices=np.zeros(n),
        certificate=cert,
        job_status=(JobStatus.ALLOCATED,) * m,
        job_reason=("",) * m,
    )
