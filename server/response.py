"""A `Plan` into the wire's `SolveResponse`: the statistics, every job's allocation, and the
sections of each plan kind (market spending and reference times, configurations, queues,
rounds)."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from apportion.server.choice_wire import configuration_fields
from apportion.server.elastic_inputs import (
    elastic_job_fields,
    fill_elastic_response,
    fill_partition_stats,
)
from apportion.server.fairness_inputs import fairness_job_doubles, fill_fairness_response
from apportion.server.group_wire import GroupWire
from apportion.server.lease_wire import lease_fields
from apportion.server.packed_fields import encode_varints, write_packed
from apportion.server.plan_wire import job_allocations
from apportion.server.queue_wire import device_queue_records, job_queue_fields
from apportion.server.round_wire import round_records
from apportion.server.sharing_inputs import fill_sharing_response
from apportion.server.topology_inputs import fill_placement_response
from apportion.server.wire_fields import Fields
from apportion.solver.model import FloatArray, PolicyRequest, Problem
from apportion.solver.result import Certificate, JobStatus, Plan, Termination
from apportion.v1 import allocation_service_pb2 as service_pb

_TERMINATION = {
    Termination.OPTIMAL: service_pb.TERMINATION_REASON_OPTIMAL,
    Termination.OPTIMAL_INACCURATE: service_pb.TERMINATION_REASON_OPTIMAL_INACCURATE,
    Termination.FEASIBLE: service_pb.TERMINATION_REASON_FEASIBLE,
    Termination.INFEASIBLE: service_pb.TERMINATION_REASON_INFEASIBLE,
    Termination.UNBOUNDED: service_pb.TERMINATION_REASON_UNBOUNDED,
    Termination.HEURISTIC: service_pb.TERMINATION_REASON_HEURISTIC,
    Termination.NO_SOLUTION: service_pb.TERMINATION_REASON_NO_SOLUTION,
    Termination.ERROR: service_pb.TERMINATION_REASON_ERROR,
}
_JOB_STATUS = {
    JobStatus.ALLOCATED: service_pb.JOB_STATUS_ALLOCATED,
    JobStatus.UNSERVABLE: service_pb.JOB_STATUS_UNSERVABLE,
    JobStatus.FINISHED: service_pb.JOB_STATUS_FINISHED,
    JobStatus.DEFERRED: service_pb.JOB_STATUS_DEFERRED,
}


def plan_to_response(
    plan: Plan,
    problem: Problem,
    policy: PolicyRequest,
    wall_time_s: float,
    time_limit_s: float,
    columnar: bool = False,
) -> service_pb.SolveResponse:
    """The wire response for a plan: the statistics, and when the termination carries a plan,
    every job's allocation (as `JobAllocation`s, or with `columnar` as `Plan.columns`) and the
    sections of the plan's kind."""
    return plan_response(plan, problem, policy, wall_time_s, time_limit_s, columnar).message()


class WireResponse:
    """A `SolveResponse` as `plan_response` builds it: the message, and `Plan` records kept
    serialized beside it: the `JobAllocation`s of a plan whose allocations hold only what
    `job_allocation_bytes` writes, a time-share plan's rounds (without the placement stage), a
    queue plan's device queues, a plan's co-location groups (`serialize` writes them without
    ever building their messages)."""

    def __init__(self, message: service_pb.SolveResponse, jobs: bytes = b"",
                 device_queues: bytes = b"", groups: bytes = b"", rounds: bytes = b"") -> None:
        self._message = message
        self._kept = [(number, records) for number, records in (
            (service_pb.Plan.JOBS_FIELD_NUMBER, jobs),
            (service_pb.Plan.ROUNDS_FIELD_NUMBER, rounds),
            (service_pb.Plan.DEVICE_QUEUES_FIELD_NUMBER, device_queues),
            (service_pb.Plan.GROUPS_FIELD_NUMBER, groups)) if records]
        """Serialized `Plan` records not yet in the message, by increasing field number."""

    @property
    def stats(self) -> service_pb.SolveStats:
        return self._message.stats

    def message(self) -> service_pb.SolveResponse:
        """The whole response (the kept records parsed into it, once)."""
        if self._kept:
            self._message.plan.MergeFromString(b"".join(records for _, records in self._kept))
            self._kept = []
        return self._message

    def serialize(self) -> bytes:
        """The serialized response, as `message().SerializeToString()` would write it (the
        fields in number order; map entries in any order, as the runtime's)."""
        if not self._kept or self._message.plan.jobs:  # copying such a message costs more
            return self.message().SerializeToString()
        rest = service_pb.SolveResponse()
        rest.CopyFrom(self._message)
        rest.ClearField("plan")  # written first (field 1): its records, then the rest
        pieces = []
        below = 0
        for number, records in [*self._kept, (_NO_FIELD, b"")]:
            pieces.append(_plan_fields(self._message.plan, below, number))
            pieces.append(records)
            below = number
        plan = b"".join(pieces)
        return b"".join([_PLAN_TAG, encode_varints(np.array([len(plan)])), plan,
                         rest.SerializeToString()])


