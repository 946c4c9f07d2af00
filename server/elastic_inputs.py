"""Conversion and validation for the elastic policies (Optimus B8, SLAQ B9, Lyra B7) and POP's
options (B10).

* `elastic_parameters` maps a `Policy.parameters` message (full name) to its converter.
* `elastic_problem` adds loss histories, speed models, per-node holdings and the inference
  cluster's loaned nodes to the model (`Problem.elastic`) for policies that read them
  (capabilities `reads_loss_history`, `reads_inference`), checking each with its field path.
* `partition_options` checks `options.partitions` against the policy and the job count.
* `fill_elastic_response` writes the elastic section, Lyra's reclaiming and POP's statistics.

Every problem is appended as `Violation(field_path, description)`, like the rest of
`apportion.server.convert`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from apportion.formulations.loss_curve import MIN_POINTS
from apportion.server.job_wire import JobFields
from apportion.server.wire_fields import Fields
from apportion.solver.elastic_model import ElasticInputs, LossHistory, SpeedModel
from apportion.solver.errors import Violation
from apportion.solver.model import PartitionMode, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import (
    ElasticMethod,
    LyraParameters,
    OptimusParameters,
    ReclaimMethod,
    SlaqParameters,
)
from apportion.solver.registry import lookup
from apportion.solver.result import Plan
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import policy_pb2 as policy_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

_LOSS_HISTORY = snapshot_pb.Job.LOSS_HISTORY_FIELD_NUMBER
_SPEED_MODEL = snapshot_pb.Job.SPEED_MODEL_FIELD_NUMBER
MAX_LOSS_POINTS = 100_000
"""Most points of one job's loss history."""
MAX_DEVICES_PARAMETER = 4096
"""Largest `max_devices` parameter."""
MAX_PARAMETER_SERVERS = 64
MAX_THETA = 1e9
"""Largest speed-model coefficient (s per unit; keeps every speed finite and positive)."""

_METHOD = {
    policy_pb.ELASTIC_METHOD_UNSPECIFIED: ElasticMethod.GREEDY,
    policy_pb.ELASTIC_METHOD_GREEDY: ElasticMethod.GREEDY,
    policy_pb.ELASTIC_METHOD_EXACT: ElasticMethod.EXACT,
}
_RECLAIM = {
    policy_pb.RECLAIM_METHOD_UNSPECIFIED: ReclaimMethod.GREEDY,
    policy_pb.RECLAIM_METHOD_GREEDY: ReclaimMethod.GREEDY,
    policy_pb.RECLAIM_METHOD_EXACT: ReclaimMethod.EXACT,
}
_PARTITION_MODE = {
    policy_pb.PARTITION_MODE_UNSPECIFIED: PartitionMode.RANDOM,
    policy_pb.PARTITION_MODE_RANDOM: PartitionMode.RANDOM,
    policy_pb.PARTITION_MODE_MODULO: PartitionMode.MODULO,
}


def _finite(x: float) -> bool:
    return math.isfinite(x)


def _method(msg: Any, path: str, violations: list[Violation]) -> ElasticMethod:
    if msg.method not in _METHOD:
        violations.append(Violation(f"{path}.method", f"unknown value {msg.method}"))
    return _METHOD.get(msg.method, ElasticMethod.GREEDY)


def _max_devices(msg: Any, path: str, violations: list[Violation]) -> int:
    if not msg.HasField("max_devices"):
        return 64
    if not 1 <= msg.max_devices <= MAX_DEVICES_PARAMETER:
        violations.append(Violation(f"{path}.max_devices",
                                    f"must be in [1, {MAX_DEVICES_PARAMETER}], got "
                                    f"{msg.max_devices}"))
        return 64
    return int(msg.max_devices)


def _optimus(msg: Any, violations: list[Violation]) -> object:
    p = "policy.optimus"
    fraction = msg.convergence_fraction if msg.HasField("convergence_fraction") else 0.01
    if not (_finite(fraction) and 0 < fraction < 1):
        violations.append(Violation(f"{p}.convergence_fraction",
                                    f"must be in (0, 1), got {fraction}"))
        fraction = 0.01
    return OptimusParameters(
        method=_method(msg, p, violations),
        convergence_fraction=float(fraction),
        max_devices=_max_devices(msg, p, violations),
        exact_gap=not msg.skip_exact,
    )


