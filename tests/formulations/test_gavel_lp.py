"""Property tests for Gavel's LP family (A2.5-A2.8, docs/policies/gavel.md): max-sum-throughput,
cost-normalized throughput with SLOs, minimum makespan and finish-time fairness.

Each optimum is confirmed by an independent route: the plain cvxpy formulations of
`reference_gavel` (finish-time fairness with `inv_pos` per job, as Gavel writes it), closed
forms (A2.6 2, A2.8 2), the proven certificate (bound within the gap), and for finish-time
fairness infeasibility of the feasibility LP at rho*(1 - 1e-6) with scipy's HiGHS. Metamorphic
relations are those the document proves.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

import apportion
from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.errors import ValidationError
from apportion.solver.model import (
    Compat,
    PolicyRequest,
    Problem,
    SolveOptions,
    SolverPreference,
)
from apportion.solver.parameters import (
    CostThroughputParameters,
    FinishTimeFairnessParameters,
    MaxSumThroughputParameters,
    MinMakespanParameters,
    ThroughputNormalization,
)
from apportion.solver.result import JobStatus, Plan, Termination
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem
from apportion.testing import check_plan, snapshots
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1.allocation_service_pb2 import SolveRequest

from .reference_gavel import (
    Inst,
    cost_lexicographic,
    ftf_inv_pos,
    ftf_level_feasible,
    isolated,
    makespan,
    max_sum,
)

Array = NDArray[np.float64]
FEAS = 1e-7
REL = 2e-6
"""Agreement with the cvxpy reference (Clarabel's own tolerance is ~1e-8 relative)."""


# --------------------------------------------------------------------------------------------
# instances


def gavel_snapshots(max_jobs: int = 6, max_types: int = 3) -> st.SearchStrategy[SolveRequest]:
    """`apportion.testing.snapshots` for the Gavel LPs: small clusters (capacity often binds),
    throughputs from a few values (ties and zeros), remaining work, ages and finish-time
    state."""
    return snapshots(
        "themis_finish_time_fairness",
        jobs=st.integers(1, max_jobs),
        types=st.integers(1, max_types),
        count=st.integers(1, 5),
        throughput=st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5, 8.0]),
        scale_factor=st.sampled_from([1, 1, 2]),
        priority_weight=st.sampled_from([1.0, 1.0, 2.0]),
        remaining_steps=st.sampled_from([100.0, 250.0, 1000.0, 4000.0]),
        age=st.sampled_from([0.0, 10.0, 100.0, 500.0]),
        nodes=False,
        full_gangs=False,
    )


def problems(max_jobs: int = 6, max_types: int = 3) -> st.SearchStrategy[Problem]:
    """`gavel_snapshots` validated into the solver's model."""
    return gavel_snapshots(max_jobs, max_types).map(lambda r: request_to_model(r)[0])


def inst_of(prob: Problem, weights: bool = True) -> Inst:
    j = prob.jobs
    return Inst(
        T=j.throughput,
        s=j.scale_factor.astype(float),
        W=prob.cluster.count.astype(float),
        R=j.remaining_steps,
        t=prob.time_s - j.arrival_time_s,
        C=prob.history.cumulative_isolated_time_s,
        w=j.priority_weight if weights else np.ones(j.num_jobs),
    )


def check_feasible(prob: Problem, plan: Plan) -> None:
    """B1-B4 and the recomputed effective throughput."""
    X = plan.time_share
    s = prob.jobs.scale_factor.astype(float)
    W = prob.cluster.count.astype(float)
    assert np.all(X >= 0) and np.all(X <= 1)
    assert np.all(X.sum(axis=1) <= 1 + FEAS)
    assert np.all(s @ X <= W + FEAS)
    assert np.all(X[~prob.usable] == 0)
    thr = np.einsum("ij,ij->i", prob.jobs.throughput, X)
    np.testing.assert_allclose(plan.effective_throughput, thr, rtol=1e-12, atol=1e-12)


def check_certificate(plan: Plan) -> None:
    cert = plan.certificate
    assert cert.termination is Termination.OPTIMAL, cert
    assert cert.objective is not None and cert.bound is not None
    gap = cert.gap
    assert gap is not None and gap <= 1e-6
    # the bound is on the right side of the objective (up to rounding)
    scale = max(abs(cert.objective), 1e-12)
    if cert.maximize:
        assert cert.bound >= cert.objective - 1e-9 * scale
    else:
        assert cert.bound <= cert.objective + 1e-9 * scale


def run(
    prob: Problem,
    name: str,
    params: object,
    compat: Compat = Compat.NONE,
    solver: SolverPreference = SolverPreference.AUTO,
) -> Plan:
    return solve(
        prob,
        PolicyRequest(name=name, parameters=params, compat=compat),
        SolveOptions(solver=solver),
    )


# --------------------------------------------------------------------------------------------
# max-sum-throughput (A2.6)


