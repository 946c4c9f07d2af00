"""Themis's partial-allocation auction (B1), one allocation epoch per call.

Each job is an app with one gang of s_i devices. Per epoch:

1. **Leases.** A job whose `history.jobs[].lease_expires_s` is after `time_s` keeps its current
   placement (`history.jobs[].current`) for the fraction `lease_time_share` of the time; those
   devices are not offered.
2. **Who bids.** The other jobs with work left are ranked by rho without a new grant, worst
   first; the free devices are offered to the first ceil((1 - f) N) of these N jobs (at least
   one), f = `fairness_knob`.
3. **Bids.** A job's bid table comes from the snapshot (`jobs[].themis_bids`: rho without a
   grant and rho per bundle; a bundle is s_i devices of one type, optionally on named nodes)
   or is derived: one bundle per type the job can use, valued with the finish-time ratio of
   A2.5 over the lease horizon L (our choice): with throughput thr on the bundle the job runs
   at thr for the lease, then at its isolated (1/N share) throughput iso_i, so its finish time
   from arrival is t_i + R_i/thr if it finishes within the lease, else
   t_i + L + (R_i - thr L)/iso_i; rho = that / (C_i + R_i/iso_i) times the priority weight as in
   finish-time fairness (C_i from the history as there). Without a grant thr = 0.
   Valuation V = 1/rho.
4. **Partial Allocation** (`apportion.formulations.partial_allocation`): the proportional-fair
   bundles, exact (MILP), and each winner's kept fraction c_i (exact, one program per winner).
   A winner runs on its bundle's type for the fraction c_i of the time under a new lease of
   length L (`Lease.time_share` = c_i) and its bundle is placed on nodes (named nodes as bid,
   else `node_pool`'s rule).
5. **Leftover allocation.** The device-time nobody holds (devices not won, the withheld
   1 - c_i of every won bundle, the unused part of leases kept below share 1) goes to the jobs
   that did not win, as time shares (jobs not offered first, then losing bidders, then lease
   holders; worst rho first; each on its fastest types with device-time left). It never goes
   back to a winner (that would refund its payment), so devices stay idle only when every job
   that can use them already runs all the time: work-conserving.

**Divisible shares** (`divisible_shares`): the offered device-time is auctioned as divisible
time shares instead of bundles, each bidder valuing X_i linearly, V_i = thr_i(X_i) / iso_i;
the proportional-fair allocation is the Eisenberg-Gale program (conic, with a Lagrangian bound)
and each winner keeps c_i X*_i. This is Cole et al.'s setting (valuations homogeneous of degree
1), where the mechanism is truthful and c_i >= 1/e. No bid tables and no leases (the shares
are time shares for the round mechanism).

Certificate: objective = the proportional-fair log-welfare sum_bidders log V_i(G*_i), bound =
the program's proven bound, gap on the scale of the number of bidders; `optimal` also requires
every payment program to be solved to the same absolute gap.

Time limit: the programs stop at the deadline (a winner not priced in time keeps its whole
bundle; the plan is then `feasible`), and leave the placement, the leftover allocation and the
plan their time. That work, and the bids and greedy start before the programs, is not cut:
with less time left at the start than it takes (`START_S_PER_JOB`, `PLAN_S_PER_JOB`,
`PLACE_S_PER_WINNER`), the call answers `no_solution` at once, saying why.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from itertools import repeat
from operator import is_not

import numpy as np
import scipy.sparse as sp

from apportion.formulations.gavel_lp import FtfData, ftf_data
from apportion.formulations.leases import held_devices, holding_leases, keep_leases
from apportion.formulations.node_pool import NodePool, node_pools
from apportion.formulations.partial_allocation import (
    Bids,
    divisible_partial_allocation,
    partial_allocation,
)
from apportion.solver.backends.status import SolverStatus
from apportion.solver.certificate import termination
from apportion.solver.deadline import Deadline
from apportion.solver.fairness_model import FairnessInputs
from apportion.solver.fairness_result import AuctionOutcome, AuctionSection, Lease
from apportion.solver.model import Compat, FloatArray, IntArray, Problem, SolveOptions
from apportion.solver.parameters import ThemisAuctionParameters
from apportion.solver.result import Certificate, JobStatus, ModelSize, Plan, Termination

BoolArray = np.ndarray

START_S_PER_JOB = 2e-6
"""Time (s) per job of the work before the mechanism that no deadline cuts: free devices per
node, the bid rows, the mechanism's input and its greedy start (measured 0.6-0.9 us per job of
CPU time at 100,000 jobs; the wall time is about twice the CPU time at load average 3.5 on a
2-core machine, and every estimate here allows for that)."""
PLAN_S_PER_JOB = 5e-6
"""Time (s) held back from the mechanism per job for the leftover allocation and the plan
(measured 1.8-2.5 us per job of CPU time at 100,000 jobs, most of it the plan's per-job
`AuctionOutcome`s)."""
PLACE_S_PER_WINNER = 5e-6
"""Time (s) held back per bidder for placing the winners on nodes (measured 1.7 us per winner
of CPU time at 20,000 winners on 9,375 nodes)."""


@dataclass(frozen=True)
class Bundles:
    """The bid rows, per job in job order, each job's as its table lists them (derived
    tables: in type order)."""

    job: IntArray
    type_index: IntArray
    rho: FloatArray
    """Reported (or derived) rho with the bundle."""
    bundle: IntArray
    """Index of the bundle in its job's table."""
    node_devices: dict[int, tuple[tuple[int, int], ...]]
    """(node, devices) pairs of the rows that name nodes (the others: any devices)."""

    @property
    def size(self) -> int:
        return int(self.job.size)


