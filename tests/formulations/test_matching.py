"""Maximum-weight matching: brute force on small graphs, networkx's blossom algorithm as the
independent reference, odd cycles that need the cuts, the bound at a time limit, greedy."""

from __future__ import annotations

import networkx as nx
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations.matching import (
    bipartition,
    greedy_matching,
    is_matching,
    matching_weight,
    max_weight_matching,
    twin_classes,
)
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import Deadline


@st.composite
def graphs(draw: st.DrawFn, max_n: int = 8) -> np.ndarray:
    n = draw(st.integers(1, max_n))
    values = st.one_of(st.just(0.0), st.sampled_from([0.5, 1.0, 2.0]), st.floats(0.01, 10.0))
    upper = np.array(draw(st.lists(values, min_size=n * n, max_size=n * n))).reshape(n, n)
    upper = np.triu(upper, 1)
    return upper + upper.T


def brute_force(weight: np.ndarray) -> float:
    """The largest matching weight by enumeration (vertex 0 unmatched or matched to each)."""
    n = weight.shape[0]

    def best(free: tuple[int, ...]) -> float:
        if len(free) < 2:
            return 0.0
        first, rest = free[0], free[1:]
        value = best(rest)
        for k, other in enumerate(rest):
            if weight[first, other] > 0:
                value = max(value, weight[first, other] + best(rest[:k] + rest[k + 1:]))
        return value

    return best(tuple(range(n)))


def reference(weight: np.ndarray) -> float:
    graph = nx.Graph()
    n = weight.shape[0]
    for a in range(n):
        for b in range(a + 1, n):
            if weight[a, b] > 0:
                graph.add_edge(a, b, weight=float(weight[a, b]))
    return float(sum(weight[a, b] for a, b in nx.max_weight_matching(graph)))


def check_proven(weight: np.ndarray, optimum: float) -> None:
    found = max_weight_matching(weight)
    assert is_matching(found.mate)
    assert np.all(weight[np.arange(weight.shape[0])[found.mate >= 0],
                         found.mate[found.mate >= 0]] > 0)
    assert abs(found.objective - matching_weight(weight, found.mate)) < 1e-9
    assert abs(found.objective - optimum) <= 1e-9 * max(1.0, optimum)
    assert found.status is SolverStatus.OPTIMAL
    assert found.bound is not None and found.bound >= optimum - 1e-9
    assert found.bound - found.objective <= 1e-8 * max(1.0, optimum)


@given(graphs())
def test_matches_brute_force_on_small_graphs(weight: np.ndarray) -> None:
    check_proven(weight, brute_force(weight))


@given(graphs(max_n=40), st.integers(0, 3))
def test_matches_networkx_blossom(weight: np.ndarray, density: int) -> None:
    rng = np.random.default_rng(weight.shape[0] + density)
    mask = np.triu(rng.random(weight.shape) < 0.25 * (density + 1), 1)
    weight = weight * (mask | mask.T)
    check_proven(weight, reference(weight))


def test_odd_cycles_need_the_blossom_inequalities() -> None:
    # two 5-cycles of weight 1 joined by a light edge: the degree LP alone gives 2.5 per cycle
    n = 10
    weight = np.zeros((n, n))
    for base in (0, 5):
        for k in range(5):
            a, b = base + k, base + (k + 1) % 5
            weight[a, b] = weight[b, a] = 1.0
    weight[0, 5] = weight[5, 0] = 0.1
    found = max_weight_matching(weight)
    assert abs(found.objective - 4.1) < 1e-12
    assert found.status is SolverStatus.OPTIMAL
    assert found.cuts > 0 or found.method == "lp+mip"


def test_dense_ties_on_a_larger_graph() -> None:
    rng = np.random.default_rng(3)
    n = 150
    weight = np.round(np.triu(rng.random((n, n)), 1) * 4) / 4
    weight = weight + weight.T
    check_proven(weight, reference(weight))


