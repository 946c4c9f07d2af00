"""Heterogeneity-aware weighted max-min fairness (Gavel's LAS; A2.1, docs/policies/gavel.md).

    maximize t  s.t.  t <= sum_j a[i,j] X[i,j]   (every job i; dual y_i)
                      sum_i s_i X[i,j] <= W[j]   (every type j; dual pi_j)
                      sum_j X[i,j] <= 1          (every job i; dual sigma_i),  X >= 0
    with a[i,j] = s_i T[i,j] / (w_i prop_i) and X[i,j] = 0 on cells the job cannot use (B4).

How it is solved fast and exactly:

1. **Aggregation.** Jobs with identical (a[i,:], s_i) are interchangeable: the LP's constraints
   and objective are invariant under permuting them, so averaging any optimal X over those
   permutations is optimal and gives them identical rows. The LP over classes (capacity rows
   weighted by the class size k_c) therefore has the same optimum, and per-job duals are the
   class duals divided by k_c. Catalog workloads collapse from 10^5 jobs to ~10^2 classes.
2. **Closed form** when capacity does not bind (`_solve_uncongested`); one LP over all classes
   (Clarabel) up to `SAMPLE_CLASSES` classes.
3. **Prices from the dual.** Above that, capacity prices come first (`level_prices`): the
   Lagrangian dual of the capacity rows, D(pi) = W.pi + max_t [t - sum_i k_i c_i(pi, t)] with
   c_i a class's cheapest cost to reach level t, is minimized by cutting planes over the n
   prices, each evaluation a vectorized O(m n^2) pass (the rows' cost hulls) minimized along
   the price ray. It stops at a proven relative gap of 1e-5 (about 20 evaluations), when the
   prices are within about 1e-3 of optimal ones. Where its two bounds meet (t* = min_i max_j
   a[i,j] with devices to spare, which the closed form misses) its own plan, the convex
   combination of the plans it met, is the answer.
4. **Pattern pricing (active set).** Given capacity prices pi and the level t, each job's
   cheapest way to reach level t is a *pattern*: one type j at time t/a_j, or two types at
   full time (the per-job LP has two rows, so a basic optimum has at most two non-zeros).
   Jobs whose best pattern is clear are eliminated: their device use is affine in t and enters
   the capacity rows as one column. Only "ambiguous" jobs (near ties, within a relative band
   of max(2e-3, 3 x the price search's gap)) stay as variables. After each reduced solve, every
   eliminated job is re-priced; one whose pattern is no longer optimal joins the ambiguous
   set, until none is (a stalled round is settled with exchange columns that carry the
   eliminated jobs' dual constraints; if rounds run out, the full LP). The stationarity of an
   optimal pattern is exactly dual feasibility of the full LP for that job (y_i = s_i pi_j /
   a_j, sigma_i = 0 for a single type; y_i = s_i (pi_2-pi_1)/(a_2-a_1), sigma_i = y_i a_1 -
   s_i pi_1 for a pair), so the final duals certify the full LP. With the prices of step 3
   one reduced LP of a few hundred rows usually settles 10^5 jobs.
5. **Certificate, independent of the method.** The returned X is repaired onto the feasible
   set (clip, scale rows and columns) and its minimum level recomputed; the duals are repaired
   onto the dual feasible set (y normalized, sigma recomputed as the smallest feasible value),
   and their objective is a proven upper bound. The gap between the two is reported; the
   status is OPTIMAL only when it is within tolerance (default 1e-6 relative).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.formulations import level_prices
from apportion.formulations.level_prices import LevelRows, PriceSearch
from apportion.formulations.normalizers import proportional_throughput, repair_time_share
from apportion.solver.backends.highs import highs_version
from apportion.solver.backends.lp import solve_lp
from apportion.solver.backends.status import SolverResult, SolverStatus
from apportion.solver.certificate import termination
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import (
    Compat,
    FloatArray,
    IntArray,
    Problem,
    SolveOptions,
    SolverPreference,
)
from apportion.solver.parameters import Canonicalization, MaxMinFairnessParameters
from apportion.solver.result import (
    Certificate,
    JobStatus,
    ModelSize,
    Plan,
    Termination,
    relative_gap,
)
from apportion.solver.row_classes import identical_rows

SAMPLE_CLASSES = 400
"""Class count above which the active-set method is used (below: one LP over all classes,
which Clarabel solves faster than the price search runs up to about this size)."""
BAND_PER_GAP = 3.0
"""The first near-tie band is this multiple of the price search's proven relative gap."""
MAX_ACTIVE_SET_ROUNDS = 40
"""Reduced LPs before falling back to the full LP."""
INITIAL_BAND = 0.02
"""Largest relative cost band within which a row counts as a near tie at the first prices."""
RECOVERED_GAP = 1e-10
"""A price search whose proven bounds are this close (relative) answers by itself."""
MAX_EXPLICIT_FRACTION = 0.5
"""Above this share of explicit rows the full LP is solved instead."""
MAX_RELAXED_ROWS = 5000
"""Explicit rows up to which a stalled round is settled with exchange columns."""
MIN_BAND = 2e-3
"""Smallest near-tie band in later rounds."""
CERTIFIED_FRACTION = 1e-7
"""A restricted plan within this relative distance of the exchange-column LP's value (a
proven bound) settles the active set."""