def _slaq(msg: Any, violations: list[Violation]) -> object:
    p = "policy.slaq"
    horizon = msg.horizon_s if msg.HasField("horizon_s") else 0.0
    if not (_finite(horizon) and horizon >= 0):
        violations.append(Violation(f"{p}.horizon_s", f"must be finite and >= 0, got {horizon}"))
        horizon = 0.0
    decay = msg.recency_decay if msg.HasField("recency_decay") else 0.9
    if not (_finite(decay) and 0 < decay <= 1):
        violations.append(Violation(f"{p}.recency_decay", f"must be in (0, 1], got {decay}"))
        decay = 0.9
    return SlaqParameters(
        method=_method(msg, p, violations),
        horizon_s=float(horizon),
        recency_decay=float(decay),
        max_devices=_max_devices(msg, p, violations),
        exact_gap=not msg.skip_exact,
    )


def _lyra(msg: Any, violations: list[Violation]) -> object:
    p = "policy.lyra"
    if msg.reclaim_method not in _RECLAIM:
        violations.append(Violation(f"{p}.reclaim_method", f"unknown value {msg.reclaim_method}"))
    return LyraParameters(
        reclaim_method=_RECLAIM.get(msg.reclaim_method, ReclaimMethod.GREEDY),
        reclaim_exact_gap=not msg.skip_reclaim_exact,
        max_devices=_max_devices(msg, p, violations),
    )


elastic_parameters: dict[str, Callable[[Any, list[Violation]], object]] = {
    policy_pb.OptimusParameters.DESCRIPTOR.full_name: _optimus,
    policy_pb.SlaqParameters.DESCRIPTOR.full_name: _slaq,
    policy_pb.LyraParameters.DESCRIPTOR.full_name: _lyra,
}


def _loss_history(msg: snapshot_pb.LossHistory, p: str, violations: list[Violation]
                  ) -> LossHistory | None:
    """The history when valid (None when empty or invalid, with violations)."""
    steps = np.array(msg.steps, dtype=np.float64)
    loss = np.array(msg.loss, dtype=np.float64)
    if steps.size == 0 and loss.size == 0:
        return None
    before = len(violations)
    if steps.size != loss.size:
        violations.append(Violation(f"{p}.loss", f"has {loss.size} values for {steps.size} steps"))
    elif steps.size > MAX_LOSS_POINTS:
        violations.append(Violation(f"{p}.steps", f"has {steps.size} points, at most "
                                                  f"{MAX_LOSS_POINTS}"))
    elif steps.size < MIN_POINTS:
        violations.append(Violation(
            f"{p}.steps", f"too short to fit: {steps.size} point(s), a loss curve needs at "
                          f"least {MIN_POINTS} (send the history once it has them)"))
    else:
        bad = np.flatnonzero(~(np.isfinite(steps) & (steps >= 0)))
        if bad.size:
            violations.append(Violation(f"{p}.steps[{bad[0]}]",
                                        f"must be finite and >= 0, got {steps[bad[0]]}"))
        else:
            back = np.flatnonzero(np.diff(steps) <= 0)
            if back.size:
                k = int(back[0]) + 1
                violations.append(Violation(
                    f"{p}.steps[{k}]", f"{steps[k]} is not after steps[{k - 1}] = "
                                       f"{steps[k - 1]}: steps must be strictly increasing"))
        bad = np.flatnonzero(~(np.isfinite(loss) & (loss >= 0)))
        if bad.size:
            violations.append(Violation(f"{p}.loss[{bad[0]}]",
                                        f"must be finite and >= 0, got {loss[bad[0]]}"))
    if len(violations) > before:
        return None
    return LossHistory(steps, loss)


