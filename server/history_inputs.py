"""`Snapshot.history` into the model's `History`, every entry validated with its field path.

Each entry names a job of the snapshot (once); jobs without an entry keep the defaults of
`History.default`. A running job's placement (`JobHistory.current`) is read into a
`CurrentPlacement` value by `read_placement`; the running jobs together may hold at most each
type's devices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from apportion.server.colocation_inputs import history_partners
from apportion.server.market_inputs import reference_finish_times
from apportion.solver import limits
from apportion.solver.errors import Violation, echo, key, listing
from apportion.solver.model import Cluster, History, Jobs
from apportion.solver.validation import (
    DURATION_RULE,
    RATE_RULE,
    STEPS_RULE,
    TIME_RULE,
    duration_ok,
    rate_ok,
    steps_ok,
    time_ok,
)
from apportion.v1 import snapshot_pb2 as snapshot_pb


@dataclass(frozen=True)
class CurrentPlacement:
    """Where a running job is (`JobHistory.current`), resolved against the cluster."""

    type_index: int
    devices: int
    """Devices held (`Placement.devices`, 0 = the job's scale factor)."""
    busy_until_s: float
    nodes: tuple[int, ...]
    """Indices into `Cluster.node_names`."""


def read_placement(
    cur: snapshot_pb.Placement,
    path: str,
    scale_factor: int,
    cluster: Cluster,
    node_index: Mapping[str, int],
) -> tuple[CurrentPlacement | None, list[Violation]]:
    """The placement of a running job (None when not running or when invalid) and the
    violations found. Empty `accelerator_type` = not running."""
    if not cur.accelerator_type:
        if cur.devices or cur.nodes or cur.busy_until_s:
            return None, [Violation(f"{path}.accelerator_type",
                                    "must name the type of the running job")]
        return None, []
    names = cluster.type_names
    if cur.accelerator_type not in names:
        return None, [Violation(
            f"{path}.accelerator_type",
            f"unknown accelerator type {echo(cur.accelerator_type)}; the cluster has "
            f"{listing(names)}",
        )]
    j = names.index(cur.accelerator_type)
    out: list[Violation] = []
    if not 0 <= cur.devices <= limits.MAX_DEVICES_PER_TYPE:
        out.append(Violation(f"{path}.devices",
                             f"must be in [0, {limits.MAX_DEVICES_PER_TYPE}], got {cur.devices}"))
    if not time_ok(cur.busy_until_s):
        out.append(Violation(f"{path}.busy_until_s", f"{TIME_RULE}, got {cur.busy_until_s}"))
    nodes: list[int] = []
    for k, name in enumerate(cur.nodes):
        node = node_index.get(name)
        if node is None:
            out.append(Violation(f"{path}.nodes[{k}]", f"unknown node {echo(name)}"))
        elif cluster.node_type[node] != j:
            out.append(Violation(f"{path}.nodes[{k}]",
                                 f"node {echo(name)} holds no {echo(cur.accelerator_type)}"))
        else:
            nodes.append(node)
    if out:
        return None, out
    devices = cur.devices or scale_factor
    return CurrentPlacement(j, devices, float(cur.busy_until_s), tuple(nodes)), []


def _ftf_state(entry: snapshot_pb.JobHistory, path: str) -> tuple[float, float, list[Violation]]:
    """(iso, remaining) of the previous finish-time-fairness call (NaN, NaN when not given):
    both fields or neither."""
    has_iso = entry.HasField("previous_isolated_throughput")
    has_rem = entry.HasField("previous_remaining_steps")
    if has_iso != has_rem:
        missing = "previous_remaining_steps" if has_iso else "previous_isolated_throughput"
        return math.nan, math.nan, [
            Violation(f"{path}.{missing}", "must be given together with the other")
        ]
    if not has_iso:
        return math.nan, math.nan, []
    iso, rem = entry.previous_isolated_throughput, entry.previous_remaining_steps
    if not (iso > 0 and rate_ok(iso)):
        return math.nan, math.nan, [Violation(f"{path}.previous_isolated_throughput",
                                              f"must be > 0 and {RATE_RULE}, got {iso}")]
    if not steps_ok(rem):
        return math.nan, math.nan, [
            Violation(f"{path}.previous_remaining_steps", f"{STEPS_RULE}, got {rem}")
        ]
    return float(iso), float(rem), []


def history_to_model(
    msg: snapshot_pb.Snapshot, cluster: Cluster, jobs: Jobs, violations: list[Violation]
) -> History:
    """The snapshot's history aligned with `jobs`, appending every violation found."""
    m = jobs.num_jobs
    history = History.default(m, cluster.num_types)
    hist = msg.history
    # the id -> row map only when the history names jobs (a 100,000-job map costs ~10 ms)
    job_index = {job_id: i for i, job_id in enumerate(jobs.ids)} if hist.jobs else {}
    type_index = {name: j for j, name in enumerate(cluster.type_names)}
    node_index = {name: k for k, name in enumerate(cluster.node_names)}
    elapsed = hist.elapsed_since_reset_s
    if not duration_ok(elapsed):
        violations.append(Violation("snapshot.history.elapsed_since_reset_s",
                                    f"{DURATION_RULE}, got {elapsed}"))
        elapsed = 0.0
    received, isolated = history.received_time_s, history.cumulative_isolated_time_s
    restarts = history.restarts
    current_type, current_devices = history.current_type, history.current_devices
    busy_until, current_nodes = history.busy_until_s, list(history.current_nodes)
    prev_iso = history.previous_isolated_throughput
    prev_remaining = history.previous_remaining_steps
    held = np.zeros(cluster.num_types, np.int64)
    seen: dict[str, int] = {}
    for k, entry in enumerate(hist.jobs):
        p = f"snapshot.history.jobs[{k}]"
        i = job_index.get(entry.job_id)
        if i is None:
            violations.append(Violation(f"{p}.job_id", f"unknown job {echo(entry.job_id)}"))
            continue
        if entry.job_id in seen:
            violations.append(Violation(
                f"{p}.job_id",
                f"duplicate entry for {echo(entry.job_id)} (first at [{seen[entry.job_id]}])",
            ))
            continue
        seen[entry.job_id] = k
        for name, value in entry.received_time_s.items():
            fp = f"{p}.received_time_s{key(name)}"
            if name not in type_index:
                violations.append(Violation(fp, f"unknown accelerator type {echo(name)}"))
            elif not duration_ok(value):
                violations.append(Violation(fp, f"{DURATION_RULE}, got {value}"))
            elif value > elapsed * (1 + 1e-9) + 1e-9:
                violations.append(
                    Violation(fp, f"{value} s is more than elapsed_since_reset_s ({elapsed} s)")
                )
            else:
                received[i, type_index[name]] = value
        for name in entry.previous_time_share:
            if name not in type_index:
                violations.append(Violation(f"{p}.previous_time_share{key(name)}",
                                            f"unknown accelerator type {echo(name)}"))
        c = entry.cumulative_isolated_time_s
        if not duration_ok(c):
            violations.append(Violation(f"{p}.cumulative_isolated_time_s",
                                        f"{DURATION_RULE}, got {c}"))
        else:
            isolated[i] = c
        if entry.restarts < 0:
            violations.append(Violation(f"{p}.restarts", f"must be >= 0, got {entry.restarts}"))
        else:
            restarts[i] = entry.restarts
        prev_iso[i], prev_remaining[i], found = _ftf_state(entry, p)
        violations += found
        if not entry.HasField("current"):
            continue
        placed, found = read_placement(entry.current, f"{p}.current",
                                       int(jobs.scale_factor[i]), cluster, node_index)
        violations += found
        if placed is None:
            continue
        j = placed.type_index
        if held[j] + placed.devices > cluster.count[j]:
            violations.append(Violation(
                f"{p}.current.devices",
                f"running jobs would hold {held[j] + placed.devices} devices of type "
                f"{echo(cluster.type_names[j])}, which has {int(cluster.count[j])}",
            ))
            continue
        held[j] += placed.devices
        current_type[i], current_devices[i] = j, placed.devices
        busy_until[i], current_nodes[i] = placed.busy_until_s, placed.nodes
    reference, state = reference_finish_times(msg, job_index, m, violations)
    return replace(
        history,
        elapsed_since_reset_s=float(elapsed),
        current_nodes=tuple(current_nodes),
        reference_finish_time_s=reference,
        reference_state=state,
        colocated_with=history_partners(msg, jobs, violations),
    )


