"""`Snapshot` into the model's `Problem`, with every violation's field path.

The cluster and the jobs' main columns are gathered from the message first (map keys checked
against the cluster's types as they are read), then judged as whole columns by
`apportion.solver.validation.snapshot_violations`, the same rules `make_problem` applies;
rejected values are replaced by their defaults so that the later checks of the same request
(history, epochs, configurations, co-locations, the policy's own) see a well-formed model.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from apportion.server.colocation_inputs import colocations
from apportion.server.fairness_inputs import fairness_inputs
from apportion.server.history_inputs import history_to_model
from apportion.server.job_inputs import read_jobs
from apportion.server.job_wire import JobFields
from apportion.server.market_inputs import epoch_columns
from apportion.server.sia_inputs import configuration_columns
from apportion.server.topology_inputs import with_topology
from apportion.solver import limits
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.errors import Violation, echo
from apportion.solver.model import (
    DEFAULT_RESTART_PENALTY_S,
    Cluster,
    Jobs,
    Problem,
    Tenant,
    TenantSharing,
)
from apportion.solver.validation import (
    WEIGHT_RULE,
    JobPaths,
    cost_ok,
    duplicates,
    duration_ok,
    rate_ok,
    snapshot_violations,
    steps_ok,
    time_ok,
    weight_ok,
)
from apportion.v1 import snapshot_pb2 as snapshot_pb

_SHARING = {
    snapshot_pb.TENANT_SHARING_UNSPECIFIED: TenantSharing.FAIRNESS,
    snapshot_pb.TENANT_SHARING_FAIRNESS: TenantSharing.FAIRNESS,
    snapshot_pb.TENANT_SHARING_FIFO: TenantSharing.FIFO,
}


def _cluster(msg: snapshot_pb.Cluster, violations: list[Violation]) -> Cluster:
    """The cluster as given (counts, costs and node sizes judged later, as columns): type
    and node names unique, every node of a known type, node devices summing to the counts."""
    path = "snapshot.cluster.accelerator_types"
    types = msg.accelerator_types
    names = [t.name for t in types]
    violations += duplicates(names, lambda j: f"{path}[{j}].name", "name")
    first = {name: j for j, name in reversed(list(enumerate(names)))}
    nodes = msg.nodes
    node_names = [n.name for n in nodes]
    type_of = [n.accelerator_type for n in nodes]
    node_type = np.fromiter((first.get(name, -1) for name in type_of), np.int64, len(nodes))
    sizes = {fname: np.array([getattr(n, fname) for n in nodes], np.float64)
             for fname in ("cpus", "memory_gib")}
    wrong = {fname: ~(np.isfinite(values) & (values >= 0)
                      & (values <= limits.MAX_MODEL_PARAMETER))
             for fname, values in sizes.items()}
    for k in np.flatnonzero((node_type < 0) | wrong["cpus"] | wrong["memory_gib"]).tolist():
        if node_type[k] < 0:
            violations.append(Violation(f"snapshot.cluster.nodes[{k}].accelerator_type",
                                        f"unknown accelerator type {echo(type_of[k])}"))
        for fname, values in sizes.items():
            if wrong[fname][k]:
                violations.append(Violation(
                    f"snapshot.cluster.nodes[{k}].{fname}",
                    f"must be in [0, {limits.MAX_MODEL_PARAMETER:g}], got {float(values[k])}",
                ))
    violations += duplicates(node_names, lambda k: f"snapshot.cluster.nodes[{k}]", "node")
    node_type = np.maximum(node_type, 0)
    node_devices = np.array([n.devices for n in nodes], np.int64)
    count = np.array([t.count for t in types], np.int64)
    if len(nodes):
        totals = np.bincount(node_type, weights=np.clip(node_devices, 0, None),
                             minlength=len(types)).astype(np.int64)
        for j, name in enumerate(names):
            if first.get(name) == j and totals[j] != count[j]:
                violations.append(Violation(
                    f"{path}[{j}].count",
                    f"is {count[j]} but the nodes of type {echo(name)} hold {totals[j]} devices",
                ))
    return Cluster(
        type_names=tuple(names),
        count=count,
        cost_per_hour=np.array(
            [t.cost_per_hour if t.HasField("cost_per_hour") else 1.0 for t in types], np.float64
        ),
        node_names=tuple(node_names),
        node_type=node_type,
        node_devices=node_devices,
    )


def _clean_cluster(cluster: Cluster) -> Cluster:
    """Counts and node sizes clipped to their bounds, invalid costs set to 1."""
    top = limits.MAX_DEVICES_PER_TYPE
    return Cluster(
        type_names=cluster.type_names,
        count=np.clip(cluster.count, 0, top),
        cost_per_hour=np.where(cost_ok(cluster.cost_per_hour), cluster.cost_per_hour, 1.0),
        node_names=cluster.node_names,
        node_type=cluster.node_type,
        node_devices=np.clip(cluster.node_devices, 0, top),
    )


def _jobs(msg: snapshot_pb.Snapshot, cluster: Cluster, violations: list[Violation],
          deadline: Deadline, serialized: bytes | None) -> tuple[Jobs, JobPaths, JobFields]:
    """Every job's columns as given (judged by `snapshot_violations`), their field paths and
    which jobs may set which other fields, with the epoch and configuration inputs read and
    validated by their own modules."""
    main, paths, present, spans = read_jobs(msg, cluster, violations, serialized, deadline)
    m = len(main.ids)
    deadline.check()
    epochs = epoch_columns(present, main.epochs_done, main.total_epochs, violations)
    configs = configuration_columns(present, m, cluster, violations, deadline, spans)
    return Jobs(
        ids=tuple(main.ids),
        throughput=main.throughput,
        scale_factor=main.scale_factor,
        priority_weight=main.priority_weight,
        tenant=tuple(main.tenant),
        arrival_time_s=main.arrival_time_s,
        steps_done=main.steps_done,
        total_steps=main.total_steps,
        deadline_s=main.deadline_s,
        epochs_done=epochs.epochs_done,
        total_epochs=epochs.total_epochs,
        epoch_duration_s=epochs.epoch_duration_s,
        epoch_batch_size=epochs.epoch_batch_size,
        given_goodput=configs.given_goodput,
        min_devices=configs.min_devices,
        max_devices=configs.max_devices,
        scale_unit=configs.scale_unit,
        pollux=configs.pollux,
        restart_penalty_s=main.restart_penalty_s,
        job_type=tuple(main.job_type),
        measured_run_time_s=epochs.measured_run_time_s,
        measured_epochs=epochs.measured_epochs,
    ), paths, present


def _clean_jobs(jobs: Jobs, cluster: Cluster) -> Jobs:
    """Values `snapshot_violations` rejects replaced by their defaults."""
    largest = max(int(cluster.count.max()) if cluster.num_types else 1, 1)
    done, total = jobs.steps_done, jobs.total_steps
    progress_ok = steps_ok(done) & steps_ok(total) & ((total == 0) | (total >= done))
    deadline, penalty = jobs.deadline_s, jobs.restart_penalty_s
    return replace(
        jobs,
        throughput=np.where(rate_ok(jobs.throughput), jobs.throughput, 0.0),
        scale_factor=np.clip(jobs.scale_factor, 1, largest),
        priority_weight=np.where(weight_ok(jobs.priority_weight), jobs.priority_weight, 1.0),
        arrival_time_s=np.where(time_ok(jobs.arrival_time_s), jobs.arrival_time_s, 0.0),
        steps_done=np.where(progress_ok, done, 0.0),
        total_steps=np.where(progress_ok, total, 0.0),
        deadline_s=np.where(time_ok(deadline), deadline, np.nan),
        restart_penalty_s=np.where(duration_ok(penalty), penalty, DEFAULT_RESTART_PENALTY_S),
    )


def _tenants(msg: snapshot_pb.Snapshot, violations: list[Violation]) -> tuple[Tenant, ...]:
    """The snapshot's tenants: unique non-empty names, weight within the weight bounds
    (default 1), a known sharing mode."""
    tenants: list[Tenant] = []
    violations += duplicates([t.name for t in msg.tenants],
                             lambda k: f"snapshot.tenants[{k}].name", "tenant")
    for idx, tenant in enumerate(msg.tenants):
        p = f"snapshot.tenants[{idx}]"
        weight = tenant.weight if tenant.HasField("weight") else 1.0
        if not weight_ok(weight):
            violations.append(Violation(f"{p}.weight", f"{WEIGHT_RULE}, got {weight}"))
            weight = 1.0
        if tenant.sharing not in _SHARING:
            violations.append(Violation(f"{p}.sharing", f"unknown value {tenant.sharing}"))
        tenants.append(Tenant(tenant.name, weight, _SHARING.get(tenant.sharing,
                                                                TenantSharing.FAIRNESS)))
    return tuple(tenants)


def snapshot_to_problem(
    msg: snapshot_pb.Snapshot, violations: list[Violation], deadline: Deadline = NO_DEADLINE,
    serialized: bytes | None = None,
) -> tuple[Problem, JobPaths, JobFields]:
    """Build the model from a snapshot, appending every violation found to `violations`;
    with the field paths of its jobs and which jobs may set which other fields.
    `serialized`: the `SolveRequest` bytes the snapshot was parsed from, if at hand (its jobs
    are decoded from them). Raises `DeadlineExpiredError` once `deadline` passes."""
    cluster = _cluster(msg.cluster, violations)
    jobs, paths, present = _jobs(msg, cluster, violations, deadline, serialized)
    deadline.check()
    violations += snapshot_violations(cluster, jobs, msg.time_s, msg.round_duration_s, paths)
    cluster = _clean_cluster(cluster)
    jobs = _clean_jobs(jobs, cluster)
    history = history_to_model(msg, cluster, jobs, violations)
    problem = Problem(
        cluster=cluster,
        jobs=jobs,
        history=history,
        time_s=msg.time_s if time_ok(msg.time_s) else 0.0,
        round_duration_s=msg.round_duration_s if duration_ok(msg.round_duration_s) else 0.0,
        tenants=_tenants(msg, violations),
        colocations=colocations(msg, cluster, jobs, violations),
        fairness=fairness_inputs(msg, cluster, jobs, history, violations, present),
    )
    return with_topology(msg, problem, violations, present), paths, present
