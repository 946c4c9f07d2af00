"""Gavel's heterogeneity-aware LP family (A2.5-A2.8, docs/policies/gavel.md).

* max-sum-throughput (A2.6): maximize sum_i c_i thr_i(X) (c_i = 1 or 1/prop_i);
* cost-normalized throughput with soft lexicographic SLO rows (A2.7);
* minimum makespan as the single LP in z = 1/makespan (A2.8);
* finish-time fairness (A2.5): min max_i w_i rho_i(X) by a sequence of z-LPs.

Every LP is "maximize c@x s.t. A@x <= b, x >= 0" (`apportion.solver.backends.lp.solve_lp`), built
from sparse triplets over the usable cells only (B4). The certificate never trusts the solver:
X is repaired onto B1-B3 and its objective recomputed; the row duals are clipped to >= 0 and
the bound is the Lagrangian value b@y + sum_k max(0, c_k - (A^T y)_k) * u_k with a valid upper
bound u_k of every variable (time shares and shortfalls <= 1, z <= its own proven cap), which is
a valid upper bound on the LP optimum for any y >= 0 (weak duality).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.formulations.normalizers import (
    isolated_share,
    proportional_throughput,
    repair_time_share,
)
from apportion.solver.backends.lp import solve_lp
from apportion.solver.backends.status import SolverResult, SolverStatus
from apportion.solver.certificate import termination
from apportion.solver.deadline import Deadline
from apportion.solver.model import (
    Compat,
    FloatArray,
    IntArray,
    Problem,
    SolveOptions,
    SolverPreference,
)
from apportion.solver.parameters import (
    CostThroughputParameters,
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
    Termination,
    relative_gap,
)

BoolArray = NDArray[np.bool_]

FTF_PRECISION = 1e-7
"""Finish-time fairness stops when (hi - lo) <= FTF_PRECISION * hi."""
LEVELS_GAP = 1e-7
"""Certified gap above which an active-set z-LP answer is replaced by a HiGHS solve."""
LEVELS_ABOVE = 1000
"""AUTO solves z-LPs with more active jobs than this by max-min fairness's active-set method,
smaller ones with HiGHS simplex on this module's LP (a vertex, exact to 1e-10)."""
STEP = 0.05
"""Next FTF level: lo + STEP * (hi - lo)."""


# --------------------------------------------------------------------------------------------
# shared pieces


@dataclass(frozen=True)
class Cells:
    """The usable cells of one problem, the LP's X variables in row-major order."""

    T: FloatArray
    """(m, n) throughput used by the policy (steps/s; agnostic variants copy a column)."""
    s: FloatArray
    """(m,) scale factors."""
    W: FloatArray
    """(n,) devices per type."""
    rows: IntArray
    """(k,) job index of each cell."""
    cols: IntArray
    """(k,) type index of each cell."""
    active: BoolArray = field(default_factory=lambda: np.zeros(0, bool))
    """(m,) jobs the LP may give time to."""
    count: FloatArray | None = None
    """(m,) for cells over classes of interchangeable jobs (`JobClasses`): the jobs of each
    row, whose X is the time share of each of them; capacity rows weigh it by the count.
    None = one job per row."""

    @property
    def m(self) -> int:
        return int(self.T.shape[0])

    @property
    def n(self) -> int:
        return int(self.T.shape[1])

    @property
    def k(self) -> int:
        return int(self.rows.size)

    def values(self) -> FloatArray:
        """(k,) throughput of each cell (steps/s)."""
        return np.asarray(self.T[self.rows, self.cols], dtype=np.float64)

    def to_matrix(self, x: FloatArray) -> FloatArray:
        """(m, n) X from the (k,) cell values."""
        out = np.zeros((self.m, self.n))
        out[self.rows, self.cols] = x[: self.k]
        return out


def policy_throughput(problem: Problem, reference_type: str) -> FloatArray:
    """T, or the agnostic T with the reference type's column copied into every type (A1.3)."""
    T = problem.jobs.throughput
    if not reference_type:
        return np.asarray(T, dtype=np.float64)
    j = problem.cluster.type_names.index(reference_type)
    return np.repeat(T[:, j : j + 1], problem.cluster.num_types, axis=1)


def make_cells(problem: Problem, T: FloatArray, compat: Compat, active: BoolArray) -> Cells:
    """Usable cells: T > 0 and (B4, not in compat-gavel) s_i <= W[j]; only active jobs."""
    s = problem.jobs.scale_factor_float
    W = problem.cluster.count_float
    ok = T > 0
    if compat is not Compat.GAVEL:
        ok &= s[:, None] <= W[None, :]
    else:
        ok &= W[None, :] > 0
    ok &= active[:, None]
    rows, cols = np.nonzero(ok)
    return Cells(
        T=T, s=s, W=W, rows=rows.astype(np.int64), cols=cols.astype(np.int64), active=active
    )


