"""Wire conversion for the co-location and resource-shape policies (synergy, muri, antman,
lucid, iadeep).

* `sharing_parameters` maps a `Policy.parameters` oneof field to a converter of its message;
  `SHARING_COMPAT` the compat values of these policies.
* `sharing_problem` reads and validates what the resolved policy reads (by its capability
  flags): CPU/memory grids and node CPUs and memory, stage times, device sharing profiles,
  shared devices and group interference; other policies ignore these fields.
* `fill_sharing_response` writes the heuristic's objective in the stats (the groups are
  written by `apportion.server.group_wire`).

Every problem is appended as `Violation(field_path, description)`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from apportion.server.sharing_wire import (
    InterferenceWire,
    JobSharingWire,
    read_sharing_wire,
)
from apportion.server.wire_records import collection_paused
from apportion.solver.cluster_topology import topology_of
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.errors import Violation
from apportion.solver.model import Compat, PolicyRequest, Problem
from apportion.solver.parameters import (
    AntmanParameters,
    BaseOrder,
    IadeepParameters,
    LucidParameters,
    MuriParameters,
    SynergyParameters,
)
from apportion.solver.registry import lookup
from apportion.solver.result import Plan, relative_gap
from apportion.solver.sharing import (
    MAX_GROUP_SIZE,
    GroupInterference,
    JobConfiguration,
    ResourceGrid,
    SharedDevices,
    SharingInputs,
)
from apportion.solver.topology import ServiceClass
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import policy_pb2 as policy_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

MAX_GRID_AXIS = 64
"""Largest number of values on either axis of a CPU/memory grid."""
WIRE_FROM = 128
"""A request with this many jobs and interference entries or more is read at the wire
level; fewer, from the messages."""

SHARING_COMPAT = {
    policy_pb.COMPAT_SYNERGY: Compat.SYNERGY,
    policy_pb.COMPAT_MURI: Compat.MURI,
    policy_pb.COMPAT_ANTMAN: Compat.ANTMAN,
    policy_pb.COMPAT_LUCID: Compat.LUCID,
    policy_pb.COMPAT_IADEEP: Compat.IADEEP,
}

_ORDER = {
    policy_pb.BASE_ORDER_ARRIVAL: BaseOrder.ARRIVAL,
    policy_pb.BASE_ORDER_REMAINING_SERVICE: BaseOrder.REMAINING_SERVICE,
    policy_pb.BASE_ORDER_ATTAINED_SERVICE: BaseOrder.ATTAINED_SERVICE,
}


def _finite(x: float) -> bool:
    return math.isfinite(x)


def _order(msg: Any, path: str, default: BaseOrder, violations: list[Violation]) -> BaseOrder:
    if msg.order == policy_pb.BASE_ORDER_UNSPECIFIED:
        return default
    if msg.order not in _ORDER:
        violations.append(Violation(f"{path}.order", f"unknown value {msg.order}"))
        return default
    return _ORDER[msg.order]


def _positive(msg: Any, name: str, path: str, default: float, violations: list[Violation],
              upper: float = math.inf) -> float:
    if not msg.HasField(name):
        return default
    value = getattr(msg, name)
    if not (_finite(value) and 0 < value <= upper):
        bound = f"in (0, {upper:g}]" if math.isfinite(upper) else "finite and > 0"
        violations.append(Violation(f"{path}.{name}", f"must be {bound}, got {value}"))
        return default
    return float(value)


def _synergy(msg: Any, violations: list[Violation]) -> object:
    return SynergyParameters(order=_order(msg, "policy.synergy", BaseOrder.ARRIVAL, violations))


def _muri(msg: Any, violations: list[Violation]) -> object:
    p = "policy.muri"
    size = msg.max_group_size if msg.HasField("max_group_size") else MAX_GROUP_SIZE
    if not 1 <= size <= MAX_GROUP_SIZE:
        violations.append(Violation(f"{p}.max_group_size",
                                    f"must be in [1, {MAX_GROUP_SIZE}], got {size}"))
        size = MAX_GROUP_SIZE
    lam = msg.weight_threshold
    if not (_finite(lam) and lam >= 0):
        violations.append(Violation(f"{p}.weight_threshold", f"must be finite and >= 0, got {lam}"))
        lam = 0.0
    overhead = tuple(float(v) for v in msg.interleave_overhead)
    if overhead and len(overhead) != MAX_GROUP_SIZE:
        violations.append(Violation(f"{p}.interleave_overhead",
                                    f"needs {MAX_GROUP_SIZE} values (groups of 1 to 4), got "
                                    f"{len(overhead)}"))
        overhead = ()
    for k, value in enumerate(overhead):
        if not (_finite(value) and value >= 1):
            violations.append(Violation(f"{p}.interleave_overhead[{k}]",
                                        f"must be finite and >= 1, got {value}"))
            overhead = ()
            break
    return MuriParameters(
        order=_order(msg, p, BaseOrder.REMAINING_SERVICE, violations),
        max_group_size=size,
        weight_threshold=float(lam),
        exact_groups=msg.exact_groups,
        interleave_overhead=overhead,
        autopack=msg.autopack if msg.HasField("autopack") else True,
    )


def _antman(msg: Any, violations: list[Violation]) -> object:
    p = "policy.antman"
    default = AntmanParameters()
    weight = msg.slowdown_weight
    if not (_finite(weight) and weight >= 0):
        violations.append(Violation(f"{p}.slowdown_weight", f"must be finite and >= 0, got "
                                                            f"{weight}"))
        weight = 0.0
    return AntmanParameters(
        max_utilization=_positive(msg, "max_utilization", p, default.max_utilization,
                                  violations, upper=1.0),
        slowdown_weight=float(weight),
        busy_utilization=_positive(msg, "busy_utilization", p, default.busy_utilization,
                                   violations, upper=1.0),
        busy_memory_gib=_positive(msg, "busy_memory_gib", p, default.busy_memory_gib,
                                  violations),
        device_memory_gib=_positive(msg, "device_memory_gib", p, default.device_memory_gib,
                                    violations),
    )


def _lucid(msg: Any, violations: list[Violation]) -> object:
    p = "policy.lucid"
    default = LucidParameters()
    score_sum = msg.max_score_sum if msg.HasField("max_score_sum") else default.max_score_sum
    if score_sum < 0:
        violations.append(Violation(f"{p}.max_score_sum", f"must be >= 0, got {score_sum}"))
        score_sum = default.max_score_sum
    return LucidParameters(
        sharing=msg.sharing if msg.HasField("sharing") else True,
        device_memory_gib=_positive(msg, "device_memory_gib", p, default.device_memory_gib,
                                    violations),
        max_score_sum=int(score_sum),
        pair_pending=msg.pair_pending,
    )


def _iadeep(msg: Any, violations: list[Violation]) -> object:
    p = "policy.iadeep"
    cap = msg.max_slowdown
    if not (_finite(cap) and (cap == 0 or cap > 1)):
        violations.append(Violation(f"{p}.max_slowdown", f"must be 0 or finite and > 1, got "
                                                         f"{cap}"))
        cap = 0.0
    return IadeepParameters(
        max_slowdown=float(cap),
        device_memory_gib=_positive(msg, "device_memory_gib", p,
                                    IadeepParameters().device_memory_gib, violations),
    )


sharing_parameters: dict[str, Callable[[Any, list[Violation]], object]] = {
    policy_pb.SynergyParameters.DESCRIPTOR.full_name: _synergy,
    policy_pb.MuriParameters.DESCRIPTOR.full_name: _muri,
    policy_pb.AntmanParameters.DESCRIPTOR.full_name: _antman,
    policy_pb.LucidParameters.DESCRIPTOR.full_name: _lucid,
    policy_pb.IadeepParameters.DESCRIPTOR.full_name: _iadeep,
}


def _grid(msg: snapshot_pb.ResourceProfile, path: str,
          violations: list[Violation]) -> ResourceGrid | None:
    """A validated grid: monotone axes, no holes, finite throughput >= 0."""
    ok = True
    axes: list[np.ndarray] = []
    for name in ("cpus_per_gpu", "memory_gib_per_gpu"):
        values = np.asarray(getattr(msg, name), np.float64)
        if values.size == 0:
            violations.append(Violation(f"{path}.{name}", "must list at least one value"))
            ok = False
        elif values.size > MAX_GRID_AXIS:
            violations.append(Violation(f"{path}.{name}",
                                        f"at most {MAX_GRID_AXIS} values, got {values.size}"))
            ok = False
        for k, value in enumerate(values.tolist()):
            if not (_finite(value) and value > 0):
                violations.append(Violation(f"{path}.{name}[{k}]",
                                            f"must be finite and > 0, got {value}"))
                ok = False
            elif k and not value > values[k - 1]:
                violations.append(Violation(
                    f"{path}.{name}[{k}]",
                    f"axis not strictly increasing: {value} after {values[k - 1]}"))
                ok = False
        axes.append(values)
    tput = np.asarray(msg.throughput, np.float64)
    need = axes[0].size * axes[1].size
    if ok and tput.size != need:
        violations.append(Violation(
            f"{path}.throughput",
            f"the grid has holes: {axes[0].size} x {axes[1].size} points need {need} values "
            f"(row-major by cpus_per_gpu), got {tput.size}"))
        ok = False
    for k, value in enumerate(tput.tolist()):
        if not (_finite(value) and value >= 0):
            violations.append(Violation(f"{path}.throughput[{k}]",
                                        f"must be finite and >= 0 (no holes), got {value}"))
            ok = False
    if not ok:
        return None
    return ResourceGrid(axes[0], axes[1], tput.reshape(axes[0].size, axes[1].size))


def _grids(msg: snapshot_pb.Snapshot, problem: Problem, violations: list[Violation],
           wire: JobSharingWire | None
           ) -> tuple[tuple[ResourceGrid | None, ...], np.ndarray, np.ndarray]:
    """Per job its grid, and the nodes' CPUs and memory (synergy)."""
    by_type: dict[str, ResourceGrid | None] = {}
    first: dict[str, int] = {}
    for k, entry in enumerate(msg.resource_profiles):
        p = f"snapshot.resource_profiles[{k}]"
        if not entry.job_type:
            violations.append(Violation(f"{p}.job_type", "must be non-empty"))
            continue
        if entry.job_type in first:
            violations.append(Violation(f"{p}.job_type", f"duplicate job type "
                                        f"{entry.job_type!r} (first at [{first[entry.job_type]}])"))
            continue
        first[entry.job_type] = k
        by_type[entry.job_type] = _grid(entry, p, violations)
    cpus = np.array([node.cpus for node in msg.cluster.nodes], np.float64)
    memory = np.array([node.memory_gib for node in msg.cluster.nodes], np.float64)
    if not msg.cluster.nodes:
        violations.append(Violation("snapshot.cluster.nodes",
                                    "synergy needs the nodes with their cpus and memory_gib"))
    for k, node in enumerate(msg.cluster.nodes):
        if node.devices > 0:
            for name in ("cpus", "memory_gib"):
                value = getattr(node, name)
                if _finite(value) and value <= 0:
                    violations.append(Violation(
                        f"snapshot.cluster.nodes[{k}].{name}",
                        "must be > 0 on a node with devices (synergy allocates it)"))
    devices = problem.cluster.node_devices
    total = float(devices.sum()) if devices.size else 0.0
    fair_cpu = float(np.nan_to_num(cpus)[devices > 0].sum()) / total if total else 0.0
    fair_mem = float(np.nan_to_num(memory)[devices > 0].sum()) / total if total else 0.0
    m = len(msg.jobs)
    grids: list[ResourceGrid | None] = [None] * m
    rows: Iterable[int] = range(m)
    if wire is not None:  # jobs of a listed type from the job types, the others one by one
        floor_ok = {name: grid is not None and not _above_share(grid, total, fair_cpu, fair_mem)
                    for name, grid in by_type.items()}
        job_types = problem.jobs.job_type[:m]
        good = ~wire.unread & ~wire.profile_given & np.fromiter(
            (floor_ok.get(name, False) for name in job_types), bool, m)
        grids = [by_type[name] if fine else None
                 for name, fine in zip(job_types, good.tolist(), strict=True)]
        rows = np.flatnonzero(~good).tolist()
    for i in rows:
        job = msg.jobs[i]
        p = f"snapshot.jobs[{i}].resource_profile"
        if job.HasField("resource_profile"):
            grid = _grid(job.resource_profile, p, violations)
            where = p
        elif job.job_type in by_type:
            grid = by_type[job.job_type]
            where = f"snapshot.resource_profiles[{first[job.job_type]}]"
        else:
            violations.append(Violation(
                p, "synergy needs a CPU/memory profile: this field, or a resource_profiles "
                   f"entry for the job's job_type ({job.job_type!r})"))
            grid = None
            where = p
        if grid is not None and _above_share(grid, total, fair_cpu, fair_mem):
            violations.append(Violation(
                where, f"no grid point within the GPU-proportional share ({fair_cpu:g} cores "
                       f"and {fair_mem:g} GiB per GPU): the fair-share floor is undefined"))
            grid = None
        grids[i] = grid
    return tuple(grids), cpus, memory