def lease_rho(data: FtfData, i: int, thr: float, lease_s: float) -> float:
    """Derived rho of job i running at `thr` steps/s for the lease, then at iso_i (step 3)."""
    R, iso = float(data.R[i]), float(data.iso[i])
    if thr > 0 and thr * lease_s >= R:
        finish = data.t[i] + R / thr
    else:
        finish = data.t[i] + lease_s + (R - thr * lease_s) / iso
    return float(finish / data.D[i])


def lease_rhos(data: FtfData, jobs: IntArray, thr: FloatArray, lease_s: float) -> FloatArray:
    """`lease_rho` of each job of `jobs` at its `thr`, vectorized (the same arithmetic)."""
    R, iso, t = data.R[jobs], data.iso[jobs], data.t[jobs]
    with np.errstate(divide="ignore", invalid="ignore"):
        within = t + R / thr
        after = t + lease_s + (R - thr * lease_s) / iso
    return np.where((thr > 0) & (thr * lease_s >= R), within, after) / data.D[jobs]


def offered_jobs(rho_without: FloatArray, candidates: IntArray, knob: float) -> IntArray:
    """The worst ceil((1 - f) N) candidates by rho (ties: lower index), at least one."""
    if candidates.size == 0:
        return candidates
    candidates = np.sort(candidates)
    order = candidates[np.argsort(-rho_without[candidates], kind="stable")]
    count = max(1, math.ceil((1.0 - knob) * candidates.size - 1e-12))
    return np.sort(order[:count])


def _bundles(
    problem: Problem,
    fair: FairnessInputs,
    data: FtfData,
    offered: IntArray,
    pools: list[NodePool],
    lease_s: float,
    with_table: BoolArray | None = None,
) -> Bundles:
    """Every bid of the offered jobs that fits the free devices (`with_table`: (m,) the jobs
    with a bid table, if known)."""
    s = problem.jobs.scale_factor
    has_table = np.array(list(map(is_not, fair.bids, repeat(None))), bool)[offered] \
        if with_table is None else with_table[offered]
    derived = offered[~has_table]
    # derived tables: one bundle per usable type whose free devices hold the gang
    pool_size = np.array([pool.pool for pool in pools], np.int64)
    rows, types = np.nonzero(problem.usable[derived] & (s[derived, None] <= pool_size[None, :]))
    jobs = derived[rows]
    rhos = lease_rhos(data, jobs, problem.jobs.throughput[jobs, types], lease_s)
    # tables from the snapshot: each listed bundle whose devices are free
    listed: list[tuple[int, int, float, int]] = []
    named: list[tuple[tuple[int, int], ...]] = []
    for i in offered[has_table].tolist():
        table = fair.bids[i]
        assert table is not None
        for b, bid in enumerate(table.bundles):
            pool = pools[bid.type_index]
            if pool.fits(int(s[i])) and all(
                    pool.free.get(k, 0) >= d for k, d in bid.node_devices):
                listed.append((i, bid.type_index, bid.rho, b))
                named.append(bid.node_devices)
    table_rows = np.array(listed, np.float64).reshape(-1, 4)
    job = np.concatenate([jobs, table_rows[:, 0].astype(np.int64)])
    order = np.argsort(job, kind="stable")  # the jobs with tables are not among the derived
    position = np.empty(order.size, np.int64)
    position[order] = np.arange(order.size)
    return Bundles(
        job=job[order],
        type_index=np.concatenate([types, table_rows[:, 1].astype(np.int64)])[order],
        rho=np.concatenate([rhos, table_rows[:, 2]])[order],
        bundle=np.concatenate([types, table_rows[:, 3].astype(np.int64)])[order],
        node_devices={int(position[jobs.size + r]): pairs
                      for r, pairs in enumerate(named) if pairs},
    )