@given(gavel_snapshots(), st.sampled_from(["max_sum_throughput", "cost_normalized_throughput",
                                           "max_sum_throughput_normalized_by_cost_perf_SLOs",
                                           "min_makespan", "themis_finish_time_fairness"]))
def test_every_family_member_passes_check_plan_on_the_wire(request: SolveRequest,
                                                           name: str) -> None:
    """The same snapshots through the Python API: `check_plan` recomputes each objective
    (A2.5-A2.8) from the response and checks feasibility and the certificate."""
    solution = apportion.solve(request, name)
    report = check_plan(solution.request, solution)
    assert report.termination == "optimal"
    assert report.recomputed_objective is not None


@given(problems(), st.sampled_from(list(ThroughputNormalization)))
def test_max_sum_matches_reference_and_certificate(
    prob: Problem, norm: ThroughputNormalization
) -> None:
    plan = run(prob, "max_sum_throughput", MaxSumThroughputParameters(normalize=norm))
    check_feasible(prob, plan)
    check_certificate(plan)
    T = prob.jobs.throughput
    mult = np.ones(prob.jobs.num_jobs)
    if norm is ThroughputNormalization.PROPORTIONAL:
        W = prob.cluster.count.astype(float)
        mult = 1.0 / (T @ W / W.sum())
    recomputed = float(np.sum(mult * plan.effective_throughput))
    assert plan.certificate.objective == pytest.approx(recomputed, rel=1e-9)
    assert recomputed == pytest.approx(max_sum(inst_of(prob), mult), rel=REL, abs=1e-7)
    # upper bounds A2.6 3
    assert recomputed <= float(np.sum(mult * T.max(axis=1))) * (1 + 1e-9)
    # A2.6 dual, checked here: s_i pi_j + sigma_i >= c_ij on usable cells, pi, sigma >= 0,
    # and W @ pi + sum sigma equals the optimum (strong duality)
    pi, sigma = plan.accelerator_prices, plan.job_dual
    assert np.all(pi >= 0) and np.all(sigma >= 0)
    c = mult[:, None] * T
    slack = prob.jobs.scale_factor[:, None] * pi[None, :] + sigma[:, None] - c
    assert np.all(slack[prob.usable] >= -1e-7 * max(1.0, float(c.max())))
    W = prob.cluster.count.astype(float)
    assert float(W @ pi + sigma.sum()) == pytest.approx(recomputed, rel=1e-7, abs=1e-9)


def duplicated(prob: Problem, copies: list[int]) -> Problem:
    """`prob` with job i repeated copies[i] times (ids made unique)."""
    index = np.repeat(np.arange(prob.jobs.num_jobs), copies)
    jobs = prob.jobs
    ids = tuple(f"{jobs.ids[i]}-{k}" for k, i in enumerate(index))
    return replace(prob, jobs=replace(jobs.take(index), ids=ids),
                   history=prob.history.take(index))


@given(problems(max_jobs=4), st.lists(st.integers(1, 4), min_size=4, max_size=4),
       st.sampled_from(["max_sum_throughput", "cost_normalized_throughput"]))
def test_interchangeable_jobs_match_the_per_job_reference(
    prob: Problem, copies: list[int], name: str
) -> None:
    """Many copies of a few jobs (the LP is solved per class of interchangeable jobs): the
    optimum equals the per-job reference, the job duals certify the per-job LP, and copies of
    one job get the same time shares."""
    prob = duplicated(prob, copies[: prob.jobs.num_jobs])
    params = (MaxSumThroughputParameters() if name == "max_sum_throughput"
              else CostThroughputParameters())
    plan = run(prob, name, params)
    check_feasible(prob, plan)
    check_certificate(plan)
    T = prob.jobs.throughput
    cost = prob.cluster.cost_per_hour
    weight = np.ones_like(cost) if name == "max_sum_throughput" else 1.0 / cost
    value = float(np.sum(T * plan.time_share * weight[None, :]))
    reference = max_sum(replace(inst_of(prob), T=T * weight[None, :]))
    assert value == pytest.approx(reference, rel=REL, abs=1e-7)
    pi, sigma = plan.accelerator_prices, plan.job_dual
    slack = prob.jobs.scale_factor[:, None] * pi[None, :] + sigma[:, None] - T * weight
    assert np.all(slack[prob.usable] >= -1e-7 * max(1.0, float(T.max())))
    key = np.column_stack([T, prob.jobs.scale_factor])
    for i in range(prob.jobs.num_jobs):
        same = np.all(key == key[i], axis=1)
        assert np.abs(plan.time_share[same] - plan.time_share[i]).max() <= 1e-12


@given(problems())
def test_max_sum_solvers_agree(prob: Problem) -> None:
    a = run(prob, "max_sum_throughput", MaxSumThroughputParameters(), solver=SolverPreference.HIGHS)
    b = run(
        prob, "max_sum_throughput", MaxSumThroughputParameters(), solver=SolverPreference.CLARABEL
    )
    check_certificate(b)
    assert a.certificate.objective == pytest.approx(b.certificate.objective, rel=REL)


