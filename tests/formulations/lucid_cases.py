"""Lucid instances with every input a pair reads: running jobs alone and in continuing pairs,
waiting jobs, several accelerator types and nodes, sharing scores (some absent), device
memory, job types with type-pair rates, explicit job pairs (some repeated), unknown
priorities."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from apportion.solver.model import Colocations, History, Problem
from apportion.solver.sharing import SharingInputs
from apportion.solver.validation import make_problem
from tests.formulations.colocation_cases import with_nodes


def rich_lucid_problem(seed: int, m: int, types: int = 2, colocations: bool = True,
                       running_share: float = 0.45, devices_per_job: float = 1.2) -> Problem:
    """m jobs on `types` accelerator types (module docstring); about `running_share` of them
    run (a tenth of those in pairs)."""
    rng = np.random.default_rng(seed)
    gpus = rng.choice([1, 2, 4], m, p=[0.6, 0.3, 0.1])
    throughput = rng.uniform(1, 5, (m, types)) * (rng.random((m, types)) >= 0.2)
    counts = np.full(types, max(8, int(devices_per_job * gpus.sum() / types)))
    names = [f"t{j}" for j in range(types)]
    problem = with_nodes(make_problem(names, counts.tolist(), throughput,
                                      scale_factor=gpus.tolist()), 8)
    usable = problem.usable
    current = np.full(m, -1, np.int64)
    free = counts.copy()
    for i in np.nonzero(rng.random(m) < running_share)[0].tolist():
        options = np.nonzero(usable[i] & (free >= gpus[i]))[0]
        if options.size:
            current[i] = int(rng.choice(options))
            free[current[i]] -= gpus[i]
    colocated = np.full(m, -1, np.int64)
    alone = np.nonzero(current >= 0)[0]
    for g in np.unique(gpus[alone]).tolist():  # a tenth of the running jobs share in pairs
        same = alone[gpus[alone] == g]
        same = same[rng.random(same.size) < 0.2]
        for a, b in zip(same[0::2].tolist(), same[1::2].tolist(), strict=False):
            colocated[a] = b  # reported on one member; the partner holds its own placement
    total = rng.uniform(100, 10_000, m)
    total[rng.random(m) < 0.05] = 0.0  # unknown remaining work: unknown priority
    jobs = replace(problem.jobs, total_steps=total, steps_done=np.zeros(m))
    history: History = replace(problem.history, current_type=current,
                               current_devices=np.where(current >= 0, gpus, 0).astype(np.int64),
                               colocated_with=colocated)
    sharing = SharingInputs(gpu_memory_gib=rng.uniform(1, 16, m),
                            sharing_score=rng.integers(-1, 3, m))
    problem = replace(problem, jobs=jobs, history=history, sharing=sharing)
    if not colocations:
        return problem
    kinds = ["resnet", "bert", "gpt", ""]
    job_type = tuple(str(k) for k in rng.choice(kinds, m))
    type_a, type_b = ["resnet", "resnet", "bert", "gpt"], ["bert", "resnet", "gpt", "resnet"]
    pairs = max(1, m // 4)
    first = rng.integers(0, m, pairs)
    second = np.zeros(pairs, np.int64)
    for g in np.unique(gpus[first]).tolist():  # a partner of the same GPU count
        same, which = np.nonzero(gpus == g)[0], np.nonzero(gpus[first] == g)[0]
        second[which] = same[rng.integers(0, same.size, which.size)]
    keep = first != second
    first, second = first[keep], second[keep]
    first = np.concatenate([first, first[:2]])  # a pair given twice: the last one counts
    second = np.concatenate([second, second[:2]])
    coloc = Colocations(
        first.astype(np.int64), second.astype(np.int64),
        throughput[first] * rng.uniform(0.3, 1.0, (first.size, types)),
        throughput[second] * rng.uniform(0.3, 1.0, (first.size, types)),
        tuple(type_a), tuple(type_b),
        rng.uniform(0.5, 4.0, (len(type_a), types)), rng.uniform(0.5, 4.0, (len(type_a), types)),
    )
    return replace(problem, jobs=replace(jobs, job_type=job_type), colocations=coloc)
