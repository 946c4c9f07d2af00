"""Conversion between the apportion.v1 wire messages and the solver model.

`request_to_model` is where validation happens: it walks the whole request, collects every
violation with its field path, and raises one `ValidationError` listing them all. The CLI and
the server both call it, so a snapshot file and a gRPC request are judged identically.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from apportion.server.colocation_inputs import colocations, history_partners, with_job_types
from apportion.server.elastic_inputs import (
    elastic_parameters,
    elastic_problem,
    fill_elastic_response,
    fill_partition_stats,
    partition_options,
)
from apportion.server.fairness_inputs import (
    fairness_input_violations,
    fairness_inputs,
    fairness_parameters,
    fill_fairness_response,
)
from apportion.server.gavel_inputs import gavel_input_violations, gavel_parameters
from apportion.server.market_inputs import (
    epoch_inputs,
    fill_market_response,
    market_input_violations,
    market_parameters,
)
from apportion.server.sharing_inputs import (
    SHARING_COMPAT,
    fill_sharing_response,
    sharing_parameters,
    sharing_problem,
)
from apportion.server.sia_inputs import fill_sia_response, sia_parameters, sia_problem
from apportion.server.topology_inputs import (
    fill_placement_response,
    tiresias_parameters,
    with_stages,
    with_topology,
)
from apportion.solver.errors import ValidationError, Violation
from apportion.solver.model import (
    Cluster,
    Compat,
    History,
    Jobs,
    PolicyRequest,
    Problem,
    SolveOptions,
    SolverPreference,
    Tenant,
    TenantSharing,
)
from apportion.solver.parameters import (
    AlloxParameters,
    Canonicalization,
    MaxMinFairnessParameters,
    WaterFillingParameters,
)
from apportion.solver.registry import lookup, resolve_parameters
from apportion.solver.result import JobStatus, Plan, Termination
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import policy_pb2 as policy_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

_COMPAT = {
    policy_pb.COMPAT_UNSPECIFIED: Compat.NONE,
    policy_pb.COMPAT_GAVEL: Compat.GAVEL,
    policy_pb.COMPAT_SHOCKWAVE: Compat.SHOCKWAVE,
    policy_pb.COMPAT_SIA: Compat.SIA,
    policy_pb.COMPAT_TIRESIAS: Compat.TIRESIAS,
    **SHARING_COMPAT,
}
_SOLVER = {
    policy_pb.SOLVER_PREFERENCE_UNSPECIFIED: SolverPreference.AUTO,
    policy_pb.SOLVER_PREFERENCE_CLARABEL: SolverPreference.CLARABEL,
    policy_pb.SOLVER_PREFERENCE_HIGHS: SolverPreference.HIGHS,
}
_CANONICALIZATION = {
    policy_pb.CANONICALIZATION_UNSPECIFIED: Canonicalization.NONE,
    policy_pb.CANONICALIZATION_NONE: Canonicalization.NONE,
    policy_pb.CANONICALIZATION_SUM: Canonicalization.SUM,
}
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


def _finite(x: float) -> bool:
    return math.isfinite(x)


def _key(name: str) -> str:
    return f'["{name}"]'


def _duplicates(names: list[str], path: str, violations: list[Violation]) -> None:
    first: dict[str, int] = {}
    for idx, name in enumerate(names):
        if not name:
            violations.append(Violation(f"{path}[{idx}]", "must be non-empty"))
        elif name in first:
            violations.append(
                Violation(f"{path}[{idx}]", f"duplicate {name!r} (first at [{first[name]}])")
            )
        else:
            first[name] = idx


def _cluster(msg: snapshot_pb.Cluster, violations: list[Violation]) -> Cluster:
    path = "snapshot.cluster.accelerator_types"
    types = list(msg.accelerator_types)
    if not types:
        violations.append(Violation(path, "must list at least one accelerator type"))
    first: dict[str, int] = {}
    for idx, acc in enumerate(types):
        p = f"{path}[{idx}]"
        if not acc.name:
            violations.append(Violation(f"{p}.name", "must be non-empty"))
        elif acc.name in first:
            violations.append(
                Violation(
                    f"{p}.name", f"duplicate name {acc.name!r} (first at [{first[acc.name]}])"
                )
            )
        else:
            first[acc.name] = idx
        if acc.count < 0:
            violations.append(Violation(f"{p}.count", f"must be >= 0, got {acc.count}"))
        if acc.HasField("cost_per_hour") and not (
            _finite(acc.cost_per_hour) and acc.cost_per_hour >= 0
        ):
            violations.append(
                Violation(f"{p}.cost_per_hour", f"must be finite and >= 0, got {acc.cost_per_hour}")
            )
    if types and all(acc.count <= 0 for acc in types):
        violations.append(Violation("snapshot.cluster", "empty cluster: no accelerator devices"))
    node_totals: dict[str, int] = {}
    node_names: list[str] = []
    for idx, node in enumerate(msg.nodes):
        p = f"snapshot.cluster.nodes[{idx}]"
        node_names.append(node.name)
        if node.accelerator_type not in first:
            violations.append(
                Violation(
                    f"{p}.accelerator_type",
                    f"unknown accelerator type {node.accelerator_type!r}",
                )
            )
        if node.devices < 0:
            violations.append(Violation(f"{p}.devices", f"must be >= 0, got {node.devices}"))
        for fname in ("cpus", "memory_gib"):
            value = getattr(node, fname)
            if not (_finite(value) and value >= 0):
                violations.append(
                    Violation(f"{p}.{fname}", f"must be finite and >= 0, got {value}")
                )
        node_totals[node.accelerator_type] = node_totals.get(node.accelerator_type, 0) + max(
            node.devices, 0
        )
    _duplicates(node_names, "snapshot.cluster.nodes", violations)
    if msg.nodes:
        for idx, acc in enumerate(types):
            total = node_totals.get(acc.name, 0)
            if acc.name in first and first[acc.name] == idx and total != acc.count:
                violations.append(
                    Violation(
                        f"{path}[{idx}].count",
                        f"is {acc.count} but the nodes of type {acc.name!r} hold {total} devices",
                    )
                )
    return Cluster(
        type_names=tuple(t.name for t in types),
        count=np.array([max(t.count, 0) for t in types], dtype=np.int64),
        cost_per_hour=np.array(
            [t.cost_per_hour if t.HasField("cost_per_hour") else 1.0 for t in types],
            dtype=np.float64,
        ),
        node_names=tuple(node.name for node in msg.nodes),
        node_type=np.array([first.get(node.accelerator_type, 0) for node in msg.nodes], np.int64),
        node_devices=np.array([max(node.devices, 0) for node in msg.nodes], np.int64),
    )


def _jobs(msg: snapshot_pb.Snapshot, cluster: Cluster, violations: list[Violation]) -> Jobs:
    type_index = {name: j for j, name in enumerate(cluster.type_names)}
    m, n = len(msg.jobs), cluster.num_types
    max_count = int(cluster.count.max()) if n else 0
    throughput = np.zeros((m, n))
    scale = np.ones(m, np.int64)
    weight = np.ones(m)
    arrival = np.zeros(m)
    done = np.zeros(m)
    total = np.zeros(m)
    deadline = np.full(m, np.nan)
    first: dict[str, int] = {}
    for i, job in enumerate(msg.jobs):
        p = f"snapshot.jobs[{i}]"
        if not job.id:
            violations.append(Violation(f"{p}.id", "must be non-empty"))
        elif job.id in first:
            violations.append(
                Violation(
                    f"{p}.id", f"duplicate job id {job.id!r} (first at jobs[{first[job.id]}])"
                )
            )
        else:
            first[job.id] = i
        if job.HasField("scale_factor"):
            s = job.scale_factor
            if s < 1:
                violations.append(Violation(f"{p}.scale_factor", f"must be >= 1, got {s}"))
            elif max_count and s > max_count:
                violations.append(
                    Violation(
                        f"{p}.scale_factor",
                        f"{s} devices is more than the cluster can ever give "
                        f"(the largest type has {max_count})",
                    )
                )
            scale[i] = max(s, 1)
        if job.HasField("priority_weight"):
            w = job.priority_weight
            if not (_finite(w) and w > 0):
                violations.append(
                    Violation(f"{p}.priority_weight", f"must be finite and > 0, got {w}")
                )
            else:
                weight[i] = w
        for name, value in job.throughput.items():
            fp = f"{p}.throughput{_key(name)}"
            if name not in type_index:
                violations.append(
                    Violation(
                        fp,
                        f"unknown accelerator type {name!r}; the cluster has "
                        f"{', '.join(cluster.type_names) or 'none'}",
                    )
                )
            elif not (_finite(value) and value >= 0):
                violations.append(Violation(fp, f"must be finite and >= 0, got {value}"))
            else:
                throughput[i, type_index[name]] = value
        usable = (throughput[i] > 0) & (cluster.count >= scale[i])
        if (
            n
            and not usable.any()
            and not any(v.field.startswith(f"{p}.throughput") for v in violations)
        ):
            violations.append(
                Violation(
                    f"{p}.throughput",
                    f"no usable accelerator type: needs a positive throughput on a type with at "
                    f"least {scale[i]} devices",
                )
            )
        if not _finite(job.arrival_time_s):
            violations.append(Violation(f"{p}.arrival_time_s", "must be finite"))
        else:
            arrival[i] = job.arrival_time_s
        prog = job.progress
        if not (_finite(prog.steps_done) and prog.steps_done >= 0):
            violations.append(
                Violation(
                    f"{p}.progress.steps_done", f"must be finite and >= 0, got {prog.steps_done}"
                )
            )
        elif not (_finite(prog.total_steps) and prog.total_steps >= 0):
            violations.append(
                Violation(
                    f"{p}.progress.total_steps", f"must be finite and >= 0, got {prog.total_steps}"
                )
            )
        elif prog.total_steps and prog.total_steps < prog.steps_done:
            violations.append(
                Violation(
                    f"{p}.progress.total_steps",
                    f"{prog.total_steps} is less than steps_done {prog.steps_done}",
                )
            )
        else:
            done[i], total[i] = prog.steps_done, prog.total_steps
        for fname in ("epochs_done", "total_epochs"):
            if getattr(prog, fname) < 0:
                violations.append(Violation(f"{p}.progress.{fname}", "must be >= 0"))
        if job.HasField("deadline_s"):
            if not _finite(job.deadline_s):
                violations.append(Violation(f"{p}.deadline_s", "must be finite"))
            else:
                deadline[i] = job.deadline_s
        if job.HasField("restart_penalty_s") and not (
            _finite(job.restart_penalty_s) and job.restart_penalty_s >= 0
        ):
            violations.append(Violation(f"{p}.restart_penalty_s", "must be finite and >= 0"))
    return Jobs(
        ids=tuple(job.id for job in msg.jobs),
        throughput=throughput,
        scale_factor=scale,
        priority_weight=weight,
        tenant=tuple(job.tenant for job in msg.jobs),
        arrival_time_s=arrival,
        steps_done=done,
        total_steps=total,
        deadline_s=deadline,
    )


def _history(
    msg: snapshot_pb.Snapshot, cluster: Cluster, jobs: Jobs, violations: list[Violation]
) -> History:
    m, n = jobs.num_jobs, cluster.num_types
    job_index = {job_id: i for i, job_id in enumerate(jobs.ids)}
    type_index = {name: j for j, name in enumerate(cluster.type_names)}
    received = np.zeros((m, n))
    isolated = np.zeros(m)
    restarts = np.zeros(m, np.int64)
    current_type = np.full(m, -1, np.int64)
    current_devices = np.zeros(m, np.int64)
    busy_until = np.zeros(m)
    current_nodes: list[tuple[int, ...]] = [()] * m
    held = np.zeros(n, np.int64)
    prev_iso = np.full(m, np.nan)
    prev_remaining = np.full(m, np.nan)
    node_index = {name: k for k, name in enumerate(cluster.node_names)}
    hist = msg.history
    elapsed = hist.elapsed_since_reset_s
    if not (_finite(elapsed) and elapsed >= 0):
        violations.append(
            Violation("snapshot.history.elapsed_since_reset_s", "must be finite and >= 0")
        )
        elapsed = 0.0
    seen: dict[str, int] = {}
    for k, entry in enumerate(hist.jobs):
        p = f"snapshot.history.jobs[{k}]"
        i = job_index.get(entry.job_id)
        if i is None:
            violations.append(Violation(f"{p}.job_id", f"unknown job {entry.job_id!r}"))
            continue
        if entry.job_id in seen:
            violations.append(
                Violation(
                    f"{p}.job_id",
                    f"duplicate entry for {entry.job_id!r} (first at [{seen[entry.job_id]}])",
                )
            )
            continue
        seen[entry.job_id] = k
        for name, value in entry.received_time_s.items():
            fp = f"{p}.received_time_s{_key(name)}"
            if name not in type_index:
                violations.append(Violation(fp, f"unknown accelerator type {name!r}"))
            elif not (_finite(value) and value >= 0):
                violations.append(Violation(fp, f"must be finite and >= 0, got {value}"))
            elif value > elapsed * (1 + 1e-9) + 1e-9:
                violations.append(
                    Violation(fp, f"{value} s is more than elapsed_since_reset_s ({elapsed} s)")
                )
            else:
                received[i, type_index[name]] = value
        for name in entry.previous_time_share:
            if name not in type_index:
                violations.append(
                    Violation(
                        f"{p}.previous_time_share{_key(name)}", f"unknown accelerator type {name!r}"
                    )
                )
        c = entry.cumulative_isolated_time_s
        if not (_finite(c) and c >= 0):
            violations.append(
                Violation(f"{p}.cumulative_isolated_time_s", "must be finite and >= 0")
            )
        else:
            isolated[i] = c
        if entry.restarts < 0:
            violations.append(Violation(f"{p}.restarts", "must be >= 0"))
        else:
            restarts[i] = entry.restarts
        _ftf_previous(entry, p, i, prev_iso, prev_remaining, violations)
        if entry.HasField("current"):
            _placement(
                entry.current,
                f"{p}.current",
                i,
                cluster,
                jobs,
                type_index,
                node_index,
                violations,
                current_type,
                current_devices,
                busy_until,
                current_nodes,
                held,
            )
    return History(
        received_time_s=received,
        cumulative_isolated_time_s=isolated,
        restarts=restarts,
        elapsed_since_reset_s=float(elapsed),
        current_type=current_type,
        current_devices=current_devices,
        busy_until_s=busy_until,
        current_nodes=tuple(current_nodes),
        previous_isolated_throughput=prev_iso,
        previous_remaining_steps=prev_remaining,
    )


def _ftf_previous(
    entry: snapshot_pb.JobHistory,
    p: str,
    i: int,
    prev_iso: np.ndarray,
    prev_remaining: np.ndarray,
    violations: list[Violation],
) -> None:
    """Finish-time-fairness state of the previous call (both fields or neither)."""
    has_iso = entry.HasField("previous_isolated_throughput")
    has_rem = entry.HasField("previous_remaining_steps")
    if has_iso != has_rem:
        missing = "previous_remaining_steps" if has_iso else "previous_isolated_throughput"
        violations.append(Violation(f"{p}.{missing}", "must be given together with the other"))
        return
    if not has_iso:
        return
    iso, rem = entry.previous_isolated_throughput, entry.previous_remaining_steps
    if not (_finite(iso) and iso > 0):
        violations.append(
            Violation(f"{p}.previous_isolated_throughput", f"must be finite and > 0, got {iso}")
        )
    elif not (_finite(rem) and rem >= 0):
        violations.append(
            Violation(f"{p}.previous_remaining_steps", f"must be finite and >= 0, got {rem}")
        )
    else:
        prev_iso[i], prev_remaining[i] = iso, rem


def _placement(
    cur: snapshot_pb.Placement,
    p: str,
    i: int,
    cluster: Cluster,
    jobs: Jobs,
    type_index: Mapping[str, int],
    node_index: Mapping[str, int],
    violations: list[Violation],
    current_type: np.ndarray,
    current_devices: np.ndarray,
    busy_until: np.ndarray,
    current_nodes: list[tuple[int, ...]],
    held: np.ndarray,
) -> None:
    """Validate a running job's placement and record it (empty accelerator_type = not running)."""
    if not cur.accelerator_type:
        if cur.devices or cur.nodes or cur.busy_until_s:
            violations.append(
                Violation(f"{p}.accelerator_type", "must name the type of the running job")
            )
        return
    j = type_index.get(cur.accelerator_type)
    if j is None:
        violations.append(
            Violation(
                f"{p}.accelerator_type",
                f"unknown accelerator type {cur.accelerator_type!r}; the cluster has "
                f"{', '.join(cluster.type_names) or 'none'}",
            )
        )
        return
    ok = True
    devices = cur.devices or int(jobs.scale_factor[i])
    if cur.devices < 0:
        violations.append(Violation(f"{p}.devices", f"must be >= 0, got {cur.devices}"))
        ok = False
    elif held[j] + devices > cluster.count[j]:
        violations.append(
            Violation(
                f"{p}.devices",
                f"running jobs would hold {held[j] + devices} devices of type "
                f"{cur.accelerator_type!r}, which has {int(cluster.count[j])}",
            )
        )
        ok = False
    if not _finite(cur.busy_until_s):
        violations.append(Violation(f"{p}.busy_until_s", "must be finite"))
        ok = False
    nodes: list[int] = []
    for k, name in enumerate(cur.nodes):
        nid = node_index.get(name)
        if nid is None:
            violations.append(Violation(f"{p}.nodes[{k}]", f"unknown node {name!r}"))
            ok = False
        elif cluster.node_type[nid] != j:
            violations.append(
                Violation(f"{p}.nodes[{k}]", f"node {name!r} holds no {cur.accelerator_type!r}")
            )
            ok = False
        else:
            nodes.append(nid)
    if ok:
        held[j] += devices
        current_type[i] = j
        current_devices[i] = devices
        busy_until[i] = cur.busy_until_s
        current_nodes[i] = tuple(nodes)


