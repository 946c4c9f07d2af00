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
  each on the first type (cluster order) its members can use with its GPUs free.
* `exact_groups`: the set packing those rounds approximate. Every group of 1..max_group_size
  admitted jobs of one GPU count, on every type all its members can use, is a column of value
  sum_i w_i * solo_i / period (the members' weighted throughput relative to running alone);
  choose columns with every job at most once and within every type's GPUs, maximizing the
  total. A HiGHS MIP with a proven bound; the matching plan is a feasible
  point of it, so its objective is never above the exact one.

`grouping_value` is that objective for any grouping, the common yardstick of the plan and the
gap. Periods include the optional overhead factors (Muri measured 1.015 for a job alone and
1.33, 1.5, 1.37 for groups of 2, 3, 4, relative to the raw period of the stage times).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from apportion.formulations.group_placement import free_devices, place_group
from apportion.formulations.group_plans import NO_USABLE_TYPE, groups_plan
from apportion.formulations.interleave import STAGES, best_periods
from apportion.formulations.matching import Matching, greedy_matching, max_weight_matching
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
                   running: np.ndarray) -> tuple[float, FloatArray]:
    """The set-packing objective of the running groups and every group's period (s)."""
    periods = np.zeros(len(groups))
    total = 0.0
    for k in range(1, instance.max_group_size + 1):
        which = [g for g, members in enumerate(groups) if len(members) == k]
        if not which:
            continue
        members = np.array([groups[g] for g in which], np.int64)
        period, _ = period_of(instance, members)
        periods[which] = period
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


def _merge_weights(instance: MuriInstance, nodes: list[tuple[int, ...]]) -> FloatArray:
    """(n, n) used ratio of the union of every two groups that may merge (0 = no edge)."""
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
        grid_a, grid_b = np.meshgrid(ia, ib, indexing="ij")
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
        weight[a[ok], b[ok]] = ratio[ok]
        weight[b[ok], a[ok]] = ratio[ok]
    return weight


def _self_ratio(instance: MuriInstance, node: tuple[int, ...]) -> float:
    members = np.array([node], np.int64)
    period, _ = period_of(instance, members)
    return float(instance.stage_s[list(node)].sum() / (STAGES * period[0]))


def matching_groups(
    instance: MuriInstance,
    deadline: Deadline = NO_DEADLINE,
    exact_matching: bool = True,
    threads: int = 0,
) -> Grouping:
    """Muri's grouping of the admitted jobs (module docstring). `exact_matching` False uses
    the greedy matching instead of the maximum-weight one (a comparison baseline)."""
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
        ready: list[tuple[list[tuple[int, ...]], float, int]] = []
        for g, bucket in nodes.items():
            weight = _merge_weights(instance, bucket)
            if exact_matching:
                found = max_weight_matching(weight, deadline, threads)
                matchings.append(found)
                mate = found.mate
            else:
                mate = greedy_matching(weight)
            for u in range(len(bucket)):
                v = int(mate[u])
                if v < 0:
                    ready.append(([bucket[u]], _self_ratio(instance, bucket[u]), g))
                elif v < u:
                    ready.append(([bucket[v], bucket[u]], float(weight[u, v]), g))
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
    groups = [node for bucket in nodes.values() for node in bucket]
    if instance.autopack:
        groups = _autopack(instance, groups)
    return _admit_groups(instance, groups, tuple(matchings), detail)