def _above_share(grid: ResourceGrid, total: float, fair_cpu: float, fair_mem: float) -> bool:
    """The grid's least point is above the GPU-proportional share (on a cluster with
    devices)."""
    return bool(total) and bool(grid.cpus_per_gpu[0] > fair_cpu * (1 + 1e-9)
                                or grid.memory_gib_per_gpu[0] > fair_mem * (1 + 1e-9))


_STAGES = ("storage_s", "cpu_s", "gpu_s", "network_s")


def _stages(msg: snapshot_pb.Snapshot, violations: list[Violation],
            wire: JobSharingWire | None) -> np.ndarray:
    out = np.full((len(msg.jobs), len(_STAGES)), np.nan)
    rows: Iterable[int] = range(len(msg.jobs))
    if wire is not None:  # rows with valid times from the wire, the others from the messages
        values = wire.stage_s
        good = (~wire.unread & wire.stage_given & (np.isfinite(values) & (values >= 0)).all(1)
                & (values > 0).any(1))
        out[good] = values[good]
        rows = np.flatnonzero(~good).tolist()
    for i in rows:
        job = msg.jobs[i]
        p = f"snapshot.jobs[{i}].stage_times"
        if not job.HasField("stage_times"):
            violations.append(Violation(p, "muri needs the job's time per iteration in each "
                                           "stage (storage_s, cpu_s, gpu_s, network_s)"))
            continue
        times = [getattr(job.stage_times, name) for name in _STAGES]
        ok = True
        for name, value in zip(_STAGES, times, strict=True):
            if not (_finite(value) and value >= 0):
                violations.append(Violation(f"{p}.{name}", f"must be finite and >= 0, got "
                                                           f"{value}"))
                ok = False
        if ok and sum(times) <= 0:
            violations.append(Violation(p, "the stage times must have a positive sum"))
            ok = False
        if ok:
            out[i] = times
    return out


