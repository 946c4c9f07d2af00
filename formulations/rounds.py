"""Gavel's round mechanism (formulations.md A2.11): from a time-share X to the next N rounds.

State at the last reset (the client's bookkeeping in the snapshot history):
`job_time[i][j] = received_time_s[i][j] + delta/2` (half a round of pseudo-count per job and
type, which damps early oscillation) and `worker_time[j] = sum_i job_time[i][j]`. The deficit
tie-break is `X[i,j] * elapsed_since_reset_s - received_time_s[i,j]` (s): the time the job is
owed on j since the reset under the current X.

Before every round: `fraction = job_time / worker_time`, `priority = X / fraction`
(`X * 1e9` if fraction = 0; 0 where X = 0 or T = 0). Types are visited in decreasing
`sum_i T[i,j]`; within a type, jobs in decreasing (priority, deficit, X) order are granted
`s_i` devices when they fit and have not run this round (a job runs on at most one type per
round). After the round every granted job's `job_time` grows by delta.

Placement (when the snapshot lists nodes): within a type, jobs in decreasing s_i; a job takes
the node with the fewest free devices that still holds it whole (best fit); if no node can,
it takes whole nodes in decreasing free devices (as few nodes as possible). Never more devices
than a type or a node has. Lease extension (keeping last round's devices) is not modelled.
"""

from __future__ import annotations

import numpy as np

from apportion.solver.model import FloatArray, Problem
from apportion.solver.result import RoundGrant, ScheduledRound

GAVEL_ROUND_S = 360.0
"""Gavel's round length delta (s), used when the snapshot gives none."""
FRESH = 1e9
"""Priority multiplier of a job with no time on a type (fresh jobs first)."""

LP_POLICIES = frozenset(
    {
        "weighted_max_min_fairness",
        "isolated",
        "max_sum_throughput",
        "cost_normalized_throughput",
        "min_makespan",
        "themis_finish_time_fairness",
    }
)
"""Policies whose time-share plan gets the round schedule when `schedule_rounds > 0`."""


def _placement(problem: Problem, j: int, jobs: list[int]) -> dict[int, tuple[str, ...]]:
    """Nodes for the jobs granted on type j (consolidated, see module docstring)."""
    cluster = problem.cluster
    nodes = np.flatnonzero(cluster.node_type == j) if cluster.node_names else np.zeros(0, int)
    if nodes.size == 0:
        return {i: () for i in jobs}
    free = {int(k): int(cluster.node_devices[k]) for k in nodes}
    out: dict[int, tuple[str, ...]] = {}
    for i in sorted(jobs, key=lambda i: (-int(problem.jobs.scale_factor[i]), i)):
        need = int(problem.jobs.scale_factor[i])
        whole = [k for k in free if free[k] >= need]
        if whole:
            k = min(whole, key=lambda k: (free[k], k))
            free[k] -= need
            out[i] = (cluster.node_names[k],)
            continue
        taken: list[str] = []
        for k in sorted(free, key=lambda k: (-free[k], k)):
            if need == 0:
                break
            use = min(free[k], need)
            if use:
                free[k] -= use
                need -= use
                taken.append(cluster.node_names[k])
        out[i] = tuple(taken)
    return out


def round_schedule(problem: Problem, X: FloatArray, rounds: int) -> tuple[ScheduledRound, ...]:
    """The next `rounds` rounds for time shares X (m, n) (see module docstring)."""
    m, n = X.shape
    if rounds <= 0 or m == 0:
        return ()
    delta = problem.round_duration_s or GAVEL_ROUND_S
    T = problem.jobs.throughput
    s = problem.jobs.scale_factor.astype(np.int64)
    W = problem.cluster.count.astype(np.int64)
    received = problem.history.received_time_s
    if received.shape != (m, n):
        received = np.zeros((m, n))
    job_time = received + delta / 2.0
    deficit = X * problem.history.elapsed_since_reset_s - received
    eligible = (X > 0) & (T > 0) & (s[:, None] <= W[None, :])
    order = np.argsort(-T.sum(axis=0), kind="stable")
    out: list[ScheduledRound] = []
    for r in range(rounds):
        worker_time = job_time.sum(axis=0)
        fraction = np.divide(
            job_time, worker_time[None, :], out=np.zeros((m, n)), where=worker_time > 0
        )
        priority = np.where(fraction > 0, X / np.where(fraction > 0, fraction, 1.0), X * FRESH)
        priority = np.where(eligible, priority, 0.0)
        remaining = W.copy()
        scheduled = np.zeros(m, bool)
        granted: dict[int, list[int]] = {}
        for j in order:
            cand = np.flatnonzero(eligible[:, j])
            keys = np.lexsort((-X[cand, j], -deficit[cand, j], -priority[cand, j]))
            for i in cand[keys]:
                if remaining[j] == 0:
                    break
                if scheduled[i] or s[i] > remaining[j]:
                    continue
                remaining[j] -= s[i]
                scheduled[i] = True
                granted.setdefault(int(j), []).append(int(i))
        grants: list[RoundGrant] = []
        for j, jobs in granted.items():
            nodes = _placement(problem, j, jobs)
            for i in jobs:
                grants.append(RoundGrant(job=i, type_index=j, devices=int(s[i]), nodes=nodes[i]))
                job_time[i, j] += delta
        grants.sort(key=lambda g: (g.type_index, g.job))
        out.append(ScheduledRound(index=r, grants=tuple(grants)))
    return tuple(out)
