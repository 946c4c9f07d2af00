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
"""

from __future__ import annotations

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
from apportion.solver.backends.highs import INFINITY, HighsSettings, LinearModel, solve_highs
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import Deadline
from apportion.solver.groups import ColocationGroup, GroupSection
from apportion.solver.model import Compat, FloatArray, IntArray, Problem, SolveOptions
from apportion.solver.parameters import AntmanParameters
from apportion.solver.result import (
    Certificate,
    JobStatus,
    ModelSize,
    Plan,
    Termination,
)
from apportion.solver.sharing import SharingInputs

_EPS = 1e-9

MAX_ASSIGNMENT_PAIRS = 200_000
"""Largest number of (opportunistic job, device) pairs given to the MIP whole. Beyond it each
job keeps its DEVICES_PER_JOB roomiest devices: the answer is then a feasible plan whose bound
is the capacity-free one (every job on its best device), reported as such."""

DEVICES_PER_JOB = 48


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
    delta: FloatArray
    """(O, D) extra slowdown of the device's guaranteed job with o (0 without one)."""
    slowdown_weight: float
    usable: np.ndarray
    """(O, D) bool: the job has throughput on the device's type (other pairs never form)."""


def fits(inst: AntmanInstance) -> np.ndarray:
    """(O, D) pairs that fit alone (usable type, memory, utilization, budget)."""
    return np.asarray(
        inst.usable
        & (inst.memory[:, None] <= inst.memory_room[None, :] + _EPS)
        & (inst.utilization[:, None] <= inst.utilization_room[None, :] + _EPS)
        & (inst.delta <= inst.budget[None, :] + _EPS)
    )


def assignment_value(inst: AntmanInstance, device: IntArray) -> float:
    """The objective of an assignment ((O,) device per job, -1 = none)."""
    on = device >= 0
    rows = np.nonzero(on)[0]
    penalty = inst.delta[rows, device[on]].sum() if rows.size else 0.0
    return float(inst.value[on].sum() - inst.slowdown_weight * penalty)


def feasible(inst: AntmanInstance, device: IntArray) -> bool:
    """Every capacity and budget of the model holds for the assignment, and every job is on a
    device of a type it can use."""
    d = inst.memory_room.size
    on = np.nonzero(device >= 0)[0]
    where = device[on]
    if not inst.usable[on, where].all():
        return False
    memory = np.bincount(where, inst.memory[on], minlength=d)
    util = np.bincount(where, inst.utilization[on], minlength=d)
    delta = np.bincount(where, inst.delta[on, where], minlength=d) if on.size else np.zeros(d)
    return bool(
        (memory <= inst.memory_room + 1e-7).all()
        and (util <= inst.utilization_room + 1e-7).all()
        and (delta <= inst.budget + 1e-7).all()
    )


def least_utilized(inst: AntmanInstance, busy_utilization: float,
                   busy_memory_gib: float) -> IntArray:
    """AntMan's first fit (compat): in arrival order, the least-utilized device below the busy
    thresholds where the job fits; -1 = none."""
    memory_left = inst.memory_room.copy()
    util_left = inst.utilization_room.copy()
    budget_left = inst.budget.copy()
    used = inst.used_memory.copy()
    util = inst.device_utilization.copy()
    device = np.full(inst.value.size, -1, np.int64)
    for o in range(inst.value.size):
        ok = (
            inst.usable[o]
            & (util < busy_utilization)
            & (used < busy_memory_gib)
            & (inst.memory[o] <= memory_left + _EPS)
            & (inst.utilization[o] <= util_left + _EPS)
            & (inst.delta[o] <= budget_left + _EPS)
        )
        candidates = np.nonzero(ok)[0]
        if candidates.size == 0:
            continue
        d = int(candidates[np.argmin(util[candidates])])
        device[o] = d
        memory_left[d] -= inst.memory[o]
        util_left[d] -= inst.utilization[o]
        budget_left[d] -= inst.delta[o, d]
        used[d] += inst.memory[o]
        util[d] += inst.utilization[o]
    return device


@dataclass(frozen=True)
class Assignment:
    device: IntArray
    objective: float
    bound: float | None
    status: SolverStatus
    solve_time_s: float
    size: ModelSize


