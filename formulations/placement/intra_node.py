"""Devices inside each node once the node counts are fixed (D0.3 second stage, D0.4 per node).

On each node, every demand with devices there chooses a subset of the node's free eligible
devices of its count there, the subsets disjoint, maximizing

    sum over parts of  link_score * (part size / demand devices) * score(part)
                     - inner crossing and bottleneck costs of the part (levels below NODE)
                     + throughput_by_span * reward[widest inner level]   (one-node demands)
                     + KEEP_BONUS * (previous devices reused, for demands that keep their node
                       counts)
    + free_domain[l] * (domains below NODE left entirely free)

exactly, by dynamic programming over the subsets of the node's devices (bitmasks; nodes of up
to `DP_MAX_DEVICES` devices). Nodes whose parts have nothing to choose between (no links, no
inner domains, no previous devices) take their lowest free devices at once. Identical
situations on identically wired nodes are solved once. The result is exactly optimal for the
whole objective when these intra-node terms are zero; otherwise it is exact given the node
counts, and the certificate bounds the inner terms separately.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apportion.formulations.placement.instance import Assignment, PlacementInstance
from apportion.formulations.placement.milp import Counts, keeps_counts
from apportion.formulations.placement.patterns import PatternScorer, SubsetTable
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import FloatArray, IntArray
from apportion.solver.topology import CommunicationPattern, DomainLevel

DP_MAX_DEVICES = 16
"""Largest node solved by the subset dynamic program; larger nodes take, part by part, the
best-scoring free subset (a heuristic, reported in the certificate's detail)."""
KEEP_BONUS = 1e3
"""Value of reusing one previous device for a demand that keeps its node counts (dominates
every other intra-node term, so keepers get their devices back)."""


@dataclass(frozen=True)
class Part:
    """One demand's devices on one node."""

    demand: int
    count: int
    eligible: int
    """Bitmask of the node's local devices it may use."""
    previous: int
    """Bitmask of its previous local devices (0 unless it keeps its node counts)."""
    single_node: bool


class NodeShapes:
    """Per node, the local inner-domain structure: for each level below NODE, each local
    device's domain (relabelled 0.. in order of first appearance), and the bitmasks of the
    node's inner domains."""

    def __init__(self, instance: PlacementInstance, scorer: PatternScorer) -> None:
        self.instance = instance
        self.scorer = scorer
        self._keys: dict[int, tuple[object, ...]] = {}
        self._costs: dict[tuple[object, ...], tuple[FloatArray, IntArray]] = {}

    def local(self, node: int) -> tuple[tuple[DomainLevel, IntArray], ...]:
        topo = self.instance.topology
        devices = topo.node_devices[node]
        out = []
        for level in self.instance.inner_levels:
            anc = topo.ancestors[devices, level.value]
            _, labels = np.unique(np.where(anc >= 0, anc, -1 - np.arange(anc.size)),
                                  return_inverse=True)
            relabel: dict[int, int] = {}
            ordered = np.array([relabel.setdefault(int(x), len(relabel)) for x in labels])
            present = anc >= 0
            out.append((level, np.where(present, ordered, -1)))
        return tuple(out)

    def key(self, node: int) -> tuple[object, ...]:
        known = self._keys.get(node)
        if known is None:
            shapes = self.local(node)
            known = (self.scorer.structure(node),
                     tuple((lv.value, tuple(a.tolist())) for lv, a in shapes))
            self._keys[node] = known
        return known

    def inner_cost(self, node: int, table: SubsetTable) -> tuple[FloatArray, IntArray]:
        """(S,) inner crossing + bottleneck cost of each subset and (S,) widest inner level
        crossed (0 = none)."""
        key = (self.key(node), table.members.shape[1], id(table))
        cached = self._costs.get(key)
        if cached is not None:
            return cached
        weights = self.instance.weights
        members = table.members
        cost = np.zeros(members.shape[0])
        widest = np.zeros(members.shape[0], np.int64)
        for level, labels in self.local(node):
            if members.shape[1] == 0:
                break
            anc = labels[members]
            ordered = np.sort(anc, axis=1)
            valid = ordered >= 0
            distinct = valid[:, 0].astype(np.int64) + (
                (np.diff(ordered, axis=1) != 0) & valid[:, 1:]
            ).sum(axis=1)
            distinct = np.where(valid.any(axis=1), distinct, 0)
            h = (distinct >= 2).astype(np.float64)
            n = distinct.astype(np.float64)
            cost += np.where(distinct > 0, weights.crossing.get(level, 0.0) * (n - 1 + h), 0.0)
            cost += weights.bottleneck.get(level, 0.0) * h
            widest = np.where(h > 0, level.value, widest)
        self._costs[key] = (cost, widest)
        return cost, widest

    def domain_masks(self, node: int) -> list[tuple[DomainLevel, int]]:
        """(level, bitmask) of each inner domain of the node."""
        out = []
        for level, labels in self.local(node):
            for label in np.unique(labels[labels >= 0]).tolist():
                out.append((level, int(np.left_shift(1, np.flatnonzero(labels == label)).sum())))
        return out


def choose_devices(
    instance: PlacementInstance,
    counts: Counts,
    scorer: PatternScorer | None = None,
    deadline: Deadline = NO_DEADLINE,
) -> tuple[Assignment, bool]:
    """Devices for node counts (module docstring); (assignment, exact) where exact is False
    when a node was too large for the dynamic program."""
    topo = instance.topology
    scorer = scorer or PatternScorer(topo, instance.pattern_score)
    shapes = NodeShapes(instance, scorer)
    per_node: dict[int, list[tuple[int, int]]] = {}
    for r, placed in enumerate(counts):
        for v, k in placed.items():
            per_node.setdefault(int(v), []).append((r, int(k)))
    chosen: list[list[int]] = [[] for _ in range(instance.num_demands)]
    exact = True
    cache: dict[tuple[object, ...], list[tuple[int, ...]]] = {}
    free = instance.free

    for v, items in sorted(per_node.items()):
        if deadline.expired():
            break
        devices = topo.node_devices[v]
        n = devices.size
        free_local = int(np.left_shift(1, np.flatnonzero(free[devices])).sum()) if n else 0
        parts = []
        for r, k in sorted(items):
            demand = instance.demands[r]
            eligible = instance.eligible[r][devices]
            previous = 0
            if demand.previous and keeps_counts(instance, r, counts[r]):
                mine = np.isin(devices, np.asarray(demand.previous, np.int64))
                previous = int(np.left_shift(1, np.flatnonzero(mine)).sum())
            parts.append(Part(r, k, int(np.left_shift(1, np.flatnonzero(eligible)).sum()),
                              previous, len(counts[r]) == 1))
        if _trivial(instance, parts):
            picks = _lowest(parts, free_local)
        elif n <= DP_MAX_DEVICES:
            key = (shapes.key(v), free_local, tuple(
                (p.count, p.eligible, p.previous, p.single_node, _part_signature(instance, p))
                for p in parts))
            if key not in cache:
                cache[key] = _dynamic_program(instance, shapes, v, parts, free_local)
            picks = cache[key]
        else:
            exact = False
            picks = _greedy(instance, shapes, v, parts, free_local)
        for part, local in zip(parts, picks, strict=True):
            chosen[part.demand].extend(int(devices[d]) for d in local)
    out = tuple(tuple(d) if len(d) == instance.demands[r].devices else ()
                for r, d in enumerate(chosen))
    reasons = tuple("" if d else "no devices inside its nodes fit (time limit or span)"
                    for d in out)
    return Assignment(out, reasons), exact


def _part_signature(instance: PlacementInstance, part: Part) -> tuple[object, ...]:
    demand = instance.demands[part.demand]
    return (demand.devices, demand.pattern, demand.max_span_level,
            tuple(instance.span_reward(part.demand).tolist()))


def _trivial(instance: PlacementInstance, parts: list[Part]) -> bool:
    """Nothing to choose between: no inner levels, no link scores, no previous devices."""
    if instance.inner_levels:
        return False
    for part in parts:
        demand = instance.demands[part.demand]
        if part.previous:
            return False
        scored = instance.weights.link_score > 0 or instance.min_link_score > 0
        if demand.pattern is not CommunicationPattern.NONE and part.count >= 2 and scored:
            return False
    return True


def _lowest(parts: list[Part], free_local: int) -> list[tuple[int, ...]]:
    """Lowest free eligible devices, part by part."""
    taken = 0
    out = []
    for part in parts:
        pick: list[int] = []
        bits = free_local & part.eligible & ~taken
        d = 0
        while len(pick) < part.count and bits >> d:
            if bits >> d & 1:
                pick.append(d)
            d += 1
        taken |= sum(1 << x for x in pick)
        out.append(tuple(pick))
    return out


def _part_values(
    instance: PlacementInstance, shapes: NodeShapes, node: int, part: Part, free_local: int
) -> tuple[IntArray, FloatArray, IntArray]:
    """(masks, values, members) of the subsets part may take."""
    demand = instance.demands[part.demand]
    weights = instance.weights
    table = shapes.scorer.table(node, part.count, demand.pattern)
    allowed = (table.masks & ~(free_local & part.eligible)) == 0
    inner, widest = shapes.inner_cost(node, table)
    value = -inner
    if demand.pattern is not CommunicationPattern.NONE and demand.devices >= 2:
        value = value + weights.link_score * (part.count / demand.devices) * table.score
        if instance.min_link_score > 0:  # every part, so the job's score reaches it too
            allowed &= table.score >= instance.min_link_score - 1e-12
    if part.single_node:
        reward = instance.span_reward(part.demand)
        value = value + weights.throughput_by_span * reward[widest]
        if demand.max_span_level:
            allowed &= (widest < demand.max_span_level) | (widest == 0)
    if part.previous:
        reuse = np.array([bin(int(m) & part.previous).count("1") for m in table.masks])
        value = value + KEEP_BONUS * reuse
    keep = np.flatnonzero(allowed)
    return table.masks[keep], value[keep], table.order[keep]


def _end_value(instance: PlacementInstance, shapes: NodeShapes, node: int,
               free_local: int, states: IntArray) -> FloatArray:
    """Reward of the inner domains left entirely free for each final used-device mask."""
    out = np.zeros(states.size)
    for level, mask in shapes.domain_masks(node):
        omega = instance.weights.free_domain.get(level, 0.0)
        if omega > 0 and mask & ~free_local == 0:
            out += omega * ((states & mask) == 0)
    return out


def _dynamic_program(
    instance: PlacementInstance, shapes: NodeShapes, node: int, parts: list[Part],
    free_local: int,
) -> list[tuple[int, ...]]:
    """Exact disjoint subsets for the parts (module docstring): states are used-device masks,
    each part extends every state by each of its subsets disjoint from it, and only the best
    value per resulting state is kept."""
    states = np.zeros(1, np.int64)
    values = np.zeros(1)
    steps: list[tuple[IntArray, IntArray, IntArray, IntArray]] = []
    for part in parts:
        masks, part_value, members = _part_values(instance, shapes, node, part, free_local)
        s_index, m_index = np.nonzero((states[:, None] & masks[None, :]) == 0)
        if s_index.size == 0:
            return [() for _ in parts]
        new_state = states[s_index] | masks[m_index]
        new_value = values[s_index] + part_value[m_index]
        order = np.lexsort((-new_value, new_state))
        first = np.ones(order.size, dtype=bool)
        first[1:] = new_state[order][1:] != new_state[order][:-1]
        best = order[first]  # ascending new states, best value of each
        steps.append((states[s_index[best]], members[m_index[best]], new_state[best], masks))
        states, values = new_state[best], new_value[best]
    total = values + _end_value(instance, shapes, node, free_local, states)
    state = int(states[int(np.argmax(total))])
    picks: list[tuple[int, ...]] = []
    for previous, chosen, reached, _ in reversed(steps):
        k = int(np.searchsorted(reached, state))
        picks.append(tuple(int(d) for d in chosen[k]))
        state = int(previous[k])
    return list(reversed(picks))


def _greedy(
    instance: PlacementInstance, shapes: NodeShapes, node: int, parts: list[Part],
    free_local: int,
) -> list[tuple[int, ...]]:
    """Large nodes: each part in turn takes its best free subset."""
    taken = 0
    out: list[tuple[int, ...]] = []
    for part in parts:
        masks, value, members = _part_values(instance, shapes, node, part, free_local & ~taken)
        if masks.size == 0:
            out.append(())
            continue
        k = int(np.argmax(value))
        taken |= int(masks[k])
        out.append(tuple(int(d) for d in members[k]))
    return out
