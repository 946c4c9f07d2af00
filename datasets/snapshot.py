"""Trace -> snapshot (data.md section 6): the `apportion.v1.SolveRequest` at time t.

A job is *active* at t when it arrived at or before t (`arrival_s <= t`) and had not finished
(`start + duration > t`, start = `start_s` when known, else the arrival; unknown duration =
not finished). Running jobs (started by t) get progress `(t - start) / duration` of their
steps; pending jobs 0.

Throughputs (no real trace has them, step 2 of the recipe): a job whose `job_type` and
scale factor are a key of the throughput table uses that row; any other job gets a job type
drawn (seeded, per table row, independent of t) uniformly among the templates at its scale
factor. Scale factor = the GPU count rounded up to a power of two, at most
`max_scale_factor` (fractional GPUs -> 1). `total_steps` = duration x reference-type
throughput (or the trace's own `total_steps`).

Active jobs that cannot be served are left out and counted in `BuildReport.excluded`:
zero/negative/unknown GPUs, negative duration, no usable type (throughput > 0 on a type
with at least scale-factor devices).

Co-location (space sharing, optional): with `colocations=True` and a table that has pair
entries, every job gets `job_type` = its table key as `"<job type> x<scale factor>"` (pair
rates differ per scale factor), and `type_colocations` lists every pair of keys present in
the snapshot that the table has a rate for on some usable type (both orders in the table are
one entry here; same-key pairs included), so the `_packed` policies can read them.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from apportion.datasets.cluster import ClusterSpec
from apportion.datasets.generators import reference_throughput
from apportion.datasets.table import JobTable
from apportion.datasets.throughput import JobKey, ThroughputTable
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb


@dataclass
class BuildReport:
    time_s: float
    active: int = 0
    running: int = 0
    pending: int = 0
    included: int = 0
    excluded: Counter[str] = field(default_factory=Counter)
    sampled_job_types: int = 0

    def summary(self) -> str:
        parts = [
            f"t={self.time_s:g} s: {self.active} active jobs ({self.running} running, "
            f"{self.pending} pending), {self.included} in the snapshot"
        ]
        parts += [f"  excluded {n}: {reason}" for reason, n in sorted(self.excluded.items())]
        if self.sampled_job_types:
            parts.append(f"  {self.sampled_job_types} job types drawn from the throughput table")
        return "\n".join(parts)


def end_times(table: JobTable) -> np.ndarray:
    start = np.where(np.isnan(table.start_s), table.arrival_s, table.start_s)
    return np.where(np.isnan(table.duration_s), np.inf, start + table.duration_s)


def active_mask(table: JobTable, time_s: float) -> np.ndarray:
    """Jobs that arrived at or before `time_s` and had not finished by then."""
    return (table.arrival_s <= time_s) & (end_times(table) > time_s)


def scale_factors(gpus: np.ndarray, max_scale_factor: int = 8) -> np.ndarray:
    """GPU count -> power of two >= it (fractions -> 1), capped at `max_scale_factor`."""
    g = np.where(np.isfinite(gpus) & (gpus > 0), gpus, 1.0)
    s = 2.0 ** np.ceil(np.log2(np.maximum(g, 1.0)))
    return np.minimum(s, max_scale_factor).astype(np.int64)


def build_request(
    table: JobTable,
    cluster: ClusterSpec,
    throughputs: ThroughputTable,
    time_s: float,
    *,
    seed: int = 0,
    policy: str = "weighted_max_min_fairness",
    round_duration_s: float = 0.0,
    reference_type: str = "v100",
    max_scale_factor: int = 8,
    include_nodes: bool = True,
    colocations: bool = False,
) -> tuple[service_pb.SolveRequest, BuildReport]:
    """The snapshot of `table` at `time_s` (s on the table's clock) on `cluster`; with
    `colocations`, job types and type-pair throughputs from the table's pair entries."""
    report = BuildReport(time_s)
    mask = active_mask(table, time_s)
    idx = np.flatnonzero(mask)
    report.active = len(idx)
    # job types for every row (so that a job keeps its type in every snapshot)
    scale = scale_factors(table.gpus, max_scale_factor)
    rng = np.random.default_rng(seed)
    draws = rng.random(len(table))
    keys_by_scale = {s: throughputs.job_keys(s) for s in {int(x) for x in np.unique(scale)}}
    job_types = table.column("job_type")
    tenants = table.column("tenant")
    start = np.where(np.isnan(table.start_s), table.arrival_s, table.start_s)
    counts = cluster.count

    request = service_pb.SolveRequest()
    request.policy.name = policy
    snap = request.snapshot
    snap.time_s = float(time_s)
    snap.round_duration_s = float(round_duration_s)
    for t in cluster.types:
        acc = snap.cluster.accelerator_types.add()
        acc.name = t
        acc.count = counts[t]
        if t in cluster.cost_per_hour:
            acc.cost_per_hour = cluster.cost_per_hour[t]
    if include_nodes:
        for node in cluster.nodes:
            msg = snap.cluster.nodes.add()
            msg.name, msg.accelerator_type, msg.devices = (
                node.name,
                node.accelerator_type,
                node.devices,
            )
            msg.cpus, msg.memory_gib = node.cpus, node.memory_gib
    seen: set[str] = set()
    keys_present: dict[JobKey, str] = {}
    for k in idx:
        gpus, duration = table.gpus[k], table.duration_s[k]
        if not np.isfinite(gpus) or gpus <= 0:
            report.excluded["zero, negative or unknown GPU count"] += 1
            continue
        if duration < 0:
            report.excluded["negative duration"] += 1
            continue
        s = int(scale[k])
        key = (str(job_types[k]), s)
        if key not in throughputs.isolated:
            options = keys_by_scale.get(s) or []
            if not options:
                report.excluded[f"no job type at scale factor {s} in the throughput table"] += 1
                continue
            key = options[int(draws[k] * len(options))]
            report.sampled_job_types += 1
        thr = {
            t: v for t, v in throughputs.throughput(key, cluster.types).items() if counts[t] >= s
        }
        if not thr:
            report.excluded["no usable accelerator type (throughput or devices)"] += 1
            continue
        job_id = str(table.id[k])
        if job_id in seen:
            report.excluded["duplicate job id"] += 1
            continue
        seen.add(job_id)
        job = snap.jobs.add()
        job.id = job_id
        if s != 1:
            job.scale_factor = s
        weight = table.priority_weight[k]
        if np.isfinite(weight) and weight > 0 and weight != 1.0:
            job.priority_weight = float(weight)
        job.tenant = str(tenants[k])
        job.arrival_time_s = float(table.arrival_s[k])
        for t in cluster.types:  # cluster order: deterministic output
            if t in thr:
                job.throughput[t] = thr[t]
        total = table.total_steps[k]
        if not np.isfinite(total) and np.isfinite(duration):
            total = duration * reference_throughput(throughputs, key, reference_type)
        running = start[k] <= time_s
        report.running += int(running)
        report.pending += int(not running)
        if np.isfinite(total) and total > 0:
            done = 0.0
            if running and np.isfinite(duration) and duration > 0:
                done = total * min(max((time_s - start[k]) / duration, 0.0), 1.0)
            job.progress.total_steps = float(round(total, 6))
            job.progress.steps_done = float(round(done, 6))
        slo = table.slo_factor[k]
        if np.isfinite(slo) and slo > 0 and np.isfinite(duration):
            job.deadline_s = float(table.arrival_s[k] + slo * duration)
        if colocations and throughputs.pairs:
            job.job_type = keys_present.setdefault(key, job_type_key(key))
        report.included += 1
    if colocations and throughputs.pairs:
        _attach_type_pairs(snap, throughputs, keys_present, cluster)
    return request, report


def job_type_key(key: JobKey) -> str:
    """`Job.job_type` of a throughput-table key: pair rates depend on the scale factor too."""
    return f"{key[0]} x{key[1]}"


def _attach_type_pairs(snap: snapshot_pb.Snapshot, throughputs: ThroughputTable,
                       keys: dict[JobKey, str], cluster: ClusterSpec) -> None:
    """`type_colocations` for the pairs of `keys` with a rate on some usable type."""
    present = sorted(keys)
    for ia, a in enumerate(present):
        for b in present[ia:]:
            if a[1] != b[1]:
                continue
            rows: dict[str, tuple[float, float]] = {}
            for t in cluster.types:
                if cluster.count[t] < a[1]:
                    continue
                both = throughputs.pairs.get(t, {}).get((a, b))
                if both is None:
                    flipped = throughputs.pairs.get(t, {}).get((b, a))
                    both = (flipped[1], flipped[0]) if flipped is not None else None
                if both is not None and (both[0] > 0 or both[1] > 0):
                    rows[t] = both
            if not rows:
                continue
            entry = snap.type_colocations.add()
            entry.type_a, entry.type_b = keys[a], keys[b]
            for t, (rate_a, rate_b) in rows.items():
                entry.throughput_a[t] = rate_a
                entry.throughput_b[t] = rate_b


def render_request(request: service_pb.SolveRequest) -> str:
    """Canonical proto3 JSON, two-space indent, maps in insertion (cluster) order."""
    from google.protobuf import json_format

    data = json_format.MessageToDict(request)
    order = [
        t["name"] for t in data.get("snapshot", {}).get("cluster", {}).get("acceleratorTypes", [])
    ]
    for job in data.get("snapshot", {}).get("jobs", []):
        thr = job.get("throughput", {})
        job["throughput"] = {
            k: thr[k] for k in [*order, *sorted(set(thr) - set(order))] if k in thr
        }
    return json.dumps(data, indent=2) + "\n"
