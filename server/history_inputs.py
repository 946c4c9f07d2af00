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
from apportion.solver.model import Cluster, FloatArray, History, Jobs
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


def _valid_placement(
    cur: snapshot_pb.Placement,
    busy_ok: bool,
    scale_factor: int,
    type_index: Mapping[str, int],
    node_index: Mapping[str, int],
    node_type: list[int],
) -> CurrentPlacement | None:
    """`read_placement`'s placement when the job runs and everything about it is valid
    (`busy_ok`: its busy_until_s is), without building a violation; None otherwise (then
    `read_placement` says what is wrong, or that the job is not running)."""
    j = type_index.get(cur.accelerator_type) if cur.accelerator_type else None
    if j is None or not busy_ok or not 0 <= cur.devices <= limits.MAX_DEVICES_PER_TYPE:
        return None
    nodes = [node_index.get(name, -1) for name in cur.nodes]
    for node in nodes:
        if node < 0 or node_type[node] != j:
            return None
    return CurrentPlacement(j, cur.devices or scale_factor, float(cur.busy_until_s),
                            tuple(nodes))


def _unknown_type(path: str, name: str) -> Violation:
    """A map entry (at `path` + its key) naming a type the cluster does not have."""
    return Violation(f"{path}{key(name)}", f"unknown accelerator type {echo(name)}")


def _received(shares: list[tuple[int, int, float, int, str]], elapsed: float,
              received: FloatArray, violations: list[Violation]) -> None:
    """The received_time_s entries (row, type, value, history entry, type name) of known types
    into `received` (s), checked as a column: each a duration, at most elapsed_since_reset_s."""
    if not shares:
        return
    value = np.array([share[2] for share in shares], np.float64)
    fits = value <= elapsed * (1 + 1e-9) + 1e-9
    ok = duration_ok(value) & fits
    for n in np.flatnonzero(~ok).tolist():
        _, _, v, k, name = shares[n]
        path = f"snapshot.history.jobs[{k}].received_time_s{key(name)}"
        if not duration_ok(v):
            violations.append(Violation(path, f"{DURATION_RULE}, got {v}"))
        else:
            violations.append(
                Violation(path, f"{v} s is more than elapsed_since_reset_s ({elapsed} s)"))
    rows = np.array([share[0] for share in shares], np.int64)
    columns = np.array([share[1] for share in shares], np.int64)
    received[rows[ok], columns[ok]] = value[ok]


def history_to_model(
    msg: snapshot_pb.Snapshot, cluster: Cluster, jobs: Jobs, violations: list[Violation]
) -> History:
    """The snapshot's history aligned with `jobs`, appending every violation found."""
    m = jobs.num_jobs
    history = History.default(m, cluster.num_types)
    hist = msg.history
    # the id -> row map only when the history names jobs (a 100,000-job map costs ~10 ms)
    job_index = jobs.row if hist.jobs else {}
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
    held = [0] * cluster.num_types
    count, scale_factor = cluster.count.tolist(), jobs.scale_factor.tolist()
    node_type = cluster.node_type.tolist()
    seen: dict[str, int] = {}
    entries = list(hist.jobs)
    # the scalar fields of every entry checked as columns, the values gathered in lists and
    # written at the end (a numpy call per value costs more than the rest of an entry)
    isolated_ok = duration_ok(np.array([e.cumulative_isolated_time_s for e in entries],
                                       np.float64)).tolist()
    running = [e.current for e in entries if e.HasField("current")]
    busy_ok = iter(time_ok(np.array([c.busy_until_s for c in running], np.float64)).tolist())
    shares: list[tuple[int, int, float, int, str]] = []
    """(row, type, value, entry, type name) of every received_time_s entry of a known type."""
    isolated_at: list[tuple[int, float]] = []
    restarts_at: list[tuple[int, int]] = []
    placed_at: list[tuple[int, CurrentPlacement]] = []
    for k, entry in enumerate(entries):
        current = entry.current if entry.HasField("current") else None
        current_ok = next(busy_ok) if current is not None else False
        job_id = entry.job_id
        i = job_index.get(job_id)
        if i is None or job_id in seen:
            violations.append(Violation(
                f"snapshot.history.jobs[{k}].job_id", f"unknown job {echo(job_id)}" if i is None
                else f"duplicate entry for {echo(job_id)} (first at [{seen[job_id]}])"))
            continue
        seen[job_id] = k
        for name, value in entry.received_time_s.items():
            j = type_index.get(name)
            if j is None:
                violations.append(_unknown_type(f"snapshot.history.jobs[{k}].received_time_s",
                                                name))
            else:
                shares.append((i, j, value, k, name))
        for name in entry.previous_time_share:
            if name not in type_index:
                violations.append(_unknown_type(
                    f"snapshot.history.jobs[{k}].previous_time_share", name))
        if isolated_ok[k]:
            isolated_at.append((i, entry.cumulative_isolated_time_s))
        else:
            violations.append(Violation(f"snapshot.history.jobs[{k}].cumulative_isolated_time_s",
                                        f"{DURATION_RULE}, got {entry.cumulative_isolated_time_s}"))
        if entry.restarts >= 0:
            restarts_at.append((i, entry.restarts))
        else:
            violations.append(Violation(f"snapshot.history.jobs[{k}].restarts",
                                        f"must be >= 0, got {entry.restarts}"))
        if entry.HasField("previous_isolated_throughput") or entry.HasField(
                "previous_remaining_steps"):
            prev_iso[i], prev_remaining[i], found = _ftf_state(entry, f"snapshot.history.jobs[{k}]")
            violations += found
        if current is None:
            continue
        placed = _valid_placement(current, current_ok, scale_factor[i], type_index, node_index,
                                  node_type)
        if placed is None:
            placed, found = read_placement(current, f"snapshot.history.jobs[{k}].current",
                                           scale_factor[i], cluster, node_index)
            violations += found
        if placed is None:
            continue
        j = placed.type_index
        if held[j] + placed.devices > count[j]:
            violations.append(Violation(
                f"snapshot.history.jobs[{k}].current.devices",
                f"running jobs would hold {held[j] + placed.devices} devices of type "
                f"{echo(cluster.type_names[j])}, which has {count[j]}",
            ))
            continue
        held[j] += placed.devices
        placed_at.append((i, placed))
    for i, c in isolated_at:
        isolated[i] = c
    for i, r in restarts_at:
        restarts[i] = r
    for i, placed in placed_at:
        current_type[i], current_devices[i] = placed.type_index, placed.devices
        busy_until[i], current_nodes[i] = placed.busy_until_s, placed.nodes
    _received(shares, elapsed, received, violations)
    reference, state = reference_finish_times(msg, job_index, m, violations)
    return replace(
        history,
        elapsed_since_reset_s=float(elapsed),
        current_nodes=tuple(current_nodes),
        reference_finish_time_s=reference,
        reference_state=state,
        colocated_with=history_partners(msg, jobs, violations),
    )


