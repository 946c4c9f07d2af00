"""Gavel's round mechanism (A2.11, docs/policies/gavel.md): from a time-share X to the next N
rounds.

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
than a type or a node has.

Lease extension (A2.11). A combination granted the type its jobs ran on in the previous round
keeps those nodes when they still have room for it; such combinations are placed first, and
their grants are marked `lease_extended`. The previous round is the snapshot's current
placement (`history.jobs[].current`: type and nodes) for round 0 and the schedule's own
previous round after that; a pair keeps its nodes only if both jobs were on the same ones.
Without node data (or without a previous placement) nothing is marked. Nodes are the unit
here (the snapshot does not name devices), so "kept" means the same nodes.

Combinations (space sharing, `Plan.colocated`). The entries are combinations c: every job alone
(a single) and every pair (a, b) that shares devices. A pair's X[c, j] is its share (the time a
and b run together on j, shares of the same unordered pair and type summed); a single's is
`X[i, j] - sum of i's pair shares on j` (clipped at 0; below 1e-9 counts as 0). Combinations are
indexed singles 0..m-1, then pairs m.. in order of first appearance; this index breaks the
remaining ties. A pair holds s_a = s_b devices of one type once (skipped if the scale factors
differ); it is skipped if either member already runs this round, and when granted both members
are marked, so a job runs in at most one combination (and on one type) per round. Both jobs of
a granted pair get a `RoundGrant` with the same type, devices and nodes, each naming the other
in `colocated_with`. Pairs are eligible where X[c, j] > 0 and s_c <= W[j] (their share is only
positive where both jobs can share on j). `job_time` and the deficit are per combination; the
one job_time update after a round adds delta to the granted combination only.

Pair history (our choice): the snapshot carries per-job received time only, so a job's
`received_time_s[i, j]` is split over its combinations on j in proportion to their X (the past
is assumed to have followed this plan's mix): its single is attributed `received * X_single /
X[i, j]` and each pair `received * X[c, j] / X[i, j]`; a pair's received time is the mean of
its two members' attributed parts. Every combination, pairs included, then gets the same
pseudo-count delta/2 as a single (A2.11), and the deficit uses the attributed received time.
With no history, pairs start at delta/2 exactly like fresh jobs. Jobs in no pair keep their
full received time, so without pairs the schedule is exactly the single-job mechanism above.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import FloatArray, IntArray, Problem
from apportion.solver.result import RoundGrant, ScheduledRound

GAVEL_ROUND_S = 360.0
"""Gavel's round length delta (s), used when the snapshot gives none."""
FRESH = 1e9
"""Priority multiplier of a job with no time on a type (fresh jobs first)."""

Colocated = tuple[tuple[int, int, int, float], ...]
"""`Plan.colocated`: (job a, job b, type index, share of time a and b run together there)."""

SINGLE_TOLERANCE = 1e-9
"""A paired job's single share (time share minus its pair shares) below this counts as 0."""


@dataclass(frozen=True)
class Combinations:
    """The entries of the round mechanism: singles 0..m-1 (job i alone), then pairs."""

    X: FloatArray
    """(C, n) time share of the combination on each type (fraction of wall-clock time)."""
    received: FloatArray
    """(C, n) time the combination received on each type since the reset (s)."""
    eligible: NDArray[np.bool_]
    """(C, n) may be granted on the type."""
    members: tuple[tuple[int, ...], ...]
    """Job indices of each combination: (i,) for a single, (a, b) for a pair."""
    scale: IntArray
    """(C,) devices the combination holds while it runs."""


