"""Sia's goodput ILP (A5.3-A5.5, docs/policies/sia.md) on plain arrays: coefficients, the exact
multiple-choice knapsack solved by HiGHS (MIP), its LP relaxation, and CP-SAT as a second solver.

Objective (policy units, dimensionless): F(x) = sum_i sum_c w_i*A[i,c]*x[i,c]
+ lambda_n*(N - sum x). Minimized for p < 0 and maximized for p > 0, subject to at most one
configuration per job and per-type GPU capacity. A = (r * normalized goodput)^p, clipped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.solver.backends.highs import (
    INFINITY,
    HighsSession,
    HighsSettings,
    LinearModel,
    highs_version,
)
from apportion.solver.backends.highs import (
    solve_highs as run_highs,
)
from apportion.solver.backends.highs_startup import MILP, SIMPLEX_LP, can_start
from apportion.solver.backends.ortools import ortools_version
from apportion.solver.backends.ortools import solve_cpsat as run_cpsat
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import FloatArray, IntArray
from apportion.solver.result import ModelSize
from apportion.solver.result import relative_gap as gap_between

BoolArray = NDArray[np.bool_]

ZERO_ALLOC_GAIN = 1e-4
"""Sia's goodput for an invalid configuration (simulator value; compat-sia only)."""


@dataclass(frozen=True)
class SiaInstance:
    """The ILP on arrays: m jobs, C configurations, n types."""

    config_type: IntArray
    """(C,) accelerator type of each configuration."""
    config_devices: IntArray
    """(C,) GPUs of each configuration."""
    capacity: IntArray
    """(n,) GPUs per type."""
    coefficient: FloatArray
    """(m, C) A[i,c] (dimensionless)."""
    allowed: BoolArray
    """(m, C) variables present in the model."""
    weight: FloatArray
    """(m,) w_i > 0."""
    no_allocation_penalty: float
    """lambda_n: objective term per unallocated job."""
    maximize: bool
    """True for p > 0."""
    pinned: IntArray
    """(m,) configuration a job must keep (checkpointing now), -1 = free."""

    @property
    def num_jobs(self) -> int:
        return int(self.coefficient.shape[0])


@dataclass(frozen=True)
class IlpResult:
    status: SolverStatus
    """How the solver ended; a limit with an incumbent has `has_solution`."""
    choice: IntArray
    """(m,) chosen configuration per job, -1 = none."""
    objective: float | None
    """F of `choice`, recomputed from it (None without a solution)."""
    bound: float | None
    """Proven bound on the optimal F (best bound of the solver)."""
    solver: str
    solver_version: str
    solve_time_s: float
    model_size: ModelSize
    detail: str = ""
    fractional: FloatArray | None = None
    """(m, C) the LP relaxation's solution (relaxation only)."""

    @property
    def has_solution(self) -> bool:
        """`choice` is a feasible plan (an optimum, or an incumbent at a limit)."""
        return self.objective is not None


