"""Heterogeneity-aware Fisher market: the Eisenberg–Gale program (A4.1, docs/policies/market.md).

Buyers are the jobs i with budgets B_i > 0 (equal budgets 1, or the priority weights w_i).
Goods are device-time on each accelerator type j, supply W[j] devices. Job i's utility is its
normalized throughput

    u_i(X) = sum_j a[i,j] X[i,j],   a[i,j] = T[i,j] / prop_i   (dimensionless)

(prop_i the proportional-share throughput of A1.3; scaling a buyer's utility by a constant only
shifts the objective by a constant, so the normalization changes no allocation or price; it
keeps the rows O(1)). X[i,j] is the fraction of time job i runs on type j, holding s_i devices
while it runs, so it consumes y[i,j] = s_i X[i,j] device-time. The program:

    maximize   sum_i B_i log u_i
    subject to u_i <= sum_j a[i,j] X[i,j]       (every job i;  dual mu_i >= 0)
               sum_i s_i X[i,j] <= W[j]         (every type j; dual q_j >= 0: the price)
               sum_j X[i,j] <= 1                (every job i;  dual sigma_i >= 0: time budget)
               X >= 0, X[i,j] = 0 on cells the job cannot use (T = 0 or s_i > W[j], A1.2 B4).

**Equilibrium (KKT) conditions of this market** (derived from the Lagrangian
sum_i B_i log u_i + sum_i mu_i (a_i.X_i - u_i) + sum_j q_j (W_j - sum_i s_i X_ij)
+ sum_i sigma_i (1 - sum_j X_ij)):

1. mu_i = B_i / u_i (stationarity in u_i).
2. Stationarity in X[i,j] (usable cells): ``a[i,j] B_i / u_i <= s_i q_j + sigma_i``, with
   equality whenever X[i,j] > 0. In per-device units (a[i,j]/s_i utility per device-time):
   ``(a[i,j]/s_i) / (q_j + sigma_i/s_i) <= u_i / B_i``. So job i buys only goods of maximum
   bang per buck at its *effective* prices q_j + sigma_i/s_i; when its time budget does not
   bind (sigma_i = 0) these are the market prices and this is the textbook condition
   ``a'[i,j]/q_j <= u_i/B_i`` with a' = a/s.
3. Budgets: multiplying 2 (at equality) by X[i,j], summing over j and using
   sigma_i (1 - sum_j X_ij) = 0: ``spending_i = sum_j q_j s_i X[i,j] = B_i - sigma_i``.
   The budget is spent exactly when the time budget does not bind; a job whose time budget
   binds spends B_i - sigma_i <= B_i (it cannot use more money: it already runs all the time).
4. Market clearing: ``q_j > 0  =>  sum_i s_i X[i,j] = W[j]``; summing,
   ``sum_j q_j W_j = sum_i spending_i = sum_i B_i - sum_i sigma_i``.

Consequences, for jobs whose time budget does not bind (sigma_i = 0):

5. Proportionality (sharing incentive) with equal budgets:
   ``u_i >= sum_j (a[i,j]/s_i) W_j / m`` (from 2: a[i,j]/s_i <= (u_i/B) q_j, summed with
   weights W_j/m, and sum_j q_j W_j <= m B by 4).
6. Envy-freeness with equal budgets and equal scale factors: ``u_i(X_i) >= u_i(X_k)``
   (from 2: sum_j a[i,j] X[k,j] <= (u_i/B) s sum_j q_j X[k,j] = (u_i/B) spending_k <= u_i).
7. Pareto optimality (always): no feasible X' has u(X') >= u(X*) with one strict inequality
   (the objective is strictly increasing in every u_i).

Utilities u* are unique (strictly concave objective in u), X need not be. Scaling all budgets
by beta > 0 scales (q, sigma) by beta and leaves u* (and the set of optimal X) unchanged.

**Certificate, independent of the solver.** The returned X is repaired onto the feasible set
(clip to >= 0, zero unusable cells, scale down rows over the time budget and columns over
capacity) and its objective recomputed. For any q >= 0, sigma >= 0, the Lagrangian dual

    D(q, sigma) = sum_j q_j W_j + sum_i sigma_i + sum_i B_i (log(B_i / c_i) - 1),
    c_i = min_{usable j} (s_i q_j + sigma_i) / a[i,j]   (cost of one unit of utility)

is a proven upper bound (job i maximizing B_i log u - c_i u gives B_i log(B_i/c_i) - B_i).
The solver's duals are clipped to >= 0, each sigma_i is re-optimized in closed form for the
given q, and D is reported as the bound. The objective can be near 0 on any instance (a sum of
logarithms), so the gap is measured against its natural scale max(1, sum_i B_i)
(`Certificate.gap_scale`): OPTIMAL when |objective - bound| <= tolerance * that scale.

Solved with Clarabel (interior point, exponential cones ``(t_i, 1, u_i) in K_exp`` meaning
t_i <= log u_i) on the usable cells only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.formulations.gavel_lp import JobClasses
from apportion.solver.backends.clarabel import Cone, ConeKind, ConicModel, solve_clarabel
from apportion.solver.backends.lp import solve_lp
from apportion.solver.backends.status import SolverStatus
from apportion.solver.certificate import termination
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import Compat, FloatArray, Problem, SolveOptions, SolverPreference
from apportion.solver.parameters import BudgetSource, FisherMarketParameters
from apportion.solver.result import (
    Certificate,
    JobStatus,
    MarketSection,
    ModelSize,
    Plan,
    Termination,
    relative_gap,
)

ZERO = 1e-9
"""Entries of X below this are set to 0 (A1.4)."""
POLISH_SLACK = 1e-7
"""The polished vertex X is returned unless its objective is worse than the interior-point X
by more than this (units of sum_i B_i): its spending and clearing are exact, its objective is
within the duals' accuracy."""


