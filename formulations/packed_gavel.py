"""Space sharing for Gavel's LP family (A2.2, docs/policies/gavel.md): the `_packed`
variants of minimum makespan (A2.8), finish-time fairness (A2.5) and max-sum-throughput
(A2.6), over the group formulation of `apportion.formulations.space_sharing`.

Each job's throughput becomes thr_i = sum over its singles and pairs of (throughput in that
combination) x (time in it); a pair holds its s GPUs once and its time counts against both
jobs' budgets. Pairs on a type where time-slicing the two jobs dominates are pruned (A2.2 test
4: exact for every objective that is non-decreasing in per-job throughput, which all three are).

Groups (why the group LP is exact here). Jobs are grouped as in `space_sharing.make_groups`,
with the policy's per-job data added to the key (remaining steps; for finish-time fairness
also t_i and D_i), so the jobs of a group are interchangeable in the per-job LP: its
objective is concave (linear or a min of linear terms) and invariant under permuting them,
so averaging an optimum over those permutations is optimal and symmetric (A2.3 test 2).

Rate classes (`level_cells`). Makespan and finish-time fairness give almost every job its own
demand (remaining work, arrival), so the groups above are single jobs and the LP has a
partner cell per job, partner class and type (130k columns at 2,048 jobs). When the groups
without the demand (rate classes) are at most half as many, the level LP is solved by
`rate_classes` instead: one column per class and cell, polymatroid cuts for the demands
(exact; see that module). Clarabel, when asked for, keeps the job-level LP.

* makespan: the z-LP max z s.t. thr_i >= R_i z, i.e. the level LP with level_i = thr_i / R_i
  (jobs with no remaining work get no level row and no time); makespan = 1/z*, bound = 1/(dual
  bound on z*).
* finish-time fairness: the bracket of `gavel_lp.solve_finish_time_fairness` with the packed
  z-LP at each level rho (level_i = thr_i / b_i(rho)). A group dual y_g of the level row is the
  multiplier y_g / b_g of the row b_g z - thr_g <= 0 (on rate classes, the cut duals give
  y_i directly), so `gavel_lp.infeasible_below` turns it into a proven lower bound on rho*
  exactly as in the unpacked case.
* max-sum-throughput: one LP, maximize sum_g k_g mult_g thr_g; bound by the Lagrangian of the
  solver's duals (every single time share <= 1, every pair-group total <= k_g / (1 or 2)).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp

from apportion.formulations.gavel_lp import (
    BracketStep,
    close_bracket,
    ftf_data,
    ftf_state,
    make_cells,
    max_sum_weights,
    no_work_certificate,
    policy_throughput,
    repair,
    rho,
    rhs_at,
    thrmax,
)
from apportion.formulations.normalizers import isolated_share
from apportion.formulations.rate_classes import DemandLP, DemandSolution
from apportion.formulations.space_sharing import (
    Groups,
    JobPlan,
    PackedLP,
    build_cells,
    lagrangian_bound,
    level_entries,
    make_groups,
    plan_of,
    realize,
    resource_entries,
    scaled,
    solve_level_lp,
    split_raw,
)
from apportion.solver.backends.lp import solve_lp
from apportion.solver.backends.status import SolverStatus
from apportion.solver.certificate import termination
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, FloatArray, Problem, SolveOptions, SolverPreference
from apportion.solver.parameters import (
    FinishTimeFairnessParameters,
    MaxSumThroughputParameters,
    MinMakespanParameters,
    ThroughputNormalization,
)
from apportion.solver.result import (
    Certificate,
    JobStatus,
    ModelSize,
    Plan,
    ShareSection,
    relative_gap,
)


@dataclass(frozen=True)
class PackedCells:
    """Groups and the unit-scale cells (levels = throughput in policy units); `by_rate`:
    the groups are rate classes (the demand left out of the key), for `rate_classes`."""

    groups: Groups
    base: PackedLP
    T: FloatArray
    by_rate: bool = False


def packed_cells(problem: Problem, reference_type: str, compat: Compat,
                 active: np.ndarray, extra_key: FloatArray | None,
                 groups: Groups | None = None) -> PackedCells:
    """Cells usable under A1.2 B4 for the active jobs, grouped with `extra_key` (or by
    `groups`)."""
    T = policy_throughput(problem, reference_type)
    cells = make_cells(problem, T, compat, active)
    thr = np.zeros_like(T)
    thr[cells.rows, cells.cols] = T[cells.rows, cells.cols]
    groups = groups if groups is not None else make_groups(problem, extra_key)
    return PackedCells(groups, build_cells(problem, groups, thr), T)


def level_cells(problem: Problem, reference_type: str, compat: Compat, active: np.ndarray,
                demand_key: FloatArray, options: SolveOptions) -> PackedCells:
    """Cells for a level LP whose jobs differ in demand (`demand_key`, (m, k)): rate classes
    (`rate_classes`, HiGHS) when they are at most half as many as the groups with the demand
    in the key, otherwise those groups (one job-level LP)."""
    flag = active[:, None].astype(np.float64)
    fine = make_groups(problem, np.column_stack([flag, demand_key]))
    if options.solver is not SolverPreference.CLARABEL:
        coarse = make_groups(problem, flag)
        if 2 * coarse.size.size <= fine.size.size:
            return replace(packed_cells(problem, reference_type, compat, active, None, coarse),
                           by_rate=True)
    return packed_cells(problem, reference_type, compat, active, None, fine)


class LevelSolver:
    """Level LPs max t s.t. thr_i >= demand_i t over `cells`, one demand vector after
    another; on rate classes the master and its cuts carry over between calls."""

    def __init__(self, problem: Problem, cells: PackedCells, options: SolveOptions) -> None:
        self.problem = problem
        self.cells = cells
        self.options = options
        self.demand_lp: DemandLP | None = None

    def solve(self, demand: FloatArray, deadline: Deadline) -> DemandSolution:
        """The level LP for `demand` (m,) (> 0 on the jobs with a level row, finite), as
        `rate_classes.DemandSolution` by either route."""
        problem, cells, options = self.problem, self.cells, self.options
        m, n = problem.jobs.num_jobs, problem.cluster.num_types
        rep = cells.groups.rep
        rows = demand[rep] > 0
        if cells.by_rate:
            if not np.isfinite(demand).all():
                raise ValueError("level LP demands must be finite")
            if self.demand_lp is None:
                every = replace(cells.base, level_rows=np.ones(rep.size, dtype=bool))
                self.demand_lp = DemandLP(problem, cells.groups, every, options.threads)
            return self.demand_lp.solve(demand, deadline)
        scale = np.divide(1.0, demand[rep], out=np.zeros(rep.size), where=rows)
        solver, method = _packed_solver(options)
        level = solve_level_lp(scaled(cells.base, scale, rows), solver, deadline,
                               options.threads, method)
        plan, thr = realize(problem, cells.groups, cells.base, level.raw)
        served = demand > 0
        t = float(np.min(thr[served] / demand[served])) if served.any() else 0.0
        y, pi = np.zeros(m), np.zeros(n)
        if level.dual is not None:
            # the group's row t <= thr_g / d_g, as the representative's row d t - thr <= 0
            y[rep[rows]] = level.dual.y[rows] / demand[rep[rows]]
            pi = level.dual.pi
        return DemandSolution(level.status, plan, thr, t, level.bound, y, pi, level.result,
                              level.size, rounds=1, decode_cuts=0)


def _status(active: np.ndarray) -> tuple[tuple[JobStatus, ...], tuple[str, ...]]:
    status = tuple(JobStatus.ALLOCATED if a else JobStatus.FINISHED for a in active)
    reason = tuple("" if a else "no remaining work" for a in active)
    return status, reason


def _packed_plan(problem: Problem, plan: JobPlan, normalized: FloatArray,
                 objective_value: FloatArray, prices: FloatArray, cert: Certificate,
                 active: np.ndarray, state: ShareSection | None = None) -> Plan:
    status, reason = _status(active)
    return plan_of(plan, problem, state, normalized_throughput=normalized,
                   objective_value=objective_value, job_dual=np.zeros(active.size),
                   accelerator_prices=prices, certificate=cert, job_status=status,
                   job_reason=reason)


def _no_pairs(single: FloatArray) -> JobPlan:
    none_i, none_f = np.zeros(0, np.int64), np.zeros(0)
    return JobPlan(single, none_i, none_i, none_i, none_f, none_f, none_f, none_f, none_f)


def _no_work(problem: Problem, maximize: bool, formulation: str, active: np.ndarray,
             state: ShareSection) -> Plan:
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    cert = no_work_certificate(maximize, formulation)
    return _packed_plan(problem, _no_pairs(np.zeros((m, n))), np.zeros(m), np.zeros(m),
                        np.zeros(n), cert, active, state)


def _packed_solver(options: SolveOptions) -> tuple[SolverPreference, str]:
    """(solver, HiGHS method): Clarabel when asked for; HiGHS simplex when HiGHS is asked for;
    otherwise HiGHS's interior point with crossover (a vertex, exact duals), which on the
    partner-cell LPs (a few dense capacity rows) is about 4x faster than simplex and 7x than
    Clarabel at 512 jobs (measured with benchmarks/space_sharing.py, 2026-11-30)."""
    if options.solver is SolverPreference.CLARABEL:
        return SolverPreference.CLARABEL, "simplex"
    if options.solver is SolverPreference.HIGHS:
        return SolverPreference.HIGHS, "simplex"
    return SolverPreference.HIGHS, "ipm"


def _cells_text(cells: PackedCells) -> str:
    _, npc, nq, _ = cells.base.sizes
    kind = "rate classes with polymatroid cuts" if cells.by_rate else "groups"
    return (f"{cells.groups.size.size} {kind}, {npc} pair cells and {nq} partner cells after "
            "pruning")


def solve_min_makespan_packed(
    problem: Problem,
    parameters: MinMakespanParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Minimum makespan with space sharing (module docstring). Objective: the makespan (s)."""
    started = time.perf_counter()
    R = np.maximum(problem.jobs.remaining_steps, 0.0)
    active = R > 0
    formulation = "min makespan with space sharing (A2.8 over A2.2/A2.3 groups)"
    if not active.any():
        return _no_work(problem, False, formulation, active, ShareSection(remaining_steps=R))
    cells = level_cells(problem, parameters.reference_type, compat, active, R[:, None],
                        options)
    # demands R_i z_cap: the LP is homogeneous, and with z_cap >= z* (each job's best rate
    # over its work) the optimum t = z / z_cap is O(1), which solver tolerances need
    cap = _throughput_cap(problem, cells, compat, active)
    z_cap = float(np.min(cap[active] / R[active]))
    build = time.perf_counter() - started
    sol = LevelSolver(problem, cells, options).solve(np.where(active, R * z_cap, 0.0),
                                                     deadline)
    thr = sol.thr
    finish = np.divide(R, thr, out=np.where(active, np.inf, 0.0), where=thr > 0)
    makespan = float(np.max(finish[active]))
    bound = 1.0 / (sol.bound * z_cap) if sol.bound and sol.bound > 0 else math.inf
    finite = math.isfinite(makespan)
    gap = relative_gap(makespan, bound) if finite and math.isfinite(bound) else None
    # the repaired plan is feasible whenever it finishes every job
    ended = termination(sol.status, finite, gap, options.relative_gap)
    cert = Certificate(
        termination=ended,
        maximize=False,
        objective=makespan if finite else None,
        bound=bound if math.isfinite(bound) else None,
        solver=sol.result.solver,
        solver_version=sol.result.solver_version,
        formulation=f"{formulation}: {_cells_text(cells)}",
        build_time_s=build,
        solve_time_s=sol.result.solve_time_s,
        model_size=sol.size,
        detail=sol.result.detail,
    )
    rate = np.divide(thr, R, out=np.zeros(R.size), where=active)
    return _packed_plan(problem, sol.plan, rate, finish, sol.pi, cert, active,
                        ShareSection(remaining_steps=R))


