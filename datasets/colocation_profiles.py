"""Profiles of the co-location and resource-shape policies.

* Synergy's throughput matrices (CSV `model_gpus, num_gpus, cpus_per_gpu, mem_gb_per_gpu,
  norm_tput, ...`, one row per grid point) -> a `ResourceGrid` per `model_gpus` key (e.g.
  "res18_1": the res18 model on 1 GPU).
* Muri's traces (CSV `job_id, num_gpu, submit_time, iterations, model_name, ...,
  resource_time_0..2`; times in ms) -> `MuriJobs` with four stage times per job in s: the
  traces' three resource times are CPU pre-processing, GPU compute and network
  synchronization (storage I/O is 0).
* `synthetic_resource_grid`: a concave grid on Synergy's axes (cores 1-24, 20.83-250 GiB per
  GPU), 1 at 3 cores and 62.5 GiB per GPU (the GPU-proportional share of Synergy's Philly-like
  servers: 8 GPUs, 24 cores, 500 GiB), for workloads without measured profiles.
* `synthetic_stage_times`: per-iteration stage times for workloads without Muri's traces.
* `synthetic_device_use`: device memory, compute utilization and service class per job, and
  slowdowns of pairs of jobs sharing a device (AntMan's inputs), for workloads without them.

Malformed rows raise `TraceFormatError` naming file, line and column.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from apportion.datasets.errors import TraceFormatError
from apportion.solver.model import FloatArray, IntArray
from apportion.solver.sharing import ResourceGrid


def _number(path: str, line: int, column: str, text: str | None) -> float:
    try:
        value = float(text if text is not None else "")
    except ValueError:
        raise TraceFormatError(path, line, column, f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise TraceFormatError(path, line, column, f"not finite: {text!r}")
    return value


SYNTHETIC_CPUS_PER_GPU = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 9.0, 12.0, 24.0)
SYNTHETIC_MEMORY_GIB_PER_GPU = (20.83, 62.5, 125.0, 187.5, 250.0)


def synthetic_resource_grid(rng: np.random.Generator) -> ResourceGrid:
    """A random concave profile (module docstring): throughput grows with cores as
    1 + gain * ln(cores / 3) up to 12 cores (linearly below 3) and with memory in steps;
    gain and the memory steps drawn from `rng`."""
    cpus = np.array(SYNTHETIC_CPUS_PER_GPU)
    memory = np.array(SYNTHETIC_MEMORY_GIB_PER_GPU)
    gain = rng.uniform(0, 1.2)
    by_cpu = np.where(cpus >= 3, 1 + gain * np.log(np.minimum(cpus, 12) / 3), cpus / 3)
    by_memory = np.array([0.3, 1.0, 1 + rng.uniform(0, 0.3), 1 + rng.uniform(0.3, 0.5),
                          1 + rng.uniform(0.5, 0.6)])
    return ResourceGrid(cpus, memory,
                        np.asarray(np.round(np.outer(by_cpu, by_memory), 3), np.float64))


SYNTHETIC_STAGE_SCALE_S = (0.0, 0.5, 0.4, 0.2)
"""Largest drawn time per iteration of each stage (storage, CPU, GPU, network; s)."""
SYNTHETIC_MIN_GPU_S = 0.05
"""Smallest GPU time per iteration (s): every job computes."""


def synthetic_stage_times(rng: np.random.Generator, count: int) -> FloatArray:
    """(count, 4) per-iteration stage times (s): each stage uniform in [0,
    `SYNTHETIC_STAGE_SCALE_S`) (no storage I/O, as in Muri's traces), GPU time raised by
    `SYNTHETIC_MIN_GPU_S`."""
    stage: FloatArray = rng.random((count, 4)) * np.array(SYNTHETIC_STAGE_SCALE_S)
    stage[:, 2] += SYNTHETIC_MIN_GPU_S
    return stage


@dataclass(frozen=True)
class DeviceUse:
    """How m jobs use a device they may share (AntMan's inputs)."""

    gpu_memory_gib: FloatArray
    """(m,) device memory each job needs per device (GiB)."""
    gpu_utilization: FloatArray
    """(m,) compute utilization of a device running the job alone, in [0, 1]."""
    opportunistic: NDArray[np.bool_]
    """(m,) the job runs opportunistically (one device, in another job's spare room)."""
    pairs: IntArray
    """(P, 2) jobs (a guaranteed one, an opportunistic one) measured on one device."""
    pair_slowdown: FloatArray
    """(P, 2) each one's time per step in the pair over its time alone (>= 1)."""


def synthetic_device_use(rng: np.random.Generator, scale_factor: IntArray,
                         opportunistic_share: float = 1 / 3, partners: int = 2) -> DeviceUse:
    """Device memory U(1, 10) GiB and utilization U(0.05, 0.5) per job; a one-device job is
    opportunistic with probability `opportunistic_share`; each opportunistic job measured
    with `partners` guaranteed one-device jobs (drawn, distinct), slowing the guaranteed one
    by a factor 1 + U(0, 0.3) and itself by 1 + U(0, 0.5)."""
    m = scale_factor.size
    memory = rng.uniform(1.0, 10.0, m)
    utilization = rng.uniform(0.05, 0.5, m)
    opportunistic = (rng.random(m) < opportunistic_share) & (scale_factor == 1)
    hosts = np.nonzero(~opportunistic & (scale_factor == 1))[0]
    guests = np.nonzero(opportunistic)[0]
    k = min(partners, hosts.size)
    if k == 0 or guests.size == 0:
        return DeviceUse(memory, utilization, opportunistic, np.zeros((0, 2), np.int64),
                         np.zeros((0, 2)))
    # k distinct hosts per guest: k sorted draws from n - k + 1 values, shifted by their rank
    drawn = np.sort(rng.integers(0, hosts.size - k + 1, (guests.size, k)), axis=1) + np.arange(k)
    pairs = np.column_stack([hosts[drawn].reshape(-1), np.repeat(guests, k)])
    slowdown = np.column_stack([1 + rng.uniform(0.0, 0.3, len(pairs)),
                                1 + rng.uniform(0.0, 0.5, len(pairs))])
    return DeviceUse(memory, utilization, opportunistic, pairs.astype(np.int64), slowdown)


def read_synergy_profiles(path: str | Path) -> dict[str, ResourceGrid]:
    """The grid of every `model_gpus` key of a Synergy throughput-matrix CSV."""
    name = str(path)
    points: dict[str, dict[tuple[float, float], float]] = {}
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        for line, row in enumerate(reader, start=2):
            key = row.get("model_gpus") or ""
            if not key:
                raise TraceFormatError(name, line, "model_gpus", "missing")
            cpu = _number(name, line, "cpus_per_gpu", row.get("cpus_per_gpu"))
            mem = _number(name, line, "mem_gb_per_gpu", row.get("mem_gb_per_gpu"))
            tput = _number(name, line, "norm_tput", row.get("norm_tput"))
            points.setdefault(key, {})[(cpu, mem)] = tput
    grids: dict[str, ResourceGrid] = {}
    for key, table in points.items():
        cpus = np.array(sorted({c for c, _ in table}))
        mems = np.array(sorted({m for _, m in table}))
        grid = np.full((cpus.size, mems.size), np.nan)
        for (c, m), value in table.items():
            grid[np.searchsorted(cpus, c), np.searchsorted(mems, m)] = value
        if np.isnan(grid).any():
            raise TraceFormatError(name, 0, "norm_tput", f"{key}: the grid has holes")
        grids[key] = ResourceGrid(cpus, mems, grid)
    return grids


@dataclass(frozen=True)
class MuriJobs:
    """Jobs of a Muri trace."""

    ids: tuple[str, ...]
    gpus: IntArray
    submit_s: FloatArray
    iterations: FloatArray
    model: tuple[str, ...]
    stage_s: FloatArray
    """(m, 4) storage, CPU, GPU, network time per iteration (s)."""


def read_muri_trace(path: str | Path) -> MuriJobs:
    name = str(path)
    ids: list[str] = []
    gpus: list[int] = []
    submit: list[float] = []
    iterations: list[float] = []
    model: list[str] = []
    stages: list[list[float]] = []
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        for line, row in enumerate(reader, start=2):
            ids.append(row.get("job_id") or f"job{line - 2}")
            g = _number(name, line, "num_gpu", row.get("num_gpu"))
            if g < 1 or g != int(g):
                raise TraceFormatError(name, line, "num_gpu", f"must be an integer >= 1: {g}")
            gpus.append(int(g))
            submit.append(_number(name, line, "submit_time", row.get("submit_time")) / 1000)
            iterations.append(_number(name, line, "iterations", row.get("iterations")))
            model.append(row.get("model_name") or "")
            times = [
                _number(name, line, f"resource_time_{r}", row.get(f"resource_time_{r}")) / 1000
                for r in range(3)
            ]
            if min(times) < 0 or sum(times) <= 0:
                raise TraceFormatError(name, line, "resource_time_0",
                                       "stage times must be >= 0 with a positive sum")
            stages.append([0.0, *times])
    return MuriJobs(
        ids=tuple(ids),
        gpus=np.array(gpus, np.int64),
        submit_s=np.array(submit),
        iterations=np.array(iterations),
        model=tuple(model),
        stage_s=np.array(stages, np.float64).reshape(-1, 4),
    )