def _devices(msg: snapshot_pb.Snapshot, problem: Problem, opportunistic: np.ndarray,
             default_memory: float, violations: list[Violation],
             wire: JobSharingWire | None) -> SharedDevices:
    """The cluster's healthy devices (its topology) with their memory and measured use, the
    guaranteed job holding each (`history.jobs[].devices`) and that job's slowdown budget."""
    topology = topology_of(problem.cluster)
    listed = {dev.id: k for k, dev in enumerate(msg.cluster.topology.devices)}
    count = topology.num_devices
    memory = np.full(count, default_memory)
    if topology.device_memory_gib.size == count:
        memory = np.where(topology.device_memory_gib > 0, topology.device_memory_gib, memory)
    used = np.zeros(count)
    util = np.zeros(count)
    path = "snapshot.cluster.topology.devices"
    checked: Iterable[int] = range(count)
    if not listed:  # only the memory to check
        checked = np.flatnonzero(~(memory > 0)).tolist()
    for d in checked:
        device_id = topology.device_ids[d]
        k = listed.get(device_id)
        if not (memory[d] > 0):
            where = f"{path}[{k}].memory_gib" if k is not None else path
            violations.append(Violation(where, f"device {device_id!r} needs its memory "
                                               "(memory_gib, or the policy's device_memory_gib)"))
            continue
        if k is None:
            continue
        dev = msg.cluster.topology.devices[k]
        if not (_finite(dev.used_memory_gib) and 0 <= dev.used_memory_gib <= memory[d]):
            violations.append(Violation(f"{path}[{k}].used_memory_gib",
                                        f"must be in [0, {memory[d]:g}] (the device's memory), "
                                        f"got {dev.used_memory_gib}"))
        else:
            used[d] = dev.used_memory_gib
        if not (_finite(dev.utilization) and 0 <= dev.utilization <= 1):
            violations.append(Violation(f"{path}[{k}].utilization",
                                        f"must be in [0, 1], got {dev.utilization}"))
        else:
            util[d] = dev.utilization
    holder = np.full(count, -1, np.int64)
    budget = np.full(count, np.inf)
    held = problem.placement.jobs.current_devices if problem.placement is not None else ()
    for i, devices in enumerate(held):
        if not devices or opportunistic[i]:
            continue
        limit = math.inf
        if wire is not None and not wire.unread[i]:
            given, value = bool(wire.budget_given[i]), float(wire.slowdown_budget[i])
        else:
            sharing = msg.jobs[i].sharing
            given, value = sharing.HasField("slowdown_budget"), sharing.slowdown_budget
        if given:
            limit = value
            if not (_finite(limit) and limit >= 0):
                violations.append(Violation(f"snapshot.jobs[{i}].sharing.slowdown_budget",
                                            f"must be finite and >= 0, got {limit}"))
                limit = 0.0
        holder[list(devices)] = i
        budget[list(devices)] = limit
    healthy = topology.device_healthy
    keep = np.nonzero(healthy)[0]
    names = problem.cluster.node_names
    return SharedDevices(
        ids=tuple(topology.device_ids[d] for d in keep.tolist()),
        type_index=topology.device_type[keep].astype(np.int64),
        node=tuple(names[int(v)] if names else "" for v in topology.device_node[keep].tolist()),
        memory_gib=memory[keep],
        used_memory_gib=used[keep],
        utilization=util[keep],
        guaranteed_job=holder[keep],
        slowdown_budget=budget[keep],
    )