@given(
    st.lists(
        st.tuples(st.sampled_from([0.5, 1.0, 3.0, 7.0]), st.sampled_from([1, 2, 4])),
        min_size=1,
        max_size=8,
    ),
    st.integers(4, 12),
)
def test_max_sum_single_type_is_fractional_knapsack(jobs: list[tuple[float, int]], W: int) -> None:
    T = np.array([[t] for t, _ in jobs])
    s = [sf for _, sf in jobs]
    plan = run(
        make_problem(["a"], [W], T, scale_factor=s),
        "max_sum_throughput",
        MaxSumThroughputParameters(),
    )
    left, expected = float(W), 0.0
    for i in sorted(range(len(jobs)), key=lambda i: -jobs[i][0] / jobs[i][1]):
        x = min(1.0, left / s[i])
        expected += x * jobs[i][0]
        left -= x * s[i]
    assert plan.certificate.objective == pytest.approx(expected, rel=1e-9)


@given(problems(), st.integers(0, 2), st.sampled_from([2, 4]))
def test_max_sum_metamorphic(prob: Problem, j: int, beta: int) -> None:
    base = run(prob, "max_sum_throughput", MaxSumThroughputParameters()).certificate.objective
    assert base is not None
    n = prob.cluster.num_types
    more = prob.cluster.count.copy()
    more[j % n] += 1
    bigger = replace(prob, cluster=replace(prob.cluster, count=more))
    grown = run(bigger, "max_sum_throughput", MaxSumThroughputParameters()).certificate.objective
    assert grown is not None and grown >= base * (1 - 1e-9)
    scaled = replace(
        prob,
        cluster=replace(prob.cluster, count=prob.cluster.count * beta),
        jobs=replace(prob.jobs, scale_factor=prob.jobs.scale_factor * beta),
    )
    same = run(scaled, "max_sum_throughput", MaxSumThroughputParameters()).certificate.objective
    assert same == pytest.approx(base, rel=1e-9)


# --------------------------------------------------------------------------------------------
# cost-normalized throughput with SLOs (A2.7)


def with_deadlines(prob: Problem, slo: list[float]) -> Problem:
    m = prob.jobs.num_jobs
    deadline = np.array([prob.time_s + slo[i % len(slo)] for i in range(m)])
    return replace(prob, jobs=replace(prob.jobs, deadline_s=deadline))


@given(
    problems(),
    st.lists(st.sampled_from([0.5, 1.0, 2.0, 4.0]), min_size=3, max_size=3),
    st.booleans(),
)
def test_cost_with_slos_matches_lexicographic_reference(
    prob: Problem, cost: list[float], slos: bool
) -> None:
    n = prob.cluster.num_types
    c = np.array(cost[:n])
    prob = replace(prob, cluster=replace(prob.cluster, cost_per_hour=c))
    prob = with_deadlines(prob, [50.0, 400.0, 3000.0])
    plan = run(prob, "cost_normalized_throughput", CostThroughputParameters(use_slos=slos))
    check_feasible(prob, plan)
    check_certificate(plan)
    inst = inst_of(prob)
    q = inst.R / (prob.jobs.deadline_s - prob.time_s) if slos else None
    short, value = cost_lexicographic(inst, c, q)
    assert plan.certificate.objective == pytest.approx(value, rel=1e-5, abs=1e-7)
    if slos:
        assert plan.shares.slo_shortfall is not None and q is not None
        e = np.clip(1 - plan.effective_throughput / q, 0, 1)
        np.testing.assert_allclose(plan.shares.slo_shortfall, e, atol=1e-9)
        assert float(e.sum()) == pytest.approx(short, abs=1e-6)
        for i in range(prob.jobs.num_jobs):  # unmet SLOs are reported
            assert (plan.job_reason[i] != "") == (e[i] > 1e-6)
    else:
        assert plan.shares.slo_shortfall is None


@given(problems(), st.sampled_from([0.25, 3.0, 100.0]))
def test_cost_one_is_max_sum_and_cost_scaling(prob: Problem, beta: float) -> None:
    plain = run(prob, "max_sum_throughput", MaxSumThroughputParameters()).certificate.objective
    unit = run(prob, "cost_normalized_throughput", CostThroughputParameters())
    assert unit.certificate.objective == pytest.approx(plain, rel=1e-7)
    n = prob.cluster.num_types
    scaled = replace(prob, cluster=replace(prob.cluster, cost_per_hour=np.full(n, beta)))
    value = run(scaled, "cost_normalized_throughput", CostThroughputParameters())
    assert value.certificate.objective == pytest.approx(plain / beta, rel=1e-7)