def _autopack(instance: MuriInstance, groups: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Split every group whose period exceeds its members' iteration times run in turn."""
    solo = instance.solo_s()
    out: list[tuple[int, ...]] = []
    for members in groups:
        if len(members) > 1:
            period, _ = period_of(instance, np.array([members], np.int64))
            if period[0] > solo[list(members)].sum() * (1 + 1e-12):
                out.extend((i,) for i in members)
                continue
        out.append(members)
    return out


def _admit_groups(instance: MuriInstance, groups: list[tuple[int, ...]],
                  matchings: tuple[Matching, ...], detail: str,
                  types: list[int] | None = None) -> Grouping:
    """Order groups by their best member's priority, give each GPUs of one type its members
    can use while they last (`types`: the type of each group, else the first in cluster order
    with its GPUs free), and put each group's members in their best pipeline order."""
    key = [min(float(instance.priority[i]) for i in members) for members in groups]
    first = [min(members) for members in groups]
    order = sorted(range(len(groups)), key=lambda g: (key[g], first[g]))
    free = instance.capacity().copy()
    runs_on = instance.runs_on()
    ordered: list[tuple[int, ...]] = []
    running = np.zeros(len(groups), bool)
    type_index = np.full(len(groups), -1, np.int64)
    for rank, g in enumerate(order):
        members = groups[g]
        need = int(instance.gpus[members[0]])
        room = runs_on[list(members)].all(axis=0) & (free >= need)
        if types is not None:
            room &= np.arange(free.size) == types[g]
        if room.any():
            j = int(np.argmax(room))
            free[j] -= need
            running[rank] = True
            type_index[rank] = j
        if len(members) > 1:
            _, best = period_of(instance, np.array([members], np.int64))
            members = tuple(int(i) for i in best[0])
        ordered.append(members)
    objective, periods = grouping_value(instance, tuple(ordered), running)
    return Grouping(tuple(ordered), periods, running, type_index, objective, matchings, detail)


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
    heuristic = matching_groups(inst, deadline, threads=options.threads)
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
            exact = exact_groups(inst, deadline, options.threads, options.relative_gap,
                                 incumbent=heuristic)
        except ValueError as error:
            notes.append(f"exact set packing skipped: {error}")
    grouping = exact.grouping if exact is not None else heuristic
    groups, status, reasons, objective = _place(problem, inst, grouping)
    if exact is not None:
        bound = exact.bound if exact.bound is not None else None
        if bound is not None:
            bound = max(bound, objective)
        term = termination(
            exact.status, True, relative_gap(objective, bound, 1.0), options.relative_gap
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
    problem: Problem, inst: MuriInstance, grouping: Grouping
) -> tuple[list[ColocationGroup], list[JobStatus], list[str], float]:
    """Devices for the running groups in priority order; the objective of those placed."""
    m = inst.num_jobs
    status = [JobStatus.DEFERRED] * m
    reasons = ["not admitted this round (GPUs taken by jobs served first)"] * m
    no_stages = inst.stage_s.sum(axis=1) <= 0
    for i in np.nonzero(np.isnan(inst.priority))[0].tolist():
        status[i] = JobStatus.UNSERVABLE
        reasons[i] = "no stage times (jobs[].stage_times)" if no_stages[i] else NO_USABLE_TYPE
    free = free_devices(problem, holding=np.zeros(m, bool))
    solo = inst.solo_s()
    groups: list[ColocationGroup] = []
    placed_running = np.zeros(len(grouping.groups), bool)
    for g, members in enumerate(grouping.groups):
        if not grouping.running[g]:
            continue
        need = int(inst.gpus[members[0]])
        spot = place_group(problem, free, need, grouping.type_index[g:g + 1])
        if spot is None:
            for i in members:
                reasons[i] = "no accelerator type has the group's GPUs free"
            continue
        placed_running[g] = True
        period = float(grouping.period_s[g])
        slowdown = tuple(period / solo[i] if solo[i] > 0 else 1.0 for i in members)
        groups.append(ColocationGroup(members, slowdown, spot[0], need, spot[1],
                                      period_s=period))
        for i in members:
            status[i], reasons[i] = JobStatus.ALLOCATED, ""
    objective, _ = grouping_value(inst, grouping.groups, placed_running)
    return groups, status, reasons, objective


def _placed_value(problem: Problem, inst: MuriInstance, grouping: Grouping) -> float:
    return _place(problem, inst, grouping)[3]