def _speed_model(msg: snapshot_pb.SpeedModel, p: str, own_type: str,
                 type_index: dict[str, int], violations: list[Violation]) -> SpeedModel | None:
    before = len(violations)
    theta = np.array(msg.theta, dtype=np.float64)
    size = 5 if msg.synchronous else 4
    if theta.size != size:
        kind = "synchronous" if msg.synchronous else "asynchronous"
        violations.append(Violation(f"{p}.theta", f"a {kind} model has {size} coefficients, "
                                                  f"got {theta.size}"))
        return None
    bad = np.flatnonzero(~(np.isfinite(theta) & (theta >= 0) & (theta <= MAX_THETA)))
    if bad.size:
        violations.append(Violation(f"{p}.theta[{bad[0]}]",
                                    f"must be in [0, {MAX_THETA:g}], got {theta[bad[0]]}"))
    if msg.synchronous:
        if not (_finite(msg.batch_size) and 0 < msg.batch_size <= MAX_THETA):
            violations.append(Violation(f"{p}.batch_size",
                                        f"must be in (0, {MAX_THETA:g}], got {msg.batch_size}"))
        elif not bad.size and theta[0] * msg.batch_size + theta[1] <= 0:
            violations.append(Violation(f"{p}.theta", "theta0 * batch_size + theta1 must be > 0 "
                                                      "(a step takes time)"))
    elif not bad.size and theta[0] <= 0:
        violations.append(Violation(f"{p}.theta[0]", "must be > 0 (a step takes time)"))
    server_type = -1
    per_server = max(msg.parameter_server_devices, 1)
    most = max(msg.max_parameter_servers, 1)
    server_terms = (2, 4) if msg.synchronous else (1, 3)
    if msg.parameter_server_type:
        if msg.parameter_server_type not in type_index:
            violations.append(Violation(f"{p}.parameter_server_type",
                                        f"unknown accelerator type {msg.parameter_server_type!r}"))
        elif msg.parameter_server_type == own_type:
            violations.append(Violation(f"{p}.parameter_server_type",
                                        "must differ from the workers' type"))
        else:
            server_type = type_index[msg.parameter_server_type]
        if msg.parameter_server_devices < 0:
            violations.append(Violation(f"{p}.parameter_server_devices", "must be >= 0"))
        if not 0 <= msg.max_parameter_servers <= MAX_PARAMETER_SERVERS:
            violations.append(Violation(f"{p}.max_parameter_servers",
                                        f"must be in [0, {MAX_PARAMETER_SERVERS}]"))
    elif not bad.size and any(theta[t] != 0 for t in server_terms):
        violations.append(Violation(
            f"{p}.theta", f"theta{server_terms[0]} and theta{server_terms[1]} (the terms in "
                          "parameter servers) must be 0 without parameter_server_type"))
    if len(violations) > before:
        return None
    return SpeedModel(bool(msg.synchronous), theta, float(msg.batch_size), server_type,
                      int(per_server), int(most))


def _inference(msg: snapshot_pb.Snapshot, problem: Problem, violations: list[Violation]
               ) -> tuple[np.ndarray, int]:
    p = "snapshot.inference"
    node_index = {name: v for v, name in enumerate(problem.cluster.node_names)}
    loaned: list[int] = []
    seen: dict[str, int] = {}
    for k, name in enumerate(msg.inference.loaned_nodes):
        fp = f"{p}.loaned_nodes[{k}]"
        if name in seen:
            violations.append(Violation(fp, f"duplicate {name!r} (first at [{seen[name]}])"))
        elif name not in node_index:
            known = "the cluster lists no nodes" if not node_index else "not a node of the cluster"
            violations.append(Violation(fp, f"unknown node {name!r}: {known}"))
        else:
            seen[name] = k
            loaned.append(node_index[name])
    k = msg.inference.reclaim_nodes
    if k < 0:
        violations.append(Violation(f"{p}.reclaim_nodes", f"must be >= 0, got {k}"))
    elif k > len(msg.inference.loaned_nodes):
        violations.append(Violation(
            f"{p}.reclaim_nodes",
            f"inference demand above the cluster: {k} nodes asked back, "
            f"{len(msg.inference.loaned_nodes)} are loaned"))
    return np.array(loaned, np.int64), max(min(k, len(loaned)), 0)