def _isolated_plan(problem: Problem, cells: PackedCells, compat: Compat,
                   active: np.ndarray) -> tuple[JobPlan, FloatArray]:
    """The isolated plan (no pairs), repaired onto the usable cells, and its policy
    throughput (m,). Feasible, so it starts the finish-time-fairness bracket."""
    gavel_cells = make_cells(problem, cells.T, compat, active)
    share = isolated_share(gavel_cells.s, gavel_cells.W, int(active.sum()))
    X, _ = repair(gavel_cells, np.where(active[:, None], share, 0.0))
    return _no_pairs(X), np.einsum("ij,ij->i", cells.T, X)


def _throughput_cap(problem: Problem, cells: PackedCells, compat: Compat,
                    active: np.ndarray) -> FloatArray:
    """(m,) an upper bound on thr_i: thrmax_i alone (A2.5) or all its time in its best pair."""
    cap = thrmax(make_cells(problem, cells.T, compat, active))
    base = cells.base
    best = np.zeros(base.k.size)
    np.maximum.at(best, base.pair_g, base.level_pair_g)
    np.maximum.at(best, base.pair_h, base.level_pair_h)
    np.maximum.at(best, base.qg, base.level_q)
    return np.asarray(np.maximum(cap, best[cells.groups.group]), dtype=np.float64)


