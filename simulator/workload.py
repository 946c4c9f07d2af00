"""The jobs a simulation replays: arrival, gang, amount of work and the true speed of every job
on every accelerator type, built once (from a trace, a generator or per-epoch profiles) and
shared by every policy of a run, so that policies are compared on the same jobs.

Work model. A job needs `total_steps` of work; on `scale_factor` devices of type j it makes
`throughput[i, j]` steps/s (0 = cannot run there). The sources:

* a trace (`JobTable`, any format `apportion snapshot` reads) with a throughput table: each job
  gets the throughput row of its job type, drawn from the table when the trace has none,
  exactly as `apportion snapshot` draws it (`datasets.snapshot.row_job_keys`, same seed);
  `total_steps` = the trace's own, else duration x the reference type's throughput (Gavel's
  recipe), else (no duration either, e.g. Sia workloads) a duration drawn from Gavel's
  distribution (60 x 10^U(1.5, 3) s w.p. 0.8, else 60 x 10^U(3, 4) s), seeded per job;
* per-epoch profiles (Shockwave): the work is the job's profiled seconds (epoch e takes
  `epoch_duration_s[e]` s on the full gang); its speed is 1 on the profiled type and, on a
  cluster with several types, the throughput table's ratio to the reference type (1 where the
  table has no row);
* goodput tables (Sia / Pollux configurations, `configurations`): per (type, nodes, devices)
  the job's goodput in samples/s; its `throughput` is then the goodput of `scale_factor`
  devices (what a rigid policy gets) and its work is in samples.

Jobs that cannot be simulated are left out and counted (`LoadReport.excluded`): unknown or
non-positive GPU counts, unknown arrivals, negative durations, no job type at the job's scale
factor, no usable accelerator type. A job whose gang is larger than every accelerator type is
an error naming the file, line and field: it could never run.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from apportion.datasets.cluster import ClusterSpec
from apportion.datasets.generators import reference_throughput
from apportion.datasets.shockwave import EpochProfile
from apportion.datasets.snapshot import (
    GoodputSource,
    configuration_fits,
    job_type_key,
    node_shapes,
    node_sizes,
    profile_problem,
    row_job_keys,
    scale_factors,
)
from apportion.datasets.table import JobTable
from apportion.datasets.throughput import JobKey, ThroughputTable
from apportion.simulator.errors import SimulationInputError
from apportion.solver.model import FloatArray, IntArray
from apportion.solver.sharing import ResourceGrid

MAX_JOBS = 1_000_000
"""Jobs a workload may hold (every per-job array is dense)."""

GoodputEntry = tuple[int, int, int, float]
"""One configuration of a job: (type index, nodes, devices, goodput in work units per s)."""

GPU_FIELD: Mapping[str, str] = {
    "gavel": "scale_factor",
    "shockwave": "scale_factor",
    "philly-csv": "num_gpus",
    "philly-json": "gpus",
    "helios": "gpu_num",
    "pai": "plan_gpu",
    "openb": "num_gpu",
    "sia": "num_replicas",
    "profiles": "scale_factor",
    "generated": "gpus",
}
"""The trace field that holds a job's GPU count, per format (for error messages)."""


@dataclass(frozen=True)
class PairRates:
    """True co-location speeds by job-type pair (space sharing): `rates[(a, b)]` is (n,) the
    steps/s of a job of type a on each accelerator type while it shares devices with a job
    of type b (0 = the pair cannot share there)."""

    rates: Mapping[tuple[str, str], FloatArray]
    type_a: tuple[str, ...]
    """The pairs as the snapshot lists them (each unordered pair once, with its rows)."""
    type_b: tuple[str, ...]
    rows_a: FloatArray
    rows_b: FloatArray


