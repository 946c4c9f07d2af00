"""Intra-node patterns (D3 MAPA, D4 topology-aware): subset and ring enumeration counts, DGX-1
automorphism invariance, exact joint packing on one node against brute force and against
every MAPA policy, the fitted bandwidth model, ring-order invariance, and the minimum link
score (MAPA's min-score wait, SC17's postponement) never placing a job below it."""

from __future__ import annotations

import itertools
from math import comb, factorial

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.datasets.topologies import DGX1_NVLINK, NodeKind, rack_cluster
from apportion.formulations.placement.compat import COMPAT_PLACERS
from apportion.formulations.placement.exact import place_exact
from apportion.formulations.placement.instance import Assignment, Demand, PlacementInstance
from apportion.formulations.placement.objective import evaluate, violations
from apportion.formulations.placement.patterns import (
    PatternScorer,
    cyclic_orders,
    mapa_predicted_bandwidth,
    subsets,
)
from apportion.solver.deadline import NO_DEADLINE
from apportion.solver.result import Termination
from apportion.solver.stages import PatternScore, PlacementWeights, Placer
from apportion.solver.topology import CommunicationPattern, Topology

RING = CommunicationPattern.RING_ALLREDUCE
ALL = CommunicationPattern.ALL_TO_ALL
MAPA = [p for p in COMPAT_PLACERS if p.value.startswith("mapa")]
SWAP_QUADS = (4, 5, 6, 7, 0, 1, 2, 3)
"""An automorphism of the DGX-1 NVLink graph (and of its sockets and switches)."""
WEIGHTS = PlacementWeights(crossing={}, free_domain={}, link_score=1.0)
"""Only the link score counts."""


def dgx() -> Topology:
    return rack_cluster(1, 1, 8, "v100", kind=NodeKind.DGX1).topology


def test_subset_and_ring_counts() -> None:
    for k in range(9):
        assert subsets(8, k).shape[0] == comb(8, k)
    for k in range(3, 9):
        assert cyclic_orders(k).shape[0] == factorial(k - 1) // 2
    scorer = PatternScorer(dgx())
    for k in range(1, 9):
        assert scorer.table(0, k, RING).members.shape[0] == comb(8, k)


def test_swap_of_quads_is_an_automorphism() -> None:
    edges = {(min(a, b), max(a, b)): lanes for a, b, lanes in DGX1_NVLINK}
    mapped = {(min(SWAP_QUADS[a], SWAP_QUADS[b]), max(SWAP_QUADS[a], SWAP_QUADS[b])): lanes
              for (a, b), lanes in edges.items()}
    assert mapped == edges


@given(busy=st.lists(st.integers(0, 7), max_size=4), k=st.integers(2, 5),
       pattern=st.sampled_from([RING, ALL]),
       kind=st.sampled_from([PatternScore.BANDWIDTH, PatternScore.PREDICTED]))
def test_best_pattern_is_invariant_under_automorphisms(
    busy: list[int], k: int, pattern: CommunicationPattern, kind: PatternScore
) -> None:
    table = PatternScorer(dgx(), kind).table(0, k, pattern)

    def best(occupied: set[int]) -> float:
        free = [s for s, row in enumerate(table.members) if not occupied & set(row.tolist())]
        return max((float(table.score[s]) for s in free), default=-1.0)

    assert best(set(busy)) == pytest.approx(best({SWAP_QUADS[d] for d in busy}))


def single_node(demands: tuple[Demand, ...], busy: list[int],
                kind: PatternScore = PatternScore.BANDWIDTH) -> PlacementInstance:
    occupied = np.zeros(8, dtype=bool)
    occupied[busy] = True
    return PlacementInstance(dgx(), demands, WEIGHTS, occupied, pattern_score=kind)


def brute_force_link(instance: PlacementInstance) -> float:
    """The best total cost over every way to give each demand disjoint free devices (all
    placed), brute force."""
    free = np.flatnonzero(instance.free).tolist()
    best = np.inf
    sizes = [d.devices for d in instance.demands]
    for picks in itertools.product(*[itertools.combinations(free, s) for s in sizes]):
        used = [d for p in picks for d in p]
        if len(used) == len(set(used)):
            best = min(best, evaluate(instance, Assignment(tuple(picks))).cost)
    return best


jobs = st.lists(st.tuples(st.integers(1, 4), st.sampled_from([RING, ALL]), st.booleans()),
                min_size=1, max_size=3)


