"""IADeep (D9): groups sharing a device, with a configuration per member, as set packing.

Columns are (group, configuration, accelerator type) triples: every job alone in each of its
configurations, and every group of `interference` with the configurations its entry names,
on each type every member can use (throughput > 0, at least its GPU count of devices). A
column's value is the sum over members of w_i x relative throughput of its configuration /
its slowdown in the group; its memory is the members' memory in those configurations, which
must fit a device of its type; with `max_slowdown`, columns where a member is slower than that
are left out. Choose columns with every job at most once and at most one column per device of
each type (D9):

    maximize sum_c v_c x_c  s.t.  sum_{c contains i} x_c <= 1,
                                  sum_{c on type j} devices_c x_c <= D_j  for every type j.

Exact as a HiGHS MIP. IADeep's own scheduler (compat iadeep) takes jobs in arrival order: idle
devices of the first type it can use that has them, otherwise the device whose group with the
job (on that device's type) has the smallest largest slowdown (over the configurations listed
for that group), else the job waits.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from apportion.formulations.group_plans import NO_USABLE_TYPE, ExactRun, compared_plan
from apportion.solver.arrays import BoolArray
from apportion.solver.backends.highs import INFINITY, HighsSettings, LinearModel, solve_highs
from apportion.solver.backends.highs_startup import SET_PACKING_MILP, can_start
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.groups import ColocationGroup, GroupSection
from apportion.solver.model import Compat, FloatArray, IntArray, Problem, SolveOptions
from apportion.solver.parameters import IadeepParameters
from apportion.solver.result import (
    JobStatus,
    ModelSize,
    Plan,
)
from apportion.solver.sharing import JobConfiguration, SharingInputs

_EPS = 1e-9
DEADLINE_CHECK_EVERY = 1024
"""Jobs the greedy places (listed groups read) between two looks at the deadline."""
PLAN_S_PER_JOB = 4e-6
"""Time (s) the columns, the greedy and the set packing leave, per job, for building the plan
(measured: about 0.4 s for 100,000 jobs in 39,503 groups on a loaded 2-core machine)."""


class Column(NamedTuple):
    """A group with a configuration per member, its value and memory (a named tuple: there is
    one per job, type and configuration, and a frozen dataclass costs several times more to
    build)."""

    members: tuple[int, ...]
    configurations: tuple[int, ...]
    slowdown: tuple[float, ...]
    value: float
    memory_gib: float
    devices: int
    type_index: int
    """The accelerator type whose devices the group shares."""


@dataclass(frozen=True)
class Columns:
    """The columns as arrays: first every job alone (`alone_job`, ordered by job, type and
    configuration), then the listed groups (`groups`); `columns[c]` is column c as a
    `Column`. Whole-column arrays are (k,) over all of them."""

    alone_job: IntArray
    alone_configuration: IntArray
    groups: tuple[Column, ...]
    value: FloatArray
    memory_gib: FloatArray
    devices: IntArray
    type_index: IntArray

    def __len__(self) -> int:
        return int(self.value.size)

    def __getitem__(self, c: int) -> Column:
        alone = self.alone_job.size
        if c >= alone:
            return self.groups[c - alone]
        return Column((int(self.alone_job[c]),), (int(self.alone_configuration[c]),), (1.0,),
                      float(self.value[c]), float(self.memory_gib[c]),
                      int(self.devices[c]), int(self.type_index[c]))

    def __iter__(self) -> Iterator[Column]:
        return (self[c] for c in range(len(self)))

    def members(self, c: int) -> tuple[int, ...]:
        alone = self.alone_job.size
        return self.groups[c - alone].members if c >= alone else (int(self.alone_job[c]),)


@dataclass(frozen=True)
class IadeepInstance:
    columns: Columns
    devices: IntArray
    """(n,) devices of each accelerator type that groups may take."""
    num_jobs: int
    arrival_order: IntArray
    complete: bool = True
    """False when the deadline passed before every listed group had its columns: the columns
    still give feasible plans, but no optimum over them is IADeep's."""


def _configs(sharing: SharingInputs, i: int, memory: float) -> tuple[JobConfiguration, ...]:
    own = sharing.configurations[i] if i < len(sharing.configurations) else ()
    return own or (JobConfiguration("", 1.0, memory),)


def type_devices(problem: Problem, params: IadeepParameters) -> tuple[IntArray, FloatArray]:
    """(n,) devices of each type groups may take and (n,) the memory free on every one of them
    (GiB): the shared devices when given (the least free memory among a type's), otherwise
    the cluster's devices with `device_memory_gib` each."""
    n = problem.cluster.num_types
    devices = (problem.sharing or SharingInputs()).devices
    if devices is None:
        return (problem.cluster.count.astype(np.int64).copy(),
                np.full(n, float(params.device_memory_gib)))
    count = np.bincount(devices.type_index, minlength=n).astype(np.int64)[:n]
    room = np.full(n, np.inf)
    np.minimum.at(room, devices.type_index, devices.memory_gib - devices.used_memory_gib)
    return count, room


