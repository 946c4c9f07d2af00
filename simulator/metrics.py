"""A simulation's results as tables: one row per job, one per round, one per grant, and a
summary.

Per job: arrival, first start, finish, JCT = finish - arrival (the actual finish inside its
round), standalone time T_exclusive (alone on its gang of its fastest type), queueing delay =
first start - arrival, GPU-hours (devices x time held, restarts included), restarts, and
finish-time fairness rho in both of Shockwave's definitions:

* static: rho_i = JCT_i / (T_exclusive_i x max(1, N / G)), N = jobs in the workload, G =
  devices of the cluster;
* Themis-style: rho_i = JCT_i / (T_exclusive_i x max(1, c_i / G)), c_i = the mean over the
  rounds job i was active of the number of active jobs.

Both count jobs, not devices demanded, as Shockwave does. Per round: active and running
jobs, utilization (device-seconds used / devices x round length) per type and overall,
solves, their wall time and solver time, the last solve's termination.

Summary (over the measured jobs; all jobs unless a window is set): average, median, p99
(Sia's: the sorted JCTs at index floor(0.99 n)) and geometric-mean JCT; makespan = last
finish - first arrival; worst and mean rho (both definitions) and the fraction with rho > 1
(the threshold of the published 120-job summary); utilization = device-seconds used /
(G x makespan of the whole run); GPU-hours; restarts; lease extensions (grants that kept the
previous round's devices, over grants to jobs that ran in the previous round); solver time.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from apportion.simulator.engine import Outcome
from apportion.simulator.tables import Table

Summary = dict[str, Any]


@dataclass(frozen=True)
class RunResult:
    """One simulation's tables and summary (picklable: sweeps return it from workers)."""

    run: dict[str, Any]
    """What was simulated and how: policy, seed, load, cluster, round length, fidelity,
    source, version, why it stopped."""
    jobs: Table
    rounds: Table
    grants: Table
    summary: Summary
    type_names: tuple[str, ...] = field(default=())


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("apportion")
    except PackageNotFoundError:
        return "unknown"


def run_result(outcome: Outcome, load: float | None = None) -> RunResult:
    """The tables and the summary of a finished simulation."""
    w, state, cluster = outcome.workload, outcome.state, outcome.cluster
    config = outcome.config
    devices = int(cluster.total)
    standalone = w.standalone_s
    jct = state.finish_s - w.arrival_s
    contention = state.contention_sum / np.maximum(state.active_rounds, 1.0)
    rho = jct / (standalone * max(1.0, w.num_jobs / devices))
    rho_themis = jct / (standalone * np.maximum(1.0, contention / devices))
    jobs: Table = {
        "job_id": np.array(w.ids, dtype=object),
        "arrival_s": w.arrival_s.copy(),
        "start_s": state.start_s.copy(),
        "finish_s": state.finish_s.copy(),
        "jct_s": jct,
        "standalone_s": standalone,
        "queueing_s": state.start_s - w.arrival_s,
        "rho": rho,
        "rho_themis": rho_themis,
        "scale_factor": w.scale_factor.copy(),
        "gpu_hours": state.device_s / 3600.0,
        "restarts": state.restarts.copy(),
        "finished": ~np.isnan(state.finish_s),
        "measured": outcome.measured.copy(),
    }
    log = outcome.log
    n = len(cluster.types)
    busy = np.array(log.busy, np.float64).reshape(-1, n)
    counts = np.array(cluster.counts, np.float64)
    rounds: Table = {
        "round": np.array(log.index, np.int64),
        "start_s": np.array(log.start_s, np.float64),
        "active": np.array(log.active, np.int64),
        "running": np.array(log.running, np.int64),
        "utilization": busy.sum(axis=1) / (counts.sum() * config.round_s),
    }
    for j, name in enumerate(cluster.types):
        rounds[f"utilization_{name}"] = (
            busy[:, j] / (counts[j] * config.round_s) if counts[j] > 0 else np.zeros(len(busy))
        )
    rounds["solves"] = np.array(log.solves, np.int64)
    rounds["unplaced"] = np.array(log.unplaced, np.int64)
    rounds["solve_wall_s"] = np.array(log.solve_wall_s, np.float64)
    rounds["solver_s"] = np.array(log.solver_s, np.float64)
    rounds["termination"] = np.array(log.termination, dtype=object)
    grants: Table = {
        "round": np.array(log.grant_round, np.int64),
        "job": np.array(log.grant_job, np.int64),
        "type": np.array(log.grant_type, np.int64),
        "devices": np.array(log.grant_devices, np.int64),
        "nodes": np.array(log.grant_nodes, dtype=object),
        "shared_with": np.array(log.grant_shared, np.int64),
        "slowdown": np.array(log.grant_slowdown, np.float64),
        "device_ids": np.array(log.grant_device_ids, dtype=object),
        "cpus": np.array(log.grant_cpus, np.float64),
        "memory_gib": np.array(log.grant_memory_gib, np.float64),
    }
    summary = summarize(jobs, rounds, float(busy.sum()), devices)
    summary.update(
        lease_extension_share=(
            outcome.lease_extensions / outcome.lease_opportunities
            if outcome.lease_opportunities
            else math.nan
        ),
        wall_s=outcome.wall_s,
        stopped=outcome.stopped,
    )
    policy = outcome.policy
    run: dict[str, Any] = {
        "label": policy.requested_name or policy.name,
        "policy": policy.requested_name or policy.name,
        "canonical_policy": policy.name,
        "plan_kind": str(outcome.kind),
        "parameters": _plain(policy.parameters),
        "compat": str(policy.compat),
        "seed": config.seed,
        "load": load,
        "source": w.source,
        "jobs": w.num_jobs,
        "cluster": ",".join(f"{t}:{c}" for t, c in zip(cluster.types, cluster.counts, strict=True)),
        "nodes": len(cluster.nodes),
        "round_s": config.round_s,
        "time_limit_s": config.time_limit_s,
        "resolve_every": config.resolve_every,
        "window": list(config.window) if config.window else None,
        "fidelity": asdict(config.fidelity),
        "server": config.server,
        "version": version(),
        "stopped": outcome.stopped,
    }
    return RunResult(run, jobs, rounds, grants, summary, tuple(cluster.types))