def restart_factor(age_s: FloatArray, restarts: IntArray, delta_s: FloatArray) -> FloatArray:
    """r_i = max(A - Q*delta, 0)/(A + delta), and 1 if A < delta (A5.4; dimensionless)."""
    age = np.asarray(age_s, np.float64)
    delta = np.asarray(delta_s, np.float64)
    q = np.asarray(restarts, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.maximum(age - q * delta, 0.0) / (age + delta)
    return np.asarray(np.where(age < delta, 1.0, np.nan_to_num(r, nan=1.0)))


def normalize_goodput(raw: FloatArray, unit: FloatArray | None = None) -> FloatArray:
    """G[i,c] = raw[i,c] * u* / m_i with m_i the smallest positive entry of row i and u* the
    scale unit of the configuration attaining it (A5.3). Non-positive entries stay 0."""
    raw = np.asarray(raw, np.float64)
    units = np.ones_like(raw) if unit is None else np.asarray(unit, np.float64)
    positive = raw > 0
    masked = np.where(positive, raw, np.inf)
    arg = np.argmin(masked, axis=1)
    rows = np.arange(raw.shape[0])
    low = masked[rows, arg]
    scale = np.where(np.isfinite(low), units[rows, arg] / np.where(np.isfinite(low), low, 1.0), 0)
    return np.asarray(np.where(positive, raw * scale[:, None], 0.0))


def coefficients(
    normalized: FloatArray,
    restart: FloatArray,
    current: IntArray,
    p: float,
    round2: bool = False,
    clip: float = 3000.0,
    zero_alloc_gain: float | None = None,
) -> tuple[FloatArray, BoolArray]:
    """A[i,c] = min(G'[i,c]^p, clip) with G' = r_i*G off the job's current configuration
    (A5.4-A5.5), optionally rounded to 2 decimals (compat-sia). Returns (A, allowed).

    Invalid (zero) entries are not allowed, unless `zero_alloc_gain` is given (compat-sia), in
    which case they get goodput `zero_alloc_gain` and stay in the model as Sia does."""
    g = np.asarray(normalized, np.float64)
    valid = g > 0
    m, c = g.shape
    factor = np.repeat(np.asarray(restart, np.float64)[:, None], c, axis=1)
    running = np.asarray(current) >= 0
    factor[np.nonzero(running)[0], np.asarray(current)[running]] = 1.0
    if zero_alloc_gain is not None:
        g = np.where(g > zero_alloc_gain, g, zero_alloc_gain)
        allowed = np.ones((m, c), dtype=bool)
    else:
        allowed = valid.copy()
    effective = g * factor
    with np.errstate(divide="ignore"):
        powered = np.where(effective > 0, np.power(np.where(effective > 0, effective, 1.0), p), 0)
    if p < 0:
        powered = np.where(effective > 0, powered, np.inf)
    if round2:
        powered = np.round(powered, 2)
    return np.asarray(np.minimum(powered, clip)), allowed


def objective_of(instance: SiaInstance, choice: IntArray) -> float:
    """F(choice) in float64, independently of any solver."""
    chosen = np.asarray(choice) >= 0
    rows = np.nonzero(chosen)[0]
    terms = instance.weight[rows] * instance.coefficient[rows, np.asarray(choice)[rows]]
    unallocated = instance.num_jobs - int(chosen.sum())
    return float(terms.sum() + instance.no_allocation_penalty * unallocated)


def violations_of(instance: SiaInstance, choice: IntArray) -> list[str]:
    """Constraint violations of an integral choice (empty = feasible)."""
    problems: list[str] = []
    choice = np.asarray(choice)
    on = choice >= 0
    pinned = instance.pinned
    rows = np.flatnonzero(on)
    bad_pin = (pinned >= 0) & (~on | (choice != pinned))
    not_allowed = np.zeros(choice.size, bool)
    not_allowed[rows] = ~instance.allowed[rows, choice[rows]]
    for i in np.flatnonzero(not_allowed | bad_pin).tolist():
        if not_allowed[i]:
            problems.append(f"job {i}: configuration {choice[i]} not allowed")
        if bad_pin[i]:
            problems.append(f"job {i} is pinned to configuration {pinned[i]}")
    used = np.bincount(instance.config_type[choice[rows]],
                       weights=instance.config_devices[choice[rows]],
                       minlength=instance.capacity.size).astype(np.int64)
    for t in np.nonzero(used > instance.capacity)[0]:
        problems.append(f"type {t}: {used[t]} GPUs > capacity {instance.capacity[t]}")
    return problems


def _columns(instance: SiaInstance) -> tuple[IntArray, IntArray, FloatArray]:
    """Variables (job, config) and their minimization cost."""
    jobs, confs = np.nonzero(instance.allowed & np.isfinite(instance.coefficient))
    value = instance.weight[jobs] * instance.coefficient[jobs, confs]
    gain = value - instance.no_allocation_penalty
    cost = -gain if instance.maximize else gain
    return jobs.astype(np.int64), confs.astype(np.int64), np.asarray(cost, np.float64)


def _dense_cost(instance: SiaInstance) -> FloatArray:
    """(m, C) the minimization cost of `_columns` in place, inf where there is no variable."""
    on = instance.allowed & np.isfinite(instance.coefficient)
    with np.errstate(invalid="ignore"):
        gain = instance.weight[:, None] * instance.coefficient - instance.no_allocation_penalty
    return np.asarray(np.where(on, -gain if instance.maximize else gain, np.inf))


def _choice_from(
    instance: SiaInstance, jobs: IntArray, confs: IntArray, values: FloatArray
) -> IntArray:
    choice = np.full(instance.num_jobs, -1, np.int64)
    on = values > 0.5
    choice[jobs[on]] = confs[on]
    return choice


def _constant(instance: SiaInstance) -> float:
    return instance.no_allocation_penalty * instance.num_jobs


def solve_highs(
    instance: SiaInstance,
    relax: bool = False,
    deadline: Deadline = NO_DEADLINE,
    relative_gap: float = 1e-4,
    threads: int = 0,
) -> IlpResult:
    """Exact MILP with HiGHS (branch and cut); `relax` solves the LP relaxation instead."""
    m = instance.num_jobs
    n = instance.capacity.size
    size = _model_size(instance)
    if not can_start(deadline, SIMPLEX_LP if relax else MILP, size):
        return IlpResult(SolverStatus.TIME_LIMIT, np.full(m, -1, np.int64), None, None, "highs",
                         highs_version(), 0.0, replace(size, integer_variables=0) if relax
                         else size, "not started: HiGHS could not stop by the deadline")
    jobs, confs, cost = _columns(instance)
    k = jobs.size
    if k == 0 and not (instance.pinned >= 0).any():
        choice = np.full(m, -1, np.int64)
        return IlpResult(
            SolverStatus.OPTIMAL,
            choice,
            objective_of(instance, choice),
            objective_of(instance, choice),
            "highs",
            highs_version(),
            0.0,
            ModelSize(),
            "no allowed configuration",
        )
    rows = np.concatenate([jobs, m + instance.config_type[confs]])
    cols = np.concatenate([np.arange(k), np.arange(k)])
    vals = np.concatenate([np.ones(k), instance.config_devices[confs].astype(np.float64)])
    matrix = sp.csc_matrix((vals, (rows, cols)), shape=(m + n, k))
    lower = np.zeros(k)
    pinned = instance.pinned[jobs]
    lower[(pinned >= 0) & (pinned == confs)] = 1.0
    missing = [
        i
        for i in np.nonzero(instance.pinned >= 0)[0]
        if not ((jobs == i) & (confs == instance.pinned[i])).any()
    ]
    if missing:
        return IlpResult(
            SolverStatus.INFEASIBLE,
            np.full(m, -1, np.int64),
            None,
            None,
            "highs",
            highs_version(),
            0.0,
            ModelSize(k, m + n, int(matrix.nnz), 0 if relax else k),
            f"pinned configuration not allowed for jobs {missing}",
        )
    # The dropped constant lambda_n * N as HiGHS's objective offset, so that its relative MIP
    # gap is measured on the real objective (without it, a large lambda_n, e.g. Pollux's
    # 1e-3^p, made "optimal" answers several % off the real optimum).
    offset = (-1.0 if instance.maximize else 1.0) * _constant(instance)
    model = LinearModel(
        cost=cost,
        matrix=matrix,
        row_lower=np.full(m + n, -INFINITY),
        row_upper=np.concatenate([np.ones(m), instance.capacity.astype(np.float64)]),
        col_lower=lower,
        col_upper=np.ones(k),
        integer=None if relax else np.ones(k, dtype=bool),
        offset=offset,
    )
    # HiGHS's presolve reads no time limit and takes seconds on the relaxation's singleton
    # rows (2.6 s at 32,768 jobs against 0.08 s for the LP without it)
    settings = HighsSettings(mip_rel_gap=float(relative_gap), mip_abs_gap=1e-9, threads=threads,
                             options=(("presolve", "off"),) if relax else ())
    result = run_highs(model, settings, deadline)
    status, text, elapsed = result.status, result.detail, result.solve_time_s
    size = ModelSize(k, m + n, int(matrix.nnz), 0 if relax else k)
    sign = -1.0 if instance.maximize else 1.0
    values = result.x
    has_solution = result.has_solution
    const = _constant(instance)
    if not has_solution:
        return IlpResult(
            status,
            np.full(m, -1, np.int64),
            None,
            None,
            "highs",
            highs_version(),
            elapsed,
            size,
            text,
        )
    if relax:
        frac = np.zeros(instance.coefficient.shape)
        frac[jobs, confs] = values
        lp_value = const + sign * float(cost @ values)
        return IlpResult(
            status,
            np.full(m, -1, np.int64),
            lp_value,
            lp_value,
            "highs",
            highs_version(),
            elapsed,
            size,
            text,
            fractional=frac,
        )
    choice = _choice_from(instance, jobs, confs, values)
    bound = const + sign * (result.bound - offset) if result.bound is not None else None
    obj = objective_of(instance, choice)
    if bound is not None:  # the bound can never be better than the incumbent
        bound = max(bound, obj) if instance.maximize else min(bound, obj)
    return IlpResult(
        status,
        choice,
        obj,
        bound,
        "highs",
        highs_version(),
        elapsed,
        size,
        text,
    )


def solve_cpsat(
    instance: SiaInstance, scale: float = 100.0, deadline: Deadline = NO_DEADLINE,
    threads: int = 0,
) -> IlpResult:
    """Second exact solver: OR-Tools CP-SAT on costs rounded to integers after multiplying by
    `scale` (exact when coefficients have 2 decimals and scale = 100, as in compat-sia)."""
    from ortools.sat.python import cp_model

    m = instance.num_jobs
    jobs, confs, cost = _columns(instance)
    model = cp_model.CpModel()
    xs = [model.new_bool_var(f"x{k}") for k in range(jobs.size)]
    for i in range(m):
        mine = [xs[k] for k in np.nonzero(jobs == i)[0]]
        if mine:
            model.add_at_most_one(mine)
        if instance.pinned[i] >= 0:
            hit = [xs[k] for k in np.nonzero((jobs == i) & (confs == instance.pinned[i]))[0]]
            if not hit:
                return IlpResult(
                    SolverStatus.INFEASIBLE,
                    np.full(m, -1, np.int64),
                    None,
                    None,
                    "cp-sat",
                    ortools_version(),
                    0.0,
                    ModelSize(),
                    "pinned configuration not allowed",
                )
            model.add(hit[0] == 1)
    for t in range(instance.capacity.size):
        ks = np.nonzero(instance.config_type[confs] == t)[0]
        if ks.size:
            model.add(
                sum(int(instance.config_devices[confs[k]]) * xs[k] for k in ks)
                <= int(instance.capacity[t])
            )
    integer_cost = np.rint(cost * scale).astype(np.int64)
    model.minimize(sum(int(integer_cost[k]) * xs[k] for k in range(jobs.size)))
    size = ModelSize(jobs.size, m + instance.capacity.size, 2 * jobs.size, jobs.size)
    result = run_cpsat(model, xs, size, deadline, threads, seed=1)
    if not result.has_solution:
        return IlpResult(
            result.status,
            np.full(m, -1, np.int64),
            None,
            None,
            "cp-sat",
            result.solver_version,
            result.solve_time_s,
            size,
            result.detail,
        )
    choice = _choice_from(instance, jobs, confs, result.x)
    sign = -1.0 if instance.maximize else 1.0
    bound = _constant(instance) + sign * float(result.bound or 0.0) / scale
    return IlpResult(
        result.status,
        choice,
        objective_of(instance, choice),
        bound,
        "cp-sat",
        result.solver_version,
        result.solve_time_s,
        size,
        result.detail,
    )


def round_relaxation(instance: SiaInstance, fractional: FloatArray,
                     deadline: Deadline = NO_DEADLINE) -> IntArray:
    """An integral choice from an LP point: keep the jobs the LP assigns integrally, then give
    each remaining job (largest gain first) its best allowed configuration that still fits (a
    pinned job: its pinned one). Stops at `deadline` (the jobs not reached keep none)."""
    m = instance.num_jobs
    choice = np.full(m, -1, np.int64)
    whole = fractional >= 1 - 1e-6
    rows, cols = np.nonzero(whole)
    choice[rows] = cols
    used = np.zeros(instance.capacity.size, np.int64)
    np.add.at(used, instance.config_type[cols], instance.config_devices[cols])
    open_jobs = np.flatnonzero(choice < 0)
    if open_jobs.size == 0:
        return choice
    dense = _dense_cost(instance)
    order = open_jobs[np.argsort(dense[open_jobs].min(axis=1), kind="stable")]
    pinned = open_jobs[instance.pinned[open_jobs] >= 0]
    keep = np.isfinite(dense[pinned, instance.pinned[pinned]])
    dense[pinned] = np.inf  # a pinned job takes its pinned configuration or none
    dense[pinned[keep], instance.pinned[pinned[keep]]] = -1.0
    _take_best_fitting(instance, order, dense, choice, used, deadline)
    return choice


def _lagrangian_try(
    instance: SiaInstance, gap_tolerance: float, started: float, deadline: Deadline
) -> IlpResult | None:
    """The Lagrangian route of `solve_exact`: its bound and the best plan read off its prices,
    `OPTIMAL` when within the gap, else `TIME_LIMIT` (the LP and MIP routes may follow); None
    when pinned jobs alone exceed capacity. The bound's cutting planes stop early enough to
    leave one priced plan its time (`PRICED_PLAN_CELL_S`), and, when the LP relaxation could
    still start after them, half the time left to it."""
    bound_deadline = deadline.leaving(_priced_plan_cost_s(instance), max_share=1.0)
    if can_start(deadline, SIMPLEX_LP, _model_size(instance)):
        bound_deadline = bound_deadline.earliest(deadline.child(LAGRANGIAN_SHARE))
    dual = lagrangian_bound(instance, tolerance=max(gap_tolerance, 1e-9) / 10,
                            deadline=bound_deadline)
    if dual is None:
        return None
    value, prices, dense = dual
    sign = -1.0 if instance.maximize else 1.0
    pinned = instance.pinned >= 0
    fixed = sum(
        float(dense_cost)
        for dense_cost in (
            instance.weight[pinned] * instance.coefficient[pinned, instance.pinned[pinned]]
            - instance.no_allocation_penalty
        )
    )
    bound_min = value + sign * fixed
    dual_bound = _constant(instance) + sign * bound_min

    def gap_of(obj: float) -> float:
        bound = max(dual_bound, obj) if instance.maximize else min(dual_bound, obj)
        return gap_between(obj, bound)

    choice, obj, how = _priced_plan(instance, prices, dense, gap_tolerance, gap_of, deadline)
    if choice is None:
        return None
    bound = max(dual_bound, obj) if instance.maximize else min(dual_bound, obj)
    gap = gap_of(obj)
    return IlpResult(
        SolverStatus.OPTIMAL if gap <= gap_tolerance else SolverStatus.TIME_LIMIT,
        choice,
        obj,
        bound,
        f"lagrangian dual (Kelley, HiGHS) + {how}",
        highs_version(),
        time.perf_counter() - started,
        _model_size(instance),
        f"Lagrangian bound with type prices {np.round(prices, 6).tolist()}; plan by {how}; "
        f"gap {gap:.2e}" + ("" if gap <= gap_tolerance else STOPPED),
    )


STOPPED = "; stopped at the time limit"
"""The note of a plan whose gap the time limit left open."""
LAGRANGIAN_SHARE = 0.5
"""When the LP relaxation could start in the time left, the Lagrangian bound's cutting planes
stop at this share of it, leaving the rest to the plans read off its prices and the LP."""
PRICED_PLAN_CELL_S = 4e-8
"""Seconds per (job, configuration) cell to read one plan off the prices (`lagrangian_plan`
or `regret_plan`, and its check): measured 0.09-0.15 s at 100,000 jobs x 33 configurations
(3.3 million cells) on a 2-core machine at load 1-2. The bound stops that much before its
deadline, and a further priced plan is read only with that much time left."""


def _priced_plan_cost_s(instance: SiaInstance) -> float:
    """Estimated seconds to read one plan off the prices (`PRICED_PLAN_CELL_S`)."""
    return PRICED_PLAN_CELL_S * instance.coefficient.size


def _model_size(instance: SiaInstance) -> ModelSize:
    """The ILP's size: a variable per allowed (job, configuration), a row per job and type."""
    k = int(instance.allowed.sum())
    return ModelSize(k, instance.num_jobs + instance.capacity.size, 2 * k, k)


RESTRICTED_MIP_LIMIT_S = 5.0
"""The restricted MIP of `_priced_plan` stops after this many seconds (the full MIP follows)."""
TIE_BAND = 1e-3
"""Columns whose reduced cost at the dual prices is within this (relative) of the job's best
option are "near-tied"; the restricted LP and MIP of `_priced_plan` use only those."""


def _priced_plan(
    instance: SiaInstance,
    prices: FloatArray,
    dense: FloatArray,
    gap_tolerance: float,
    gap_of: Callable[[float], float],
    deadline: Deadline,
) -> tuple[IntArray | None, float, str]:
    """The first plan within the gap of the Lagrangian bound, cheapest first: the plans read
    off the prices (`lagrangian_plan`, `regret_plan`); the LP over the near-tied columns
    (jobs indifferent at the prices split as the capacity requires), rounded on those columns
    and on all; that restricted problem as a MIP. Every plan is feasible for the full ILP, so
    the Lagrangian bound certifies it. Returns (plan, objective, how) of the first plan within
    the gap, else of the best plan (None, nan, "" without one); stops at `deadline`."""
    best: tuple[IntArray | None, float, str] = (None, float("nan"), "")

    def consider(choice: IntArray | None, how: str) -> bool:
        nonlocal best
        if choice is None or violations_of(instance, choice):
            return False
        obj = objective_of(instance, choice)
        if best[0] is None or (obj > best[1] if instance.maximize else obj < best[1]):
            best = (choice, obj, how)
        return gap_of(best[1]) <= gap_tolerance

    step = _priced_plan_cost_s(instance)  # a pass over the (job, configuration) cells

    def time_for(passes: int) -> bool:
        return deadline.remaining() >= passes * step and not deadline.expired()

    if consider(lagrangian_plan(instance, prices, dense, deadline), "price plan"):
        return best
    if not time_for(1):
        return best
    if consider(regret_plan(instance, prices, dense, deadline), "regret plan"):
        return best
    if not time_for(3):  # the restricted LP's columns and its two roundings
        return best
    red = _reduced(dense, instance.config_devices.astype(np.float64), instance.config_type,
                   prices)
    low = np.minimum(red.min(axis=1), 0.0)
    near = red <= low[:, None] + TIE_BAND * np.maximum(1.0, np.abs(low))[:, None]
    sub = replace(instance, allowed=instance.allowed & (near | (instance.pinned >= 0)[:, None]))
    lp = solve_highs(sub, relax=True, deadline=deadline.leaving(2 * step, max_share=1.0))
    if lp.status is SolverStatus.OPTIMAL and lp.fractional is not None:
        if consider(round_relaxation(sub, lp.fractional, deadline), "restricted LP, rounded"):
            return best
        if time_for(1) and consider(round_relaxation(instance, lp.fractional, deadline),
                                    "restricted LP, rounded"):
            return best
    mip = solve_highs(sub, relative_gap=gap_tolerance / 10,
                      deadline=deadline.within(RESTRICTED_MIP_LIMIT_S))
    consider(mip.choice if mip.has_solution else None, "restricted MIP")
    return best


def solve_exact(
    instance: SiaInstance,
    deadline: Deadline = NO_DEADLINE,
    relative_gap: float = 1e-4,
    threads: int = 0,
) -> IlpResult:
    """Exact within `relative_gap`: the Lagrangian bound and the plans read off its prices;
    when they do not close the gap, the LP relaxation (a proven bound), rounded and repaired,
    returned when within the gap of its bound (few coupling rows make the relaxation tight,
    A5.5); else HiGHS's branch and cut decides. Each HiGHS route runs only when it could start
    and stop by `deadline` (`highs_startup`); the answer is the best plan found with the
    tightest bound proven."""
    started = time.perf_counter()
    priced = _lagrangian_try(instance, relative_gap, started, deadline)
    if priced is not None and priced.status is SolverStatus.OPTIMAL:
        return priced
    size = _model_size(instance)
    if can_start(deadline, SIMPLEX_LP, size):
        lp = solve_highs(instance, relax=True, deadline=deadline, threads=threads)
        if lp.status is SolverStatus.INFEASIBLE:
            return replace(lp, solve_time_s=time.perf_counter() - started)
        if (lp.status is SolverStatus.OPTIMAL and lp.fractional is not None
                and lp.objective is not None):
            choice = round_relaxation(instance, lp.fractional, deadline)
            if not violations_of(instance, choice):
                obj = objective_of(instance, choice)
                bound = min(lp.objective, obj) if not instance.maximize else max(lp.objective,
                                                                                 obj)
                gap = gap_between(obj, bound)
                if gap <= relative_gap:
                    return IlpResult(
                        SolverStatus.OPTIMAL,
                        choice,
                        obj,
                        bound,
                        "highs",
                        lp.solver_version,
                        time.perf_counter() - started,
                        replace(lp.model_size, integer_variables=lp.model_size.variables),
                        f"LP relaxation bound; rounded plan within gap {gap:.2e}",
                    )
    if priced is not None and not can_start(deadline, MILP, size):
        return replace(priced, solve_time_s=time.perf_counter() - started)
    mip = solve_highs(instance, deadline=deadline, relative_gap=relative_gap, threads=threads)
    mip = replace(mip, solve_time_s=time.perf_counter() - started)
    return mip if priced is None else _better(priced, mip, instance.maximize, relative_gap)


def _better(first: IlpResult, second: IlpResult, maximize: bool, gap_tolerance: float
            ) -> IlpResult:
    """The better plan of two results on one instance (`first` has one), with the tighter of
    their proven bounds; `OPTIMAL` when that closes the gap."""
    plan, value = first, first.objective
    assert value is not None
    if second.objective is not None and (
        second.objective > value if maximize else second.objective < value
    ):
        plan, value = second, second.objective
    bounds = [b for b in (first.bound, second.bound) if b is not None]
    bound = (min(bounds) if maximize else max(bounds)) if bounds else None
    if bound is not None:  # never better than the plan
        bound = max(bound, value) if maximize else min(bound, value)
    gap = gap_between(value, bound)
    closed = gap is not None and gap <= gap_tolerance
    if plan is second:
        detail = second.detail
    else:
        detail = (first.detail.replace(STOPPED, "")
                  + f"; {second.solver} ended {second.status.value}, no better plan")
    if not closed and "time limit" not in detail:
        detail += STOPPED
    return replace(plan, bound=bound, solve_time_s=second.solve_time_s, detail=detail,
                   status=SolverStatus.OPTIMAL if closed else SolverStatus.TIME_LIMIT)


def _reduced(
    cost: FloatArray, devices: FloatArray, ctype: IntArray, prices: FloatArray
) -> FloatArray:
    """(m, C) cost + price of the configuration's GPUs (inf where not allowed)."""
    return np.asarray(cost + (prices[ctype] * devices)[None, :])


def lagrangian_bound(
    instance: SiaInstance, max_iterations: int = 400, tolerance: float = 1e-9,
    deadline: Deadline = NO_DEADLINE,
) -> tuple[float, FloatArray, FloatArray] | None:
    """Maximize the Lagrangian dual of the capacity rows by Kelley's cutting planes over the
    type prices (one variable per type). Returns (L(prices), prices, dense cost) for the free
    (unpinned) jobs in minimization form, or None when pinned jobs alone exceed capacity.

    L(pi) = sum_i min(0, min_c cost[i,c] + pi_t(c) g_c) - sum_t pi_t * C_t is a lower bound on
    the minimization ILP for every pi >= 0 (weak duality); its maximum equals the LP
    relaxation's value. Every iteration's bound is valid, so the loop may stop at `deadline`."""
    m, c = instance.coefficient.shape
    n = instance.capacity.size
    free_jobs = instance.pinned < 0
    capacity = instance.capacity.astype(np.float64).copy()
    for i in np.nonzero(~free_jobs)[0]:
        k = instance.pinned[i]
        capacity[instance.config_type[k]] -= instance.config_devices[k]
    if (capacity < 0).any():
        return None
    dense = _dense_cost(instance)
    finite = np.abs(dense[np.isfinite(dense)])
    top = float(finite.max()) if finite.size else 1.0  # before the pinned rows go
    dense[~free_jobs] = np.inf
    devices = instance.config_devices.astype(np.float64)
    ctype = instance.config_type
    upper_box = top / max(float(devices.min()) if devices.size else 1.0, 1.0) + 1.0

    def evaluate(prices: FloatArray) -> tuple[float, FloatArray]:
        red = _reduced(dense, devices, ctype, prices)
        arg = red.argmin(axis=1) if c else np.zeros(m, np.int64)
        best = red[np.arange(m), arg] if c else np.zeros(m)
        take = best < 0
        used = np.bincount(ctype[arg[take]], weights=devices[arg[take]], minlength=n)
        value = float(best[take].sum() - prices @ capacity)
        return value, np.asarray(used - capacity)

    prices = np.zeros(n)
    best_value, grad = evaluate(prices)
    best_prices = prices.copy()
    value = best_value
    if deadline.expired():  # the bound at zero prices
        return best_value, best_prices, dense
    # the cutting-plane model: maximize z over (z, pi) with the cuts as rows, warm-started
    master = HighsSession(LinearModel(
        cost=np.concatenate([[-1.0], np.zeros(n)]),
        matrix=sp.csc_matrix((0, n + 1)),
        row_lower=np.zeros(0),
        row_upper=np.zeros(0),
        col_lower=np.concatenate([[-INFINITY], np.zeros(n)]),
        col_upper=np.concatenate([[INFINITY], np.full(n, upper_box)]),
    ), HighsSettings(method="simplex"))
    for _ in range(max_iterations):
        if deadline.expired():
            break
        # cut: z <= value + grad . (pi - prices)  <=>  z - grad . pi <= value - grad . prices
        master.add_rows(np.array([-INFINITY]), np.array([value - float(grad @ prices)]),
                        sp.csr_matrix(np.concatenate([[1.0], -grad])[None, :]))
        res = master.run(deadline)
        if res.status is not SolverStatus.OPTIMAL or res.objective is None:
            break
        model_max = -res.objective
        prices = np.asarray(res.x[1:], np.float64)
        value, grad = evaluate(prices)
        if value > best_value:
            best_value, best_prices = value, prices.copy()
        if model_max - best_value <= tolerance * max(1.0, abs(best_value)):
            break
    return best_value, best_prices, dense


DEADLINE_EVERY_JOBS = 4096
"""The greedy fills check the deadline this often (jobs)."""


def _take_best_fitting(instance: SiaInstance, order: IntArray, cost: FloatArray,
                       choice: IntArray, used: IntArray,
                       deadline: Deadline = NO_DEADLINE) -> None:
    """In `order`, every job without a configuration takes its cheapest option with
    `cost` < 0 (the row of `cost`, inf = not allowed) that still fits; updates `choice` and
    `used` (GPUs per type) in place. Stops at `deadline` (the jobs not reached keep none: the
    plan stays feasible).

    Vectorized over jobs: a configuration that no longer fits never fits again (the GPUs in
    use only grow), so while the set of fitting configurations stays the same every job takes
    its cheapest fitting option, and the picks of a whole run of jobs are accepted at once up
    to the first one that overflows its type; that one removes its configuration from the set
    (at most one event per configuration), and only the jobs whose pick it was choose again.
    The same plan as taking the jobs one by one; the deadline is read every
    `DEADLINE_EVERY_JOBS` jobs and at every event."""
    rows = order[choice[order] < 0]
    if not rows.size or not cost.shape[1]:
        return
    ctype, devices, capacity = instance.config_type, instance.config_devices, instance.capacity
    fits = used[ctype] + devices <= capacity[ctype]
    picked = np.full(rows.size, -1, np.int64)
    at = 0
    while at < rows.size and not deadline.expired():
        end = min(at + DEADLINE_EVERY_JOBS, rows.size)
        block = cost[rows[at:end]]  # a copy (fancy indexing)
        block[~(block < 0)] = np.inf  # not allowed, no gain, or NaN: never taken
        pick, has = _cheapest(block, fits)
        start = 0
        while start < end - at:
            kinds = ctype[pick[start:]]
            grows = np.where(has[start:], devices[pick[start:]], 0)
            stop = end - at - start  # the first job whose pick no longer fits
            for t in np.unique(kinds[has[start:]]).tolist():
                mine = has[start:] & (kinds == t)
                over = np.flatnonzero(mine & (used[t] + np.cumsum(np.where(mine, grows, 0))
                                              > capacity[t]))
                if over.size:
                    stop = min(stop, int(over[0]))
            accepted = slice(start, start + stop)
            taken = pick[accepted][has[accepted]]
            picked[at + start:at + start + stop] = np.where(has[accepted], pick[accepted], -1)
            used += np.bincount(ctype[taken], weights=devices[taken],
                                minlength=capacity.size).astype(used.dtype)
            start += stop
            if start == end - at:
                break
            # the job at `start` overflows: drop what no longer fits; its pickers choose again
            fits &= used[ctype] + devices <= capacity[ctype]
            again = start + np.flatnonzero(has[start:] & ~fits[pick[start:]])
            pick[again], has[again] = _cheapest(block[again], fits)
        at = end
    choice[rows] = picked


def _cheapest(cost: FloatArray, fits: BoolArray) -> tuple[IntArray, BoolArray]:
    """Per row of `cost` (inf = not an option), the cheapest option among the configurations
    that `fits` (ties: the lowest index), and whether there is one."""
    masked = np.where(fits[None, :], cost, np.inf)
    pick = masked.argmin(axis=1)
    return pick, np.isfinite(masked[np.arange(pick.size), pick])


def _start(instance: SiaInstance) -> tuple[IntArray, IntArray, BoolArray]:
    """(choice with the pinned jobs' configurations, GPUs they use per type, free jobs)."""
    choice = np.where(instance.pinned >= 0, instance.pinned, -1).astype(np.int64)
    used = np.zeros(instance.capacity.size, np.int64)
    on = choice >= 0
    np.add.at(used, instance.config_type[choice[on]], instance.config_devices[choice[on]])
    return choice, used, instance.pinned < 0


def _fill_order(dense: FloatArray) -> IntArray:
    """Jobs by their best true cost (largest gain first)."""
    return np.argsort(np.where(np.isfinite(dense), dense, np.inf).min(axis=1), kind="stable")


def lagrangian_plan(instance: SiaInstance, prices: FloatArray, dense: FloatArray,
                    deadline: Deadline = NO_DEADLINE) -> IntArray:
    """Integral plan from dual prices: every free job takes its best configuration at the
    prices; types over capacity shed the jobs that lose least by moving; then a greedy fill
    with the true costs."""
    m = instance.num_jobs
    devices = instance.config_devices
    ctype = instance.config_type
    red = _reduced(dense, devices.astype(np.float64), ctype, prices)
    choice, used, free = _start(instance)
    arg = red.argmin(axis=1)
    take = free & (red[np.arange(m), arg] < 0)
    choice[take] = arg[take]
    np.add.at(used, ctype[arg[take]], devices[arg[take]])
    on = choice >= 0
    for t in np.nonzero(used > instance.capacity)[0]:
        members = np.nonzero(free & on & (ctype[np.maximum(choice, 0)] == t))[0]
        # how much the job's reduced cost rises if it moves to its best other-type option
        other = red[members][:, ctype != t]
        alt = np.minimum(other.min(axis=1) if other.size else 0.0, 0.0)
        loss = alt - red[members, choice[members]]
        ranked = members[np.argsort(loss, kind="stable")]
        shed = np.cumsum(devices[choice[ranked]])  # shed in order while over capacity
        over = used[t] - (shed - devices[choice[ranked]]) > instance.capacity[t]
        used[t] -= int(shed[over][-1]) if over.any() else 0
        choice[ranked[over]] = -1
    order = _fill_order(dense)
    _take_best_fitting(instance, order[free[order]], dense, choice, used, deadline)
    return choice


def regret_plan(instance: SiaInstance, prices: FloatArray, dense: FloatArray,
                deadline: Deadline = NO_DEADLINE) -> IntArray:
    """Integral plan from dual prices by regret: free jobs in decreasing regret (how much
    their reduced cost at the prices rises from their best to their second-best option, "no
    configuration" counting as 0) each take their best option that still fits. Jobs that are
    indifferent at the prices (ties, e.g. identical jobs) come last and spread over the
    options the capacity still allows, which the plain argmin plan cannot do. Then the greedy
    fill of `lagrangian_plan` with the true costs."""
    red = _reduced(dense, instance.config_devices.astype(np.float64), instance.config_type,
                   prices)
    choice, used, free = _start(instance)
    ranked = np.sort(np.minimum(red, 0.0), axis=1)  # "none" = 0 caps every option
    second = ranked[:, 1] if red.shape[1] > 1 else np.zeros(instance.num_jobs)
    regret = second - ranked[:, 0]
    jobs = np.nonzero(free)[0]
    _take_best_fitting(instance, jobs[np.argsort(-regret[jobs], kind="stable")], red, choice,
                       used, deadline)
    order = _fill_order(dense)
    _take_best_fitting(instance, order[free[order]], dense, choice, used, deadline)
    return choice
