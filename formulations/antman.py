"""AntMan (D7): opportunistic jobs in the spare memory and compute of devices.

Resource-guaranteed jobs keep the devices they hold (`SharedDevices.guaranteed_job`); waiting
guaranteed jobs take whole free devices in arrival order (all of one type the job can use:
throughput > 0), before and independently of any opportunistic job. Each opportunistic job
(one device) then gets at most one device of a type it can use, a generalized assignment
problem (D7):

    maximize   sum_{o,d} v_o a[o,d] - lambda sum_{o,d} delta_{g(d),o} a[o,d]
    subject to sum_d a[o,d] <= 1
               sum_o m_o a[o,d] <= M_d - used_d             (device memory)
               sum_o u_o a[o,d] <= U_max - util_d           (compute utilization)
               sum_o delta_{g(d),o} a[o,d] <= eps_d         (the guaranteed job's budget)

v_o = priority weight, m_o and u_o the job's device memory and utilization, delta the extra
slowdown (slowdown - 1) of the device's guaranteed job g(d) with o (`interference`; a pair not
listed: 0). Exact as a HiGHS MIP over the pairs that fit alone. AntMan's scheduler (compat
antman) takes opportunistic jobs in arrival order, each to the least-utilized device below
the busy thresholds on which it fits; its answer is a feasible point of the same model.

At scale: the extra slowdowns are a sparse matrix (a pair's entry on each device of the
guaranteed job), a job's usable devices are its usable types, and AntMan's first fit keeps the
open devices of each type in a heap by utilization (the same choice as a scan, without one).
Under a deadline, each stage stops where it is: waiting guaranteed jobs not reached keep
waiting, opportunistic jobs not reached by the first fit get nothing, and the MIP is not
started when its candidate pairs could not all be looked at, or when HiGHS could not reach its
first look at the time limit in the time left; the plan is then the first fit's, with the
bound of every job that fits some device on its own at its full value.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from apportion.formulations.group_plans import (
    NO_USABLE_TYPE,
    ExactRun,
    compared_plan,
    groups_plan,
)
from apportion.solver.arrays import BoolArray
from apportion.solver.backends.highs import INFINITY, HighsSettings, LinearModel, solve_highs
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.groups import ColocationGroup, GroupSection
from apportion.solver.model import Compat, FloatArray, IntArray, Problem, SolveOptions
from apportion.solver.parameters import AntmanParameters
from apportion.solver.result import (
    Certificate,
    JobStatus,
    ModelSize,
    Plan,
    Termination,
    relative_gap,
)
from apportion.solver.sharing import SharedDevices, SharingInputs

_EPS = 1e-9

MAX_ASSIGNMENT_PAIRS = 200_000
"""Largest number of (opportunistic job, device) pairs given to the MIP whole. Beyond it each
job keeps its DEVICES_PER_JOB roomiest devices: the answer is then a feasible plan whose bound
is the capacity-free one (every job on its best device), reported as such."""

DEVICES_PER_JOB = 48

DEADLINE_CHECK_EVERY = 1024
"""Jobs placed (guaranteed jobs on free devices, opportunistic jobs by the first fit) between
two looks at the deadline."""
BLOCK_PAIRS = 1 << 21
"""(job, device) pairs the MIP's candidate pass looks at together (a block of jobs against every
device: about 40 bytes a pair at once), with a look at the deadline after each block."""
CANDIDATE_S_PER_PAIR = 5e-8
"""Time the candidate pass takes per (job, device) pair (measured: 1e-7 on a loaded 2-core
machine, 12 million pairs in 1.3 s). With less time left for all of them it is not started."""
MIP_SETUP_S_PER_NONZERO = 1.5e-5
"""Time HiGHS may spend on the assignment MIP before it first reads its time limit, per
nonzero (measured on a loaded 2-core machine with a 1 s limit: 5.1 s for 378,000 nonzeros,
1.1 s for 89,000). With less time left the MIP is not started."""
PLAN_S_PER_JOB = 8e-6
"""Time (s) the stages before the plan leave, per job, for building it (measured: 0.6-0.75 s
for the 34,446 groups of 100,000 jobs on a loaded 2-core machine)."""


@dataclass(frozen=True)
class AntmanInstance:
    """The assignment problem on arrays: O opportunistic jobs, D devices."""

    jobs: IntArray
    """(O,) snapshot indices of the opportunistic jobs, in arrival order."""
    value: FloatArray
    """(O,) v_o."""
    memory: FloatArray
    """(O,) m_o (GiB)."""
    utilization: FloatArray
    """(O,) u_o."""
    memory_room: FloatArray
    """(D,) M_d - used_d (GiB)."""
    utilization_room: FloatArray
    """(D,) U_max - util_d."""
    used_memory: FloatArray
    """(D,) used_d (compat thresholds)."""
    device_utilization: FloatArray
    """(D,) util_d (compat thresholds)."""
    budget: FloatArray
    """(D,) eps_d (inf = none)."""
    delta: sp.csr_matrix
    """(O, D) extra slowdown of the device's guaranteed job with o (no entry: 0)."""
    slowdown_weight: float
    job_types: BoolArray
    """(O, n) the job has throughput on the type (pairs on other types never form)."""
    device_type: IntArray
    """(D,) accelerator type of each device."""

    def delta_at(self, jobs: IntArray, devices: IntArray) -> FloatArray:
        """delta[o, d] for each (jobs[k], devices[k])."""
        if jobs.size == 0:
            return np.zeros(0)
        return np.asarray(self.delta[jobs, devices], np.float64).reshape(-1)

    def usable(self, jobs: IntArray) -> BoolArray:
        """(len(jobs), D) the job can use the device's type."""
        return np.asarray(self.job_types[jobs][:, self.device_type])