@dataclass(frozen=True)
class Workload:
    """Jobs in trace order; every array has the job axis first."""

    ids: tuple[str, ...]
    arrival_s: FloatArray
    """(m,) submission time (s, trace clock)."""
    scale_factor: IntArray
    """(m,) devices held while the job runs (its gang)."""
    throughput: FloatArray
    """(m, n) true work units/s of the whole job on `scale_factor` devices of type j."""
    total_steps: FloatArray
    """(m,) work the job needs (steps; profiled s for epoch-profile jobs; samples with
    goodput tables)."""
    priority_weight: FloatArray
    tenant: tuple[str, ...]
    deadline_s: FloatArray
    """(m,) absolute deadline (s); NaN = none."""
    job_type: tuple[str, ...]
    """Co-location key of each job ("" = none)."""
    epoch_duration_s: tuple[FloatArray, ...] = ()
    """Per job, profiled duration of each epoch on the full gang (s); empty = no profiles."""
    epoch_batch_size: tuple[IntArray, ...] = ()
    configurations: tuple[tuple[GoodputEntry, ...], ...] = ()
    """Per job, its goodput per configuration; empty = no goodput tables."""
    pairs: PairRates | None = None
    stage_s: FloatArray = field(default_factory=lambda: np.zeros((0, 4)))
    """(m, 4) time per iteration in storage, CPU, GPU and network (s; Muri's interleaving
    profile); empty = none (no trace format carries them: set them on the workload)."""
    resource_grid: tuple[ResourceGrid | None, ...] = ()
    """Per job, its true throughput over CPU cores and host memory per GPU, relative to its
    throughput at the GPU-proportional share (Synergy's profile; `simulator.host_resources`);
    empty = none."""
    lines: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(m,) line of each job in its source file (0 = unknown); empty = none known."""
    source: str = ""
    """Where the jobs came from (file name or generator), for reports."""

    @property
    def num_jobs(self) -> int:
        return len(self.ids)

    @property
    def standalone_s(self) -> FloatArray:
        """(m,) T_exclusive: the job's run time alone on its own devices of its fastest type
        (s)."""
        best = self.throughput.max(axis=1)
        return np.asarray(self.total_steps / best, dtype=np.float64)

    def take(self, index: Sequence[int] | IntArray) -> Workload:
        """The jobs `index`, in that order."""
        idx = np.asarray(index, dtype=np.int64)
        pick = idx.tolist()
        return replace(
            self,
            ids=tuple(self.ids[k] for k in pick),
            arrival_s=self.arrival_s[idx],
            scale_factor=self.scale_factor[idx],
            throughput=self.throughput[idx],
            total_steps=self.total_steps[idx],
            priority_weight=self.priority_weight[idx],
            tenant=tuple(self.tenant[k] for k in pick),
            deadline_s=self.deadline_s[idx],
            job_type=tuple(self.job_type[k] for k in pick),
            epoch_duration_s=tuple(self.epoch_duration_s[k] for k in pick)
            if self.epoch_duration_s
            else (),
            epoch_batch_size=tuple(self.epoch_batch_size[k] for k in pick)
            if self.epoch_batch_size
            else (),
            configurations=tuple(self.configurations[k] for k in pick)
            if self.configurations
            else (),
            stage_s=self.stage_s[idx] if self.stage_s.size else self.stage_s,
            resource_grid=tuple(self.resource_grid[k] for k in pick)
            if self.resource_grid
            else (),
            lines=self.lines[idx] if self.lines.size else self.lines,
        )

    def with_load(self, factor: float) -> Workload:
        """The same jobs arriving `factor` times as fast (inter-arrival times divided by
        `factor`, the first arrival kept)."""
        if not (math.isfinite(factor) and factor > 0):
            raise SimulationInputError(f"load factor must be finite and > 0, got {factor}")
        if self.num_jobs == 0:
            return self
        first = float(self.arrival_s.min())
        return replace(self, arrival_s=first + (self.arrival_s - first) / factor)


@dataclass
class LoadReport:
    """What building a workload kept, left out and drew."""

    source: str
    rows: int = 0
    kept: int = 0
    excluded: Counter[str] = field(default_factory=Counter)
    sampled_job_types: int = 0
    drawn_durations: int = 0

    def summary(self) -> str:
        lines = [f"{self.source}: {self.kept} of {self.rows} jobs simulated"]
        lines += [f"  excluded {n}: {reason}" for reason, n in sorted(self.excluded.items())]
        if self.sampled_job_types:
            lines.append(f"  {self.sampled_job_types} job types drawn from the throughput table")
        if self.drawn_durations:
            lines.append(
                f"  {self.drawn_durations} durations drawn from Gavel's distribution "
                "(the trace gives none)"
            )
        return "\n".join(lines)


def gavel_duration_s(rng: np.random.Generator) -> float:
    """Gavel's job duration (s): 60 x 10^U(1.5, 3) with probability 0.8, else 60 x 10^U(3, 4)."""
    if rng.random() < 0.8:
        return float(60.0 * 10.0 ** rng.uniform(1.5, 3.0))
    return float(60.0 * 10.0 ** rng.uniform(3.0, 4.0))