def _opportunistic(problem: Problem) -> np.ndarray:
    """(m,) jobs of service class opportunistic or best effort (`Job.service_class`)."""
    m = problem.jobs.num_jobs
    if problem.placement is None:
        return np.zeros(m, bool)
    classes = problem.placement.jobs.service_class
    return np.array([c is not ServiceClass.GUARANTEED for c in classes], bool)


def _job_sharing(msg: snapshot_pb.Snapshot, device_memory: float,
                 violations: list[Violation], wire: JobSharingWire | None) -> dict[str, Any]:
    m = len(msg.jobs)
    memory = np.zeros(m)
    util = np.zeros(m)
    score = np.full(m, -1, np.int64)
    configurations: list[tuple[JobConfiguration, ...]] = [()] * m
    rows: Iterable[int] = range(m)
    if wire is not None:  # rows with valid fields from the wire, the others from the messages
        given_memory, given_util = wire.gpu_memory_gib, wire.gpu_utilization
        given_score = wire.sharing_score
        good = (~wire.unread & np.isfinite(given_memory) & (given_memory >= 0)
                & (given_memory <= device_memory) & np.isfinite(given_util)
                & (given_util >= 0) & (given_util <= 1)
                & (~wire.score_given | ((given_score >= 0) & (given_score <= 2))))
        memory[good], util[good] = given_memory[good], given_util[good]
        scored = good & wire.score_given
        score[scored] = given_score[scored]
        rows = np.flatnonzero(~good).tolist()
    for i in rows:
        configurations[i] = _job_sharing_row(msg.jobs[i].sharing, f"snapshot.jobs[{i}].sharing",
                                             device_memory, violations, i, memory, util, score)
    return {
        "gpu_memory_gib": memory,
        "gpu_utilization": util,
        "sharing_score": score,
        "configurations": tuple(configurations),
    }


