"""Space sharing for the Gavel LP family (A2.2, docs/policies/gavel.md): minimum
makespan, finish-time fairness and max-sum-throughput with pair variables, checked against
independent per-pair cvxpy programs (A2.2 verbatim: one variable per pair and type, no
pruning, no grouping), against the plain policies, and for decoded-plan feasibility."""

from __future__ import annotations

from dataclasses import replace

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.solver.model import Compat, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import (
    FinishTimeFairnessParameters,
    MaxSumThroughputParameters,
    MinMakespanParameters,
    ThroughputNormalization,
)
from apportion.solver.result import JobStatus, Plan, Termination
from apportion.solver.solve import solve
from tests.formulations.test_space_sharing import (
    check_decoded,
    instances,
    per_pair_throughput,
    typed_problem,
)

REL = 1e-6


def solved(problem: Problem, name: str, params: object) -> Plan:
    plan = solve(problem, PolicyRequest(name, params, Compat.NONE), SolveOptions())
    assert plan.certificate.termination is Termination.OPTIMAL, plan.certificate
    return plan


def value(plan: Plan) -> float:
    assert plan.certificate.objective is not None
    return plan.certificate.objective


def with_work(problem: Problem, remaining: np.ndarray, elapsed: np.ndarray | None = None,
              history_s: np.ndarray | None = None) -> Problem:
    """Total steps = remaining (nothing done); arrival = time - elapsed; C = history_s."""
    m = problem.jobs.num_jobs
    elapsed = np.zeros(m) if elapsed is None else elapsed
    jobs = replace(problem.jobs, total_steps=np.asarray(remaining, float),
                   steps_done=np.zeros(m), arrival_time_s=1000.0 - elapsed)
    history = replace(problem.history, cumulative_isolated_time_s=(
        np.zeros(m) if history_s is None else np.asarray(history_s, float)))
    return replace(problem, jobs=jobs, history=history, time_s=1000.0)


def reference_makespan(problem: Problem) -> float:
    R = problem.jobs.total_steps - problem.jobs.steps_done
    rate, cons = per_pair_throughput(problem)
    z = cp.Variable()
    cons += [rate[i] >= R[i] * z for i in range(R.size) if R[i] > 0]
    return 1.0 / float(cp.Problem(cp.Maximize(z), cons).solve(solver=cp.CLARABEL))


def reference_sum(problem: Problem, mult: np.ndarray) -> float:
    rate, cons = per_pair_throughput(problem)
    total = sum(mult[i] * rate[i] for i in range(len(rate)))
    return float(cp.Problem(cp.Maximize(total), cons).solve(solver=cp.CLARABEL))


def reference_ftf(problem: Problem, plan: Plan) -> float:
    """min rho s.t. t_i + R_i / thr_i <= rho D_i / w_i (the convex form of A2.5), with D_i
    taken from the plan's returned state (iso_i, C_i): an independent SOCP."""
    rate, cons = per_pair_throughput(problem)
    R = plan.shares.remaining_steps
    iso = plan.shares.isolated_throughput
    C = plan.shares.cumulative_isolated_time_s
    assert R is not None and iso is not None and C is not None
    t = problem.time_s - problem.jobs.arrival_time_s
    D = (C + R / iso) / problem.jobs.priority_weight  # weighted rho (A2.5, not compat)
    level = cp.Variable()
    cons += [t[i] + R[i] * cp.inv_pos(rate[i]) <= level * D[i] for i in range(R.size)]
    return float(cp.Problem(cp.Minimize(level), cons).solve(solver=cp.CLARABEL))