def source_lines(table: JobTable, fmt: str) -> IntArray:
    """The line of each row in its file where the format makes it known (one job per line
    and no row skipped): Gavel/Shockwave traces (no header, ids = row numbers from 0),
    Philly CSV (ids = line - 2) and Sia workloads (a header line); 0 elsewhere."""
    m = len(table)
    skipped = table.report.skipped if table.report is not None else 0
    if fmt == "philly-csv":
        try:
            return np.array([int(x) + 2 for x in table.id], np.int64)
        except ValueError:
            return np.zeros(m, np.int64)
    if skipped:
        return np.zeros(m, np.int64)
    if fmt in ("gavel", "shockwave"):
        return np.arange(1, m + 1, dtype=np.int64)
    if fmt == "sia":
        return np.arange(2, m + 2, dtype=np.int64)
    return np.zeros(m, np.int64)


def _where(path: str, lines: IntArray, k: int, job_id: str) -> str:
    line = int(lines[k]) if lines.size else 0
    place = f"{path}:{line}" if line else f"{path}: row {k + 1}"
    return f"{place} (job {job_id!r})"


def check_fits(
    workload: Workload, cluster: ClusterSpec, fmt: str = "generated", path: str = ""
) -> None:
    """Raise `SimulationInputError` naming file, line and field when a job's gang is larger
    than every accelerator type of `cluster` (it could never run)."""
    largest = max(cluster.counts) if cluster.counts else 0
    too_big = np.flatnonzero(workload.scale_factor > largest)
    if too_big.size:
        k = int(too_big[0])
        where = _where(path or workload.source, workload.lines, k, workload.ids[k])
        name = cluster.types[int(np.argmax(cluster.counts))]
        raise SimulationInputError(
            f"{where}: field {GPU_FIELD.get(fmt, 'gpus')!r}: the job needs "
            f"{int(workload.scale_factor[k])} devices at once, more than the largest accelerator "
            f"type has ({largest} {name})"
            + (f"; {too_big.size} jobs are too large" if too_big.size > 1 else "")
        )