def _job_sharing_row(share: snapshot_pb.DeviceSharing, p: str, device_memory: float,
                     violations: list[Violation], i: int, memory: np.ndarray, util: np.ndarray,
                     score: np.ndarray) -> tuple[JobConfiguration, ...]:
    """One job's sharing fields from its message (into row i of the columns), and its
    configurations."""
    if not (_finite(share.gpu_memory_gib) and share.gpu_memory_gib >= 0):
        violations.append(Violation(f"{p}.gpu_memory_gib", f"must be finite and >= 0, got "
                                                           f"{share.gpu_memory_gib}"))
    elif share.gpu_memory_gib > device_memory:
        violations.append(Violation(
            f"{p}.gpu_memory_gib",
            f"{share.gpu_memory_gib:g} GiB is more than a device holds "
            f"({device_memory:g} GiB)"))
    else:
        memory[i] = share.gpu_memory_gib
    if not (_finite(share.gpu_utilization) and 0 <= share.gpu_utilization <= 1):
        violations.append(Violation(f"{p}.gpu_utilization", f"must be in [0, 1], got "
                                                            f"{share.gpu_utilization}"))
    else:
        util[i] = share.gpu_utilization
    if share.HasField("sharing_score"):
        if not 0 <= share.sharing_score <= 2:
            violations.append(Violation(f"{p}.sharing_score", f"must be 0, 1 or 2, got "
                                                              f"{share.sharing_score}"))
        else:
            score[i] = share.sharing_score
    configs: list[JobConfiguration] = []
    names: dict[str, int] = {}
    for k, conf in enumerate(share.configurations):
        cp = f"{p}.configurations[{k}]"
        if not conf.name:
            violations.append(Violation(f"{cp}.name", "must be non-empty"))
        elif conf.name in names:
            violations.append(Violation(f"{cp}.name", f"duplicate configuration "
                                                      f"{conf.name!r}"))
        names[conf.name] = k
        if not (_finite(conf.relative_throughput) and conf.relative_throughput > 0):
            violations.append(Violation(f"{cp}.relative_throughput", "must be finite and "
                                        f"> 0, got {conf.relative_throughput}"))
        need = conf.gpu_memory_gib or share.gpu_memory_gib
        if not (_finite(conf.gpu_memory_gib) and conf.gpu_memory_gib >= 0):
            violations.append(Violation(f"{cp}.gpu_memory_gib", "must be finite and >= 0"))
        elif need > device_memory:
            violations.append(Violation(f"{cp}.gpu_memory_gib",
                                        f"{need:g} GiB is more than a device holds "
                                        f"({device_memory:g} GiB)"))
        configs.append(JobConfiguration(conf.name, float(conf.relative_throughput),
                                        float(need)))
    return tuple(configs)