@given(problems())
def test_hard_feasible_slos_have_zero_shortfall(prob: Problem) -> None:
    """Deadlines that X^iso (blocked cells zeroed, a feasible plan) meets: stage 1 is 0
    (A2.7 5), and no SLO is reported."""
    inst = inst_of(prob)
    share = (inst.W[None, :] / len(inst.R)) / inst.s[:, None]
    share = np.where(prob.usable, share / np.maximum(1, share.sum(axis=1, keepdims=True)), 0)
    thr = (inst.T * share).sum(axis=1)
    slo = (inst.R / thr * 1.01).tolist()
    prob = replace(prob, jobs=replace(prob.jobs, deadline_s=prob.time_s + np.array(slo)))
    plan = run(prob, "cost_normalized_throughput", CostThroughputParameters(use_slos=True))
    assert plan.shares.slo_shortfall is not None
    assert float(plan.shares.slo_shortfall.sum()) <= 1e-6
    assert all(r == "" for r in plan.job_reason)


def test_infeasible_slos_are_reported_and_compat_drops_them() -> None:
    prob = make_problem(["a"], [1], [[1.0], [1.0]])
    prob = replace(
        prob,
        time_s=0.0,
        jobs=replace(
            prob.jobs, total_steps=np.array([100.0, 100.0]), deadline_s=np.array([150.0, 150.0])
        ),
    )
    plan = run(prob, "cost_normalized_throughput", CostThroughputParameters(use_slos=True))
    check_certificate(plan)
    assert plan.shares.slo_shortfall is not None
    # each needs 2/3 of the one device: e_i = 1 - 1.5 thr_i, thr_0 + thr_1 <= 1, sum e = 1/2
    assert float(plan.shares.slo_shortfall.sum()) == pytest.approx(0.5, abs=1e-7)
    assert any("cannot be met" in r for r in plan.job_reason)
    gavel = run(
        prob,
        "cost_normalized_throughput",
        CostThroughputParameters(use_slos=True),
        compat=Compat.GAVEL,
    )
    assert "dropped" in gavel.certificate.formulation
    assert gavel.certificate.objective == pytest.approx(1.0, rel=1e-9)


def test_zero_cost_type_is_used_first() -> None:
    """A free type: its throughput is maximized first, then the priced objective."""
    prob = make_problem(["free", "paid"], [1, 1], [[1.0, 4.0], [2.0, 1.0]])
    prob = replace(prob, cluster=replace(prob.cluster, cost_per_hour=np.array([0.0, 2.0])))
    plan = run(prob, "cost_normalized_throughput", CostThroughputParameters())
    check_feasible(prob, plan)
    check_certificate(plan)
    assert plan.time_share[1, 0] == pytest.approx(1.0)  # job 1 is the best user of the free type
    assert plan.time_share[0, 1] == pytest.approx(1.0)
    assert plan.certificate.objective == pytest.approx(4.0 / 2.0)


def test_missed_slo_allowed_is_reported() -> None:
    prob = make_problem(["a"], [2], [[1.0], [1.0]])
    prob = replace(
        prob,
        time_s=100.0,
        jobs=replace(
            prob.jobs, total_steps=np.array([10.0, 10.0]), deadline_s=np.array([50.0, np.nan])
        ),
    )
    plan = run(
        prob,
        "cost_normalized_throughput",
        CostThroughputParameters(use_slos=True, allow_missed_slos=True),
    )
    assert plan.shares.slo_shortfall is not None
    assert plan.shares.slo_shortfall[0] == 1.0 and math.isnan(plan.shares.slo_shortfall[1])
    assert "missed" in plan.job_reason[0] and plan.job_reason[1] == ""


# --------------------------------------------------------------------------------------------
# min makespan (A2.8)


@given(problems(), st.sampled_from([SolverPreference.AUTO, SolverPreference.HIGHS]))
def test_makespan_matches_reference_and_bounds(prob: Problem, solver: SolverPreference) -> None:
    plan = run(prob, "min_makespan", MinMakespanParameters(), solver=solver)
    check_feasible(prob, plan)
    check_certificate(plan)
    R = prob.jobs.remaining_steps
    recomputed = float(np.max(R / plan.effective_throughput))
    assert plan.certificate.objective == pytest.approx(recomputed, rel=1e-12)
    assert recomputed == pytest.approx(makespan(inst_of(prob)), rel=REL)
    # A2.8 3: lower bounds
    T = np.where(prob.usable, prob.jobs.throughput, 0.0)
    assert recomputed >= float(np.max(R / T.max(axis=1))) * (1 - 1e-9)
    work = float(np.sum(prob.jobs.scale_factor * R / T.max(axis=1)))
    assert recomputed >= work / float(prob.cluster.count.sum()) * (1 - 1e-9)
    # A2.8 dual, checked here from the returned multipliers (y per job, pi per type):
    # sigma_i = max(0, max_j y_i T[i,j] - s_i pi_j) makes them dual feasible, and with
    # z <= z_cap = min_i max_j T[i,j]/R_i the dual value bounds z*, so 1/value <= M*
    y, pi = plan.job_dual, plan.accelerator_prices
    assert np.all(y >= 0) and np.all(pi >= 0)
    red = y[:, None] * T - prob.jobs.scale_factor[:, None] * pi[None, :]
    sigma = np.maximum(0.0, np.where(prob.usable, red, 0.0).max(axis=1))
    z_cap = float(np.min(T.max(axis=1) / R))
    dual = float(prob.cluster.count @ pi + sigma.sum() + max(0.0, 1 - float(y @ R)) * z_cap)
    assert 1 / dual <= recomputed * (1 + 1e-9)
    assert 1 / dual == pytest.approx(recomputed, rel=1e-6)