@dataclass(frozen=True)
class MarketSolution:
    """A market equilibrium for m' buyers (the servable jobs) and n goods."""

    X: FloatArray
    """(m', n) time shares, repaired onto the feasible set."""
    utility: FloatArray
    """(m',) u_i = sum_j a[i,j] X[i,j] (dimensionless)."""
    prices: FloatArray
    """(n,) q_j >= 0, budget units per device of type j (per unit time)."""
    time_dual: FloatArray
    """(m',) sigma_i >= 0, budget units: the value of one more unit of time budget."""
    spending: FloatArray
    """(m',) sum_j q_j s_i X[i,j] (budget units)."""
    objective: float
    """sum_i B_i log u_i of the repaired X (-inf if some u_i = 0)."""
    bound: float
    """D(q, sigma) >= optimum (+inf if the duals do not price every job)."""
    max_violation: float
    status: SolverStatus
    solver_version: str
    solve_time_s: float
    size: ModelSize
    detail: str = ""


def solve_market(
    a: FloatArray,
    s: FloatArray,
    W: FloatArray,
    budgets: FloatArray,
    deadline: Deadline = NO_DEADLINE,
    time_budget: FloatArray | None = None,
) -> MarketSolution:
    """Solve the Eisenberg–Gale program for utilities `a` (m, n; 0 = cell not allowed), scale
    factors `s` (m,), supplies `W` (n,) and budgets (m,) > 0. Every row of `a` needs a positive
    entry on a type with W > 0 (the caller removes the others). `time_budget` (m,): each
    job's bound on sum_j X[i,j]; None = 1 (one gang: Gavel's market); `uncapped_budget` gives
    the plain Fisher market."""
    cap = np.ones(a.shape[0]) if time_budget is None else time_budget
    m, n = a.shape
    rows_idx, cols_idx = np.nonzero(a > 0)
    k = rows_idx.size
    # variables: x (k cells), u (m), t (m); minimize -sum B t
    nv = k + 2 * m
    cost = np.concatenate([np.zeros(k + m), -budgets])
    cells = np.arange(k)
    u_col = k + np.arange(m)
    t_col = k + m + np.arange(m)
    blocks_r: list[NDArray[np.int64]] = []
    blocks_c: list[NDArray[np.int64]] = []
    blocks_v: list[FloatArray] = []

    def add(r: NDArray[np.int64], c: NDArray[np.int64], v: FloatArray) -> None:
        blocks_r.append(np.asarray(r, np.int64))
        blocks_c.append(np.asarray(c, np.int64))
        blocks_v.append(np.asarray(v, np.float64))

    # rows 0..m-1: u_i - sum a x <= 0
    add(np.arange(m), u_col, np.ones(m))
    add(rows_idx, cells, -a[rows_idx, cols_idx])
    # rows m..m+n-1: capacity
    add(m + cols_idx, cells, s[rows_idx])
    # rows m+n..2m+n-1: time budget
    add(m + n + rows_idx, cells, np.ones(k))
    # rows 2m+n..2m+n+k-1: -x <= 0
    base = 2 * m + n
    add(base + cells, cells, -np.ones(k))
    lin_rows = base + k
    h_lin = np.concatenate([np.zeros(m), W, cap, np.zeros(k)])
    # exponential cones: rows (t_i, 1, u_i)
    cone_rows = lin_rows + 3 * np.arange(m)
    add(cone_rows, t_col, -np.ones(m))
    add(cone_rows + 2, u_col, -np.ones(m))
    h_exp = np.zeros(3 * m)
    h_exp[1::3] = 1.0
    G = sp.csc_matrix(
        (np.concatenate(blocks_v), (np.concatenate(blocks_r), np.concatenate(blocks_c))),
        shape=(lin_rows + 3 * m, nv),
    )
    h = np.concatenate([h_lin, h_exp])
    cones = (Cone(ConeKind.NONNEGATIVE, lin_rows),) + (Cone(ConeKind.EXPONENTIAL, 3),) * m
    solution = solve_clarabel(ConicModel(cost, G, h, cones), deadline=deadline)
    size, elapsed, text = solution.size, solution.solve_time_s, solution.detail
    status, z, x = solution.status, solution.row_dual, solution.x
    X = np.zeros((m, n))
    X[rows_idx, cols_idx] = x[:k]
    q = z[m : m + n]
    sigma = z[m + n : 2 * m + n]
    first = certify_market(a, s, W, budgets, X, q, sigma, status, solution.solver_version,
                           elapsed, size, text, cap)
    if not status.solved or deadline.expired():  # polishing is optional: the plan is certified
        return first
    started = time.perf_counter()
    polished = polish(a, s, W, budgets, first.prices, first.time_dual, deadline, cap)
    elapsed += time.perf_counter() - started
    if polished is None:
        return first
    second = certify_market(a, s, W, budgets, polished, q, sigma, status,
                            solution.solver_version, elapsed, size, text, cap)
    prices = polish_prices(a, s, W, budgets, second.X, cap)
    if prices is not None:
        third = certify_market(
            a, s, W, budgets, second.X, prices[0], prices[1], status, solution.solver_version,
            elapsed, size, text, cap,
        )
        if third.bound <= second.bound:
            second = third
    slack = POLISH_SLACK * max(1.0, float(budgets.sum()))
    return second if second.objective >= first.objective - slack else first