def auction_bids(
    bundles: Bundles, offered: IntArray, rho_without: FloatArray, problem: Problem,
    pools: list[NodePool],
) -> Bids:
    """The mechanism's input: resources are the n types, then the nodes."""
    n = problem.cluster.num_types
    nodes = len(problem.cluster.node_names)
    position = np.full(problem.jobs.num_jobs, -1, np.int64)
    position[offered] = np.arange(offered.size)
    # one entry per bundle on its type, then one per named node
    named = [(r, n + node, devices) for r, pairs in sorted(bundles.node_devices.items())
             for node, devices in pairs]
    listed = np.array(named, np.int64).reshape(-1, 3)
    rows = np.concatenate([np.arange(bundles.size), listed[:, 0]])
    cols = np.concatenate([bundles.type_index, listed[:, 1]])
    vals = np.concatenate([problem.jobs.scale_factor[bundles.job], listed[:, 2]])
    use = sp.csr_matrix((vals.astype(np.float64), (rows, cols)), shape=(bundles.size, n + nodes))
    capacity = np.zeros(n + nodes)
    for j, pool in enumerate(pools):
        capacity[j] = pool.pool
        capacity[n + np.array(list(pool.free), np.int64)] = list(pool.free.values())
    return Bids(
        bidder=position[bundles.job],
        use=use,
        value=1.0 / bundles.rho,
        outside=1.0 / rho_without[offered],
        capacity=capacity,
        max_winners=int(capacity[:n].sum()),  # every winner holds >= 1 free device
    )


def leftover_allocation(
    X: FloatArray, order: IntArray, left: FloatArray, problem: Problem
) -> FloatArray:
    """Give the device-time `left` (n,) to the jobs of `order` in turn, each on its fastest
    usable types, up to its time budget (step 5). Returns the device-time handed out.

    The rule, job by job: on each of its usable types fastest first that still has more than
    1e-12 left, the job takes x = min(room, left_j / s_i), room = 1 - sum_j X_ij, until its
    room is 1e-12 or less. Until some type runs out, every job takes its whole room on its
    first type with device-time left, so those stretches are array steps: per type, what is
    left after each job is a running difference in order (`np.subtract.accumulate`, the same
    arithmetic as one job after the other). A stretch ends at the first job that cannot take
    its whole room on that type (it has less left, or has run out during the stretch); that
    job takes by the rule above on its own, and the next stretch starts after it."""
    s = problem.jobs.scale_factor.astype(np.float64)
    order = np.asarray(order, np.int64)
    # each job's throughput on its usable types (-1 elsewhere) and its room before it takes
    speed = np.where(problem.usable[order], problem.jobs.throughput[order], -1.0)
    room = 1.0 - X[order].sum(axis=1)
    rest = left.astype(np.float64).copy()
    handed = np.zeros(rest.size)
    start = 0
    while start < order.size and rest.max(initial=0.0) > 1e-12:
        jobs = order[start:]
        # each job's fastest usable type with device-time left (ties: the lower index)
        open_speed = np.where(rest > 1e-12, speed[start:], -1.0)
        on = np.argmax(open_speed, axis=1)
        on[(open_speed[np.arange(jobs.size), on] < 0) | (room[start:] <= 1e-12)] = -1
        end = jobs.size  # the first job that cannot take its whole room on its type
        runs: list[tuple[int, IntArray, FloatArray, FloatArray]] = []
        for j in np.flatnonzero(np.bincount(on[on >= 0], minlength=rest.size)).tolist():
            takers = np.flatnonzero(on == j)
            whole_room = room[start + takers]
            amount = whole_room * s[jobs[takers]]
            after = np.subtract.accumulate(np.r_[rest[j], amount])
            short = whole_room > after[:-1] / s[jobs[takers]]
            if short.any():
                end = min(end, int(takers[np.argmax(short)]))
            runs.append((j, takers, amount, after))
        for j, takers, amount, after in runs:
            whole = int(np.searchsorted(takers, end))  # the takers before the stretch ends
            X[jobs[takers[:whole]], j] += room[start + takers[:whole]]
            rest[j] = after[whole]
            handed[j] = np.add.accumulate(np.r_[handed[j], amount[:whole]])[-1]
        if end < jobs.size:  # that job takes on its own, fastest type first
            i = int(jobs[end])
            row = X[i]
            for j in np.argsort(-speed[start + end], kind="stable").tolist():
                if speed[start + end, j] < 0 or rest[j] <= 1e-12:
                    continue
                room_i = 1.0 - row.sum()
                if room_i <= 1e-12:
                    break
                x = min(room_i, rest[j] / s[i])
                row[j] += x
                rest[j] -= x * s[i]
                handed[j] += x * s[i]
        start += end + 1
    left[:] = rest
    return handed