@given(problems(), st.sampled_from([0.5, 3.0]), st.integers(0, 2))
def test_makespan_metamorphic(prob: Problem, alpha: float, j: int) -> None:
    base = run(prob, "min_makespan", MinMakespanParameters()).certificate.objective
    assert base is not None
    scaled = replace(prob, jobs=replace(prob.jobs, total_steps=prob.jobs.total_steps * alpha,
                                        steps_done=prob.jobs.steps_done * alpha))  # R -> alpha R
    value = run(scaled, "min_makespan", MinMakespanParameters()).certificate.objective
    assert value == pytest.approx(alpha * base, rel=1e-7)
    more = prob.cluster.count.copy()
    more[j % prob.cluster.num_types] += 2
    bigger = replace(prob, cluster=replace(prob.cluster, count=more))
    grown = run(bigger, "min_makespan", MinMakespanParameters()).certificate.objective
    assert grown is not None and grown <= base * (1 + 1e-7)
    # one job's unit of work changes: nothing changes
    T = prob.jobs.throughput.copy()
    T[0] *= 7.0
    total, done = prob.jobs.total_steps.copy(), prob.jobs.steps_done.copy()
    total[0] *= 7.0
    done[0] *= 7.0
    unit = replace(prob, jobs=replace(prob.jobs, throughput=T, total_steps=total,
                                      steps_done=done))
    same = run(unit, "min_makespan", MinMakespanParameters()).certificate.objective
    assert same == pytest.approx(base, rel=1e-7)


@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.5, 1.0, 3.0]),
            st.sampled_from([1, 2]),
            st.sampled_from([10.0, 100.0, 700.0]),
        ),
        min_size=1,
        max_size=8,
    ),
    st.integers(2, 6),
)
def test_makespan_single_type_closed_form(jobs: list[tuple[float, int, float]], W: int) -> None:
    T = np.array([[t] for t, _, _ in jobs])
    prob = make_problem(["a"], [W], T, scale_factor=[s for _, s, _ in jobs])
    R = np.array([r for _, _, r in jobs])
    prob = replace(prob, jobs=replace(prob.jobs, total_steps=R))
    z = min(float(np.min(T[:, 0] / R)), W / float(np.sum(prob.jobs.scale_factor * R / T[:, 0])))
    plan = run(prob, "min_makespan", MinMakespanParameters())
    assert plan.certificate.objective == pytest.approx(1 / z, rel=1e-7)


def test_makespan_finished_jobs() -> None:
    prob = make_problem(["a", "b"], [1, 1], [[1.0, 2.0], [1.0, 1.0], [3.0, 0.0]])
    prob = replace(
        prob,
        jobs=replace(
            prob.jobs,
            total_steps=np.array([100.0, 50.0, 40.0]),
            steps_done=np.array([100.0, 0.0, 40.0]),
        ),
    )
    plan = run(prob, "min_makespan", MinMakespanParameters())
    assert plan.job_status == (JobStatus.FINISHED, JobStatus.ALLOCATED, JobStatus.FINISHED)
    assert np.all(plan.time_share[[0, 2]] == 0)
    assert plan.certificate.objective == pytest.approx(50.0)  # job 1 alone, one type at a time
    done = replace(prob, jobs=replace(prob.jobs, steps_done=prob.jobs.total_steps))
    empty = run(done, "min_makespan", MinMakespanParameters())
    assert empty.certificate.termination is Termination.OPTIMAL
    assert empty.certificate.objective == 0.0


# --------------------------------------------------------------------------------------------
# finish-time fairness (A2.5)