def solve_market_by_class(
    a: FloatArray,
    s: FloatArray,
    W: FloatArray,
    budgets: FloatArray,
    deadline: Deadline = NO_DEADLINE,
    time_budget: FloatArray | None = None,
) -> MarketSolution:
    """`solve_market` with identical buyers merged (same utility row, scale factor, budget and
    time budget): exact, and the program shrinks from one buyer per job to one per class.

    Why it is exact: the Eisenberg-Gale program is concave and invariant under swapping
    identical buyers, so averaging an optimum over each class is an optimum in which a class's
    k members hold equal rows x. Those symmetric points are the points of the merged market
    with buyer budget k B, time budget k L and holdings X = k x: its objective k B log(k u)
    differs from k B log u by the constant k B log k. The classes' equilibrium is spread evenly
    over the members and certified again on the whole market (objective and dual bound per
    job), so the reported certificate does not rely on the argument."""
    m = a.shape[0]
    cap = np.ones(m) if time_budget is None else time_budget
    classes = JobClasses.of(a, s, budgets, cap)
    if classes.rep.size == m:
        return solve_market(a, s, W, budgets, deadline, time_budget)
    rep, of, k = classes.rep, classes.inverse, classes.count
    merged = solve_market(a[rep], s[rep], W, k * budgets[rep], deadline, k * cap[rep])
    X = merged.X[of] / k[of, None]
    detail = "; ".join(filter(None, [merged.detail, f"{rep.size} classes of identical jobs"]))
    return certify_market(a, s, W, budgets, X, merged.prices, merged.time_dual[of],
                          merged.status, merged.solver_version, merged.solve_time_s,
                          merged.size, detail, time_budget)


