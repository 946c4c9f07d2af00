"""The solver model back to the wire: `Problem`, `PolicyRequest` and `SolveOptions` into the
`apportion.v1.SolveRequest` that `apportion.server.convert.request_to_model` turns into the
same model again (tested field by field). The simulator builds its snapshots as models; this
is how it sends them to a running `apportion serve` (`--server`) and how it validates the
first snapshot of a run with the service's own rules.

Only what the model holds is written: defaults the conversion applies (weight 1, cost 1 $/h,
scale factor 1, restart penalty 30 s, ...) come back as the same values. Two parameters have
no wire field and must keep their defaults to be sent: `SiaParameters.coefficient_clip`
and nothing else (checked).
"""

from __future__ import annotations

import dataclasses
import math
from enum import StrEnum

import numpy as np

from apportion.server.policy_inputs import COMPAT_OF_WIRE
from apportion.simulator.errors import SimulationInputError
from apportion.solver.model import PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import ShockwaveParameters, SiaParameters
from apportion.solver.registry import lookup, resolve_parameters
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import policy_pb2 as policy_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

_COMPAT = {compat: wire for wire, compat in COMPAT_OF_WIRE.items()}
"""The model's `Compat` -> `Policy.compat` (the inverse of the service's reading)."""


def request_message(
    problem: Problem, policy: PolicyRequest, options: SolveOptions
) -> service_pb.SolveRequest:
    """The request that converts back to (`problem`, `policy`, `options`)."""
    request = service_pb.SolveRequest()
    request.snapshot.CopyFrom(snapshot_message(problem))
    request.policy.CopyFrom(policy_message(policy))
    request.options.CopyFrom(options_message(options))
    return request


def options_message(options: SolveOptions) -> policy_pb.SolveOptions:
    msg = policy_pb.SolveOptions(
        time_limit_s=options.time_limit_s,
        relative_gap=options.relative_gap,
        threads=options.threads,
        seed=options.seed,
        schedule_rounds=options.schedule_rounds,
    )
    msg.solver = (
        policy_pb.SolverPreference.Value(f"SOLVER_PREFERENCE_{options.solver.upper()}")
        if options.solver != "auto"
        else policy_pb.SOLVER_PREFERENCE_UNSPECIFIED
    )
    return msg


def policy_message(policy: PolicyRequest) -> policy_pb.Policy:
    """The policy by the name the client used, with its parameters when they differ from what
    that name implies (its defaults and an alias's forced values): fields matched by name,
    enums by value; Shockwave's fill and Sia's node caps have their own wire form; optional
    fields are sent only when they differ."""
    spec = lookup(policy.name)
    name = policy.requested_name or policy.name
    msg = policy_pb.Policy(name=name, compat=_COMPAT[policy.compat])
    params = policy.parameters
    implied = resolve_parameters(spec, name, None)
    if not spec.parameters_field or params == implied:
        return msg
    target = getattr(msg, spec.parameters_field)
    target.SetInParent()
    if isinstance(params, ShockwaveParameters):
        target.disable_fill = not params.work_conserving_fill
    if isinstance(params, SiaParameters):
        if params.coefficient_clip != SiaParameters().coefficient_clip:
            raise SimulationInputError("sia's coefficient_clip has no wire field: keep 3000")
        if params.max_nodes_per_type == ():
            target.no_node_caps = True
        elif params.max_nodes_per_type:
            for node_type, cap in params.max_nodes_per_type:
                target.max_nodes_per_type[node_type] = cap
    fields = target.DESCRIPTOR.fields_by_name
    for item in dataclasses.fields(params):  # type: ignore[arg-type]
        value = getattr(params, item.name)
        desc = fields.get(item.name)
        if desc is None or item.name == "max_nodes_per_type":
            continue
        if desc.has_presence and value == getattr(implied, item.name):
            continue  # an optional field left unset: the service applies the same value
        if isinstance(value, StrEnum):
            wanted = f"_{value.value.upper()}"
            matches = [v.number for v in desc.enum_type.values if v.name.endswith(wanted)]
            setattr(target, item.name, matches[0])
        elif isinstance(value, tuple | list):  # repeated field (a map as (key, value) pairs)
            repeated = getattr(target, item.name)
            if desc.message_type is not None and desc.message_type.GetOptions().map_entry:
                repeated.update(dict(value))
            else:
                repeated.extend(value)
        else:
            setattr(target, item.name, value)
    return msg