@given(problems(max_jobs=5), st.booleans())
def test_ftf_matches_inv_pos_reference_and_certificate(prob: Problem, gavel: bool) -> None:
    compat = Compat.GAVEL if gavel else Compat.NONE
    if gavel:  # compat keeps cells with s_i > W[j]; keep the reference comparable
        prob = replace(
            prob, jobs=replace(prob.jobs, scale_factor=np.ones(prob.jobs.num_jobs, np.int64))
        )
    plan = run(prob, "themis_finish_time_fairness", FinishTimeFairnessParameters(), compat)
    check_feasible(prob, plan)
    check_certificate(plan)
    inst = inst_of(prob, weights=not gavel)
    rho_star = plan.certificate.objective
    assert rho_star is not None
    iso = isolated(inst)
    D = (inst.C + inst.R / iso) / inst.w
    per_job = (inst.t + inst.R / plan.effective_throughput) / D
    np.testing.assert_allclose(plan.objective_value, per_job, rtol=1e-9)
    assert rho_star == pytest.approx(float(per_job.max()), rel=1e-12)
    assert rho_star == pytest.approx(ftf_inv_pos(inst), rel=1e-5)
    # the min-max certificate: infeasible just below, feasible at rho*
    assert not ftf_level_feasible(inst, rho_star * (1 - 1e-6))
    assert ftf_level_feasible(inst, rho_star * (1 + 1e-6))
    # A2.5 4 and 3 (X^iso with blocked cells zeroed is feasible)
    T = np.where(prob.usable, inst.T, 0.0)
    assert rho_star >= float(np.max((inst.t + inst.R / T.max(axis=1)) / D)) * (1 - 1e-9)
    share = (inst.W[None, :] / len(inst.R)) / inst.s[:, None]
    share = np.where(prob.usable, share / np.maximum(1, share.sum(axis=1, keepdims=True)), 0)
    assert rho_star <= float(np.max((inst.t + inst.R / (T * share).sum(axis=1)) / D)) * (1 + 1e-9)
    # the state comes back
    assert plan.shares.isolated_throughput is not None
    assert plan.shares.cumulative_isolated_time_s is not None
    np.testing.assert_allclose(plan.shares.isolated_throughput, iso, rtol=1e-12)


def test_ftf_bracket_closes_when_the_proof_lies_above_the_level() -> None:
    """Regression: the dual of a z-LP at an infeasible level proves infeasibility up to a
    root *above* that level; the lower bound used to stop at the level itself, so the bracket
    closed by 5% a step and ended OPTIMAL_INACCURATE after 200 LPs on this instance."""
    prob = make_problem(["t0"], [3], [[1.0]] * 5, [1] * 5, [1.0, 1.0, 1.0, 1.0, 2.0])
    elapsed = np.array([400.0, 50.0, 50.0, 0.0, 0.0])
    prob = replace(
        prob,
        time_s=1000.0,
        jobs=replace(prob.jobs, total_steps=np.array([1000.0, 250.0, 250.0, 100.0, 100.0]),
                     arrival_time_s=1000.0 - elapsed),
        history=replace(prob.history, cumulative_isolated_time_s=elapsed / 2),
    )
    plan = run(prob, "themis_finish_time_fairness", FinishTimeFairnessParameters())
    assert plan.certificate.termination is Termination.OPTIMAL
    assert plan.certificate.gap is not None and plan.certificate.gap <= 1e-6
    assert plan.certificate.objective == pytest.approx(ftf_inv_pos(inst_of(prob)), rel=1e-6)


@given(problems(max_jobs=5), st.sampled_from([0.1, 4.0]), st.sampled_from([0.5, 8.0]))
def test_ftf_unit_changes(prob: Problem, alpha: float, time_unit: float) -> None:
    base = run(prob, "themis_finish_time_fairness", FinishTimeFairnessParameters())
    rho_star = base.certificate.objective
    # A2.5 6: one job's unit of work
    T = prob.jobs.throughput.copy()
    T[0] *= alpha
    first = np.where(np.arange(prob.jobs.num_jobs) == 0, alpha, 1.0)
    unit = replace(prob, jobs=replace(prob.jobs, throughput=T,
                                      total_steps=prob.jobs.total_steps * first,
                                      steps_done=prob.jobs.steps_done * first))
    got = run(unit, "themis_finish_time_fairness", FinishTimeFairnessParameters())
    assert got.certificate.objective == pytest.approx(rho_star, rel=1e-6)
    # A2.5 7: time unit (t, C scaled by a, T by 1/a)
    t = prob.time_s - prob.jobs.arrival_time_s
    timed = replace(
        prob,
        jobs=replace(
            prob.jobs,
            throughput=prob.jobs.throughput / time_unit,
            arrival_time_s=prob.time_s - t * time_unit,
        ),
        history=replace(
            prob.history,
            cumulative_isolated_time_s=(prob.history.cumulative_isolated_time_s * time_unit),
        ),
    )
    got = run(timed, "themis_finish_time_fairness", FinishTimeFairnessParameters())
    assert got.certificate.objective == pytest.approx(rho_star, rel=1e-6)


@given(problems(max_jobs=5))
def test_ftf_static_batch_is_one_lp_max_min(prob: Problem) -> None:
    """t = C = 0: rho* = 1 / max_X min_i thr_i/iso_i, found by one LP (A2.5 5)."""
    m = prob.jobs.num_jobs
    prob = replace(
        prob,
        jobs=replace(prob.jobs, arrival_time_s=np.full(m, prob.time_s), priority_weight=np.ones(m)),
        history=replace(prob.history, cumulative_isolated_time_s=np.zeros(m)),
    )
    plan = run(prob, "themis_finish_time_fairness", FinishTimeFairnessParameters())
    check_certificate(plan)
    assert "(1 LPs)" in plan.certificate.formulation or "(0 LPs)" in plan.certificate.formulation
    assert plan.certificate.objective == pytest.approx(
        1.0 / float(plan.normalized_throughput.min()), rel=1e-9
    )