def polish_prices(
    a: FloatArray, s: FloatArray, W: FloatArray, budgets: FloatArray, X: FloatArray,
    time_budget: FloatArray,
) -> tuple[FloatArray, FloatArray] | None:
    """(q, sigma) solving the equilibrium conditions on the support of a vertex X in least
    squares: s_i q_j + sigma_i = a_ij B_i / u_i where X_ij > 0, sigma_i = 0 where the time
    budget is slack, q_j = 0 where capacity is slack. Any (q, sigma) >= 0 gives a valid
    bound, so the caller keeps these only when their bound is tighter."""
    m, n = a.shape
    u = np.einsum("ij,ij->i", a, X)
    if np.any(u <= 0):
        return None
    free_q = s @ X >= W - 1e-9
    free_sigma = X.sum(axis=1) >= time_budget - 1e-9
    rows_idx, cols_idx = np.nonzero(X > ZERO)
    var_q = -np.ones(n, np.int64)
    var_q[free_q] = np.arange(int(free_q.sum()))
    var_s = -np.ones(m, np.int64)
    var_s[free_sigma] = int(free_q.sum()) + np.arange(int(free_sigma.sum()))
    nvar = int(free_q.sum() + free_sigma.sum())
    M = np.zeros((rows_idx.size, nvar))
    rhs = a[rows_idx, cols_idx] * budgets[rows_idx] / u[rows_idx]
    for e, (i, j) in enumerate(zip(rows_idx, cols_idx, strict=True)):
        if var_q[j] >= 0:
            M[e, var_q[j]] = s[i]
        if var_s[i] >= 0:
            M[e, var_s[i]] = 1.0
    if nvar == 0:
        return None
    sol = np.linalg.lstsq(M, rhs, rcond=None)[0]
    q = np.zeros(n)
    sigma = np.zeros(m)
    q[free_q] = sol[var_q[free_q]]
    sigma[free_sigma] = sol[var_s[free_sigma]]
    return np.clip(q, 0.0, None), np.clip(sigma, 0.0, None)