@dataclass(frozen=True)
class JobClasses:
    """Classes of interchangeable jobs: jobs whose LP rows are identical (same throughput row,
    scale factor and objective weights). The LPs of this module are invariant under swapping
    such jobs, so averaging an optimal X over each class is optimal and gives its jobs equal
    rows: solving one row per class (capacity weighted by the class size) is exact."""

    rep: IntArray
    """(c,) a representative job of each class."""
    inverse: IntArray
    """(m,) class of each job."""
    count: FloatArray
    """(c,) jobs per class."""

    @staticmethod
    def of(*columns: FloatArray) -> JobClasses:
        """Classes of equal rows of the stacked `columns` (each (m,) or (m, q))."""
        key = np.column_stack(columns)
        _, rep, inverse, count = np.unique(
            key, axis=0, return_index=True, return_inverse=True, return_counts=True
        )
        return JobClasses(rep.astype(np.int64), inverse.reshape(-1).astype(np.int64),
                          count.astype(np.float64))

    def cells(self, cells: Cells) -> Cells:
        """`cells` (over jobs) restricted to one row per class, weighted by class size."""
        ok = np.zeros((cells.m, cells.n), bool)
        ok[cells.rows, cells.cols] = True
        rows, cols = np.nonzero(ok[self.rep])
        active = cells.active[self.rep] if cells.active.size else cells.active
        return Cells(T=cells.T[self.rep], s=cells.s[self.rep], W=cells.W,
                     rows=rows.astype(np.int64), cols=cols.astype(np.int64), active=active,
                     count=self.count)


def base_triplets(
    cells: Cells,
) -> tuple[list[IntArray], list[IntArray], list[FloatArray], FloatArray]:
    """Rows 0..n-1: capacity sum_i count_i s_i X[i,j] <= W[j]; rows n..n+m-1:
    sum_j X[i,j] <= 1."""
    k = np.arange(cells.k)
    r = [cells.cols, cells.n + cells.rows]
    c = [k, k]
    devices = cells.s if cells.count is None else cells.s * cells.count
    v = [devices[cells.rows], np.ones(cells.k)]
    b = np.concatenate([cells.W, np.ones(cells.m)])
    return r, c, v, b


def repair(cells: Cells, X: FloatArray) -> tuple[FloatArray, float]:
    """Project a solver X onto B1-B4: zero tiny entries and blocked cells, clip to [0, 1], scale
    rows to sum <= 1 and columns to capacity. Returns (X, max violation before the repair)."""
    allowed = np.zeros((cells.m, cells.n), bool)
    allowed[cells.rows, cells.cols] = True
    raw = np.where(allowed, X, 0.0)
    viol = max(
        float(np.max(-raw, initial=0.0)),
        float(np.max(raw.sum(axis=1) - 1.0, initial=0.0)),
        float(np.max((cells.s @ raw - cells.W) / np.maximum(cells.W, 1.0), initial=0.0)),
    )
    viol = abs(max(0.0, viol))  # never -0.0
    return repair_time_share(raw, allowed, cells.s, cells.W), viol


def lagrangian_bound(
    c: FloatArray, a_matrix: sp.csc_matrix, b: FloatArray, y: FloatArray, upper: FloatArray
) -> float:
    """Upper bound on max c@x s.t. A@x <= b, 0 <= x <= upper, from any multipliers y (clipped
    to >= 0): b@y + sum_k max(0, c_k - (A^T y)_k) * upper_k (weak duality)."""
    y = np.maximum(np.nan_to_num(y, nan=0.0), 0.0)
    reduced = c - a_matrix.T @ y
    return float(b @ y + np.sum(np.maximum(reduced, 0.0) * upper))


def thrmax(cells: Cells) -> FloatArray:
    """(m,) best throughput of each job with the cluster to itself (A2.5): fill usable types
    in decreasing T, each capped at min(1, W[j]/s_i), until the job's time is used."""
    T = np.zeros((cells.m, cells.n))
    T[cells.rows, cells.cols] = cells.values()
    cap = np.minimum(1.0, cells.W[None, :] / cells.s[:, None])
    cap = np.where(T > 0, cap, 0.0)
    order = np.argsort(-T, axis=1)
    Ts = np.take_along_axis(T, order, axis=1)
    cs = np.take_along_axis(cap, order, axis=1)
    before = np.cumsum(cs, axis=1) - cs
    take = np.clip(np.minimum(cs, 1.0 - before), 0.0, None)
    return np.asarray((Ts * take).sum(axis=1), dtype=np.float64)


def isolated_throughput(T: FloatArray, s: FloatArray, W: FloatArray) -> FloatArray:
    """iso_i with Gavel's formula over the given jobs (A1.3), blocked cells included."""
    return np.asarray((T * isolated_share(s, W, T.shape[0])).sum(axis=1), dtype=np.float64)


def _solver(options: SolveOptions) -> SolverPreference:
    return (
        SolverPreference.CLARABEL
        if options.solver is SolverPreference.CLARABEL
        else SolverPreference.HIGHS
    )


def _solve(
    c: FloatArray, a_matrix: sp.csc_matrix, b: FloatArray, options: SolveOptions,
    deadline: Deadline,
) -> SolverResult:
    return solve_lp(c, a_matrix, b, _solver(options), deadline, options.threads)


def no_work_certificate(maximize: bool, formulation: str) -> Certificate:
    """The closed-form answer when no job has work left: objective and bound 0, optimal."""
    return Certificate(Termination.OPTIMAL, maximize, 0.0, 0.0, solver="closed form",
                       formulation=formulation, detail="no remaining work")


def _plan(
    problem: Problem,
    X: FloatArray,
    normalized: FloatArray,
    objective_value: FloatArray,
    job_dual: FloatArray,
    prices: FloatArray,
    cert: Certificate,
    status: list[JobStatus] | None = None,
    reason: list[str] | None = None,
    shares: ShareSection | None = None,
) -> Plan:
    m = problem.jobs.num_jobs
    thr = np.einsum("ij,ij->i", problem.jobs.throughput, X) if m else np.zeros(0)
    return Plan(
        time_share=X,
        effective_throughput=thr,
        normalized_throughput=normalized,
        objective_value=objective_value,
        job_dual=job_dual,
        accelerator_prices=prices,
        certificate=cert,
        job_status=tuple(status) if status else (JobStatus.ALLOCATED,) * m,
        job_reason=tuple(reason) if reason else ("",) * m,
        shares=shares or ShareSection(),
    )