def solve_assignment(inst: AntmanInstance, deadline: Deadline, gap: float,
                     threads: int = 0) -> Assignment:
    """The generalized assignment MIP (module docstring)."""
    started = time.perf_counter()
    ok = fits(inst)
    n_o, n_d = inst.value.size, inst.memory_room.size
    restricted = int(ok.sum()) > MAX_ASSIGNMENT_PAIRS
    if restricted:
        room = np.minimum(inst.memory_room[None, :] / np.maximum(inst.memory[:, None], _EPS),
                          inst.utilization_room[None, :]
                          / np.maximum(inst.utilization[:, None], _EPS))
        score = np.where(ok, room - 1e3 * inst.slowdown_weight * inst.delta, -np.inf)
        keep = np.argpartition(-score, DEVICES_PER_JOB - 1, axis=1)[:, :DEVICES_PER_JOB]
        mask = np.zeros_like(ok)
        np.put_along_axis(mask, keep, True, axis=1)
        ok &= mask
    o_idx, d_idx = np.nonzero(ok)
    k = o_idx.size
    if k == 0:
        return Assignment(np.full(n_o, -1, np.int64), 0.0, 0.0, SolverStatus.OPTIMAL,
                          time.perf_counter() - started, ModelSize())
    delta = inst.delta[o_idx, d_idx]
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
        best = np.where(fits(inst), inst.value[:, None] - inst.slowdown_weight * inst.delta,
                        -np.inf).max(axis=1)
        bound = float(np.maximum(best, 0.0).sum())
        status = SolverStatus.TIME_LIMIT if result.has_solution else result.status
    return Assignment(device, assignment_value(inst, device), bound, status,
                      time.perf_counter() - started, model.size)


def _guaranteed_devices(problem: Problem) -> tuple[IntArray, list[int], list[str]]:
    """(D,) the guaranteed job of every device after waiting guaranteed jobs took free devices
    in arrival order; the jobs that got none and why."""
    sharing = problem.sharing or SharingInputs()
    devices = sharing.devices
    assert devices is not None
    jobs = problem.jobs
    m = jobs.num_jobs
    holder = devices.guaranteed_job.copy()
    opportunistic = sharing.opportunistic_jobs(m)
    holding = np.zeros(m, bool)
    holding[holder[holder >= 0]] = True
    waiting: list[int] = []
    reasons: list[str] = []
    order = np.lexsort((np.arange(m), jobs.arrival_time_s))
    for i in order.tolist():
        if opportunistic[i] or holding[i]:
            continue
        need = int(jobs.scale_factor[i])
        free = (holder < 0) & (devices.used_memory_gib <= _EPS) & (devices.utilization <= _EPS)
        placed = False
        for j in np.nonzero(problem.jobs.throughput[i] > 0)[0].tolist():
            candidates = np.nonzero(free & (devices.type_index == j))[0]
            if candidates.size >= need:
                holder[candidates[:need]] = i
                placed = True
                break
        if not placed:
            waiting.append(i)
            reasons.append("no free whole devices for a guaranteed job")
    return holder, waiting, reasons


def antman_instance(problem: Problem, params: AntmanParameters, holder: IntArray
                    ) -> AntmanInstance:
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
    extra = np.zeros((m, m))
    for entry in sharing.interference:
        if len(entry.jobs) == 2:
            a, b = entry.jobs
            extra[a, b] = max(0.0, entry.slowdown[0] - 1)  # a slowed down by b
            extra[b, a] = max(0.0, entry.slowdown[1] - 1)
    safe = np.maximum(holder, 0)
    delta = np.where(holder[None, :] >= 0, extra[safe[None, :], opp[:, None]], 0.0)
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
        delta=delta,
        slowdown_weight=params.slowdown_weight,
        usable=jobs.throughput[opp][:, devices.type_index] > 0,
    )


