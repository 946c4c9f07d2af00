"""Muri (B6): jobs that stress different resources interleave on the same GPUs.

The core works on plain arrays (`MuriInstance`):

* `admitted`: Muri's admission. Jobs in priority order (Muri-S: least remaining GPU-time
  first; Muri-L: least attained GPU-time first); each job that still fits takes a slot of its
  GPU count, which admits it and the next MAX_GROUP_SIZE - 1 jobs of the same GPU count.
  A group always runs on one accelerator type every member can use (throughput > 0, at least
  its GPU count of devices), within that type's GPUs.
* `matching_groups`: Muri's grouping. Per GPU count, one vertex per group, an edge when the
  union has at most `max_group_size` jobs, a type all its members can use, and its used
  ratio w = sum_i sum_r t_i^r /
  (R * period) exceeds lambda * size / R; a maximum-weight matching (exact, certified by
  `apportion.formulations.matching`) merges pairs while the admitted jobs need more GPUs than
  the cluster has; rounds repeat (pairs, then pairs of pairs). Groups slower than their members
  run one after another are split again (autopack); groups are admitted in priority order,
  each on the first type (cluster order) its members can use with its GPUs free. A GPU count
  with more groups than the matching takes (`matching.MAX_VERTICES`, dense weights) is matched
  in consecutive blocks of that many.
* `exact_groups`: the set packing those rounds approximate. Every group of 1..max_group_size
  admitted jobs of one GPU count, on every type all its members can use, is a column of value
  sum_i w_i * solo_i / period (the members' weighted throughput relative to running alone);
  choose columns with every job at most once and within every type's GPUs, maximizing the
  total. A HiGHS MIP with a proven bound; the matching plan is a feasible
  point of it, so its objective is never above the exact one.

`grouping_value` is that objective for any grouping, the common yardstick of the plan and the
gap. Periods include the optional overhead factors (Muri measured 1.015 for a job alone and
1.33, 1.5, 1.37 for groups of 2, 3, 4, relative to the raw period of the stage times).

Under a deadline: a round is not started when its candidate merges would take longer than the
time left; the used ratios stop at the deadline (a block cut there merges nothing) and the
merges made by then are kept; groups are admitted only while time is left to place them, and
placed (each on its type's nodes: `NodePool`) in priority order until the deadline.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from apportion.formulations.group_plans import NO_USABLE_TYPE, groups_plan
from apportion.formulations.interleave import STAGES, best_periods
from apportion.formulations.matching import (
    MAX_VERTICES,
    Matching,
    greedy_matching,
    max_weight_matching,
)
from apportion.formulations.node_pool import NodePool
from apportion.solver.backends.highs import INFINITY, HighsSettings, LinearModel, solve_highs
from apportion.solver.backends.status import SolverStatus
from apportion.solver.certificate import termination
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.groups import ColocationGroup, GroupSection
from apportion.solver.model import Compat, FloatArray, IntArray, Problem, SolveOptions
from apportion.solver.parameters import BaseOrder, MuriParameters
from apportion.solver.result import Certificate, JobStatus, Plan, Termination, relative_gap
from apportion.solver.sharing import SharingInputs

MURI_OVERHEAD = (1.015, 1.33, 1.5, 1.37)
"""Muri's measured period factors for groups of 1, 2, 3, 4 jobs (compat muri): alone the
iteration time is 1.015 x the sum of its stages; a group's period is 1.33 (2 jobs), 1.5 (3)
or 1.37 (4) x its raw period (upstream's numbers, not monotone)."""

SLOTS_PER_JOB = 4
"""Jobs one admitted slot admits (Muri's packing_num)."""

MAX_ROUNDS = 4
"""Matching rounds (Muri's packing_num)."""

MAX_SET_PACKING_COLUMNS = 250_000
"""Largest set packing solved exactly (candidate groups over all GPU counts)."""

MERGE_PAIRS_PER_CHUNK = 1 << 18
"""Candidate merges whose used ratio is computed together, with a look at the deadline before
each chunk (and a bound on the temporary arrays)."""
MERGE_S_PER_PAIR = 2e-7
"""Time to compute the used ratio of one candidate merge (measured: 6e-7 to 9e-7 s on a loaded
2-core machine, about 2e-7 idle). A round whose candidate merges would take longer than the
time left is not started."""

PLAN_S_PER_JOB = 1.5e-5
"""Time (s) the matching rounds leave, per job, for admitting, ordering and placing the groups
and building the plan (measured: 1.3-1.5 s for 100,000 jobs in 55,617 running groups on a
loaded 2-core machine)."""
GROUPS_PLAN_S_PER_JOB = 2e-6
"""Time (s) the placement leaves, per job, for building the plan from its groups."""
PLACE_CHECK_EVERY = 1024
"""Groups placed between two looks at the deadline."""


@dataclass(frozen=True)
class MuriInstance:
    """Muri's inputs on arrays (m jobs)."""

    stage_s: FloatArray
    """(m, 4) per-iteration stage times (s, >= 0, row sums > 0)."""
    gpus: IntArray
    """(m,) GPUs each job needs (>= 1)."""
    priority: FloatArray
    """(m,) sort key, ascending = served first (ties: job order)."""
    weight: FloatArray
    """(m,) value of one unit of relative throughput of the job (> 0)."""
    cluster_gpus: int
    max_group_size: int = 4
    weight_threshold: float = 0.0
    """lambda: an edge needs a used ratio above lambda * size / R."""
    overhead: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)
    """Period factor for groups of 1..4 jobs (>= 1 in practice)."""
    sort_merges: bool = True
    """Merge the heaviest pairs first (False: Muri's list order, whose sort is a no-op)."""
    autopack: bool = True
    type_gpus: IntArray | None = None
    """(n,) GPUs of each accelerator type (None: one type with all `cluster_gpus`)."""
    usable: np.ndarray | None = None
    """(m, n) bool: the job has throughput on the type (None: every job on every type)."""

    @property
    def num_jobs(self) -> int:
        return int(self.gpus.size)

    def capacity(self) -> IntArray:
        """(n,) GPUs of each accelerator type."""
        if self.type_gpus is None:
            return np.array([self.cluster_gpus], np.int64)
        return self.type_gpus

    def runs_on(self) -> np.ndarray:
        """(m, n) bool: the job can run on the type (usable, and its GPUs fit the type)."""
        capacity = self.capacity()
        usable = (np.ones((self.num_jobs, capacity.size), bool) if self.usable is None
                  else self.usable)
        return np.asarray(usable & (self.gpus[:, None] <= capacity[None, :]))

    def solo_s(self) -> FloatArray:
        """(m,) iteration time of each job alone (s, with the overhead of a job alone)."""
        return np.asarray(self.stage_s.sum(axis=1) * self.overhead[0], np.float64)


