"""The one place where the simulator reads a policy's answer.

A solve returns a `Plan` (in-process) or a `SolveResponse` (through `apportion serve`); both
are turned here into a `Decision`, the simulator's own view of an answer, so that a change of
either shape touches this module only. What is read depends on the policy's plan kind
(`Capabilities.plan_kind`), never on its name:

* TIME_SHARE and MARKET: the time shares X (jobs x types) and the co-located pairs, run
  through Gavel's round mechanism by the simulator, or the rounds the policy plans itself
  when it returns them unasked (Gandiva_fair's stride quanta);
* WINDOW: the planned rounds of the window, each a list of grants (job, type, devices, nodes
  when the plan names them); a 0/1 schedule (rounds x jobs) runs each job on its gang of the
  type with the most devices, as the service writes it;
* QUEUE: the pending jobs to start now, with their type, device count and nodes;
* CONFIGURATION: each job's configuration (type, devices, devices per node);
* GROUPS: the groups of jobs sharing devices for the round (members, each member's
  predicted slowdown, the devices' type and count, devices per node when the plan names
  them); a job alone is a group of one.

Besides, every kind may return state a client sends back with the next snapshot (`Carry`):
finish-time fairness's C_i with the iso_i and R_i it used, Shockwave's reference finish
times and their bookkeeping, Gandiva_fair's stride passes, and the pairs of the previous plan
(Gandiva's pairing; the two-job groups of a GROUPS plan, Lucid's pairs), the leases of
Themis's auction and Astraea (end and time share), and the devices each tenant is entitled to
under Astraea's plan (the simulator measures the device-time used and accrues the entitled
device-time itself, `state.JobState`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from apportion.solver.capabilities import PlanKind
from apportion.solver.model import FloatArray, Problem
from apportion.solver.result import Plan, Termination
from apportion.v1 import allocation_service_pb2 as service_pb

NodeDevices = tuple[tuple[int, int], ...]
"""(node index, devices) pairs of a placement; empty = no node layout (or not placed)."""

PLAN_TERMINATIONS = frozenset(
    {
        Termination.OPTIMAL,
        Termination.OPTIMAL_INACCURATE,
        Termination.FEASIBLE,
        Termination.HEURISTIC,
    }
)
"""Terminations that come with a plan."""

_TERMINATION_FROM_WIRE: Mapping[int, Termination] = {
    service_pb.TERMINATION_REASON_OPTIMAL: Termination.OPTIMAL,
    service_pb.TERMINATION_REASON_OPTIMAL_INACCURATE: Termination.OPTIMAL_INACCURATE,
    service_pb.TERMINATION_REASON_FEASIBLE: Termination.FEASIBLE,
    service_pb.TERMINATION_REASON_INFEASIBLE: Termination.INFEASIBLE,
    service_pb.TERMINATION_REASON_UNBOUNDED: Termination.UNBOUNDED,
    service_pb.TERMINATION_REASON_HEURISTIC: Termination.HEURISTIC,
    service_pb.TERMINATION_REASON_NO_SOLUTION: Termination.NO_SOLUTION,
    service_pb.TERMINATION_REASON_ERROR: Termination.ERROR,
}


@dataclass(frozen=True)
class Start:
    """A job to start now (queue plans): where it runs."""

    job: int
    """Index into the snapshot's jobs."""
    type_index: int
    devices: int
    nodes: NodeDevices


@dataclass(frozen=True)
class Planned:
    """A job's grant in a planned round (planning-window plans)."""

    job: int
    type_index: int
    devices: int
    nodes: tuple[int, ...] = ()
    """Nodes named by the plan (indices; empty = the simulator places the job)."""
    partner: int = -1


@dataclass(frozen=True)
class Configured:
    """A job's configuration (configuration plans)."""

    type_index: int
    devices: int
    nodes: NodeDevices


@dataclass(frozen=True)
class Grouped:
    """Jobs sharing the same devices for a round (GROUPS plans)."""

    members: tuple[int, ...]
    """Indices into the snapshot's jobs."""
    slowdown: tuple[float, ...]
    """Per member: time per step in the group over time per step alone (> 1 = slower)."""
    type_index: int
    devices: int
    nodes: NodeDevices = ()
    """(node index, devices) named by the plan; empty = the simulator places the group."""
    cpus: tuple[float, ...] = ()
    """Per member: CPU cores the plan gives it in all (resource-shape policies); empty =
    not allocated."""
    memory_gib: tuple[float, ...] = ()
    """Per member: host memory the plan gives it in all (GiB)."""