def test_ftf_weights_and_finished_jobs() -> None:
    prob = make_problem(["a"], [1], [[1.0], [1.0], [1.0]], priority_weight=[1.0, 3.0, 1.0])
    prob = replace(
        prob,
        jobs=replace(
            prob.jobs,
            total_steps=np.array([100.0, 100.0, 5.0]),
            steps_done=np.array([0.0, 0.0, 5.0]),
        ),
    )
    plan = run(prob, "themis_finish_time_fairness", FinishTimeFairnessParameters())
    check_certificate(plan)
    assert plan.job_status[2] is JobStatus.FINISHED
    # equal jobs, weight 3 gets three times the share: w rho equal for both
    assert plan.time_share[1, 0] == pytest.approx(0.75, rel=1e-6)
    gavel = run(prob, "themis_finish_time_fairness", FinishTimeFairnessParameters(), Compat.GAVEL)
    assert gavel.time_share[1, 0] == pytest.approx(0.5, rel=1e-6)


# --------------------------------------------------------------------------------------------
# the wire: aliases, state round trip, bad input


def request(policy: str = "finish_time_fairness_perf") -> service_pb.SolveRequest:
    req = service_pb.SolveRequest()
    snap = req.snapshot
    snap.time_s = 1000.0
    snap.history.elapsed_since_reset_s = 100.0
    for name, count, cost in (("v100", 2, 3.0), ("k80", 4, 0.5)):
        snap.cluster.accelerator_types.add(name=name, count=count, cost_per_hour=cost)
    for k, (fast, slow, work) in enumerate([(4.0, 1.0, 4000), (2.0, 1.5, 3000), (3.0, 0.5, 900)]):
        job = snap.jobs.add(id=f"j{k}", arrival_time_s=100.0 * k)
        job.throughput["v100"] = fast
        job.throughput["k80"] = slow
        job.progress.total_steps = work
        job.deadline_s = 3000.0 + 500 * k
    req.policy.name = policy
    return req


def fields(req: service_pb.SolveRequest) -> list[str]:
    with pytest.raises(ValidationError) as info:
        request_to_model(req)
    return [v.field for v in info.value.violations]


@pytest.mark.parametrize(
    ("alias", "canonical", "check"),
    [
        ("max_sum_throughput_perf", "max_sum_throughput", None),
        (
            "max_sum_throughput_normalized_by_cost_perf",
            "cost_normalized_throughput",
            ("use_slos", False),
        ),
        (
            "max_sum_throughput_normalized_by_cost_perf_SLOs",
            "cost_normalized_throughput",
            ("use_slos", True),
        ),
        ("min_total_duration_perf", "min_makespan", ("reference_type", "")),
        ("min_total_duration", "min_makespan", ("reference_type", "v100")),
        ("finish_time_fairness_perf", "themis_finish_time_fairness", ("reference_type", "")),
        ("finish_time_fairness", "themis_finish_time_fairness", ("reference_type", "v100")),
    ],
)
def test_aliases_end_to_end(alias: str, canonical: str, check: tuple[str, object] | None) -> None:
    _, policy, _ = request_to_model(request(alias))
    assert policy.name == canonical
    if check is not None:
        assert getattr(policy.parameters, check[0]) == check[1]
    response = solve_request(request(alias))
    assert response.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    assert response.stats.policy == canonical
    assert response.stats.relative_gap <= 1e-6


def test_agnostic_variant_copies_the_reference_column() -> None:
    prob, policy, _ = request_to_model(request("min_total_duration"))
    plan = solve(prob, policy)
    # every type gets the v100 throughput: finish rates use the v100 column on every type
    T = prob.jobs.throughput
    thr = plan.time_share.sum(axis=1) * T[:, 0]
    assert float(np.max(prob.jobs.remaining_steps / thr)) == pytest.approx(
        plan.certificate.objective, rel=1e-9
    )


def test_ftf_state_round_trip_equals_stateful_update() -> None:
    """A stateless server fed the returned state gives Gavel's stateful update (A2.5)."""
    first = solve_request(request())
    jobs = {j.job_id: j for j in first.plan.jobs}
    req = request()
    req.snapshot.time_s = 1100.0
    done = {"j0": 300.0, "j1": 100.0, "j2": 0.0}
    for job in req.snapshot.jobs:
        job.progress.steps_done = done[job.id]
        prev = jobs[job.id]
        entry = req.snapshot.history.jobs.add(job_id=job.id)
        entry.cumulative_isolated_time_s = prev.cumulative_isolated_time_s
        entry.previous_isolated_throughput = prev.isolated_throughput
        entry.previous_remaining_steps = prev.remaining_steps
    second = solve_request(req)
    for job in second.plan.jobs:
        prev = jobs[job.job_id]
        expected = prev.cumulative_isolated_time_s + done[job.job_id] / prev.isolated_throughput
        assert job.cumulative_isolated_time_s == pytest.approx(expected, rel=1e-12)
        assert job.remaining_steps == prev.remaining_steps - done[job.job_id]