def test_expired_deadline_returns_a_matching_and_says_so() -> None:
    rng = np.random.default_rng(5)
    weight = np.triu(rng.random((30, 30)), 1)
    weight = weight + weight.T
    found = max_weight_matching(weight, Deadline(0.0))
    assert found.status is SolverStatus.TIME_LIMIT
    assert is_matching(found.mate)
    assert found.objective <= reference(weight) + 1e-9


def test_no_edges_and_rejected_inputs() -> None:
    found = max_weight_matching(np.zeros((3, 3)))
    assert found.objective == 0 and found.status is SolverStatus.OPTIMAL
    assert (found.mate == -1).all()
    weight = np.array([[0.0, 1.0], [2.0, 0.0]])
    try:
        max_weight_matching(weight)
    except ValueError as error:
        assert "symmetric" in str(error)
    else:
        raise AssertionError("an asymmetric matrix must be rejected")


@given(graphs(max_n=12))
def test_greedy_is_a_matching_never_above_the_optimum(weight: np.ndarray) -> None:
    mate = greedy_matching(weight)
    assert is_matching(mate)
    assert matching_weight(weight, mate) <= brute_force(weight) + 1e-9
    # greedy is a 1/2-approximation
    assert matching_weight(weight, mate) >= brute_force(weight) / 2 - 1e-9


@given(st.integers(0, 10_000), st.integers(2, 30), st.integers(1, 6))
def test_twin_classes_solve_exactly(seed: int, n: int, kinds: int) -> None:
    """Vertices of a few kinds (weights by kind pair, as identical jobs give): the class
    b-matching path, against networkx."""
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, kinds, n)
    table = np.round(rng.random((kinds, kinds)) * 3) / 3
    table = np.triu(table) + np.triu(table, 1).T
    weight = table[kind[:, None], kind[None, :]]
    np.fill_diagonal(weight, 0.0)
    classes = twin_classes(weight)
    assert sorted(np.concatenate(classes).tolist()) == list(range(n))
    assert len(classes) <= kinds or n <= kinds + 1
    for members in classes:  # interchangeable: rows agree outside the two own entries
        for u in members.tolist():
            for v in members.tolist():
                outside = np.ones(n, bool)
                outside[[u, v]] = False
                assert (weight[u, outside] == weight[v, outside]).all()
    check_proven(weight, reference(weight))


@given(st.integers(0, 10_000), st.integers(1, 25), st.integers(1, 25))
def test_bipartite_graphs_with_ties(seed: int, left: int, right: int) -> None:
    """Two sides, three weight values (Lucid's score-based gains): the assignment incumbent
    and the LP's proof, against networkx."""
    rng = np.random.default_rng(seed)
    n = left + right
    weight = np.zeros((n, n))
    block = rng.choice([0.0, 0.7, 0.8, 0.9], (left, right))
    weight[:left, left:] = block
    weight[left:, :left] = block.T
    assert bipartition(weight) is not None or not block.any()
    check_proven(weight, reference(weight))


def test_a_large_dense_graph_is_proven_optimal() -> None:
    """1,400 vertices, a planted perfect matching of heavy edges among light random ones: the
    optimum is the planted matching (dropping a heavy edge loses more than two light ones
    gain). The first LP is large enough to be solved by interior point."""
    rng = np.random.default_rng(11)
    n = 1400
    weight = np.triu(rng.random((n, n)), 1)
    weight = weight + weight.T
    order = rng.permutation(n)
    a, b = order[: n // 2], order[n // 2:]
    heavy = 10.0 + rng.random(n // 2)
    weight[a, b] = weight[b, a] = heavy
    check_proven(weight, float(heavy.sum()))


def test_bipartition_at_the_edge_count_bound() -> None:
    """A complete bipartite graph has exactly the most edges a bipartite graph can have (n^2/4)
    and is recognised; one more edge inside a side closes a triangle."""
    left, right = 6, 6
    n = left + right
    weight = np.zeros((n, n))
    weight[:left, left:] = 1.0
    weight[left:, :left] = 1.0
    sides = bipartition(weight)
    assert sides is not None and sides[:left].all() != sides[left:].any()
    weight[0, 1] = weight[1, 0] = 1.0
    assert bipartition(weight) is None