def _interference(msg: snapshot_pb.Snapshot, problem: Problem,
                  configurations: Sequence[tuple[JobConfiguration, ...]],
                  violations: list[Violation], wire: InterferenceWire | None,
                  deadline: Deadline = NO_DEADLINE) -> tuple[GroupInterference, ...]:
    """The valid entries: distinct known members (2 to 4), a slowdown each, named
    configurations, no group twice, equal scale factors."""
    jobs = dict(zip(problem.jobs.ids, range(problem.jobs.num_jobs), strict=True))  # last wins
    count = len(msg.interference)
    members = np.full((count, MAX_GROUP_SIZE), -1, np.int64)
    chosen = np.zeros((count, MAX_GROUP_SIZE), np.int64)
    slowdown = np.zeros((count, MAX_GROUP_SIZE))
    size = np.zeros(count, np.int64)
    named = np.zeros(count, bool)
    rows: Iterable[int] = range(count)
    if wire is not None:  # well-formed entries from the wire, the others from the messages
        with collection_paused():
            good = _wire_entries(wire, jobs, members, slowdown)
        size[good] = wire.id_count[good]
        rows = np.flatnonzero(~good).tolist()
        deadline.check()
    for k in rows:
        entry = _entry_row(msg.interference[k], f"snapshot.interference[{k}]", jobs,
                           configurations, violations)
        if entry is not None:
            n = len(entry.jobs)
            members[k, :n], slowdown[k, :n], size[k] = entry.jobs, entry.slowdown, n
            if entry.configurations:
                chosen[k, :n], named[k] = entry.configurations, True
    ok = np.flatnonzero(size > 0)
    if not ok.size:
        return ()
    # a group's key: its (member, configuration) pairs in member order
    order = np.argsort(np.where(members[ok] >= 0, members[ok], np.iinfo(np.int64).max), axis=1)
    key = np.concatenate([np.take_along_axis(members[ok], order, 1),
                          np.take_along_axis(chosen[ok], order, 1)], axis=1)
    first_at = ok[_first_equal_row(key)]
    for k, seen in zip(ok[first_at != ok].tolist(), first_at[first_at != ok].tolist(),
                       strict=True):
        violations.append(Violation(f"snapshot.interference[{k}]",
                                    f"group listed twice (first at [{seen}])"))
    ok = ok[first_at == ok]
    scale = problem.jobs.scale_factor.astype(np.int64)
    member_scale = np.where(members[ok] >= 0, scale[np.maximum(members[ok], 0)], -1)
    highest = member_scale.max(axis=1)
    mixed = (np.where(member_scale >= 0, member_scale, highest[:, None]).min(axis=1)
             != highest)
    for k in ok[mixed].tolist():
        violations.append(Violation(f"snapshot.interference[{k}].job_ids",
                                    "jobs sharing devices need equal scale factors"))
    ok = ok[~mixed]
    deadline.check()
    with collection_paused():
        return _entries_of(ok, size, members, slowdown, chosen, named)


