"""The Partial Allocation mechanism (Cole, Gkatzelis, Goel; B1) over bundles.

Bidders i = 0..a-1 each report a value V_i(b) > 0 for every bundle b of their table (a vector
of resource use: devices per type, devices per node) and V_i(none) > 0 for getting nothing.
A bidder receives at most one bundle of its table (a bidder's value of any set of devices is
that of the best listed bundle it contains, so nothing is lost by handing out listed bundles
only).

**Proportional-fair allocation, exact.** maximize sum_i log V_i(G_i) over feasible choices is
the MILP

    maximize  sum_i log V_i(none) + sum_k gain_k z_k,   gain_k = log V_bidder(k)(b_k) - log V(none)
    s.t.      sum_{k of bidder i} z_k <= 1              (one bundle per bidder)
              sum_k use[k, r] z_k <= capacity_r          (every resource r)
              z binary,

built only on bids with gain_k > 0 (the others are never strictly better than nothing). It is
solved by HiGHS's branch and bound to an absolute gap on the log-welfare (`abs_gap`), with the
solver's best bound reported, on the bundles the dominance reduction keeps (`dominated`); when
every bidder's best bundle fits at once, that choice is optimal without a solve.

**Payments.** For each winner i, the welfare of the others at G*, W_-i = sum_{k != i} log
V_k(G*_k), is compared with the optimum OPT_-i of the same program without bidder i:
c_i = exp(W_-i - OPT_-i) in (0, 1] (G* restricted to the others is feasible without i, so
OPT_-i >= W_-i [derived, as in A2.9]). Winner i keeps the fraction c_i of its bundle; the rest
is the hidden payment. An absolute error e of OPT_-i is a relative error of at most e in c_i.

With utility u_i = c_i V_i(G_i) (the value of keeping a bundle for a fraction c of the lease is
c times its value), u_i = (product of all values at G*) / (product of the others' values at
their optimum without i); the numerator is maximized by reporting truthfully and the
denominator does not depend on i's report: truthful reporting is a dominant strategy when
the programs are solved exactly.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.solver.backends.highs import INFINITY, HighsSettings, LinearModel, solve_highs
from apportion.solver.backends.highs_startup import BUNDLE_MILP, can_start
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import FloatArray, IntArray
from apportion.solver.result import ModelSize

ABS_GAP = 1e-7
"""Default absolute gap on the log-welfare (also the relative accuracy of every c_i)."""
NOT_STARTED = "greedy"
"""`Welfare.solver` of an allocation whose program was not started in the time left (the
greedy fill's choice)."""


@dataclass(frozen=True)
class Bids:
    """Bundle bids of `num_bidders` bidders over R resources."""

    bidder: IntArray
    """(K,) the bidder of each bid."""
    use: sp.csr_matrix
    """(K, R) resource use of each bid's bundle (devices), sparse (a bundle names a type and a
    few nodes); a dense array is converted."""
    value: FloatArray
    """(K,) V of each bundle (> 0)."""
    outside: FloatArray
    """(a,) V without a bundle (> 0)."""
    capacity: FloatArray
    """(R,) what is offered of each resource."""
    max_winners: int = 0
    """A bound on how many bidders can win at once (Themis: the free devices); 0 = the
    number of bidders. Enables the dominance reduction (`dominated`)."""

    def __post_init__(self) -> None:
        if not isinstance(self.use, sp.csr_matrix):
            object.__setattr__(self, "use", sp.csr_matrix(self.use, dtype=np.float64))

    @property
    def num_bidders(self) -> int:
        return int(self.outside.size)


@dataclass(frozen=True)
class Welfare:
    """A proportional-fair allocation (or the optimum without one bidder)."""

    choice: IntArray
    """(a,) bid index won by each bidder, -1 = none (and for an excluded bidder)."""
    objective: float
    """sum of log V over the bidders (excluded bidder left out) at `choice`."""
    bound: float
    """Proven upper bound on the optimum (= objective when solved exactly)."""
    status: SolverStatus
    solve_time_s: float
    size: ModelSize
    solver: str
    solver_version: str = ""
    detail: str = ""


@dataclass(frozen=True)
class PartialAllocation:
    """The mechanism's outcome."""

    welfare: Welfare
    """The proportional-fair allocation G*."""
    kept_fraction: FloatArray
    """(a,) c_i for winners (in (0, 1]); NaN for the others."""
    kept_lower: FloatArray
    """(a,) proven lower bound of c_i (from OPT_-i's bound); NaN for the others."""
    payment_solves: int
    """Programs solved for the payments (winners whose removal changes nothing need none)."""
    payments_exact: bool
    """Every c_i is within `abs_gap` (relative) of its exact value."""
    solve_time_s: float
    detail: str = ""
    payments_cut: bool = False
    """The time limit passed before every winner was priced (the rest keep c_i = 1)."""


def _best_choice(bids: Bids, keep: np.ndarray) -> IntArray:
    """Per bidder, its highest-gain bid with positive gain among `keep` (ties: the first;
    -1 = none)."""
    choice = np.full(bids.num_bidders, -1, np.int64)
    gain = np.log(bids.value) - np.log(bids.outside[bids.bidder])
    candidates = np.flatnonzero(keep & (gain > 0))
    if candidates.size:
        order = candidates[np.lexsort((candidates, -gain[candidates]))]
        _, first = np.unique(bids.bidder[order], return_index=True)
        choice[bids.bidder[order[first]]] = order[first]
    return choice


def welfare_of(bids: Bids, choice: IntArray, exclude: int = -1) -> float:
    """sum_i log V_i(choice_i) over the bidders other than `exclude`."""
    values = bids.outside.copy()
    won = choice >= 0
    values[won] = bids.value[choice[won]]
    mask = np.ones(values.size, bool)
    if exclude >= 0:
        mask[exclude] = False
    return float(np.sum(np.log(values[mask])))


def feasible(bids: Bids, choice: IntArray, tolerance: float = 1e-9) -> bool:
    """The chosen bundles fit the capacity together."""
    won = choice[choice >= 0]
    use = np.asarray(bids.use[won].sum(axis=0)).ravel() if won.size else \
        np.zeros(bids.capacity.size)
    return bool(np.all(use <= bids.capacity + tolerance))


GREEDY_WINDOW = 1024
"""Bundles the greedy fill looks at in its first step (`_greedy_fill`)."""
GREEDY_MIN_WINDOW = 64
"""Bundles it looks at, at least, in a step after a refusal (fewer if the first step did)."""


def _greedy_fill(
    bids: Bids, cols: IntArray, gain: FloatArray, window: int = GREEDY_WINDOW
) -> IntArray:
    """A feasible choice: bundles (among `cols`) in decreasing gain (ties: index) are taken in
    turn when their bidder has none yet and they fit what is left of every resource.

    Array steps over a window of that order instead of one bundle at a time. A bundle that
    does not fit now never will (what is left only shrinks), and a bidder that holds a bundle
    takes no other, so both are dropped first. Of the rest, each bidder's first bundle is
    taken up to the first one whose resources' running sums (in order) exceed what is left:
    that one is refused and the next step starts after it. What is left is compared with the
    running sum of the takes, which is the sequential rule's arithmetic when uses and
    capacities are whole numbers (devices); a fraction can differ by rounding. `window`: the
    bundles looked at in the first step (it doubles while no bundle is refused)."""
    choice = np.full(bids.num_bidders, -1, np.int64)
    left = bids.capacity.astype(np.float64).copy()
    order = cols[np.lexsort((cols, -gain[cols]))]
    use = bids.use[order]  # row r = the bundle at position r of the order
    indptr, indices, data = use.indptr, use.indices, use.data
    bidder = bids.bidder[order]
    resources = left.size
    position, floor = 0, min(window, GREEDY_MIN_WINDOW)
    while position < order.size:
        stop = min(order.size, position + window)
        lo, hi = int(indptr[position]), int(indptr[stop])
        row = np.repeat(np.arange(stop - position), np.diff(indptr[position:stop + 1]))
        at, amount = indices[lo:hi], data[lo:hi]
        too_big = np.zeros(stop - position, bool)
        too_big[row[amount > left[at] + 1e-9]] = True
        alive = np.flatnonzero(~too_big & (choice[bidder[position:stop]] < 0))
        # each bidder's first live bundle (a later one is taken only after a refusal)
        _, first = np.unique(bidder[position + alive], return_index=True)
        candidate = np.zeros(stop - position, bool)
        candidate[alive[first]] = True
        # running sum of the candidates' use per resource, in order
        entry = np.flatnonzero(candidate[row])
        by_resource = entry[np.argsort(at[entry], kind="stable")]
        total = np.cumsum(amount[by_resource])
        resource = at[by_resource]
        starts = np.flatnonzero(np.r_[resource[:1] >= 0, resource[1:] != resource[:-1]])
        before = np.repeat(total[starts] - amount[by_resource][starts],
                           np.diff(np.r_[starts, resource.size]))
        over = row[by_resource[total - before > left[resource] + 1e-9]]
        refused = int(over.min()) if over.size else stop - position
        taken = np.flatnonzero(candidate[:refused])
        choice[bidder[position + taken]] = order[position + taken]
        took = entry[row[entry] < refused]
        left -= np.bincount(at[took], weights=amount[took], minlength=resources)
        if over.size:  # the refused bundle is settled too; look less far after a refusal
            position += refused + 1
            window = max(floor, 2 * (refused + 1))
        else:
            position = stop
            window *= 2
    return choice


def dominated(bids: Bids, cols: IntArray, gain: FloatArray) -> NDArray[np.bool_]:
    """(cols.size,) bundles that some optimal choice avoids, exactly [derived]: a bundle k
    that uses one resource only (r, `size` units) is dropped when at least `max_winners` other
    bundles on r alone, of size <= size_k, rank before it (higher gain; ties by index), each
    of another bidder. In a choice with k, at most max_winners - 1 other bidders win, so one of
    the max_winners best of those is free and takes k's place (it fits, and gains as much);
    the best max_winners of any such class are never dropped themselves, so the swaps end."""
    limit = bids.max_winners
    out = np.zeros(cols.size, bool)
    if limit <= 0 or cols.size <= limit:
        return out
    use = bids.use[cols]
    use.eliminate_zeros()
    single = np.diff(use.indptr) == 1
    first = np.minimum(use.indptr[:-1], max(use.indices.size - 1, 0))
    resource = np.where(single, use.indices[first] if use.indices.size else 0, -1)
    size = np.where(single, use.data[first] if use.data.size else 0.0, 0.0)
    for r in np.unique(resource[single]):
        on = np.flatnonzero(single & (resource == r))
        if on.size <= limit:
            continue
        owners = bids.bidder[cols[on]]
        if np.unique(owners).size < owners.size:
            continue  # a bidder with two bundles on r: not reduced
        for v in np.unique(size[on]):
            pool = on[size[on] <= v]
            order = pool[np.lexsort((cols[pool], -gain[cols[pool]]))]
            behind = order[limit:]  # at least `limit` bundles of the class rank before these
            out[behind[size[behind] == v]] = True
    return out


def proportional_fair(
    bids: Bids,
    exclude: int = -1,
    abs_gap: float = ABS_GAP,
    deadline: Deadline = NO_DEADLINE,
    threads: int = 0,
    start: IntArray | None = None,
) -> Welfare:
    """The proportional-fair allocation of `bids` without bidder `exclude` (module docstring):
    the MILP on the bundles `dominated` keeps; `start` (a feasible choice, e.g. the allocation
    with one bidder removed), or else a greedy fill, is kept when the solver finds nothing
    better. (HiGHS 1.16 can return a MIP start as its solution while reporting a better
    objective, so no start is handed to it.)"""
    a = bids.num_bidders
    keep = np.ones(bids.bidder.size, bool)
    if exclude >= 0:
        keep &= bids.bidder != exclude
    greedy = _best_choice(bids, keep)
    if feasible(bids, greedy):  # every bidder's favourite fits: optimal without a solve
        value = welfare_of(bids, greedy, exclude)
        return Welfare(greedy, value, value, SolverStatus.OPTIMAL, 0.0, ModelSize(),
                       "closed form", detail="every best bundle fits")
    gain = np.log(bids.value) - np.log(bids.outside[bids.bidder])
    cols = np.flatnonzero(keep & (gain > 0))
    cols = cols[~dominated(bids, cols, gain)]
    given = None if start is None else np.where(np.arange(a) == exclude, -1, start)
    # the given start (a feasible choice on the kept bundles), else a greedy fill
    usable = given is not None and feasible(bids, given) and bool(
        np.isin(given[given >= 0], cols).all())
    incumbent = given if usable and given is not None else _greedy_fill(bids, cols, gain)
    base = float(np.sum(np.log(bids.outside[np.arange(a) != exclude])))
    matrix, rhs = _rows(bids, cols)
    size = ModelSize(variables=cols.size, constraints=rhs.size, nonzeros=matrix.nnz,
                     integer_variables=cols.size)
    if not can_start(deadline, BUNDLE_MILP, size):
        # no time for the program (HiGHS would overrun the limit before first reading it):
        # the feasible start, bound unknown
        value = welfare_of(bids, incumbent, exclude)
        return Welfare(incumbent, value, math.inf, SolverStatus.TIME_LIMIT, 0.0, ModelSize(),
                       NOT_STARTED, detail="time limit reached before the program was solved")
    k = cols.size
    model = LinearModel(
        cost=gain[cols],
        matrix=matrix,
        row_lower=np.full(rhs.size, -INFINITY),
        row_upper=rhs,
        col_lower=np.zeros(k),
        col_upper=np.ones(k),
        integer=np.ones(k, bool),
        maximize=True,
    )
    # many small programs one after another: one thread each beats HiGHS's parallel search
    settings = HighsSettings(mip_rel_gap=1e-12, mip_abs_gap=abs_gap, threads=threads or 1)
    result = solve_highs(model, settings, deadline)
    choice = incumbent
    if result.has_solution:
        picked = cols[result.x > 0.5]
        found = np.full(a, -1, np.int64)
        found[bids.bidder[picked]] = picked
        if feasible(bids, found) and welfare_of(bids, found, exclude) > \
                welfare_of(bids, incumbent, exclude):
            choice = found
    objective = welfare_of(bids, choice, exclude)
    bound = base + result.bound if result.bound is not None else math.inf
    if result.status is SolverStatus.OPTIMAL and result.bound is None:
        bound = objective
    return Welfare(choice, objective, max(bound, objective), result.status,
                   result.solve_time_s, result.size, result.solver, result.solver_version,
                   result.detail)


def _closed_form_winners(bids: Bids, winners: IntArray) -> IntArray:
    """The `winners` without whom every other bidder's favourite bundle fits, so that their
    payment needs no program (`proportional_fair`'s closed form): a winner's favourite uses at
    least what all favourites exceed each resource by."""
    favourite = _best_choice(bids, np.ones(bids.bidder.size, bool))
    total = np.asarray(bids.use[favourite[favourite >= 0]].sum(axis=0)).ravel()
    over = total - bids.capacity - 1e-9
    short = np.flatnonzero(over > 0)
    own = bids.use[favourite[winners]][:, short].toarray()
    return winners[np.all(own >= over[short], axis=1)]


def _rows(bids: Bids, cols: IntArray) -> tuple[sp.csc_matrix, FloatArray]:
    """Rows of the program on the bundles `cols`: one bundle per bidder, then every resource
    some bundle uses (`<=`)."""
    k = cols.size
    bidders, owner_row = np.unique(bids.bidder[cols], return_inverse=True)
    chosen = bids.use[cols].tocoo()
    keep = chosen.data != 0
    used, resource_row = np.unique(chosen.col[keep], return_inverse=True)
    rows = np.concatenate([owner_row, bidders.size + resource_row])
    colsx = np.concatenate([np.arange(k), chosen.row[keep]])
    vals = np.concatenate([np.ones(k), chosen.data[keep]])
    n_rows = bidders.size + used.size
    matrix = sp.csc_matrix((vals, (rows, colsx)), shape=(n_rows, k))
    return matrix, np.concatenate([np.ones(bidders.size), bids.capacity[used]])


def partial_allocation(
    bids: Bids,
    abs_gap: float = ABS_GAP,
    deadline: Deadline = NO_DEADLINE,
    threads: int = 0,
) -> PartialAllocation:
    """Solve the proportional-fair allocation, then every winner's payment (module
    docstring). A winner whose removal leaves the others' optimum unchanged without a solve
    (their favourite bundles all fit) is priced in closed form. If the deadline passes, the
    remaining winners keep c_i = 1 (no payment) and `payments_exact` is False; so do, at once,
    all but the closed-form ones when the proportional-fair program itself could not be
    started in the time left."""
    started = time.perf_counter()
    pf = proportional_fair(bids, abs_gap=abs_gap, deadline=deadline, threads=threads)
    a = bids.num_bidders
    kept = np.full(a, math.nan)
    lower = np.full(a, math.nan)
    exact = pf.status is SolverStatus.OPTIMAL
    solves = 0
    skipped = 0
    winners = np.flatnonzero(pf.choice >= 0)
    if pf.solver == NOT_STARTED and winners.size:
        # each payment program is the program that could not be started, less one bidder's
        # bundles: none is started either. The winners priced in closed form are priced; the
        # others keep their bundles whole at once (as they would after trying)
        closed = _closed_form_winners(bids, winners)
        kept[winners], lower[winners] = 1.0, 0.0
        skipped += winners.size - closed.size
        exact = False
        winners = closed
    for position, i in enumerate(winners.tolist()):
        if deadline.expired():  # the rest keep their bundles whole: no payment
            kept[winners[position:]], lower[winners[position:]] = 1.0, 0.0
            skipped += winners.size - position
            exact = False
            break
        others = welfare_of(bids, pf.choice, exclude=i)
        without = proportional_fair(bids, exclude=int(i), abs_gap=abs_gap, deadline=deadline,
                                    threads=threads, start=pf.choice)
        solves += without.solver not in ("closed form", NOT_STARTED)
        best = max(without.objective, others)
        kept[i] = min(1.0, math.exp(others - best))
        lower[i] = min(kept[i], math.exp(others - max(without.bound, best)))
        if without.status is not SolverStatus.OPTIMAL or without.bound - best > abs_gap * 1.01:
            exact = False
        if without.status.limit_reached:
            skipped += 1  # priced against the best choice found in time
    detail = f"{int((pf.choice >= 0).sum())} winners, {solves} payment programs"
    if skipped:
        detail += (f"; {skipped} payments cut by the time limit (c_i = 1, or priced against "
                   "the best choice found in time)")
    return PartialAllocation(pf, kept, lower, solves, exact,
                             time.perf_counter() - started, detail, payments_cut=skipped > 0)


@dataclass(frozen=True)
class DivisibleAllocation:
    """The mechanism on divisible device-time with linear valuations (Cole et al.'s setting)."""

    time_share: FloatArray
    """(a, n) the proportional-fair time shares X* (before payments)."""
    utility: FloatArray
    """(a,) V_i(X*_i) = sum_j value[i, j] X*[i, j]."""
    kept_fraction: FloatArray
    """(a,) c_i in (0, 1]: bidder i keeps c_i X*_i."""
    objective: float
    """sum_i log V_i(X*_i)."""
    bound: float
    """Proven upper bound on the proportional-fair optimum (Lagrangian dual)."""
    status: SolverStatus
    payments_exact: bool
    """Every payment program ended with its gap within `abs_gap`."""
    solve_time_s: float
    size: ModelSize
    solver_version: str
    payments_cut: bool = False
    """The time limit passed before every bidder was priced (the rest keep c_i = 1)."""


def divisible_partial_allocation(
    value: FloatArray,
    scale: FloatArray,
    capacity: FloatArray,
    abs_gap: float = 1e-6,
    deadline: Deadline = NO_DEADLINE,
) -> DivisibleAllocation:
    """Partial Allocation when bidder i values time shares X_i (of devices of each type, s_i
    devices while it runs, sum_j X_ij <= 1) linearly, V_i(X_i) = sum_j value[i, j] X_ij: the
    proportional-fair allocation is the Eisenberg-Gale program with equal budgets
    (`fisher_market.solve_market`, exact conic with a dual bound) and each c_i needs the same
    program without bidder i. Every row of `value` needs a positive entry on a type with
    capacity. Valuations are homogeneous of degree 1, which is Cole et al.'s setting for the
    1/e guarantee."""
    from apportion.formulations.fisher_market import solve_market

    started = time.perf_counter()
    a = value.shape[0]
    ones = np.ones(a)
    full = solve_market(value, scale, capacity, ones, deadline)
    utility = full.utility
    logs = np.log(np.maximum(utility, 1e-300))
    kept = np.ones(a)
    exact = full.status.solved and full.bound - full.objective <= abs_gap
    cut = False
    for i in range(a):
        if a == 1:
            break
        if deadline.expired():
            exact, cut = False, True
            break
        rest = np.arange(a) != i
        without = solve_market(value[rest], scale[rest], capacity, ones[:-1], deadline)
        others = float(logs[rest].sum())
        best = max(without.objective, others)
        kept[i] = min(1.0, math.exp(others - best))
        if not without.status.solved or without.bound - best > abs_gap:
            exact = False
        cut |= without.status.limit_reached
    return DivisibleAllocation(full.X, utility, kept, full.objective, full.bound, full.status,
                               exact, time.perf_counter() - started, full.size,
                               full.solver_version, payments_cut=cut)
