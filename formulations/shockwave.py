"""Shockwave's planning-window program (A4.2-A4.5, docs/policies/market.md) on HiGHS MIP.

Homogeneous cluster of G devices, round length Delta (s), window of T rounds, n active jobs.

Variables: x[i,t] in {0,1} (job i holds its s_i devices in round t); p_i >= 0 epochs of
progress in the window (p_i <= E_i - e_i); lambda weights mu[i,k] >= 0 over the log
breakpoints b = (0, .2, .4, .6, .8, 1); Rem_i >= 0 (s); M >= max_i Rem_i (s).

    maximize  (1/(n T)) sum_i pi_i sum_k mu[i,k] log b_k  -  kappa M
    s.t.      sum_i s_i x[i,t] <= G                         every round t
              delta_i p_i <= Delta sum_t x[i,t]             work available in the window
              sum_k mu[i,k] b_k = (e_i + p_i) / E_i,  sum_k mu[i,k] = 1
              Rem_i >= P_i - delta_i p_i,  M >= Rem_i
              guard (first attempt only):  Rem_i <= g_i

with log 0 replaced by log 1e-6 and, by default (durations since arrival),
``g_i = share (rho_max (F*_i - a_i) - (now + Delta T - a_i))``, share = min(1, G/n);
compat-shockwave uses absolute timestamps, ``g_i = share (rho_max F*_i - (now + Delta T))``.
The clock "now" is the snapshot's time_s (upstream: Delta * r0).

**Why no SOS2 binaries (the lambda formulation).** The breakpoints (b_k, log b_k) are in
concave position (segment slopes 61.03, 3.47, 2.03, 1.44, 1.12, strictly decreasing). For a
fixed p_i, mu enters only the objective term pi_i/(nT) sum_k mu_k log b_k with a positive
weight, so an optimal mu maximizes sum_k mu_k log b_k over {mu >= 0, sum mu = 1,
sum mu b = v}: the upper concave envelope of the points at v, which is the piecewise-linear
interpolation between the two adjacent breakpoints. The SOS2 indicators z (6n binaries, 10n+
rows upstream) only force that adjacency, which optimality already gives, so dropping them
changes neither the optimal value nor the optimal x (A4.4); only x stays integer.
Consequence: for a fixed x, p_i = min(Delta N_i / delta_i, E_i - e_i) with N_i = sum_t x[i,t]
(the objective is non-decreasing in p_i), which `window_objective` uses to evaluate a plan
exactly.

**Guard and fallback (A4.3).** If the guarded program is infeasible (or reaches its time limit
without a plan; a solver error is reported as such, not papered over), every job gets the
priority pi_i = rho_i ** lambda_f when rho_i > rho_max, raised to rho_i ** 100 instead when
such a job also has less than one round of work left (P_i < Delta), else 1 (upstream's
`relax_finish_time_constraints`: the short-job case applies only to jobs behind schedule;
A4.3, docs/policies/market.md states this precedence), with rho_i = (now - a_i + P_i/share) /
(F*_i - a_i) (compat: absolute, (now + P_i/share) / F*_i). pi is capped at `MAX_PRIORITY`. The
program is re-solved without the guard and with pi, then the ranking MILP keeps each job's round
count N_i and minimizes sum_i pi_i/N_i sum_t t x[i,t] (front-loads jobs that are behind). Both
programs share the objective value (it depends on x only through N_i).

**Work-conserving fill (A4.5).** Leftover devices of each round go to unscheduled jobs with
work left, longest predicted remaining time first, when they fit.

**Inputs (A4.6).** When a job reports measured progress that is more than 40% off its profile,
all its epoch durations are scaled first (`recalibrated_durations`); delta_i, P_i, the time of
the epochs done and the fill all use the scaled profile. F*_i follows Shockwave's rule
(`update_reference`): on a job-set change (a job without state, or a state made with another
number of active jobs) every job gets its equal-share estimate a_i + (done + P_i)/share as its
latest estimate; F*_i = 0.9 x the time-weighted mean of its estimates + 0.1 x the latest one.
The state travels in the snapshot history and comes back in the plan (`reference_state`).

**Certificate.** The objective is recomputed from the MILP plan (before the fill) with
`window_objective`; the bound is HiGHS's MIP dual bound (the fill only adds rounds to jobs in
rounds with idle devices; it is a post-processing step outside the program, as upstream).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.formulations.shockwave_predict import (
    equal_share,
    interpolated_epoch_s,
    recalibrated_durations,
    reestimate_reference,
    reference_finish_time_s,
    reference_from_state,
    remaining_time_s,
)
from apportion.solver.backends.highs import (
    HighsSettings,
    LinearModel,
    highs_version,
    solve_highs,
)
from apportion.solver.backends.highs_startup import MILP
from apportion.solver.backends.status import SolverResult, SolverStatus
from apportion.solver.certificate import termination
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import (
    Compat,
    FloatArray,
    IntArray,
    Problem,
    ReferenceFinishState,
    SolveOptions,
)
from apportion.solver.parameters import ShockwaveParameters
from apportion.solver.result import (
    Certificate,
    JobStatus,
    ModelSize,
    Plan,
    Termination,
    WindowSection,
    relative_gap,
)

BREAKPOINTS = np.array([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
"""Log-interpolation breakpoints b_k of normalized progress."""
LOG_ZERO = math.log(1e-6)
"""log 0 is replaced by log(1e-6) (upstream; kept in both modes)."""
LOG_BREAKPOINTS = np.log(np.maximum(BREAKPOINTS, 1e-6))
DEFAULT_ROUND_S = 120.0
DEFAULT_GAP = 1e-3
"""MIP gap of a window solve called directly (through `solve()` the policy's registered
tolerance, the same 1e-3, applies)."""
DEFAULT_TIME_LIMIT_S = 15.0
"""Each MILP of a window stops after this many seconds when the request sets no limit
(Shockwave's own)."""
MAX_PRIORITY = 1e9
"""Cap on the fallback priority pi_i (rho ** 100 overflows double precision quickly)."""
Bool2D = NDArray[np.bool_]


@dataclass(frozen=True)
class WindowInputs:
    """One window's data for n active jobs (all arrays (n,))."""

    s: IntArray
    """Devices per job (gang)."""
    E: FloatArray
    """Total epochs."""
    e: FloatArray
    """Epochs done."""
    delta: FloatArray
    """Interpolated duration of one epoch (s)."""
    P: FloatArray
    """Predicted remaining runtime (s)."""
    G: int
    """Devices in the cluster."""
    round_s: float
    """Round length Delta (s)."""
    T: int
    """Rounds in the window."""
    kappa: float
    """Makespan-regularizer weight (per s)."""

    @property
    def n(self) -> int:
        return int(self.s.size)


@dataclass(frozen=True)
class WindowSolution:
    x: Bool2D
    """(T, n) plan."""
    objective: float
    """Objective recomputed from x (window_objective)."""
    bound: float | None
    status: SolverStatus
    solve_time_s: float
    build_time_s: float
    size: ModelSize
    detail: str = ""

    @property
    def has_plan(self) -> bool:
        """x is a feasible plan (an optimum or an incumbent at a limit)."""
        return bool(np.isfinite(self.objective))


def planned_progress(x: Bool2D, inp: WindowInputs) -> FloatArray:
    """p_i = min(Delta N_i / delta_i, E_i - e_i) epochs for the plan x (T, n)."""
    rounds = x.sum(axis=0).astype(np.float64)
    return np.asarray(np.minimum(inp.round_s * rounds / inp.delta, inp.E - inp.e), np.float64)


def log_progress(v: FloatArray) -> FloatArray:
    """The concave piecewise-linear interpolation of (b_k, log b_k) at v in [0, 1]."""
    return np.asarray(np.interp(np.clip(v, 0.0, 1.0), BREAKPOINTS, LOG_BREAKPOINTS), np.float64)


def window_objective(x: Bool2D, inp: WindowInputs, pi: FloatArray) -> float:
    """The exact objective of plan x (A4.4 closed form)."""
    p = planned_progress(x, inp)
    ell = log_progress((inp.e + p) / inp.E)
    rem = np.maximum(inp.P - inp.delta * p, 0.0)
    makespan = float(rem.max()) if rem.size else 0.0
    return float(pi @ ell) / (inp.n * inp.T) - inp.kappa * makespan


def _run(
    cost: FloatArray,
    lower: FloatArray,
    upper: FloatArray,
    A: sp.csc_matrix,
    row_lower: FloatArray,
    row_upper: FloatArray,
    integer: NDArray[np.bool_],
    maximize: bool,
    gap: float,
    deadline: Deadline,
    threads: int,
) -> SolverResult:
    """One MILP (an LP when nothing is integer), stopped at `deadline` or after
    `DEFAULT_TIME_LIMIT_S` when the deadline is further or absent."""
    limited = deadline.within(DEFAULT_TIME_LIMIT_S)
    model = LinearModel(cost, A, row_lower, row_upper, lower, upper,
                        integer if integer.any() else None, maximize)
    # a MILP HiGHS could not stop in the time left is not started
    settings = HighsSettings(mip_rel_gap=float(gap), mip_abs_gap=0.0 if gap == 0 else 1e-6,
                             seed=0, threads=threads, startup=MILP)
    return solve_highs(model, settings, limited)


def solve_window(
    inp: WindowInputs,
    pi: FloatArray,
    guard: FloatArray | None = None,
    gap: float = DEFAULT_GAP,
    deadline: Deadline = NO_DEADLINE,
    threads: int = 0,
    relax: bool = False,
) -> WindowSolution:
    """Solve the window program (with the guard Rem_i <= guard_i when given; `relax` drops
    integrality, for the LP-relaxation bound)."""
    started = time.perf_counter()
    n, T, K = inp.n, inp.T, BREAKPOINTS.size
    if guard is not None and np.any(guard < 0):
        size = ModelSize()
        return WindowSolution(
            np.zeros((T, n), bool),
            float("nan"),
            None,
            SolverStatus.INFEASIBLE,
            0.0,
            0.0,
            size,
            "guard infeasible before solving: some job cannot meet it even with Rem = 0",
        )
    nx = n * T
    col_p = nx + np.arange(n)
    col_mu = nx + n + np.arange(n * K).reshape(n, K)
    col_rem = nx + n + n * K + np.arange(n)
    col_m = nx + n + n * K + n
    num_col = col_m + 1
    jobs = np.arange(n)
    x_cols = jobs[:, None] * T + np.arange(T)[None, :]  # (n, T)
    r: list[IntArray] = []
    c: list[IntArray] = []
    v: list[FloatArray] = []
    # rows 0..T-1: capacity
    r.append(np.tile(np.arange(T), n))
    c.append(x_cols.ravel())
    v.append(np.repeat(inp.s.astype(np.float64), T))
    base = T
    # work: delta p - Delta sum_t x <= 0
    r += [base + jobs, np.repeat(base + jobs, T)]
    c += [col_p, x_cols.ravel()]
    v += [inp.delta, np.full(nx, -inp.round_s)]
    base += n
    # interpolation: sum_k b_k mu - p/E = e/E
    r += [np.repeat(base + jobs, K), base + jobs]
    c += [col_mu.ravel(), col_p]
    v += [np.tile(BREAKPOINTS, n), -1.0 / inp.E]
    base += n
    # convexity
    r.append(np.repeat(base + jobs, K))
    c.append(col_mu.ravel())
    v.append(np.ones(n * K))
    base += n
    # remaining: Rem + delta p >= P
    r += [base + jobs, base + jobs]
    c += [col_rem, col_p]
    v += [np.ones(n), inp.delta]
    base += n
    # makespan: M - Rem >= 0
    r += [base + jobs, base + jobs]
    c += [np.full(n, col_m), col_rem]
    v += [np.ones(n), -np.ones(n)]
    rows = base + n
    A = sp.csc_matrix(
        (np.concatenate(v), (np.concatenate(r), np.concatenate(c))), shape=(rows, num_col)
    )
    inf = math.inf
    row_lower = np.concatenate(
        [np.full(T + n, -inf), inp.e / inp.E, np.ones(n), inp.P, np.zeros(n)]
    )
    row_upper = np.concatenate(
        [np.full(T, float(inp.G)), np.zeros(n), inp.e / inp.E, np.ones(n), np.full(2 * n, inf)]
    )
    cost = np.zeros(num_col)
    cost[col_mu] = (pi[:, None] * LOG_BREAKPOINTS[None, :]) / (n * T)
    cost[col_m] = -inp.kappa
    lower = np.zeros(num_col)
    upper = np.full(num_col, inf)
    upper[:nx] = 1.0
    upper[col_p] = inp.E - inp.e
    if guard is not None:
        upper[col_rem] = guard
    integer = np.zeros(num_col, bool)
    if not relax:
        integer[:nx] = True
    build = time.perf_counter() - started
    result = _run(cost, lower, upper, A, row_lower, row_upper, integer, True, gap, deadline,
                  threads)
    status, text, elapsed, size = result.status, result.detail, result.solve_time_s, result.size
    if not result.has_solution:
        return WindowSolution(
            np.zeros((T, n), bool), float("nan"), None, status, elapsed, build, size, text
        )
    values = result.x
    if relax:
        relaxed = float(result.objective or 0.0)
        x = values[:nx].reshape(n, T).T > 0.5
        return WindowSolution(x, relaxed, relaxed, status, elapsed, build, size, text)
    x = values[:nx].reshape(n, T).T > 0.5
    bound = result.bound
    objective = window_objective(x, inp, pi)
    if bound is not None:
        bound = max(bound, objective)  # the bound is an upper bound on every plan
    return WindowSolution(x, objective, bound, status, elapsed, build, size, text)


def rank_rounds(
    rounds: IntArray,
    s: IntArray,
    pi: FloatArray,
    G: int,
    T: int,
    deadline: Deadline = NO_DEADLINE,
    threads: int = 0,
) -> tuple[Bool2D | None, float]:
    """The ranking MILP (A4.3): keep N_i = rounds[i], minimize sum_i pi_i/N_i sum_t t x[i,t]
    under capacity. Returns ((T, n) plan or None on failure, solve time)."""
    n = s.size
    nx = n * T
    jobs = np.arange(n)
    x_cols = jobs[:, None] * T + np.arange(T)[None, :]
    r = np.concatenate([np.tile(np.arange(T), n), np.repeat(T + jobs, T)])
    c = np.concatenate([x_cols.ravel(), x_cols.ravel()])
    v = np.concatenate([np.repeat(s.astype(np.float64), T), np.ones(nx)])
    A = sp.csc_matrix((v, (r, c)), shape=(T + n, nx))
    weight = np.where(rounds > 0, pi / np.maximum(rounds, 1), 0.0)
    weight = weight / max(float(weight.max(initial=0.0)), 1e-300)
    cost = (weight[:, None] * (np.arange(T)[None, :] + 1.0)).ravel()
    row_lower = np.concatenate([np.full(T, -math.inf), rounds.astype(np.float64)])
    row_upper = np.concatenate([np.full(T, float(G)), rounds.astype(np.float64)])
    result = _run(cost, np.zeros(nx), np.ones(nx), A, row_lower, row_upper, np.ones(nx, bool),
                  False, 1e-9, deadline, threads)
    if not result.has_solution:
        return None, result.solve_time_s
    return result.x.reshape(n, T).T > 0.5, result.solve_time_s


def fill(x: Bool2D, s: IntArray, P: FloatArray, G: int) -> Bool2D:
    """Work-conserving fill: per round, leftover devices go to unscheduled jobs with work left,
    longest predicted remaining time first (ties: lower index), when they fit."""
    out = x.copy()
    order = sorted(range(s.size), key=lambda i: (-P[i], i))
    for t in range(out.shape[0]):
        free = G - int(s @ out[t])
        for i in order:
            if free <= 0:
                break
            if not out[t, i] and P[i] > 0 and s[i] <= free:
                out[t, i] = True
                free -= int(s[i])
    return out


def priorities(
    rho: FloatArray, P: FloatArray, round_s: float, exponent: float, rho_max: float
) -> FloatArray:
    """Fallback pi_i (A4.3): for rho > rho_max, rho^100 if less than one round of work is left,
    else rho^lambda_f; 1 otherwise (upstream `relax_finish_time_constraints`). Capped at
    MAX_PRIORITY."""
    with np.errstate(over="ignore"):
        behind = np.power(np.maximum(rho, 0.0), exponent)
        short = np.power(np.maximum(rho, 0.0), 100.0)
    few = round_s > P
    pi = np.where(rho > rho_max, np.where(few, short, behind), 1.0)
    return np.asarray(
        np.minimum(np.nan_to_num(pi, nan=1.0, posinf=MAX_PRIORITY), MAX_PRIORITY), np.float64
    )


@dataclass(frozen=True)
class ShockwaveState:
    """Per active job: the window inputs and the fairness state."""

    inputs: WindowInputs
    arrival: FloatArray
    reference: FloatArray
    """F*_i (absolute s) from the updated state (A4.6)."""
    guard: FloatArray
    rho: FloatArray
    reference_state: ReferenceFinishState
    """The F* bookkeeping of the active jobs after this call."""
    reestimated: bool
    """True when the job set changed and every job got a new estimate."""


def update_reference(
    problem: Problem, active: IntArray, estimate: FloatArray, now: float
) -> tuple[ReferenceFinishState, FloatArray, bool]:
    """F*_i of the active jobs under Shockwave's rule (A4.6): (state after this call, F*,
    whether the job set changed).

    The job set changed when some active job has no state (a new job) or some job's state
    was made with a different number of active jobs; then every active job gets `estimate`
    (its equal-share estimate now) as its latest estimate (`reestimate_reference`). F* is
    then `reference_from_state` at `now`. A job with a given reference_finish_time_s > 0 but
    no state (a client of the earlier contract) is taken to have had that value as its
    estimate since now: kept until the job set changes."""
    n = active.size
    hist = problem.history
    prior = hist.reference_state.take(active)
    given = hist.reference_finish_time_s[active]
    has = ~np.isnan(prior.estimate_s)
    legacy = ~has & (given > 0)
    if legacy.any():
        prior = ReferenceFinishState(
            estimate_s=np.where(legacy, given, prior.estimate_s),
            estimate_time_s=np.where(legacy, now, prior.estimate_time_s),
            earlier_average_s=np.where(legacy, 0.0, prior.earlier_average_s),
            earlier_weight_s=np.where(legacy, 0.0, prior.earlier_weight_s),
            job_count=np.where(legacy, n, prior.job_count),
        )
    new = ~has & ~legacy
    known = has & (prior.job_count > 0)
    changed = bool(new.any() or np.any(prior.job_count[known] != n))
    state = reestimate_reference(prior, estimate, now, n) if changed else prior
    return state, reference_from_state(state, now), changed


def prepare(
    problem: Problem,
    params: ShockwaveParameters,
    compat: Compat,
    active: IntArray,
) -> ShockwaveState:
    """Window inputs for the active jobs (indices into the problem's jobs)."""
    jobs = problem.jobs
    G = int(problem.cluster.count.sum())
    round_s = problem.round_duration_s or DEFAULT_ROUND_S
    n = active.size
    share = equal_share(G, n)
    E = jobs.total_epochs[active].astype(np.float64)
    e = jobs.epochs_done[active].astype(np.float64)
    durations = [jobs.epoch_duration_s[i] for i in active]
    measured_s, measured_epochs = jobs.measured_run_time_s, jobs.measured_epochs
    durations = [
        recalibrated_durations(d, float(measured_s[i]), float(measured_epochs[i]))
        for d, i in zip(durations, active, strict=True)
    ]
    batches = [jobs.epoch_batch_size[i] for i in active]
    delta = np.array([interpolated_epoch_s(d, int(k)) for d, k in zip(durations, e, strict=True)])
    P = np.array(
        [
            remaining_time_s(d, b, int(k), params.predictor)
            for d, b, k in zip(durations, batches, e, strict=True)
        ]
    )
    arrival = jobs.arrival_time_s[active]
    done_s = np.array([float(np.sum(d[: int(k)])) for d, k in zip(durations, e, strict=True)])
    estimate = np.array(
        [
            reference_finish_time_s(a, d, p, share)
            for a, d, p in zip(arrival, done_s, P, strict=True)
        ]
    )
    now = problem.time_s
    reference_state, reference, changed = update_reference(problem, active, estimate, now)
    T = params.planning_rounds
    if compat is Compat.SHOCKWAVE:
        guard = share * (params.rho_max * reference - (now + round_s * T))
        rho = (now + P / share) / reference
    else:
        span = np.maximum(reference - arrival, 1e-9)
        guard = share * (params.rho_max * span - (now + round_s * T - arrival))
        rho = (now - arrival + P / share) / span
    inputs = WindowInputs(
        s=jobs.scale_factor[active].astype(np.int64),
        E=E,
        e=e,
        delta=delta,
        P=P,
        G=G,
        round_s=round_s,
        T=T,
        kappa=params.makespan_weight,
    )
    return ShockwaveState(inputs, arrival, reference, guard, rho, reference_state, changed)


@dataclass(frozen=True)
class ShockwaveOutcome:
    """Everything one re-solve produced (the Plan is built from it)."""

    state: ShockwaveState
    branch: str
    """"guarded" or "fallback"."""
    pi: FloatArray
    """(n,) priorities used (1 in the guarded branch)."""
    solution: WindowSolution
    """The program that fixed the round counts (guarded, or fallback after the ranking)."""
    unranked: Bool2D | None
    """(T, n) fallback plan before the ranking MILP (None in the guarded branch)."""
    filled: Bool2D
    """(T, n) final plan after the work-conserving fill."""
    detail: str


def run_window(
    problem: Problem,
    params: ShockwaveParameters,
    compat: Compat,
    options: SolveOptions,
    active: IntArray,
    deadline: Deadline = NO_DEADLINE,
) -> ShockwaveOutcome:
    """Guarded attempt, fallback with priorities and ranking MILP, then the fill."""
    gap = options.relative_gap or DEFAULT_GAP
    state = prepare(problem, params, compat, active)
    inp = state.inputs
    pi = np.ones(inp.n)
    branch, detail, unranked = "guarded", "", None
    sol = solve_window(inp, pi, state.guard, gap, deadline, options.threads)
    if sol.status is SolverStatus.INFEASIBLE or (not sol.has_plan and sol.status.limit_reached):
        branch = "fallback"
        detail = f"guarded program: {sol.detail}; "
        pi = priorities(state.rho, inp.P, inp.round_s, params.fairness_exponent, params.rho_max)
        first = sol
        sol = solve_window(inp, pi, None, gap, deadline, options.threads)
        sol = WindowSolution(
            sol.x,
            sol.objective,
            sol.bound,
            sol.status,
            first.solve_time_s + sol.solve_time_s,
            first.build_time_s + sol.build_time_s,
            sol.size,
            sol.detail,
        )
        if sol.has_plan:
            unranked = sol.x
            ranked, ranking_time = rank_rounds(
                sol.x.sum(axis=0), inp.s, pi, inp.G, inp.T, deadline, options.threads
            )
            if ranked is not None:
                sol = WindowSolution(
                    ranked,
                    window_objective(ranked, inp, pi),
                    sol.bound,
                    sol.status,
                    sol.solve_time_s + ranking_time,
                    sol.build_time_s,
                    sol.size,
                    sol.detail,
                )
            else:
                detail += "ranking MILP failed, unranked plan kept; "
    filled = sol.x
    if params.work_conserving_fill and sol.has_plan:
        filled = fill(sol.x, inp.s, inp.P, inp.G)
    return ShockwaveOutcome(state, branch, pi, sol, unranked, filled, detail)


def solve_policy(
    problem: Problem,
    parameters: ShockwaveParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Entry point registered as `shockwave`."""
    params = parameters
    jobs = problem.jobs
    m, ntypes = jobs.num_jobs, problem.cluster.num_types
    T = params.planning_rounds
    finished = jobs.epochs_done >= jobs.total_epochs
    active = np.flatnonzero(~finished)
    status = tuple(JobStatus.FINISHED if f else JobStatus.ALLOCATED for f in finished)
    reasons = tuple("all epochs done" if f else "" for f in finished)
    formulation = "Shockwave planning window (A4.2)"
    reference = problem.history.reference_finish_time_s.copy()
    ref_state = problem.history.reference_state
    schedule = np.zeros((T, m), bool)
    if active.size == 0:
        cert = Certificate(
            Termination.OPTIMAL, True, 0.0, 0.0, formulation=formulation, detail="no active jobs"
        )
        return replace(
            Plan.empty(m, ntypes, cert),
            job_status=status,
            job_reason=reasons,
            window=WindowSection(schedule, reference, ref_state),
        )
    out = run_window(problem, params, compat, options, active, deadline)
    sol, inp = out.solution, out.state.inputs
    n = inp.n
    has_plan = sol.has_plan
    objective = sol.objective if has_plan else None
    bound = sol.bound if has_plan else None
    cert = Certificate(
        termination=termination(sol.status, has_plan, relative_gap(objective, bound),
                                options.relative_gap),
        maximize=True,
        objective=objective,
        bound=bound,
        solver="highs",
        solver_version=highs_version(),
        formulation=f"{formulation}, {out.branch} branch, lambda formulation (no SOS2 binaries)",
        build_time_s=sol.build_time_s,
        solve_time_s=sol.solve_time_s,
        model_size=sol.size,
        detail=f"{out.detail}{sol.detail}",
    )
    schedule[:, active] = out.filled
    type_index = int(np.argmax(problem.cluster.count))
    share = np.zeros((m, ntypes))
    share[:, type_index] = schedule[0].astype(np.float64)
    p = planned_progress(sol.x, inp) if has_plan else np.zeros(n)
    progress = np.zeros(m)
    progress[active] = (inp.e + p) / inp.E
    value = np.zeros(m)
    value[active] = out.pi * log_progress((inp.e + p) / inp.E) / (n * T)
    reference[active] = out.state.reference
    ref_state = _put_state(ref_state, active, out.state.reference_state)
    return Plan(
        time_share=share,
        effective_throughput=jobs.throughput[:, type_index] * share[:, type_index],
        normalized_throughput=progress,
        objective_value=value,
        job_dual=np.zeros(m),
        accelerator_prices=np.zeros(ntypes),
        certificate=cert,
        job_status=status,
        job_reason=reasons,
        window=WindowSection(schedule, reference, ref_state),
    )


def _put_state(
    into: ReferenceFinishState, index: IntArray, rows: ReferenceFinishState
) -> ReferenceFinishState:
    """`into` with the entries of jobs `index` replaced by `rows`."""
    out = ReferenceFinishState(
        estimate_s=into.estimate_s.copy(),
        estimate_time_s=into.estimate_time_s.copy(),
        earlier_average_s=into.earlier_average_s.copy(),
        earlier_weight_s=into.earlier_weight_s.copy(),
        job_count=into.job_count.copy(),
    )
    out.estimate_s[index] = rows.estimate_s
    out.estimate_time_s[index] = rows.estimate_time_s
    out.earlier_average_s[index] = rows.earlier_average_s
    out.earlier_weight_s[index] = rows.earlier_weight_s
    out.job_count[index] = rows.job_count
    return out


def window_problem(
    gpus: int,
    scale_factor: list[int] | IntArray,
    durations: list[list[float]] | list[FloatArray],
    batch_sizes: list[list[int]] | list[IntArray],
    epochs_done: list[int] | IntArray,
    arrival_time_s: list[float] | FloatArray | None = None,
    reference_finish_time_s: list[float] | FloatArray | None = None,
    time_s: float = 0.0,
    round_duration_s: float = 0.0,
) -> Problem:
    """Convenience constructor (tests, benchmarks): one accelerator type with `gpus` devices,
    one job per profile (total epochs = profile length). No validation beyond shapes."""
    from apportion.solver.validation import make_problem

    m = len(durations)
    base = make_problem(["gpu"], [gpus], np.ones((m, 1)), scale_factor=list(scale_factor))
    jobs = replace(
        base.jobs,
        arrival_time_s=np.zeros(m) if arrival_time_s is None else np.asarray(arrival_time_s, float),
        epochs_done=np.asarray(epochs_done, np.int64),
        total_epochs=np.array([len(d) for d in durations], np.int64),
        epoch_duration_s=tuple(np.asarray(d, np.float64) for d in durations),
        epoch_batch_size=tuple(np.asarray(b, np.int64) for b in batch_sizes),
    )
    reference = (
        np.zeros(m) if reference_finish_time_s is None else np.asarray(reference_finish_time_s)
    )
    history = replace(base.history, reference_finish_time_s=reference.astype(np.float64))
    return replace(
        base, jobs=jobs, history=history, time_s=time_s, round_duration_s=round_duration_s
    )