@dataclass(frozen=True)
class LevelProblem:
    """The LP data per job (or per class): a (m, n) >= 0 level coefficients (0 = cell not
    allowed), s (m,) devices per job, W (n,) devices per type, k (m,) multiplicity."""

    a: FloatArray
    s: FloatArray
    W: FloatArray
    k: FloatArray


@dataclass(frozen=True)
class LevelSolution:
    t: float
    X: FloatArray
    pi: FloatArray
    y: FloatArray
    """Per-row (job or class) duals of the level rows (class dual, not divided by k)."""
    status: SolverStatus
    solver: str
    solver_version: str
    solve_time_s: float
    variables: int
    constraints: int
    nonzeros: int
    method: str
    detail: str = ""


def level_coefficients(
    problem: Problem, agnostic: bool, compat: Compat
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(a, prop, throughput used): a[i,j] = s_i T[i,j] / (w_i prop_i) on allowed cells, 0 elsewhere.

    Allowed cells: T > 0, and s_i <= W[j] unless compat is gavel (A1.2 B4). The agnostic variant
    uses T = 1 on every type the job can run on."""
    jobs = problem.jobs
    thr = (jobs.throughput > 0).astype(np.float64) if agnostic else jobs.throughput
    allowed = thr > 0 if compat is Compat.GAVEL else problem.usable  # thr > 0 iff T > 0
    prop = (
        proportional_throughput(thr, problem.cluster.count_float)
        if agnostic
        else problem.proportional_throughput
    )
    scale = jobs.scale_factor / (jobs.priority_weight * np.where(prop > 0, prop, 1.0))
    a = np.where(allowed, scale[:, None] * thr, 0.0)
    return a, prop, thr


def aggregate(a: FloatArray, s: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, IntArray]:
    """Classes of identical (a row, s): (class a, class s, class size k, job -> class index)."""
    first, inverse, counts = identical_rows(np.concatenate([a, s[:, None]], axis=1))
    return a[first], s[first], counts.astype(np.float64), inverse


def _build_full(
    lp: LevelProblem,
    fixed_cap: FloatArray | None = None,
    exchange: FloatArray | None = None,
) -> tuple[FloatArray, sp.csc_matrix, NDArray[np.int64], NDArray[np.int64]]:
    """max t over classes; variables X[cells], then t, then exchange columns.

    Rows: level (m), capacity (n), budget (m). `fixed_cap` (n,) adds a t-coefficient to the
    capacity rows (eliminated jobs); `exchange` (n, q) adds q columns with objective 0 and
    these capacity coefficients (see `_exchange_columns`)."""
    m, n = lp.a.shape
    ii, jj = np.nonzero(lp.a > 0)
    nv = ii.size
    q = 0 if exchange is None else exchange.shape[1]
    rows = [ii, m + jj, m + n + ii, np.arange(m)]
    cols = [np.arange(nv)] * 3 + [np.full(m, nv)]
    vals = [-lp.a[ii, jj], lp.k[ii] * lp.s[ii], np.ones(nv), np.ones(m)]
    if fixed_cap is not None:
        nz = np.nonzero(fixed_cap)[0]
        rows.append(m + nz)
        cols.append(np.full(nz.size, nv))
        vals.append(fixed_cap[nz])
    if exchange is not None:
        er, ec = np.nonzero(exchange)
        rows.append(m + er)
        cols.append(nv + 1 + ec)
        vals.append(exchange[er, ec])
    matrix = sp.csc_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(2 * m + n, nv + 1 + q),
    )
    c = np.zeros(nv + 1 + q)
    c[nv] = 1.0
    return c, matrix, ii, jj


@dataclass(frozen=True)
class ClassLPResult:
    result: SolverResult
    t: float
    X: FloatArray
    pi: FloatArray
    y: FloatArray
    exchange: FloatArray
    """Values of the exchange columns (0 when none)."""
    rows: int
    nonzeros: int


def _solve_classes(
    lp: LevelProblem,
    solver: SolverPreference,
    deadline: Deadline,
    threads: int,
    rhs_capacity: FloatArray | None = None,
    fixed_cap: FloatArray | None = None,
    exchange: FloatArray | None = None,
) -> ClassLPResult:
    """Solve the LP over the rows of `lp`, with the level rows scaled so that t is O(1)
    (`level_scale`; the solvers' absolute tolerances then mean relative accuracy)."""
    m, n = lp.a.shape
    capacity = lp.W if rhs_capacity is None else rhs_capacity
    # t = scale * t': the level rows take a / scale, the t column of the capacity rows
    # fixed_cap * scale; X and the exchange columns are unchanged, the prices scale with t
    scale = level_scale(lp, capacity)
    scaled_lp = LevelProblem(lp.a / scale, lp.s, lp.W, lp.k)
    c, matrix, ii, jj = _build_full(
        scaled_lp, None if fixed_cap is None else fixed_cap * scale, exchange
    )
    b = np.concatenate([np.zeros(m), capacity, np.ones(m)])
    result = solve_lp(c, matrix, b, solver, deadline, threads)
    nv = ii.size
    x = result.x
    X = np.zeros((m, n))
    X[ii, jj] = x[:nv]
    duals = result.row_dual
    return ClassLPResult(
        result, scale * float(x[nv]), X, scale * duals[m : m + n], duals[:m], x[nv + 1 :],
        int(matrix.shape[0]), int(matrix.nnz),
    )


def level_scale(lp: LevelProblem, capacity: FloatArray) -> float:
    """An upper bound on the level t* of `lp` with `capacity` devices per type (A2.1): no row
    exceeds its best single level, and reaching t needs at least k_i s_i t / max_j a[i,j]
    devices per row, so t* <= sum capacity / sum_i k_i s_i / max_j a[i,j]. Usually within a
    factor of the number of types of t*; 1 when it is not a positive finite number."""
    best = lp.a.max(axis=1) if lp.a.size else np.zeros(0)
    positive = best > 0
    if not positive.any():
        return 1.0
    single = float(best[positive].min())
    need = float(np.sum(lp.k[positive] * lp.s[positive] / best[positive]))
    bound = min(single, float(np.sum(np.maximum(capacity, 0.0))) / need) if need > 0 else single
    return bound if np.isfinite(bound) and bound > 0 else 1.0


def _exchange_columns(
    lp: LevelProblem, pattern: NDArray[np.int64], first: NDArray[np.int64],
    second: NDArray[np.int64], t: float,
) -> tuple[FloatArray, list[NDArray[np.int64]], list[FloatArray]]:
    """Dual feasibility of the eliminated rows, compressed to O(n^3) constraints on pi.

    A row eliminated on type j alone is dual feasible iff pi_k >= pi_j a_k/a_j for every other
    allowed k; over all such rows only the largest ratio binds. A row eliminated on the pair
    (L, H), a_L < t < a_H at full time, is dual feasible iff pi_H >= pi_L a_H/a_L (sigma >= 0)
    and pi_k >= (1-b) pi_L + b pi_H with b = (a_k-a_L)/(a_H-a_L) for every other allowed k;
    again only the largest ratio / b binds (given pi_H >= pi_L). A dual constraint g.pi >= 0 is
    a primal column with capacity coefficients g and objective 0, so adding these columns makes
    the reduced LP's prices dual feasible for every eliminated row at once.

    Returns the columns (n, q) and, per column, its rows from the one attaining the bound
    downwards with how much of the column each could carry (devices), so that a column in use
    makes just enough of its rows explicit."""
    a, n = lp.a, lp.a.shape[1]
    devices = lp.k * lp.s
    rows = np.arange(a.shape[0])
    j1, j2 = first[pattern], second[pattern]
    a1, a2 = a[rows, j1], a[rows, j2]
    low = np.where(a1 <= a2, j1, j2)
    high = np.where(a1 <= a2, j2, j1)
    key = low * n + high  # single type j: key j*n + j
    columns: list[FloatArray] = []
    owners: list[NDArray[np.int64]] = []
    movable: list[FloatArray] = []

    def add(col: FloatArray, ratio: FloatArray, sub: NDArray[np.int64], amount: FloatArray) -> None:
        ranked = np.argsort(-ratio, kind="stable")
        columns.append(col)
        owners.append(sub[ranked])
        movable.append(amount[ranked])

    order = np.argsort(key, kind="stable")
    uniq, starts = np.unique(key[order], return_index=True)
    bounds = np.append(starts, order.size)
    for g, group_key in enumerate(uniq):
        members = order[bounds[g] : bounds[g + 1]]
        lo, hi = int(group_key) // n, int(group_key) % n
        a_lo, a_hi = a[members, lo], a[members, hi]
        if lo != hi:  # sigma >= 0: pi_H >= pi_L a_H/a_L
            ratio = a_hi / a_lo
            best = float(ratio.max())
            col = np.zeros(n)
            col[hi], col[lo] = 1.0, -best
            add(col, ratio, members, devices[members] * (a_hi - t) / (a_hi - a_lo))
        for k in range(n):
            if k in (lo, hi):
                continue
            allowed = a[members, k] > 0
            if not allowed.any():
                continue
            sub = members[allowed]
            if lo == hi:
                ratio = a[sub, k] / a[sub, lo]
                best = float(ratio.max())
                col = np.zeros(n)
                col[k], col[lo] = 1.0, -best
                amount = devices[sub] * t / a[sub, k]
            else:
                ratio = (a[sub, k] - a[sub, lo]) / (a[sub, hi] - a[sub, lo])
                best = float(ratio.max())
                col = np.zeros(n)
                col[k] = 1.0
                col[lo] -= 1.0 - best
                col[hi] -= best
                amount = devices[sub]
            add(col, ratio, sub, amount)
    if not columns:
        return np.zeros((n, 0)), [], []
    return np.stack(columns, axis=1), owners, movable


def _pattern_types(n: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Pattern p < n is type p alone (time t/a_p <= 1); then every pair (j1, j2), j1 < j2, at
    full time with levels bracketing t. Returns (first type, second type) per pattern."""
    j1, j2 = np.triu_indices(n, k=1)
    return (np.concatenate([np.arange(n), j1]).astype(np.int64),
            np.concatenate([np.arange(n), j2]).astype(np.int64))


def _pattern_costs(
    levels: FloatArray, s: FloatArray, pi: FloatArray, t: float
) -> tuple[FloatArray, NDArray[np.int64], FloatArray]:
    """Cheapest valid pattern per row at prices pi and level t: (its cost, its index, the
    runner-up's cost); costs are +inf where no (second) pattern is valid. `levels` (n, m) is
    the rows' level coefficients by type (0 = not allowed)."""
    n, m = levels.shape
    best = np.full(m, np.inf)
    runner_up = np.full(m, np.inf)
    pattern = np.zeros(m, dtype=np.int64)

    def offer(cost: FloatArray, index: int) -> None:
        better = cost < best
        np.copyto(runner_up, np.where(better, best, np.minimum(runner_up, cost)))
        np.copyto(best, cost, where=better)
        np.copyto(pattern, index, where=better)

    for j in range(n):
        offer(_single_cost(levels[j], s, pi[j], t), j)
    index = n
    for j1 in range(n):
        for j2 in range(j1 + 1, n):
            offer(_pair_cost(levels[j1], levels[j2], s, pi[j1], pi[j2], t), index)
            index += 1
    return best, pattern, runner_up


def _single_cost(
    level: FloatArray, s: FloatArray, price: FloatArray | float, t: float
) -> FloatArray:
    """Cost of reaching level t on one type (time t/level <= 1), +inf where not valid."""
    cost = np.full(level.shape, np.inf)
    np.divide(s * (price * t), level, out=cost, where=(level > 0) & (level >= t))
    return cost


def _pair_cost(
    level1: FloatArray, level2: FloatArray, s: FloatArray, price1: FloatArray | float,
    price2: FloatArray | float, t: float,
) -> FloatArray:
    """Cost of reaching level t at full time on two types whose levels bracket t strictly
    (+inf elsewhere)."""
    low = np.minimum(level1, level2)
    high = np.maximum(level1, level2)
    valid = (low > 0) & (low < t) & (t < high)
    share_high = np.zeros(level1.shape)
    np.divide(t - low, high - low, out=share_high, where=valid)
    first_low = level1 <= level2
    price_low = np.where(first_low, price1, price2)
    price_high = np.where(first_low, price2, price1)
    return np.where(valid, s * (price_low + share_high * (price_high - price_low)), np.inf)


def _own_pattern_cost(
    levels: FloatArray, s: FloatArray, pi: FloatArray, t: float, pattern: NDArray[np.int64],
    first: NDArray[np.int64], second: NDArray[np.int64],
) -> FloatArray:
    """Cost of each row's own `pattern` at (pi, t), +inf where it is not valid at t."""
    cols = np.arange(levels.shape[1])
    j1, j2 = first[pattern], second[pattern]
    level1, level2 = levels[j1, cols], levels[j2, cols]
    return np.where(
        j1 == j2,
        _single_cost(level1, s, pi[j1], t),
        _pair_cost(level1, level2, s, pi[j1], pi[j2], t),
    )


def _pattern_use(
    a: FloatArray,
    s: FloatArray,
    k: FloatArray,
    pattern: NDArray[np.int64],
    first: NDArray[np.int64],
    second: NDArray[np.int64],
    n: int,
) -> tuple[FloatArray, FloatArray]:
    """Device use of rows fixed to `pattern`, affine in t: (constant (n,), slope (n,))."""
    rows = np.arange(a.shape[0])
    j1, j2 = first[pattern], second[pattern]
    single = j1 == j2
    ks = k * s
    slope = np.zeros(n)
    const = np.zeros(n)
    np.add.at(slope, j1[single], ks[single] / a[rows[single], j1[single]])
    pr = ~single
    a1, a2 = a[rows[pr], j1[pr]], a[rows[pr], j2[pr]]
    lo_j = np.where(a1 <= a2, j1[pr], j2[pr])
    hi_j = np.where(a1 <= a2, j2[pr], j1[pr])
    lo, hi = np.minimum(a1, a2), np.maximum(a1, a2)
    d = ks[pr] / (hi - lo)
    np.add.at(const, lo_j, d * hi)
    np.add.at(slope, lo_j, -d)
    np.add.at(const, hi_j, -d * lo)
    np.add.at(slope, hi_j, d)
    return const, slope


def _pattern_time(
    a: FloatArray,
    pattern: NDArray[np.int64],
    first: NDArray[np.int64],
    second: NDArray[np.int64],
    t: float,
    n: int,
) -> FloatArray:
    """Time shares of rows fixed to `pattern` at level t."""
    m = a.shape[0]
    rows = np.arange(m)
    X = np.zeros((m, n))
    j1, j2 = first[pattern], second[pattern]
    single = j1 == j2
    X[rows[single], j1[single]] = t / a[rows[single], j1[single]]
    pr = ~single
    a1, a2 = a[rows[pr], j1[pr]], a[rows[pr], j2[pr]]
    w2 = (t - a1) / (a2 - a1)
    X[rows[pr], j1[pr]] = 1 - w2
    X[rows[pr], j2[pr]] = w2
    return X


def solve_levels(
    lp: LevelProblem,
    solver: SolverPreference = SolverPreference.AUTO,
    deadline: Deadline = NO_DEADLINE,
    threads: int = 0,
) -> LevelSolution:
    """Solve the max-min LP over rows of `lp` (jobs or classes). AUTO = active set (exact)."""
    if solver is SolverPreference.AUTO:
        uncongested = _solve_uncongested(lp)
        if uncongested is not None:
            return uncongested
    if solver is not SolverPreference.AUTO or lp.a.shape[0] <= SAMPLE_CLASSES:
        chosen = SolverPreference.CLARABEL if solver is SolverPreference.AUTO else solver
        return _full_lp(lp, chosen, deadline, threads, "full LP")
    return _active_set(lp, deadline, threads)


def _solve_uncongested(lp: LevelProblem) -> LevelSolution | None:
    """The case where capacity does not bind, solved in closed form.

    No row can exceed its best single level, so t* <= u := min_i max_j a[i,j] (budget row).
    If giving every row exactly level u on its best type fits every type's capacity, that
    plan is optimal: the dual y = e_(bottleneck row), pi = 0, sigma_(bottleneck) = u proves
    it (A2.1 dual objective = u). Returns None when the plan does not fit."""
    started = time.perf_counter()
    m, n = lp.a.shape
    best_type = np.argmax(lp.a, axis=1)
    best_level = lp.a[np.arange(m), best_type]
    bottleneck = int(np.argmin(best_level))
    u = float(best_level[bottleneck])
    if u <= 0:
        return None
    share = u / best_level
    use = np.bincount(best_type, weights=lp.k * lp.s * share, minlength=n)
    if np.any(use > lp.W):  # using exactly W is feasible
        return None
    X = np.zeros((m, n))
    X[np.arange(m), best_type] = share
    y = np.zeros(m)
    y[bottleneck] = 1.0
    return LevelSolution(
        u, X, np.zeros(n), y, SolverStatus.OPTIMAL, "closed form", "",
        time.perf_counter() - started, 0, 0, 0, "closed form (capacity does not bind)",
    )


def _active_set(lp: LevelProblem, deadline: Deadline, threads: int) -> LevelSolution:
    """Prices from the Lagrangian dual (`level_prices`), then the active set on the rows near
    a tie at those prices until every eliminated row is dual feasible (module docstring)."""
    started = time.perf_counter()
    m, n = lp.a.shape
    priced = lp.W > 0  # a type without devices takes no time share (its capacity row is 0)
    a = lp.a if priced.all() else np.where(priced[None, :], lp.a, 0.0)
    if not np.all(a.max(axis=1) > 0):  # a row reaches no level: t* = 0, nothing to price
        return _full_lp(lp, SolverPreference.CLARABEL, deadline, threads,
                        "full LP (a row can use no type)")
    rows = LevelRows.build(a[:, priced], lp.s, lp.k, lp.W[priced])
    search = PriceSearch(rows, np.ones(rows.num_types))  # from every device priced alike
    search.run(level_prices.PRICE_GAP, level_prices.MAX_EVALUATIONS, deadline)
    pi = np.zeros(n)
    pi[priced] = search.best.pi
    searched = f"{search.evaluations} price evaluations, gap {search.gap:.1e}"
    if deadline.expired() or search.gap <= RECOVERED_GAP:
        return _price_search_solution(
            lp, priced, search, time.perf_counter() - started, deadline.expired()
        )
    t = search.lower_bound if search.lower_bound > 0 else search.best.level
    band = float(np.clip(BAND_PER_GAP * search.gap, MIN_BAND, INITIAL_BAND))
    solve_time = time.perf_counter() - started
    levels = np.ascontiguousarray(a.T)
    first, second = _pattern_types(n)
    used_tolerance = 1e-7 * max(1.0, float(lp.W.max()))
    forced = np.zeros(m, dtype=bool)
    best, pattern, runner_up = _pattern_costs(levels, lp.s, pi, t)
    iterations = 0
    settled = False
    status = SolverStatus.OPTIMAL
    while iterations < MAX_ACTIVE_SET_ROUNDS:
        iterations += 1
        ambiguous = forced | ~np.isfinite(best) | (runner_up <= best * (1 + band) + 1e-300)
        ambiguous |= _near_level(levels, t, band)
        amb = np.nonzero(ambiguous)[0]
        fix = np.nonzero(~ambiguous)[0]
        if amb.size > MAX_EXPLICIT_FRACTION * m:
            break
        const, slope = _pattern_use(a[fix], lp.s[fix], lp.k[fix], pattern[fix], first, second, n)
        reduced = LevelProblem(a[amb], lp.s[amb], lp.W, lp.k[amb])
        out = _solve_classes(
            reduced,
            SolverPreference.CLARABEL,
            deadline,
            threads,
            rhs_capacity=lp.W - const,
            fixed_cap=slope,
        )
        res, t, Xa, pi, ya = out.result, out.t, out.X, out.pi, out.y
        solve_time += res.solve_time_s
        status = res.status
        if not res.solved and (res.status.limit_reached or deadline.expired()):
            # time is up before this round's plan: the price search's plan and bound
            return _price_search_solution(
                lp, priced, search, time.perf_counter() - started, cut=True
            )
        if deadline.expired():  # a restricted plan, not verified: the certificate says how good
            status, settled = SolverStatus.TIME_LIMIT, True
            break
        if not res.solved:
            break  # e.g. a wrong set of two-type patterns made the reduced LP infeasible
        # Re-price every row at the new (pi, t): an eliminated row whose pattern is no longer
        # optimal (or valid at t) violates dual feasibility of the full LP.
        violated = _violations(levels, lp.s, fix, pattern, pi, t, first, second)
        if not violated.any():
            settled = True
            break
        # The restricted LP's prices are loosely pinned. Re-solve with the eliminated rows'
        # dual constraints as exchange columns: its duals are feasible for the full LP, so its
        # value is a proven upper bound; if the restricted plan reaches it, we are done.
        if amb.size > MAX_RELAXED_ROWS:  # large: cheaper to make the violators explicit
            forced[fix[violated]] = True
            best, pattern, runner_up = _pattern_costs(levels, lp.s, pi, t)
            band = max(band / 10, MIN_BAND)
            continue
        fixed = LevelProblem(a[fix], lp.s[fix], lp.W, lp.k[fix])
        exchange, owners, movable = _exchange_columns(fixed, pattern[fix], first, second, t)
        relaxed = _solve_classes(
            reduced,
            SolverPreference.CLARABEL,
            deadline,
            threads,
            rhs_capacity=lp.W - const,
            fixed_cap=slope,
            exchange=exchange,
        )
        solve_time += relaxed.result.solve_time_s
        relaxed_ok = relaxed.result.solved
        certified = relaxed_ok and t >= relaxed.t * (1 - CERTIFIED_FRACTION)
        if certified and not _violations(
            levels, lp.s, fix, pattern, relaxed.pi, relaxed.t, first, second
        ).any():
            pi, ya = relaxed.pi, relaxed.y
            settled = True
            break
        if relaxed_ok:
            # The relaxed prices are pinned by every row; the rows that would move (those
            # binding an exchange column in use) become explicit.
            for q in np.nonzero(relaxed.exchange > used_tolerance)[0]:
                enough = np.searchsorted(np.cumsum(movable[q]), 2 * relaxed.exchange[q]) + 1
                forced[fix[owners[q][:enough]]] = True
            pi = relaxed.pi
        else:
            forced[fix[violated]] = True
        best, pattern, runner_up = _pattern_costs(levels, lp.s, pi, t)
        band = max(band / 10, MIN_BAND)
    if not settled:
        # Did not settle: solve the whole LP (still exact, only slower).
        full = _full_lp(lp, SolverPreference.CLARABEL, deadline, threads,
                        f"full LP after {iterations} active-set rounds ({searched})")
        return replace(full, solve_time_s=solve_time + full.solve_time_s)
    X = np.zeros((m, n))
    X[amb] = Xa
    X[fix] = _pattern_time(a[fix], pattern[fix], first, second, t, n)
    y = np.zeros(m)
    y[amb] = ya
    # Eliminated rows: y from the stationarity of their pattern (class dual = k * job dual).
    rows_f = np.arange(fix.size)
    j1, j2 = first[pattern[fix]], second[pattern[fix]]
    af = a[fix]
    single = j1 == j2
    yf = np.zeros(fix.size)
    yf[single] = lp.s[fix][single] * pi[j1[single]] / af[rows_f[single], j1[single]]
    a1, a2 = af[rows_f, j1], af[rows_f, j2]
    pr = ~single
    yf[pr] = lp.s[fix][pr] * (pi[j2[pr]] - pi[j1[pr]]) / (a2[pr] - a1[pr])
    y[fix] = yf * lp.k[fix]
    if status is SolverStatus.TIME_LIMIT:
        # cut before the round was verified: the price search's proven duals, and its plan
        # where it is the better one (the restricted plan's patterns may be invalid at t)
        y = search.best.multipliers()
        pi = np.zeros(n)
        pi[priced] = search.best.pi
        recovered = np.zeros((m, n))
        recovered[:, priced] = search.plan()
        if _least_level(lp, recovered) > _least_level(lp, X):
            X, t = recovered, search.lower_bound
    return LevelSolution(
        t,
        X,
        _price_unpriced(lp, priced, pi, y),
        y,
        status,
        res.solver,
        res.solver_version,
        solve_time,
        int(np.count_nonzero(reduced.a)) + 1,
        out.rows,
        out.nonzeros,
        f"active set ({searched}; {iterations} reduced LPs, {amb.size} of {m} rows explicit)",
        res.detail,
    )


def _full_lp(
    lp: LevelProblem, solver: SolverPreference, deadline: Deadline, threads: int, method: str
) -> LevelSolution:
    """The LP over every row of `lp`, in one solve."""
    out = _solve_classes(lp, solver, deadline, threads)
    res = out.result
    return LevelSolution(
        out.t,
        out.X,
        out.pi,
        out.y,
        res.status,
        res.solver,
        res.solver_version,
        res.solve_time_s,
        int(np.count_nonzero(lp.a)) + 1,
        out.rows,
        out.nonzeros,
        method,
        res.detail,
    )


def _price_search_solution(
    lp: LevelProblem, priced: NDArray[np.bool_], search: PriceSearch, elapsed: float,
    cut: bool,
) -> LevelSolution:
    """The price search's own answer: the plan recovered from its cutting-plane model (level
    >= its lower bound) and the multipliers that prove D(best prices). Exact when the bounds
    meet (e.g. t* = u_min with spare devices); otherwise what there is when time ran out."""
    m, n = lp.a.shape
    X = np.zeros((m, n))
    X[:, priced] = search.plan()
    pi = np.zeros(n)
    pi[priced] = search.best.pi
    y = search.best.multipliers()
    how = f"{search.evaluations} price evaluations, gap {search.gap:.1e}"
    return LevelSolution(
        search.lower_bound, X, _price_unpriced(lp, priced, pi, y), y,
        SolverStatus.TIME_LIMIT if cut else SolverStatus.OPTIMAL, "highs", highs_version(),
        elapsed, 0, 0, 0,
        f"active set: price search cut by the deadline ({how})" if cut
        else f"active set: bounds met by the price search ({how})",
        "time limit" if cut else "",
    )


def _least_level(lp: LevelProblem, X: FloatArray) -> float:
    """The least level of the rows' plans X once repaired onto the devices (as `certify`
    does for the jobs)."""
    repaired = repair_time_share(X, lp.a > 0, lp.k * lp.s, lp.W)
    return float(np.einsum("ij,ij->i", lp.a, repaired).min(initial=np.inf))


def _price_unpriced(
    lp: LevelProblem, priced: NDArray[np.bool_], pi: FloatArray, y: FloatArray
) -> FloatArray:
    """pi with every type without devices priced high enough that no cell of it needs sigma:
    pi_j = max_i y_i a[i,j] / (k_i s_i) (it adds W_j pi_j = 0 to the dual objective)."""
    if priced.all():
        return pi
    out = pi.copy()
    per_job = y / (lp.k * lp.s)
    for j in np.nonzero(~priced)[0]:
        out[j] = float(np.max(per_job * lp.a[:, j], initial=0.0))
    return out


def _violations(
    levels: FloatArray, s: FloatArray, fix: NDArray[np.int64], pattern: NDArray[np.int64],
    pi: FloatArray, t: float, first: NDArray[np.int64], second: NDArray[np.int64],
) -> NDArray[np.bool_]:
    """Eliminated rows whose pattern is not a cheapest valid one at (pi, t), i.e. whose
    stationarity-derived duals are not feasible for the full LP."""
    sub = levels[:, fix]
    best, _, _ = _pattern_costs(sub, s[fix], pi, t)
    mine = _own_pattern_cost(sub, s[fix], pi, t, pattern[fix], first, second)
    violated = ~np.isfinite(mine) | (mine > best * (1 + 1e-9) + 1e-12)
    return np.asarray(violated | _near_level(sub, t, 1e-9))


def _near_level(levels: FloatArray, t: float, band: float) -> NDArray[np.bool_]:
    """Rows with an allowed cell whose level is within `band` (relative) of t; `levels` by type
    (n, m)."""
    near = np.zeros(levels.shape[1], dtype=bool)
    width = band * max(t, 1e-300)
    for level in levels:
        near |= (level > 0) & (np.abs(level - t) <= width)
    return near


@dataclass(frozen=True)
class CertifiedLevels:
    X: FloatArray
    levels: FloatArray
    objective: float
    bound: float | None
    y: FloatArray
    pi: FloatArray
    max_violation: float


def certify(
    a: FloatArray, s: FloatArray, W: FloatArray, X: FloatArray, y: FloatArray, pi: FloatArray
) -> CertifiedLevels:
    """Repair X onto the feasible set and (y, pi) onto the dual feasible set of the per-job LP;
    return the primal objective (min level) and the dual bound (A2.1 dual)."""
    allowed = a > 0
    X = repair_time_share(X, allowed, s, W)
    levels = np.einsum("ij,ij->i", a, X)
    violation = max(
        float(np.max(s @ X - W, initial=0.0)),
        float(np.max(X.sum(axis=1) - 1.0, initial=0.0)),
    )
    objective = float(levels.min()) if levels.size else 0.0
    y = np.maximum(y, 0.0)
    pi = np.maximum(pi, 0.0)
    bound: float | None = None
    if y.sum() > 0:
        y = y / y.sum()
        sigma = np.max(np.where(allowed, y[:, None] * a - s[:, None] * pi[None, :], 0.0), axis=1)
        sigma = np.maximum(sigma, 0.0)
        bound = float(W @ pi + sigma.sum())
    return CertifiedLevels(X, levels, objective, bound, y, pi, violation)


def solve_policy(
    problem: Problem,
    parameters: MaxMinFairnessParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Entry point registered as `weighted_max_min_fairness`."""
    params = parameters
    started = time.perf_counter()
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    tolerance = options.relative_gap
    formulation = "max-min fairness LP (A2.1)" + (
        ", heterogeneity-agnostic" if params.heterogeneity_agnostic else ""
    )
    if m == 0:
        cert = Certificate(
            Termination.OPTIMAL, True, 0.0, 0.0, formulation=formulation, detail="no jobs"
        )
        return Plan.empty(0, n, cert)
    a, prop, thr = level_coefficients(problem, params.heterogeneity_agnostic, compat)
    s = problem.jobs.scale_factor_float
    W = problem.cluster.count_float
    ca, cs, ck, inverse = aggregate(a, s)
    build_time = time.perf_counter() - started
    lp = LevelProblem(ca, cs, W, ck)
    sol = solve_levels(lp, options.solver, deadline, options.threads)
    X = sol.X[inverse]
    y = sol.y[inverse] / ck[inverse]
    cert_started = time.perf_counter()
    levels_cert = certify(a, s, W, X, y, sol.pi)
    X = levels_cert.X
    if params.canonicalize is Canonicalization.SUM and sol.status.solved:
        second = certify(a, s, W, _maximize_sum(a, s, W, levels_cert.objective, deadline),
                         levels_cert.y, levels_cert.pi)
        if second.objective >= (1 - 1e-6) * levels_cert.objective:  # else keep stage one
            levels_cert = second
        X = levels_cert.X
    gap = relative_gap(levels_cert.objective, levels_cert.bound)
    # the repaired X is always feasible; without a proven optimum it counts as a plan when it
    # gives every job some level
    has_plan = sol.status.solved or levels_cert.objective > 0
    ended = termination(sol.status, has_plan, gap, tolerance)
    post_time = time.perf_counter() - cert_started
    cert = Certificate(
        termination=ended,
        maximize=True,
        objective=levels_cert.objective,
        bound=levels_cert.bound,
        solver=sol.solver,
        solver_version=sol.solver_version,
        formulation=f"{formulation}; {sol.method}; {lp.a.shape[0]} classes of {m} jobs",
        build_time_s=build_time + post_time,
        solve_time_s=sol.solve_time_s,
        model_size=ModelSize(sol.variables, sol.constraints, sol.nonzeros, 0),
        max_violation=levels_cert.max_violation,
        detail=sol.detail,
    )
    effective = np.einsum("ij,ij->i", thr, X)
    normalized = np.divide(effective, prop, out=np.zeros(m), where=prop > 0)
    return Plan(
        time_share=X,
        effective_throughput=np.einsum("ij,ij->i", problem.jobs.throughput, X),
        normalized_throughput=normalized,
        objective_value=levels_cert.levels,
        job_dual=levels_cert.y,
        accelerator_prices=levels_cert.pi,
        certificate=cert,
        job_status=(JobStatus.ALLOCATED,) * m,
        job_reason=("",) * m,
    )


def _maximize_sum(
    a: FloatArray, s: FloatArray, W: FloatArray, t_star: float, deadline: Deadline
) -> FloatArray:
    """Second stage: maximize sum of levels with every level >= (1 - 1e-7) t*."""
    m, n = a.shape
    ii, jj = np.nonzero(a > 0)
    nv = ii.size
    matrix = sp.csc_matrix(
        (
            np.concatenate([-a[ii, jj], s[ii], np.ones(nv)]),
            (np.concatenate([ii, m + jj, m + n + ii]), np.concatenate([np.arange(nv)] * 3)),
        ),
        shape=(2 * m + n, nv),
    )
    b = np.concatenate([np.full(m, -(1 - 1e-7) * t_star), W, np.ones(m)])
    c = a[ii, jj].copy()
    result = solve_lp(c, matrix, b, SolverPreference.CLARABEL, deadline)
    X = np.zeros((m, n))
    if result.solved:
        X[ii, jj] = result.x
    return X