def _plan_fields(plan: service_pb.Plan, above: int, below: int) -> bytes:
    """The plan's fields numbered in (above, below], serialized (a repeated field also kept
    serialized: the message's entries first)."""
    inside = [field.name for field, _ in plan.ListFields() if above < field.number <= below]
    if not inside:
        return b""
    if len(inside) == len(plan.ListFields()):
        return plan.SerializeToString()
    part = service_pb.Plan()
    part.CopyFrom(plan)
    for field, _ in plan.ListFields():
        if field.name not in inside:
            part.ClearField(field.name)  # type: ignore[arg-type]  # a name of the plan's
    return part.SerializeToString()


_NO_FIELD = 1 << 29
"""Above every field number."""
_PLAN_TAG = bytes([service_pb.SolveResponse.PLAN_FIELD_NUMBER << 3 | 2])


def plan_response(
    plan: Plan,
    problem: Problem,
    policy: PolicyRequest,
    wall_time_s: float,
    time_limit_s: float,
    columnar: bool = False,
) -> WireResponse:
    """`plan_to_response`'s response, with the allocations of a core-only plan (no section
    that writes into `JobAllocation`s) left serialized."""
    response = service_pb.SolveResponse()
    fill_stats(response.stats, plan.certificate, policy, wall_time_s, time_limit_s)
    groups = GroupWire(plan.groups) if plan.groups is not None else None
    fill_market_stats(plan, response.stats)
    fill_partition_stats(plan, response.stats)
    if plan.certificate.termination not in _WITH_PLAN:
        return WireResponse(response)
    out = response.plan
    if columnar:
        fill_columns(plan, problem, out)
    jobs = b""
    if not columnar or any(getattr(plan, section) is not None for section in _ROW_SECTIONS):
        fill_prices(plan, problem, out)
        jobs = job_allocation_bytes(plan, problem, groups)
        if not _core_only(plan):
            if jobs:
                out.MergeFromString(jobs)
            jobs = b""
    rounds = fill_share_response(plan, problem, out)
    device_queues = device_queue_bytes(plan, problem)
    fill_market_response(plan, problem, out)
    fill_elastic_response(plan, problem, response)
    fill_fairness_response(plan, problem, out)
    fill_placement_response(plan, problem, out)  # after the rounds: it adds their devices
    fill_sharing_response(plan, response)
    group_records = (b"" if groups is None
                     else groups.records(problem.jobs.ids, problem.cluster.type_names))
    return WireResponse(response, jobs, device_queues, group_records, rounds)


_JOB_SECTIONS = ("market", "window", "auction", "placement", "admission")
"""Plan sections that write into the `JobAllocation`s (the queue places, the configurations,
the elastic section, the stride passes, the device-time, the leases and the groups' fields
are written with the allocations' records, `job_allocation_bytes`)."""


def _core_only(plan: Plan) -> bool:
    """The plan's `JobAllocation`s hold only what `job_allocation_bytes` writes."""
    return all(getattr(plan, name) is None for name in _JOB_SECTIONS)


_ROW_SECTIONS = ("auction", "usage", "stride", "admission", "placement")
"""Plan sections written into the `JobAllocation`s only (a columnar plan keeps them too)."""

_WITH_PLAN = (
    Termination.OPTIMAL,
    Termination.OPTIMAL_INACCURATE,
    Termination.FEASIBLE,
    Termination.HEURISTIC,
)


