"""Trace -> snapshot (T6, docs/datasets.md): the `apportion.v1.SolveRequest` at time t.

A job is *active* at t when it arrived at or before t (`arrival_s <= t`) and had not finished
(`start + duration > t`; unknown duration = not finished). The start is the trace's own when
it has start times (a job without one in such a trace: its arrival, counted as a guess); a
trace with none (Gavel, Shockwave, Sia) gets them from a first-come-first-served replay on the
cluster's devices (`fifo_start_times`, counted; `start_times="arrival"` instead assumes every
job runs from its arrival). Running jobs (started by t) get progress `(t - start) / duration`
of their steps; pending jobs 0.

Throughputs (no real trace has them, step 2 of the recipe): a job whose `job_type` and
scale factor are a key of the throughput table uses that row; any other job gets a job type
drawn (seeded, per table row, independent of t) uniformly among the templates at its scale
factor (counted). Scale factor = the GPU count rounded up to a power of two, at most
`max_scale_factor` (fractional GPUs -> 1), each change counted; with `gpus="exact"` the GPU
count itself (a fractional one excludes the job). `total_steps` = duration x reference-type
throughput (counted as a guess), or the trace's own `total_steps`.

Every step that changes or guesses a value is counted in `BuildReport` (`changed`,
`guessed`), and every job left out in `excluded`; `apportion snapshot` prints them.

Active jobs that cannot be served are left out and counted in `BuildReport.excluded`:
zero/negative/unknown GPUs, negative duration, no usable type (throughput > 0 on a type
with at least scale-factor devices).

Co-location (space sharing, optional): with `colocations=True` and a table that has pair
entries, every job gets `job_type` = its table key as `"<job type> x<scale factor>"` (pair
rates differ per scale factor), and `type_colocations` lists every pair of keys present in
the snapshot that the table has a rate for on some usable type (both orders in the table are
one entry here; same-key pairs included), so the `_packed` policies can read them.

Shockwave inputs (optional, T2.2, docs/datasets.md): with `epoch_profiles` (per-epoch profiles keyed
by job id, e.g. `profiles_by_job_id(read_shockwave_profiles(path))` or
`builtin_epoch_profiles(table)`), every job gets `epoch_profile` (epoch durations in s on its
full gang, batch sizes in samples) and `progress.total_epochs` = the profiled epochs;
`progress.epochs_done` = the profiled epochs completed in the job's run time `t - start`
(epoch e is done when the durations of epochs 0..e sum to at most `t - start`; pending jobs
0; it reaches `total_epochs` when the profile is shorter than the trace's duration). A job
without a profile, whose profile's batch sizes and durations differ in length, or whose
profile's scale factor is neither its GPU count nor its scale factor is excluded (counted).

Sia / Pollux inputs (optional, T2.3, docs/datasets.md): with `goodputs` (a `GoodputSource`: job id
and the trace's job type -> (type, nodes, devices, goodput samples/s) rows, e.g.
`builtin_goodputs(cluster)` or `profile_goodputs(directory)`), every job gets
`configurations`; rows that do not fit the snapshot's node layout (unknown type, more nodes
than the type has, devices outside [nodes, nodes x devices per node], goodput not > 0) are
dropped, and a job with no row left, or no table at all, is excluded (counted).
"""

from __future__ import annotations

import heapq
import json
import math
import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from apportion.datasets.cluster import ClusterSpec, NodeSpec
from apportion.datasets.generators import (
    goodput_rows,
    node_devices_per_type,
    reference_throughput,
    shockwave_profiles,
)
from apportion.datasets.shockwave import EpochProfile
from apportion.datasets.snapshot_modes import GPU_MODES, START_MODES
from apportion.datasets.table import JobTable
from apportion.datasets.throughput import JobKey, ThroughputTable
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

GoodputRow = tuple[str, int, int, float]
"""One configuration: (accelerator type, nodes, devices, goodput in samples/s)."""
GoodputSource = Callable[[str, str], Sequence[GoodputRow] | None]
"""(job id, the trace's job type) -> the job's goodput rows; None = no table for the job."""