def _plain(value: object) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return {k: _plain(v) for k, v in asdict(value).items()}  # type: ignore[call-overload]
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def p99(values: np.ndarray) -> float:
    """Sia's p99: the sorted values at index floor(0.99 n) (0-based)."""
    if values.size == 0:
        return math.nan
    ordered = np.sort(values)
    return float(ordered[min(math.floor(0.99 * values.size), values.size - 1)])


def summarize(jobs: Table, rounds: Table, busy_device_s: float, devices: int) -> Summary:
    """The summary of one run's tables (see the module docstring)."""
    measured = jobs["measured"].astype(bool)
    done = measured & jobs["finished"].astype(bool)
    jct = jobs["jct_s"][done]
    arrival = jobs["arrival_s"]
    finish = jobs["finish_s"]
    rho, rho_t = jobs["rho"][done], jobs["rho_themis"][done]
    makespan = float(np.nanmax(finish[done]) - arrival[measured].min()) if done.any() else math.nan
    finished_all = jobs["finished"].astype(bool)
    span = (
        float(np.nanmax(finish[finished_all]) - arrival.min()) if finished_all.any() else math.nan
    )
    solve_wall = rounds["solve_wall_s"]
    solves = int(rounds["solves"].sum())
    return {
        "jobs": int(measured.sum()),
        "finished": int(done.sum()),
        "unfinished": int(measured.sum() - done.sum()),
        "avg_jct_s": float(jct.mean()) if jct.size else math.nan,
        "p50_jct_s": float(np.median(jct)) if jct.size else math.nan,
        "p99_jct_s": p99(jct),
        "geo_mean_jct_s": float(np.exp(np.log(np.maximum(jct, 1e-9)).mean()))
        if jct.size
        else math.nan,
        "makespan_s": makespan,
        "worst_rho": float(rho.max()) if rho.size else math.nan,
        "mean_rho": float(rho.mean()) if rho.size else math.nan,
        "frac_rho_gt1": float(np.mean(rho > 1.0)) if rho.size else math.nan,
        "worst_rho_themis": float(rho_t.max()) if rho_t.size else math.nan,
        "mean_rho_themis": float(rho_t.mean()) if rho_t.size else math.nan,
        "avg_queueing_s": float(np.nanmean(jobs["queueing_s"][done])) if done.any() else math.nan,
        "utilization": busy_device_s / (devices * span) if span and span > 0 else math.nan,
        "gpu_hours": float(jobs["gpu_hours"][measured].sum()),
        "restarts": int(jobs["restarts"][measured].sum()),
        "rounds": int(rounds["round"].size),
        "solves": solves,
        "solve_wall_s": float(solve_wall.sum()),
        "mean_solve_wall_s": float(solve_wall.sum() / solves) if solves else 0.0,
        "max_solve_wall_s": float(solve_wall.max()) if solve_wall.size else 0.0,
        "solver_s": float(rounds["solver_s"].sum()),
    }