@given(spec=jobs, busy=st.lists(st.integers(0, 7), max_size=2))
def test_joint_packing_is_exact_on_one_node(
    spec: list[tuple[int, CommunicationPattern, bool]], busy: list[int]
) -> None:
    demands = tuple(Demand((r,), 0, s, pattern=p, bandwidth_sensitive=b)
                    for r, (s, p, b) in enumerate(spec))
    instance = single_node(demands, busy)
    if sum(d.devices for d in demands) > 8 - len(set(busy)):
        return
    result = place_exact(instance)
    assert result.score.placed == len(demands)
    assert result.termination is Termination.OPTIMAL  # one node: the counts are forced
    assert result.score.cost == pytest.approx(brute_force_link(instance))
    for placer in MAPA:
        answer = COMPAT_PLACERS[placer](instance, NO_DEADLINE)
        assert not violations(instance, answer)
        assert result.score.at_least_as_good(evaluate(instance, answer))


def test_joint_packing_beats_fifo_mapa_on_a_hand_built_case() -> None:
    """Two 4-GPU rings on an empty DGX-1: MAPA's greedy gives the first ring the best 4 GPUs
    with no regard for the second; the joint optimum gives both an ideal quad."""
    demands = (Demand((0,), 0, 4, pattern=RING), Demand((1,), 0, 4, pattern=RING))
    instance = single_node(demands, [])
    exact = place_exact(instance)
    assert exact.score.link_score.tolist() == [1.0, 1.0]
    for placer in MAPA:
        answer = evaluate(instance, COMPAT_PLACERS[placer](instance, NO_DEADLINE))
        assert exact.score.at_least_as_good(answer)


def test_predicted_bandwidth_matches_the_fitted_model() -> None:
    """Values of MAPA's polynomial, written out term by term."""
    def by_hand(x1: float, x2: float, x3: float) -> float:
        linear = 16.39670455 * x1 + 4.536821878 * x2 + 1.55623404 * x3
        inverse = -20.69484581 / (x1 + 1) - 9.467461958 / (x2 + 1) + 7.615106783 / (x3 + 1)
        pair = -7.973335727 * x1 * x2 + 12.73323772 * x2 * x3 - 4.195655221 * x1 * x3
        inverse_pair = (-8.413419363 / (x1 * x2 + 1) + 62.85125807 / (x2 * x3 + 1)
                        + 27.41832588 / (x1 * x3 + 1))
        triple = -5.114108079 * x1 * x2 * x3 - 46.97390071 / (x1 * x2 * x3 + 1)
        return linear + inverse + pair + inverse_pair + triple

    for x1, x2, x3 in itertools.product(range(4), repeat=3):
        assert float(mapa_predicted_bandwidth(x1, x2, x3)) == pytest.approx(by_hand(x1, x2, x3))


@given(perm=st.permutations(range(5)), shift=st.integers(0, 4), flip=st.booleans())
def test_ring_score_depends_only_on_the_cyclic_order(perm: list[int], shift: int,
                                                     flip: bool) -> None:
    links = PatternScorer(dgx()).links(0)
    order = np.array(perm)
    other = np.roll(order, shift)
    if flip:
        other = other[::-1]

    def ring(o: np.ndarray) -> float:
        return float(links.bandwidth[o, np.roll(o, -1)].sum())

    assert ring(order) == pytest.approx(ring(other))


@given(busy=st.lists(st.integers(0, 7), max_size=5), k=st.integers(2, 4),
       threshold=st.sampled_from([0.5, 0.8, 1.0]))
def test_min_link_score_never_places_a_job_below_it(busy: list[int], k: int,
                                                    threshold: float) -> None:
    from dataclasses import replace

    instance = replace(single_node((Demand((0,), 0, k, pattern=RING),), busy),
                       min_link_score=threshold)
    result = place_exact(instance)
    assert not violations(instance, result.assignment)
    if result.assignment.devices[0]:
        assert result.score.link_score[0] >= threshold - 1e-9
    scorer = PatternScorer(instance.topology)
    ideal_possible = any(not set(busy) & set(row.tolist()) and score >= threshold - 1e-9
                         for row, score in zip(scorer.table(0, k, RING).members,
                                               scorer.table(0, k, RING).score, strict=True))
    assert bool(result.assignment.devices[0]) == ideal_possible
    sensitive = replace(instance, demands=(replace(instance.demands[0],
                                                   bandwidth_sensitive=True),))
    mapa = COMPAT_PLACERS[Placer.MAPA_MIN_SCORE](sensitive, NO_DEADLINE)
    if mapa.devices[0]:  # MAPA's min-score waits unless the pattern is ideal
        assert evaluate(sensitive, mapa).link_score[0] == pytest.approx(1.0)
