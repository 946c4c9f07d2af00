"""Churn (D6 tests 1-3, D0.6 test 7): no move cost gives the churn-free optimum, a huge one
keeps every running job that can stay, the number of moved jobs never grows with the move
cost, the single-device case equals the Hungarian assignment, and the round schedule keeps
jobs on their devices from round to round."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations.placement.churn import single_device_assignment
from apportion.formulations.placement.exact import place_exact
from apportion.formulations.placement.instance import Demand, PlacementInstance
from apportion.solver.result import Termination
from apportion.solver.stages import PlacementWeights
from tests.formulations.placement.instances import brute_force, instances, small_topology


def with_move(instance: PlacementInstance, move: float) -> PlacementInstance:
    return replace(instance, demands=tuple(replace(d, move_cost=move, resize_cost=move)
                                           for d in instance.demands))


@given(instance=instances(inner_weights=False))
def test_no_move_cost_is_the_churn_free_optimum(instance: PlacementInstance) -> None:
    free_of_history = replace(instance, demands=tuple(
        replace(d, previous=(), previous_nodes=()) for d in instance.demands))
    assert abs(place_exact(with_move(instance, 0.0)).score.cost
               - place_exact(free_of_history).score.cost) <= 1e-6


@given(instance=instances(inner_weights=False))
def test_a_huge_move_cost_keeps_every_job_that_can_stay(instance: PlacementInstance) -> None:
    heavy = with_move(instance, 1e4)
    result = place_exact(heavy)
    best = brute_force(heavy)
    assert result.score.placed_value == best.placed_value
    assert int(result.score.moved.sum() + result.score.preempted.sum()) == int(
        best.moved.sum() + best.preempted.sum())


@given(instance=instances(inner_weights=False), low=st.sampled_from([0.0, 0.3, 1.0]),
       high=st.sampled_from([2.0, 5.0, 50.0]))
def test_churn_never_grows_with_its_price(instance: PlacementInstance, low: float,
                                          high: float) -> None:
    """For F(x) - mu H(x), adding the optimality inequalities of mu1 < mu2 gives
    (mu2 - mu1)(H1 - H2) >= 0: more expensive moves, no more of them (at equal placed value)."""
    first, second = brute_force(with_move(instance, low)), brute_force(with_move(instance, high))
    if first.placed_value == second.placed_value:
        churn = lambda s: int(s.moved.sum() + s.preempted.sum())  # noqa: E731
        assert churn(first) >= churn(second)


@given(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3),
       moves=st.lists(st.sampled_from([0.5, 1.0, 3.0]), min_size=6, max_size=6),
       previous=st.lists(st.integers(-1, 11), min_size=6, max_size=6))
def test_single_devices_are_a_hungarian_assignment(sizes: list[int], moves: list[float],
                                                   previous: list[int]) -> None:
    topo = small_topology(sizes, [0] * len(sizes), False, [], [])
    count = min(topo.num_devices, 6)
    held: set[int] = set()
    demands = []
    for r in range(count):
        prev = previous[r] if 0 <= previous[r] < topo.num_devices and previous[r] not in held \
            else -1
        if prev >= 0:
            held.add(prev)
        demands.append(Demand((r,), 0, 1, previous=(prev,) if prev >= 0 else (),
                              move_cost=moves[r]))
    weights = PlacementWeights(crossing={}, free_domain={}, link_score=0.0,
                               throughput_by_span=0.0)
    instance = PlacementInstance(topo, tuple(demands), weights)
    _, hungarian = single_device_assignment(instance)
    result = place_exact(instance)
    assert result.termination is Termination.OPTIMAL
    assert abs(result.score.cost - hungarian) <= 1e-9


def test_rounds_keep_devices_across_rounds() -> None:
    """Max-min fairness, three rounds, placement stage: a job running in consecutive rounds
    keeps its devices (lease extension at device level)."""
    from apportion.datasets.topologies import rack_cluster
    from apportion.solver.model import PolicyRequest, SolveOptions
    from apportion.solver.parameters import MaxMinFairnessParameters
    from apportion.solver.solve import solve
    from apportion.solver.stages import PlacementParameters
    from apportion.solver.validation import make_problem

    generated = rack_cluster(2, 2, 4, "gpu")
    problem = make_problem(["gpu"], [16], np.ones((6, 1)), [4, 4, 4, 4, 4, 4])
    problem = replace(problem, cluster=generated.cluster)
    policy = PolicyRequest("weighted_max_min_fairness", MaxMinFairnessParameters(),
                           placement=PlacementParameters())
    plan = solve(problem, policy, SolveOptions(schedule_rounds=3))
    assert plan.placement is not None and len(plan.shares.rounds) == 3
    for before, after in zip(plan.shares.rounds, plan.shares.rounds[1:], strict=False):
        devices = {g.job: g.devices_placed for g in before.grants}
        for grant in after.grants:
            if grant.job in devices:
                assert grant.devices_placed == devices[grant.job]
                assert grant.lease_extended