def _entries_of(ok: np.ndarray, size: np.ndarray, members: np.ndarray, slowdown: np.ndarray,
                chosen: np.ndarray, named: np.ndarray) -> tuple[GroupInterference, ...]:
    """The `GroupInterference` of the entries `ok` (rows of the padded columns)."""
    out: list[GroupInterference | None] = [None] * ok.size
    for n in range(2, MAX_GROUP_SIZE + 1):  # tuples made column by column, per group size
        sized = np.flatnonzero(size[ok] == n)
        picked = ok[sized]
        member_tuples = zip(*(members[picked, c].tolist() for c in range(n)), strict=True)
        slowdown_tuples = zip(*(slowdown[picked, c].tolist() for c in range(n)), strict=True)
        names: list[tuple[int, ...]] = [()] * sized.size
        for place in np.flatnonzero(named[picked]).tolist():
            names[place] = tuple(chosen[picked[place], :n].tolist())
        for place, entry in zip(sized.tolist(), map(GroupInterference, member_tuples,
                                                    slowdown_tuples, names), strict=True):
            out[place] = entry
    return tuple(out)  # type: ignore[arg-type]


def _first_equal_row(key: np.ndarray) -> np.ndarray:
    """For each row of `key`, the index of the first row equal to it."""
    if not key.shape[0]:
        return np.zeros(0, np.int64)
    order = np.lexsort(key.T[::-1])  # stable: equal rows by index
    ordered = key[order]
    starts = np.concatenate([[True], (ordered[1:] != ordered[:-1]).any(axis=1)])
    first = np.empty(key.shape[0], np.int64)
    first[order] = order[starts][np.cumsum(starts) - 1]
    return first


def _wire_entries(wire: InterferenceWire, jobs: dict[str, int], members: np.ndarray,
                  slowdown: np.ndarray) -> np.ndarray:
    """Fill `members` and `slowdown` from the wire for the entries read there that are
    valid as they stand (distinct known ids, 2 to 4, a finite slowdown > 0 each); those
    entries."""
    count = wire.unread.size
    index = np.fromiter(map(jobs.get, wire.ids, itertools.repeat(-1)), np.int64,
                        len(wire.ids))
    read = np.flatnonzero(~wire.unread)
    ids, slows = wire.id_count[read], wire.slowdown_count[read]
    id_owner = np.repeat(read, ids)
    id_place = np.arange(index.size) - np.repeat(np.cumsum(ids) - ids, ids)
    slow_owner = np.repeat(read, slows)
    slow_place = np.arange(wire.slowdown.size) - np.repeat(np.cumsum(slows) - slows, slows)
    good = np.zeros(count, bool)
    good[read] = (ids >= 2) & (ids <= MAX_GROUP_SIZE) & (slows == ids)
    bad_id = index < 0
    bad_slow = ~(np.isfinite(wire.slowdown) & (wire.slowdown > 0))
    good[id_owner[bad_id | (id_place >= MAX_GROUP_SIZE)]] = False
    good[slow_owner[bad_slow | (slow_place >= MAX_GROUP_SIZE)]] = False
    fits = good[id_owner]
    members[id_owner[fits], id_place[fits]] = index[fits]
    fits = good[slow_owner]
    slowdown[slow_owner[fits], slow_place[fits]] = wire.slowdown[fits]
    rows = members[good]
    twice = np.zeros(rows.shape[0], bool)
    for a in range(MAX_GROUP_SIZE):
        for b in range(a + 1, MAX_GROUP_SIZE):
            twice |= (rows[:, a] >= 0) & (rows[:, a] == rows[:, b])
    good[np.flatnonzero(good)[twice]] = False
    members[~good] = -1
    slowdown[~good] = 0.0
    return good


def _entry_row(entry: snapshot_pb.GroupInterference, p: str, jobs: dict[str, int],
               configurations: Sequence[tuple[JobConfiguration, ...]],
               violations: list[Violation]) -> GroupInterference | None:
    """One entry from its message, if valid as it stands (no group twice and scale factors
    are judged over all entries)."""
    ids = list(entry.job_ids)
    ok = True
    if not 2 <= len(ids) <= MAX_GROUP_SIZE:
        violations.append(Violation(f"{p}.job_ids", f"a group has 2 to {MAX_GROUP_SIZE} "
                                                    f"jobs, got {len(ids)}"))
        ok = False
    members: list[int] = []
    for n, job_id in enumerate(ids):
        if job_id not in jobs:
            violations.append(Violation(f"{p}.job_ids[{n}]", f"unknown job {job_id!r}"))
            ok = False
        elif jobs[job_id] in members:
            violations.append(Violation(f"{p}.job_ids[{n}]", f"job {job_id!r} listed twice"))
            ok = False
        else:
            members.append(jobs[job_id])
    if len(entry.slowdown) != len(ids):
        violations.append(Violation(f"{p}.slowdown", f"needs one value per job "
                                                     f"({len(ids)}), got "
                                                     f"{len(entry.slowdown)}"))
        ok = False
    for n, value in enumerate(entry.slowdown):
        if not (_finite(value) and value > 0):
            violations.append(Violation(f"{p}.slowdown[{n}]", f"must be finite and > 0, got "
                                                              f"{value}"))
            ok = False
    chosen: list[int] = []
    if entry.configurations:
        if len(entry.configurations) != len(ids):
            violations.append(Violation(f"{p}.configurations", "needs one name per job"))
            ok = False
        else:
            for n, name in enumerate(entry.configurations):
                own = configurations[members[n]] if ok and n < len(members) else ()
                names = [conf.name for conf in own]
                if name not in names:
                    violations.append(Violation(
                        f"{p}.configurations[{n}]",
                        f"job {ids[n]!r} has no configuration {name!r}"))
                    ok = False
                else:
                    chosen.append(names.index(name))
    if not ok:
        return None
    return GroupInterference(tuple(members), tuple(float(v) for v in entry.slowdown),
                             tuple(chosen))