def polish(
    a: FloatArray,
    s: FloatArray,
    W: FloatArray,
    budgets: FloatArray,
    q: FloatArray,
    sigma: FloatArray,
    deadline: Deadline = NO_DEADLINE,
    time_budget: FloatArray | None = None,
) -> FloatArray | None:
    """A vertex X whose utilities match the ones the duals imply.

    An interior-point X is accurate only to about the square root of the gap (the objective is
    flat near the optimum), which shows in spending and clearing. The prices are accurate, and
    they determine the unique optimal utilities u*_i = B_i / c_i (condition 2). The LP
    ``maximize z s.t. a_i.X_i >= z u*_i, capacity, time budgets`` (HiGHS simplex) has optimum
    z = 1 up to the duals' error (z > 1 would contradict the Pareto optimality of u*), and its
    vertex X reaches u* to the simplex tolerance. None if the LP fails."""
    c = _unit_cost(a, s, q, sigma)
    if np.any(~np.isfinite(c)) or np.any(c <= 0):
        return None
    target = budgets / c
    m, n = a.shape
    rows_idx, cols_idx = np.nonzero(a > 0)
    k = rows_idx.size
    cells = np.arange(k)
    r = np.concatenate([rows_idx, np.arange(m), m + cols_idx, m + n + rows_idx])
    col = np.concatenate([cells, np.full(m, k), cells, cells])
    val = np.concatenate([-a[rows_idx, cols_idx], target, s[rows_idx], np.ones(k)])
    A = sp.csc_matrix((val, (r, col)), shape=(2 * m + n, k + 1))
    b = np.concatenate([np.zeros(m), W, np.ones(m) if time_budget is None else time_budget])
    cost = np.zeros(k + 1)
    cost[k] = 1.0
    result = solve_lp(cost, A, b, SolverPreference.HIGHS, deadline)
    if not result.solved:
        return None
    X = np.zeros((m, n))
    X[rows_idx, cols_idx] = result.x[:k]
    return X


def repair(a: FloatArray, s: FloatArray, W: FloatArray, X: FloatArray,
           time_budget: FloatArray | None = None) -> FloatArray:
    """Project X onto B1-B4 (the time budget `time_budget`, default 1) by clipping and scaling
    down (never raises an entry)."""
    cap = np.ones(a.shape[0]) if time_budget is None else time_budget
    Y = np.where(a > 0, np.clip(X, 0.0, cap[:, None]), 0.0)
    Y[Y < ZERO] = 0.0
    rows = Y.sum(axis=1)
    Y = Y / np.maximum(1.0, rows / cap)[:, None]
    use = s @ Y
    over = np.where(use > W, W / np.where(use > 0, use, 1.0), 1.0)
    return np.asarray(Y * over[None, :], dtype=np.float64)


def dual_bound(
    a: FloatArray,
    s: FloatArray,
    W: FloatArray,
    budgets: FloatArray,
    q: FloatArray,
    sigma: FloatArray,
    time_budget: FloatArray | None = None,
) -> tuple[float, FloatArray]:
    """(D(q, sigma*), sigma*) with sigma* = argmin over sigma >= 0 of D for the given q >= 0
    (exact: D is separable in sigma_i, convex and piecewise smooth; see `_best_sigma`); the
    time budgets `time_budget` (default 1) weigh sigma in D."""
    cap = np.ones(a.shape[0]) if time_budget is None else time_budget
    best = _best_sigma(a, s, q, budgets, sigma, cap)
    c = _unit_cost(a, s, q, best)
    if np.any(c <= 0):
        return float("inf"), best
    value = float(q @ W + cap @ best + np.sum(budgets * (np.log(budgets / c) - 1.0)))
    return value, best


def _unit_cost(a: FloatArray, s: FloatArray, q: FloatArray, sigma: FloatArray) -> FloatArray:
    """c_i = min over usable j of (s_i q_j + sigma_i) / a[i,j]."""
    ratio = np.where(
        a > 0, (s[:, None] * q[None, :] + sigma[:, None]) / np.where(a > 0, a, 1.0), np.inf
    )
    return np.asarray(ratio.min(axis=1), dtype=np.float64)


