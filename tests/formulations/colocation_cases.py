"""Small co-location instances for the tests: the project's own synthetic profiles (no copy of
any upstream data)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from apportion.solver.model import Problem
from apportion.solver.sharing import ResourceGrid, SharedDevices, SharingInputs
from apportion.solver.validation import make_problem

CPUS = np.array([1.0, 2.0, 3.0, 6.0, 9.0])
"""Cores per GPU of the synthetic grids (fair share: 3 on the test nodes)."""
MEMORY = np.array([20.0, 62.5, 125.0])
"""GiB per GPU of the synthetic grids (fair share: 62.5)."""


def grid(cpu_gain: float, memory_gain: float, floor: float = 0.2) -> ResourceGrid:
    """A concave profile: 1 at (3 cores, 62.5 GiB), rising by `cpu_gain` per extra core
    (saturating at 9) and `memory_gain` at 125 GiB, `floor` below the fair share."""
    cpu = np.minimum(CPUS, 9.0)
    by_cpu = np.where(cpu >= 3, 1 + cpu_gain * np.log(cpu / 3), cpu / 3)
    by_memory = np.array([floor, 1.0, 1.0 + memory_gain])
    return ResourceGrid(CPUS.copy(), MEMORY.copy(), np.round(np.outer(by_cpu, by_memory), 4))


def with_nodes(problem: Problem, devices_per_node: int = 8) -> Problem:
    """Nodes of `devices_per_node` devices for every type (the last one smaller), 3 cores and
    62.5 GiB per device."""
    names, types, devices = [], [], []
    for j, count in enumerate(problem.cluster.count.tolist()):
        left, k = int(count), 0
        while left > 0:
            take = min(devices_per_node, left)
            names.append(f"{problem.cluster.type_names[j]}-n{k}")
            types.append(j)
            devices.append(take)
            left -= take
            k += 1
    cluster = replace(problem.cluster, node_names=tuple(names),
                      node_type=np.array(types, np.int64), node_devices=np.array(devices))
    return replace(problem, cluster=cluster)


def with_sharing_inputs(problem: Problem, seed: int = 0) -> Problem:
    """Every co-location input for `problem`'s jobs: nodes, CPU/memory grids, stage times,
    device memory, utilization, sharing scores, shared devices (one guaranteed job per
    device where possible) and opportunistic 1-device jobs."""
    rng = np.random.default_rng(seed)
    if not problem.cluster.node_names:
        problem = with_nodes(problem)
    m = problem.jobs.num_jobs
    grids = tuple(grid(float(rng.uniform(0, 0.8)), float(rng.uniform(0, 0.5))) for _ in range(m))
    stage = rng.uniform(0.0, 1.0, (m, 4)) * np.array([0.3, 1.0, 2.0, 0.8])
    stage[:, 2] += 0.05
    devices = int(problem.cluster.count.sum())
    opportunistic = (problem.jobs.scale_factor == 1) & (rng.random(m) < 0.5)
    guaranteed = np.full(devices, -1, np.int64)
    holders = np.nonzero(~opportunistic)[0]
    guaranteed[: min(devices, holders.size)] = holders[:devices]
    type_index = np.repeat(np.arange(problem.cluster.num_types), problem.cluster.count)
    shared = SharedDevices(
        ids=tuple(f"d{k}" for k in range(devices)),
        type_index=type_index,
        node=("",) * devices,
        memory_gib=np.full(devices, 24.0),
        used_memory_gib=rng.uniform(0, 12, devices),
        utilization=rng.uniform(0, 0.7, devices),
        guaranteed_job=guaranteed,
        slowdown_budget=rng.choice([0.0, 0.2, np.inf], devices),
    )
    nodes = problem.cluster.node_devices.astype(np.float64)
    sharing = SharingInputs(
        resource_grid=grids,
        stage_s=stage,
        gpu_memory_gib=rng.uniform(1, 11, m),
        gpu_utilization=rng.uniform(0.05, 0.6, m),
        opportunistic=opportunistic,
        sharing_score=rng.integers(0, 3, m),
        devices=shared,
        node_cpus=3.0 * nodes,
        node_memory_gib=62.5 * nodes,
    )
    return replace(problem, sharing=sharing)


def synergy_problem(grids: list[ResourceGrid], gpus: list[int], nodes: int,
                    devices_per_node: int = 8, cpus_per_node: float = 24.0,
                    memory_per_node: float = 500.0) -> Problem:
    """Jobs with their grids on `nodes` identical nodes."""
    m = len(gpus)
    problem = make_problem(["gpu"], [nodes * devices_per_node], np.ones((m, 1)),
                           scale_factor=gpus)
    problem = with_nodes(problem, devices_per_node)
    sharing = SharingInputs(resource_grid=tuple(grids), node_cpus=np.full(nodes, cpus_per_node),
                            node_memory_gib=np.full(nodes, memory_per_node))
    return replace(problem, sharing=sharing)


def muri_problem(stage_s: np.ndarray, gpus: list[int] | np.ndarray, devices: int,
                 remaining: np.ndarray | None = None) -> Problem:
    """Jobs with stage times on one type of `devices` devices."""
    m = len(gpus)
    problem = make_problem(["gpu"], [devices], np.ones((m, 1)), scale_factor=list(gpus))
    total = np.full(m, 100.0) if remaining is None else np.asarray(remaining, np.float64)
    jobs = replace(problem.jobs, total_steps=total, steps_done=np.zeros(m))
    return replace(problem, jobs=jobs, sharing=SharingInputs(stage_s=np.asarray(stage_s)))
