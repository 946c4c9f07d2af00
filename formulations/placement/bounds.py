"""Lower bounds on the placement cost that hold for the whole cluster (the relaxation behind
the exact placer's certificate when the MILP's own bound does not cover everything).

Each demand is bounded alone, ignoring the others (a relaxation of the capacity rows): at
every level, the fewest domains that can hold its devices (largest eligible domains first)
gives its smallest possible crossing and bottleneck cost and its best throughput-by-span
reward; its link score is at most 1; a running demand whose devices are still eligible may
keep them (cost 0, or the cheaper of resize and move when its count changed). The free-domain
reward is bounded by the domains that are entirely free now, at most as many as the spare
devices of each type allow (each type alone is a relaxation). Costs are split into the
node-level part (levels >= NODE, moves, the span reward lost by crossing nodes) and the inner
part (levels below NODE, link score, the span reward of a demand inside one node).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apportion.formulations.placement.instance import PlacementInstance
from apportion.solver.model import FloatArray
from apportion.solver.topology import BoolArray, CommunicationPattern, DomainLevel


@dataclass(frozen=True)
class DemandBounds:
    """Per demand, the least cost if placed (node and inner parts) and if not placed."""

    placeable: BoolArray
    """(R,) enough eligible devices, within its span and node-count limits."""
    node_cost: FloatArray
    """(R,) least node-level cost if placed (levels >= NODE, moves, reward lost by crossing
    nodes)."""
    inner_cost: FloatArray
    """(R,) least inner cost if placed (levels < NODE, link score, the span reward)."""
    unplaced_cost: FloatArray
    """(R,) cost if not placed (a running demand loses its devices)."""
    reason: tuple[str, ...]
    """(R,) why an unplaceable demand cannot be placed ("" otherwise)."""

    @property
    def placed_cost(self) -> FloatArray:
        return np.asarray(self.node_cost + self.inner_cost)


def _fewest_domains(reach: FloatArray, need: int) -> int:
    """Fewest domains whose capacities reach `need` (`reach`: cumulative capacities, largest
    domains first); 0 if they cannot."""
    if need <= 0:
        return 0
    n = int(np.searchsorted(reach, need) + 1)
    return n if n <= reach.size else 0


def _class_reach(instance: PlacementInstance) -> list[dict[DomainLevel, FloatArray | None]]:
    """Per eligibility class and level, the cumulative eligible capacities of the level's
    domains, largest first (None when some eligible device is outside the level's domains:
    it then bounds nothing)."""
    topo = instance.topology
    out = []
    for eligible in instance.class_eligible:
        per_level: dict[DomainLevel, FloatArray | None] = {}
        for level in topo.levels_present:
            anc = topo.ancestors[eligible, level.value]
            if np.any(anc < 0):
                per_level[level] = None
                continue
            caps = np.bincount(anc, minlength=topo.num_domains)
            per_level[level] = np.cumsum(np.sort(caps[caps > 0])[::-1]).astype(np.float64)
        out.append(per_level)
    return out


def demand_bounds(instance: PlacementInstance) -> DemandBounds:
    """Per-demand bounds (module docstring)."""
    topo = instance.topology
    weights = instance.weights
    count = instance.num_demands
    placeable = np.ones(count, dtype=bool)
    node_cost = np.zeros(count)
    inner_cost = np.zeros(count)
    unplaced = np.zeros(count)
    reasons = [""] * count
    reach_of = _class_reach(instance)
    eligible_count = [int(ok.sum()) for ok in instance.class_eligible]
    for r, demand in enumerate(instance.demands):
        available = eligible_count[int(instance.signature[r])]
        reach_by_level = reach_of[int(instance.signature[r])]
        s = demand.devices
        if demand.running:
            unplaced[r] = demand.move_cost
        if demand.nodes > s:
            placeable[r] = False
            reasons[r] = f"{demand.nodes} nodes cannot each hold some of its {s} devices"
            continue
        if available < s:
            placeable[r] = False
            reasons[r] = (
                f"needs {s} devices of its type, {available} are free and eligible"
            )
            continue
        reward = instance.span_reward(r)
        widest = 0
        widest_inner = 0
        for level in topo.levels_present:
            reach = reach_by_level[level]
            if reach is None:  # devices outside this level's domains cross nothing there
                continue
            n = _fewest_domains(reach, s)
            if level is DomainLevel.NODE and demand.nodes:
                n = demand.nodes if reach.size >= demand.nodes else 0
            if n == 0:
                placeable[r] = False
                reasons[r] = f"no set of {level.name.lower()}s holds its {s} devices"
                break
            if demand.max_span_level and level.value >= demand.max_span_level and n > 1:
                placeable[r] = False
                reasons[r] = (
                    f"no single {level.name.lower()} has {s} free eligible devices "
                    f"(its span limit)"
                )
                break
            h = 1 if n >= 2 else 0
            cost = weights.crossing.get(level, 0.0) * (n - 1 + h)
            cost += weights.bottleneck.get(level, 0.0) * h
            if level >= DomainLevel.NODE:
                node_cost[r] += cost
                if h:
                    widest = level.value
            else:
                inner_cost[r] += cost
                if h:
                    widest_inner = level.value
        if not placeable[r]:
            continue
        wt = weights.throughput_by_span
        if widest >= DomainLevel.NODE:  # the node part carries the loss below "none"
            node_cost[r] -= wt * (float(reward[widest]) - float(reward[0]))
            inner_cost[r] -= wt * float(reward[0])
        else:
            inner_cost[r] -= wt * float(reward[widest_inner])
        if demand.pattern is not CommunicationPattern.NONE and s >= 2:
            inner_cost[r] -= weights.link_score
        if demand.running:
            node_cost[r] += _least_move(instance, r)
    return DemandBounds(placeable, node_cost, inner_cost, unplaced, tuple(reasons))


def _least_move(instance: PlacementInstance, r: int) -> float:
    """Least move cost of running demand r when placed."""
    demand = instance.demands[r]
    if demand.previous:
        previous = np.asarray(demand.previous, np.int64)
        still = int(instance.eligible[r][previous].sum())
        if demand.devices < previous.size:  # shrink onto eligible previous devices
            return min(demand.resize_cost, demand.move_cost) if still >= demand.devices \
                else demand.move_cost
        if still < previous.size:
            return demand.move_cost
        if len(demand.previous) == demand.devices:
            return 0.0
        return min(demand.resize_cost, demand.move_cost)
    nodes = np.asarray(demand.previous_nodes, np.int64)
    topo = instance.topology
    on_nodes = instance.eligible[r] & np.isin(topo.device_node, nodes)
    if int(on_nodes.sum()) < demand.devices:
        return demand.move_cost
    return 0.0


def free_domain_bound(
    instance: PlacementInstance, levels: tuple[DomainLevel, ...] | None = None,
    demand_devices: FloatArray | None = None,
) -> dict[DomainLevel, int]:
    """Per level (of `levels`, default all with a weight), the most domains that can be left
    entirely free: domains entirely free now, no more than each type's spare devices allow.
    `demand_devices`: (types,) devices that must be placed per type (default none)."""
    topo = instance.topology
    out: dict[DomainLevel, int] = {}
    types = int(topo.device_type.max()) + 1 if topo.num_devices else 0
    free_by_type = np.bincount(topo.device_type[instance.free], minlength=types)
    need = np.zeros(types) if demand_devices is None else demand_devices[:types]
    spare = free_by_type - need
    for level, weight in instance.weights.free_domain.items():
        if weight <= 0 or level not in topo.levels_present:
            continue
        if levels is not None and level not in levels:
            continue
        anc = topo.ancestors[:, level.value]
        has = anc >= 0
        blocked = np.zeros(topo.num_domains, dtype=bool)
        blocked[anc[has & ~instance.free]] = True
        domains = topo.domain_of_level(level)
        open_domains = domains[~blocked[domains] & (topo.domain_devices[domains] > 0)]
        if open_domains.size == 0:
            out[level] = 0
            continue
        per_type = np.zeros((topo.num_domains, max(types, 1)))
        np.add.at(per_type, (anc[has], topo.device_type[has]), 1.0)
        best = open_domains.size
        for j in range(types):
            caps = per_type[open_domains, j]
            with_type = np.sort(caps[caps > 0])
            fitting = int(np.searchsorted(np.cumsum(with_type), spare[j], side="right"))
            best = min(best, int(np.count_nonzero(caps == 0)) + fitting)
        out[level] = best
    return out
