"""Muri's interleaving period (B6): jobs sharing the same GPUs in a rotating pipeline.

Each iteration of a job passes through R = 4 stages in sequence (storage I/O, CPU
pre-processing, GPU compute, network synchronization) with durations t^0..t^3 (s). A group of
k <= R jobs runs in R slots per period; the job in position idx is in stage (r - idx) mod R
during slot r, and a slot lasts as long as its longest stage, so for an order pi

    TT(pi) = sum_{r=0}^{R-1} max_idx t_{pi(idx)}^{(r - idx) mod R}         (B6)

and the group's period is TT* = min over the k! orders. Bounds [derived, k <= R]:
max_r sum_{i in G} t_i^r <= TT(pi) <= sum_{i in G} sum_r t_i^r, and TT = sum_r t^r for k = 1.

All functions are vectorized over many groups of one size (numpy arrays of job indices).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from apportion.solver.model import FloatArray, IntArray

STAGES = 4
"""R: storage, CPU, GPU, network."""

STAGE_NAMES = ("storage", "cpu", "gpu", "network")

MAX_GROUP = 4
"""Largest group (k <= R: each member is in a different stage in every slot)."""

_CHUNK = 65_536
"""Groups evaluated at once (bounds the temporary arrays to a few tens of MiB)."""


@dataclass(frozen=True)
class Periods:
    """Best periods of groups of one size k."""

    period_s: FloatArray
    """(G,) TT* of each group (s, before overheads)."""
    order: IntArray
    """(G, k) the members in their best order (job indices): position idx runs stage
    (r - idx) mod R in slot r."""


def _permutations(k: int) -> IntArray:
    return np.array(list(itertools.permutations(range(k))), dtype=np.int64).reshape(-1, k)


def order_period(stage_s: FloatArray) -> FloatArray:
    """TT of each order: `stage_s` is (G, k, R), members in position order; returns (G,)."""
    k = stage_s.shape[1]
    slot = np.arange(STAGES)
    total = np.zeros(stage_s.shape[0])
    for r in range(STAGES):
        stage_of = (slot[r] - np.arange(k)) % STAGES
        total += stage_s[:, np.arange(k), stage_of].max(axis=1)
    return total


def best_periods(stage_s: FloatArray, groups: IntArray) -> Periods:
    """TT* and the best order of each group. `stage_s`: (m, R) stage times of every job (s);
    `groups`: (G, k) job indices, 1 <= k <= R (ties between orders go to the first in
    lexicographic order of positions)."""
    groups = np.asarray(groups, np.int64)
    count, k = groups.shape
    if not 1 <= k <= MAX_GROUP:
        raise ValueError(f"groups of 1 to {MAX_GROUP} jobs, got {k}")
    period = np.empty(count)
    order = np.empty_like(groups)
    perms = _permutations(k)
    for start in range(0, count, _CHUNK):
        block = groups[start : start + _CHUNK]
        best = np.full(block.shape[0], np.inf)
        best_perm = np.zeros(block.shape[0], np.int64)
        for p, perm in enumerate(perms):
            value = order_period(stage_s[block[:, perm]])
            better = value < best * (1 - 1e-12)
            best = np.where(better, value, best)
            best_perm = np.where(better, p, best_perm)
        period[start : start + block.shape[0]] = best
        order[start : start + block.shape[0]] = np.take_along_axis(
            block, perms[best_perm], axis=1
        )
    return Periods(period, order)


def period_lower_bound(stage_s: FloatArray, groups: IntArray) -> FloatArray:
    """(G,) max_r sum_{i in G} t_i^r: no order is faster (each resource serves every member)."""
    return np.asarray(stage_s[groups].sum(axis=1).max(axis=1), np.float64)


def period_upper_bound(stage_s: FloatArray, groups: IntArray) -> FloatArray:
    """(G,) sum_{i in G} sum_r t_i^r: no order is slower than running the members in turn."""
    return np.asarray(stage_s[groups].sum(axis=(1, 2)), np.float64)