def _alone_columns(problem: Problem, sharing: SharingInputs, memory: FloatArray,
                   usable: BoolArray, device_memory: FloatArray
                   ) -> tuple[IntArray, IntArray, FloatArray, FloatArray, IntArray, IntArray]:
    """Every job alone in each of its configurations on each type it can use whose devices
    have the memory, ordered by job, type, configuration; built from flat arrays (one entry
    per job and configuration) rather than per job."""
    jobs = problem.jobs
    m = jobs.num_jobs
    owners = [i for i, own in enumerate(sharing.configurations[:m]) if own]
    counts = np.ones(m, np.int64)
    counts[owners] = [len(sharing.configurations[i]) for i in owners]
    job = np.repeat(np.arange(m), counts)
    first = np.cumsum(counts) - counts
    config = np.arange(job.size) - first[job]
    throughput = np.ones(job.size)
    need = memory[job].astype(np.float64)
    for i in owners:
        own = sharing.configurations[i]
        at = slice(int(first[i]), int(first[i]) + len(own))
        throughput[at] = [conf.throughput for conf in own]
        need[at] = [conf.gpu_memory_gib for conf in own]
    entry, type_index = np.nonzero(usable[job] & (need[:, None] <= device_memory[None, :] + _EPS))
    order = np.lexsort((config[entry], type_index, job[entry]))
    entry, type_index = entry[order], type_index[order]
    value = jobs.priority_weight[job[entry]] * throughput[entry]
    return (job[entry], config[entry], value, need[entry],
            jobs.scale_factor[job[entry]].astype(np.int64), type_index.astype(np.int64))


def iadeep_instance(problem: Problem, params: IadeepParameters,
                    deadline: Deadline = NO_DEADLINE) -> IadeepInstance:
    """The columns of the module docstring; the listed groups stop being read once `deadline`
    passes (the instance is then not `complete`)."""
    jobs = problem.jobs
    m = jobs.num_jobs
    sharing = problem.sharing or SharingInputs()
    memory = sharing.gpu_memory(m)
    devices, device_memory = type_devices(problem, params)
    usable = problem.usable & (jobs.scale_factor[:, None] <= devices[None, :])
    cap = params.max_slowdown if params.max_slowdown > 0 else np.inf
    weight = jobs.priority_weight
    alone = _alone_columns(problem, sharing, memory, usable, device_memory)
    columns: list[Column] = []  # the listed groups
    complete = True
    for read, entry in enumerate(sharing.interference):
        if read % DEADLINE_CHECK_EVERY == 0 and deadline.expired():
            complete = False
            break
        if max(entry.slowdown) > cap:
            continue
        chosen = entry.configurations or (0,) * len(entry.jobs)
        confs = [_configs(sharing, i, float(memory[i]))[c]
                 for i, c in zip(entry.jobs, chosen, strict=True)]
        need = sum(conf.gpu_memory_gib for conf in confs)
        value = sum(weight[i] * conf.throughput / s
                    for i, conf, s in zip(entry.jobs, confs, entry.slowdown, strict=True))
        common = usable[list(entry.jobs)].all(axis=0) & (need <= device_memory + _EPS)
        for j in np.nonzero(common)[0].tolist():
            columns.append(Column(entry.jobs, tuple(chosen), entry.slowdown, float(value), need,
                                  int(jobs.scale_factor[entry.jobs[0]]), j))
    order = np.lexsort((np.arange(m), jobs.arrival_time_s))
    groups = Columns(
        alone[0], alone[1], tuple(columns),
        value=np.concatenate([alone[2], [c.value for c in columns]]),
        memory_gib=np.concatenate([alone[3], [c.memory_gib for c in columns]]),
        devices=np.concatenate([alone[4], [c.devices for c in columns]]).astype(np.int64),
        type_index=np.concatenate([alone[5], [c.type_index for c in columns]]).astype(np.int64),
    )
    return IadeepInstance(groups, devices, m, order.astype(np.int64), complete)


def packing_value(inst: IadeepInstance, chosen: list[int]) -> float:
    return float(inst.columns.value[np.asarray(chosen, np.int64)].sum())


def devices_used(inst: IadeepInstance, chosen: list[int]) -> IntArray:
    """(n,) devices of each type the chosen columns take."""
    at = np.asarray(chosen, np.int64)
    return np.bincount(inst.columns.type_index[at], weights=inst.columns.devices[at],
                       minlength=inst.devices.size).astype(np.int64)