def combinations(problem: Problem, X: FloatArray, colocated: Colocated = ()) -> Combinations:
    """Singles and pairs with their shares and attributed history (see module docstring)."""
    m, n = X.shape
    s = problem.jobs.scale_factor.astype(np.int64)
    W = problem.cluster.count.astype(np.int64)
    received = problem.history.received_time_s
    pair_rows: dict[tuple[int, int], FloatArray] = {}
    orientation: dict[tuple[int, int], tuple[int, int]] = {}
    for a, b, j, share in colocated:
        if a == b or not share > 0:
            continue
        key = (min(a, b), max(a, b))
        if key not in pair_rows:
            pair_rows[key] = np.zeros(n)
            orientation[key] = (int(a), int(b))
        pair_rows[key][j] += share
    eligible = (X > 0) & problem.usable
    if not pair_rows:
        return Combinations(X, received, eligible, tuple((i,) for i in range(m)), s)
    pairs = [orientation[key] for key in pair_rows]
    pair_X = np.array([pair_rows[key] for key in pair_rows])
    first = np.array([p[0] for p in pairs], np.int64)
    second = np.array([p[1] for p in pairs], np.int64)
    in_pairs = np.zeros((m, n))
    np.add.at(in_pairs, first, pair_X)
    np.add.at(in_pairs, second, pair_X)
    paired = np.union1d(first, second)
    single_X = X.copy()
    rest = np.maximum(X[paired] - in_pairs[paired], 0.0)
    single_X[paired] = np.where(rest > SINGLE_TOLERANCE, rest, 0.0)
    # received time per unit of time share, for the proportional split of paired jobs' history
    per_share = np.divide(received, X, out=np.zeros((m, n)), where=X > 0)
    single_received = received.copy()
    single_received[paired] = np.where(
        X[paired] > 0, per_share[paired] * single_X[paired], received[paired]
    )
    pair_received = 0.5 * (per_share[first] + per_share[second]) * pair_X
    pair_scale = s[first]
    pair_eligible = (
        (pair_X > 0) & (s[first] == s[second])[:, None] & (pair_scale[:, None] <= W[None, :])
    )
    single_eligible = eligible.copy()
    single_eligible[paired] &= single_X[paired] > 0
    return Combinations(
        X=np.vstack([single_X, pair_X]),
        received=np.vstack([single_received, pair_received]),
        eligible=np.vstack([single_eligible, pair_eligible]),
        members=tuple((i,) for i in range(m)) + tuple(pairs),
        scale=np.concatenate([s, pair_scale]),
    )


def _placement(
    problem: Problem,
    j: int,
    items: list[tuple[int, int]],
    previous: dict[int, tuple[int, ...]],
) -> tuple[dict[int, tuple[int, ...]], set[int]]:
    """Nodes (indices) for the combinations (index, devices) granted on type j, and the set of
    combinations that kept their `previous` nodes (lease extension; see module docstring)."""
    cluster = problem.cluster
    nodes = np.flatnonzero(cluster.node_type == j) if cluster.node_names else np.zeros(0, int)
    if nodes.size == 0:
        return {c: () for c, _ in items}, set()
    free = {int(k): int(cluster.node_devices[k]) for k in nodes}
    placed, kept = place_on_nodes(free, items, previous)
    return {c: tuple(k for k, _ in pairs) for c, pairs in placed.items()}, kept


def place_on_nodes(
    free: dict[int, int],
    items: list[tuple[int, int]],
    previous: dict[int, tuple[int, ...]],
) -> tuple[dict[int, tuple[tuple[int, int], ...]], set[int]]:
    """Gavel's server placement on nodes with `free` devices (node -> free devices, changed
    in place): items (key, devices) in decreasing devices; leases first (an item keeps its
    `previous` nodes when they still have room), then the node with the fewest free devices
    that holds the item whole, else nodes in decreasing free devices. Returns per item its
    (node, devices) pairs, and the keys that kept their previous nodes."""
    out: dict[int, tuple[tuple[int, int], ...]] = {}
    kept: set[int] = set()
    ordered = sorted(items, key=lambda item: (-item[1], item[0]))
    for c, need in ordered:  # lease extensions first
        before = previous.get(c, ())
        if before and all(k in free for k in before) and sum(free[k] for k in before) >= need:
            left = need
            pairs = []
            for k in before:
                use = min(free[k], left)
                free[k] -= use
                left -= use
                pairs.append((k, use))
            out[c] = tuple(pairs)
            kept.add(c)
    for c, need in ordered:
        if c in out:
            continue
        whole = [k for k in free if free[k] >= need]
        if whole:
            k = min(whole, key=lambda k: (free[k], k))
            free[k] -= need
            out[c] = ((k, need),)
            continue
        taken: list[tuple[int, int]] = []
        for k in sorted(free, key=lambda k: (-free[k], k)):
            if need == 0:
                break
            use = min(free[k], need)
            if use:
                free[k] -= use
                need -= use
                taken.append((k, use))
        out[c] = tuple(taken)
    return out, kept


