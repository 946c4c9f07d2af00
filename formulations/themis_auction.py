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
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from apportion.formulations.gavel_lp import FtfData, ftf_data
from apportion.formulations.leases import holding_leases, keep_leases
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

PLAN_S_PER_JOB = 8e-6
"""Time (s) held back from the mechanism per job for the leftover allocation and the plan
(measured 4-8 us per job at 100,000 jobs on a shared 2-core machine)."""
PLACE_S_PER_WINNER = 1.5e-5
"""Time (s) held back per bidder for placing the winners on nodes (measured 5-15 us per
winner)."""


@dataclass(frozen=True)
class Bundle:
    """One bid row: job, type, nodes (empty = anywhere), reported rho, index in its table."""

    job: int
    type_index: int
    node_devices: tuple[tuple[int, int], ...]
    rho: float
    bundle: int


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
    order = candidates[np.lexsort((candidates, -rho_without[candidates]))]
    count = max(1, math.ceil((1.0 - knob) * candidates.size - 1e-12))
    return np.sort(order[:count])


def _bundles(
    problem: Problem,
    fair: FairnessInputs,
    data: FtfData,
    offered: IntArray,
    pools: list[NodePool],
    lease_s: float,
) -> list[Bundle]:
    """Every bid of the offered jobs that fits the free devices."""
    s = problem.jobs.scale_factor
    usable = problem.usable
    out: list[Bundle] = []
    derived = np.array([fair.bids[i] is None for i in offered.tolist()], bool)
    # derived tables: one bundle per usable type whose free devices hold the gang
    pool_size = np.array([pool.pool for pool in pools], np.int64)
    fits = usable[offered[derived]] & (s[offered[derived], None] <= pool_size[None, :])
    rows, types = np.nonzero(fits)
    jobs = offered[derived][rows]
    rhos = lease_rhos(data, jobs, problem.jobs.throughput[jobs, types], lease_s)
    out.extend(map(Bundle, jobs.tolist(), types.tolist(), [()] * jobs.size, rhos.tolist(),
                   types.tolist()))
    for i in offered[~derived].tolist():
        table = fair.bids[i]
        assert table is not None
        for b, bid in enumerate(table.bundles):
            pool = pools[bid.type_index]
            fits = pool.fits(int(s[i])) and all(
                pool.free.get(k, 0) >= d for k, d in bid.node_devices
            )
            if fits:
                out.append(Bundle(int(i), bid.type_index, bid.node_devices, bid.rho, b))
    out.sort(key=lambda bundle: bundle.job)  # per job in order, as the tables list them
    return out


def auction_bids(
    bundles: list[Bundle], offered: IntArray, rho_without: FloatArray, problem: Problem,
    pools: list[NodePool],
) -> Bids:
    """The mechanism's input: resources are the n types, then the nodes."""
    n = problem.cluster.num_types
    nodes = len(problem.cluster.node_names)
    position = np.full(problem.jobs.num_jobs, -1, np.int64)
    position[offered] = np.arange(offered.size)
    job = np.array([b.job for b in bundles], np.int64)
    # one entry per bundle on its type, then one per named node
    named = [(k, n + node, devices) for k, b in enumerate(bundles)
             for node, devices in b.node_devices]
    rows = np.concatenate([np.arange(len(bundles)), [r for r, _, _ in named]]).astype(np.int64)
    cols = np.concatenate([[b.type_index for b in bundles], [c for _, c, _ in named]])
    vals = np.concatenate([problem.jobs.scale_factor[job].astype(np.float64),
                           [d for _, _, d in named]])
    use = sp.csr_matrix((vals, (rows, cols.astype(np.int64))), shape=(len(bundles), n + nodes))
    capacity = np.zeros(n + nodes)
    for j, pool in enumerate(pools):
        capacity[j] = pool.pool
        for node, free in pool.free.items():
            capacity[n + node] = free
    return Bids(
        bidder=position[job],
        use=use,
        value=np.array([1.0 / b.rho for b in bundles]),
        outside=1.0 / rho_without[offered],
        capacity=capacity,
        max_winners=int(capacity[:n].sum()),  # every winner holds >= 1 free device
    )


def leftover_allocation(
    X: FloatArray, order: list[int], left: FloatArray, problem: Problem
) -> FloatArray:
    """Give the device-time `left` (n,) to the jobs of `order` in turn, each on its fastest
    usable types, up to its time budget (step 5). Returns the device-time handed out."""
    s = problem.jobs.scale_factor.astype(np.float64).tolist()
    usable = problem.usable
    preference = np.argsort(-problem.jobs.throughput, axis=1, kind="stable")
    # each job's usable types, fastest first (-1: not usable)
    choices = np.where(np.take_along_axis(usable, preference, axis=1), preference, -1).tolist()
    # Python scalars in the loop (the same float arithmetic as numpy's): about 1 us per job
    rest = left.tolist()
    handed = [0.0] * len(rest)
    for i in order:
        if max(rest, default=0.0) <= 1e-12:  # nothing left to hand out
            break
        row = X[i]
        for j in choices[i]:
            if j < 0 or rest[j] <= 1e-12:
                continue
            room = 1.0 - row.sum()
            if room <= 1e-12:
                break
            x = min(room, rest[j] / s[i])
            row[j] += x
            rest[j] -= x * s[i]
            handed[j] += x * s[i]
    left[:] = rest
    return np.array(handed)


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
    has_bids = np.array([table is not None for table in fair.bids], bool)
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
    return Epoch(data, active, holding, rho_without, candidates, offered)