@dataclass(frozen=True)
class Epoch:
    """The jobs' situation before the auction."""

    data: FtfData
    active: BoolArray
    """(m,) jobs with work left or a bid table."""
    holding: BoolArray
    """(m,) jobs keeping an unexpired lease."""
    rho_without: FloatArray
    """(m,) rho without a new grant (NaN for inactive jobs)."""
    candidates: IntArray
    """Active jobs without a lease."""
    offered: IntArray
    """The candidates the free devices are offered to."""
    has_table: BoolArray
    """(m,) jobs with a bid table in the snapshot."""


@dataclass(frozen=True)
class Mechanism:
    """What the auction decided, per job, and how well it was solved."""

    kept: FloatArray
    """(m,) c_i of each winner, NaN for the others."""
    rho_won: FloatArray
    """(m,) rho with the won bundle (NaN: none, or a divisible share)."""
    bundle: IntArray
    """(m,) index of the won bundle in the job's table, -1 = none."""
    log_value: FloatArray
    """(m,) log V_i at the proportional-fair allocation (0 for jobs not offered)."""
    objective: float
    bound: float
    status: SolverStatus
    exact: bool
    """Every payment program was solved to the gap."""
    solver: str
    solver_version: str
    size: ModelSize
    solve_time_s: float
    bids: int
    detail: str
    payments_cut: bool = False
    """The time limit passed before every winner was priced (the rest keep their share)."""


def _epoch(problem: Problem, fair: FairnessInputs, params: ThemisAuctionParameters) -> Epoch:
    data = ftf_data(problem, problem.jobs.throughput, Compat.NONE)
    has_bids = np.array(list(map(is_not, fair.bids, repeat(None))), bool)
    active = data.active | has_bids
    holding = holding_leases(problem, fair) & active
    rho_without = np.full(problem.jobs.num_jobs, math.nan)
    derived = np.flatnonzero(active & ~has_bids)
    rho_without[derived] = lease_rhos(data, derived, np.zeros(derived.size), params.lease_s)
    for i in np.flatnonzero(active & has_bids).tolist():
        table = fair.bids[i]
        assert table is not None
        rho_without[i] = table.rho_without
    candidates = np.flatnonzero(active & ~holding)
    offered = offered_jobs(rho_without, candidates, params.fairness_knob)
    return Epoch(data, active, holding, rho_without, candidates, offered, has_bids)