def snapshot_message(problem: Problem) -> snapshot_pb.Snapshot:
    """The snapshot that converts back to `problem`."""
    cluster, jobs, hist = problem.cluster, problem.jobs, problem.history
    names = cluster.type_names
    msg = snapshot_pb.Snapshot(time_s=problem.time_s, round_duration_s=problem.round_duration_s)
    for j, name in enumerate(names):
        msg.cluster.accelerator_types.add(
            name=name, count=int(cluster.count[j]), cost_per_hour=float(cluster.cost_per_hour[j])
        )
    sharing = problem.sharing
    host = sharing is not None and sharing.node_cpus.size == len(cluster.node_names)
    for k, node in enumerate(cluster.node_names):
        node_msg = msg.cluster.nodes.add(
            name=node,
            accelerator_type=names[int(cluster.node_type[k])],
            devices=int(cluster.node_devices[k]),
        )
        if host and sharing is not None:
            node_msg.cpus = float(sharing.node_cpus[k])
            node_msg.memory_gib = float(sharing.node_memory_gib[k])
    for tenant in problem.tenants:
        msg.tenants.add(
            name=tenant.name,
            weight=tenant.weight,
            sharing=snapshot_pb.TenantSharing.Value(f"TENANT_SHARING_{tenant.sharing.upper()}"),
        )
    m = jobs.num_jobs
    for i in range(m):
        _job(msg.jobs.add(), problem, i)
    _colocations(msg, problem)
    ids = problem.jobs.ids
    for group in problem.sharing.interference if problem.sharing is not None else ():
        msg.interference.add(
            job_ids=[ids[i] for i in group.jobs], slowdown=[float(x) for x in group.slowdown]
        )
    for usage in problem.fairness.tenant_usage if problem.fairness is not None else ():
        msg.tenant_usage.add(
            tenant=usage.tenant,
            gpu_time_s=usage.gpu_time_s,
            entitled_gpu_time_s=usage.entitled_gpu_time_s,
        )
    msg.history.elapsed_since_reset_s = hist.elapsed_since_reset_s
    for i in range(m):
        entry = _history_entry(problem, i)
        if entry is not None:
            msg.history.jobs.append(entry)
    return msg


def _optional(array: np.ndarray, i: int, default: float | int) -> float | int:
    return array[i].item() if array.size else default


def _job(out: snapshot_pb.Job, problem: Problem, i: int) -> None:
    jobs, names = problem.jobs, problem.cluster.type_names
    out.id = jobs.ids[i]
    out.scale_factor = int(jobs.scale_factor[i])
    out.priority_weight = float(jobs.priority_weight[i])
    out.tenant = jobs.tenant[i]
    out.arrival_time_s = float(jobs.arrival_time_s[i])
    for j, name in enumerate(names):
        if jobs.throughput[i, j] > 0:
            out.throughput[name] = float(jobs.throughput[i, j])
    out.progress.steps_done = float(jobs.steps_done[i])
    out.progress.total_steps = float(jobs.total_steps[i])
    out.progress.epochs_done = int(_optional(jobs.epochs_done, i, 0))
    out.progress.total_epochs = int(_optional(jobs.total_epochs, i, 0))
    if math.isfinite(jobs.deadline_s[i]):
        out.deadline_s = float(jobs.deadline_s[i])
    if jobs.epoch_duration_s:
        out.epoch_profile.epoch_duration_s.extend(jobs.epoch_duration_s[i].tolist())
        out.epoch_profile.batch_size.extend(jobs.epoch_batch_size[i].tolist())
    out.epoch_profile.measured_run_time_s = float(_optional(jobs.measured_run_time_s, i, 0.0))
    out.epoch_profile.measured_epochs = float(_optional(jobs.measured_epochs, i, 0.0))
    if jobs.job_type:
        out.job_type = jobs.job_type[i]
    if jobs.given_goodput:
        for g in jobs.given_goodput[i]:
            out.configurations.add(
                accelerator_type=names[g.type_index],
                nodes=g.nodes,
                devices=g.devices,
                goodput=g.goodput,
            )
    if jobs.pollux and jobs.pollux[i] is not None:
        raise SimulationInputError("Pollux job models cannot be sent by the simulator yet")
    if jobs.min_devices.size:
        out.elasticity.min_devices = int(jobs.min_devices[i])
        out.elasticity.max_devices = int(jobs.max_devices[i])
        for j, name in enumerate(names):
            if jobs.scale_unit.size and jobs.scale_unit[i, j] != 1:
                out.elasticity.scale_unit[name] = int(jobs.scale_unit[i, j])
    if jobs.restart_penalty_s.size:
        out.restart_penalty_s = float(jobs.restart_penalty_s[i])
    grids = problem.sharing.resource_grid if problem.sharing is not None else ()
    grid = grids[i] if len(grids) == jobs.num_jobs else None
    if grid is not None:
        out.resource_profile.cpus_per_gpu.extend(grid.cpus_per_gpu.tolist())
        out.resource_profile.memory_gib_per_gpu.extend(grid.memory_gib_per_gpu.tolist())
        out.resource_profile.throughput.extend(grid.throughput.reshape(-1).tolist())
    stages = problem.sharing.stage_s if problem.sharing is not None else np.zeros((0, 4))
    if stages.shape[0] == jobs.num_jobs and np.isfinite(stages[i]).all():
        storage, cpu, gpu, network = (float(x) for x in stages[i])
        out.stage_times.storage_s, out.stage_times.cpu_s = storage, cpu
        out.stage_times.gpu_s, out.stage_times.network_s = gpu, network