def remaining_for(problem: Problem, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.choice([100.0, 250.0, 1000.0], problem.jobs.num_jobs)


MAKESPAN = MinMakespanParameters(space_sharing=True)
FTF = FinishTimeFairnessParameters(space_sharing=True)


@given(problem=instances(), seed=st.integers(0, 1000))
def test_makespan_equals_per_pair_lp(problem: Problem, seed: int) -> None:
    problem = with_work(problem, remaining_for(problem, seed))
    plan = solved(problem, "min_makespan", MAKESPAN)
    assert value(plan) == pytest.approx(reference_makespan(problem), rel=1e-5)
    assert plan.certificate.gap is not None and plan.certificate.gap <= REL
    check_decoded(problem, plan)
    # the plan's own finish times attain the reported makespan
    finish = plan.objective_value
    assert float(np.max(finish)) == pytest.approx(value(plan), rel=1e-9)
    plain = solved(problem, "min_makespan", MinMakespanParameters())
    assert value(plan) <= value(plain) * (1 + REL)


@given(problem=instances(), seed=st.integers(0, 1000),
       normalize=st.sampled_from(list(ThroughputNormalization)))
def test_max_sum_throughput_equals_per_pair_lp(problem: Problem, seed: int,
                                               normalize: ThroughputNormalization) -> None:
    params = MaxSumThroughputParameters(normalize=normalize, space_sharing=True)
    plan = solved(problem, "max_sum_throughput", params)
    thr, W = problem.jobs.throughput, problem.cluster.count.astype(float)
    prop = (thr * W).sum(axis=1) / W.sum()
    proportional = normalize is ThroughputNormalization.PROPORTIONAL
    mult = 1.0 / prop if proportional else np.ones(thr.shape[0])
    assert value(plan) == pytest.approx(reference_sum(problem, mult), rel=1e-5, abs=1e-7)
    assert plan.certificate.gap is not None and plan.certificate.gap <= REL
    check_decoded(problem, plan)
    assert value(plan) == pytest.approx(float(mult @ plan.effective_throughput), rel=1e-9)
    plain = solved(problem, "max_sum_throughput", replace(params, space_sharing=False))
    assert value(plan) >= value(plain) * (1 - REL)


@given(problem=instances(), seed=st.integers(0, 1000))
def test_finish_time_fairness_equals_per_pair_socp(problem: Problem, seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = problem.jobs.num_jobs
    elapsed = rng.choice([0.0, 50.0, 400.0], m)  # different t_i / D_i: the bracket runs
    problem = with_work(problem, remaining_for(problem, seed), elapsed, elapsed * 0.5)
    plan = solved(problem, "themis_finish_time_fairness", FTF)
    assert value(plan) == pytest.approx(reference_ftf(problem, plan), rel=1e-5)
    assert plan.certificate.gap is not None and plan.certificate.gap <= REL
    check_decoded(problem, plan)
    assert float(np.max(plan.objective_value)) == pytest.approx(value(plan), rel=1e-9)
    plain = solved(problem, "themis_finish_time_fairness", FinishTimeFairnessParameters())
    assert value(plan) <= value(plain) * (1 + REL)


@given(problem=instances(), seed=st.integers(0, 1000))
def test_zero_pair_throughput_equals_the_plain_policies(problem: Problem, seed: int) -> None:
    """A2.2 test 3 for each family: pairs that add nothing change nothing."""
    coloc = problem.colocations
    assert coloc is not None
    zero = replace(coloc, throughput_a=coloc.throughput_a * 0, throughput_b=coloc.throughput_b * 0)
    problem = with_work(replace(problem, colocations=zero), remaining_for(problem, seed))
    for name, params in (("min_makespan", MAKESPAN), ("themis_finish_time_fairness", FTF),
                         ("max_sum_throughput", MaxSumThroughputParameters(space_sharing=True))):
        plan = solved(problem, name, params)
        plain = solved(problem, name, replace(params, space_sharing=False))
        assert value(plan) == pytest.approx(value(plain), rel=1e-6), name
        assert plan.shares.colocated == ()


@given(copies=st.lists(st.integers(1, 3), min_size=1, max_size=3), seed=st.integers(0, 10**6))
def test_job_type_pairs_equal_explicit_pairs(copies: list[int], seed: int) -> None:
    """A2.3 test 2 for makespan and FTF: with identical jobs inside each type, the group
    formulation over type pairs equals the per-pair one."""
    typed, explicit = typed_problem(copies, seed)
    remaining = np.full(typed.jobs.num_jobs, 500.0)
    typed, explicit = with_work(typed, remaining), with_work(explicit, remaining)
    for name, params in (("min_makespan", MAKESPAN), ("themis_finish_time_fairness", FTF)):
        a = solved(typed, name, params)
        b = solved(explicit, name, params)
        assert value(a) == pytest.approx(value(b), rel=1e-6), name
        check_decoded(explicit, a)
    assert value(solved(typed, "min_makespan", MAKESPAN)) == pytest.approx(
        reference_makespan(explicit), rel=1e-5)


def test_finished_jobs_get_nothing_and_stay_out_of_the_objective() -> None:
    problem = next_problem()
    remaining = np.array([0.0, 300.0, 300.0, 0.0])
    problem = with_work(problem, remaining)
    for name, params in (("min_makespan", MAKESPAN), ("themis_finish_time_fairness", FTF)):
        plan = solved(problem, name, params)
        assert plan.job_status[0] is JobStatus.FINISHED and plan.job_status[3] is JobStatus.FINISHED
        assert np.all(plan.time_share[[0, 3]] == 0)
        assert all(a not in (0, 3) and b not in (0, 3) for a, b, _, _ in plan.shares.colocated)
    done = with_work(problem, np.zeros(4))
    plan = solved(done, "min_makespan", MAKESPAN)
    assert value(plan) == 0.0


def next_problem() -> Problem:
    """4 jobs on 2 devices of one type; jobs 1 and 2 gain from sharing (0.8 + 0.8 > 1)."""
    from apportion.solver.model import Colocations
    from apportion.solver.validation import make_problem

    problem = make_problem(["v100"], [2], [[1.0], [2.0], [2.0], [1.0]])
    return replace(problem, colocations=Colocations(
        job_a=np.array([1, 0]), job_b=np.array([2, 3]),
        throughput_a=np.array([[1.6], [0.8]]), throughput_b=np.array([[1.6], [0.8]])))


def test_sharing_shortens_the_makespan_by_the_closed_form() -> None:
    """Two equal jobs on one device, pair rate 0.8 each: alone the makespan is 2R/T (time
    slicing), paired R/(0.8 T); the LP picks the pair."""
    from apportion.solver.model import Colocations
    from apportion.solver.validation import make_problem

    problem = make_problem(["v100"], [1], [[2.0], [2.0]])
    problem = replace(problem, colocations=Colocations(
        job_a=np.array([0]), job_b=np.array([1]), throughput_a=np.array([[1.6]]),
        throughput_b=np.array([[1.6]])))
    problem = with_work(problem, np.array([160.0, 160.0]))
    plan = solved(problem, "min_makespan", MAKESPAN)
    assert value(plan) == pytest.approx(100.0, rel=1e-7)  # 160 / 1.6
    assert value(solved(problem, "min_makespan", MinMakespanParameters())) == pytest.approx(160.0)
    assert len(plan.shares.colocated) == 1 and plan.shares.colocated[0][3] == pytest.approx(1.0)


@given(copies=st.lists(st.integers(1, 4), min_size=1, max_size=3), seed=st.integers(0, 10**6))
def test_type_pairs_between_distinct_jobs_equal_explicit_pairs(copies: list[int],
                                                               seed: int) -> None:
    """Jobs of one type with different remaining work (and weights) are groups of one: the
    partner-class cells (V[g, c, j], balance rows, the same-type half rule) carry the type
    pairs per job, and the decoded pairs must reach the per-pair optimum (module docstring of
    space_sharing: aggregation and decoding preserve every job's throughput)."""
    typed, explicit = typed_problem(copies, seed)
    rng = np.random.default_rng(seed)
    m = typed.jobs.num_jobs
    remaining = rng.choice([100.0, 250.0, 1000.0], m)
    elapsed = rng.choice([0.0, 50.0, 400.0], m)
    weight = rng.choice([1.0, 2.0], m)
    typed, explicit = (with_work(replace(p, jobs=replace(p.jobs, priority_weight=weight)),
                                 remaining, elapsed, elapsed * 0.5) for p in (typed, explicit))
    a = solved(typed, "min_makespan", MAKESPAN)
    assert value(a) == pytest.approx(reference_makespan(explicit), rel=1e-5)
    check_decoded(explicit, a)
    b = solved(typed, "themis_finish_time_fairness", FTF)
    assert value(b) == pytest.approx(reference_ftf(explicit, b), rel=1e-5)
    check_decoded(explicit, b)
    params = MaxSumThroughputParameters(ThroughputNormalization.PROPORTIONAL, space_sharing=True)
    c = solved(typed, "max_sum_throughput", params)
    d = solved(explicit, "max_sum_throughput", params)
    assert value(c) == pytest.approx(value(d), rel=1e-6)
    check_decoded(explicit, c)


def test_wire_aliases_share_devices() -> None:
    """Gavel's `_packed` names through the wire format: pairs come back in Plan.colocated."""
    from google.protobuf import json_format

    from apportion.server.pipeline import solve_request
    from apportion.v1 import allocation_service_pb2 as pb

    doc = {
        "snapshot": {
            "timeS": 100.0,
            "cluster": {"acceleratorTypes": [{"name": "v100", "count": 1}]},
            "jobs": [{"id": "a", "throughput": {"v100": 2.0}, "progress": {"totalSteps": 160}},
                     {"id": "b", "throughput": {"v100": 2.0}, "progress": {"totalSteps": 160}}],
            "colocations": [{"jobA": "a", "jobB": "b", "throughputA": {"v100": 1.6},
                             "throughputB": {"v100": 1.6}}],
        },
        "policy": {"name": ""},
    }
    for name, policy in (("min_total_duration_packed", "min_makespan"),
                         ("finish_time_fairness_packed", "themis_finish_time_fairness")):
        doc["policy"] = {"name": name}
        response = solve_request(json_format.ParseDict(doc, pb.SolveRequest()))
        assert response.stats.termination == pb.TERMINATION_REASON_OPTIMAL, name
        assert response.stats.policy == policy
        assert len(response.plan.colocated) == 1
    doc["policy"] = {"name": "max_sum_throughput", "maxSumThroughput": {"spaceSharing": True}}
    response = solve_request(json_format.ParseDict(doc, pb.SolveRequest()))
    assert len(response.plan.colocated) == 1