def _node_devices(msg: snapshot_pb.Snapshot, problem: Problem, violations: list[Violation]
                  ) -> tuple[tuple[tuple[int, int], ...], ...]:
    m = problem.jobs.num_jobs
    job_index = problem.jobs.row if msg.history.jobs else {}
    node_index = {name: v for v, name in enumerate(problem.cluster.node_names)}
    out: list[tuple[tuple[int, int], ...]] = [()] * m
    hist = problem.history
    for k, entry in enumerate(msg.history.jobs):
        if not entry.node_devices:
            continue
        p = f"snapshot.history.jobs[{k}].node_devices"
        i = job_index.get(entry.job_id)
        if i is None:
            continue  # reported by the history conversion
        running = hist.current_type.size == m and hist.current_type[i] >= 0
        if not running:
            violations.append(Violation(p, "the job has no current placement "
                                           "(history.jobs[].current.accelerator_type)"))
            continue
        pairs: list[tuple[int, int]] = []
        for name, devices in sorted(entry.node_devices.items()):
            v = node_index.get(name)
            fp = f'{p}["{name}"]'
            if v is None:
                violations.append(Violation(fp, f"unknown node {name!r}"))
            elif problem.cluster.node_type[v] != hist.current_type[i]:
                violations.append(Violation(fp, f"node {name!r} holds no "
                                                f"{entry.current.accelerator_type!r}"))
            elif not 1 <= devices <= problem.cluster.node_devices[v]:
                violations.append(Violation(fp, f"must be in [1, {problem.cluster.node_devices[v]}]"
                                                f" (the node's devices), got {devices}"))
            else:
                pairs.append((v, int(devices)))
        total = sum(d for _, d in pairs)
        if len(pairs) == len(entry.node_devices) and total != hist.current_devices[i]:
            violations.append(Violation(p, f"adds up to {total} devices, the job holds "
                                           f"{int(hist.current_devices[i])}"))
        out[i] = tuple(pairs)
    return tuple(out)


def elastic_problem(
    request: service_pb.SolveRequest,
    problem: Problem,
    policy: PolicyRequest,
    violations: list[Violation],
    present: JobFields,
) -> Problem:
    """`problem` with `Problem.elastic` for the policies that read it (unchanged otherwise).

    Withdraws convert's "no usable accelerator type" throughput error for a job that gives a
    speed model instead of throughput."""
    caps = lookup(policy.name).capabilities
    if not (caps.reads_loss_history or caps.reads_inference):
        return problem
    snap = request.snapshot
    type_index = {name: j for j, name in enumerate(problem.cluster.type_names)}
    n, m = problem.cluster.num_types, problem.jobs.num_jobs
    histories: list[LossHistory | None] = [None] * m
    models: list[tuple[SpeedModel | None, ...]] = [(None,) * n] * m
    modelled = False
    for i, job in present.setting(_LOSS_HISTORY, _SPEED_MODEL):  # only jobs that may set one
        p = f"snapshot.jobs[{i}]"
        if job.HasField("loss_history"):
            histories[i] = _loss_history(job.loss_history, f"{p}.loss_history", violations)
        if not job.speed_model:
            continue
        row: list[SpeedModel | None] = [None] * n
        for name, model in sorted(job.speed_model.items()):
            fp = f'{p}.speed_model["{name}"]'
            if name not in type_index:
                violations.append(Violation(fp, f"unknown accelerator type {name!r}"))
                continue
            row[type_index[name]] = _speed_model(model, fp, name, type_index, violations)
        models[i] = tuple(row)
        modelled = modelled or any(row)
        violations[:] = [v for v in violations if not (
            v.field == f"{p}.throughput" and "no usable" in v.description)]
    loaned, reclaim = _inference(snap, problem, violations)
    elastic = ElasticInputs(
        loss_history=tuple(histories) if any(h is not None for h in histories) else (),
        speed_model=tuple(models) if modelled else (),
        node_devices=_node_devices(snap, problem, violations),
        loaned_nodes=loaned,
        reclaim_nodes=reclaim,
    )
    return replace(problem, elastic=elastic)


def partition_options(
    msg: policy_pb.SolveOptions,
    problem: Problem,
    policy: PolicyRequest | None,
    options: SolveOptions,
    violations: list[Violation],
) -> SolveOptions:
    """`options` with POP's fields: 1 <= partitions <= jobs, a partitionable policy without
    space sharing."""
    p = "options"
    if msg.partition_mode not in _PARTITION_MODE:
        violations.append(Violation(f"{p}.partition_mode", f"unknown value {msg.partition_mode}"))
    mode = _PARTITION_MODE.get(msg.partition_mode, PartitionMode.RANDOM)
    if not msg.HasField("partitions"):
        return replace(options, partition_mode=mode, partition_exact_gap=msg.partition_exact_gap)
    k = msg.partitions
    m = problem.jobs.num_jobs
    ok = True
    if k < 1:
        violations.append(Violation(f"{p}.partitions", f"must be >= 1, got {k}"))
        ok = False
    elif k > m:
        violations.append(Violation(f"{p}.partitions",
                                    f"{k} sub-problems for {m} job(s): at most one per job"))
        ok = False
    if policy is not None and k > 1:
        spec = lookup(policy.name)
        if not spec.capabilities.partitionable:
            violations.append(Violation(
                f"{p}.partitions", f"policy {spec.name!r} cannot be partitioned (POP takes the "
                                   "LP time-share policies)"))
            ok = False
        elif getattr(policy.parameters, "space_sharing", False):
            violations.append(Violation(f"{p}.partitions",
                                        "space sharing is not partitioned: unset one of them"))
            ok = False
    return replace(options, partitions=int(k) if ok else 0, partition_mode=mode,
                   partition_exact_gap=msg.partition_exact_gap)