def fill_stats(
    stats: service_pb.SolveStats,
    cert: Certificate,
    policy: PolicyRequest,
    wall_time_s: float,
    time_limit_s: float,
) -> None:
    """`SolveStats` from the certificate (times in s)."""
    stats.termination = _TERMINATION[cert.termination]
    stats.detail = cert.detail
    stats.maximize = cert.maximize
    if cert.objective is not None:
        stats.objective = cert.objective
    if cert.bound is not None:
        stats.best_bound = cert.bound
    gap = cert.gap
    if gap is not None:
        stats.relative_gap = gap
    stats.policy = policy.name
    stats.formulation = cert.formulation
    stats.solver = cert.solver
    stats.solver_version = cert.solver_version
    stats.build_time_s = cert.build_time_s
    stats.solve_time_s = cert.solve_time_s
    stats.wall_time_s = wall_time_s
    stats.model_size.variables = cert.model_size.variables
    stats.model_size.constraints = cert.model_size.constraints
    stats.model_size.nonzeros = cert.model_size.nonzeros
    stats.model_size.integer_variables = cert.model_size.integer_variables
    stats.max_constraint_violation = cert.max_violation
    stats.time_limit_s = time_limit_s


def fill_market_stats(plan: Plan, stats: service_pb.SolveStats) -> None:
    """The market's objective and bound in steps/s (`SolveStats.throughput_objective`)."""
    market = plan.market
    if market is None:
        return
    if market.throughput_objective is not None:
        stats.throughput_objective = market.throughput_objective
    if market.throughput_bound is not None:
        stats.throughput_best_bound = market.throughput_bound


def fill_prices(plan: Plan, problem: Problem, out: service_pb.Plan) -> None:
    """The shadow prices of the capacity rows, by type name."""
    for j, name in enumerate(problem.cluster.type_names):
        out.accelerator_prices[name] = float(plan.accelerator_prices[j])


def job_allocation_bytes(plan: Plan, problem: Problem, groups: GroupWire | None = None
                         ) -> bytes:
    """Every job's core allocation as serialized `Plan.jobs` records: status, reason, time
    shares (positive cells only), throughputs, objective term and dual, the queue place of a
    queue plan, the finish-time-fairness and SLO state (NaN slo_shortfall = the job has no
    SLO), the stride pass, device-time and lease of a fairness plan, and in a plan of
    co-location groups (`groups`, gathered from `plan.groups`) each job's group fields."""
    m = problem.jobs.num_jobs
    state = [(service_pb.JobAllocation.DESCRIPTOR.fields_by_name[name].number, values)
             for name, values in [*_share_state(plan), *fairness_job_doubles(plan)]]
    if groups is None and plan.groups is not None:
        groups = GroupWire(plan.groups)
    names = problem.cluster.type_names
    places = job_queue_fields(plan.queues, names) if plan.queues is not None else None
    leases = plan.auction.leases if plan.auction else plan.usage.leases if plan.usage else ()
    # the fields above the share state, in number order: configuration (30), the group's
    # (70-73), lease (80), elastic (90)
    tails = [
        configuration_fields(plan.configurations.choices, m, names)
        if plan.configurations is not None else None,
        groups.member_fields(m) if groups is not None else None,
        lease_fields(leases, m, names) if any(lease is not None for lease in leases) else None,
        elastic_job_fields(plan, m),
    ]
    tail = Fields(m)
    for part in tails:
        if part is not None:
            tail.then(part)
    return job_allocations(
        problem.jobs.ids, _statuses(plan, m), plan.job_reason or ("",) * m, plan.time_share,
        names,
        (plan.effective_throughput, plan.normalized_throughput, plan.objective_value,
         plan.job_dual), state, places, tail,
    )


def _statuses(plan: Plan, m: int) -> NDArray[np.int32]:
    """Every job's `JobStatus` value."""
    if plan.job_status:
        return np.fromiter(map(_JOB_STATUS.__getitem__, plan.job_status), np.int32, m)
    return np.full(m, _JOB_STATUS[JobStatus.ALLOCATED], np.int32)