def workload_from_table(
    table: JobTable,
    cluster: ClusterSpec,
    throughputs: ThroughputTable,
    *,
    fmt: str = "generated",
    path: str = "",
    seed: int = 0,
    max_scale_factor: int = 8,
    reference_type: str = "v100",
    profiles: Mapping[str, EpochProfile] | None = None,
    goodputs: GoodputSource | None = None,
    colocations: bool = False,
) -> tuple[Workload, LoadReport]:
    """The simulated jobs of `table` on `cluster` (see the module docstring); `fmt` and `path`
    name the source in messages. Raises `SimulationInputError` for an empty result or a job
    larger than the cluster."""
    name = path or table.source or fmt
    report = LoadReport(name, rows=len(table))
    if len(table) == 0:
        raise SimulationInputError(f"{name}: the trace has no jobs")
    if len(table) > MAX_JOBS:
        raise SimulationInputError(f"{name}: {len(table):,} jobs, at most {MAX_JOBS:,}")
    types = cluster.types
    count = np.array(cluster.counts, np.int64)
    raw_gpus = table.gpus
    scale = scale_factors(raw_gpus, max_scale_factor)
    lines_all = source_lines(table, fmt)
    largest = int(count.max())
    oversized = np.flatnonzero(np.isfinite(raw_gpus) & (raw_gpus > 0) & (scale > largest))
    if oversized.size:
        k = int(oversized[0])
        where = _where(name, lines_all, k, str(table.id[k]))
        raise SimulationInputError(
            f"{where}: field {GPU_FIELD.get(fmt, 'gpus')!r}: the job needs {int(scale[k])} "
            f"devices at once (scale factor of {raw_gpus[k]:g} GPUs), more than the largest "
            f"accelerator type has ({largest} {types[int(np.argmax(count))]})"
            + (f"; {oversized.size} jobs are too large" if oversized.size > 1 else "")
            + " (lower --max-scale-factor or enlarge the cluster)"
        )
    keys, sampled = row_job_keys(table, throughputs, scale, seed)
    layout = node_shapes(node_sizes(cluster, include_nodes=True))
    type_index = {t: j for j, t in enumerate(types)}
    kept: list[int] = []
    rows: list[FloatArray] = []
    totals: list[float] = []
    job_types: list[str] = []
    durations: list[FloatArray] = []
    batches: list[IntArray] = []
    configs: list[tuple[GoodputEntry, ...]] = []
    ids = table.id
    orig_types = table.column("job_type")
    for k in range(len(table)):
        gpus = raw_gpus[k]
        if not (np.isfinite(gpus) and gpus > 0):
            report.excluded["zero, negative or unknown GPU count"] += 1
            continue
        if not np.isfinite(table.arrival_s[k]):
            report.excluded["unknown arrival time"] += 1
            continue
        duration = float(table.duration_s[k])
        if duration < 0:
            report.excluded["negative duration"] += 1
            continue
        key = keys[k]
        s = int(scale[k])
        if key is None:
            report.excluded[f"no job type at scale factor {s} in the throughput table"] += 1
            continue
        row = np.zeros(len(types))
        for t, v in throughputs.throughput(key, types).items():
            row[type_index[t]] = v
        row[count < s] = 0.0
        if not (row > 0).any():
            report.excluded["no usable accelerator type (throughput or devices)"] += 1
            continue
        job_id = str(ids[k])
        entries: tuple[GoodputEntry, ...] = ()
        if goodputs is not None:
            given = goodputs(job_id, str(orig_types[k]))
            if given is None:
                report.excluded["no goodput table for the job"] += 1
                continue
            entries = tuple(
                (type_index[t], int(nodes), int(devices), float(g))
                for t, nodes, devices, g in given
                if configuration_fits((t, nodes, devices, g), layout)
            )
            if not entries:
                report.excluded["no goodput configuration fits the cluster"] += 1
                continue
            rigid = np.zeros(len(types))
            for j, _, devices, g in entries:
                if devices == s:
                    rigid[j] = max(rigid[j], g)
            if not (rigid > 0).any():
                report.excluded[f"no goodput configuration of {s} devices"] += 1
                continue
            row = rigid
        profile = profiles.get(job_id) if profiles is not None else None
        if profiles is not None:
            problem = profile_problem(profile, float(gpus), s)
            if problem:
                report.excluded[problem] += 1
                continue
        if profile is not None:
            d = np.asarray(profile.duration_every_epoch_s, np.float64)
            durations.append(d)
            batches.append(np.asarray(profile.bs_every_epoch, np.int64))
            ref = reference_throughput(throughputs, key, reference_type)
            row = np.where(row > 0, row / ref if ref > 0 else 1.0, 0.0)
            total = float(d.sum())
        else:
            total = float(table.total_steps[k])
            if not (np.isfinite(total) and total > 0):
                if not np.isfinite(duration):
                    rng = np.random.default_rng(zlib.crc32(f"{seed}/{job_id}".encode()))
                    duration = gavel_duration_s(rng)
                    report.drawn_durations += 1
                rate = (
                    float(row.max())
                    if goodputs is not None
                    else reference_throughput(throughputs, key, reference_type)
                )
                total = max(duration, 1e-3) * rate
        report.sampled_job_types += int(sampled[k])
        kept.append(k)
        rows.append(row)
        totals.append(total)
        job_types.append(job_type_key(key) if colocations else "")
        configs.append(entries)
    if not kept:
        raise SimulationInputError(
            f"{name}: no job can be simulated ({report.rows} rows; "
            + ", ".join(f"{n} {reason}" for reason, n in report.excluded.items())
            + ")"
        )
    idx = np.array(kept, np.int64)
    report.kept = len(kept)
    weight = table.priority_weight[idx]
    slo = table.slo_factor[idx]
    duration_kept = table.duration_s[idx]
    deadline = np.where(
        np.isfinite(slo) & (slo > 0) & np.isfinite(duration_kept),
        table.arrival_s[idx] + slo * duration_kept,
        np.nan,
    )
    workload = Workload(
        ids=tuple(str(ids[k]) for k in kept),
        arrival_s=np.asarray(table.arrival_s[idx], np.float64),
        scale_factor=scale[idx].astype(np.int64),
        throughput=np.array(rows, np.float64),
        total_steps=np.array(totals, np.float64),
        priority_weight=np.where(np.isfinite(weight) & (weight > 0), weight, 1.0),
        tenant=tuple(str(t) for t in table.column("tenant")[idx]),
        deadline_s=deadline,
        job_type=tuple(job_types),
        epoch_duration_s=tuple(durations),
        epoch_batch_size=tuple(batches),
        configurations=tuple(configs) if goodputs is not None else (),
        pairs=pair_rates(throughputs, types, keys, kept) if colocations else None,
        lines=lines_all[idx],
        source=name,
    )
    if len(set(workload.ids)) != workload.num_jobs:
        dup = Counter(workload.ids).most_common(1)[0][0]
        raise SimulationInputError(f"{name}: job id {dup!r} appears more than once")
    return workload, report