def _failed(
    problem: Problem, result: SolverResult, maximize: bool, formulation: str, build: float
) -> Plan:
    cert = Certificate(
        termination=termination(result.status, False, None, 0.0),
        maximize=maximize,
        solver=result.solver,
        solver_version=result.solver_version,
        formulation=formulation,
        build_time_s=build,
        solve_time_s=result.solve_time_s,
        detail=result.detail,
    )
    return Plan.empty(problem.jobs.num_jobs, problem.cluster.num_types, cert)


# --------------------------------------------------------------------------------------------
# max-sum-throughput (A2.6) and cost-normalized throughput (A2.7)


def max_sum_weights(
    problem: Problem, T: FloatArray, normalize: ThroughputNormalization
) -> FloatArray:
    """(m,) per-job multiplier of thr_i in the objective (1 or 1/prop_i)."""
    m = problem.jobs.num_jobs
    if normalize is ThroughputNormalization.PROPORTIONAL:
        prop = proportional_throughput(T, problem.cluster.count_float)
        return np.divide(1.0, prop, out=np.zeros(m), where=prop > 0)
    return np.ones(m)


def solve_max_sum_throughput(
    problem: Problem,
    parameters: MaxSumThroughputParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Max-sum-throughput (A2.6): maximize sum_i mult_i * thr_i(X) (steps/s, or dimensionless
    with `normalize = prop`). Dual: pi_j per device of type j, sigma_i per job budget.
    Solved over classes of interchangeable jobs (`JobClasses`); the bound is the class LP's
    Lagrangian value, which bounds the job LP (both have the same optimum)."""
    started = time.perf_counter()
    T = policy_throughput(problem, parameters.reference_type)
    normalize = ThroughputNormalization.NONE if compat is Compat.GAVEL else parameters.normalize
    mult = max_sum_weights(problem, T, normalize)
    job_cells = make_cells(problem, T, compat, np.ones(problem.jobs.num_jobs, bool))
    classes = JobClasses.of(T, job_cells.s, mult)
    cells = classes.cells(job_cells)
    r, c, v, b = base_triplets(cells)
    a_matrix = sp.csc_matrix(
        (np.concatenate(v), (np.concatenate(r), np.concatenate(c))), shape=(b.size, cells.k)
    )
    obj = (classes.count * mult[classes.rep])[cells.rows] * cells.values()
    formulation = (f"max-sum-throughput LP (normalize={normalize.value}); "
                   f"{classes.count.size} classes of {problem.jobs.num_jobs} jobs")
    build = time.perf_counter() - started
    result = _solve(obj, a_matrix, b, options, deadline)
    if not result.solved:
        return _failed(problem, result, True, formulation, build)
    X, viol = repair(job_cells, cells.to_matrix(result.x)[classes.inverse])
    per_job = mult * np.einsum("ij,ij->i", T, X)
    objective = float(per_job.sum())
    bound = lagrangian_bound(obj, a_matrix, b, result.row_dual, np.ones(cells.k))
    gap = relative_gap(objective, bound)
    cert = Certificate(
        termination=termination(result.status, True, gap, options.relative_gap),
        maximize=True,
        objective=objective,
        bound=bound,
        solver=result.solver,
        solver_version=result.solver_version,
        formulation=formulation,
        build_time_s=build,
        solve_time_s=result.solve_time_s,
        model_size=ModelSize(cells.k, b.size, a_matrix.nnz),
        max_violation=viol,
        detail=result.detail,
    )
    duals = np.maximum(result.row_dual, 0.0)
    job_dual = (duals[cells.n :] / classes.count)[classes.inverse]  # class budget: count jobs
    return _plan(problem, X, per_job, per_job, job_dual, duals[: cells.n], cert)


def solve_cost_throughput(
    problem: Problem,
    parameters: CostThroughputParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Cost-normalized throughput (A2.7), lexicographic stages on one LP:
    (1) with SLOs: minimize the total normalized shortfall sum_i e_i, rows
        thr_i(X)/q_i + e_i >= 1, 0 <= e_i <= 1, q_i = R_i/SLO_i (steps/s);
    (2) if some usable type costs 0: maximize the throughput on free types;
    (3) maximize sum_ij T[i,j]/cost_j X[i,j] over priced types (steps/s per $/h).
    Each stage's optimum is kept (relative 1e-7) as a row of the next. The certificate is the
    last stage's. compat-gavel: all SLO rows are dropped when they cannot all be met. Solved
    over classes of interchangeable jobs (same throughput row, scale factor and SLO demand;
    `JobClasses`): a class's X and e are those of each of its jobs, its objective terms count
    its jobs."""
    started = time.perf_counter()
    jobs = problem.jobs
    m, n = jobs.num_jobs, problem.cluster.num_types
    T = policy_throughput(problem, parameters.reference_type)
    job_cells = make_cells(problem, T, compat, np.ones(m, bool))
    cost = problem.cluster.cost_per_hour.astype(np.float64)
    remaining = np.maximum(jobs.remaining_steps, 0.0)
    slo = jobs.deadline_s - problem.time_s
    has_slo = np.zeros(m, bool)
    missed = np.zeros(m, bool)
    if parameters.use_slos:
        has_deadline = ~np.isnan(jobs.deadline_s) & (remaining > 0)
        missed = has_deadline & ~(slo > 0)
        has_slo = has_deadline & (slo > 0)
    demand = np.divide(remaining, slo, out=np.zeros(m), where=has_slo)  # q_i (steps/s)
    classes = JobClasses.of(T, job_cells.s, has_slo, demand)
    cells = classes.cells(job_cells)
    count = classes.count
    slo_classes = np.flatnonzero(has_slo[classes.rep])
    q = demand[classes.rep[slo_classes]]
    ns = slo_classes.size
    r, c, v, b_list = base_triplets(cells)
    rows_n = cells.n + cells.m
    k = cells.k
    # SLO rows: -sum_j T[i,j]/q_i X[i,j] - e_i <= -1   (one row per SLO class, e at column k+p)
    pos = np.full(cells.m, -1)
    pos[slo_classes] = np.arange(ns)
    in_slo = pos[cells.rows] >= 0
    r += [rows_n + pos[cells.rows[in_slo]], rows_n + np.arange(ns)]
    c += [np.flatnonzero(in_slo), k + np.arange(ns)]
    v += [-cells.values()[in_slo] / q[pos[cells.rows[in_slo]]], -np.ones(ns)]
    rows_slo = rows_n + ns
    # e_i <= 1
    r.append(rows_slo + np.arange(ns))
    c.append(k + np.arange(ns))
    v.append(np.ones(ns))
    b = np.concatenate([b_list, -np.ones(ns), np.ones(ns)])
    nvar = k + ns
    upper = np.ones(nvar)
    free_col = cost <= 0
    t_cells = cells.values() * count[cells.rows]  # a class's throughput counts its jobs
    stages: list[tuple[str, FloatArray]] = []
    if ns:
        stages.append(("slo", np.concatenate([np.zeros(k), -count[slo_classes]])))
    if np.any(free_col[cells.cols]):
        stages.append(
            (
                "free",
                np.concatenate([np.where(free_col[cells.cols], t_cells, 0.0), np.zeros(ns)]),
            )
        )
    scale = float(cost.max()) if cost.max() > 0 else 1.0
    priced = np.where(
        free_col[cells.cols], 0.0, t_cells * scale / np.where(free_col, 1.0, cost)[cells.cols]
    )
    stages.append(("cost", np.concatenate([priced, np.zeros(ns)])))
    extra_rows: list[FloatArray] = []
    extra_b: list[float] = []
    build = time.perf_counter() - started
    solve_time = 0.0
    drop_slos = False
    result: SolverResult | None = None
    a_matrix = sp.csc_matrix((0, 0))
    b_all = b
    obj = stages[-1][1]
    for name, obj in stages:
        base = sp.csc_matrix(
            (np.concatenate(v), (np.concatenate(r), np.concatenate(c))), shape=(b.size, nvar)
        )
        # Dropped SLO rows (compat gavel) need no change: with e_i free in [0, 1] every row
        # thr_i/q_i + e_i >= 1 is satisfiable by e_i = 1 whatever X is.
        a_matrix = sp.vstack(
            [base, *[sp.csc_matrix(row[None, :]) for row in extra_rows]], format="csc"
        )
        b_all = np.concatenate([b, np.asarray(extra_b, dtype=np.float64)])
        result = _solve(obj, a_matrix, b_all, options, deadline)
        solve_time += result.solve_time_s
        if not result.solved:
            return _failed(problem, result, True, "cost-normalized throughput LP", build)
        value = float(obj @ result.x)
        if name == "slo" and compat is Compat.GAVEL and -value > 1e-7:
            drop_slos = True  # all-or-nothing: no SLO row at all (shortfall free up to 1)
            continue
        slack = 1e-7 * max(1.0, abs(value))
        extra_rows.append(-obj)
        extra_b.append(-(value - slack))
    assert result is not None
    X, viol = repair(job_cells, cells.to_matrix(result.x)[classes.inverse])
    thr = np.einsum("ij,ij->i", T, X)
    mult = np.where(free_col, 0.0, 1.0 / np.where(free_col, 1.0, cost))
    per_job = (T * X) @ mult
    objective = float(per_job.sum())
    slo_jobs = np.flatnonzero(has_slo)
    shortfall = np.full(m, np.nan)
    if parameters.use_slos:
        shortfall[missed] = 1.0
        shortfall[slo_jobs] = np.clip(1.0 - thr[slo_jobs] / demand[slo_jobs], 0.0, 1.0)
    # the repaired plan at class level (copies of a class have equal rows) for the check
    X_class = X[classes.rep]
    x_full = np.concatenate([X_class[cells.rows, cells.cols],
                             shortfall[classes.rep[slo_classes]] if ns else np.zeros(0)])
    # Bound on the last stage (objective scaled by `scale`); earlier stages' rows are part of it.
    bound = lagrangian_bound(obj, a_matrix, b_all, result.row_dual, upper) / scale
    feasible_last = bool(np.all(a_matrix @ x_full <= b_all + 1e-6 * np.maximum(1.0, np.abs(b_all))))
    gap = relative_gap(objective, bound)
    ended = termination(result.status, True, gap, options.relative_gap)
    if ended is Termination.OPTIMAL and not feasible_last:
        ended = Termination.OPTIMAL_INACCURATE
    reason = [""] * m
    for i in np.flatnonzero(missed):
        reason[i] = f"SLO missed: deadline passed {problem.time_s - jobs.deadline_s[i]:.6g} s ago"
    for i in slo_jobs:
        if shortfall[i] > 1e-6:
            reason[i] = (
                f"SLO cannot be met: needs {demand[i]:.6g} steps/s for {remaining[i]:.6g} steps "
                f"in {slo[i]:.6g} s, gets {thr[i]:.6g}"
            )
    stage_names = "+".join(name for name, _ in stages)
    cert = Certificate(
        termination=ended,
        maximize=True,
        objective=objective,
        bound=bound,
        solver=result.solver,
        solver_version=result.solver_version,
        formulation=f"cost-normalized throughput LP (lexicographic stages: {stage_names}"
        + (", SLO rows dropped (compat gavel)" if drop_slos else "")
        + f"); {count.size} classes of {m} jobs",
        build_time_s=build,
        solve_time_s=solve_time,
        model_size=ModelSize(nvar, b_all.size, a_matrix.nnz),
        max_violation=viol,
        detail=result.detail,
    )
    duals = np.maximum(result.row_dual, 0.0)
    job_dual = (duals[cells.n : cells.n + cells.m] / count)[classes.inverse] / scale
    return _plan(
        problem,
        X,
        per_job,
        per_job,
        job_dual,
        duals[:n] / scale,
        cert,
        reason=reason,
        shares=ShareSection(slo_shortfall=shortfall if parameters.use_slos else None),
    )


# --------------------------------------------------------------------------------------------
# the z-LP: maximize z s.t. thr_i(X) >= b_i z (makespan A2.8, FTF feasibility A2.5)


@dataclass(frozen=True)
class ZResult:
    """One z-LP: X (repaired), its exact value min_i thr_i/b_i, a proven upper bound on z*,
    and the repaired multipliers (y per job, pi per type, sigma per job)."""

    status: SolverStatus
    X: FloatArray
    value: float
    bound: float
    y: FloatArray
    pi: FloatArray
    sigma: FloatArray
    violation: float
    result: SolverResult
    size: ModelSize


class ZModel:
    """The z-LP over fixed cells; `solve(b)` for any b > 0 on the active jobs."""

    def __init__(self, cells: Cells, cap: FloatArray) -> None:
        self.cells = cells
        self.cap = cap
        """(m,) thrmax_i: thr_i(X) <= cap_i for every feasible X (bounds z)."""
        r, c, v, b = base_triplets(cells)
        self.jobs = np.flatnonzero(cells.active)
        self.pos = np.full(cells.m, -1)
        self.pos[self.jobs] = np.arange(self.jobs.size)
        self.rows0 = cells.n + cells.m
        # rows rows0 + p: b_i z - sum_j T[i,j] X[i,j] <= 0; z is the last column (index k)
        self.r = np.concatenate([*r, self.rows0 + self.pos[cells.rows]])
        self.c = np.concatenate([*c, np.arange(cells.k)])
        self.v = np.concatenate([*v, -cells.values()])
        self.b = np.concatenate([b, np.zeros(self.jobs.size)])
        self.obj = np.zeros(cells.k + 1)
        self.obj[-1] = 1.0

    def solve(self, rhs: FloatArray, options: SolveOptions, deadline: Deadline) -> ZResult:
        """Maximize z s.t. thr_i(X) >= rhs_i z for the active jobs (rhs (m,) > 0 there).

        AUTO solver above LEVELS_ABOVE jobs: the max-min level LP of
        `max_min_fairness.solve_levels` with level coefficients T[i,j]/rhs_i (the same LP after
        dividing row i by rhs_i; its fast exact active-set method). Otherwise (HIGHS for AUTO,
        or the requested solver): this module's own sparse LP. Either way the
        multipliers are re-derived here (sigma_i = max(0, max_j y_i T[i,j] - s_i pi_j)) and
        the bound is their dual objective W@pi + sum sigma + max(0, 1 - y@rhs) * z_cap."""
        cells = self.cells
        k = cells.k
        started = time.perf_counter()
        jobs = self.jobs
        z_cap = float(np.min(self.cap[jobs] / rhs[jobs])) if jobs.size else 0.0
        levels = options.solver is SolverPreference.AUTO and jobs.size > LEVELS_ABOVE
        if levels:
            # z-LPs are homogeneous in rhs: solve with rhs * z_cap (level coefficients O(1),
            # the largest achievable level 1) and scale the multipliers back by z_cap.
            raw, y, pi, result, size = self._solve_levels(rhs * z_cap, options, deadline)
            y, pi = y * z_cap, pi * z_cap
        else:
            rows = np.concatenate([self.r, self.rows0 + np.arange(jobs.size)])
            cols = np.concatenate([self.c, np.full(jobs.size, k)])
            vals = np.concatenate([self.v, rhs[jobs]])
            a_matrix = sp.csc_matrix((vals, (rows, cols)), shape=(self.b.size, k + 1))
            result = _solve(self.obj, a_matrix, self.b, options, deadline)
            size = ModelSize(k + 1, self.b.size, a_matrix.nnz)
            raw = cells.to_matrix(result.x)
            duals = result.row_dual
            y = np.zeros(cells.m)
            y[jobs] = duals[self.rows0 :]
            pi = duals[: cells.n]
        X, viol = repair(cells, raw)
        thr = np.einsum("ij,ij->i", cells.T, X)
        value = float(np.min(thr[jobs] / rhs[jobs])) if jobs.size else math.inf
        y = np.where(cells.active, np.maximum(np.nan_to_num(y, nan=0.0), 0.0), 0.0)
        pi = np.maximum(np.nan_to_num(pi, nan=0.0), 0.0)
        reduced = y[cells.rows] * cells.values() - cells.s[cells.rows] * pi[cells.cols]
        sigma = np.zeros(cells.m)
        np.maximum.at(sigma, cells.rows, reduced)
        total = float(np.sum(y[jobs] * rhs[jobs]))
        bound = float(cells.W @ pi + sigma.sum() + max(0.0, 1.0 - total) * z_cap)
        del started
        loose = not result.solved or relative_gap(value, bound) > LEVELS_GAP
        if levels and loose and not deadline.expired():
            # the active-set answer is not certified tightly enough: solve the LP itself
            return self.solve(rhs, replace(options, solver=SolverPreference.HIGHS), deadline)
        return ZResult(
            status=result.status,
            X=X,
            value=value,
            bound=bound,
            y=y,
            pi=pi,
            sigma=sigma,
            violation=viol,
            result=result,
            size=size,
        )

    def _solve_levels(
        self, rhs: FloatArray, options: SolveOptions, deadline: Deadline
    ) -> tuple[FloatArray, FloatArray, FloatArray, SolverResult, ModelSize]:
        from apportion.formulations.max_min_fairness import LevelProblem, solve_levels

        cells = self.cells
        jobs = self.jobs
        a = np.zeros((jobs.size, cells.n))
        sub = self.pos[cells.rows]
        a[sub, cells.cols] = cells.values() / rhs[cells.rows]
        lp = LevelProblem(a=a, s=cells.s[jobs], W=cells.W, k=np.ones(jobs.size))
        sol = solve_levels(lp, SolverPreference.AUTO, deadline, options.threads)
        raw = np.zeros((cells.m, cells.n))
        raw[jobs] = sol.X
        y = np.zeros(cells.m)
        y[jobs] = sol.y / rhs[jobs]
        result = SolverResult(
            status=sol.status,
            x=np.zeros(0),
            objective=sol.t,
            has_solution=sol.status.solved,
            solver=sol.solver,
            solver_version=sol.solver_version,
            solve_time_s=sol.solve_time_s,
            detail=f"{sol.method}; {sol.detail}".rstrip("; "),
        )
        return raw, y, sol.pi, result, ModelSize(sol.variables, sol.constraints, sol.nonzeros)


def _finished_status(problem: Problem, active: BoolArray) -> tuple[list[JobStatus], list[str]]:
    status = [JobStatus.ALLOCATED if a else JobStatus.FINISHED for a in active]
    reason = ["" if a else "no remaining work" for a in active]
    return status, reason


def solve_min_makespan(
    problem: Problem,
    parameters: MinMakespanParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Minimum makespan (A2.8) as one LP in z = 1/makespan (1/s). Objective: the makespan
    max_i R_i/thr_i(X) (s) of the returned X; bound: 1/(proven upper bound on z*)."""
    started = time.perf_counter()
    jobs = problem.jobs
    m = jobs.num_jobs
    T = policy_throughput(problem, parameters.reference_type)
    remaining = np.maximum(jobs.remaining_steps, 0.0)
    active = remaining > 0
    cells = make_cells(problem, T, compat, active)
    status, reason = _finished_status(problem, active)
    formulation = "min makespan LP (z = 1/makespan)"
    if not active.any():
        cert = no_work_certificate(False, formulation)
        return _plan(
            problem,
            np.zeros((m, cells.n)),
            np.zeros(m),
            np.zeros(m),
            np.zeros(m),
            np.zeros(cells.n),
            cert,
            status,
            reason,
        )
    model = ZModel(cells, thrmax(cells))
    build = time.perf_counter() - started
    z = model.solve(remaining, options, deadline)
    if not z.result.solved:
        return _failed(problem, z.result, False, formulation, build)
    thr = np.einsum("ij,ij->i", T, z.X)
    finish = np.divide(remaining, thr, out=np.where(active, np.inf, 0.0), where=thr > 0)
    makespan = float(np.max(finish[active]))
    bound = 1.0 / z.bound if z.bound > 0 else math.inf
    gap = relative_gap(makespan, bound) if math.isfinite(makespan) else None
    cert = Certificate(
        termination=termination(z.status, True, gap, options.relative_gap),
        maximize=False,
        objective=makespan if math.isfinite(makespan) else None,
        bound=bound if math.isfinite(bound) else None,
        solver=z.result.solver,
        solver_version=z.result.solver_version,
        formulation=formulation,
        build_time_s=build,
        solve_time_s=z.result.solve_time_s,
        model_size=z.size,
        max_violation=z.violation,
        detail=z.result.detail,
    )
    rate = np.divide(thr, remaining, out=np.zeros(m), where=active)
    return _plan(
        problem, z.X, rate, finish, z.y, z.pi, cert, status, reason,
        ShareSection(remaining_steps=remaining),
    )


# --------------------------------------------------------------------------------------------
# finish-time fairness (A2.5)


@dataclass(frozen=True)
class FtfData:
    """The per-job quantities of finish-time fairness (arrays (m,), 0 for finished jobs)."""

    t: FloatArray
    """time since arrival (s)."""
    R: FloatArray
    """remaining steps."""
    C: FloatArray
    """cumulative isolated time after this call's update (s)."""
    iso: FloatArray
    """isolated throughput (steps/s)."""
    D: FloatArray
    """weighted isolated finish time D_i / w_i (s)."""
    active: BoolArray


def ftf_data(problem: Problem, T: FloatArray, compat: Compat) -> FtfData:
    """t, R, updated C, iso and D/w of A2.5 (weights ignored in compat-gavel)."""
    jobs, hist = problem.jobs, problem.history
    m = jobs.num_jobs
    R = np.maximum(jobs.remaining_steps, 0.0)
    active = R > 0
    C = hist.cumulative_isolated_time_s.astype(np.float64).copy()
    prev_iso, prev_r = hist.previous_isolated_throughput, hist.previous_remaining_steps
    given = ~np.isnan(prev_iso) & ~np.isnan(prev_r) & (prev_iso > 0)
    C[given] += (prev_r[given] - R[given]) / prev_iso[given]
    s = jobs.scale_factor_float
    W = problem.cluster.count_float
    iso = np.zeros(m)
    iso[active] = isolated_throughput(T[active], s[active], W)
    w = np.ones(m) if compat is Compat.GAVEL else jobs.priority_weight.astype(np.float64)
    D = np.where(active, (C + np.divide(R, iso, out=np.zeros(m), where=iso > 0)) / w, 0.0)
    t = np.where(active, problem.time_s - jobs.arrival_time_s, 0.0)
    return FtfData(t=t, R=R, C=C, iso=iso, D=D, active=active)


def ftf_state(data: FtfData) -> ShareSection:
    """The finish-time-fairness state a plan returns (C_i after the update, iso_i, R_i)."""
    return ShareSection(cumulative_isolated_time_s=data.C, isolated_throughput=data.iso,
                        remaining_steps=data.R)


def rho(data: FtfData, thr: FloatArray) -> FloatArray:
    """(m,) w_i rho_i(X) = (t_i + R_i/thr_i)/(D_i/w_i); inf when thr_i = 0; 0 if finished."""
    finish = np.divide(data.R, thr, out=np.full(thr.shape, np.inf), where=thr > 0)
    out = np.divide(data.t + finish, data.D, out=np.full(thr.shape, np.inf), where=data.D > 0)
    return np.asarray(np.where(data.active, out, 0.0), dtype=np.float64)


def rhs_at(data: FtfData, level: float) -> FloatArray:
    """b_i(rho) = R_i / (rho D_i - t_i) (steps/s); +inf where rho D_i <= t_i."""
    denom = level * data.D - data.t
    return np.asarray(
        np.divide(data.R, denom, out=np.full(denom.shape, np.inf), where=denom > 0),
        dtype=np.float64,
    )


def infeasible_below(data: FtfData, y_all: FloatArray, bound: float, level: float) -> float:
    """Largest rho' proven infeasible by the multipliers of the z-LP at `level`.

    The clipped multipliers (pi, sigma, y = `y_all`, on the rows b_i z - thr_i <= 0) with
    value V = `bound` (the z-LP's dual bound) satisfy, for any rho',
    z*(rho') <= V / sum_i y_i b_i(rho') (same dual point, scaled). So every rho' with
    sum_i y_i b_i(rho') > V is infeasible; the sum decreases in rho', so the set is an interval
    (-inf, root). Returns the root found by bisection (a proven lower bound on rho*)."""
    use = data.active & (y_all > 0)
    if not use.any():
        return 0.0
    y, R, D, t = y_all[use], data.R[use], data.D[use], data.t[use]
    lo = float(np.max(t / D))
    hi = max(level, lo)

    def excess(r: float) -> float:
        denom = r * D - t
        if np.any(denom <= 0):
            return math.inf
        return float(np.sum(y * R / denom)) - bound

    if excess(hi) > 0:  # the root is above `level`: walk up until the proof fails
        step = max(hi - lo, 1e-9 * hi)
        lo = hi
        hi = lo + step
        while excess(hi) > 0:
            lo, step = hi, 2.0 * step
            hi = lo + step
            if not math.isfinite(hi):
                return lo
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * hi:
            break
    return lo


@dataclass(frozen=True)
class BracketStep:
    """One z-LP of the finish-time-fairness bracket at a level: the solver's result, the
    plan (whatever the caller keeps) with its throughput (m,) and the violation repaired, the
    multipliers y (m,) on the rows b_i z - thr_i <= 0 with their dual value, the prices."""

    result: SolverResult
    size: ModelSize
    plan: object
    thr: FloatArray
    violation: float
    y: FloatArray
    bound: float
    prices: FloatArray


@dataclass(frozen=True)
class Bracket:
    """The closed bracket: best rho found (hi) with the step that found it (None: the start
    plan), the proven lower bound (lo) with the multipliers and prices that proved it, the
    LPs run, their total solve time, the last step."""

    hi: float
    lo: float
    best: BracketStep | None
    y: FloatArray
    prices: FloatArray
    lps: int
    solve_time_s: float
    termination: Termination
    last: BracketStep | None


def close_bracket(
    data: FtfData,
    lo: float,
    hi: float,
    step_at: Callable[[float], BracketStep],
    options: SolveOptions,
    deadline: Deadline,
) -> Bracket:
    """Narrow [lo, hi] on rho* (A2.5), hi being the start plan's rho: each step's plan lowers
    hi (exact recomputation of max_i w_i rho_i), its multipliers raise lo
    (`infeasible_below`); the next level is lo + STEP (hi - lo). Ends when
    hi - lo <= FTF_PRECISION hi, when a step moves neither end (the same level would repeat the
    same LP), when it stalls at the solver's precision within the tolerance, at the deadline
    (FEASIBLE) or after 200 LPs (OPTIMAL_INACCURATE)."""
    y, prices = np.zeros(0), np.zeros(0)
    tolerance = options.relative_gap
    ended = Termination.OPTIMAL
    level, lps, solve_time = hi, 0, 0.0
    best: BracketStep | None = None
    last: BracketStep | None = None
    while hi - lo > FTF_PRECISION * hi:
        width = hi - lo
        if deadline.expired():
            ended = Termination.FEASIBLE
            break
        step = step_at(level)
        lps += 1
        solve_time += step.result.solve_time_s
        last = step
        if not step.result.solved:
            limited = step.result.status.limit_reached
            ended = Termination.FEASIBLE if limited else Termination.ERROR
            break
        cand = float(np.max(rho(data, step.thr)))
        progress = cand < hi
        if progress:
            hi, best = cand, step
        proven = infeasible_below(data, step.y, step.bound, level)
        if proven > lo:
            progress = True
            lo = min(proven, hi)
            y, prices = step.y, step.prices
        if not progress:  # the same level again would repeat this LP: the bracket is final
            break
        if hi - lo > 0.99 * width and relative_gap(hi, lo) <= tolerance:
            break  # stalled at the solver's precision, already within the tolerance
        level = lo + STEP * (hi - lo)
        if lps > 200:
            ended = Termination.OPTIMAL_INACCURATE
            break
    if ended is Termination.OPTIMAL and relative_gap(hi, lo) > tolerance:
        ended = Termination.OPTIMAL_INACCURATE
    return Bracket(hi, lo, best, y, prices, lps, solve_time, ended, last)


def solve_finish_time_fairness(
    problem: Problem,
    parameters: FinishTimeFairnessParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Finish-time fairness (A2.5): minimize rho = max_i w_i rho_i(X).

    Bracket [lo, hi] from A2.5 (thrmax, X^iso). Each step solves the z-LP at a level r; its X
    gives hi = max_i w_i rho_i(X) (exact recomputation), its multipliers give a proven lower
    bound via `infeasible_below`. Next level: the middle of the bracket (when all t_i/D_i are
    equal the first LP closes the bracket: the single-LP case of A2.5). Stops when
    hi - lo <= FTF_PRECISION * hi. Objective = hi, bound = lo."""
    started = time.perf_counter()
    jobs = problem.jobs
    m, n = jobs.num_jobs, problem.cluster.num_types
    T = policy_throughput(problem, parameters.reference_type)
    data = ftf_data(problem, T, compat)
    cells = make_cells(problem, T, compat, data.active)
    status, reason = _finished_status(problem, data.active)
    state = ftf_state(data)
    formulation = "finish-time fairness: z-LPs with dual lower bounds"
    if not data.active.any():
        cert = no_work_certificate(False, formulation)
        return _plan(
            problem,
            np.zeros((m, n)),
            np.zeros(m),
            np.zeros(m),
            np.zeros(m),
            np.zeros(n),
            cert,
            status,
            reason,
            state,
        )
    cap = thrmax(cells)
    act = data.active
    lo = float(np.max((data.t[act] + data.R[act] / cap[act]) / data.D[act]))
    share = isolated_share(cells.s, cells.W, int(act.sum()))
    X_best, _ = repair(cells, np.where(act[:, None], share, 0.0))
    hi = float(np.max(rho(data, np.einsum("ij,ij->i", T, X_best))))
    model = ZModel(cells, cap)
    build = time.perf_counter() - started

    def step_at(level: float) -> BracketStep:
        z = model.solve(rhs_at(data, level), options, deadline)
        thr = np.einsum("ij,ij->i", T, z.X)
        return BracketStep(z.result, z.size, z.X, thr, z.violation, z.y, z.bound, z.pi)

    bracket = close_bracket(data, lo, hi, step_at, options, deadline)
    last = bracket.last
    if bracket.termination is Termination.ERROR:
        assert last is not None
        return _failed(problem, last.result, False, formulation, build)
    viol = 0.0
    if bracket.best is not None:
        assert isinstance(bracket.best.plan, np.ndarray)
        X_best, viol = bracket.best.plan, bracket.best.violation
    y_best = bracket.y if bracket.y.size else np.zeros(m)
    pi_best = bracket.prices if bracket.prices.size else np.zeros(n)
    hi, lo, lps, solve_time = bracket.hi, bracket.lo, bracket.lps, bracket.solve_time_s
    termination = bracket.termination
    thr = np.einsum("ij,ij->i", T, X_best)
    per_job = rho(data, thr)
    cert = Certificate(
        termination=termination,
        maximize=False,
        objective=hi,
        bound=lo,
        solver=last.result.solver if last else "closed form",
        solver_version=last.result.solver_version if last else "",
        formulation=f"{formulation} ({lps} LPs)",
        build_time_s=build,
        solve_time_s=solve_time,
        model_size=last.size if last else ModelSize(),
        max_violation=viol,
        detail=last.result.detail if last else "bracket closed without an LP",
    )
    normalized = np.divide(thr, data.iso, out=np.zeros(m), where=data.iso > 0)
    return _plan(
        problem, X_best, normalized, per_job, y_best, pi_best, cert, status, reason, state
    )