@dataclass(frozen=True)
class Carry:
    """State to send back with the next snapshot, per snapshot job (None = not returned)."""

    isolated_time_s: FloatArray | None = None
    """(k,) finish-time fairness C_i after the call (s)."""
    isolated_throughput: FloatArray | None = None
    """(k,) iso_i used by the call (steps/s)."""
    remaining_steps: FloatArray | None = None
    """(k,) R_i at the call (steps)."""
    reference_finish_s: FloatArray | None = None
    """(k,) Shockwave's F*_i (absolute s)."""
    reference_state: NDArray[np.float64] | None = None
    """(k, 5) Shockwave's F* bookkeeping: estimate, its time, earlier average, earlier weight,
    job count; NaN estimate = none."""
    partner: tuple[int, ...] = ()
    """Per snapshot job, the job it shares devices with in the plan (-1 = none); empty = no
    pairs."""
    stride_pass: FloatArray | None = None
    """(k,) Gandiva_fair's stride pass after the planned quanta; NaN = none."""
    lease_expires_s: FloatArray | None = None
    """(k,) end of each job's lease (absolute s; 0 = no lease); None = the plan has no
    leases."""
    lease_time_share: FloatArray | None = None
    """(k,) fraction of its lease the job runs on the leased devices (1 without a lease)."""
    entitled_devices: tuple[tuple[str, float], ...] | None = None
    """Astraea: (tenant, devices it is entitled to while the plan holds); None = n/a."""


@dataclass(frozen=True)
class Decision:
    """What the simulator takes from one solve."""

    termination: Termination
    objective: float | None
    detail: str
    solve_time_s: float
    """The solver's own build + solve time (s)."""
    time_share: FloatArray | None = None
    """(k, n) time shares (TIME_SHARE, MARKET)."""
    colocated: tuple[tuple[int, int, int, float], ...] = ()
    """(job a, job b, type index, share) of each co-located pair."""
    planned: tuple[tuple[Planned, ...], ...] | None = None
    """Rounds the policy planned itself, first = the next one (WINDOW; time shares that come
    with their own rounds)."""
    starts: tuple[Start, ...] = ()
    """Pending jobs to start now (QUEUE)."""
    configurations: tuple[Configured | None, ...] = ()
    """Per job, its configuration; None = not allocated (CONFIGURATION)."""
    groups: tuple[Grouped, ...] = ()
    """The running groups (GROUPS)."""
    carry: Carry = field(default_factory=Carry)

    @property
    def has_plan(self) -> bool:
        return self.termination in PLAN_TERMINATIONS


def decision_from_plan(plan: Plan, problem: Problem, kind: PlanKind) -> Decision:
    """The decision of an in-process plan for `problem`'s jobs."""
    cert = plan.certificate
    base = Decision(
        termination=cert.termination,
        objective=cert.objective,
        detail=cert.detail,
        solve_time_s=cert.build_time_s + cert.solve_time_s,
        carry=_carry_from_plan(plan, problem.jobs.num_jobs),
    )
    if not base.has_plan:
        return base
    nodes = {name: k for k, name in enumerate(problem.cluster.node_names)}
    planned = _own_rounds(plan, problem, nodes)
    if kind in (PlanKind.TIME_SHARE, PlanKind.MARKET):
        return replace(
            base,
            time_share=np.asarray(plan.time_share, np.float64),
            colocated=tuple(plan.shares.colocated),
            planned=planned,
        )
    if kind is PlanKind.WINDOW:
        if plan.window is not None:
            return replace(base, planned=_window_from_matrix(plan.window.schedule, problem))
        return replace(base, planned=planned)
    if kind is PlanKind.QUEUE:
        starts = []
        queues = plan.queues
        if queues is not None:
            for i in np.flatnonzero(queues.start_now & ~queues.running).tolist():
                placed = queues.assignment(i)
                assert placed is not None
                starts.append(
                    Start(
                        i, placed.type_index, len(placed.devices), _count_nodes(placed.nodes, nodes)
                    )
                )
        return replace(base, starts=tuple(starts))
    if kind is PlanKind.GROUPS:
        groups = tuple(
            Grouped(
                tuple(g.members),
                tuple(float(x) for x in g.slowdown),
                g.type_index,
                g.devices,
                tuple(sorted((nodes[name], d) for name, d in g.node_devices if name in nodes)),
                *_host_shares(plan, g.members),
            )
            for g in (plan.groups.groups if plan.groups is not None else ())
            if g.type_index >= 0 and g.devices > 0 and g.members
        )
        return _with_groups(base, groups, problem.jobs.num_jobs)
    configured: list[Configured | None] = []
    for choice in plan.configurations.choices if plan.configurations is not None else ():
        if choice is None or not choice.placed or choice.devices <= 0:
            configured.append(None)
            continue
        placement = tuple((nodes[name], d) for name, d in choice.node_devices if name in nodes)
        configured.append(Configured(choice.type_index, choice.devices, placement))
    return replace(base, configurations=tuple(configured))