def fill_partition_stats(plan: Plan, stats: service_pb.SolveStats) -> None:
    """POP's statistics and the exact objective beside a heuristic plan, when there are."""
    report = plan.shares.partition
    if report is not None:
        stats.partitions = report.partitions
        stats.partition_workers = report.workers
        stats.partition_time_s = report.pop_time_s
        if report.exact_objective is not None:
            stats.exact_objective = report.exact_objective
    section = plan.configurations.elastic if plan.configurations is not None else None
    if section is not None and section.exact_objective is not None:
        stats.exact_objective = section.exact_objective


def fill_elastic_response(plan: Plan, problem: Problem, response: service_pb.SolveResponse
                          ) -> None:
    """Lyra's reclaiming (the per-job elastic section is written with the allocations'
    records, `elastic_job_fields`)."""
    section = plan.configurations.elastic if plan.configurations is not None else None
    if section is None:
        return
    ids = problem.jobs.ids
    if section.reclaim is not None or section.reclaimed_nodes:
        reclaim = response.plan.reclaim
        reclaim.nodes.extend(section.reclaimed_nodes)
        if section.preempted is not None:
            reclaim.preempted_job_ids.extend(ids[i] for i in np.flatnonzero(section.preempted))
        cert = section.reclaim
        if cert is not None:
            reclaim.preempted_jobs = cert.objective or 0.0
            if cert.bound is not None:
                reclaim.bound = cert.bound
            reclaim.termination = service_pb.TerminationReason.Value(
                f"TERMINATION_REASON_{cert.termination.name}")
            reclaim.method = "; ".join(filter(None, (cert.formulation, cert.detail)))


_ELASTIC = service_pb.ElasticAllocation


def elastic_job_fields(plan: Plan, m: int) -> Fields | None:
    """Every job's serialized `JobAllocation.elastic` field (workers, parameter servers, base
    devices, parameter servers' devices per node, the finite predictions and whether Lyra
    preempted it), written column by column; None when the plan has no elastic section."""
    section = plan.configurations.elastic if plan.configurations is not None else None
    if section is None or not m:
        return None
    inner = Fields(m)
    inner.varint(_ELASTIC.WORKERS_FIELD_NUMBER, np.asarray(section.workers[:m]))
    inner.varint(_ELASTIC.PARAMETER_SERVERS_FIELD_NUMBER,
                 np.asarray(section.parameter_servers[:m]))
    inner.varint(_ELASTIC.BASE_DEVICES_FIELD_NUMBER, np.asarray(section.base_devices[:m]))
    if section.parameter_server_nodes:
        inner.name_counts(_ELASTIC.PARAMETER_SERVER_NODES_FIELD_NUMBER,
                          section.parameter_server_nodes[:m])
    for number, values in ((_ELASTIC.REMAINING_STEPS_FIELD_NUMBER, section.remaining_steps),
                           (_ELASTIC.REMAINING_TIME_S_FIELD_NUMBER, section.remaining_time_s),
                           (_ELASTIC.LOSS_REDUCTION_FIELD_NUMBER, section.loss_reduction)):
        if values is not None:
            column = np.asarray(values, np.float64)[:m]
            inner.double(number, column, np.isfinite(column))
    if section.preempted is not None:
        inner.varint(_ELASTIC.PREEMPTED_FIELD_NUMBER, np.asarray(section.preempted[:m], bool))
    outer = Fields(m)
    outer.message(service_pb.JobAllocation.ELASTIC_FIELD_NUMBER, np.ones(m, bool), inner)
    return outer