@dataclass(frozen=True)
class Grouping:
    """Groups of an instance: members in pipeline order, their period, whether they run."""

    groups: tuple[tuple[int, ...], ...]
    period_s: FloatArray
    """(G,) period of each group (s, with overheads)."""
    running: np.ndarray
    """(G,) bool: the group got GPUs."""
    type_index: IntArray
    """(G,) the accelerator type of each running group (-1 = not running)."""
    objective: float
    """`grouping_value` of the running groups."""
    matchings: tuple[Matching, ...] = ()
    """The maximum-weight matchings solved (matching_groups)."""
    detail: str = ""
    admitted: bool = True
    """False: the deadline passed before the groups were admitted (there are none)."""


def _not_admitted(matchings: tuple[Matching, ...], detail: str) -> Grouping:
    """The grouping of a deadline that passed before any group was admitted."""
    note = "time limit: no group admitted"
    return Grouping((), np.zeros(0), np.zeros(0, bool), np.zeros(0, np.int64), 0.0, matchings,
                    f"{detail}; {note}" if detail else note, admitted=False)


@dataclass(frozen=True)
class ExactGroups:
    grouping: Grouping
    status: SolverStatus
    bound: float | None
    columns: int
    solve_time_s: float = 0.0
    detail: str = ""


def period_of(instance: MuriInstance, groups: IntArray) -> tuple[FloatArray, IntArray]:
    """(G,) periods with overheads and (G, k) best orders of groups of one size k."""
    k = groups.shape[1]
    if k == 1:
        return instance.solo_s()[groups[:, 0]], groups
    best = best_periods(instance.stage_s, groups)
    return best.period_s * instance.overhead[k - 1], best.order