@dataclass
class BuildReport:
    """What a snapshot holds and every step that changed or guessed something on the way:
    `excluded` (jobs left out), `changed` (jobs kept with a value altered) and `guessed`
    (jobs kept with a value the trace does not have), each reason with its count."""

    time_s: float
    active: int = 0
    running: int = 0
    pending: int = 0
    included: int = 0
    excluded: Counter[str] = field(default_factory=Counter)
    changed: Counter[str] = field(default_factory=Counter)
    guessed: Counter[str] = field(default_factory=Counter)

    @property
    def sampled_job_types(self) -> int:
        return self.guessed[SAMPLED_JOB_TYPE]

    def summary(self) -> str:
        parts = [
            f"t={self.time_s:g} s: {self.active} active jobs ({self.running} running, "
            f"{self.pending} pending), {self.included} in the snapshot"
        ]
        for word, counts in (("excluded", self.excluded), ("changed", self.changed),
                             ("guessed", self.guessed)):
            parts += [f"  {word} {n}: {reason}" for reason, n in sorted(counts.items())]
        return "\n".join(parts)


SAMPLED_JOB_TYPE = "job type drawn from the throughput table (the trace's is not a key of it)"
STEPS_FROM_DURATION = "total steps = duration x the reference type's throughput"
RAISED_TO_ONE = "fractional GPU count raised to 1 (--gpus exact keeps it: excluded)"
ROUNDED_UP = "GPU count rounded up to a power of two (--gpus exact keeps it)"
FIFO_START = "start time from a FIFO replay on the cluster (the trace has none; --start-times)"
ARRIVAL_START = "start time unknown: running since arrival assumed"


def end_times(table: JobTable, start_s: np.ndarray | None = None) -> np.ndarray:
    """When each job finishes: start (`start_s`, default the trace's, else the arrival) plus
    duration; inf for an unknown duration."""
    if start_s is None:
        start_s = np.where(np.isnan(table.start_s), table.arrival_s, table.start_s)
    start_s = np.where(np.isnan(start_s), np.inf, start_s)  # never starts: never ends
    return np.where(np.isnan(table.duration_s), np.inf, start_s + table.duration_s)


def active_mask(table: JobTable, time_s: float, start_s: np.ndarray | None = None) -> np.ndarray:
    """Jobs that arrived at or before `time_s` and had not finished by then."""
    return (table.arrival_s <= time_s) & (end_times(table, start_s) > time_s)


def scale_factors(gpus: np.ndarray, max_scale_factor: int = 8) -> np.ndarray:
    """GPU count -> power of two >= it (fractions -> 1), capped at `max_scale_factor`."""
    g = np.where(np.isfinite(gpus) & (gpus > 0), gpus, 1.0)
    s = 2.0 ** np.ceil(np.log2(np.maximum(g, 1.0)))
    return np.minimum(s, max_scale_factor).astype(np.int64)


def exact_scale_factors(gpus: np.ndarray) -> np.ndarray:
    """GPU count as it is; 0 for a fractional, non-positive or unknown count."""
    whole = np.isfinite(gpus) & (gpus >= 1) & (np.floor(gpus) == gpus)
    return np.where(whole, np.where(whole, gpus, 0), 0).astype(np.int64)


