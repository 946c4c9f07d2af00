"""The one objective every placer is judged by (D0.2), computed from an assignment.

Lexicographic: first the placed value (sum of `Demand.value` over placed demands, larger is
better), then the cost (smaller is better):

    cost = sum over placed demands r and levels l:
               crossing[l] * (n_l - 1 + h_l)          ring crossings (the ring identity)
             + bottleneck[l] * h_l
         - throughput_by_span * reward_r[widest level crossed]
         - link_score * (sum over the demand's node parts of |part| * score(part)) / devices
         + move * (running demand not kept)  [+ move_per_s * (checkpoint + restore)]
         + min(resize, move) cost (kept on a subset or superset of its devices: it may
           shrink or grow in place, or restart there)
         - sum over levels l of free_domain[l] * (domains of l left entirely free)

n_l = domains of level l the demand uses, h_l = 1 when n_l >= 2. A running demand that is not
placed counts as moved (it loses its devices). The link term applies to demands of two or
more devices with a communication pattern. `evaluate` is used by the exact placer's
certificate, by every compat placer's report and by the tests; `violations` checks an
assignment's feasibility (D0.6 test 4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apportion.formulations.placement.hived import quota_violations
from apportion.formulations.placement.instance import Assignment, PlacementInstance
from apportion.formulations.placement.patterns import PatternScorer
from apportion.solver.model import FloatArray, IntArray
from apportion.solver.topology import BoolArray, CommunicationPattern, DomainLevel

TERMS = ("crossing", "bottleneck", "move", "free_domain", "link_score", "throughput_by_span")
"""Names of the cost terms (the keys of `Score.terms`)."""


@dataclass(frozen=True)
class Score:
    """An assignment on the objective."""

    placed_value: float
    placed: int
    cost: float
    terms: dict[str, float]
    demand_cost: FloatArray
    """(R,) each demand's cost (every term but free domains)."""
    widest: IntArray
    """(R,) widest level crossed (a `DomainLevel` value; 0 = none; -1 = not placed)."""
    link_score: FloatArray
    """(R,) intra-node link score in [0, 1] (1 for single devices and unplaced demands)."""
    kept: BoolArray
    """(R,) a running demand kept its devices (same devices, or same nodes when only nodes
    were known)."""
    resized: BoolArray
    """(R,) a running demand kept a subset or superset of its devices."""
    moved: BoolArray
    """(R,) a running demand was placed elsewhere."""
    preempted: BoolArray
    """(R,) a running demand was not placed."""
    free_domains: dict[DomainLevel, int]
    ordered: tuple[tuple[int, ...], ...]
    """Per demand, its devices in pattern order (per node, nodes in the order used)."""

    def better_than(self, other: Score, tolerance: float = 1e-9) -> bool:
        """Lexicographically better: more placed value, or as much and a lower cost."""
        if self.placed_value > other.placed_value + tolerance:
            return True
        if self.placed_value < other.placed_value - tolerance:
            return False
        return self.cost < other.cost - tolerance

    def at_least_as_good(self, other: Score, tolerance: float = 1e-6) -> bool:
        return not other.better_than(self, tolerance)


def move_cost(instance: PlacementInstance, r: int) -> float:
    """Cost of the running demand r not keeping its devices (0 for a new demand)."""
    demand = instance.demands[r]
    return demand.move_cost if demand.running else 0.0


def keep_state(instance: PlacementInstance, r: int, devices: tuple[int, ...]) -> tuple[bool, bool]:
    """(kept, resized) of running demand r on `devices` (see module docstring)."""
    demand = instance.demands[r]
    if not demand.running or not devices:
        return False, False
    if demand.previous:
        new, old = set(devices), set(demand.previous)
        if len(new) == len(old):
            return new == old, False
        inside = old < new if len(new) > len(old) else new < old
        return inside, inside
    nodes = set(instance.topology.device_node[list(devices)].tolist())
    return nodes == set(demand.previous_nodes), False