def group_values(instance: MuriInstance, groups: IntArray, period_s: FloatArray) -> FloatArray:
    """(G,) sum over members of weight * solo time / period (relative throughput)."""
    solo = instance.solo_s()
    return np.asarray((instance.weight[groups] * solo[groups]).sum(axis=1) / period_s)


def grouping_value(instance: MuriInstance, groups: tuple[tuple[int, ...], ...],
                   running: np.ndarray, period_s: FloatArray | None = None
                   ) -> tuple[float, FloatArray]:
    """The set-packing objective of the running groups and every group's period (s);
    `period_s`: the groups' periods when already known (not computed again)."""
    periods = np.zeros(len(groups)) if period_s is None else period_s
    total = 0.0
    for _, which, members in _by_size(groups):
        if period_s is None:
            period, _ = period_of(instance, members)
            periods[which] = period
        else:
            period = period_s[which]
        values = group_values(instance, members, period)
        total += float(values[running[which]].sum())
    return total, periods


def admitted(instance: MuriInstance) -> IntArray:
    """Muri's admitted jobs, in priority order (module docstring); a job with a NaN priority
    or no type it can run on is never admitted."""
    order = np.argsort(instance.priority, kind="stable")
    order = order[~np.isnan(instance.priority[order]) & instance.runs_on()[order].any(axis=1)]
    buckets: dict[int, list[int]] = {}
    for i in order.tolist():
        buckets.setdefault(int(instance.gpus[i]), []).append(i)
    pointer = dict.fromkeys(buckets, 0)
    used = np.zeros(instance.num_jobs, bool)
    free = instance.cluster_gpus
    chosen: list[int] = []
    for i in order.tolist():
        if used[i]:
            continue
        g = int(instance.gpus[i])
        if g > free:
            continue
        free -= g
        bucket = buckets[g]
        upto = min(pointer[g] + SLOTS_PER_JOB, len(bucket))
        for j in bucket[pointer[g]:upto]:
            used[j] = True
            chosen.append(j)
        pointer[g] = upto
    rank = np.empty(instance.num_jobs, np.int64)
    rank[order] = np.arange(order.size)
    return np.array(sorted(chosen, key=lambda j: rank[j]), np.int64)


