"""Every registered policy followed by the placement stage (and behind load-based admission)
on random small snapshots with nodes: `solve()` never raises, a plan with grants gets a
placement section whose placed jobs hold distinct devices of their granted type and count."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings

from apportion.datasets.topologies import rack_cluster
from apportion.solver.cluster_topology import topology_of
from apportion.solver.model import PolicyRequest, Problem, SolveOptions
from apportion.solver.registry import PolicySpec, policies
from apportion.solver.result import Termination
from apportion.solver.solve import solve
from apportion.solver.stages import AdmissionMode, AdmissionParameters, PlacementParameters
from tests.solver.test_solve_invariants import HAS_PLAN, problem_for, small_problems

POLICIES = [p for p in policies() if p.capabilities.placement_stage]


def with_nodes(problem: Problem) -> Problem:
    """The problem on one type of 2-device nodes (its other types dropped)."""
    count = int(problem.cluster.count[0])
    nodes = (count + 1) // 2
    generated = rack_cluster(1, nodes, 2, problem.cluster.type_names[0])
    cluster = generated.cluster
    thr = problem.jobs.throughput[:, :1]
    jobs = replace(problem.jobs, throughput=thr, scale_unit=problem.jobs.scale_unit[:, :1],
                   scale_factor=np.minimum(problem.jobs.scale_factor, nodes * 2))
    history = replace(problem.history, received_time_s=problem.history.received_time_s[:, :1])
    return replace(problem, cluster=cluster, jobs=jobs, history=history)


@pytest.mark.parametrize("spec", POLICIES, ids=[p.name for p in POLICIES])
@settings(max_examples=10)
@given(problem=small_problems())
def test_every_policy_with_placement(spec: PolicySpec, problem: Problem) -> None:
    problem = problem_for(spec, with_nodes(problem))
    policy = PolicyRequest(spec.name, spec.parameters_type(), placement=PlacementParameters(),
                           admission=AdmissionParameters(AdmissionMode.LOAD_BASED, 1.5))
    plan = solve(problem, policy, SolveOptions(schedule_rounds=2))
    assert plan.certificate.termination is not Termination.ERROR
    if plan.certificate.termination not in HAS_PLAN or plan.placement is None:
        return
    topo = topology_of(problem.cluster)
    used: list[int] = []
    for i, where in enumerate(plan.placement.jobs):
        if where is None or not where.placed:
            continue
        assert len(where.devices) == int(problem.jobs.scale_factor[i]) or \
            spec.capabilities.reads_configurations
        used.extend(where.devices)
        assert np.all(topo.device_healthy[list(where.devices)])
    assert len(used) == len(set(used)) or any(
        plan.placement.jobs[i] is not None for i, _, _, _ in plan.shares.colocated)