def _bundle_auction(
    problem: Problem, fair: FairnessInputs, epoch: Epoch, pools: list[NodePool],
    params: ThemisAuctionParameters, X: FloatArray, leases: list[Lease | None],
    options: SolveOptions, deadline: Deadline,
) -> Mechanism:
    """Partial Allocation over bundles; winners' shares and leases written into X, leases."""
    jobs = problem.jobs
    m = jobs.num_jobs
    offered = epoch.offered
    bundles = _bundles(problem, fair, epoch.data, offered, pools, params.lease_s,
                       epoch.has_table)
    bids = auction_bids(bundles, offered, epoch.rho_without, problem, pools)
    # the tolerance is absolute on the log-welfare: the relative accuracy of every c_i
    outcome = partial_allocation(bids, options.relative_gap, deadline, options.threads)
    pf = outcome.welfare
    kept, rho_won = np.full(m, math.nan), np.full(m, math.nan)
    bundle_index = np.full(m, -1, np.int64)
    log_value = np.zeros(m)
    log_value[offered] = np.negative(list(map(math.log, epoch.rho_without[offered].tolist())))
    won = np.flatnonzero(pf.choice >= 0)
    winner, row = offered[won], pf.choice[won]
    kept[winner], rho_won[winner] = outcome.kept_fraction[won], bundles.rho[row]
    bundle_index[winner] = bundles.bundle[row]
    log_value[winner] = np.negative(list(map(math.log, bundles.rho[row].tolist())))
    place_winners(problem, pools, winner, bundles.type_index[row],
                  list(map(bundles.node_devices.get, row.tolist(), repeat(()))), X, kept,
                  leases, problem.time_s + params.lease_s)
    return Mechanism(kept, rho_won, bundle_index, log_value, pf.objective, pf.bound, pf.status,
                     outcome.payments_exact, pf.solver, pf.solver_version, pf.size,
                     outcome.solve_time_s, bundles.size,
                     f"{pf.detail}; {outcome.detail}" if pf.detail else outcome.detail,
                     outcome.payments_cut)


def place_winners(
    problem: Problem, pools: list[NodePool], winner: IntArray, type_index: IntArray,
    node_devices: list[tuple[tuple[int, int], ...]], X: FloatArray, kept: FloatArray,
    leases: list[Lease | None], expires_s: float,
) -> None:
    """Each winner runs on its bundle's type for its kept fraction under a new lease, on
    nodes: its bundle's named nodes (placed first), else by `node_pool`'s rule in decreasing
    gang size (ties: job index), its current nodes counting as previous ones when it runs on
    that type. Types are placed independently (a gang only takes from its type's pool)."""
    names = problem.cluster.node_names
    hist = problem.history
    s = problem.jobs.scale_factor[winner].astype(np.int64)
    same = hist.running()[winner] & (hist.current_type[winner] == type_index)
    taken: list[tuple[int, ...]] = [()] * winner.size
    named = np.array(list(map(bool, node_devices)), bool).reshape(-1)
    for j, pool in enumerate(pools):
        of_type = np.flatnonzero(type_index == j)
        of_type = of_type[np.lexsort((winner[of_type], -s[of_type]))]
        for g in of_type[named[of_type]].tolist():
            taken[g] = pool.take_exactly(node_devices[g])
        rest = of_type[~named[of_type]]
        previous = [hist.current_nodes[i] if keep else ()
                    for i, keep in zip(winner[rest].tolist(), same[rest].tolist(), strict=True)]
        for g, nodes in zip(rest.tolist(), pool.take_many(s[rest].tolist(), previous),
                            strict=True):
            taken[g] = nodes or ()
    X[winner, type_index] = kept[winner]
    on: dict[tuple[int, ...], tuple[str, ...]] = {(): ()}
    for nodes in taken:
        if nodes not in on:
            on[nodes] = tuple(names[k] for k in nodes)
    for i, lease in zip(winner.tolist(), map(
            Lease, type_index.tolist(), s.tolist(), map(on.__getitem__, taken),
            repeat(expires_s), kept[winner].tolist(), repeat(False)), strict=True):
        leases[i] = lease


