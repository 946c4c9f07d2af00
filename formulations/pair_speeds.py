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


def type_pair_rates(problem: Problem) -> tuple[FloatArray, IntArray] | None:
    """((C, C, n) throughput of a job of job type c while sharing with one of job type d, on
    each accelerator type (steps/s, NaN = not given), (m,) each job's job type code c (-1 =
    none)) from `type_colocations` (a pair of one job type: the mean of its two rates); None
    without type pairs or job types."""
    coloc, jobs = problem.colocations, problem.jobs
    if coloc is None or not coloc.type_a or not jobs.job_type:
        return None
    names = sorted(set(coloc.type_a) | set(coloc.type_b))
    code = {name: c for c, name in enumerate(names)}
    table = np.full((len(names), len(names), problem.cluster.num_types), np.nan)
    for q, (ta, tb) in enumerate(zip(coloc.type_a, coloc.type_b, strict=True)):
        ra, rb = coloc.type_throughput_a[q], coloc.type_throughput_b[q]
        if ta == tb:
            ra = rb = (ra + rb) / 2
        table[code[ta], code[tb]] = ra
        table[code[tb], code[ta]] = rb
    return table, np.array([code.get(t, -1) for t in jobs.job_type], np.int64)


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
    typed = type_pair_rates(problem)
    if typed is not None:
        table, job_code = typed
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


class PairSpeeds:
    """`pair_speeds` for chosen pairs only: `speed(a, b, pair_type)` is `pair_speeds(problem,
    T, scores)[a, b]` for any T with T[a, b] = pair_type (the same values, bit for bit), in
    memory linear in the jobs, the colocations and the pairs asked for. `a`, `b` and
    `pair_type` broadcast against each other."""

    def __init__(self, problem: Problem, scores: IntArray) -> None:
        jobs = problem.jobs
        self.problem = problem
        self.scores = scores
        self.num_jobs = jobs.num_jobs
        coloc = problem.colocations
        self.table: FloatArray | None = None
        self.job_code = np.zeros(0, np.int64)
        self.pair_key = np.zeros(0, np.int64)
        """Sorted keys a * m + b of the explicit pairs (each direction, the last one given)."""
        self.pair_rates = np.zeros((0, problem.cluster.num_types))
        """(keys, n) a's throughput on each type while sharing with b (steps/s)."""
        if coloc is None:
            return
        typed = type_pair_rates(problem)
        if typed is not None:
            self.table, self.job_code = typed
        m = self.num_jobs
        first = np.asarray(coloc.job_a, np.int64)
        if first.size == 0:
            return
        second = np.asarray(coloc.job_b, np.int64)
        # directed entries in the order the dense loop writes them: (a, b) then (b, a)
        keys = np.column_stack([first * m + second, second * m + first]).reshape(-1)
        rates = np.stack([np.asarray(coloc.throughput_a).reshape(first.size, -1),
                          np.asarray(coloc.throughput_b).reshape(first.size, -1)], axis=1)
        rates = rates.reshape(keys.size, -1)
        last = keys.size - 1 - np.unique(keys[::-1], return_index=True)[1]
        self.pair_key = keys[last]
        self.pair_rates = rates[last]

    def speed(self, a: IntArray, b: IntArray, pair_type: IntArray) -> FloatArray:
        """speed[a, b] on the type `pair_type` (-1 = none), NaN = unknown."""
        jobs = self.problem.jobs
        s = self.scores
        a, b, pair_type = np.broadcast_arrays(a, b, pair_type)
        total = s[a] + s[b]
        known = (s[a] >= 0) & (s[b] >= 0) & (total <= 2)
        speed = np.where(known, np.asarray(SCORE_SPEED)[np.clip(total, 0, 2)], np.nan)
        if self.problem.colocations is None:
            return speed
        safe_type = np.maximum(pair_type, 0)
        alone = jobs.throughput[a, safe_type]
        if self.table is not None:
            code_a, code_b = self.job_code[a], self.job_code[b]
            has = (code_a >= 0) & (code_b >= 0)
            rate = self.table[np.maximum(code_a, 0), np.maximum(code_b, 0), safe_type]
            ok = has & np.isfinite(rate) & (alone > 0)
            with np.errstate(divide="ignore", invalid="ignore"):
                speed = np.where(ok, rate / alone, speed)
        if self.pair_key.size:
            key = a * self.num_jobs + b
            at = np.minimum(np.searchsorted(self.pair_key, key), self.pair_key.size - 1)
            listed = (self.pair_key[at] == key) & (pair_type >= 0) & (alone > 0)
            if listed.any():
                rows = at[listed]
                rates = self.pair_rates[rows, safe_type[listed]]
                speed[listed] = rates / alone[listed]
        return np.where((pair_type < 0) | (a == b), np.nan, speed)