def fits(inst: AntmanInstance, jobs: IntArray) -> BoolArray:
    """(len(jobs), D) pairs that fit alone (usable type, memory, utilization, budget)."""
    return np.asarray(
        inst.usable(jobs)
        & (inst.memory[jobs, None] <= inst.memory_room[None, :] + _EPS)
        & (inst.utilization[jobs, None] <= inst.utilization_room[None, :] + _EPS)
        & (inst.delta[jobs].toarray() <= inst.budget[None, :] + _EPS)
    )


def fitting_bound(inst: AntmanInstance) -> float:
    """An upper bound on the MIP's optimum: the value of every job that fits some device of a
    type it can use on its own by memory and utilization (extra slowdowns only lower a pair's
    value, and budgets only remove pairs). Sorts, no pass over the pairs."""
    anywhere = np.zeros(inst.value.size, bool)
    for j in range(inst.job_types.shape[1]):
        mine = np.nonzero(inst.device_type == j)[0]
        if mine.size == 0:
            continue
        order = mine[np.argsort(inst.memory_room[mine], kind="stable")]
        room = inst.memory_room[order]
        most_utilization = np.maximum.accumulate(inst.utilization_room[order][::-1])[::-1]
        first = np.searchsorted(room, inst.memory - _EPS, side="left")
        inside = first < room.size
        ok = np.zeros(inst.value.size, bool)
        ok[inside] = most_utilization[first[inside]] >= inst.utilization[inside] - _EPS
        anywhere |= ok & inst.job_types[:, j]
    return float(np.maximum(inst.value[anywhere], 0.0).sum())


def assignment_value(inst: AntmanInstance, device: IntArray) -> float:
    """The objective of an assignment ((O,) device per job, -1 = none)."""
    on = device >= 0
    rows = np.nonzero(on)[0]
    penalty = inst.delta_at(rows, device[on]).sum() if rows.size else 0.0
    return float(inst.value[on].sum() - inst.slowdown_weight * penalty)


def feasible(inst: AntmanInstance, device: IntArray) -> bool:
    """Every capacity and budget of the model holds for the assignment, and every job is on a
    device of a type it can use."""
    d = inst.memory_room.size
    on = np.nonzero(device >= 0)[0]
    where = device[on]
    if not inst.job_types[on, inst.device_type[where]].all():
        return False
    memory = np.bincount(where, inst.memory[on], minlength=d)
    util = np.bincount(where, inst.utilization[on], minlength=d)
    delta = np.bincount(where, inst.delta_at(on, where), minlength=d)
    return bool(
        (memory <= inst.memory_room + 1e-7).all()
        and (util <= inst.utilization_room + 1e-7).all()
        and (delta <= inst.budget + 1e-7).all()
    )