def evaluate(
    instance: PlacementInstance, assignment: Assignment, scorer: PatternScorer | None = None
) -> Score:
    """The assignment on the objective (it need not be feasible; see `violations`).
    Vectorized over demands: the domains each demand uses come from one pass per level."""
    topo = instance.topology
    weights = instance.weights
    scorer = scorer or PatternScorer(topo, instance.pattern_score)
    count = instance.num_demands
    lengths = np.array([len(d) for d in assignment.devices], np.int64)
    placed_mask = lengths > 0
    devices = np.fromiter((d for ds in assignment.devices for d in ds), np.int64,
                          int(lengths.sum()))
    owner = np.repeat(np.arange(count), lengths)
    used = np.zeros(topo.num_devices, dtype=bool)
    used[devices] = True
    crossing = np.zeros(count)
    bottleneck = np.zeros(count)
    widest = np.where(placed_mask, 0, -1).astype(np.int64)
    for level in topo.levels_present:
        anc = topo.ancestors[devices, level.value]
        valid = anc >= 0
        keys = np.unique(owner[valid] * topo.num_domains + anc[valid])
        n = np.bincount(keys // topo.num_domains, minlength=count).astype(np.float64)
        h = (n >= 2).astype(np.float64)
        crossing += np.where(n > 0, weights.crossing.get(level, 0.0) * (n - 1 + h), 0.0)
        bottleneck += weights.bottleneck.get(level, 0.0) * h
        widest = np.where(h > 0, level.value, widest)
    span = np.zeros(count)
    link = np.ones(count)
    link_cost = np.zeros(count)
    move = np.zeros(count)
    kept = np.zeros(count, dtype=bool)
    resized = np.zeros(count, dtype=bool)
    moved = np.zeros(count, dtype=bool)
    preempted = np.zeros(count, dtype=bool)
    ordered: list[tuple[int, ...]] = list(assignment.devices)
    for r, demand in enumerate(instance.demands):
        mine = assignment.devices[r]
        if demand.span_reward and mine:
            span[r] = -weights.throughput_by_span * float(instance.span_reward(r)[widest[r]])
        if mine and demand.pattern is not CommunicationPattern.NONE and demand.devices >= 2:
            link[r], ordered[r] = _link_score(instance, scorer, r, mine)
            link_cost[r] = -weights.link_score * link[r]
        if not demand.running:
            continue
        if not mine:
            preempted[r] = True
            move[r] = demand.move_cost
            continue
        kept[r], resized[r] = keep_state(instance, r, mine)
        if not kept[r]:
            moved[r] = True
            move[r] = demand.move_cost
        elif resized[r]:
            move[r] = min(demand.resize_cost, demand.move_cost)
    crossing *= placed_mask
    bottleneck *= placed_mask
    free_domains = free_domain_counts(instance, used)
    terms = {
        "crossing": float(crossing.sum()),
        "bottleneck": float(bottleneck.sum()),
        "move": float(move.sum()),
        "free_domain": -sum(weights.free_domain.get(level, 0.0) * k
                            for level, k in free_domains.items()),
        "link_score": float(link_cost.sum()),
        "throughput_by_span": float(span.sum()),
    }
    values = np.array([d.value for d in instance.demands])
    return Score(
        placed_value=float(values[placed_mask].sum()),
        placed=int(placed_mask.sum()),
        cost=float(sum(terms.values())),
        terms=terms,
        demand_cost=crossing + bottleneck + span + link_cost + move,
        widest=widest,
        link_score=link,
        kept=kept,
        resized=resized,
        moved=moved,
        preempted=preempted,
        free_domains=free_domains,
        ordered=tuple(ordered),
    )


def _link_score(
    instance: PlacementInstance, scorer: PatternScorer, r: int, devices: tuple[int, ...]
) -> tuple[float, tuple[int, ...]]:
    """(score, devices in pattern order): per node part, weighted by its size."""
    topo = instance.topology
    demand = instance.demands[r]
    by_node: dict[int, list[int]] = {}
    for d in devices:
        by_node.setdefault(int(topo.device_node[d]), []).append(int(d))
    total = 0.0
    order: list[int] = []
    for v, part in by_node.items():
        local = {int(topo.device_index[d]): d for d in part}
        score, local_order = scorer.score(v, tuple(local), demand.pattern)
        total += len(part) * score
        order.extend(local[k] for k in local_order)
    return total / len(devices), tuple(order)


def free_domain_counts(instance: PlacementInstance, used: BoolArray) -> dict[DomainLevel, int]:
    """Per level with a free-domain weight, domains whose devices are all free and unused."""
    topo = instance.topology
    out: dict[DomainLevel, int] = {}
    blocked = ~instance.free | used
    for level, weight in instance.weights.free_domain.items():
        if weight <= 0 or level not in topo.levels_present:
            continue
        anc = topo.ancestors[:, level.value]
        has = anc >= 0
        bad = np.zeros(topo.num_domains, dtype=bool)
        bad[anc[has & blocked]] = True
        domains = topo.domain_of_level(level)
        nonempty = topo.domain_devices[domains] > 0
        out[level] = int(np.count_nonzero(~bad[domains] & nonempty))
    return out


def violations(instance: PlacementInstance, assignment: Assignment) -> list[str]:
    """Every constraint the assignment breaks (empty = feasible)."""
    topo = instance.topology
    out: list[str] = []
    owner = np.full(topo.num_devices, -1, np.int64)
    node_owner: dict[int, set[int]] = {}
    for r, demand in enumerate(instance.demands):
        devices = assignment.devices[r]
        if not devices:
            continue
        if len(devices) != demand.devices or len(set(devices)) != len(devices):
            out.append(f"demand {r}: {len(devices)} devices, needs {demand.devices} distinct")
        index = np.asarray(devices, np.int64)
        taken = owner[index] >= 0
        if taken.any():
            out.append(f"demand {r}: device {int(index[taken][0])} used twice")
        owner[index] = r
        bad = ~instance.eligible[r][index]
        if bad.any():
            out.append(f"demand {r}: device {int(index[bad][0])} not eligible")
        nodes = set(topo.device_node[index].tolist())
        if demand.nodes and len(nodes) != demand.nodes:
            out.append(f"demand {r}: {len(nodes)} nodes, needs exactly {demand.nodes}")
        if demand.max_span_level:
            for level in topo.levels_present:
                if level.value < demand.max_span_level:
                    continue
                anc = topo.ancestors[index, level.value]
                if np.unique(anc[anc >= 0]).size > 1:
                    out.append(f"demand {r}: crosses {level.name.lower()}, beyond its limit")
        for v in nodes:
            node_owner.setdefault(v, set()).add(r)
    for v, owners in node_owner.items():
        if len(owners) > 1 and any(instance.demands[r].exclusive for r in owners):
            out.append(f"node {v}: an exclusive demand shares it")
    if instance.min_link_score > 0:
        scorer = PatternScorer(topo, instance.pattern_score)
        for r, demand in enumerate(instance.demands):
            devices = assignment.devices[r]
            if devices and demand.pattern is not CommunicationPattern.NONE and \
                    demand.devices >= 2 and \
                    _link_score(instance, scorer, r, devices)[0] < instance.min_link_score - 1e-9:
                out.append(f"demand {r}: link score below {instance.min_link_score}")
    return out + quota_violations(instance, assignment)


def span_columns(levels: tuple[DomainLevel, ...]) -> IntArray:
    """Column indices of a span table for the given levels."""
    return np.asarray([level.value for level in levels], np.int64)