def _colocations(msg: snapshot_pb.Snapshot, problem: Problem) -> None:
    pairs = problem.colocations
    if pairs is None:
        return
    names, ids = problem.cluster.type_names, problem.jobs.ids
    for p in range(pairs.job_a.size):
        entry = msg.colocations.add(job_a=ids[int(pairs.job_a[p])], job_b=ids[int(pairs.job_b[p])])
        _rates(entry.throughput_a, pairs.throughput_a[p], names)
        _rates(entry.throughput_b, pairs.throughput_b[p], names)
    for q, (a, b) in enumerate(zip(pairs.type_a, pairs.type_b, strict=True)):
        tentry = msg.type_colocations.add(type_a=a, type_b=b)
        _rates(tentry.throughput_a, pairs.type_throughput_a[q], names)
        _rates(tentry.throughput_b, pairs.type_throughput_b[q], names)


def _rates(out: object, row: np.ndarray, names: tuple[str, ...]) -> None:
    for j, name in enumerate(names):
        if row[j] != 0:
            out[name] = float(row[j])  # type: ignore[index]


def _history_entry(problem: Problem, i: int) -> snapshot_pb.JobHistory | None:
    """The job's history entry; None when every field has its default."""
    hist, jobs, names = problem.history, problem.jobs, problem.cluster.type_names
    entry = snapshot_pb.JobHistory(job_id=jobs.ids[i])
    for j, name in enumerate(names):
        if hist.received_time_s[i, j] != 0:
            entry.received_time_s[name] = float(hist.received_time_s[i, j])
    entry.cumulative_isolated_time_s = float(hist.cumulative_isolated_time_s[i])
    entry.restarts = int(hist.restarts[i])
    if hist.current_type.size and hist.current_type[i] >= 0:
        entry.current.accelerator_type = names[int(hist.current_type[i])]
        entry.current.devices = int(hist.current_devices[i])
        entry.current.nodes.extend(problem.cluster.node_names[k] for k in hist.current_nodes[i])
        entry.current.busy_until_s = float(_optional(hist.busy_until_s, i, 0.0))
    iso = _optional(hist.previous_isolated_throughput, i, math.nan)
    remaining = _optional(hist.previous_remaining_steps, i, math.nan)
    if math.isfinite(iso) and math.isfinite(remaining):
        entry.previous_isolated_throughput = float(iso)
        entry.previous_remaining_steps = float(remaining)
    entry.reference_finish_time_s = float(_optional(hist.reference_finish_time_s, i, 0.0))
    state = hist.reference_state
    if state is not None and math.isfinite(state.estimate_s[i]):
        entry.reference_estimate_s = float(state.estimate_s[i])
        entry.reference_estimate_time_s = float(state.estimate_time_s[i])
        entry.reference_earlier_average_s = float(state.earlier_average_s[i])
        entry.reference_earlier_weight_s = float(state.earlier_weight_s[i])
        entry.reference_job_count = int(state.job_count[i])
    if hist.colocated_with.size and hist.colocated_with[i] >= 0:
        entry.colocated_with = jobs.ids[int(hist.colocated_with[i])]
    fairness = problem.fairness
    if fairness is not None:
        if math.isfinite(fairness.stride_pass[i]):
            entry.stride_pass = float(fairness.stride_pass[i])
        if any(b is not None for b in fairness.bids):
            raise SimulationInputError("Themis bid tables cannot be sent by the simulator yet")
        if fairness.lease_expires_s[i] > 0:
            entry.lease_expires_s = float(fairness.lease_expires_s[i])
            entry.lease_time_share = float(fairness.lease_time_share[i])
        entry.gpu_time_s = float(fairness.gpu_time_s[i])
    if entry == snapshot_pb.JobHistory(job_id=jobs.ids[i]):
        return None
    return entry