def pair_rates(
    throughputs: ThroughputTable,
    types: Sequence[str],
    keys: Sequence[JobKey | None],
    kept: Sequence[int],
) -> PairRates:
    """Co-location rates of the job types present (pairs with equal scale factors that the
    table has a rate for on some type)."""
    present = sorted({keys[k] for k in kept if keys[k] is not None}, key=str)
    rates: dict[tuple[str, str], FloatArray] = {}
    type_a: list[str] = []
    type_b: list[str] = []
    rows_a: list[FloatArray] = []
    rows_b: list[FloatArray] = []
    for ia, a in enumerate(present):
        for b in present[ia:]:
            if a is None or b is None or a[1] != b[1]:
                continue
            ra, rb = np.zeros(len(types)), np.zeros(len(types))
            for j, t in enumerate(types):
                both = throughputs.pairs.get(t, {}).get((a, b))
                if both is None:
                    flipped = throughputs.pairs.get(t, {}).get((b, a))
                    both = (flipped[1], flipped[0]) if flipped is not None else None
                if both is not None:
                    ra[j], rb[j] = max(both[0], 0.0), max(both[1], 0.0)
            if not ((ra > 0) | (rb > 0)).any():
                continue
            ka, kb = job_type_key(a), job_type_key(b)
            rates[(ka, kb)] = ra
            rates[(kb, ka)] = rb
            type_a.append(ka)
            type_b.append(kb)
            rows_a.append(ra)
            rows_b.append(rb)
    n = len(types)
    return PairRates(
        rates,
        tuple(type_a),
        tuple(type_b),
        np.array(rows_a, np.float64).reshape(-1, n),
        np.array(rows_b, np.float64).reshape(-1, n),
    )


def workload_from_profiles(
    profiles: Sequence[EpochProfile], cluster: ClusterSpec, path: str = "profiles"
) -> Workload:
    """Per-epoch profiles as the workload itself (Shockwave's 120-job file): arrival, gang and
    epochs from the profile, speed 1 on every type with enough devices."""
    if not profiles:
        raise SimulationInputError(f"{path}: the profile file has no jobs")
    if len(profiles) > MAX_JOBS:
        raise SimulationInputError(f"{path}: {len(profiles):,} jobs, at most {MAX_JOBS:,}")
    count = np.array(cluster.counts, np.int64)
    for k, p in enumerate(profiles):
        problem = profile_problem(p, float(p.scale_factor), p.scale_factor)
        if problem:
            raise SimulationInputError(f"{path}: profile [{k}] (job {p.job_id}): {problem}")
        if not math.isfinite(p.arrival_s):
            raise SimulationInputError(f"{path}: profile [{k}] (job {p.job_id}): arrival_s")
    scale = np.array([max(p.scale_factor, 1) for p in profiles], np.int64)
    workload = Workload(
        ids=tuple(str(p.job_id) for p in profiles),
        arrival_s=np.array([p.arrival_s for p in profiles], np.float64),
        scale_factor=scale,
        throughput=np.where(scale[:, None] <= count[None, :], 1.0, 0.0),
        total_steps=np.array([p.total_duration_s for p in profiles], np.float64),
        priority_weight=np.ones(len(profiles)),
        tenant=("",) * len(profiles),
        deadline_s=np.full(len(profiles), np.nan),
        job_type=("",) * len(profiles),
        epoch_duration_s=tuple(np.asarray(p.duration_every_epoch_s, np.float64) for p in profiles),
        epoch_batch_size=tuple(np.asarray(p.bs_every_epoch, np.int64) for p in profiles),
        lines=np.zeros(len(profiles), np.int64),
        source=path,
    )
    check_fits(workload, cluster, "profiles", path)
    if len(set(workload.ids)) != workload.num_jobs:
        raise SimulationInputError(f"{path}: a job_id appears more than once")
    return workload


def first_jobs(workload: Workload, count: int) -> Workload:
    """The first `count` jobs in arrival order (ties in trace order)."""
    order = np.argsort(workload.arrival_s, kind="stable")[: max(count, 0)]
    return workload.take(np.sort(order))


def is_epoch_workload(workload: Workload) -> bool:
    return bool(workload.epoch_duration_s)


def epochs_done(durations: NDArray[np.float64], work_done: float) -> int:
    """Epochs completed after `work_done` profiled seconds: the largest e with
    durations[0] + ... + durations[e-1] <= work_done (tolerance 1e-9 s)."""
    return int(np.searchsorted(np.cumsum(durations), work_done + 1e-9, side="right"))