def snapshot_to_problem(msg: snapshot_pb.Snapshot, violations: list[Violation]) -> Problem:
    """Build the model from a snapshot, appending every violation found to `violations`."""
    if not _finite(msg.time_s):
        violations.append(Violation("snapshot.time_s", "must be finite"))
    if not (_finite(msg.round_duration_s) and msg.round_duration_s >= 0):
        violations.append(Violation("snapshot.round_duration_s", "must be finite and >= 0"))
    cluster = _cluster(msg.cluster, violations)
    jobs = with_job_types(msg, _jobs(msg, cluster, violations))
    history = _history(msg, cluster, jobs, violations)
    history = replace(history, colocated_with=history_partners(msg, jobs, violations))
    jobs, history = epoch_inputs(msg, jobs, history, violations)
    problem = Problem(
        cluster=cluster,
        jobs=jobs,
        history=history,
        time_s=msg.time_s if _finite(msg.time_s) else 0.0,
        round_duration_s=msg.round_duration_s,
        tenants=_tenants(msg, violations),
        colocations=colocations(msg, cluster, jobs, violations),
        fairness=fairness_inputs(msg, cluster, jobs, history, violations),
    )
    return with_topology(msg, problem, violations)


_SHARING = {
    snapshot_pb.TENANT_SHARING_UNSPECIFIED: TenantSharing.FAIRNESS,
    snapshot_pb.TENANT_SHARING_FAIRNESS: TenantSharing.FAIRNESS,
    snapshot_pb.TENANT_SHARING_FIFO: TenantSharing.FIFO,
}