def _bundle_auction(
    problem: Problem, fair: FairnessInputs, epoch: Epoch, pools: list[NodePool],
    params: ThemisAuctionParameters, X: FloatArray, leases: list[Lease | None],
    options: SolveOptions, deadline: Deadline,
) -> Mechanism:
    """Partial Allocation over bundles; winners' shares and leases written into X, leases."""
    jobs = problem.jobs
    m = jobs.num_jobs
    offered = epoch.offered
    bundles = _bundles(problem, fair, epoch.data, offered, pools, params.lease_s)
    bids = auction_bids(bundles, offered, epoch.rho_without, problem, pools)
    # the tolerance is absolute on the log-welfare: the relative accuracy of every c_i
    # placing the winners, the leftover allocation and the plan come after the mechanism
    after = deadline.leaving(PLAN_S_PER_JOB * m + PLACE_S_PER_WINNER * offered.size, 0.9)
    outcome = partial_allocation(bids, options.relative_gap, after, options.threads)
    pf = outcome.welfare
    kept, rho_won = np.full(m, math.nan), np.full(m, math.nan)
    bundle_index = np.full(m, -1, np.int64)
    log_value = np.zeros(m)
    won: dict[int, Bundle] = {}
    for p, i in enumerate(offered):
        log_value[i] = -math.log(epoch.rho_without[i])
        if pf.choice[p] >= 0:
            bundle = bundles[int(pf.choice[p])]
            won[int(i)] = bundle
            kept[i], rho_won[i] = outcome.kept_fraction[p], bundle.rho
            bundle_index[i], log_value[i] = bundle.bundle, -math.log(bundle.rho)
    names = problem.cluster.node_names
    hist = problem.history
    running = hist.running(m)
    # place node-named bundles first, then the others in decreasing gang size
    for i in sorted(won, key=lambda i: (not won[i].node_devices, -jobs.scale_factor[i], i)):
        bundle = won[i]
        j, s_i = bundle.type_index, int(jobs.scale_factor[i])
        if bundle.node_devices:
            taken = pools[j].take_exactly(bundle.node_devices)
        else:
            same = bool(running[i]) and int(hist.current_type[i]) == j
            taken = pools[j].take(s_i, hist.current_nodes[i] if same else ()) or ()
        X[i, j] = kept[i]
        leases[i] = Lease(j, s_i, tuple(names[k] for k in taken),
                          problem.time_s + params.lease_s, float(kept[i]), kept=False)
    return Mechanism(kept, rho_won, bundle_index, log_value, pf.objective, pf.bound, pf.status,
                     outcome.payments_exact, pf.solver, pf.solver_version, pf.size,
                     outcome.solve_time_s, len(bundles),
                     f"{pf.detail}; {outcome.detail}" if pf.detail else outcome.detail,
                     outcome.payments_cut)


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
    X = np.zeros((m, n))
    leases = keep_leases(problem, fair, epoch.holding, X)
    pools = node_pools(problem, epoch.holding)
    free = np.array([pool.pool for pool in pools], np.float64)
    build = time.perf_counter() - started
    if parameters.divisible_shares:
        mechanism = _divisible_auction(problem, epoch, free, X, options, deadline)
    else:
        mechanism = _bundle_auction(problem, fair, epoch, pools, parameters, X, leases, options,
                                    deadline)
    won = ~np.isnan(mechanism.kept)
    left = free - jobs.scale_factor @ np.where(won[:, None], X, 0.0)
    for i in np.flatnonzero(epoch.holding):
        lease = leases[i]
        if lease is not None:
            left[lease.type_index] += lease.devices * (1.0 - lease.time_share)
    rank = np.where(np.isnan(epoch.rho_without), -np.inf, epoch.rho_without)
    offered = set(epoch.offered.tolist())
    not_offered = [int(i) for i in epoch.candidates if i not in offered]
    losers = [int(i) for i in epoch.offered if not won[i]]
    order = sorted(not_offered, key=lambda i: (-rank[i], i)) + \
        sorted(losers, key=lambda i: (-rank[i], i)) + \
        [int(i) for i in np.flatnonzero(epoch.holding)]
    handed = leftover_allocation(X, order, np.maximum(left, 0.0), problem)
    return _plan(problem, parameters, epoch, X, leases, mechanism, handed, build,
                 options.relative_gap)


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
    offered = set(epoch.offered.tolist())
    was_offered = np.zeros(m, bool)
    was_offered[epoch.offered] = True
    outcomes = tuple(map(AuctionOutcome, was_offered.tolist(), epoch.rho_without.tolist(),
                         mechanism.rho_won.tolist(), mechanism.kept.tolist(),
                         mechanism.bundle.tolist()))
    reasons = ["" if active else "no remaining work" for active in epoch.active.tolist()]
    for i in np.flatnonzero(epoch.active & epoch.holding).tolist():
        reasons[i] = "keeps its lease"
    for i in np.flatnonzero(epoch.active & ~np.isnan(mechanism.kept)).tolist():
        reasons[i] = f"won in the auction, keeps {mechanism.kept[i]:.4g} of its share"
    status = tuple(JobStatus.ALLOCATED if active else JobStatus.FINISHED
                   for active in epoch.active.tolist())
    thr = np.einsum("ij,ij->i", jobs.throughput, X)
    iso = epoch.data.iso
    normalized = np.divide(thr, iso, out=np.zeros(m), where=iso > 0)
    kind = "divisible shares" if parameters.divisible_shares else \
        f"{mechanism.bids} bundles, proportional-fair MILP"
    formulation = (f"Themis partial allocation: {len(offered)} of {epoch.candidates.size} jobs "
                   f"bid (f = {parameters.fairness_knob:g}), {kind} + payments")
    scale = max(1.0, float(len(offered)))
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