def sharing_problem(
    request: service_pb.SolveRequest,
    problem: Problem,
    policy: PolicyRequest,
    violations: list[Violation],
    serialized: bytes | None = None,
    deadline: Deadline = NO_DEADLINE,
) -> Problem:
    """Add and validate the inputs the policy reads (unchanged problem for other policies).
    These policies do not read jobs[].throughput: convert's "no usable accelerator type"
    error is withdrawn for them. `serialized`: the bytes `request` was parsed from, if at
    hand (a request of WIRE_FROM jobs and entries or more is read at the wire level,
    `apportion.server.sharing_wire`). Raises `DeadlineExpiredError` once `deadline` passes
    (checked between the inputs read)."""
    caps = lookup(policy.name).capabilities
    if not (caps.reads_resource_profiles or caps.reads_stage_times or caps.reads_device_sharing):
        return problem
    snap = request.snapshot
    violations[:] = [v for v in violations if "no usable accelerator type" not in v.description]
    sharing = SharingInputs()
    wire_jobs: JobSharingWire | None = None
    wire_entries: InterferenceWire | None = None
    if len(snap.jobs) + len(snap.interference) >= WIRE_FROM:
        wire_jobs, wire_entries = read_sharing_wire(request, serialized, deadline)
        deadline.check()
    if caps.reads_resource_profiles:
        grids, cpus, memory = _grids(snap, problem, violations, wire_jobs)
        sharing = replace(sharing, resource_grid=grids, node_cpus=cpus, node_memory_gib=memory)
    if caps.reads_stage_times:
        sharing = replace(sharing, stage_s=_stages(snap, violations, wire_jobs))
    deadline.check()
    if caps.reads_device_sharing:
        params = policy.parameters
        opportunistic = _opportunistic(problem)
        devices: SharedDevices | None = None
        if isinstance(params, LucidParameters):
            limit = params.device_memory_gib
        else:
            default = float(getattr(params, "device_memory_gib", 0.0))
            devices = _devices(snap, problem, opportunistic, default, violations, wire_jobs)
            limit = float(devices.memory_gib.max(initial=0.0))
        deadline.check()
        fields = _job_sharing(snap, limit, violations, wire_jobs)
        deadline.check()
        for i in np.nonzero(opportunistic & (problem.jobs.scale_factor > 1))[0].tolist():
            violations.append(Violation(f"snapshot.jobs[{i}].scale_factor",
                                        "an opportunistic job runs on one device"))
        sharing = replace(
            sharing,
            devices=devices,
            opportunistic=opportunistic,
            interference=_interference(snap, problem, fields["configurations"], violations,
                                       wire_entries, deadline),
            **fields,
        )
    return replace(problem, sharing=sharing)


def fill_sharing_response(plan: Plan, response: service_pb.SolveResponse) -> None:
    """The heuristic's objective (the groups and the per-job CPUs, memory, slowdown and group
    are written by `response.plan_response`, `apportion.server.group_wire`)."""
    section = plan.groups
    if section is None:
        return
    stats = response.stats
    if section.heuristic:
        stats.heuristic = section.heuristic
        if section.heuristic_objective is not None:
            stats.heuristic_objective = section.heuristic_objective
            gap = relative_gap(plan.certificate.objective, section.heuristic_objective, 1.0)
            if gap is not None and math.isfinite(gap):
                stats.heuristic_gap = gap
