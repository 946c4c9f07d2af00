"""Tiny workloads and an invariant check that reads only a run's tables (not the engine)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from apportion.datasets.cluster import ClusterSpec
from apportion.simulator.engine import SimulationConfig, simulate
from apportion.simulator.metrics import RunResult, run_result
from apportion.simulator.workload import GoodputEntry, Workload


def workload(
    jobs: Sequence[tuple[str, float, int, float, Sequence[float]]],
    *,
    epochs: Sequence[Sequence[float]] | None = None,
    configurations: Sequence[Sequence[GoodputEntry]] | None = None,
) -> Workload:
    """Jobs (id, arrival s, gang, total work, throughput per type)."""
    m = len(jobs)
    return Workload(
        ids=tuple(j[0] for j in jobs),
        arrival_s=np.array([j[1] for j in jobs], np.float64),
        scale_factor=np.array([j[2] for j in jobs], np.int64),
        throughput=np.array([j[4] for j in jobs], np.float64),
        total_steps=np.array([j[3] for j in jobs], np.float64),
        priority_weight=np.ones(m),
        tenant=("",) * m,
        deadline_s=np.full(m, np.nan),
        job_type=("",) * m,
        epoch_duration_s=tuple(np.asarray(e, np.float64) for e in epochs) if epochs else (),
        epoch_batch_size=tuple(np.full(len(e), 32, np.int64) for e in epochs) if epochs else (),
        configurations=tuple(tuple(c) for c in configurations) if configurations else (),
        lines=np.zeros(m, np.int64),
        source="tiny",
    )


def mixed_jobs() -> list[tuple[str, float, int, float, list[float]]]:
    """Six jobs of gangs 1 and 2 arriving over 400 s, on two types of different speeds."""
    return [
        ("a", 0.0, 1, 900.0, [3.0, 1.0]),
        ("b", 0.0, 2, 1200.0, [4.0, 2.0]),
        ("c", 50.0, 1, 400.0, [1.0, 1.0]),
        ("d", 130.0, 2, 600.0, [2.0, 1.5]),
        ("e", 260.0, 1, 700.0, [2.0, 0.5]),
        ("f", 400.0, 2, 500.0, [3.0, 3.0]),
    ]


def epoch_workload(
    jobs: Sequence[tuple[str, float, int, Sequence[float]]], types: int = 1
) -> Workload:
    """Jobs (id, arrival, gang, epoch durations s) measured in profiled seconds, speed 1."""
    return workload(
        [(j, a, s, float(sum(d)), [1.0] * types) for j, a, s, d in jobs],
        epochs=[d for _, _, _, d in jobs],
    )


def run(w: Workload, cluster: ClusterSpec, **config: object) -> RunResult:
    return run_result(simulate(w, cluster, SimulationConfig(**config)))  # type: ignore[arg-type]


def check_invariants(result: RunResult, w: Workload, cluster: ClusterSpec, round_s: float) -> None:
    """From the tables alone: every job finished, no grant before a job's arrival or after its
    finish, no round above a type's or a node's devices, and (no noise, no restart overhead)
    the work done equals each job's total: the full rounds it ran at the granted type's speed
    (over its slowdown in a group) plus the last round up to its finish. Devices a group or
    pair shares are counted once, and must be the same for all its members."""
    jobs, rounds, grants = result.jobs, result.rounds, result.grants
    assert jobs["finished"].all(), "some job did not finish"
    start = dict(zip(rounds["round"].tolist(), rounds["start_s"].tolist(), strict=True))
    counts = dict(zip(cluster.types, cluster.counts, strict=True))
    node_size = {node.name: node.devices for node in cluster.nodes}
    used: dict[tuple[int, int], int] = {}
    on_node: dict[tuple[int, str], int] = {}
    held: dict[tuple[int, int], tuple[int, int, str]] = {}
    per_job: dict[int, list[tuple[float, int, float]]] = {}
    for r, i, j, d, nodes, shared, slowdown in zip(
        grants["round"].tolist(), grants["job"].tolist(), grants["type"].tolist(),
        grants["devices"].tolist(), grants["nodes"].tolist(), grants["shared_with"].tolist(),
        grants["slowdown"].tolist(), strict=True,
    ):
        t = start[r]
        assert t >= w.arrival_s[i] - 1e-9, f"job {i} ran at {t} before its arrival"
        assert t < jobs["finish_s"][i], f"job {i} ran at {t} after it finished"
        per_job.setdefault(i, []).append((t, j, slowdown))
        if shared >= 0:  # devices shared by a pair or group: the same ones, counted once
            if (r, shared) in held:
                assert held[(r, shared)] == (j, d, str(nodes)), f"round {r}: group {shared}"
                continue
            held[(r, shared)] = (j, d, str(nodes))
        used[(r, j)] = used.get((r, j), 0) + d
        for part in filter(None, str(nodes).split(";")):
            name, count = part.rsplit(":", 1)
            on_node[(r, name)] = on_node.get((r, name), 0) + int(count)
    for (r, j), d in used.items():
        assert d <= counts[cluster.types[j]], f"round {r}: {d} devices of type {j}"
    for (r, name), d in on_node.items():
        assert d <= node_size[name], f"round {r}: {d} devices on node {name}"
    for i, runs in per_job.items():
        runs.sort()
        finish = float(jobs["finish_s"][i])
        work = 0.0
        for _, j, slowdown in runs[:-1]:
            work += w.throughput[i, j] / slowdown * round_s
        last_t, last_j, last_slowdown = runs[-1]
        work += w.throughput[i, last_j] / last_slowdown * (finish - last_t)
        assert abs(work - w.total_steps[i]) <= 1e-6 * w.total_steps[i], (
            f"job {i}: work {work} != total {w.total_steps[i]}"
        )
