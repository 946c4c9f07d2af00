"""Themis's partial-allocation auction (formulations.md B1), one allocation epoch per call.

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

Certificate: objective = the proportional-fair log-welfare sum_bidders log V_i(G*_i), bound =
the MILP's best bound, gap on the scale of the number of bidders; `optimal` also requires every
payment program to be solved to the same absolute gap.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from apportion.formulations.gavel_lp import FtfData, ftf_data
from apportion.formulations.node_pool import NodePool, node_pools
from apportion.formulations.partial_allocation import (
    Bids,
    PartialAllocation,
    partial_allocation,
)
from apportion.solver.certificate import termination
from apportion.solver.deadline import Deadline
from apportion.solver.fairness_model import FairnessInputs
from apportion.solver.fairness_result import AuctionOutcome, AuctionSection, Lease
from apportion.solver.model import Compat, FloatArray, IntArray, Problem, SolveOptions
from apportion.solver.parameters import ThemisAuctionParameters
from apportion.solver.result import Certificate, JobStatus, ModelSize, Plan, Termination

BoolArray = np.ndarray


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


def holding_leases(problem: Problem, fair: FairnessInputs) -> BoolArray:
    """(m,) jobs with an unexpired lease on a current placement."""
    m = problem.jobs.num_jobs
    return np.asarray((fair.lease_expires_s > problem.time_s) & problem.history.running(m))


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
    for i in offered:
        table = fair.bids[i]
        if table is None:
            for j in np.flatnonzero(usable[i]):
                if pools[j].fits(int(s[i])):
                    rho = lease_rho(data, int(i), float(problem.jobs.throughput[i, j]), lease_s)
                    out.append(Bundle(int(i), int(j), (), rho, int(j)))
            continue
        for b, bid in enumerate(table.bundles):
            pool = pools[bid.type_index]
            fits = pool.fits(int(s[i])) and all(
                pool.free.get(k, 0) >= d for k, d in bid.node_devices
            )
            if fits:
                out.append(Bundle(int(i), bid.type_index, bid.node_devices, bid.rho, b))
    return out


def auction_bids(
    bundles: list[Bundle], offered: IntArray, rho_without: FloatArray, problem: Problem,
    pools: list[NodePool],
) -> Bids:
    """The mechanism's input: resources are the n types, then the nodes."""
    n = problem.cluster.num_types
    nodes = len(problem.cluster.node_names)
    position = {int(i): p for p, i in enumerate(offered)}
    use = np.zeros((len(bundles), n + nodes))
    for k, bundle in enumerate(bundles):
        use[k, bundle.type_index] = problem.jobs.scale_factor[bundle.job]
        for node, devices in bundle.node_devices:
            use[k, n + node] = devices
    capacity = np.zeros(n + nodes)
    for j, pool in enumerate(pools):
        capacity[j] = pool.pool
        for node, free in pool.free.items():
            capacity[n + node] = free
    return Bids(
        bidder=np.array([position[b.job] for b in bundles], np.int64),
        use=use,
        value=np.array([1.0 / b.rho for b in bundles]),
        outside=1.0 / rho_without[offered],
        capacity=capacity,
    )


def leftover_allocation(
    X: FloatArray, order: list[int], left: FloatArray, problem: Problem
) -> FloatArray:
    """Give the device-time `left` (n,) to the jobs of `order` in turn, each on its fastest
    usable types, up to its time budget (step 5). Returns the device-time handed out."""
    s = problem.jobs.scale_factor.astype(np.float64)
    T = problem.jobs.throughput
    usable = problem.usable
    given = np.zeros_like(left)
    for i in order:
        for j in np.argsort(-T[i], kind="stable"):
            room = 1.0 - X[i].sum()
            if room <= 1e-12:
                break
            if not usable[i, j] or left[j] <= 1e-12:
                continue
            x = min(room, left[j] / s[i])
            X[i, j] += x
            left[j] -= x * s[i]
            given[j] += x * s[i]
    return given


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
    lease_s = parameters.lease_s
    data = ftf_data(problem, jobs.throughput, Compat.NONE)
    has_bids = np.array([table is not None for table in fair.bids], bool)
    active = data.active | has_bids
    holding = holding_leases(problem, fair) & active
    X = np.zeros((m, n))
    leases: list[Lease | None] = [None] * m
    names = cluster.node_names
    for i in np.flatnonzero(holding):
        j = int(problem.history.current_type[i])
        X[i, j] = fair.lease_time_share[i]
        nodes = problem.history.current_nodes[i] if len(problem.history.current_nodes) == m \
            else ()
        devices = int(problem.history.current_devices[i]) or int(jobs.scale_factor[i])
        leases[i] = Lease(j, devices, tuple(names[k] for k in nodes),
                          float(fair.lease_expires_s[i]), float(X[i, j]), kept=True)
    pools = node_pools(problem, holding)
    free = np.array([pool.pool for pool in pools], np.float64)
    rho_without = np.full(m, math.nan)
    for i in np.flatnonzero(active):
        table = fair.bids[i]
        rho_without[i] = table.rho_without if table is not None else \
            lease_rho(data, int(i), 0.0, lease_s)
    candidates = np.flatnonzero(active & ~holding)
    offered = offered_jobs(rho_without, candidates, parameters.fairness_knob)
    bundles = _bundles(problem, fair, data, offered, pools, lease_s)
    build = time.perf_counter() - started
    bids = auction_bids(bundles, offered, rho_without, problem, pools)
    scale = max(1.0, float(offered.size))
    # the tolerance is absolute on the log-welfare: the relative accuracy of every c_i
    outcome = partial_allocation(bids, options.relative_gap, deadline, options.threads)
    pf = outcome.welfare
    won = np.full(m, -1, np.int64)
    kept = np.full(m, math.nan)
    for p, i in enumerate(offered):
        if pf.choice[p] >= 0:
            won[i] = int(pf.choice[p])
            kept[i] = float(outcome.kept_fraction[p])
    left = free.copy()
    # place node-named bundles first, then the others in decreasing gang size
    winners = sorted(np.flatnonzero(won >= 0),
                     key=lambda i: (not bundles[won[i]].node_devices, -jobs.scale_factor[i], i))
    for i in winners:
        bundle = bundles[won[i]]
        j, s_i = bundle.type_index, int(jobs.scale_factor[i])
        pool = pools[j]
        if bundle.node_devices:
            taken = pool.take_exactly(bundle.node_devices)
        else:
            same = int(problem.history.current_type[i]) == j if problem.history.running(m)[i] \
                else False
            previous = problem.history.current_nodes[i] if same else ()
            taken = pool.take(s_i, previous) or ()
        X[i, j] = kept[i]
        left[j] -= s_i * kept[i]
        leases[i] = Lease(j, s_i, tuple(names[k] for k in taken), problem.time_s + lease_s,
                          float(kept[i]), kept=False)
    for i in np.flatnonzero(holding):
        j = int(problem.history.current_type[i])
        lease = leases[i]
        left[j] += (lease.devices if lease is not None else 0) * (1.0 - X[i, j])
    rank = np.where(np.isnan(rho_without), -np.inf, rho_without)
    not_offered = [int(i) for i in candidates if i not in set(offered.tolist())]
    losers = [int(i) for i in offered if won[i] < 0]
    order = sorted(not_offered, key=lambda i: (-rank[i], i)) + \
        sorted(losers, key=lambda i: (-rank[i], i)) + [int(i) for i in np.flatnonzero(holding)]
    handed = leftover_allocation(X, order, left, problem)
    return _plan(problem, parameters, data, X, leases, offered, won, kept, rho_without,
                 bundles, outcome, handed, active, build, options.relative_gap, scale,
                 candidates.size)


