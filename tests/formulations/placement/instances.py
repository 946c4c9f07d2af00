"""Small random placement instances and the brute-force optimum (the independent route of the
placement tests)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
from hypothesis import strategies as st

from apportion.formulations.placement.instance import (
    SPAN_COLUMNS,
    Assignment,
    Demand,
    PlacementInstance,
)
from apportion.formulations.placement.objective import Score, evaluate, violations
from apportion.formulations.placement.patterns import PatternScorer
from apportion.solver.cluster_topology import build_topology
from apportion.solver.model import Cluster
from apportion.solver.stages import PlacementWeights
from apportion.solver.topology import (
    CommunicationPattern,
    DomainLevel,
    LinkKind,
    Topology,
)


def small_topology(
    node_sizes: list[int], racks: list[int], sockets: bool, links: list[tuple[int, int, int]],
    unhealthy: list[int],
) -> Topology:
    """Nodes n0.. of the given sizes in racks (node -> rack index), one type; with `sockets`
    each node's devices split in two socket domains; links (node, a, b) of 100 Gb/s NVLink."""
    names = [f"n{v}" for v in range(len(node_sizes))]
    cluster = Cluster(
        type_names=("t",), count=np.array([sum(node_sizes)]), cost_per_hour=np.ones(1),
        node_names=tuple(names), node_type=np.zeros(len(names), np.int64),
        node_devices=np.array(node_sizes, np.int64),
    )
    domains: list[tuple[str, DomainLevel, str]] = [("c", DomainLevel.CLUSTER, "")]
    for r in sorted(set(racks)):
        domains.append((f"r{r}", DomainLevel.RACK, "c"))
    device_domain: dict[str, str] = {}
    for v, name in enumerate(names):
        domains.append((name, DomainLevel.NODE, f"r{racks[v]}"))
        if sockets and node_sizes[v] >= 2:
            half = node_sizes[v] // 2
            for s in range(2):
                domains.append((f"{name}s{s}", DomainLevel.SOCKET, name))
            for k in range(node_sizes[v]):
                device_domain[f"{name}/{k}"] = f"{name}s{0 if k < half else 1}"
    link_list = [
        (f"n{v}/{a}", f"n{v}/{b}", LinkKind.NVLINK, 100.0)
        for v, a, b in links
        if v < len(node_sizes) and a < b < node_sizes[v]
    ]
    base = build_topology(cluster, domains, device_domain, link_list)
    bad = [base.device_ids[d] for d in unhealthy if d < base.num_devices]
    return build_topology(cluster, domains, device_domain, link_list, unhealthy=bad)


@st.composite
def instances(
    draw: st.DrawFn, inner_weights: bool = True, max_demands: int = 3
) -> PlacementInstance:
    """<= 3 demands on <= 8 devices in <= 2 nodes (racks, sockets, links, unhealthy and
    occupied devices, previous devices, span limits, exact node counts, exclusive demands,
    every weight)."""
    nodes = draw(st.integers(1, 2))
    sizes = [draw(st.integers(1, 4)) for _ in range(nodes)]
    racks = [draw(st.integers(0, 1)) for _ in range(nodes)]
    sockets = draw(st.booleans()) and inner_weights
    links = draw(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 3), st.integers(0, 3)),
                          max_size=4)) if inner_weights else []
    total = sum(sizes)
    unhealthy = draw(st.lists(st.integers(0, total - 1), max_size=1))
    topo = small_topology(sizes, racks, sockets, links, unhealthy)
    occupied = np.zeros(total, dtype=bool)
    for d in draw(st.lists(st.integers(0, total - 1), max_size=1)):
        occupied[d] = True
    count = draw(st.integers(1, max_demands))
    taken: set[int] = set()
    demands = []
    for r in range(count):
        s = draw(st.integers(1, min(4, total)))
        previous: tuple[int, ...] = ()
        if draw(st.booleans()):
            k = draw(st.integers(1, s + 1))
            free = [d for d in range(total) if d not in taken]
            if len(free) >= k:
                previous = tuple(sorted(draw(st.permutations(free))[:k]))
                taken.update(previous)
        reward: tuple[float, ...] = ()
        if draw(st.booleans()):
            steps = draw(st.lists(st.floats(0.0, 0.3), min_size=SPAN_COLUMNS - 1,
                                  max_size=SPAN_COLUMNS - 1))
            values = np.concatenate([[1.0], 1.0 - np.cumsum(steps)])
            if not inner_weights:  # nothing lost inside a node
                values[1 : DomainLevel.NODE.value] = 1.0
                values[DomainLevel.NODE.value :] = np.minimum(values[DomainLevel.NODE.value :],
                                                              1.0)
            reward = tuple(np.maximum(values, 0.0).tolist())
        demands.append(Demand(
            jobs=(r,),
            type_index=0,
            devices=s,
            value=draw(st.sampled_from([1.0, 2.0])),
            nodes=draw(st.sampled_from([0, 0, 0, 1, 2])),
            max_span_level=draw(st.sampled_from([0, 0, 0, DomainLevel.NODE.value,
                                                 DomainLevel.RACK.value])),
            exclusive=draw(st.booleans()) and draw(st.booleans()),
            previous=previous,
            move_cost=draw(st.sampled_from([0.5, 2.0, 5.0])),
            resize_cost=draw(st.sampled_from([0.1, 1.0])),
            pattern=draw(st.sampled_from(list(CommunicationPattern))),
            span_reward=reward,
        ))
    weights = PlacementWeights(
        crossing={level: draw(st.sampled_from([0.0, 0.5, 1.0, 3.0]))
                  for level in DomainLevel
                  if inner_weights or level >= DomainLevel.NODE},
        bottleneck={level: draw(st.sampled_from([0.0, 1.0]))
                    for level in (DomainLevel.SOCKET, DomainLevel.NODE, DomainLevel.RACK)
                    if inner_weights or level >= DomainLevel.NODE},
        free_domain={level: draw(st.sampled_from([0.0, 0.3]))
                     for level in (DomainLevel.SOCKET, DomainLevel.NODE, DomainLevel.RACK)
                     if inner_weights or level >= DomainLevel.NODE},
        move=1.0,
        link_score=draw(st.sampled_from([0.0, 0.5])) if inner_weights else 0.0,
        throughput_by_span=draw(st.sampled_from([0.0, 1.0])),
    )
    return PlacementInstance(topo, tuple(demands), weights, occupied)


def brute_force(instance: PlacementInstance) -> Score:
    """The lexicographic optimum over every assignment (each demand unplaced or on any set of
    its eligible devices, sets disjoint)."""
    scorer = PatternScorer(instance.topology, instance.pattern_score)
    options = []
    for r, demand in enumerate(instance.demands):
        eligible = np.flatnonzero(instance.eligible[r]).tolist()
        options.append([(), *list(itertools.combinations(eligible, demand.devices))])
    best: Score | None = None
    for choice in itertools.product(*options):
        used = [d for devices in choice for d in devices]
        if len(used) != len(set(used)):
            continue
        assignment = Assignment(tuple(choice))
        if violations(instance, assignment):
            continue
        score = evaluate(instance, assignment, scorer)
        if best is None or score.better_than(best):
            best = score
    assert best is not None  # all unplaced is always feasible
    return best


def with_weights(instance: PlacementInstance, **changes: object) -> PlacementInstance:
    return replace(instance, weights=replace(instance.weights, **changes))
