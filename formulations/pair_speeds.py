"""Predicted speeds of two jobs sharing devices, for every pair at once.

speed[a, b] = job a's throughput while sharing its devices with job b, over its throughput
alone, on the accelerator type `pair_type[a, b]`. Sources, most specific first: explicit job
pairs of `Problem.colocations`, type pairs (`type_colocations` with `jobs[].job_type`), then
a default from the jobs' sharing scores (lucid's labels: 0 shares well, 2 badly).
"""

from __future__ import annotations

import numpy as np

from apportion.solver.model import FloatArray, IntArray, Problem

SCORE_SPEED = (0.95, 0.9, 0.85)
"""Assumed speed of each member of a pair whose sharing scores sum to 0, 1 or 2 (lucid's
automatic labels put mean co-located speeds below 0.85 at 2 and below 0.95 at 1); pairs
summing above 2 get no default."""


def pair_speeds(problem: Problem, pair_type: IntArray, scores: IntArray) -> FloatArray:
    """(m, m) speed[a, b] (module docstring); NaN = unknown. `pair_type` (m, m) type index of
    each pair (-1 = none); `scores` (m,) sharing scores (-1 = none)."""
    jobs = problem.jobs
    m = jobs.num_jobs
    speed = np.full((m, m), np.nan)
    if m == 0:
        return speed
    total = scores[:, None] + scores[None, :]
    known = (scores[:, None] >= 0) & (scores[None, :] >= 0) & (total <= 2)
    default = np.asarray(SCORE_SPEED)[np.clip(total, 0, 2)]
    speed[known] = default[known]
    coloc = problem.colocations
    if coloc is None:
        return speed
    safe_type = np.maximum(pair_type, 0)
    rows = np.arange(m)[:, None]
    alone = jobs.throughput[rows, safe_type]
    if coloc.type_a and jobs.job_type:
        names = sorted(set(coloc.type_a) | set(coloc.type_b))
        code = {name: c for c, name in enumerate(names)}
        n = problem.cluster.num_types
        table = np.full((len(names), len(names), n), np.nan)
        for q, (ta, tb) in enumerate(zip(coloc.type_a, coloc.type_b, strict=True)):
            ra, rb = coloc.type_throughput_a[q], coloc.type_throughput_b[q]
            if ta == tb:
                ra = rb = (ra + rb) / 2
            table[code[ta], code[tb]] = ra
            table[code[tb], code[ta]] = rb
        job_code = np.array([code.get(t, -1) for t in jobs.job_type], np.int64)
        has = (job_code[:, None] >= 0) & (job_code[None, :] >= 0)
        a_code = np.maximum(job_code, 0)
        rate = table[a_code[:, None], a_code[None, :], safe_type]
        ok = has & np.isfinite(rate) & (alone > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            speed = np.where(ok, rate / alone, speed)
    for p, (a, b) in enumerate(zip(coloc.job_a.tolist(), coloc.job_b.tolist(), strict=True)):
        for x, y, rates in ((a, b, coloc.throughput_a[p]), (b, a, coloc.throughput_b[p])):
            j = int(pair_type[x, y])
            if j >= 0 and jobs.throughput[x, j] > 0:
                speed[x, y] = rates[j] / jobs.throughput[x, j]
    speed[pair_type < 0] = np.nan
    np.fill_diagonal(speed, np.nan)
    return speed