def _tenants(msg: snapshot_pb.Snapshot, violations: list[Violation]) -> tuple[Tenant, ...]:
    """The snapshot's tenants: unique non-empty names, weight finite and > 0 (default 1)."""
    tenants: list[Tenant] = []
    first: dict[str, int] = {}
    for idx, tenant in enumerate(msg.tenants):
        p = f"snapshot.tenants[{idx}]"
        if not tenant.name:
            violations.append(Violation(f"{p}.name", "must be non-empty"))
        elif tenant.name in first:
            where = f"first at [{first[tenant.name]}]"
            violations.append(Violation(f"{p}.name", f"duplicate tenant {tenant.name!r} ({where})"))
        else:
            first[tenant.name] = idx
        weight = tenant.weight if tenant.HasField("weight") else 1.0
        if not (_finite(weight) and weight > 0):
            violations.append(Violation(f"{p}.weight", f"must be finite and > 0, got {weight}"))
            weight = 1.0
        if tenant.sharing not in _SHARING:
            violations.append(Violation(f"{p}.sharing", f"unknown value {tenant.sharing}"))
        sharing = _SHARING.get(tenant.sharing, TenantSharing.FAIRNESS)
        tenants.append(Tenant(tenant.name, weight, sharing))
    return tuple(tenants)