def fifo_start_times(arrival_s: np.ndarray, duration_s: np.ndarray, devices: np.ndarray,
                     total_devices: int) -> np.ndarray:
    """Start times (s) of jobs run first come, first served on `total_devices` devices: in
    arrival order, each starts when every earlier job has started and enough devices are
    free (an unknown duration holds its devices for good); NaN = never starts (it needs more
    devices than will ever be free, or waits behind one that does)."""
    order = np.argsort(arrival_s, kind="stable")
    start = np.full(len(arrival_s), np.nan)
    running: list[tuple[float, int]] = []  # heap of (end, devices)
    free, clock = total_devices, -math.inf
    for k in order:
        need = int(devices[k])
        clock = max(clock, float(arrival_s[k]))
        while running and running[0][0] <= clock:  # release what ended meanwhile
            free += heapq.heappop(running)[1]
        while free < need and running and math.isfinite(running[0][0]):
            end, held = heapq.heappop(running)
            clock, free = end, free + held
        if free < need:
            break  # never enough devices: this job and every later one never start
        start[k] = clock
        free -= need
        duration = float(duration_s[k])
        heapq.heappush(running, (clock + duration if math.isfinite(duration) else math.inf,
                                 need))
    return start


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
    epoch_profiles: Mapping[str, EpochProfile] | None = None,
    goodputs: GoodputSource | None = None,
    gpus: str = "power-of-two",
    start_times: str = "fifo",
) -> tuple[service_pb.SolveRequest, BuildReport]:
    """The snapshot of `table` at `time_s` (s on the table's clock) on `cluster`; with
    `colocations`, job types and type-pair throughputs from the table's pair entries; with
    `epoch_profiles` (by job id), Shockwave's per-epoch inputs; with `goodputs`, Sia's
    per-configuration goodputs (see the module docstring). `gpus` (`GPU_MODES`) says how GPU
    counts become scale factors, `start_times` (`START_MODES`) how a trace without start
    times gets them. Every change and guess is counted in the report."""
    if gpus not in GPU_MODES:
        raise ValueError(f"gpus must be one of {', '.join(GPU_MODES)}, got {gpus!r}")
    if start_times not in START_MODES:
        raise ValueError(f"start_times must be one of {', '.join(START_MODES)}")
    report = BuildReport(time_s)
    exact = gpus == "exact"
    scale = exact_scale_factors(table.gpus) if exact else scale_factors(table.gpus,
                                                                        max_scale_factor)
    start, start_guess = _start_times(table, scale, cluster.total, start_times)
    idx = np.flatnonzero(active_mask(table, time_s, start))
    report.active = len(idx)
    # job types for every row (so that a job keeps its type in every snapshot)
    keys, drawn = row_job_keys(table, throughputs, scale, seed)
    job_types = table.column("job_type")
    tenants = table.column("tenant")
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
    layout = node_shapes(node_sizes(cluster, include_nodes))
    seen: set[str] = set()
    keys_present: dict[JobKey, str] = {}
    for k in idx:
        job_gpus, duration = table.gpus[k], table.duration_s[k]
        if not np.isfinite(job_gpus) or job_gpus <= 0:
            report.excluded["zero, negative or unknown GPU count"] += 1
            continue
        if duration < 0:
            report.excluded["negative duration"] += 1
            continue
        s = int(scale[k])
        if s == 0:
            report.excluded["fractional GPU count (--gpus exact)"] += 1
            continue
        key = keys[k]
        sampled = bool(drawn[k])
        if key is None:
            report.excluded[f"no job type at scale factor {s} in the throughput table"] += 1
            continue
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
        profile = None
        if epoch_profiles is not None:
            profile = epoch_profiles.get(job_id)
            problem = profile_problem(profile, float(job_gpus), s)
            if problem:
                report.excluded[problem] += 1
                continue
        configurations: list[GoodputRow] = []
        if goodputs is not None:
            rows = goodputs(job_id, str(job_types[k]))
            if rows is None:
                report.excluded["no goodput table for the job"] += 1
                continue
            configurations = [r for r in rows if configuration_fits(r, layout)]
            if not configurations:
                report.excluded["no goodput configuration fits the cluster"] += 1
                continue
            if len(configurations) < len(rows):
                report.changed["goodput configurations dropped: they do not fit the nodes "
                               "(--nodes)"] += 1
        seen.add(job_id)
        _count_gpu_changes(report, float(job_gpus), s, max_scale_factor)
        if sampled:
            report.guessed[SAMPLED_JOB_TYPE] += 1
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
            report.guessed[STEPS_FROM_DURATION] += 1
        running = bool(start[k] <= time_s)  # (NaN: never starts)
        report.running += int(running)
        report.pending += int(not running)
        if start_guess[k]:
            report.guessed[start_guess[k]] += 1
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
        if profile is not None:
            job.epoch_profile.epoch_duration_s.extend(profile.duration_every_epoch_s)
            job.epoch_profile.batch_size.extend(profile.bs_every_epoch)
            job.progress.total_epochs = len(profile.duration_every_epoch_s)
            if running:
                job.progress.epochs_done = epochs_done(
                    profile.duration_every_epoch_s, time_s - float(start[k])
                )
        for acc_type, nodes, devices, goodput in configurations:
            conf = job.configurations.add()
            conf.accelerator_type, conf.nodes, conf.devices = acc_type, int(nodes), int(devices)
            conf.goodput = float(goodput)
        report.included += 1
    if colocations and throughputs.pairs:
        _attach_type_pairs(snap, throughputs, keys_present, cluster)
    return request, report