def is_packing(inst: IadeepInstance, chosen: list[int]) -> bool:
    members = [i for c in chosen for i in inst.columns.members(c)]
    return len(members) == len(set(members)) and bool(
        (devices_used(inst, chosen) <= inst.devices).all())


@dataclass(frozen=True)
class Packing:
    chosen: list[int]
    objective: float
    bound: float | None
    status: SolverStatus
    solve_time_s: float
    size: ModelSize


def solve_packing(inst: IadeepInstance, deadline: Deadline, gap: float,
                  threads: int = 0) -> Packing:
    """The set packing MIP of the module docstring."""
    started = time.perf_counter()
    k = len(inst.columns)
    if k == 0:
        return Packing([], 0.0, 0.0, SolverStatus.OPTIMAL, 0.0, ModelSize())
    columns = inst.columns
    alone = columns.alone_job.size
    rows = [columns.alone_job.tolist()]
    cols = [list(range(alone))]
    for c, column in enumerate(columns.groups, start=alone):
        rows.append(list(column.members))
        cols.append([c] * len(column.members))
    row = np.fromiter(itertools.chain.from_iterable(rows), np.int64)
    col = np.fromiter(itertools.chain.from_iterable(cols), np.int64)
    m, n = inst.num_jobs, inst.devices.size
    matrix = sp.vstack([
        sp.csc_matrix((np.ones(row.size), (row, col)), shape=(m, k)),
        sp.csc_matrix((columns.devices.astype(np.float64), (columns.type_index, np.arange(k))),
                      shape=(n, k)),
    ]).tocsc()
    model = LinearModel(
        cost=columns.value.copy(),
        matrix=matrix,
        row_lower=np.full(m + n, -INFINITY),
        row_upper=np.concatenate([np.ones(m), inst.devices.astype(np.float64)]),
        col_lower=np.zeros(k),
        col_upper=np.ones(k),
        integer=np.ones(k, bool),
        maximize=True,
    )
    result = solve_highs(model, HighsSettings(mip_rel_gap=gap, threads=threads), deadline)
    chosen = np.nonzero(result.x > 0.5)[0].tolist() if result.has_solution else []
    return Packing(chosen, packing_value(inst, chosen), result.bound, result.status,
                   time.perf_counter() - started, model.size)


def least_interference(inst: IadeepInstance) -> list[int]:
    """IADeep's per-arrival greedy (compat): the chosen columns."""
    return least_interference_until(inst, NO_DEADLINE)[0]


def least_interference_until(inst: IadeepInstance, deadline: Deadline
                             ) -> tuple[list[int], int]:
    """IADeep's greedy and the number of arrivals it reached: once `deadline` passes, the
    jobs not yet reached wait (the columns chosen so far stay a packing). A job joins a busy
    device through the columns that contain it (a group whose other members are exactly that
    device's group, on its type and device count), so the pass is linear in the columns."""
    columns, m = inst.columns, inst.num_jobs
    alone = columns.alone_job.size
    job, type_of = columns.alone_job, columns.type_index[:alone]
    # per job, its first configuration on each type (the columns are in job, type order)
    first = np.ones(alone, bool)
    first[1:] = (job[1:] != job[:-1]) | (type_of[1:] != type_of[:-1])
    firsts = np.nonzero(first)[0]
    begin = np.searchsorted(job[firsts], np.arange(m + 1)).tolist()
    first_of = firsts.tolist()
    types, needs = columns.type_index.tolist(), columns.devices.tolist()
    joins: dict[int, list[int]] = {}  # per job, the group columns that contain it
    for c, group in enumerate(columns.groups, start=alone):
        for i in group.members:
            joins.setdefault(i, []).append(c)
    devices: list[int] = []  # the column on each busy device
    slot_of: dict[frozenset[int], int] = {}  # a busy device by the members of its group
    free = inst.devices.tolist()
    reached = 0
    for i in inst.arrival_order.tolist():
        if reached % DEADLINE_CHECK_EVERY == 0 and deadline.expired():
            break
        reached += 1
        idle = next((c for c in first_of[begin[i]:begin[i + 1]] if free[types[c]] >= needs[c]),
                    None)
        if idle is not None:
            slot_of[frozenset((i,))] = len(devices)
            devices.append(idle)
            free[types[idle]] -= needs[idle]
            continue
        # the smallest (largest slowdown, device, column) over the groups i can join
        best: tuple[float, int, int] | None = None
        for option in joins.get(i, ()):
            column = columns.groups[option - alone]
            slot = slot_of.get(frozenset(column.members) - {i})
            if slot is None:
                continue
            current = devices[slot]
            if types[current] != column.type_index or needs[current] != column.devices:
                continue
            candidate = (max(column.slowdown), slot, option)
            if best is None or candidate < best:
                best = candidate
        if best is not None:
            del slot_of[frozenset(columns.members(devices[best[1]]))]
            slot_of[frozenset(columns.members(best[2]))] = best[1]
            devices[best[1]] = best[2]
    return devices, reached