def least_utilized(inst: AntmanInstance, busy_utilization: float,
                   busy_memory_gib: float) -> IntArray:
    """AntMan's first fit (compat): in arrival order, the least-utilized device below the busy
    thresholds where the job fits (ties: the lowest device index); -1 = none."""
    return least_utilized_until(inst, busy_utilization, busy_memory_gib)[0]


def least_utilized_until(inst: AntmanInstance, busy_utilization: float, busy_memory_gib: float,
                         deadline: Deadline = NO_DEADLINE) -> tuple[IntArray, int]:
    """`least_utilized` until the deadline, and how many jobs it reached (the others get no
    device). Each type's open devices (below both busy thresholds) sit in a heap by
    (utilization, index): a job looks at them in that order and takes the first that fits it
    (memory, utilization, its guaranteed job's budget), the least utilized one a scan of every
    device would find."""
    count = inst.value.size
    device = np.full(count, -1, np.int64)
    if deadline.expired():
        return device, 0
    memory_left = inst.memory_room.tolist()
    util_left = inst.utilization_room.tolist()
    budget_left = inst.budget.tolist()
    used = inst.used_memory.tolist()
    util = inst.device_utilization.tolist()
    version = [0] * len(util)
    heaps: list[list[tuple[float, int, int]]] = [[] for _ in range(inst.job_types.shape[1])]
    for d, j in enumerate(inst.device_type.tolist()):
        if util[d] < busy_utilization and used[d] < busy_memory_gib:
            heaps[j].append((util[d], d, 0))
    for heap in heaps:
        heapq.heapify(heap)
    usable = inst.job_types.tolist()
    delta = inst.delta.tocsr()
    starts, columns, values = delta.indptr.tolist(), delta.indices.tolist(), delta.data.tolist()
    memory, utilization = inst.memory.tolist(), inst.utilization.tolist()
    for o in range(count):
        if o and o % DEADLINE_CHECK_EVERY == 0 and deadline.expired():
            return device, o
        extra = dict(zip(columns[starts[o]:starts[o + 1]], values[starts[o]:starts[o + 1]],
                         strict=True))
        need, share = memory[o], utilization[o]
        best: tuple[float, int, int] | None = None
        for j, ok in enumerate(usable[o]):
            if not ok:
                continue
            heap = heaps[j]
            passed: list[tuple[float, int, int]] = []
            while heap:
                entry = heap[0]
                d = entry[1]
                if entry[2] != version[d] or not (util[d] < busy_utilization
                                                  and used[d] < busy_memory_gib):
                    heapq.heappop(heap)  # outdated, or the device is busy for good
                    continue
                if (need <= memory_left[d] + _EPS and share <= util_left[d] + _EPS
                        and extra.get(d, 0.0) <= budget_left[d] + _EPS):
                    if best is None or entry < best:
                        best = entry
                    break
                passed.append(heapq.heappop(heap))
            for entry in passed:
                heapq.heappush(heap, entry)
        if best is None:
            continue
        d = best[1]
        device[o] = d
        memory_left[d] -= need
        util_left[d] -= share
        budget_left[d] -= extra.get(d, 0.0)
        used[d] += need
        util[d] += share
        version[d] += 1
        heapq.heappush(heaps[int(inst.device_type[d])], (util[d], d, version[d]))
    return device, count


@dataclass(frozen=True)
class Assignment:
    device: IntArray
    objective: float
    bound: float | None
    status: SolverStatus
    solve_time_s: float
    size: ModelSize
    detail: str = ""


def _not_started(inst: AntmanInstance, started: float, why: str,
                 size: ModelSize | None = None) -> Assignment:
    return Assignment(np.full(inst.value.size, -1, np.int64), 0.0, fitting_bound(inst),
                      SolverStatus.TIME_LIMIT, time.perf_counter() - started,
                      size or ModelSize(), f"time limit: the assignment MIP was not started "
                                           f"({why})")


