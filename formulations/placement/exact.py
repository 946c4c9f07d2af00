"""The exact placer (D0) and its certificate.

1. Bounds (`bounds`): which demands can be placed at all, and a lower bound on the cost.
2. Starts: the seed (`seed`) and any assignments given (the compat placers' answers), kept
   when feasible.
3. Placed value: if a start places every placeable demand the largest value is proven;
   otherwise the node MILP maximizes it (its bound proves it on the full candidate set).
4. Cost: the node MILP (D0.3) minimizes the cost among assignments of that value, started
   from the best start. Every (demand, node) pair is a candidate up to `max_candidate_pairs`;
   above that each demand keeps its start nodes, its previous nodes and nodes of the same
   domains plus the emptiest nodes (a restricted model whose answer is still proven against
   the relaxation bound of `bounds`). When a start already meets the bound, no MILP runs.
5. Devices inside nodes (`intra_node`) for the MILP's node counts and for every start's, the
   best on the whole objective is returned: never worse than any start.

Certificate: objective = the returned assignment's cost (`objective.evaluate`), bound =
max(relaxation bound, MILP bound - inner free-domain rewards) when the MILP ran on every
candidate pair; optimal when the placed value is proven and the relative gap (scale: one unit
of cost) is within the tolerance.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from apportion.formulations.placement import milp
from apportion.formulations.placement.bounds import DemandBounds, demand_bounds, free_domain_bound
from apportion.formulations.placement.compat import gavel_servers, tiresias_yarn
from apportion.formulations.placement.instance import Assignment, PlacementInstance
from apportion.formulations.placement.intra_node import choose_devices
from apportion.formulations.placement.objective import Score, evaluate, violations
from apportion.formulations.placement.patterns import PatternScorer
from apportion.formulations.placement.seed import seed_assignment
from apportion.solver.backends.status import SolverResult, SolverStatus
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import FloatArray, IntArray
from apportion.solver.result import ModelSize, Termination, relative_gap
from apportion.solver.stages import DEFAULT_MAX_CANDIDATE_PAIRS, PlacementLevel
from apportion.solver.topology import DomainLevel

GAP_SCALE = 1.0
"""Natural magnitude of the placement cost (one node crossing at the default weights)."""
EXTRA_NODES = 8
"""Restricted model: nodes of a demand's start domains and emptiest nodes added per demand."""


@dataclass(frozen=True)
class PlacementResult:
    """A placer's answer with its certificate."""

    placer: str
    assignment: Assignment
    score: Score
    termination: Termination
    bound: float | None = None
    """Proven lower bound on the cost among assignments of the largest placed value."""
    placed_value_bound: float = 0.0
    """Proven largest placed value."""
    detail: str = ""
    solve_time_s: float = 0.0
    model_size: ModelSize = field(default_factory=ModelSize)
    solver: str = ""
    solver_version: str = ""

    @property
    def gap(self) -> float | None:
        return relative_gap(self.score.cost, self.bound, GAP_SCALE)