def _policy(msg: policy_pb.Policy, violations: list[Violation]) -> PolicyRequest | None:
    try:
        spec = lookup(msg.name)
    except ValidationError as exc:
        violations.extend(exc.violations)
        return None
    given = msg.WhichOneof("parameters")
    parameters: object | None = None
    if given is not None and given != spec.parameters_field:
        expected = (
            f"takes {spec.parameters_field!r} parameters"
            if spec.parameters_field
            else "takes no parameters"
        )
        violations.append(
            Violation(f"policy.{given}", f"parameters of another policy: {spec.name!r} {expected}")
        )
    elif given == "max_min_fairness":
        mmf = msg.max_min_fairness
        parameters = MaxMinFairnessParameters(
            heterogeneity_agnostic=mmf.heterogeneity_agnostic,
            canonicalize=_CANONICALIZATION.get(mmf.canonicalize, Canonicalization.NONE),
            space_sharing=mmf.space_sharing,
        )
        if mmf.canonicalize not in _CANONICALIZATION:
            violations.append(
                Violation(
                    "policy.max_min_fairness.canonicalize", f"unknown value {mmf.canonicalize}"
                )
            )
    elif given is not None and given in market_parameters:
        parameters = market_parameters[given](getattr(msg, given), violations)
    elif given is not None and given in sia_parameters:
        parameters = sia_parameters[given](getattr(msg, given), violations)
    elif given is not None and given in fairness_parameters:
        parameters = fairness_parameters[given](getattr(msg, given), violations)
    elif given is not None and given in tiresias_parameters:
        parameters = tiresias_parameters[given](getattr(msg, given), violations)
    elif given is not None and given in sharing_parameters:
        parameters = sharing_parameters[given](getattr(msg, given), violations)
    elif given is not None and given in gavel_parameters:
        parameters = gavel_parameters[given](getattr(msg, given), violations)
    elif given is not None and given in elastic_parameters:
        parameters = elastic_parameters[given](getattr(msg, given), violations)
    elif given == "water_filling":
        parameters = WaterFillingParameters(
            heterogeneity_agnostic=msg.water_filling.heterogeneity_agnostic,
            space_sharing=msg.water_filling.space_sharing,
        )
    elif given == "allox":
        allox = msg.allox
        alpha = allox.alpha if allox.HasField("alpha") else 1.0
        if not (_finite(alpha) and 0 < alpha <= 1):
            violations.append(Violation("policy.allox.alpha", f"must be in (0, 1], got {alpha}"))
            alpha = 1.0
        parameters = AlloxParameters(alpha=alpha)
    if msg.compat not in _COMPAT:
        violations.append(Violation("policy.compat", f"unknown value {msg.compat}"))
    return PolicyRequest(
        name=spec.name,
        parameters=resolve_parameters(spec, msg.name, parameters),
        compat=_COMPAT.get(msg.compat, Compat.NONE),
        requested_name=msg.name,
    )