def _divisible_auction(
    problem: Problem, epoch: Epoch, free: FloatArray, X: FloatArray, options: SolveOptions,
    deadline: Deadline,
) -> Mechanism:
    """Partial Allocation on divisible device-time with V_i(X_i) = thr_i(X_i) / iso_i (see
    `ThemisAuctionParameters.divisible_shares`); winners' kept shares written into X."""
    jobs = problem.jobs
    m = jobs.num_jobs
    iso = epoch.data.iso
    fits = problem.usable & (jobs.scale_factor[:, None] <= free[None, :])
    bidders = np.array([i for i in epoch.offered if fits[i].any()], np.int64)
    kept, rho_won = np.full(m, math.nan), np.full(m, math.nan)
    log_value = np.zeros(m)
    if bidders.size == 0:
        return Mechanism(kept, rho_won, np.full(m, -1, np.int64), log_value, 0.0, 0.0,
                         SolverStatus.OPTIMAL, True, "closed form", "", ModelSize(), 0.0, 0,
                         "no bidder fits the free devices")
    value = np.where(fits[bidders], jobs.throughput[bidders] / iso[bidders, None], 0.0)
    # the interior-point solves are accurate relative to the number of buyers (as the market's
    # own certificate), so the payments are checked on that scale too
    outcome = divisible_partial_allocation(value, jobs.scale_factor[bidders].astype(np.float64),
                                           free, options.relative_gap * bidders.size, deadline)
    kept[bidders] = outcome.kept_fraction
    log_value[bidders] = np.log(np.maximum(outcome.utility, 1e-300))
    X[bidders] += outcome.kept_fraction[:, None] * outcome.time_share
    return Mechanism(kept, rho_won, np.full(m, -1, np.int64), log_value, outcome.objective,
                     outcome.bound, outcome.status, outcome.payments_exact, "clarabel",
                     outcome.solver_version, outcome.size, outcome.solve_time_s,
                     int(bidders.size), f"{bidders.size} bidders, {bidders.size} payment "
                                        "programs (Eisenberg-Gale)", outcome.payments_cut)