def _plan(
    problem: Problem,
    parameters: ThemisAuctionParameters,
    data: FtfData,
    X: FloatArray,
    leases: list[Lease | None],
    offered: IntArray,
    won: IntArray,
    kept: FloatArray,
    rho_without: FloatArray,
    bundles: list[Bundle],
    outcome: PartialAllocation,
    handed: FloatArray,
    active: BoolArray,
    build: float,
    tolerance: float,
    scale: float,
    candidates: int,
) -> Plan:
    jobs = problem.jobs
    m, n = X.shape
    pf = outcome.welfare
    offered_set = set(offered.tolist())
    outcomes: list[AuctionOutcome] = []
    objective_value = np.zeros(m)
    reasons = [""] * m
    for i in range(m):
        if won[i] >= 0:
            bundle = bundles[won[i]]
            outcomes.append(AuctionOutcome(True, float(rho_without[i]), bundle.rho,
                                           float(kept[i]), bundle.bundle))
            objective_value[i] = -math.log(bundle.rho)
            reasons[i] = (f"won {jobs.scale_factor[i]} x "
                          f"{problem.cluster.type_names[bundle.type_index]}, keeps "
                          f"{kept[i]:.4g} of the lease")
        else:
            outcomes.append(AuctionOutcome(i in offered_set, float(rho_without[i]), math.nan,
                                           math.nan))
            if i in offered_set:
                objective_value[i] = -math.log(rho_without[i])
    status = [JobStatus.ALLOCATED if active[i] else JobStatus.FINISHED for i in range(m)]
    for done in np.flatnonzero(~active):
        reasons[done] = "no remaining work"
    thr = np.einsum("ij,ij->i", jobs.throughput, X)
    normalized = np.divide(thr, data.iso, out=np.zeros(m), where=data.iso > 0)
    formulation = (f"Themis partial allocation: {offered.size} of {candidates} jobs bid "
                   f"(f = {parameters.fairness_knob:g}), {len(bundles)} bundles, "
                   f"proportional-fair MILP + payments")
    if offered.size == 0:
        cert = Certificate(Termination.OPTIMAL, True, 0.0, 0.0, solver="closed form",
                           formulation=formulation, build_time_s=build,
                           detail="no job to offer devices to")
    else:
        gap_cert = Certificate(Termination.OPTIMAL, True, pf.objective, pf.bound,
                               gap_scale=scale)
        ended = termination(pf.status, True, gap_cert.gap, tolerance)
        detail = f"{pf.detail}; {outcome.detail}" if pf.detail else outcome.detail
        if ended is Termination.OPTIMAL and not outcome.payments_exact:
            ended = Termination.OPTIMAL_INACCURATE
            detail += "; some payment programs not solved to the gap"
        cert = Certificate(
            termination=ended,
            maximize=True,
            objective=pf.objective,
            bound=pf.bound,
            gap_scale=scale,
            solver=pf.solver,
            solver_version=pf.solver_version,
            formulation=formulation,
            build_time_s=build,
            solve_time_s=outcome.solve_time_s,
            model_size=pf.size if pf.size != ModelSize() else ModelSize(len(bundles), 0, 0,
                                                                        len(bundles)),
            detail=detail,
        )
    section = AuctionSection(tuple(leases), tuple(outcomes), pf.objective, handed)
    return Plan(
        time_share=X,
        effective_throughput=thr,
        normalized_throughput=normalized,
        objective_value=objective_value,
        job_dual=np.zeros(m),
        accelerator_prices=np.zeros(n),
        certificate=cert,
        job_status=tuple(status),
        job_reason=tuple(reasons),
        auction=section,
    )