def _options(msg: policy_pb.SolveOptions, violations: list[Violation]) -> SolveOptions:
    p = "options"
    for fname in ("time_limit_s", "relative_gap"):
        value = getattr(msg, fname)
        if not (_finite(value) and value >= 0):
            violations.append(Violation(f"{p}.{fname}", f"must be finite and >= 0, got {value}"))
    if msg.relative_gap >= 1:
        violations.append(Violation(f"{p}.relative_gap", f"must be < 1, got {msg.relative_gap}"))
    if msg.threads < 0:
        violations.append(Violation(f"{p}.threads", "must be >= 0"))
    if msg.schedule_rounds < 0:
        violations.append(Violation(f"{p}.schedule_rounds", "must be >= 0"))
    if msg.solver not in _SOLVER:
        violations.append(Violation(f"{p}.solver", f"unknown value {msg.solver}"))
    ok = _finite(msg.time_limit_s) and msg.time_limit_s >= 0
    gap_ok = _finite(msg.relative_gap) and 0 <= msg.relative_gap < 1
    return SolveOptions(
        time_limit_s=msg.time_limit_s if ok else 0.0,
        relative_gap=msg.relative_gap if gap_ok else 0.0,
        threads=max(msg.threads, 0),
        seed=msg.seed,
        solver=_SOLVER.get(msg.solver, SolverPreference.AUTO),
        schedule_rounds=max(msg.schedule_rounds, 0),
    )