def _candidates(inst: AntmanInstance, deadline: Deadline
                ) -> tuple[IntArray, IntArray, bool, float] | None:
    """The MIP's (job, device) pairs, whether they were restricted to each job's
    DEVICES_PER_JOB roomiest devices (more than MAX_ASSIGNMENT_PAIRS fit), and the
    capacity-free bound (every job on its best device that fits); None when the deadline
    passed before every job was looked at. Blocks of jobs against every device."""
    n_o, n_d = inst.value.size, inst.memory_room.size
    step = max(1, BLOCK_PAIRS // max(n_d, 1))
    every: list[tuple[IntArray, IntArray]] = []
    roomiest: list[tuple[IntArray, IntArray]] = []
    fitting = 0
    best: list[FloatArray] = []
    for first in range(0, n_o, step):
        if deadline.expired():
            return None
        rows = np.arange(first, min(first + step, n_o))
        ok = fits(inst, rows)
        delta = inst.delta[rows].toarray()
        fitting += int(ok.sum())
        if fitting <= MAX_ASSIGNMENT_PAIRS:
            o_idx, d_idx = np.nonzero(ok)
            every.append((rows[o_idx], d_idx))
        else:
            every.clear()
        best.append(np.where(ok, inst.value[rows, None] - inst.slowdown_weight * delta,
                             -np.inf).max(axis=1, initial=-np.inf))
        if n_d > DEVICES_PER_JOB:
            room = np.minimum(
                inst.memory_room[None, :] / np.maximum(inst.memory[rows, None], _EPS),
                inst.utilization_room[None, :] / np.maximum(inst.utilization[rows, None], _EPS))
            score = np.where(ok, room - 1e3 * inst.slowdown_weight * delta, -np.inf)
            keep = np.argpartition(-score, DEVICES_PER_JOB - 1, axis=1)[:, :DEVICES_PER_JOB]
            mask = np.zeros_like(ok)
            np.put_along_axis(mask, keep, True, axis=1)
            ok &= mask
        o_idx, d_idx = np.nonzero(ok)
        roomiest.append((rows[o_idx], d_idx))
    restricted = fitting > MAX_ASSIGNMENT_PAIRS
    chosen = roomiest if restricted else every
    o_all = np.concatenate([np.zeros(0, np.int64), *(o for o, _ in chosen)])
    d_all = np.concatenate([np.zeros(0, np.int64), *(d for _, d in chosen)])
    bound = float(np.maximum(np.concatenate([np.zeros(0), *best]), 0.0).sum())
    return o_all.astype(np.int64), d_all.astype(np.int64), restricted, bound


def solve_assignment(inst: AntmanInstance, deadline: Deadline, gap: float,
                     threads: int = 0) -> Assignment:
    """The generalized assignment MIP (module docstring); not started when the deadline passes
    before its candidate pairs are found or leaves HiGHS too little time to read its limit."""
    started = time.perf_counter()
    n_o, n_d = inst.value.size, inst.memory_room.size
    if deadline.remaining() < CANDIDATE_S_PER_PAIR * n_o * n_d:
        return _not_started(inst, started, f"its {n_o} x {n_d} candidate pairs would take "
                                           "longer than the time left")
    found = _candidates(inst, deadline)
    if found is None:
        return _not_started(inst, started, "its candidate pairs were not all found in time")
    o_idx, d_idx, restricted, capacity_free = found
    k = o_idx.size
    if k == 0:
        return Assignment(np.full(n_o, -1, np.int64), 0.0, 0.0, SolverStatus.OPTIMAL,
                          time.perf_counter() - started, ModelSize())
    size = ModelSize(variables=k, constraints=n_o + 3 * n_d, nonzeros=4 * k)
    if deadline.remaining() < MIP_SETUP_S_PER_NONZERO * size.nonzeros:
        return _not_started(inst, started, f"{k} pairs: too little time left", size)
    delta = inst.delta_at(o_idx, d_idx)
    rows = np.concatenate([o_idx, n_o + d_idx, n_o + n_d + d_idx, n_o + 2 * n_d + d_idx])
    cols = np.tile(np.arange(k), 4)
    vals = np.concatenate([np.ones(k), inst.memory[o_idx], inst.utilization[o_idx], delta])
    budget = np.where(np.isfinite(inst.budget), inst.budget, INFINITY)
    upper = np.concatenate([np.ones(n_o), inst.memory_room, inst.utilization_room, budget])
    model = LinearModel(
        cost=inst.value[o_idx] - inst.slowdown_weight * delta,
        matrix=sp.csc_matrix((vals, (rows, cols)), shape=(upper.size, k)),
        row_lower=np.full(upper.size, -INFINITY),
        row_upper=upper,
        col_lower=np.zeros(k),
        col_upper=np.ones(k),
        integer=np.ones(k, bool),
        maximize=True,
    )
    # HiGHS's presolve of a large assignment can outrun the deadline: off for restricted ones
    options = (("presolve", "off"),) if restricted else ()
    result = solve_highs(model, HighsSettings(mip_rel_gap=gap, threads=threads, options=options),
                         deadline)
    device = np.full(n_o, -1, np.int64)
    if result.has_solution:
        chosen = np.nonzero(result.x > 0.5)[0]
        device[o_idx[chosen]] = d_idx[chosen]
    bound = result.bound
    status = result.status
    if restricted:
        bound = capacity_free
        status = SolverStatus.TIME_LIMIT if result.has_solution else result.status
    return Assignment(device, assignment_value(inst, device), bound, status,
                      time.perf_counter() - started, model.size)


def _guaranteed_devices(problem: Problem, deadline: Deadline = NO_DEADLINE
                        ) -> tuple[IntArray, list[int], list[str], bool]:
    """(D,) the guaranteed job of every device after waiting guaranteed jobs took free devices
    in arrival order (each the lowest-index free devices of the first type, in cluster order,
    where it has throughput and enough of them: a pointer into each type's free devices); the
    jobs that got none and why; whether the deadline cut it (the jobs not reached wait)."""
    sharing = problem.sharing or SharingInputs()
    devices = sharing.devices
    assert devices is not None
    jobs = problem.jobs
    m = jobs.num_jobs
    holder = devices.guaranteed_job.copy()
    opportunistic = sharing.opportunistic_jobs(m)
    holding = np.zeros(m, bool)
    holding[holder[holder >= 0]] = True
    order = np.lexsort((np.arange(m), jobs.arrival_time_s))
    order = order[~opportunistic[order] & ~holding[order]]
    if order.size and deadline.expired():
        rest = order.tolist()
        return holder, rest, ["not given free devices before the time limit"] * len(rest), True
    free = (holder < 0) & (devices.used_memory_gib <= _EPS) & (devices.utilization <= _EPS)
    free_of = [np.nonzero(free & (devices.type_index == j))[0]
               for j in range(problem.cluster.num_types)]
    taken = [0] * len(free_of)
    usable = (jobs.throughput[order] > 0).tolist()
    waiting: list[int] = []
    reasons: list[str] = []
    for k, (i, need) in enumerate(zip(order.tolist(), jobs.scale_factor[order].tolist(),
                                      strict=True)):
        if k and k % DEADLINE_CHECK_EVERY == 0 and deadline.expired():
            rest = order[k:].tolist()
            return (holder, waiting + rest,
                    reasons + ["not given free devices before the time limit"] * len(rest), True)
        for j, ok in enumerate(usable[k]):
            if ok and free_of[j].size - taken[j] >= need:
                holder[free_of[j][taken[j]:taken[j] + need]] = i
                taken[j] += need
                break
        else:
            waiting.append(i)
            reasons.append("no free whole devices for a guaranteed job")
    return holder, waiting, reasons, False


def antman_instance(problem: Problem, params: AntmanParameters, holder: IntArray,
                    deadline: Deadline = NO_DEADLINE) -> AntmanInstance:
    """The assignment problem once the guaranteed jobs hold their devices. With the deadline
    passed, no stage after this one places a guest: the extra slowdowns are left out."""
    sharing = problem.sharing or SharingInputs()
    devices = sharing.devices
    assert devices is not None
    jobs = problem.jobs
    m = jobs.num_jobs
    memory = sharing.gpu_memory(m)
    util = sharing.utilization(m)
    opp = np.nonzero(sharing.opportunistic_jobs(m))[0]
    opp = opp[np.lexsort((opp, jobs.arrival_time_s[opp]))]
    used = devices.used_memory_gib.copy()
    busy = devices.utilization.copy()
    newly = (holder >= 0) & (holder != devices.guaranteed_job)
    used[newly] += memory[holder[newly]]
    busy[newly] += util[holder[newly]]
    return AntmanInstance(
        jobs=opp,
        value=jobs.priority_weight[opp],
        memory=memory[opp],
        utilization=util[opp],
        memory_room=devices.memory_gib - used,
        utilization_room=params.max_utilization - busy,
        used_memory=used,
        device_utilization=busy,
        budget=devices.slowdown_budget,
        delta=(sp.csr_matrix((opp.size, holder.size)) if deadline.expired()
               else _extra_slowdowns(problem, holder, opp)),
        slowdown_weight=params.slowdown_weight,
        job_types=jobs.throughput[opp] > 0,
        device_type=devices.type_index.astype(np.int64),
    )


def _extra_slowdowns(problem: Problem, holder: IntArray, opp: IntArray) -> sp.csr_matrix:
    """(O, D) delta: on each device of a guaranteed job g, the extra slowdown (slowdown - 1,
    at least 0) of g with each opportunistic job measured with it (pairs of `interference`;
    a later entry for the same two jobs replaces an earlier one)."""
    sharing = problem.sharing or SharingInputs()
    m, d = problem.jobs.num_jobs, holder.size
    two = [entry for entry in sharing.interference if len(entry.jobs) == 2]
    members = np.array([entry.jobs for entry in two], np.int64).reshape(-1, 2)
    slowdown = np.array([entry.slowdown for entry in two], np.float64).reshape(-1, 2)
    # (slowed job, the job slowing it, extra slowdown), both directions of each entry in order
    slowed = members.reshape(-1)
    guest = members[:, ::-1].reshape(-1)
    value = np.maximum(slowdown.reshape(-1) - 1, 0.0)
    # the last entry of each (slowed, guest) counts
    _, last = np.unique(np.column_stack([slowed, guest])[::-1], axis=0, return_index=True)
    last = slowed.size - 1 - last
    slowed, guest, value = slowed[last], guest[last], value[last]
    row_of = np.full(m, -1, np.int64)
    row_of[opp] = np.arange(opp.size)
    held = np.nonzero(holder >= 0)[0]
    by_holder = held[np.argsort(holder[held], kind="stable")]
    first = np.searchsorted(holder[by_holder], np.arange(m + 1))
    keep = (value > 0) & (row_of[guest] >= 0)
    slowed, guest, value = slowed[keep], guest[keep], value[keep]
    count = first[slowed + 1] - first[slowed]
    start = np.repeat(first[slowed], count)
    offset = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    return sp.csr_matrix((np.repeat(value, count),
                          (np.repeat(row_of[guest], count), by_holder[start + offset])),
                         shape=(opp.size, d))


def solve_policy(
    problem: Problem,
    params: AntmanParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Guaranteed jobs on whole devices, then the opportunistic assignment (exact, or AntMan's
    first fit with compat antman); every stage leaves the plan's building its time."""
    m = problem.jobs.num_jobs
    sharing = problem.sharing or SharingInputs()
    if sharing.devices is None:
        status = [JobStatus.UNSERVABLE] * m
        reasons = ["antman needs shared_devices"] * m
        cert = Certificate(Termination.OPTIMAL, True, 0.0, 0.0, formulation="no devices")
        return groups_plan(problem, GroupSection(()), cert, status, reasons)
    before_plan = deadline.leaving(PLAN_S_PER_JOB * m)
    holder, waiting, why, guaranteed_cut = _guaranteed_devices(problem, before_plan)
    inst = antman_instance(problem, params, holder, before_plan)
    heuristic, reached = least_utilized_until(inst, params.busy_utilization,
                                              params.busy_memory_gib, before_plan)
    notes = []
    if guaranteed_cut:
        notes.append("time limit: waiting guaranteed jobs not all given free devices")
    if reached < inst.value.size:
        notes.append(f"time limit: AntMan's first fit cut after {reached} of "
                     f"{inst.value.size} opportunistic jobs")
    heuristic_value = assignment_value(inst, heuristic)
    exact: ExactRun | None = None
    device = heuristic
    if compat is not Compat.ANTMAN:
        found = solve_assignment(inst, before_plan, options.relative_gap, options.threads)
        device, objective = found.device, found.objective
        if heuristic_value > objective and feasible(inst, heuristic):
            device, objective = heuristic, heuristic_value
        status_ = SolverStatus.TIME_LIMIT if guaranteed_cut else found.status
        details = [*notes, found.detail] if found.detail else notes
        gap = relative_gap(objective, found.bound, 1.0)
        if (not guaranteed_cut and not status_.solved and gap is not None
                and gap <= options.relative_gap):
            status_ = SolverStatus.OPTIMAL
            details.append("the plan reaches the bound: optimal")
        exact = ExactRun(objective, found.bound, status_,
                         "generalized assignment of opportunistic jobs (HiGHS MIP)",
                         found.solve_time_s, found.size, "; ".join(details))
    groups, status, reasons = _groups(problem, inst, holder, device)
    for i, reason in zip(waiting, why, strict=True):
        status[i], reasons[i] = JobStatus.DEFERRED, reason
    nowhere = np.asarray(~problem.usable.any(axis=1))
    for i in np.nonzero(nowhere)[0].tolist():
        if status[i] is not JobStatus.ALLOCATED:
            status[i], reasons[i] = JobStatus.UNSERVABLE, NO_USABLE_TYPE
    return compared_plan(problem, GroupSection(tuple(groups)), status, reasons,
                         "antman_least_utilized", heuristic_value, exact, options.relative_gap,
                         detail="; ".join(notes))


def _groups(problem: Problem, inst: AntmanInstance, holder: IntArray, device: IntArray
            ) -> tuple[list[ColocationGroup], list[JobStatus], list[str]]:
    """One group per guaranteed job (with the opportunistic jobs on its devices) and one per
    device hosting only opportunistic jobs."""
    sharing = problem.sharing or SharingInputs()
    devices = sharing.devices
    assert devices is not None
    m = problem.jobs.num_jobs
    slowdown_of = [1.0] * m
    placed = np.nonzero(device >= 0)[0]
    extra_on = np.bincount(device[placed], inst.delta_at(placed, device[placed]),
                           minlength=devices.count)
    pair_slowdown: dict[tuple[int, int], float] = {}
    for entry in sharing.interference:
        if len(entry.jobs) == 2:
            a, b = entry.jobs
            pair_slowdown[(b, a)] = entry.slowdown[1]
            pair_slowdown[(a, b)] = entry.slowdown[0]
    guests: dict[int, list[int]] = {}
    for d, o in zip(device[placed].tolist(), inst.jobs[placed].tolist(), strict=True):
        guests.setdefault(d, []).append(o)
    held = np.nonzero(holder >= 0)[0]
    by_holder = held[np.argsort(holder[held], kind="stable")]
    starts = np.flatnonzero(np.diff(holder[by_holder], prepend=-1))
    most = (np.maximum.reduceat(extra_on[by_holder], starts) if by_holder.size
            else np.zeros(0)).tolist()
    order = by_holder.tolist()
    bounds = [*starts.tolist(), len(order)]
    kinds = devices.type_index.tolist()
    groups: list[ColocationGroup] = []
    for k, g in enumerate(holder[by_holder[starts]].tolist()):
        on = order[bounds[k]:bounds[k + 1]]
        members = [g]
        for d in on:
            members += guests.get(d, ())
        slowdown_of[g] = 1.0 + most[k]
        for o in members[1:]:
            slowdown_of[o] = pair_slowdown.get((o, g), 1.0)
        groups.append(_group(devices, members, slowdown_of, on, kinds[on[0]]))
    for d in sorted(guests):
        if holder[d] < 0:
            groups.append(_group(devices, guests[d], slowdown_of, [d], kinds[d]))
    status = [JobStatus.DEFERRED] * m
    reasons = ["no device with room and budget for it"] * m
    for group in groups:
        for i in group.members:
            status[i], reasons[i] = JobStatus.ALLOCATED, ""
    return groups, status, reasons


def _group(devices: SharedDevices, members: list[int], slowdown: list[float], on: list[int],
           type_index: int) -> ColocationGroup:
    nodes: dict[str, int] = {}
    for d in on:
        node = devices.node[d]
        if node:
            nodes[node] = nodes.get(node, 0) + 1
    return ColocationGroup(
        members=tuple(members),
        slowdown=tuple([slowdown[i] for i in members]),
        type_index=type_index,
        devices=len(on),
        node_devices=tuple(nodes.items()),
        device_ids=tuple([devices.ids[d] for d in on]),
    )