def _best_sigma(
    a: FloatArray, s: FloatArray, q: FloatArray, budget: FloatArray, hint: FloatArray,
    time_budget: FloatArray,
) -> FloatArray:
    """Per job i: argmin_{sigma >= 0} L_i sigma - B_i log c_i(sigma), c_i(sigma) =
    min_j (s_i q_j + sigma)/a[i,j], L_i the job's time budget (all jobs at once).

    On a piece where cell j attains the minimum, the derivative is L - B/(s q_j + sigma), zero
    at sigma = B/L - s q_j. The function is convex (c is concave and positive), so the minimizer
    is among {0}, the stationary points and the kinks where two cells tie; evaluate them all
    (any sigma >= 0 gives a valid bound, so the solver's own value `hint` is a candidate too)."""
    m, n = a.shape
    usable = a > 0
    safe = np.where(usable, a, 1.0)
    price = s[:, None] * q[None, :]  # (m, n)
    parts = [np.zeros((m, 1)), np.maximum(hint, 0.0)[:, None],
             np.where(usable, np.maximum((budget / time_budget)[:, None] - price, 0.0), 0.0)]
    j, k = np.triu_indices(n, 1)
    if j.size:
        aj, ak = a[:, j], a[:, k]
        with np.errstate(divide="ignore", invalid="ignore"):
            kink = s[:, None] * (q[k][None, :] * aj - q[j][None, :] * ak) / (ak - aj)
        ok = usable[:, j] & usable[:, k] & (aj != ak) & (kink > 0)
        parts.append(np.where(ok, kink, 0.0))
    candidates = np.concatenate(parts, axis=1)  # (m, K)
    cost = np.where(usable[:, None, :],
                    (price[:, None, :] + candidates[:, :, None]) / safe[:, None, :], np.inf)
    c = cost.min(axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(c > 0, time_budget[:, None] * candidates
                         - budget[:, None] * np.log(np.where(c > 0, c, 1.0)), np.inf)
    return np.asarray(candidates[np.arange(m), np.argmin(value, axis=1)], dtype=np.float64)


def certify_market(
    a: FloatArray,
    s: FloatArray,
    W: FloatArray,
    budgets: FloatArray,
    X: FloatArray,
    q: FloatArray,
    sigma: FloatArray,
    status: SolverStatus,
    solver_version: str,
    solve_time_s: float,
    size: ModelSize,
    detail: str = "",
    time_budget: FloatArray | None = None,
) -> MarketSolution:
    """Repaired primal objective and dual bound for a candidate (X, q, sigma)."""
    cap = np.ones(a.shape[0]) if time_budget is None else time_budget
    raw = np.where(a > 0, X, 0.0)
    use = s @ np.clip(raw, 0, None)
    violation = max(
        float(np.max(use - W, initial=0.0)),
        float(np.max(np.clip(raw, 0, None).sum(axis=1) - cap, initial=0.0)),
        float(np.max(-raw, initial=0.0)),
    )
    Xr = repair(a, s, W, X, cap)
    u = np.einsum("ij,ij->i", a, Xr)
    objective = float(np.sum(budgets * np.log(u))) if np.all(u > 0) else float("-inf")
    q = np.clip(q, 0.0, None)
    bound, best_sigma = dual_bound(a, s, W, budgets, q, np.clip(sigma, 0.0, None), cap)
    spending = s * (Xr @ q)
    return MarketSolution(
        X=Xr,
        utility=u,
        prices=q,
        time_dual=best_sigma,
        spending=spending,
        objective=objective,
        bound=bound,
        max_violation=violation,
        status=status,
        solver_version=solver_version,
        solve_time_s=solve_time_s,
        size=size,
        detail=detail,
    )


def uncapped_budget(s: FloatArray, W: FloatArray) -> FloatArray:
    """The time budgets of the plain Fisher market: twice sum_j W[j] / s_i, above what
    capacity already implies (s_i X[i,j] <= W[j] for every j), so the row is slack at every
    feasible point, carries no dual (a job spends its whole budget on devices: Fisher's
    equilibrium) and a job may buy as much device-time as it can pay for, several gangs at
    once."""
    return np.asarray(2.0 * float(W.sum()) / s + 1.0, dtype=np.float64)


def market_inputs(
    problem: Problem, params: FisherMarketParameters
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, NDArray[np.bool_]]:
    """(a, s, W, budgets, servable): a[i,j] = T[i,j]/prop_i on usable cells (B4), 0 elsewhere;
    servable = the job has a usable cell on a type with devices."""
    jobs = problem.jobs
    W = problem.cluster.count_float
    thr = jobs.throughput
    prop = problem.proportional_throughput
    usable = problem.usable & (W[None, :] > 0)
    a = np.where(usable, thr / np.where(prop > 0, prop, 1.0)[:, None], 0.0)
    budgets = (
        jobs.priority_weight.astype(np.float64)
        if params.budgets is BudgetSource.PRIORITY_WEIGHT
        else np.ones(jobs.num_jobs)
    )
    servable = np.asarray(usable.any(axis=1), dtype=bool)
    return a, jobs.scale_factor_float, W, budgets, servable


def solve_policy(
    problem: Problem,
    parameters: FisherMarketParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Entry point registered as `fisher_market`. `compat` is ignored (no upstream quirks)."""
    del compat
    params = parameters
    started = time.perf_counter()
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    formulation = f"Eisenberg-Gale market (A4.1), budgets {params.budgets.value}" + (
        ", uncapped (devices as goods)" if params.uncapped else "")
    a, s, W, budgets, servable = market_inputs(problem, params)
    status = tuple(JobStatus.ALLOCATED if ok else JobStatus.UNSERVABLE for ok in servable)
    reasons = tuple(
        "" if ok else "no usable accelerator type (zero throughput or too few devices)"
        for ok in servable
    )
    idx = np.flatnonzero(servable)
    if idx.size == 0:
        cert = Certificate(
            Termination.OPTIMAL, True, 0.0, 0.0, formulation=formulation, detail="no servable jobs"
        )
        empty = Plan.empty(m, n, cert)
        return replace(empty, job_status=status, job_reason=reasons,
                       market=MarketSection(np.zeros(m)))
    build = time.perf_counter() - started
    cap = uncapped_budget(s[idx], W) if params.uncapped else None
    sol = solve_market_by_class(a[idx], s[idx], W, budgets[idx], deadline, cap)
    scale = max(1.0, float(budgets[idx].sum()))  # the objective's natural magnitude
    objective = sol.objective if np.isfinite(sol.objective) else None
    bound = sol.bound if np.isfinite(sol.bound) else None
    gap = relative_gap(objective, bound, scale)
    cert = Certificate(
        termination=termination(sol.status, objective is not None, gap, options.relative_gap),
        maximize=True,
        objective=objective,
        bound=bound,
        gap_scale=scale,
        solver="clarabel",
        solver_version=sol.solver_version,
        formulation=formulation,
        build_time_s=build,
        solve_time_s=sol.solve_time_s,
        model_size=sol.size,
        max_violation=sol.max_violation,
        detail=sol.detail,
    )
    X = np.zeros((m, n))
    X[idx] = sol.X
    utility = np.zeros(m)
    utility[idx] = sol.utility
    spending = np.zeros(m)
    spending[idx] = sol.spending
    mu = np.zeros(m)
    mu[idx] = np.divide(budgets[idx], sol.utility, out=np.zeros(idx.size), where=sol.utility > 0)
    objective_value = np.zeros(m)
    with np.errstate(divide="ignore"):
        objective_value[idx] = budgets[idx] * np.log(np.maximum(sol.utility, 1e-300))
    # u_i = thr_i / prop_i, so in steps/s the objective moves by sum_i B_i log prop_i (A4.1)
    to_steps = float(budgets[idx] @ np.log(problem.proportional_throughput[idx]))
    market = MarketSection(
        spending,
        throughput_objective=None if objective is None else objective + to_steps,
        throughput_bound=None if bound is None else bound + to_steps,
    )
    return Plan(
        time_share=X,
        effective_throughput=np.einsum("ij,ij->i", problem.jobs.throughput, X),
        normalized_throughput=utility,
        objective_value=objective_value,
        job_dual=mu,
        accelerator_prices=sol.prices,
        certificate=cert,
        job_status=status,
        job_reason=reasons,
        market=market,
    )