def row_job_keys(
    table: JobTable, throughputs: ThroughputTable, scale: np.ndarray, seed: int = 0
) -> tuple[list[JobKey | None], np.ndarray]:
    """Each row's throughput-table key and whether it was drawn: the row's own (job type,
    scale factor) when the table has it, else a type drawn (seeded by `seed`, one draw per row
    independent of the snapshot time) uniformly among the table's keys at the row's scale
    factor; None when the table has no key at that scale factor."""
    rng = np.random.default_rng(seed)
    draws = rng.random(len(table))
    keys_by_scale = {s: throughputs.job_keys(s) for s in {int(x) for x in np.unique(scale)}}
    job_types = table.column("job_type")
    keys: list[JobKey | None] = []
    drawn = np.zeros(len(table), dtype=bool)
    for k in range(len(table)):
        s = int(scale[k])
        key: JobKey = (str(job_types[k]), s)
        if key not in throughputs.isolated:
            options = keys_by_scale.get(s) or []
            if not options:
                keys.append(None)
                continue
            key = options[int(draws[k] * len(options))]
            drawn[k] = True
        keys.append(key)
    return keys, drawn


def _start_times(
    table: JobTable, scale: np.ndarray, total_devices: int, mode: str
) -> tuple[np.ndarray, list[str]]:
    """Each job's start (s; NaN = never) and, where it is a guess, why (`FIFO_START`,
    `ARRIVAL_START`; "" = the trace's own)."""
    known = ~np.isnan(table.start_s)
    if known.all():
        return table.start_s, [""] * len(table)
    if known.any() or mode == "arrival":
        start = np.where(known, table.start_s, table.arrival_s)
        return start, ["" if k else ARRIVAL_START for k in known]
    start = fifo_start_times(table.arrival_s, table.duration_s, scale, total_devices)
    return start, [FIFO_START] * len(table)


def _count_gpu_changes(report: BuildReport, gpus: float, scale: int, cap: int) -> None:
    """Count how the job's GPU count was changed to become its scale factor."""
    if gpus == scale:
        return
    if gpus < 1:
        report.changed[RAISED_TO_ONE] += 1
    elif gpus > scale:
        report.changed[f"GPU count above {cap} capped at {cap} (--gpus exact keeps it)"] += 1
    else:
        report.changed[ROUNDED_UP] += 1


def epochs_done(durations_s: Sequence[float], run_time_s: float) -> int:
    """Profiled epochs completed in `run_time_s` s of running: the largest e with
    durations[0] + ... + durations[e-1] <= run_time_s (0 for a run time <= 0)."""
    if run_time_s <= 0 or not len(durations_s):
        return 0
    return int(np.searchsorted(np.cumsum(durations_s), run_time_s, side="right"))


def profile_problem(profile: EpochProfile | None, gpus: float, scale: int) -> str:
    """Why `profile` cannot describe a job with `gpus` GPUs at scale factor `scale` ("" = ok)."""
    if profile is None:
        return "no epoch profile for the job"
    durations, sizes = profile.duration_every_epoch_s, profile.bs_every_epoch
    if not durations or len(durations) != len(sizes):
        return "epoch profile: batch sizes and epoch durations differ in length (or are empty)"
    if any(not (math.isfinite(d) and d > 0) for d in durations) or any(b <= 0 for b in sizes):
        return "epoch profile: epoch durations and batch sizes must be > 0"
    if profile.scale_factor not in (scale, math.ceil(gpus)):
        return "epoch profile: scale factor differs from the job's GPU count"
    return ""


def node_sizes(cluster: ClusterSpec, include_nodes: bool = True) -> dict[str, list[int]]:
    """Devices of each node per type as the snapshot describes them: the cluster's nodes (when
    `include_nodes`), else one node holding the type's count (sia's virtual node)."""
    sizes: dict[str, list[int]] = {}
    if include_nodes:
        for node in cluster.nodes:
            sizes.setdefault(node.accelerator_type, []).append(node.devices)
    for t, count in zip(cluster.types, cluster.counts, strict=True):
        if t not in sizes and count > 0:
            sizes[t] = [count]
    return sizes