def _host_shares(plan: Plan, members: Sequence[int]) -> tuple[tuple[float, ...],
                                                               tuple[float, ...]]:
    """Each member's cores and memory in an in-process plan; empty when it allocates none."""
    section = plan.groups
    cpus = section.cpus if section is not None else None
    memory = section.memory_gib if section is not None else None
    if cpus is None or memory is None or np.isnan(cpus[list(members)]).any():
        return (), ()
    return (tuple(float(cpus[i]) for i in members), tuple(float(memory[i]) for i in members))


def _with_groups(base: Decision, groups: tuple[Grouped, ...], k: int) -> Decision:
    """`base` with the groups, and the two-job groups as the pairs sent back (Lucid reads
    them as `history.jobs[].colocated_with`)."""
    pairs = np.full(k, -1, np.int64)
    for g in groups:
        if len(g.members) == 2:
            a, b = g.members
            pairs[a], pairs[b] = b, a
    partner = tuple(int(x) for x in pairs) if (pairs >= 0).any() else ()
    return replace(base, groups=groups, carry=replace(base.carry, partner=partner))


def _own_rounds(
    plan: Plan, problem: Problem, nodes: Mapping[str, int]
) -> tuple[tuple[Planned, ...], ...] | None:
    """The rounds a plan carries (the simulator never asks for `schedule_rounds`, so these are
    the policy's own); None = none."""
    planned = tuple(
        tuple(
            Planned(
                g.job,
                g.type_index,
                g.devices,
                tuple(nodes[name] for name in g.nodes if name in nodes),
                g.colocated_with,
            )
            for g in scheduled.grants
        )
        for scheduled in plan.shares.rounds
    )
    return planned or None


def _window_from_matrix(
    schedule: NDArray[np.bool_], problem: Problem
) -> tuple[tuple[Planned, ...], ...]:
    """A (T, k) 0/1 schedule as grants: each job on its gang of the type with most devices."""
    type_index = int(np.argmax(problem.cluster.count))
    scale = problem.jobs.scale_factor
    return tuple(
        tuple(Planned(int(i), type_index, int(scale[i])) for i in np.flatnonzero(row))
        for row in np.asarray(schedule, bool)
    )


def _count_nodes(names: Sequence[str], index: Mapping[str, int]) -> NodeDevices:
    """Devices per node from one node name per device."""
    counts: dict[int, int] = {}
    for name in names:
        if name in index:
            counts[index[name]] = counts.get(index[name], 0) + 1
    return tuple(sorted(counts.items()))