def unit_counts(assignment: Assignment, unit_of_device: IntArray) -> milp.Counts:
    """Per demand, devices per unit (node or device) of an assignment."""
    count = len(assignment.devices)
    lengths = np.array([len(d) for d in assignment.devices], np.int64)
    devices = np.fromiter((d for ds in assignment.devices for d in ds), np.int64,
                          int(lengths.sum()))
    owner = np.repeat(np.arange(count), lengths)
    units = int(unit_of_device.max()) + 1 if unit_of_device.size else 1
    keys, counts = np.unique(owner * units + unit_of_device[devices], return_counts=True)
    out: list[dict[int, int]] = [{} for _ in range(count)]
    for key, k in zip(keys.tolist(), counts.tolist(), strict=True):
        out[key // units][key % units] = k
    return tuple(out)


def _candidate_pairs(
    instance: PlacementInstance, units: milp.Units, active: IntArray,
    starts: list[milp.Counts], max_pairs: int,
) -> tuple[IntArray, IntArray, bool]:
    """(pair demand positions, pair units, restricted): every (demand, unit) pair with an
    eligible free device, or, above `max_pairs` (node units only), each demand's start units,
    previous units, units of the same domains and the emptiest units."""
    elig = units.eligible[active]
    full = int(np.count_nonzero(elig))
    if full <= max_pairs or units.level != DomainLevel.NODE.value:
        a, v = np.nonzero(elig)
        return a.astype(np.int64), v.astype(np.int64), False
    topo = instance.topology
    upper = [lv for lv in instance.node_levels if lv > DomainLevel.NODE]
    group_level = upper[0] if upper else None
    demand_pos: list[IntArray] = []
    node_ids: list[IntArray] = []
    emptiest_order = np.argsort(-instance.node_free, kind="stable")
    for a_, r in enumerate(active.tolist()):
        demand = instance.demands[r]
        ok = elig[a_] > 0
        chosen: set[int] = set()
        for counts in starts:
            chosen.update(counts[r])
        if demand.previous:
            chosen.update(topo.device_node[list(demand.previous)].tolist())
        chosen.update(demand.previous_nodes)
        if group_level is not None and chosen:
            groups = instance.node_ancestor[list(chosen), group_level.value]
            same = np.flatnonzero(ok & np.isin(instance.node_ancestor[:, group_level.value],
                                               groups[groups >= 0]))
            same = same[np.argsort(-elig[a_, same], kind="stable")]
            chosen.update(same[:EXTRA_NODES].tolist())
        extra = emptiest_order[ok[emptiest_order]][:EXTRA_NODES]
        chosen.update(extra.tolist())
        nodes = np.asarray(sorted(v for v in chosen if ok[v]), np.int64)
        demand_pos.append(np.full(nodes.size, a_, np.int64))
        node_ids.append(nodes)
    if not demand_pos:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), True
    return np.concatenate(demand_pos), np.concatenate(node_ids), True


def _fits(counts: milp.Counts, active: IntArray, pairs: set[tuple[int, int]]) -> bool:
    return all((a_, v) in pairs for a_, r in enumerate(active.tolist()) for v in counts[r])