def solve_policy(
    problem: Problem,
    params: AntmanParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Guaranteed jobs on whole devices, then the opportunistic assignment (exact, or AntMan's
    first fit with compat antman)."""
    m = problem.jobs.num_jobs
    sharing = problem.sharing or SharingInputs()
    if sharing.devices is None:
        status = [JobStatus.UNSERVABLE] * m
        reasons = ["antman needs shared_devices"] * m
        cert = Certificate(Termination.OPTIMAL, True, 0.0, 0.0, formulation="no devices")
        return groups_plan(problem, GroupSection(()), cert, status, reasons)
    holder, waiting, why = _guaranteed_devices(problem)
    inst = antman_instance(problem, params, holder)
    heuristic = least_utilized(inst, params.busy_utilization, params.busy_memory_gib)
    heuristic_value = assignment_value(inst, heuristic)
    exact: ExactRun | None = None
    device = heuristic
    if compat is not Compat.ANTMAN:
        found = solve_assignment(inst, deadline, options.relative_gap, options.threads)
        device, objective = found.device, found.objective
        if heuristic_value > objective and feasible(inst, heuristic):
            device, objective = heuristic, heuristic_value
        exact = ExactRun(objective, found.bound, found.status,
                         "generalized assignment of opportunistic jobs (HiGHS MIP)",
                         found.solve_time_s, found.size)
    groups, status, reasons = _groups(problem, inst, holder, device)
    for i, reason in zip(waiting, why, strict=True):
        status[i], reasons[i] = JobStatus.DEFERRED, reason
    nowhere = np.asarray(~problem.usable.any(axis=1))
    for i in range(m):
        if nowhere[i] and status[i] is not JobStatus.ALLOCATED:
            status[i], reasons[i] = JobStatus.UNSERVABLE, NO_USABLE_TYPE
    return compared_plan(problem, GroupSection(tuple(groups)), status, reasons,
                         "antman_least_utilized", heuristic_value, exact, options.relative_gap)


def _groups(problem: Problem, inst: AntmanInstance, holder: IntArray, device: IntArray
            ) -> tuple[list[ColocationGroup], list[JobStatus], list[str]]:
    """One group per guaranteed job (with the opportunistic jobs on its devices) and one per
    device hosting only opportunistic jobs."""
    sharing = problem.sharing or SharingInputs()
    devices = sharing.devices
    assert devices is not None
    m = problem.jobs.num_jobs
    status = [JobStatus.DEFERRED] * m
    reasons = ["no device with room and budget for it"] * m
    slowdown_of = np.ones(m)
    extra_on = np.zeros(devices.count)
    for o, d in enumerate(device.tolist()):
        if d >= 0:
            extra_on[d] += inst.delta[o, d]
    pair_slowdown: dict[tuple[int, int], float] = {}
    for entry in sharing.interference:
        if len(entry.jobs) == 2:
            a, b = entry.jobs
            pair_slowdown[(b, a)] = entry.slowdown[1]
            pair_slowdown[(a, b)] = entry.slowdown[0]
    guests: dict[int, list[int]] = {}
    for o, d in enumerate(device.tolist()):
        if d >= 0:
            guests.setdefault(d, []).append(int(inst.jobs[o]))
    groups: list[ColocationGroup] = []
    for g in sorted(set(holder[holder >= 0].tolist())):
        mine = np.nonzero(holder == g)[0]
        members = [g] + [o for d in mine.tolist() for o in guests.get(d, [])]
        slowdown_of[g] = 1.0 + float(extra_on[mine].max())
        for o in members[1:]:
            slowdown_of[o] = pair_slowdown.get((o, g), 1.0)
        groups.append(_group(problem, members, slowdown_of, mine, devices.ids,
                             int(devices.type_index[mine[0]])))
    for d, members in sorted(guests.items()):
        if holder[d] >= 0:
            continue
        groups.append(_group(problem, members, slowdown_of, np.array([d]), devices.ids,
                             int(devices.type_index[d])))
    for group in groups:
        for i in group.members:
            status[i], reasons[i] = JobStatus.ALLOCATED, ""
    return groups, status, reasons


def _group(problem: Problem, members: list[int], slowdown: FloatArray, on: IntArray,
           ids: tuple[str, ...], type_index: int) -> ColocationGroup:
    sharing = problem.sharing
    assert sharing is not None and sharing.devices is not None
    nodes: dict[str, int] = {}
    for d in on.tolist():
        node = sharing.devices.node[d]
        if node:
            nodes[node] = nodes.get(node, 0) + 1
    return ColocationGroup(
        members=tuple(members),
        slowdown=tuple(float(slowdown[i]) for i in members),
        type_index=type_index,
        devices=int(on.size),
        node_devices=tuple(nodes.items()),
        device_ids=tuple(ids[d] for d in on.tolist()),
    )