def node_shapes(sizes: Mapping[str, Sequence[int]]) -> dict[str, tuple[int, int]]:
    """Per type of `sizes` (`node_sizes`) with nodes: (its nodes, the largest node's
    devices), what `configuration_fits` checks a row against."""
    return {t: (len(devices), max(devices)) for t, devices in sizes.items() if devices}


def configuration_fits(row: GoodputRow, shapes: Mapping[str, tuple[int, int]]) -> bool:
    """`row` is a configuration the snapshot's validation accepts on the node layout
    `shapes` (`node_shapes`)."""
    acc_type, nodes, devices, goodput = row
    shape = shapes.get(acc_type)
    if shape is None:
        return False
    return (
        1 <= nodes <= shape[0]
        and nodes <= devices <= nodes * shape[1]
        and math.isfinite(goodput)
        and goodput > 0
    )


def profiles_by_job_id(profiles: Sequence[EpochProfile]) -> dict[str, EpochProfile]:
    """Profiles keyed by `str(job_id)` (the trace's job ids: Gavel/Shockwave traces number
    jobs by line, from 0). Raises ValueError on a repeated job id."""
    out: dict[str, EpochProfile] = {}
    for p in profiles:
        key = str(p.job_id)
        if key in out:
            raise ValueError(f"epoch profiles: job_id {p.job_id} appears twice")
        out[key] = p
    return out


def builtin_epoch_profiles(table: JobTable, seed: int = 0) -> dict[str, EpochProfile]:
    """Synthetic per-epoch profiles (`generators.shockwave_profiles`) of every row of
    `table`, keyed by the row's job id (each job's durations sum to its trace duration)."""
    return {str(table.id[p.job_id]): p for p in shockwave_profiles(table, seed=seed)}


def builtin_goodputs(
    cluster: ClusterSpec, seed: int = 0, *, include_nodes: bool = True, max_gpus: int = 16
) -> GoodputSource:
    """Synthetic Sia goodput tables (`generators.sia_goodputs`), one per job, seeded by
    (`seed`, job id) so that a job keeps its table in every snapshot; laid out on the
    snapshot's nodes (one node per type when the cluster has none)."""
    sizes = node_sizes(cluster, include_nodes)
    nodes = tuple(
        NodeSpec(f"{t}-{n}", t, d) for t, ds in sizes.items() for n, d in enumerate(ds)
    )
    per_node = node_devices_per_type(ClusterSpec(cluster.types, cluster.counts, nodes))

    def source(job_id: str, job_type: str) -> list[GoodputRow]:
        job_seed = zlib.crc32(f"{seed}/{job_id}".encode())
        return goodput_rows(cluster.types, cluster.counts, per_node, seed=job_seed,
                            max_gpus=max_gpus)

    return source


def profile_goodputs(directory: str | Path) -> GoodputSource:
    """Goodput tables from Sia's per-application profiles: `directory/<application>/
    placements-<gpu>.csv` (T2.3, docs/datasets.md), matched by the job's type (the Sia workload's
    `application`). A row per (type, nodes, GPUs) with the best profiled samples/s over local
    batch sizes (`SiaProfile.configurations`): a throughput used as the goodput (statistical
    efficiency is not applied). An application without a directory gives None."""
    from apportion.datasets.sia import read_sia_app_profiles

    root = Path(directory)
    if not root.is_dir():
        raise ValueError(f"{directory}: not a directory of Sia application profiles")
    cache: dict[str, list[GoodputRow] | None] = {}

    def source(job_id: str, job_type: str) -> list[GoodputRow] | None:
        if job_type not in cache:
            app = root / job_type
            if not job_type or "/" in job_type or not app.is_dir():
                cache[job_type] = None
            else:
                try:
                    cache[job_type] = read_sia_app_profiles(app).configurations()
                except FileNotFoundError:
                    cache[job_type] = None
        return cache[job_type]

    return source


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