def _previous_nodes(
    members: tuple[tuple[int, ...], ...], job_type: IntArray, job_nodes: list[tuple[int, ...]],
    j: int, combos: list[int],
) -> dict[int, tuple[int, ...]]:
    """The nodes each combination granted on j held in the previous round: its jobs' common
    nodes there, if they all ran on type j on the same nodes."""
    out: dict[int, tuple[int, ...]] = {}
    for c in combos:
        jobs = members[c]
        first = job_nodes[jobs[0]]
        if first and all(job_type[i] == j and job_nodes[i] == first for i in jobs):
            out[c] = first
    return out


def round_schedule(
    problem: Problem,
    X: FloatArray,
    rounds: int,
    colocated: Colocated = (),
    deadline: Deadline = NO_DEADLINE,
) -> tuple[ScheduledRound, ...]:
    """The next `rounds` rounds for time shares X (m, n) (each job's total time on each type,
    alone and in pairs) and the pairs `colocated` (`Plan.colocated`; see module docstring).
    Stops early, with the rounds made so far (at least one), once `deadline` has passed."""
    m, n = X.shape
    if rounds <= 0 or m == 0:
        return ()
    delta = problem.round_duration_s or GAVEL_ROUND_S
    W = problem.cluster.count.astype(np.int64)
    comb = combinations(problem, X, colocated)
    Xc, s, eligible, members = comb.X, comb.scale, comb.eligible, comb.members
    C = Xc.shape[0]
    job_time = comb.received + delta / 2.0
    deficit = Xc * problem.history.elapsed_since_reset_s - comb.received
    order = np.argsort(-problem.jobs.throughput.sum(axis=0), kind="stable")
    hist = problem.history
    last_type = hist.current_type.copy()
    last_nodes: list[tuple[int, ...]] = list(hist.current_nodes)
    names = problem.cluster.node_names
    out: list[ScheduledRound] = []
    for r in range(rounds):
        if r > 0 and deadline.expired():
            break
        worker_time = job_time.sum(axis=0)
        fraction = np.divide(
            job_time, worker_time[None, :], out=np.zeros((C, n)), where=worker_time > 0
        )
        priority = np.where(fraction > 0, Xc / np.where(fraction > 0, fraction, 1.0), Xc * FRESH)
        priority = np.where(eligible, priority, 0.0)
        remaining = W.copy()
        scheduled = np.zeros(m, bool)
        granted: dict[int, list[int]] = {}
        for j in order:
            cand = np.flatnonzero(eligible[:, j])
            keys = np.lexsort((-Xc[cand, j], -deficit[cand, j], -priority[cand, j]))
            for c in cand[keys]:
                if remaining[j] == 0:
                    break
                if s[c] > remaining[j] or any(scheduled[i] for i in members[c]):
                    continue
                remaining[j] -= s[c]
                for i in members[c]:
                    scheduled[i] = True
                granted.setdefault(int(j), []).append(int(c))
        grants: list[RoundGrant] = []
        this_type = np.full(m, -1)
        this_nodes: list[tuple[int, ...]] = [()] * m
        for j, combos in granted.items():
            previous = _previous_nodes(members, last_type, last_nodes, j, combos)
            nodes, kept = _placement(problem, j, [(c, int(s[c])) for c in combos], previous)
            for c in combos:
                jobs = members[c]
                for i in jobs:
                    partner = next((k for k in jobs if k != i), -1)
                    grants.append(
                        RoundGrant(
                            job=i,
                            type_index=j,
                            devices=int(s[c]),
                            nodes=tuple(names[k] for k in nodes[c]),
                            colocated_with=partner,
                            lease_extended=c in kept,
                        )
                    )
                    this_type[i], this_nodes[i] = j, nodes[c]
                job_time[c, j] += delta
        last_type, last_nodes = this_type, this_nodes
        grants.sort(key=lambda g: (g.type_index, g.job))
        out.append(ScheduledRound(index=r, grants=tuple(grants)))
    return tuple(out)
