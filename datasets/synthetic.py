"""Seeded synthetic clusters and workloads for examples, tests and benchmarks.

Two throughput structures (issue #2's benchmark families):
* *catalog*: every job is one of a few dozen job types (model x batch size) times a scale
  factor, as Gavel's generator and real workloads produce; jobs of one catalog entry have
  identical throughput rows.
* *distinct*: every job's throughput row is drawn independently.

Throughputs are steps/s of the whole job on its scale factor; the speed-up structure follows
the reference tables qualitatively (k80 slowest; p100 1.2-3x k80; v100 1.1-2x p100; multi-GPU
jobs scale sub-linearly).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apportion.solver.model import FloatArray, IntArray, Problem
from apportion.solver.validation import make_problem

DEFAULT_TYPES: tuple[str, ...] = ("v100", "p100", "k80")
SCALE_FACTORS: tuple[int, ...] = (1, 2, 4, 8)
SCALE_PROBABILITIES: tuple[float, ...] = (0.70, 0.10, 0.15, 0.05)


@dataclass(frozen=True)
class Catalog:
    """Throughput per catalog entry: `throughput[e, j]` (steps/s) for entry e = (job type,
    scale factor) on type j, and `scale_factor[e]`."""

    throughput: FloatArray
    scale_factor: IntArray


def _single_gpu_rows(count: int, rng: np.random.Generator) -> FloatArray:
    """(count, 3) single-GPU throughputs on (v100, p100, k80), steps/s."""
    k80 = np.exp(rng.uniform(np.log(0.3), np.log(30.0), count))
    p100 = k80 * rng.uniform(1.2, 3.0, count)
    v100 = p100 * rng.uniform(1.1, 2.0, count)
    return np.stack([v100, p100, k80], axis=1)


def make_catalog(num_job_types: int = 26, seed: int = 0) -> Catalog:
    """A catalog of `num_job_types` x 4 scale factors, Gavel-like."""
    rng = np.random.default_rng(seed)
    base = _single_gpu_rows(num_job_types, rng)
    rows, scales = [], []
    for s in SCALE_FACTORS:
        efficiency = rng.uniform(0.6, 0.95, (num_job_types, 1)) ** np.log2(s)
        rows.append(base * s * efficiency)
        scales.append(np.full(num_job_types, s))
    return Catalog(np.concatenate(rows), np.concatenate(scales).astype(np.int64))


def cluster_counts(num_jobs: int, gpus_per_job: float = 0.75) -> IntArray:
    """Device counts for three types, about `gpus_per_job` devices per job in total, split
    evenly (Gavel's 2,048 jobs on 1,536 GPUs ratio), at least 8 per type."""
    total = max(24, int(gpus_per_job * num_jobs))
    third = total // 3
    return np.array([third, third, total - 2 * third], dtype=np.int64)


def catalog_problem(num_jobs: int, seed: int = 0, catalog: Catalog | None = None) -> Problem:
    """`num_jobs` jobs drawn from a catalog (identical rows within an entry), weight 1."""
    cat = catalog or make_catalog(seed=seed)
    rng = np.random.default_rng(seed + 1)
    per_scale = len(cat.scale_factor) // len(SCALE_FACTORS)
    scale_idx = rng.choice(len(SCALE_FACTORS), size=num_jobs, p=SCALE_PROBABILITIES)
    job_type = rng.integers(0, per_scale, size=num_jobs)
    entry = scale_idx * per_scale + job_type
    return make_problem(
        DEFAULT_TYPES,
        cluster_counts(num_jobs),
        cat.throughput[entry],
        cat.scale_factor[entry],
        np.ones(num_jobs),
    )


def distinct_problem(num_jobs: int, seed: int = 0) -> Problem:
    """`num_jobs` jobs with independently drawn throughput rows and scale factors, weight 1."""
    rng = np.random.default_rng(seed)
    scale = rng.choice(SCALE_FACTORS, size=num_jobs, p=SCALE_PROBABILITIES).astype(np.int64)
    rows = (
        _single_gpu_rows(num_jobs, rng)
        * (scale * rng.uniform(0.6, 0.95, num_jobs) ** np.log2(scale))[:, None]
    )
    return make_problem(DEFAULT_TYPES, cluster_counts(num_jobs), rows, scale, np.ones(num_jobs))
