"""A `Plan` into the wire's `SolveResponse`: the statistics, every job's allocation, and the
sections of each plan kind (market spending and reference times, configurations, queues,
rounds)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from apportion.solver.model import PolicyRequest, Problem
from apportion.solver.result import JobStatus, Plan, Termination
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
    plan: Plan, problem: Problem, policy: PolicyRequest, wall_time_s: float, time_limit_s: float
) -> service_pb.SolveResponse:
    """The wire response for a plan."""
    cert = plan.certificate
    response = service_pb.SolveResponse()
    stats = response.stats
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
    has_plan = cert.termination in (
        Termination.OPTIMAL,
        Termination.OPTIMAL_INACCURATE,
        Termination.FEASIBLE,
        Termination.HEURISTIC,
    )
    if not has_plan:
        return response
    names = problem.cluster.type_names
    out = response.plan
    for j, name in enumerate(names):
        out.accelerator_prices[name] = float(plan.accelerator_prices[j])
    shares, queues = plan.shares, plan.queues
    for job_a, job_b, type_index, share in shares.colocated:
        out.colocated.add(job_a=problem.jobs.ids[job_a], job_b=problem.jobs.ids[job_b],
                          accelerator_type=names[type_index], time_share=share)
    statuses = plan.job_status or (JobStatus.ALLOCATED,) * problem.jobs.num_jobs
    reasons = plan.job_reason or ("",) * problem.jobs.num_jobs
    for i, job_id in enumerate(problem.jobs.ids):
        entry = out.jobs.add()
        entry.job_id = job_id
        entry.status = _JOB_STATUS[statuses[i]]
        entry.reason = reasons[i]
        row: Mapping[str, float] = {
            names[j]: float(plan.time_share[i, j])
            for j in range(len(names))
            if plan.time_share[i, j] > 0
        }
        entry.time_share.update(row)
        entry.effective_throughput = float(plan.effective_throughput[i])
        entry.normalized_throughput = float(plan.normalized_throughput[i])
        entry.objective_value = float(plan.objective_value[i])
        entry.dual = float(plan.job_dual[i])
        placed = queues.job_queue[i] if queues is not None else None
        if placed is not None:
            queue = entry.queue
            queue.accelerator_type = names[placed.type_index]
            queue.devices.extend(placed.devices)
            queue.nodes.extend(placed.nodes)
            queue.position = placed.position
            queue.start_time_s = placed.start_time_s
            queue.completion_time_s = placed.completion_time_s
            queue.start_now = placed.start_now
            queue.running = placed.running
        if shares.cumulative_isolated_time_s is not None:
            entry.cumulative_isolated_time_s = float(shares.cumulative_isolated_time_s[i])
        if shares.isolated_throughput is not None:
            entry.isolated_throughput = float(shares.isolated_throughput[i])
        if shares.remaining_steps is not None:
            entry.remaining_steps = float(shares.remaining_steps[i])
        if shares.slo_shortfall is not None and not math.isnan(shares.slo_shortfall[i]):
            entry.slo_shortfall = float(shares.slo_shortfall[i])
    fill_market_response(plan, problem, out)
    fill_sia_response(plan, problem, out)
    for scheduled in shares.rounds:
        round_msg = out.rounds.add(index=scheduled.index)
        for grant in scheduled.grants:
            round_msg.grants.add(
                job_id=problem.jobs.ids[grant.job],
                accelerator_type=names[grant.type_index],
                devices=grant.devices,
                nodes=list(grant.nodes),
                colocated_with=(
                    problem.jobs.ids[grant.colocated_with] if grant.colocated_with >= 0 else ""
                ),
                lease_extended=grant.lease_extended,
            )
    ids = problem.jobs.ids
    for device in queues.device_queues if queues is not None else ():
        dq = out.device_queues.add()
        dq.accelerator_type = names[device.type_index]
        dq.device = device.device
        dq.node = device.node
        dq.free_at_s = device.free_at_s
        dq.running_job_id = ids[device.running_job] if device.running_job >= 0 else ""
        dq.job_ids.extend(ids[i] for i in device.jobs)
        dq.position_duals.extend(device.position_duals)
    return response


def fill_market_response(plan: Plan, problem: Problem, out: service_pb.Plan) -> None:
    """Spending (market plans), reference finish times and the round schedule (window
    plans)."""
    entries = list(out.jobs)
    market, window = plan.market, plan.window
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


def fill_sia_response(plan: Plan, problem: Problem, out: service_pb.Plan) -> None:
    """`JobAllocation.configuration` for configuration policies (sia, pollux)."""
    if plan.configurations is None:
        return
    names = problem.cluster.type_names
    for entry, choice in zip(out.jobs, plan.configurations.choices, strict=False):
        if choice is None:
            continue
        conf = entry.configuration
        conf.accelerator_type = names[choice.type_index]
        conf.nodes = choice.nodes
        conf.devices = choice.devices
        conf.goodput = choice.goodput
        conf.normalized_goodput = choice.normalized_goodput
        conf.restart_factor = choice.restart_factor
        conf.unchanged = choice.unchanged
        for node, devices in choice.node_devices:
            conf.node_devices[node] = conf.node_devices[node] + devices
        conf.placed = choice.placed
        conf.placement_detail = choice.placement_detail
        conf.atomic_batch_size = choice.atomic_batch_size
        conf.accumulation_steps = choice.accumulation_steps