def solve_policy(
    problem: Problem,
    params: IadeepParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """IADeep's groups: exact set packing, or its greedy with compat iadeep. The set packing
    is not started when it could not reach its first look at the time limit before the
    deadline (or the columns are incomplete); the plan is then the greedy's, and so it is when
    the solver stops with a worse one."""
    # every stage before the plan's building leaves it its time
    before_plan = deadline.leaving(PLAN_S_PER_JOB * problem.jobs.num_jobs)
    inst = iadeep_instance(problem, params, before_plan)
    heuristic, reached = least_interference_until(inst, before_plan)
    greedy = "IADeep's greedy" if reached == inst.num_jobs else (
        f"IADeep's greedy, cut by the time limit after {reached} of {inst.num_jobs} arrivals")
    heuristic_value = packing_value(inst, heuristic)
    exact: ExactRun | None = None
    chosen = heuristic
    if compat is not Compat.IADEEP:
        formulation = f"set packing over {len(inst.columns)} (group, configuration) columns"
        size = ModelSize(variables=len(inst.columns))
        if not inst.complete or not can_start(before_plan, SET_PACKING_MILP, size):
            exact = ExactRun(heuristic_value, None, SolverStatus.TIME_LIMIT, formulation,
                             detail=f"time limit: the set packing was not started (the plan is "
                                    f"{greedy})")
        else:
            found = solve_packing(inst, before_plan, options.relative_gap, options.threads)
            objective, chosen, detail = found.objective, found.chosen, ""
            if heuristic_value > objective:  # a time-limited incumbent below the greedy
                objective, chosen = heuristic_value, heuristic
                detail = f"the set packing stopped below {greedy}, which is the plan"
            exact = ExactRun(objective, found.bound, found.status, formulation,
                             found.solve_time_s, found.size, detail)
    groups, status, reasons = _groups(problem, inst, chosen)
    return compared_plan(problem, GroupSection(tuple(groups)), status, reasons,
                         "iadeep_least_interference", heuristic_value, exact,
                         options.relative_gap)


def _groups(problem: Problem, inst: IadeepInstance, chosen: list[int]
            ) -> tuple[list[ColocationGroup], list[JobStatus], list[str]]:
    sharing = problem.sharing or SharingInputs()
    m = problem.jobs.num_jobs
    status = [JobStatus.DEFERRED] * m
    reasons = ["no device left for it alone or in a listed group"] * m
    fits = problem.jobs.scale_factor[:, None] <= inst.devices[None, :]
    for i in np.nonzero(~(problem.usable & fits).any(axis=1))[0].tolist():
        status[i], reasons[i] = JobStatus.UNSERVABLE, NO_USABLE_TYPE
    ids = sharing.devices.ids if sharing.devices is not None else ()
    types = (sharing.devices.type_index if sharing.devices is not None
             else np.repeat(np.arange(problem.cluster.num_types), problem.cluster.count))
    of_type = [np.nonzero(types == j)[0].tolist() for j in range(inst.devices.size)]
    columns = inst.columns
    alone = columns.alone_job.size
    configured = sharing.configurations
    at = np.asarray(chosen, np.int64)
    first_member = np.array([min(columns.members(c)) for c in at[at >= alone].tolist()]
                            + columns.alone_job[at[at < alone]].tolist(), np.int64)
    at = np.concatenate([at[at >= alone], at[at < alone]])[np.argsort(first_member,
                                                                      kind="stable")]
    next_device = [0] * inst.devices.size
    groups: list[ColocationGroup] = []
    for c, j, count in zip(at.tolist(), columns.type_index[at].tolist(),
                           columns.devices[at].tolist(), strict=True):
        column = columns.groups[c - alone] if c >= alone else None
        if column is None:
            i, k = int(columns.alone_job[c]), int(columns.alone_configuration[c])
            members, slowdown, chosen_configurations = (i,), (1.0,), (k,)
        else:
            members, slowdown = column.members, column.slowdown
            chosen_configurations = column.configurations
        first = next_device[j]
        next_device[j] += count
        names = tuple(configured[i][k].name if i < len(configured) and configured[i] else ""
                      for i, k in zip(members, chosen_configurations, strict=True))
        groups.append(ColocationGroup(
            members=members,
            slowdown=slowdown,
            type_index=j,
            devices=count,
            device_ids=tuple(ids[d] for d in of_type[j][first:first + count] if d < len(ids))
            if ids else (),
            configurations=names if any(names) else (),
        ))
        for i in members:
            status[i], reasons[i] = JobStatus.ALLOCATED, ""
    return groups, status, reasons