def solve_finish_time_fairness_packed(
    problem: Problem,
    parameters: FinishTimeFairnessParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Finish-time fairness with space sharing (module docstring): min max_i w_i rho_i(X);
    objective = the best rho found (hi), bound = the proven lower bound (lo)."""
    started = time.perf_counter()
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    T = policy_throughput(problem, parameters.reference_type)
    data = ftf_data(problem, T, compat)
    active = data.active
    state = ftf_state(data)
    formulation = "finish-time fairness with space sharing: packed z-LPs with dual bounds"
    if not active.any():
        return _no_work(problem, False, formulation, active, state)
    key = np.column_stack([data.t, data.R, data.D])
    cells = level_cells(problem, parameters.reference_type, compat, active, key, options)
    cap = _throughput_cap(problem, cells, compat, active)
    lo = float(np.max((data.t[active] + data.R[active] / cap[active]) / data.D[active]))
    best, thr_best = _isolated_plan(problem, cells, compat, active)
    hi = float(np.max(rho(data, thr_best)))
    build = time.perf_counter() - started
    levels = LevelSolver(problem, cells, options)

    def step_at(level: float) -> BracketStep:
        demand = np.where(active, rhs_at(data, level), 0.0)
        sol = levels.solve(demand, deadline)
        if sol.bound is None:
            failed = (replace(sol.result, status=SolverStatus.ERROR) if sol.status.solved
                      else sol.result)
            return BracketStep(failed, sol.size, sol.plan, sol.thr, 0.0, sol.y, 0.0,
                               np.zeros(n))
        return BracketStep(sol.result, sol.size, sol.plan, sol.thr, 0.0, sol.y, sol.bound,
                           sol.pi)

    bracket = close_bracket(data, lo, hi, step_at, options, deadline)
    if bracket.best is not None:
        assert isinstance(bracket.best.plan, JobPlan)
        best, thr_best = bracket.best.plan, bracket.best.thr
    last = bracket.last
    cert = Certificate(
        termination=bracket.termination,
        maximize=False,
        objective=bracket.hi,
        bound=bracket.lo,
        solver=last.result.solver if last else "closed form",
        solver_version=last.result.solver_version if last else "",
        formulation=f"{formulation} ({bracket.lps} LPs, {_cells_text(cells)})",
        build_time_s=build,
        solve_time_s=bracket.solve_time_s,
        model_size=last.size if last else ModelSize(),
        detail=last.result.detail if last else "bracket closed without an LP",
    )
    prices = bracket.prices if bracket.prices.size else np.zeros(n)
    normalized = np.divide(thr_best, data.iso, out=np.zeros(m), where=data.iso > 0)
    return _packed_plan(problem, best, normalized, rho(data, thr_best), prices, cert, active,
                        state)


def solve_max_sum_throughput_packed(
    problem: Problem,
    parameters: MaxSumThroughputParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Max-sum-throughput with space sharing (module docstring): maximize
    sum_i mult_i thr_i (steps/s, or dimensionless with normalize = prop)."""
    started = time.perf_counter()
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    active = np.ones(m, dtype=bool)
    normalize = ThroughputNormalization.NONE if compat is Compat.GAVEL else parameters.normalize
    T = policy_throughput(problem, parameters.reference_type)
    mult = max_sum_weights(problem, T, normalize)
    cells = packed_cells(problem, parameters.reference_type, compat, active, mult[:, None])
    rep = cells.groups.rep
    # objective: group g's terms weighted by k_g mult_g (a pair cell's two singleton groups
    # each by its own mult); no level rows
    lp = scaled(cells.base, cells.groups.size * mult[rep], np.zeros(rep.size, dtype=bool))
    _, col, val = level_entries(lp)
    obj = np.asarray(np.bincount(col, val, minlength=lp.num_vars), dtype=np.float64)
    rows, cols, vals, b, equalities = resource_entries(lp, 0)
    matrix = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                           shape=(b.size, lp.num_vars))
    build = time.perf_counter() - started
    solver, method = _packed_solver(options)
    result = solve_lp(obj, matrix, b, solver, deadline, options.threads,
                      equalities=equalities, highs_method=method)
    plan, thr = realize(problem, cells.groups, cells.base, split_raw(lp, result.x))
    per_job = mult * thr
    objective = float(per_job.sum())
    bound, lam = lagrangian_bound(lp, matrix, b, obj, result.row_dual, 0, equalities)
    gap = relative_gap(objective, bound) if result.has_solution else None
    cert = Certificate(
        termination=termination(result.status, result.has_solution, gap, options.relative_gap),
        maximize=True,
        objective=objective if result.has_solution else None,
        bound=bound if result.has_solution else None,
        solver=result.solver,
        solver_version=result.solver_version,
        formulation=(f"max-sum-throughput with space sharing (normalize={normalize.value}): "
                     f"{_cells_text(cells)}"),
        build_time_s=build,
        solve_time_s=result.solve_time_s,
        model_size=ModelSize(matrix.shape[1], matrix.shape[0], int(matrix.nnz)),
        detail=result.detail,
    )
    return _packed_plan(problem, plan, per_job, per_job, lam[:n], cert, active)