def place_exact(
    instance: PlacementInstance,
    deadline: Deadline = NO_DEADLINE,
    relative_gap_tolerance: float = 1e-4,
    max_candidate_pairs: int = DEFAULT_MAX_CANDIDATE_PAIRS,
    starts: tuple[Assignment, ...] = (),
    threads: int = 0,
    seed: int = 0,
    level: PlacementLevel = PlacementLevel.NODE,
    value_only: bool = False,
) -> PlacementResult:
    """The exact placer (module docstring); `level` DEVICE solves the device-level MILP;
    `value_only` stops once the largest placed value is found (a feasibility check)."""
    started = time.perf_counter()
    scorer = PatternScorer(instance.topology, instance.pattern_score)
    bounds = demand_bounds(instance)
    skip = frozenset(np.flatnonzero(~bounds.placeable).tolist())
    active = np.flatnonzero(bounds.placeable).astype(np.int64)
    candidates = [s for s in (seed_assignment(instance, deadline, skip), *starts)
                  if not violations(instance, s)]
    if not candidates:  # the greedy answers break a quota row: start from nothing placed
        candidates = [Assignment.empty(instance.num_demands)]
    scored = [evaluate(instance, s, scorer) for s in candidates]
    if not _closed(instance, bounds, scored, relative_gap_tolerance):
        for extra in _more_starts(instance, deadline, skip):
            if not violations(instance, extra):
                candidates.append(extra)
                scored.append(evaluate(instance, extra, scorer))
    units = milp.device_units(instance) if level is PlacementLevel.DEVICE \
        else milp.node_units(instance)
    value_bound = float(sum(instance.demands[r].value for r in active.tolist()))
    best_value = max(score.placed_value for score in scored)
    proven_value = best_value >= value_bound - 1e-9
    relaxation = _relaxation_bound(instance, bounds, proven_value)
    best_start_cost = min(sc.cost for sc in scored if sc.placed_value >= best_value - 1e-9)
    need_milp = active.size > 0 and (
        level is PlacementLevel.DEVICE
        or not proven_value
        or relative_gap(best_start_cost, relaxation, GAP_SCALE) > relative_gap_tolerance
    ) and not (value_only and proven_value)
    notes: list[str] = []
    run = _MilpRun()
    start_counts = [unit_counts(s, units.unit_of_device) for s in candidates]
    if need_milp:
        pair_a, pair_u, restricted = _candidate_pairs(
            instance, units, active, start_counts, max_candidate_pairs
        )
        pair_set = set(zip(pair_a.tolist(), pair_u.tolist(), strict=True))
        usable = [c for c in start_counts if _fits(c, active, pair_set)]
        if not proven_value:
            model = milp.build(instance, units, active, pair_a, pair_u, value_stage=True)
            result = run.solve(model, deadline, 0.0, threads,
                               _best_start(model, instance, usable, value=True), seed)
            if result.has_solution and result.objective is not None:
                run.counts = milp.counts_of(model, result.x, instance.num_demands)
                best_value = max(best_value, float(result.objective))
                if not restricted and result.status.solved and result.bound is not None:
                    value_bound = min(value_bound, float(result.bound))
            proven_value = best_value >= value_bound - 1e-9
        if not deadline.expired() and not value_only:
            model = milp.build(instance, units, active, pair_a, pair_u, value_stage=False,
                               min_value=best_value)
            start = _best_start(model, instance, usable, value=False, min_value=best_value)
            result = run.solve(model, deadline, relative_gap_tolerance, threads, start, seed)
            if result.has_solution:
                run.counts = milp.counts_of(model, result.x, instance.num_demands)
            if not restricted and result.bound is not None and proven_value:
                # the model holds the placeable demands; the others cost what losing them does
                lost = float(bounds.unplaced_cost[~bounds.placeable].sum())
                run.bound = float(result.bound) + lost
                if level is PlacementLevel.NODE:  # inner free domains are outside the model
                    inner_free = free_domain_bound(instance, instance.inner_levels)
                    run.bound -= sum(instance.weights.free_domain.get(lv, 0.0) * k
                                     for lv, k in inner_free.items())
        if restricted:
            notes.append(
                f"node MILP on {pair_a.size} candidate (job, node) pairs of "
                f"{int(np.count_nonzero(units.eligible[active]))}; bound from the relaxation"
            )
    notes.extend(run.notes)
    # devices inside nodes for every node-count solution; keep the best on the objective
    options: list[tuple[Assignment, Score]] = list(zip(candidates, scored, strict=True))
    node_sets = [unit_counts(s, instance.topology.device_node) for s in candidates]
    if run.counts is not None:
        if level is PlacementLevel.DEVICE:
            direct = Assignment(tuple(tuple(sorted(c)) for c in run.counts))
            if not violations(instance, direct):
                options.append((direct, evaluate(instance, direct, scorer)))
                node_sets.insert(0, unit_counts(direct, instance.topology.device_node))
        else:
            node_sets.insert(0, run.counts)
    exact_inside = True
    for counts in node_sets:
        assignment, exact = choose_devices(instance, counts, scorer, deadline)
        exact_inside &= exact
        if not violations(instance, assignment):
            options.append((assignment, evaluate(instance, assignment, scorer)))
    best_assignment, best_score = options[0]
    for assignment, score in options[1:]:
        if score.better_than(best_score):
            best_assignment, best_score = assignment, score
    bound = relaxation if run.bound is None else max(relaxation, run.bound)
    open_gap = relative_gap(best_score.cost, bound, GAP_SCALE) > relative_gap_tolerance
    if open_gap and exact_inside and _counts_forced(instance, active, best_score, value_bound):
        bound = max(bound, _forced_cost(instance, active, scorer, deadline))
    if not exact_inside:
        notes.append("nodes above the dynamic program's size: devices chosen greedily inside")
    reasons = tuple(
        best_assignment.reason(r) if r not in skip else bounds.reason[r]
        for r in range(instance.num_demands)
    )
    proven_value = best_score.placed_value >= value_bound - 1e-9
    gap = relative_gap(best_score.cost, bound, GAP_SCALE)
    if proven_value and gap <= relative_gap_tolerance:
        termination = Termination.OPTIMAL
    else:
        termination = Termination.FEASIBLE
        if not proven_value:
            notes.append(f"placed value {best_score.placed_value:g} of at most {value_bound:g}")
        notes.append(f"gap {gap:.3g} to the bound")
    return PlacementResult(
        placer="exact",
        assignment=Assignment(best_assignment.devices, reasons),
        score=best_score,
        termination=termination,
        bound=bound,
        placed_value_bound=value_bound,
        detail="; ".join(notes),
        solve_time_s=time.perf_counter() - started,
        model_size=run.size,
        solver=run.solver or "none (proven by the bound)",
        solver_version=run.version,
    )