def _carry_from_plan(plan: Plan, k: int) -> Carry:
    shares, window = plan.shares, plan.window
    packed = None
    if window is not None:
        state = window.reference_state
        packed = np.column_stack(
            [
                state.estimate_s,
                state.estimate_time_s,
                state.earlier_average_s,
                state.earlier_weight_s,
                state.job_count.astype(np.float64),
            ]
        )
    partner: tuple[int, ...] = ()
    if shares.colocated:
        pairs = np.full(k, -1, np.int64)
        for a, b, _, share in shares.colocated:
            if share > 0:
                pairs[a], pairs[b] = b, a
        partner = tuple(int(x) for x in pairs)
    leases = (
        plan.auction.leases
        if plan.auction is not None
        else plan.usage.leases
        if plan.usage is not None
        else None
    )
    entitled = None
    if plan.usage is not None:
        rates = plan.usage.entitled_devices
        entitled = tuple(
            (usage.tenant, float(rate))
            for usage, rate in zip(plan.usage.tenants[: len(rates)], rates, strict=True)
        )
    return Carry(
        isolated_time_s=_opt(shares.cumulative_isolated_time_s),
        isolated_throughput=_opt(shares.isolated_throughput),
        remaining_steps=_opt(shares.remaining_steps),
        reference_finish_s=_opt(window.reference_finish_time_s) if window is not None else None,
        reference_state=packed,
        partner=partner,
        stride_pass=_opt(plan.stride.stride_pass) if plan.stride is not None else None,
        **_lease_arrays(
            None
            if leases is None
            else [None if x is None else (x.expires_s, x.time_share) for x in leases],
            k,
        ),
        entitled_devices=entitled,
    )


def _lease_arrays(
    leases: Sequence[tuple[float, float] | None] | None, k: int
) -> dict[str, FloatArray | None]:
    """Carry's lease columns from (end, time share) per job (None = no lease)."""
    if leases is None:
        return {"lease_expires_s": None, "lease_time_share": None}
    ends, shares = np.zeros(k), np.ones(k)
    for i, lease in enumerate(leases):
        if lease is not None:
            ends[i], shares[i] = lease
    return {"lease_expires_s": ends, "lease_time_share": shares}


