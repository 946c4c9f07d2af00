"""Small co-location instances for the tests: the project's own synthetic profiles (no copy of
any upstream data)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from apportion.solver.model import Problem
from apportion.solver.result import JobStatus, Plan
from apportion.solver.sharing import (
    GroupInterference,
    JobConfiguration,
    ResourceGrid,
    SharedDevices,
    SharingInputs,
)
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


def two_configurations(rng: np.random.Generator, m: int
                       ) -> tuple[tuple[JobConfiguration, JobConfiguration], ...]:
    """Per job, batch sizes 32 (relative throughput 1) and 64 (1.1-1.6, more memory)."""
    return tuple(
        (JobConfiguration("b32", 1.0, float(rng.uniform(2, 9))),
         JobConfiguration("b64", float(rng.uniform(1.1, 1.6)), float(rng.uniform(6, 14))))
        for _ in range(m)
    )


def multi_type_problem(seed: int, m: int, running: bool = True) -> Problem:
    """m jobs on 2 or 3 accelerator types of 1..5 devices (nodes of 1..3 devices), each job
    without throughput on about a third of the types (some on every type), gangs of 1, 2 or 4
    up to the largest type, every co-location input (`with_sharing_inputs`; no shared device
    held yet), one configuration pair per job, group interference of 2 and 3 jobs of one gang
    size, about half the shared devices idle, and with `running` some jobs already running
    alone on a type they can use."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 4))
    counts = rng.integers(1, 6, n)
    scale = np.minimum(rng.choice([1, 2, 4], m, p=[0.6, 0.3, 0.1]), counts.max())
    throughput = rng.uniform(0.5, 4.0, (m, n)) * (rng.random((m, n)) >= 0.35)
    names = ["v100", "p100", "k80"][:n]
    problem = make_problem(names, counts.tolist(), throughput, scale_factor=scale.tolist())
    problem = with_sharing_inputs(with_nodes(problem, int(rng.integers(1, 4))), seed)
    sharing = problem.sharing
    assert sharing is not None and sharing.devices is not None
    idle = rng.random(sharing.devices.count) < 0.5  # free for a guaranteed job (antman)
    devices = replace(sharing.devices,
                      guaranteed_job=np.full(sharing.devices.count, -1, np.int64),
                      used_memory_gib=np.where(idle, 0.0, sharing.devices.used_memory_gib),
                      utilization=np.where(idle, 0.0, sharing.devices.utilization))
    configurations = two_configurations(rng, m)
    entries = []
    for k in (2, 3):
        for members in itertools.combinations(range(m), k):
            if len({int(scale[i]) for i in members}) > 1 or rng.random() < 0.6:
                continue
            slowdown = tuple(float(rng.uniform(1.05, 2.5)) for _ in members)
            chosen = tuple(int(c) for c in rng.integers(0, 2, k))
            entries.append(GroupInterference(members, slowdown, chosen))
    problem = replace(problem, sharing=replace(sharing, devices=devices,
                                               configurations=configurations,
                                               interference=tuple(entries)))
    jobs = replace(problem.jobs, total_steps=rng.uniform(100, 10_000, m),
                   steps_done=np.zeros(m), arrival_time_s=rng.permutation(m).astype(float))
    problem = replace(problem, jobs=jobs)
    if not running:
        return problem
    current = np.full(m, -1, np.int64)
    free = counts.copy()
    for i in range(m):
        types = np.nonzero(problem.usable[i] & (free >= scale[i]))[0]
        if types.size and rng.random() < 0.3:
            current[i] = int(types[0])
            free[types[0]] -= scale[i]
    history = replace(problem.history, current_type=current,
                      current_devices=np.where(current >= 0, scale, 0).astype(np.int64))
    return replace(problem, history=history)


def check_groups_on_types(problem: Problem, plan: Plan, same_gang: bool = True) -> None:
    """Every group on one accelerator type: its members have throughput there and time share
    1 on it, their gangs fit the group (equal to it with `same_gang`), its nodes and shared
    devices are of that type, no job is in two groups, and the groups hold at most each type's
    devices and each node's; jobs allocated are exactly the grouped ones."""
    cluster, jobs = problem.cluster, problem.jobs
    assert plan.groups is not None
    node_index = {name: v for v, name in enumerate(cluster.node_names)}
    sharing = problem.sharing
    shared = sharing.devices if sharing is not None else None
    device_type = ({d: int(shared.type_index[k]) for k, d in enumerate(shared.ids)}
                   if shared is not None else {})
    used = np.zeros(cluster.num_types)
    node_used = np.zeros(len(cluster.node_names))
    grouped: set[int] = set()
    for group in plan.groups.groups:
        j = group.type_index
        assert 0 <= j < cluster.num_types
        assert 1 <= group.devices <= cluster.count[j]
        used[j] += group.devices
        for i in group.members:
            assert i not in grouped
            grouped.add(i)
            assert jobs.throughput[i, j] > 0, (i, j)
            assert jobs.scale_factor[i] <= group.devices
            if same_gang:
                assert jobs.scale_factor[i] == group.devices
            assert plan.time_share[i, j] == 1.0 and plan.time_share[i].sum() == 1.0
        if group.node_devices:
            assert sum(k for _, k in group.node_devices) == group.devices
            for node, k in group.node_devices:
                assert cluster.node_type[node_index[node]] == j
                node_used[node_index[node]] += k
        for device in group.device_ids:
            assert device_type[device] == j
    assert (used <= cluster.count).all(), (used, cluster.count)
    assert (node_used <= cluster.node_devices).all()
    allocated = {i for i, s in enumerate(plan.job_status) if s is JobStatus.ALLOCATED}
    assert allocated == grouped