@dataclass
class _MilpRun:
    """What the MILP solves of one call reported."""

    size: ModelSize = field(default_factory=ModelSize)
    solver: str = ""
    version: str = ""
    counts: milp.Counts | None = None
    bound: float | None = None
    notes: list[str] = field(default_factory=list)

    def solve(self, model: milp.PlacementModel, deadline: Deadline, gap: float, threads: int,
              start: FloatArray | None, seed: int) -> SolverResult:
        result = milp.solve(model, deadline, gap, threads, start, seed)
        self.size, self.solver, self.version = result.size, result.solver, result.solver_version
        if result.status is not SolverStatus.OPTIMAL:
            self.notes.append(f"MILP stopped: {result.detail}")
        return result


def _more_starts(instance: PlacementInstance, deadline: Deadline,
                 skip: frozenset[int]) -> list[Assignment]:
    """Cheap starts tried when the seed leaves a gap: the first-fit seed and the rack-bound
    first fit of Tiresias and the server placement of Gavel (each packs fragments its own
    way; the best on the objective wins)."""
    return [seed_assignment(instance, deadline, skip, first_fit=True),
            tiresias_yarn(instance, deadline), gavel_servers(instance, deadline)]


def _closed(instance: PlacementInstance, bounds: DemandBounds, scored: list[Score],
            tolerance: float) -> bool:
    """A start places every placeable demand at the relaxation bound's cost."""
    total = float(sum(instance.demands[r].value for r in np.flatnonzero(bounds.placeable)))
    bound = _relaxation_bound(instance, bounds, True)
    return any(s.placed_value >= total - 1e-9
               and relative_gap(s.cost, bound, GAP_SCALE) <= tolerance for s in scored)


def _counts_forced(
    instance: PlacementInstance, active: IntArray, score: Score, value_bound: float
) -> bool:
    """Every placeable demand is placed and has one candidate node: the node counts are the
    only ones possible, so the exact devices inside the nodes are the optimum."""
    if score.placed_value < value_bound - 1e-9 or active.size == 0:
        return False
    return bool(np.all(np.count_nonzero(instance.eligible_node_free[active], axis=1) == 1))


def _forced_cost(
    instance: PlacementInstance, active: IntArray, scorer: PatternScorer, deadline: Deadline
) -> float:
    """The cost of the exact devices for the forced node counts (+inf when they fail)."""
    counts: list[dict[int, int]] = [{} for _ in range(instance.num_demands)]
    for r in active.tolist():
        node = int(np.flatnonzero(instance.eligible_node_free[r])[0])
        counts[r] = {node: instance.demands[r].devices}
    assignment, _ = choose_devices(instance, tuple(counts), scorer, deadline)
    if violations(instance, assignment) or sum(1 for d in assignment.devices if d) < active.size:
        return -np.inf
    return evaluate(instance, assignment, scorer).cost


def _relaxation_bound(
    instance: PlacementInstance, bounds: DemandBounds, all_placed: bool
) -> float:
    """The relaxation bound of `bounds` on the whole cost (every placeable demand placed when
    `all_placed`, else each demand at the cheaper of placed and not placed)."""
    placed_cost = bounds.placed_cost
    unplaced = bounds.unplaced_cost
    if all_placed:
        per_demand = np.where(bounds.placeable, placed_cost, unplaced)
        types = int(instance.topology.device_type.max()) + 1 if instance.topology.num_devices \
            else 0
        need = np.zeros(max(types, 1))
        for r in np.flatnonzero(bounds.placeable).tolist():
            demand = instance.demands[r]
            need[demand.type_index] += demand.devices
        free = free_domain_bound(instance, None, need)
    else:
        per_demand = np.where(bounds.placeable, np.minimum(placed_cost, unplaced), unplaced)
        free = free_domain_bound(instance)
    reward = sum(instance.weights.free_domain.get(level, 0.0) * k for level, k in free.items())
    return float(per_demand.sum()) - reward


def _best_start(
    model: milp.PlacementModel, instance: PlacementInstance, starts: list[milp.Counts],
    value: bool, min_value: float = 0.0,
) -> FloatArray | None:
    """The MIP start: the start with the most value (value stage) or, among those reaching
    `min_value`, the cheapest (cost stage); None when no start fits the candidates."""
    best: FloatArray | None = None
    best_key: float | None = None
    for counts in starts:
        point = milp.start_point(model, instance, counts)
        assert model.model is not None
        objective = float(model.model.cost @ point) + model.model.offset
        placed = sum(instance.demands[r].value for r in range(instance.num_demands)
                     if counts[r])
        if not value and placed < min_value - 1e-9:
            continue
        key = -objective if value else objective
        if best_key is None or key < best_key:
            best, best_key = point, key
    return best