def _merge_weights(instance: MuriInstance, nodes: list[tuple[int, ...]],
                   deadline: Deadline = NO_DEADLINE) -> FloatArray | None:
    """(n, n) used ratio of the union of every two groups that may merge (0 = no edge); None
    when the deadline passed before they were all computed."""
    n = len(nodes)
    weight = np.zeros((n, n))
    if n < 2:
        return weight
    sizes = np.array([len(node) for node in nodes])
    padded = np.full((n, instance.max_group_size), -1, np.int64)
    for row, node in enumerate(nodes):
        padded[row, : len(node)] = node
    busy = instance.stage_s.sum(axis=1)
    lam = instance.weight_threshold
    # types every member of each node can use (padding: a row of True): a merge needs one
    runs_on = np.vstack([instance.runs_on(), np.ones((1, instance.capacity().size), bool)])
    node_types = np.asarray(runs_on[padded].all(axis=1))
    for sa, sb in itertools.product(range(1, instance.max_group_size), repeat=2):
        k = sa + sb
        if k > instance.max_group_size:
            continue
        ia = np.nonzero(sizes == sa)[0]
        ib = np.nonzero(sizes == sb)[0]
        if ia.size == 0 or ib.size == 0:
            continue
        rows = max(1, MERGE_PAIRS_PER_CHUNK // ib.size)
        for first in range(0, ia.size, rows):
            if deadline.expired():
                return None
            grid_a, grid_b = np.meshgrid(ia[first:first + rows], ib, indexing="ij")
            keep = grid_a < grid_b
            a, b = grid_a[keep], grid_b[keep]
            if a.size == 0:
                continue
            members = np.hstack([padded[a, :sa], padded[b, :sb]])
            period, _ = period_of(instance, members)
            ratio = busy[members].sum(axis=1) / (STAGES * period)
            floor = lam * k / STAGES
            ok = (ratio > floor) & ~np.isclose(ratio, floor, rtol=1e-5, atol=0.0)
            ok &= (node_types[a] & node_types[b]).any(axis=1)
            weight[a[ok], b[ok]] = ratio[ok]  # a < b: the upper triangle, rows of the chunk
    return weight + weight.T


def _self_ratios(instance: MuriInstance, nodes: list[tuple[int, ...]]) -> FloatArray:
    """(len(nodes),) used ratio of each group on its own (groups of one size at a time)."""
    ratio = np.zeros(len(nodes))
    for _, which, members in _by_size(nodes):
        period, _ = period_of(instance, members)
        ratio[which] = instance.stage_s[members].reshape(which.size, -1).sum(axis=1) / (
            STAGES * period)
    return ratio


def _by_size(groups: list[tuple[int, ...]] | tuple[tuple[int, ...], ...]
             ) -> list[tuple[int, IntArray, IntArray]]:
    """Per group size k present: k, the groups' positions, and their (G_k, k) members."""
    sizes = np.array([len(members) for members in groups], np.int64)
    out = []
    for k in np.unique(sizes).tolist():
        which = np.nonzero(sizes == k)[0]
        out.append((k, which, np.array([groups[g] for g in which.tolist()], np.int64)
                    .reshape(-1, k)))
    return out


def _candidate_merges(n: int) -> int:
    """Pairs of groups whose merge a round looks at in a bucket of n groups (its blocks)."""
    whole, rest = divmod(n, MAX_VERTICES)
    return (whole * MAX_VERTICES * (MAX_VERTICES - 1) + rest * (rest - 1)) // 2


def _bucket_mates(instance: MuriInstance, bucket: list[tuple[int, ...]], deadline: Deadline,
                  exact_matching: bool, threads: int, matchings: list[Matching]
                  ) -> tuple[IntArray, FloatArray, bool]:
    """Each group's mate in the bucket (-1 = none), the used ratio of its merge, and whether
    the deadline cut the bucket: the matching on consecutive blocks of at most MAX_VERTICES
    groups (the matching's limit; a bucket within it is one block). A block whose ratios were
    not all computed by the deadline, and every block after it, merges nothing."""
    n = len(bucket)
    mate = np.full(n, -1, np.int64)
    ratio = np.zeros(n)
    for first in range(0, n, MAX_VERTICES):
        block = bucket[first:first + MAX_VERTICES]
        weight = None if deadline.expired() else _merge_weights(instance, block, deadline)
        if weight is None:
            return mate, ratio, True
        if exact_matching:
            found = max_weight_matching(weight, deadline, threads)
            matchings.append(found)
            local = found.mate
        else:
            local = greedy_matching(weight)
        paired = np.nonzero(local >= 0)[0]
        mate[first + paired] = first + local[paired]
        ratio[first + paired] = weight[paired, local[paired]]
    return mate, ratio, False


def matching_groups(
    instance: MuriInstance,
    deadline: Deadline = NO_DEADLINE,
    exact_matching: bool = True,
    threads: int = 0,
    admit_deadline: Deadline = NO_DEADLINE,
) -> Grouping:
    """Muri's grouping of the admitted jobs (module docstring). `exact_matching` False uses
    the greedy matching instead of the maximum-weight one (a comparison baseline). The
    deadline is read before each round and while the used ratios are computed; the groups
    merged by then are kept. Past `admit_deadline` (before the jobs are admitted, or after
    the rounds) no group is admitted."""
    if admit_deadline.expired():
        return _not_admitted((), "")
    candidates = admitted(instance)
    nodes: dict[int, list[tuple[int, ...]]] = {}
    for i in candidates.tolist():
        nodes.setdefault(int(instance.gpus[i]), []).append((i,))
    required = sum(g * len(v) for g, v in nodes.items())
    matchings: list[Matching] = []
    detail = ""
    for _ in range(MAX_ROUNDS):
        if required <= instance.cluster_gpus or instance.max_group_size < 2:
            break
        if deadline.expired():
            detail = "grouping rounds cut by the time limit"
            break
        pairs = sum(_candidate_merges(len(bucket)) for bucket in nodes.values())
        if deadline.remaining() < MERGE_S_PER_PAIR * pairs:
            detail = (f"time limit: a grouping round was not started ({pairs} candidate merges "
                      "would take longer than the time left)")
            break
        ready: list[tuple[list[tuple[int, ...]], float, int]] = []
        for g, bucket in nodes.items():
            mate, ratio, cut = _bucket_mates(instance, bucket, deadline, exact_matching,
                                             threads, matchings)
            if cut:
                detail = "grouping rounds cut by the time limit"
            alone = np.nonzero(mate < 0)[0].tolist()
            ratio_alone = dict(zip(alone, _self_ratios(instance, [bucket[u] for u in alone])
                                   .tolist(), strict=True))
            for u, v in enumerate(mate.tolist()):
                if v < 0:
                    ready.append(([bucket[u]], ratio_alone[u], g))
                elif v < u:
                    ready.append(([bucket[v], bucket[u]], float(ratio[u]), g))
        if instance.sort_merges:
            ready.sort(key=lambda item: (1 - item[1]) * item[2])
        merged: dict[int, list[tuple[int, ...]]] = {g: [] for g in nodes}
        for parts, _, g in ready:
            if len(parts) == 2 and required > instance.cluster_gpus:
                merged[g].append(parts[0] + parts[1])
                required -= g
            else:
                merged[g].extend(parts)
        nodes = merged
        if detail:
            break
    if admit_deadline.expired():
        return _not_admitted(tuple(matchings), detail)
    groups = [node for bucket in nodes.values() for node in bucket]
    if instance.autopack:
        groups = _autopack(instance, groups)
    return _admit_groups(instance, groups, tuple(matchings), detail)


def _autopack(instance: MuriInstance, groups: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Split every group whose period exceeds its members' iteration times run in turn."""
    solo = instance.solo_s()
    split = np.zeros(len(groups), bool)
    for k, which, members in _by_size(groups):
        if k > 1:
            period, _ = period_of(instance, members)
            split[which] = period > solo[members].sum(axis=1) * (1 + 1e-12)
    out: list[tuple[int, ...]] = []
    for group, apart in zip(groups, split.tolist(), strict=True):
        if apart:
            out.extend((i,) for i in group)
        else:
            out.append(group)
    return out


def _admit_groups(instance: MuriInstance, groups: list[tuple[int, ...]],
                  matchings: tuple[Matching, ...], detail: str,
                  types: list[int] | None = None) -> Grouping:
    """Order groups by their best member's priority, give each GPUs of one type its members
    can use while they last (`types`: the type of each group, else the first in cluster order
    with its GPUs free), and put each group's members in their best pipeline order."""
    count = len(groups)
    key = np.zeros(count)
    first = np.zeros(count, np.int64)
    gpus = np.zeros(count, np.int64)
    runs_on = instance.runs_on()
    usable = np.zeros((count, runs_on.shape[1]), bool)
    best_order: list[tuple[int, ...]] = list(groups)
    for k, which, members in _by_size(groups):
        key[which] = instance.priority[members].min(axis=1)
        first[which] = members.min(axis=1)
        gpus[which] = instance.gpus[members[:, 0]]
        usable[which] = runs_on[members].all(axis=1)
        if k > 1:
            _, best = period_of(instance, members)
            for g, ordered_members in zip(which.tolist(), best.tolist(), strict=True):
                best_order[g] = tuple(ordered_members)
    order = np.lexsort((first, key)).tolist()
    free = instance.capacity().tolist()
    allowed = usable.tolist()
    need_of = gpus.tolist()
    running = np.zeros(count, bool)
    type_index = np.full(count, -1, np.int64)
    for rank, g in enumerate(order):
        need = need_of[g]
        can = allowed[g]
        for j in ([types[g]] if types is not None else range(len(free))):
            if can[j] and free[j] >= need:
                free[j] -= need
                running[rank] = True
                type_index[rank] = j
                break
    ordered = tuple(best_order[g] for g in order)
    objective, periods = grouping_value(instance, ordered, running)
    return Grouping(ordered, periods, running, type_index, objective, matchings, detail)


def candidate_groups(instance: MuriInstance, candidates: IntArray) -> list[IntArray]:
    """Per size k = 1..max_group_size, the (G_k, k) groups of candidates sharing a GPU
    count."""
    out: list[IntArray] = []
    buckets: dict[int, list[int]] = {}
    for i in candidates.tolist():
        buckets.setdefault(int(instance.gpus[i]), []).append(i)
    for k in range(1, instance.max_group_size + 1):
        parts = [
            np.array(list(itertools.combinations(members, k)), np.int64).reshape(-1, k)
            for members in buckets.values()
            if len(members) >= k
        ]
        out.append(np.vstack(parts) if parts else np.zeros((0, k), np.int64))
    return out


def count_candidate_groups(instance: MuriInstance, candidates: IntArray) -> int:
    """Columns of the set packing: groups of candidates of one GPU count, per type all their
    members can use."""
    counts: dict[tuple[int, int], int] = {}
    runs_on = instance.runs_on()
    for i in candidates.tolist():
        for j in np.nonzero(runs_on[i])[0].tolist():
            key = (int(instance.gpus[i]), j)
            counts[key] = counts.get(key, 0) + 1
    return sum(
        math.comb(c, k) for c in counts.values() for k in range(1, instance.max_group_size + 1)
    )


def exact_groups(
    instance: MuriInstance,
    deadline: Deadline = NO_DEADLINE,
    threads: int = 0,
    relative_gap: float = 1e-6,
    incumbent: Grouping | None = None,
) -> ExactGroups:
    """The set packing of the module docstring over Muri's admitted jobs. Raises ValueError
    when it has more than MAX_SET_PACKING_COLUMNS candidate groups."""
    started = time.perf_counter()
    candidates = admitted(instance)
    total = count_candidate_groups(instance, candidates)
    if total > MAX_SET_PACKING_COLUMNS:
        raise ValueError(
            f"{total} candidate groups (groups of up to {instance.max_group_size} of the "
            f"{candidates.size} admitted jobs per GPU count and type) exceed "
            f"{MAX_SET_PACKING_COLUMNS}"
        )
    groups = candidate_groups(instance, candidates)
    runs_on = instance.runs_on()
    members_list: list[IntArray] = []
    orders: list[IntArray] = []
    values: list[FloatArray] = []
    gpus: list[IntArray] = []
    kinds: list[IntArray] = []
    for block in groups:
        if block.shape[0] == 0:
            continue
        period, order = period_of(instance, block)
        # one column per (group, type all its members can use)
        g_idx, t_idx = np.nonzero(runs_on[block].all(axis=1))
        members_list.append(block[g_idx])
        orders.append(order[g_idx])
        values.append(group_values(instance, block, period)[g_idx])
        gpus.append(instance.gpus[block[g_idx, 0]])
        kinds.append(t_idx.astype(np.int64))
    m = instance.num_jobs
    capacity = instance.capacity()
    if not members_list or sum(b.shape[0] for b in members_list) == 0:
        empty = _admit_groups(instance, [], (), "no admitted job")
        return ExactGroups(empty, SolverStatus.OPTIMAL, 0.0, 0)
    value = np.concatenate(values)
    gpu = np.concatenate(gpus)
    kind = np.concatenate(kinds)
    cols = np.concatenate(
        [np.repeat(np.arange(b.shape[0]), b.shape[1]) + off
         for b, off in zip(members_list, np.cumsum([0] + [b.shape[0] for b in members_list])[:-1],
                           strict=True)]
    )
    rows = np.concatenate([b.reshape(-1) for b in members_list])
    count = value.size
    matrix = sp.vstack(
        [
            sp.csc_matrix((np.ones(rows.size), (rows, cols)), shape=(m, count)),
            sp.csc_matrix((gpu.astype(np.float64), (kind, np.arange(count))),
                          shape=(capacity.size, count)),
        ]
    ).tocsc()
    model = LinearModel(
        cost=value,
        matrix=matrix,
        row_lower=np.full(m + capacity.size, -INFINITY),
        row_upper=np.concatenate([np.ones(m), capacity.astype(np.float64)]),
        col_lower=np.zeros(count),
        col_upper=np.ones(count),
        integer=np.ones(count, bool),
        maximize=True,
    )
    result = solve_highs(
        model, HighsSettings(mip_rel_gap=relative_gap, threads=threads), deadline
    )
    chosen_groups: list[tuple[int, ...]] = []
    chosen_types: list[int] = []
    if result.has_solution:
        chosen = np.nonzero(result.x > 0.5)[0]
        offsets = np.cumsum([0] + [b.shape[0] for b in members_list])
        for c in chosen.tolist():
            part = int(np.searchsorted(offsets, c, side="right") - 1)
            chosen_groups.append(tuple(int(i) for i in orders[part][c - offsets[part]]))
            chosen_types.append(int(kind[c]))
    grouping = _admit_groups(instance, chosen_groups, (), "", chosen_types)
    if incumbent is not None and incumbent.objective > grouping.objective:
        grouping = incumbent
    return ExactGroups(
        grouping=grouping,
        status=result.status,
        bound=result.bound,
        columns=count,
        solve_time_s=time.perf_counter() - started,
        detail=result.detail,
    )


def muri_instance(problem: Problem, params: MuriParameters, compat: Compat) -> MuriInstance:
    """The instance of a validated snapshot (stage times in `problem.sharing`)."""
    jobs = problem.jobs
    sharing = problem.sharing or SharingInputs()
    stage = np.zeros((jobs.num_jobs, STAGES))
    if sharing.stage_s.shape[0] == jobs.num_jobs:
        stage = np.nan_to_num(sharing.stage_s, nan=0.0)
    gpus = jobs.scale_factor
    solo = stage.sum(axis=1)
    if params.order is BaseOrder.REMAINING_SERVICE:
        remaining = np.where(jobs.total_steps > 0, jobs.remaining_steps, np.inf)
        key = remaining * solo * gpus
    elif params.order is BaseOrder.ATTAINED_SERVICE:
        key = problem.history.received_time_s.sum(axis=1) * gpus
    else:
        key = jobs.arrival_time_s.astype(np.float64)
    if params.interleave_overhead:
        overhead = tuple(params.interleave_overhead)
    elif compat is Compat.MURI:
        overhead = MURI_OVERHEAD
    else:
        overhead = (1.0, 1.0, 1.0, 1.0)
    usable = problem.usable
    # no stage times or no type to run on: never admitted
    key = np.where((solo > 0) & usable.any(axis=1), key, np.nan)
    return MuriInstance(
        stage_s=stage,
        gpus=gpus,
        priority=np.asarray(key, np.float64),
        weight=jobs.priority_weight,
        cluster_gpus=int(problem.cluster.count.sum()),
        max_group_size=params.max_group_size,
        weight_threshold=params.weight_threshold,
        overhead=overhead,
        sort_merges=compat is not Compat.MURI,
        autopack=params.autopack,
        type_gpus=problem.cluster.count.astype(np.int64),
        usable=usable,
    )


def solve_policy(
    problem: Problem,
    params: MuriParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Muri's grouping (matching rounds), or the exact set packing with the matching's gap."""
    inst = muri_instance(problem, params, compat)
    started = time.perf_counter()
    # the rounds (and the set packing) leave the groups' admission, placement and plan time
    before_plan = deadline.leaving(PLAN_S_PER_JOB * problem.jobs.num_jobs)
    before_groups_plan = deadline.leaving(GROUPS_PLAN_S_PER_JOB * problem.jobs.num_jobs)
    heuristic = matching_groups(inst, before_plan, threads=options.threads,
                                admit_deadline=before_groups_plan)
    notes = [heuristic.detail] if heuristic.detail else []
    rounds = len(heuristic.matchings)
    proven = all(found.status is SolverStatus.OPTIMAL for found in heuristic.matchings)
    notes.append(
        f"{rounds} maximum-weight matching(s), "
        + ("each proven maximum" if proven else "not all proven maximum (time limit)")
    )
    exact: ExactGroups | None = None
    if params.exact_groups:
        try:
            exact = exact_groups(inst, before_plan, options.threads, options.relative_gap,
                                 incumbent=heuristic)
        except ValueError as error:
            notes.append(f"exact set packing skipped: {error}")
    grouping = exact.grouping if exact is not None else heuristic
    groups, status, reasons, objective, late = _place(problem, inst, grouping,
                                                      before_groups_plan)
    if late:
        notes.append(f"time limit: {late} admitted group(s) not placed")
    if exact is not None:
        bound = exact.bound if exact.bound is not None else None
        if bound is not None:
            bound = max(bound, objective)
        term = termination(
            SolverStatus.TIME_LIMIT if late else exact.status, True,
            relative_gap(objective, bound, 1.0), options.relative_gap
        )
        formulation = f"set packing over {exact.columns} candidate groups (HiGHS MIP)"
        solver = "highs"
    else:
        bound, term = None, Termination.HEURISTIC
        formulation = "muri matching rounds (maximum-weight matching per GPU count)"
        solver = "highs" if rounds else ""
    cert = Certificate(
        termination=term,
        maximize=True,
        objective=objective,
        bound=bound,
        solver=solver,
        formulation=formulation,
        solve_time_s=time.perf_counter() - started,
        detail="; ".join(notes),
        gap_scale=1.0,
    )
    section = GroupSection(
        groups=tuple(groups),
        heuristic="muri_matching" if exact is not None else "",
        heuristic_objective=_placed_value(problem, inst, heuristic) if exact is not None
        else None,
    )
    solo = inst.solo_s()
    rate = np.where(solo > 0, 1.0 / np.where(solo > 0, solo, 1.0), 0.0)
    return groups_plan(problem, section, cert, status, reasons, step_rate=rate)


def _place(
    problem: Problem, inst: MuriInstance, grouping: Grouping, deadline: Deadline = NO_DEADLINE
) -> tuple[list[ColocationGroup], list[JobStatus], list[str], float, int]:
    """Devices for the running groups in priority order, each on its type's nodes (the fullest
    node that holds it, else the emptiest nodes: `NodePool`); the objective of those placed;
    the running groups not placed because the deadline passed first (they wait)."""
    m = inst.num_jobs
    status = [JobStatus.DEFERRED] * m
    reasons = ["not admitted this round (GPUs taken by jobs served first)" if grouping.admitted
               else "not admitted before the time limit"] * m
    no_stages = inst.stage_s.sum(axis=1) <= 0
    for i in np.nonzero(np.isnan(inst.priority))[0].tolist():
        status[i] = JobStatus.UNSERVABLE
        reasons[i] = "no stage times (jobs[].stage_times)" if no_stages[i] else NO_USABLE_TYPE
    cluster = problem.cluster
    names = cluster.node_names
    pools: list[NodePool] = []
    free: dict[int, int] = {}
    for j in range(cluster.num_types):
        nodes = np.nonzero(cluster.node_type == j)[0].tolist() if names else []
        room = cluster.node_devices[nodes].tolist()
        free.update(zip(nodes, room, strict=True))
        pools.append(NodePool(nodes, room, int(cluster.count[j])))
    solo = inst.solo_s().tolist()
    gpus = inst.gpus.tolist()
    groups: list[ColocationGroup] = []
    placed_running = np.zeros(len(grouping.groups), bool)
    running = np.nonzero(grouping.running)[0].tolist()
    for count, g in enumerate(running):
        if count % PLACE_CHECK_EVERY == 0 and deadline.expired():
            for late in running[count:]:
                for i in grouping.groups[late]:
                    reasons[i] = "admitted, but not placed before the time limit"
            objective, _ = grouping_value(inst, grouping.groups, placed_running,
                                          grouping.period_s)
            return groups, status, reasons, objective, len(running) - count
        members = grouping.groups[g]
        need = gpus[members[0]]
        j = int(grouping.type_index[g])
        taken = pools[j].take(need)
        if taken is None:
            for i in members:
                reasons[i] = "no accelerator type has the group's GPUs free"
            continue
        pieces = []
        left = need
        for k in taken:  # what the pool took from each node: the most it could, in order
            use = free[k] if free[k] < left else left
            free[k] -= use
            left -= use
            pieces.append((names[k], use))
        placed_running[g] = True
        period = float(grouping.period_s[g])
        slowdown = tuple(period / solo[i] if solo[i] > 0 else 1.0 for i in members)
        groups.append(ColocationGroup(members, slowdown, j, need, tuple(pieces),
                                      period_s=period))
        for i in members:
            status[i], reasons[i] = JobStatus.ALLOCATED, ""
    objective, _ = grouping_value(inst, grouping.groups, placed_running, grouping.period_s)
    return groups, status, reasons, objective, 0


def _placed_value(problem: Problem, inst: MuriInstance, grouping: Grouping) -> float:
    return _place(problem, inst, grouping)[3]
