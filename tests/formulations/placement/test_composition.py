"""Blox-style composition (D10): the placement stage through `solve()` equals the policy
followed by the stage, load-based admission defers jobs beyond the threshold and solves the
rest as a smaller snapshot, and the exact placer never fails when capacity exists."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.datasets.topologies import rack_cluster
from apportion.formulations.placement.admission import accepted_jobs, restrict_jobs
from apportion.formulations.placement.exact import place_exact
from apportion.formulations.placement.instance import Demand, PlacementInstance
from apportion.formulations.placement.stage import apply_placement
from apportion.solver.deadline import NO_DEADLINE
from apportion.solver.model import PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import MaxMinFairnessParameters
from apportion.solver.registry import lookup
from apportion.solver.result import JobStatus
from apportion.solver.solve import solve
from apportion.solver.stages import AdmissionMode, AdmissionParameters, PlacementParameters
from apportion.solver.validation import make_problem
from tests.formulations.placement.instances import small_topology


def racks_problem(sizes: list[int], arrival: list[float] | None = None) -> Problem:
    generated = rack_cluster(2, 2, 4, "gpu")
    m = len(sizes)
    problem = make_problem(["gpu"], [16], np.linspace(1.0, 2.0, m).reshape(m, 1), sizes)
    jobs = problem.jobs if arrival is None else replace(
        problem.jobs, arrival_time_s=np.asarray(arrival, float))
    return replace(problem, cluster=generated.cluster, jobs=jobs)


def test_stage_through_solve_equals_policy_then_stage() -> None:
    problem = racks_problem([4, 2, 2, 1, 1, 3, 8])
    stage = PlacementParameters()
    mmf = MaxMinFairnessParameters()
    options = SolveOptions(schedule_rounds=2)
    composed = solve(problem, PolicyRequest("weighted_max_min_fairness", mmf, placement=stage),
                     options)
    alone = solve(problem, PolicyRequest("weighted_max_min_fairness", mmf), options)
    spec = lookup("weighted_max_min_fairness")
    sequence = apply_placement(problem, alone, spec.capabilities, stage, options, NO_DEADLINE)
    assert np.array_equal(composed.time_share, alone.time_share)
    assert composed.placement is not None and sequence.placement is not None
    assert composed.placement.objective == sequence.placement.objective
    assert [[(g.job, g.devices_placed) for g in r.grants] for r in composed.shares.rounds] == \
        [[(g.job, g.devices_placed) for g in r.grants] for r in sequence.shares.rounds]


def test_load_based_admission_defers_the_overflow() -> None:
    problem = racks_problem([8, 8, 4, 2], arrival=[3.0, 0.0, 1.0, 2.0])
    params = AdmissionParameters(AdmissionMode.LOAD_BASED, 1.0)
    assert accepted_jobs(problem, params).tolist() == [1, 2, 3]  # 8 + 4 + 2 <= 16
    policy = PolicyRequest("weighted_max_min_fairness", MaxMinFairnessParameters(),
                           admission=params, placement=PlacementParameters())
    plan = solve(problem, policy)
    assert plan.job_status[0] is JobStatus.DEFERRED and "load-based" in plan.job_reason[0]
    assert plan.time_share[0].sum() == 0
    alone = solve(restrict_jobs(problem, np.array([1, 2, 3])),
                  PolicyRequest("weighted_max_min_fairness", MaxMinFairnessParameters()))
    assert np.allclose(plan.time_share[1:], alone.time_share)
    assert plan.placement is not None and plan.placement.jobs[0] is None
    wide = replace(params, load_threshold=2.0)
    assert accepted_jobs(problem, wide).tolist() == [0, 1, 2, 3]


@given(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4),
       demand=st.lists(st.integers(1, 6), min_size=1, max_size=4),
       busy=st.lists(st.integers(0, 15), max_size=4))
def test_exact_never_fails_when_capacity_exists(sizes: list[int], demand: list[int],
                                                busy: list[int]) -> None:
    """Unlike Blox's scattered placer (quirk 2): without span limits every demand is placed
    whenever the free devices add up."""
    topo = small_topology(sizes, [0] * len(sizes), False, [], [])
    occupied = np.zeros(topo.num_devices, dtype=bool)
    occupied[[d for d in busy if d < topo.num_devices]] = True
    demands = tuple(Demand((r,), 0, s) for r, s in enumerate(demand))
    instance = PlacementInstance(topo, demands, occupied=occupied)
    result = place_exact(instance)
    if sum(demand) <= int((~occupied).sum()):
        assert result.score.placed == len(demands)
