"""Grids of simulations (policies x seeds x loads) run in parallel: worker processes on this
machine, or tasks on a Ray cluster (`--ray ADDRESS`, `local` for a Ray instance started here;
Ray comes from the optional extra `apportion[ray]`). Every run is independent and
deterministic given its seed, so the three ways return the same results in the same order.

Aggregation: per (label, load), the mean of every numeric summary value over the seeds, with
the half-width of its 95% confidence interval (Student's t, n - 1 degrees of freedom; NaN for
a single seed).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from apportion.datasets.cluster import ClusterSpec
from apportion.simulator.engine import SimulationConfig, simulate
from apportion.simulator.errors import SimulationInputError
from apportion.simulator.metrics import RunResult, run_result
from apportion.simulator.progress import RunProgress, SweepProgress
from apportion.simulator.tables import Table
from apportion.simulator.workload import Workload

AGGREGATED = (
    "avg_jct_s",
    "p50_jct_s",
    "p99_jct_s",
    "geo_mean_jct_s",
    "makespan_s",
    "worst_rho",
    "mean_rho",
    "frac_rho_gt1",
    "worst_rho_themis",
    "utilization",
    "gpu_hours",
    "restarts",
    "unfinished",
    "solver_s",
    "wall_s",
)


@dataclass(frozen=True)
class Task:
    """One simulation of a sweep."""

    label: str
    """What the run is called in tables and plots (the policy name unless set)."""
    workload: Workload
    cluster: ClusterSpec
    config: SimulationConfig
    load: float | None = None


def run_task(task: Task, progress: bool = False) -> RunResult:
    """Simulate one task (in whatever process runs it)."""
    bar = RunProgress(f"{task.label} seed {task.config.seed}", task.workload.num_jobs, progress)
    try:
        outcome = simulate(task.workload, task.cluster, task.config, bar if progress else None)
    finally:
        bar.close()
    result = run_result(outcome, task.load)
    result.run["label"] = task.label
    result.run["process"] = os.getpid()
    result.run["finished_at"] = time.time()
    return result


def _quiet_task(task: Task) -> RunResult:
    return run_task(task, progress=False)


def run_tasks(
    tasks: Sequence[Task],
    workers: int = 0,
    ray_address: str = "",
    progress: bool = False,
) -> list[RunResult]:
    """Every task's result, in task order. `workers` processes (0 = one per core; 1 = in this
    process, with a progress bar per run); `ray_address` runs the tasks on Ray instead."""
    if not tasks:
        return []
    if ray_address:
        return _run_ray(tasks, ray_address, progress)
    count = min(workers or os.cpu_count() or 1, len(tasks))
    if count <= 1:
        return [run_task(t, progress) for t in tasks]
    bar = SweepProgress(len(tasks), progress)
    results: list[RunResult | None] = [None] * len(tasks)
    context = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(max_workers=count, mp_context=context) as pool:
            futures = {pool.submit(_quiet_task, t): k for k, t in enumerate(tasks)}
            for future in as_completed(futures):
                k = futures[future]
                results[k] = future.result()
                bar.done(f"{tasks[k].label} seed {tasks[k].config.seed}")
    finally:
        bar.close()
    return [r for r in results if r is not None]


def _run_ray(tasks: Sequence[Task], address: str, progress: bool) -> list[RunResult]:
    try:
        import ray
    except ImportError as exc:
        raise SimulationInputError("--ray needs Ray: pip install 'apportion[ray]'") from exc
    started_here = not ray.is_initialized()
    if started_here:
        if address == "local":  # workers inherit this process's environment
            ray.init(include_dashboard=False, log_to_driver=False, num_cpus=os.cpu_count() or 1)
        else:  # the cluster's nodes must have apportion installed
            ray.init(address=address, log_to_driver=False)
    bar = SweepProgress(len(tasks), progress)
    try:
        remote: Any = ray.remote(_quiet_task)
        refs = [remote.remote(t) for t in tasks]
        index = {ref: k for k, ref in enumerate(refs)}
        results: list[RunResult | None] = [None] * len(tasks)
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                k = index[ref]
                results[k] = ray.get(ref)
                bar.done(f"{tasks[k].label} seed {tasks[k].config.seed}")
    finally:
        bar.close()
        if started_here:
            ray.shutdown()
    return [r for r in results if r is not None]


def grid(
    labels: Sequence[tuple[str, SimulationConfig]],
    seeds: Sequence[int],
    loads: Sequence[float | None],
    workload_for: Callable[[int, float | None], Workload],
    cluster: ClusterSpec,
) -> list[Task]:
    """Tasks for every (label, seed, load); `workload_for(seed, load)` builds the jobs (built
    once per (seed, load) and shared by the labels)."""
    cache: dict[tuple[int, float | None], Workload] = {}
    tasks = []
    for load in loads:
        for seed in seeds:
            key = (seed, load)
            if key not in cache:
                cache[key] = workload_for(seed, load)
            for label, config in labels:
                fid = replace(config.fidelity, seed=seed)
                tasks.append(
                    Task(label, cache[key], cluster, replace(config, seed=seed, fidelity=fid), load)
                )
    return tasks


def aggregate(results: Sequence[RunResult]) -> Table:
    """Mean and 95% confidence half-width over seeds, per (label, load) (module docstring)."""
    from scipy.stats import t as student_t

    groups: dict[tuple[str, float | None], list[RunResult]] = {}
    for r in results:
        groups.setdefault((str(r.run.get("label", r.run["policy"])), r.run["load"]), []).append(r)
    labels, loads, seeds = [], [], []
    columns: dict[str, list[float]] = {}
    for (label, load), runs in groups.items():
        labels.append(label)
        loads.append(math.nan if load is None else float(load))
        seeds.append(len(runs))
        for key in AGGREGATED:
            values = np.array([float(r.summary.get(key, math.nan)) for r in runs])
            mean = float(np.nanmean(values)) if np.isfinite(values).any() else math.nan
            half = math.nan
            finite = values[np.isfinite(values)]
            if finite.size > 1:
                sem = float(finite.std(ddof=1)) / math.sqrt(finite.size)
                half = float(student_t.ppf(0.975, finite.size - 1)) * sem
            columns.setdefault(key, []).append(mean)
            columns.setdefault(f"{key}_ci95", []).append(half)
    out: Table = {
        "label": np.array(labels, dtype=object),
        "load": np.array(loads, np.float64),
        "seeds": np.array(seeds, np.int64),
    }
    for name, column in columns.items():
        out[name] = np.array(column, np.float64)
    return out