def tenant_violations(problem: Problem, policy: PolicyRequest) -> list[Violation]:
    """For a policy that reads tenants (`Capabilities.reads_tenants`), when the snapshot lists
    tenants: every job's tenant must be one of them (an unlisted name is most likely a typo;
    with no list at all, tenant names are labels of weight 1)."""
    if not lookup(policy.name).capabilities.reads_tenants or not problem.tenants:
        return []
    listed = {tenant.name for tenant in problem.tenants}
    names = ", ".join(sorted(listed))
    return [
        Violation(f"snapshot.jobs[{i}].tenant",
                  f"unknown tenant {name!r}; snapshot.tenants lists {names}")
        for i, name in enumerate(problem.jobs.tenant) if name and name not in listed
    ]


def request_to_model(
    request: service_pb.SolveRequest,
) -> tuple[Problem, PolicyRequest, SolveOptions]:
    """Validate and convert a request; raises ValidationError listing every violation."""
    violations: list[Violation] = []
    problem = snapshot_to_problem(request.snapshot, violations)
    policy = _policy(request.policy, violations)
    options = _options(request.options, violations)
    if policy is not None:
        policy = with_stages(request.policy, policy, lookup(policy.name), problem, violations)
        known = {v.field for v in violations}
        gavel = gavel_input_violations(problem, policy)
        violations.extend(v for v in gavel if v.field not in known)
        violations.extend(market_input_violations(problem, policy))
        violations.extend(tenant_violations(problem, policy))
        violations.extend(fairness_input_violations(problem, policy))
        problem = sia_problem(request, problem, policy, violations)
        problem = elastic_problem(request, problem, policy, violations)
        problem = sharing_problem(request, problem, policy, violations)
    options = partition_options(request.options, problem, policy, options, violations)
    if violations or policy is None:
        raise ValidationError(violations)
    return problem, policy, options


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
    fill_partition_stats(plan, stats)
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
    fill_fairness_response(plan, problem, out)
    fill_elastic_response(plan, problem, response)
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
    fill_placement_response(plan, problem, out)
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
    fill_sharing_response(plan, problem, response)
    return response