def test_bad_inputs_have_field_paths() -> None:
    req = request("max_sum_throughput_normalized_by_cost_perf_SLOs")  # SLO <= 0 with work left
    req.snapshot.jobs[1].deadline_s = 1000.0
    assert fields(req) == ["snapshot.jobs[1].deadline_s"]
    req.policy.cost_throughput.allow_missed_slos = True
    req.policy.cost_throughput.use_slos = True
    request_to_model(req)  # allowed: reported, not rejected

    req = request("max_sum_throughput_normalized_by_cost_perf_SLOs")  # SLO needs total steps
    req.snapshot.jobs[0].progress.total_steps = 0
    assert fields(req) == ["snapshot.jobs[0].progress.total_steps"]

    for bad in (-1.0, math.nan, math.inf):  # negative or NaN cost
        req = request("cost_normalized_throughput")
        req.snapshot.cluster.accelerator_types[1].cost_per_hour = bad
        assert fields(req) == ["snapshot.cluster.accelerator_types[1].cost_per_hour"]

    req = request()  # negative remaining steps
    req.snapshot.jobs[2].progress.steps_done = 1000
    assert fields(req) == ["snapshot.jobs[2].progress.total_steps"]

    req = request("min_makespan")  # unknown remaining work
    req.snapshot.jobs[2].progress.total_steps = 0
    assert fields(req) == ["snapshot.jobs[2].progress.total_steps"]

    req = request()  # history naming an unknown job and an unknown type
    req.snapshot.history.jobs.add(job_id="ghost")
    entry = req.snapshot.history.jobs.add(job_id="j1")
    entry.received_time_s["tpu"] = 1.0
    assert fields(req) == [
        "snapshot.history.jobs[0].job_id",
        'snapshot.history.jobs[1].received_time_s["tpu"]',
    ]

    req = request()  # received time larger than the elapsed time
    entry = req.snapshot.history.jobs.add(job_id="j1")
    entry.received_time_s["k80"] = 150.0
    assert fields(req) == ['snapshot.history.jobs[0].received_time_s["k80"]']

    req = request()  # FTF state: half given, or not positive
    entry = req.snapshot.history.jobs.add(job_id="j0")
    entry.previous_isolated_throughput = 1.0
    assert fields(req) == ["snapshot.history.jobs[0].previous_remaining_steps"]
    entry.previous_remaining_steps = 10.0
    entry.previous_isolated_throughput = 0.0
    assert fields(req) == ["snapshot.history.jobs[0].previous_isolated_throughput"]

    req = request()  # unknown reference type
    req.policy.finish_time_fairness.reference_type = "tpu"
    assert fields(req) == ["policy.finish_time_fairness.reference_type"]

    req = request("min_total_duration")  # no throughput on the reference type
    req.snapshot.jobs[1].throughput["v100"] = 0
    assert fields(req) == ["snapshot.jobs[1].throughput"]

    req = request("min_makespan")  # parameters of another policy
    req.policy.max_sum_throughput.normalize = 2
    assert fields(req) == ["policy.max_sum_throughput"]


@pytest.mark.parametrize("work", ["spread", "balanced"])
def test_large_instances_use_the_active_set_and_agree_with_highs(work: str) -> None:
    """Above LEVELS_ABOVE jobs the z-LPs go through max-min fairness's active-set method
    (rhs scaled to O(1) levels); the certified optimum equals HiGHS on the full LP."""
    rng = np.random.default_rng(3)
    m = 1200
    T = np.exp(rng.uniform(-1, 2, (m, 3)))
    prob = make_problem(["a", "b", "c"], [200, 300, 400], T, scale_factor=rng.choice([1, 2], m))
    total = (
        T.max(axis=1) * 1e4 * rng.uniform(0.9, 1.1, m)
        if work == "balanced"
        else (np.exp(rng.uniform(np.log(1e3), np.log(1e6), m)))
    )
    age = rng.uniform(0, 1e4, m)
    prob = replace(
        prob,
        time_s=1e4,
        jobs=replace(prob.jobs, total_steps=total, arrival_time_s=1e4 - age),
        history=replace(prob.history, cumulative_isolated_time_s=age * rng.uniform(0.5, 1, m)),
    )
    for name, params in (
        ("min_makespan", MinMakespanParameters()),
        ("themis_finish_time_fairness", FinishTimeFairnessParameters()),
    ):
        auto = run(prob, name, params)
        check_feasible(prob, auto)
        check_certificate(auto)
        highs = run(prob, name, params, solver=SolverPreference.HIGHS)
        check_certificate(highs)
        assert auto.certificate.objective == pytest.approx(highs.certificate.objective, rel=2e-6)
