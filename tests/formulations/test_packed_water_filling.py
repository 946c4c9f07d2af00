"""Water filling with space sharing (Gavel's `max_min_fairness_water_filling_packed`,
A2.4 over A2.2, docs/policies/gavel.md): every job's throughput against the independent per-round
route over per-pair variables (with tenants), the leximin certificate against an independent
per-pair cvxpy program, the round properties, reduction to the plain policies, and the wire
alias."""

from __future__ import annotations

from dataclasses import replace

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apportion.solver.model import (
    Compat,
    PolicyRequest,
    Problem,
    SolveOptions,
    Tenant,
    TenantSharing,
)
from apportion.solver.parameters import MaxMinFairnessParameters, WaterFillingParameters
from apportion.solver.result import Plan, Termination
from apportion.solver.solve import solve
from tests.formulations.reference_water_filling import dense_model, water_filling
from tests.formulations.test_space_sharing import check_decoded, instances, per_pair_throughput
from tests.formulations.test_water_filling import assert_same_u, check_rounds, with_tenants

TOL = 1e-6
PACKED = WaterFillingParameters(space_sharing=True)


def water_fill(problem: Problem, params: WaterFillingParameters = PACKED) -> Plan:
    plan = solve(problem, PolicyRequest("hierarchical_max_min_fairness", params, Compat.NONE),
                 SolveOptions())
    assert plan.certificate.termination is Termination.OPTIMAL, plan.certificate
    return plan


def level_scale(problem: Problem) -> np.ndarray:
    """s_i / (w_i prop_i), written out from A2.1."""
    thr = problem.jobs.throughput
    W = problem.cluster.count.astype(float)
    prop = (thr * W).sum(axis=1) / W.sum()
    return problem.jobs.scale_factor / (problem.jobs.priority_weight * prop)


def max_single_level(problem: Problem, i: int, levels: np.ndarray) -> float:
    """max l_i over the per-pair feasible set s.t. l_k >= levels_k for every k != i no better
    off than i (the leximin characterization, A2.4 test 2)."""
    rate, cons = per_pair_throughput(problem)
    scale = level_scale(problem)
    level = [scale[k] * rate[k] for k in range(len(rate))]
    for k in range(len(rate)):
        if k != i and levels[k] <= levels[i] * (1 + 1e-9):
            cons.append(level[k] >= levels[k] * (1 - 1e-10))
    # a vertex solver: with the others relaxed by only 1e-10 an interior-point answer's
    # tolerance would show as a spurious rise (exchange rates of 100:1 occur)
    return float(cp.Problem(cp.Maximize(level[i]), cons).solve(solver=cp.HIGHS))


@settings(max_examples=25)
@given(problem=instances())
def test_leximin_certificate_with_pairs(problem: Problem) -> None:
    plan = water_fill(problem)
    check_decoded(problem, plan)
    achieved = level_scale(problem) * plan.effective_throughput
    assert np.all(achieved >= plan.objective_value * (1 - 1e-6) - 1e-9)
    for i in range(problem.jobs.num_jobs):
        best = max_single_level(problem, i, plan.objective_value)
        assert best <= plan.objective_value[i] * (1 + TOL) + 1e-7, (i, best, plan.objective_value)


@given(problem=instances())
def test_first_level_is_packed_max_min(problem: Problem) -> None:
    wf = water_fill(problem)
    mmf = solve(problem, PolicyRequest("weighted_max_min_fairness",
                                       MaxMinFairnessParameters(space_sharing=True)))
    assert wf.certificate.objective is not None and mmf.certificate.objective is not None
    assert wf.certificate.objective == pytest.approx(mmf.certificate.objective, rel=TOL)
    assert wf.certificate.gap is not None and wf.certificate.gap <= TOL


@given(problem=instances())
def test_zero_pair_throughput_equals_plain_water_filling(problem: Problem) -> None:
    coloc = problem.colocations
    assert coloc is not None
    zero = replace(coloc, throughput_a=coloc.throughput_a * 0, throughput_b=coloc.throughput_b * 0)
    problem = replace(problem, colocations=zero)
    packed = water_fill(problem)
    plain = water_fill(problem, WaterFillingParameters())
    np.testing.assert_allclose(np.sort(packed.objective_value), np.sort(plain.objective_value),
                               rtol=1e-5, atol=1e-8)
    assert packed.shares.colocated == ()


@given(problem=instances(), data=st.data())
def test_tenants_with_pairs_equal_the_independent_route(problem: Problem,
                                                        data: st.DataObject) -> None:
    """Every job's normalized throughput equals A2.4's exact algorithm run by plain per-round
    LPs over A2.2's per-pair variables (no groups, no pruning), with tenants."""
    problem = with_tenants(problem, data.draw)
    plan = water_fill(problem)
    check_decoded(problem, plan)
    assert np.all(plan.objective_value >= 0)
    reference = water_filling(problem, dense_model(problem, pairs=True))
    assert_same_u(plan.normalized_throughput, reference.value)


@given(problem=instances(), data=st.data())
def test_rounds_with_pairs_start_at_max_min_and_never_lower_a_job(problem: Problem,
                                                                   data: st.DataObject) -> None:
    if data.draw(st.booleans()):
        problem = with_tenants(problem, data.draw)
    check_rounds(problem, PACKED)


@given(problem=instances())
def test_one_tenant_and_fifo_singletons_with_pairs(problem: Problem) -> None:
    """A2.4 tests 4 and 5 with space sharing."""
    m = problem.jobs.num_jobs
    plain = water_fill(problem).normalized_throughput
    one = replace(problem, jobs=replace(problem.jobs, tenant=("all",) * m),
                  tenants=(Tenant("all", 2.0),))
    assert_same_u(water_fill(one).normalized_throughput, plain)
    names = tuple(f"e{i}" for i in range(m))
    base = replace(problem, jobs=replace(problem.jobs, tenant=names))
    modes = [replace(base, tenants=tuple(Tenant(names[i], 1.0 + i % 2, mode) for i in range(m)))
             for mode in TenantSharing]
    assert_same_u(water_fill(modes[0]).normalized_throughput,
                  water_fill(modes[1]).normalized_throughput)


def test_wire_alias_shares_devices() -> None:
    from google.protobuf import json_format

    from apportion.server.pipeline import solve_request
    from apportion.v1 import allocation_service_pb2 as pb

    doc = {
        "snapshot": {
            "cluster": {"acceleratorTypes": [{"name": "v100", "count": 1}]},
            "jobs": [{"id": "a", "throughput": {"v100": 2.0}},
                     {"id": "b", "throughput": {"v100": 2.0}},
                     {"id": "c", "throughput": {"v100": 1.0}}],
            "colocations": [{"jobA": "a", "jobB": "b", "throughputA": {"v100": 1.6},
                             "throughputB": {"v100": 1.6}}],
        },
        "policy": {"name": "max_min_fairness_water_filling_packed"},
    }
    response = solve_request(json_format.ParseDict(doc, pb.SolveRequest()))
    assert response.stats.termination == pb.TERMINATION_REASON_OPTIMAL
    assert response.stats.policy == "hierarchical_max_min_fairness"
    assert len(response.plan.colocated) >= 1
