"""The exact placer against brute force on tiny topologies (D0.6 tests 1, 2, 4): the same
placed value and cost when the objective has no intra-node terms (node level) or no link
score (device level); with intra-node terms the certificate's bound never exceeds the true
optimum, an `optimal` answer is optimal, and every answer is feasible."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations.placement.exact import place_exact
from apportion.formulations.placement.instance import PlacementInstance
from apportion.formulations.placement.objective import violations
from apportion.solver.result import Termination
from apportion.solver.stages import PlacementLevel
from tests.formulations.placement.instances import brute_force, instances, with_weights

TOLERANCE = 1e-6


def check_certificate(instance: PlacementInstance, level: PlacementLevel) -> None:
    best = brute_force(instance)
    result = place_exact(instance, level=level)
    assert not violations(instance, result.assignment)
    assert result.score.placed_value == best.placed_value
    assert result.placed_value_bound >= best.placed_value - TOLERANCE
    assert result.score.cost >= best.cost - TOLERANCE
    assert result.bound is not None and result.bound <= best.cost + TOLERANCE
    if result.termination is Termination.OPTIMAL:
        assert result.score.cost <= best.cost + 1e-4 * max(1.0, abs(best.cost))


@given(instance=instances(inner_weights=False))
def test_node_level_is_optimal_without_intra_node_terms(instance: PlacementInstance) -> None:
    best = brute_force(instance)
    result = place_exact(instance)
    assert not violations(instance, result.assignment)
    assert result.termination is Termination.OPTIMAL, result.detail
    assert result.score.placed_value == best.placed_value
    assert abs(result.score.cost - best.cost) <= 1e-4 * max(1.0, abs(best.cost))


@given(instance=instances())
def test_device_level_is_optimal_without_link_scores(instance: PlacementInstance) -> None:
    instance = with_weights(instance, link_score=0.0)
    best = brute_force(instance)
    result = place_exact(instance, level=PlacementLevel.DEVICE)
    assert not violations(instance, result.assignment)
    assert result.termination is Termination.OPTIMAL, result.detail
    assert result.score.placed_value == best.placed_value
    assert abs(result.score.cost - best.cost) <= 1e-4 * max(1.0, abs(best.cost))


@given(instance=instances())
def test_node_level_certificate_holds_with_intra_node_terms(instance: PlacementInstance) -> None:
    check_certificate(instance, PlacementLevel.NODE)


@given(instance=instances())
def test_device_level_certificate_holds_with_link_scores(instance: PlacementInstance) -> None:
    check_certificate(instance, PlacementLevel.DEVICE)


@given(instance=instances(inner_weights=False))
def test_restricted_candidates_keep_a_valid_certificate(instance: PlacementInstance) -> None:
    best = brute_force(instance)
    result = place_exact(instance, max_candidate_pairs=1)
    assert not violations(instance, result.assignment)
    assert result.score.placed_value == best.placed_value
    assert result.bound is not None and result.bound <= best.cost + TOLERANCE
    if result.termination is Termination.OPTIMAL:
        assert result.score.cost <= best.cost + 1e-4 * max(1.0, abs(best.cost))


def test_unhealthy_and_occupied_devices_are_never_used() -> None:
    from tests.formulations.placement.instances import small_topology

    topo = small_topology([4, 4], [0, 0], False, [], [1])
    occupied = np.zeros(8, dtype=bool)
    occupied[5] = True
    from apportion.formulations.placement.instance import Demand

    demands = (Demand((0,), 0, 3), Demand((1,), 0, 3))
    instance = PlacementInstance(topo, demands, occupied=occupied)
    result = place_exact(instance)
    used = [d for devices in result.assignment.devices for d in devices]
    assert sorted(used) == [0, 2, 3, 4, 6, 7]
    assert result.termination is Termination.OPTIMAL
    instance = replace(instance, demands=(Demand((0,), 0, 4), Demand((1,), 0, 3)))
    result = place_exact(instance)
    assert result.score.placed == 1


@given(picks=st.lists(st.integers(0, 31), min_size=2, max_size=12, unique=True))
def test_ring_identity(picks: list[int]) -> None:
    """D0.6 test 5: a ring over the devices ordered so that each domain's devices are
    contiguous crosses a level's boundaries n - 1 + h times (n domains used, h = n >= 2)."""
    from apportion.datasets.topologies import NodeKind, rack_cluster

    topo = rack_cluster(4, 1, 8, "gpu", kind=NodeKind.DGX1, racks_per_pod=2).topology
    anc = topo.ancestors
    levels = topo.levels_present
    ring = sorted(picks, key=lambda d: tuple(anc[d, lv.value] for lv in reversed(levels)))
    for level in levels:
        column = anc[ring, level.value]
        crossings = int(np.count_nonzero(column != np.roll(column, -1)))
        n = np.unique(column).size
        assert crossings == n - 1 + (1 if n >= 2 else 0)


@given(instance=instances(inner_weights=False), seed=st.integers(0, 100))
def test_permuting_identical_nodes_keeps_the_optimum(instance: PlacementInstance,
                                                     seed: int) -> None:
    """D0.6 test 6: relabelling devices within a node (all identical without inner terms) and
    swapping two same-rack nodes of equal size leaves the optimal value unchanged."""
    topo = instance.topology
    perm = np.arange(topo.num_devices)
    rng = np.random.default_rng(seed)
    for v in range(len(topo.node_domain)):
        members = topo.node_devices[v]
        perm[members] = rng.permutation(members)
    mapped = replace(instance, demands=tuple(
        replace(d, previous=tuple(int(perm[x]) for x in d.previous)) for d in instance.demands
    ), occupied=None if instance.occupied is None else instance.occupied[np.argsort(perm)])
    healthy = topo.device_healthy[np.argsort(perm)]
    mapped = replace(mapped, topology=replace(topo, device_healthy=healthy))
    first, second = place_exact(instance), place_exact(mapped)
    assert first.score.placed_value == second.score.placed_value
    assert abs(first.score.cost - second.score.cost) <= 1e-6


@given(instance=instances(inner_weights=False))
def test_node_milp_alone_equals_brute_force(instance: PlacementInstance) -> None:
    """The node-level MILP by itself (every pair a candidate, no starts): its optimum at the
    best placed value is the brute-force cost, and its node counts decode to devices of that
    cost (without intra-node terms the device choice inside a node is free)."""
    from apportion.formulations.placement import milp
    from apportion.formulations.placement.bounds import demand_bounds
    from apportion.formulations.placement.intra_node import choose_devices
    from apportion.formulations.placement.objective import evaluate
    from apportion.solver.deadline import NO_DEADLINE

    best = brute_force(instance)
    bounds = demand_bounds(instance)
    active = np.flatnonzero(bounds.placeable).astype(np.int64)
    units = milp.node_units(instance)
    a, v = np.nonzero(units.eligible[active])
    model = milp.build(instance, units, active, a.astype(np.int64), v.astype(np.int64),
                       value_stage=False, min_value=best.placed_value)
    result = milp.solve(model, NO_DEADLINE, 0.0)
    assert result.status.solved and result.objective is not None
    lost = float(bounds.unplaced_cost[~bounds.placeable].sum())
    assert abs(result.objective + lost - best.cost) <= 1e-6
    counts = milp.counts_of(model, result.x, instance.num_demands)
    assignment, _ = choose_devices(instance, counts)
    score = evaluate(instance, assignment)
    assert score.placed_value == best.placed_value
    assert abs(score.cost - best.cost) <= 1e-6