def _share_state(plan: Plan) -> list[tuple[str, FloatArray]]:
    """(field name, per-job values) of the finish-time-fairness and SLO state a plan has."""
    shares = plan.shares
    state = [
        ("cumulative_isolated_time_s", shares.cumulative_isolated_time_s),
        ("isolated_throughput", shares.isolated_throughput),
        ("remaining_steps", shares.remaining_steps),
        ("slo_shortfall", shares.slo_shortfall),
    ]
    return [(name, values) for name, values in state if values is not None]


def fill_columns(plan: Plan, problem: Problem, out: service_pb.Plan) -> None:
    """Prices and every job's allocation as `PlanColumns` (sparse shares, duals and reasons;
    per-job arrays in job order), with the share state."""
    fill_prices(plan, problem, out)
    columns = out.columns
    job_index, type_index = np.nonzero(plan.time_share > 0)
    status = _statuses(plan, problem.jobs.num_jobs)
    with_dual = np.flatnonzero(plan.job_dual)
    write_packed(columns, {
        "job_index": job_index, "type_index": type_index,
        "time_share": plan.time_share[job_index, type_index], "status": status,
        "effective_throughput": plan.effective_throughput,
        "normalized_throughput": plan.normalized_throughput,
        "objective_value": plan.objective_value,
        "dual_job_index": with_dual, "dual": plan.job_dual[with_dual],
    })
    if any(plan.job_reason):
        for i, reason in enumerate(plan.job_reason):
            if reason:
                columns.reason_job_index.append(i)
                columns.reason.append(reason)
    write_packed(columns, dict(_share_state(plan)))


def fill_share_response(plan: Plan, problem: Problem, out: service_pb.Plan) -> bytes:
    """Time-share plans: pairs sharing devices and the round schedule; the rounds are
    returned as serialized records unless the placement stage adds its devices to them."""
    shares, names, ids = plan.shares, problem.cluster.type_names, problem.jobs.ids
    for job_a, job_b, type_index, share in shares.colocated:
        out.colocated.add(job_a=ids[job_a], job_b=ids[job_b],
                          accelerator_type=names[type_index], time_share=share)
    if plan.placement is None:
        return round_records(shares.rounds, ids, names)
    for scheduled in shares.rounds:
        round_msg = out.rounds.add(index=scheduled.index)
        for grant in scheduled.grants:
            round_msg.grants.add(
                job_id=ids[grant.job],
                accelerator_type=names[grant.type_index],
                devices=grant.devices,
                nodes=list(grant.nodes),
                colocated_with=ids[grant.colocated_with] if grant.colocated_with >= 0 else "",
                lease_extended=grant.lease_extended,
            )
    return b""


def device_queue_bytes(plan: Plan, problem: Problem) -> bytes:
    """Queue plans (allox): every device's queue as serialized `Plan.device_queues` records
    (b"" for other plans)."""
    if plan.queues is None:
        return b""
    return device_queue_records(plan.queues, problem.cluster.type_names, problem.jobs.ids)


def fill_market_response(plan: Plan, problem: Problem, out: service_pb.Plan) -> None:
    """Spending (market plans), reference finish times and the round schedule (window
    plans)."""
    market, window = plan.market, plan.window
    if market is None and window is None:
        return
    entries = list(out.jobs)
    for i, entry in enumerate(entries):
        if market is not None:
            entry.spending = float(market.spending[i])
        if window is None:
            continue
        entry.reference_finish_time_s = float(window.reference_finish_time_s[i])
        state = window.reference_state
        if not math.isnan(state.estimate_s[i]):
            entry.reference_estimate_s = float(state.estimate_s[i])
            entry.reference_estimate_time_s = float(state.estimate_time_s[i])
            entry.reference_earlier_average_s = float(state.earlier_average_s[i])
            entry.reference_earlier_weight_s = float(state.earlier_weight_s[i])
            entry.reference_job_count = int(state.job_count[i])
    if window is None:
        return
    counts = problem.cluster.count
    type_name = problem.cluster.type_names[int(np.argmax(counts))] if counts.size else ""
    for t in range(window.schedule.shape[0]):
        round_msg = out.rounds.add()
        round_msg.index = t
        for job in np.flatnonzero(window.schedule[t]).tolist():
            grant = round_msg.grants.add()
            grant.job_id = problem.jobs.ids[job]
            grant.accelerator_type = type_name
            grant.devices = int(problem.jobs.scale_factor[job])