def _wire_host_shares(
    allocations: Mapping[int, service_pb.JobAllocation], members: Sequence[int]
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Each member's cores and memory in a response; empty when it allocates none."""
    got = [allocations.get(i) for i in members]
    if not all(a is not None and a.HasField("cpus") and a.HasField("memory_gib") for a in got):
        return (), ()
    return (tuple(float(a.cpus) for a in got if a is not None),
            tuple(float(a.memory_gib) for a in got if a is not None))


def _opt(values: FloatArray | None) -> FloatArray | None:
    return None if values is None else np.asarray(values, np.float64)


def decision_from_response(
    response: service_pb.SolveResponse, problem: Problem, kind: PlanKind, lease_s: float = 0.0
) -> Decision:
    """The decision of a response from `apportion serve` for the snapshot of `problem`
    (`lease_s`: the policy's lease length, s, for Astraea's entitlement; 0 = none)."""
    stats = response.stats
    base = Decision(
        termination=_TERMINATION_FROM_WIRE.get(stats.termination, Termination.ERROR),
        objective=stats.objective if stats.HasField("objective") else None,
        detail=stats.detail,
        solve_time_s=stats.build_time_s + stats.solve_time_s,
    )
    names = problem.cluster.type_names
    type_index = {name: j for j, name in enumerate(names)}
    job_index = {job_id: i for i, job_id in enumerate(problem.jobs.ids)}
    node_index = {name: k for k, name in enumerate(problem.cluster.node_names)}
    k, n = problem.jobs.num_jobs, len(names)
    entries = [(job_index[e.job_id], e) for e in response.plan.jobs if e.job_id in job_index]
    base = replace(
        base, carry=_carry_from_response(entries, response, job_index, k, problem, lease_s)
    )
    if not base.has_plan:
        return base
    planned = tuple(
        tuple(
            Planned(
                job_index[g.job_id],
                type_index[g.accelerator_type],
                g.devices,
                tuple(node_index[name] for name in g.nodes if name in node_index),
                job_index.get(g.colocated_with, -1),
            )
            for g in round_msg.grants
        )
        for round_msg in response.plan.rounds
    )
    if kind in (PlanKind.TIME_SHARE, PlanKind.MARKET):
        shares = np.zeros((k, n))
        for i, entry in entries:
            for name, value in entry.time_share.items():
                shares[i, type_index[name]] = value
        colocated = tuple(
            (job_index[c.job_a], job_index[c.job_b], type_index[c.accelerator_type], c.time_share)
            for c in response.plan.colocated
        )
        return replace(base, time_share=shares, colocated=colocated, planned=planned or None)
    if kind is PlanKind.WINDOW:
        return replace(base, planned=planned or None)
    if kind is PlanKind.QUEUE:
        starts = []
        for i, entry in entries:
            queue = entry.queue
            if entry.HasField("queue") and queue.start_now and not queue.running:
                starts.append(
                    Start(
                        i,
                        type_index[queue.accelerator_type],
                        len(queue.devices),
                        _count_nodes(list(queue.nodes), node_index),
                    )
                )
        starts.sort(key=lambda s: s.job)
        return replace(base, starts=tuple(starts))
    if kind is PlanKind.GROUPS:
        allocations = dict(entries)
        groups = tuple(
            Grouped(
                tuple(job_index[x] for x in g.job_ids),
                tuple(g.slowdown),
                type_index[g.accelerator_type],
                g.devices,
                tuple(
                    sorted(
                        (node_index[name], d)
                        for name, d in g.node_devices.items()
                        if name in node_index
                    )
                ),
                *_wire_host_shares(allocations, [job_index[x] for x in g.job_ids]),
            )
            for g in response.plan.groups
            if g.accelerator_type in type_index and g.devices > 0 and g.job_ids
        )
        return _with_groups(base, groups, k)
    configured: list[Configured | None] = [None] * k
    for i, entry in entries:
        conf = entry.configuration
        if not entry.HasField("configuration") or not conf.placed or conf.devices <= 0:
            continue
        placement = tuple(
            sorted(
                (node_index[name], d) for name, d in conf.node_devices.items() if name in node_index
            )
        )
        configured[i] = Configured(type_index[conf.accelerator_type], conf.devices, placement)
    return replace(base, configurations=tuple(configured))


def _has(message: Any, name: str) -> bool:
    """Whether an optional field of a message is set (the name is not a literal here)."""
    return bool(message.HasField(name))


def _carry_from_response(
    entries: list[tuple[int, service_pb.JobAllocation]],
    response: service_pb.SolveResponse,
    job_index: Mapping[str, int],
    k: int,
    problem: Problem,
    lease_s: float,
) -> Carry:
    """The state to send back; Astraea's entitled devices are the growth of the entitled
    device-time the plan projects over its lease (`lease_s`) over the one sent."""
    fairness_usage = problem.fairness.tenant_usage if problem.fairness is not None else ()
    tenants = {name or job_id for name, job_id in zip(problem.jobs.tenant, problem.jobs.ids,
                                                       strict=True)}

    def column(name: str) -> FloatArray | None:
        given = [(i, entry) for i, entry in entries if _has(entry, name)]
        if not given:
            return None
        out = np.full(k, math.nan)
        for i, entry in given:
            out[i] = getattr(entry, name)
        return out

    state = None
    if any(entry.HasField("reference_estimate_s") for _, entry in entries):
        state = np.full((k, 5), math.nan)
        for i, entry in entries:
            if entry.HasField("reference_estimate_s"):
                state[i] = (
                    entry.reference_estimate_s,
                    entry.reference_estimate_time_s,
                    entry.reference_earlier_average_s,
                    entry.reference_earlier_weight_s,
                    float(entry.reference_job_count),
                )
    partner: tuple[int, ...] = ()
    if response.plan.colocated:
        pairs = np.full(k, -1, np.int64)
        for c in response.plan.colocated:
            if c.time_share > 0:
                a, b = job_index[c.job_a], job_index[c.job_b]
                pairs[a], pairs[b] = b, a
        partner = tuple(int(x) for x in pairs)
    leases = None
    if any(entry.HasField("lease") for _, entry in entries):
        found: list[tuple[float, float] | None] = [None] * k
        for i, entry in entries:
            if entry.HasField("lease"):
                found[i] = (entry.lease.expires_s, entry.lease.time_share)
        leases = found
    entitled = None
    if response.plan.tenant_usage and lease_s > 0:
        sent = {u.tenant: u.entitled_gpu_time_s for u in fairness_usage}
        entitled = tuple(
            (u.tenant, (u.entitled_gpu_time_s - sent.get(u.tenant, 0.0)) / lease_s)
            for u in response.plan.tenant_usage
            if u.tenant in tenants
        )
    return Carry(
        isolated_time_s=column("cumulative_isolated_time_s"),
        isolated_throughput=column("isolated_throughput"),
        remaining_steps=column("remaining_steps"),
        reference_finish_s=column("reference_finish_time_s"),
        reference_state=state,
        partner=partner,
        stride_pass=column("stride_pass"),
        **_lease_arrays(leases, k),
        entitled_devices=entitled,
    )