def solve_policy(
    problem: Problem,
    parameters: ThemisAuctionParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """One Themis epoch (module docstring). `compat` is ignored (no upstream code exists)."""
    del compat
    started = time.perf_counter()
    jobs, cluster = problem.jobs, problem.cluster
    m, n = jobs.num_jobs, cluster.num_types
    fair = problem.fairness or FairnessInputs.empty(m)
    epoch = _epoch(problem, fair, parameters)
    # the work no deadline cuts: not started when it cannot be done in the time left
    placing = 0.0 if parameters.divisible_shares else PLACE_S_PER_WINNER * epoch.offered.size
    uncut = (START_S_PER_JOB + PLAN_S_PER_JOB) * m + placing
    if deadline.remaining() < uncut:
        return _not_started(problem, parameters, epoch, deadline.remaining(), uncut,
                            time.perf_counter() - started)
    X = np.zeros((m, n))
    leases = keep_leases(problem, fair, epoch.holding, X)
    pools = node_pools(problem, epoch.holding)
    free = np.array([pool.pool for pool in pools], np.float64)
    build = time.perf_counter() - started
    # the leftover allocation and the plan come after the mechanism (and, for bundles, the
    # placement of the winners)
    after = deadline.leaving(PLAN_S_PER_JOB * m + placing, 0.9)
    if parameters.divisible_shares:
        mechanism = _divisible_auction(problem, epoch, free, X, options, after)
    else:
        mechanism = _bundle_auction(problem, fair, epoch, pools, parameters, X, leases, options,
                                    after)
    won = ~np.isnan(mechanism.kept)
    left = free - jobs.scale_factor @ np.where(won[:, None], X, 0.0)
    # the part of each kept lease its holder does not run, added holder after holder
    held = np.flatnonzero(epoch.holding)
    held_type = problem.history.current_type[held]
    unused = held_devices(problem, held) * (1.0 - X[held, held_type])
    for j in np.unique(held_type).tolist():
        left[j] = np.add.accumulate(np.r_[left[j], unused[held_type == j]])[-1]
    # jobs not offered, then losing bidders (each worst rho first, ties: index), then holders
    rank = np.where(np.isnan(epoch.rho_without), -np.inf, epoch.rho_without)
    was_offered = np.zeros(m, bool)
    was_offered[epoch.offered] = True
    not_offered = epoch.candidates[~was_offered[epoch.candidates]]
    losers = epoch.offered[~won[epoch.offered]]
    order = np.concatenate([
        not_offered[np.lexsort((not_offered, -rank[not_offered]))],
        losers[np.lexsort((losers, -rank[losers]))],
        np.flatnonzero(epoch.holding),
    ])
    handed = leftover_allocation(X, order, np.maximum(left, 0.0), problem)
    return _plan(problem, parameters, epoch, X, leases, mechanism, handed, build,
                 options.relative_gap)


def _formulation(parameters: ThemisAuctionParameters, epoch: Epoch, bids: int) -> str:
    kind = "divisible shares" if parameters.divisible_shares else \
        f"{bids} bundles, proportional-fair MILP"
    return (f"Themis partial allocation: {epoch.offered.size} of {epoch.candidates.size} jobs "
            f"bid (f = {parameters.fairness_knob:g}), {kind} + payments")


def _not_started(
    problem: Problem, parameters: ThemisAuctionParameters, epoch: Epoch, left_s: float,
    needed_s: float, build: float,
) -> Plan:
    """No plan: the time left cannot cover the epoch's work that no deadline cuts."""
    cert = Certificate(Termination.NO_SOLUTION, True, solver="closed form",
                       formulation=_formulation(parameters, epoch, 0), build_time_s=build)
    return Plan.not_started(problem.jobs.num_jobs, problem.cluster.num_types, cert, left_s,
                            needed_s, "the auction's bids, placement, leftover allocation, "
                                      "the plan")


def _plan(
    problem: Problem,
    parameters: ThemisAuctionParameters,
    epoch: Epoch,
    X: FloatArray,
    leases: list[Lease | None],
    mechanism: Mechanism,
    handed: FloatArray,
    build: float,
    tolerance: float,
) -> Plan:
    jobs = problem.jobs
    m, n = X.shape
    offered = epoch.offered.size
    was_offered = np.zeros(m, bool)
    was_offered[epoch.offered] = True
    outcomes = tuple(map(AuctionOutcome, was_offered.tolist(), epoch.rho_without.tolist(),
                         mechanism.rho_won.tolist(), mechanism.kept.tolist(),
                         mechanism.bundle.tolist()))
    active = epoch.active.tolist()
    reasons = list(map(("no remaining work", "").__getitem__, active))
    for i in np.flatnonzero(epoch.active & epoch.holding).tolist():
        reasons[i] = "keeps its lease"
    winners = np.flatnonzero(epoch.active & ~np.isnan(mechanism.kept))
    for i, text in zip(winners.tolist(), map(
            "won in the auction, keeps {:.4g} of its share".format,
            mechanism.kept[winners].tolist()), strict=True):
        reasons[i] = text
    status = tuple(map((JobStatus.FINISHED, JobStatus.ALLOCATED).__getitem__, active))
    thr = np.einsum("ij,ij->i", jobs.throughput, X)
    iso = epoch.data.iso
    normalized = np.divide(thr, iso, out=np.zeros(m), where=iso > 0)
    formulation = _formulation(parameters, epoch, mechanism.bids)
    scale = max(1.0, float(offered))
    if not offered:
        cert = Certificate(Termination.OPTIMAL, True, 0.0, 0.0, solver="closed form",
                           formulation=formulation, build_time_s=build,
                           detail="no job to offer devices to")
    else:
        gap = Certificate(Termination.OPTIMAL, True, mechanism.objective, mechanism.bound,
                          gap_scale=scale).gap
        ended = termination(mechanism.status, True, gap, tolerance)
        detail = mechanism.detail
        if mechanism.payments_cut and ended in (Termination.OPTIMAL,
                                                Termination.OPTIMAL_INACCURATE):
            ended = Termination.FEASIBLE  # not the mechanism's answer: some payments missing
        elif ended is Termination.OPTIMAL and not mechanism.exact:
            ended = Termination.OPTIMAL_INACCURATE
            detail += "; some payment programs not solved to the gap"
        cert = Certificate(
            termination=ended,
            maximize=True,
            objective=mechanism.objective,
            bound=mechanism.bound,
            gap_scale=scale,
            solver=mechanism.solver,
            solver_version=mechanism.solver_version,
            formulation=formulation,
            build_time_s=build,
            solve_time_s=mechanism.solve_time_s,
            model_size=mechanism.size,
            detail=detail,
        )
    section = AuctionSection(tuple(leases), outcomes, mechanism.objective, handed)
    return Plan(
        time_share=X,
        effective_throughput=thr,
        normalized_throughput=normalized,
        objective_value=mechanism.log_value,
        job_dual=np.zeros(m),
        accelerator_prices=np.zeros(n),
        certificate=cert,
        job_status=status,
        job_reason=tuple(reasons),
        auction=section,
    )
