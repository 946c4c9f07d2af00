"""Fisher market / Eisenberg–Gale (A4.1, docs/policies/market.md) proven by independent routes.

* The equilibrium (KKT) conditions of the capped market, checked from the returned X and prices
  alone: sigma_i is *derived* as B_i - spending_i (condition 3), then sigma >= 0, sigma > 0 only
  when the time budget binds, bang per buck at effective prices (condition 2) with equality on
  the support, and market clearing for positive prices (condition 4).
* Envy-freeness and proportionality where they hold (equal budgets; equal scale factors for
  envy-freeness; jobs whose time budget does not bind).
* Pareto optimality by an LP (scipy/HiGHS) that tries to raise every utility at once.
* A second formulation (cvxpy's own model) reaches the same optimal value; utilities agree.
* Metamorphic: scaling all budgets scales prices and leaves utilities unchanged; permuting jobs.
* Bad inputs with field paths, and one request end to end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray
from scipy.optimize import linprog

import apportion
from apportion.formulations.fisher_market import market_inputs
from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.errors import ValidationError
from apportion.solver.model import PolicyRequest, Problem
from apportion.solver.parameters import BudgetSource, FisherMarketParameters
from apportion.solver.result import Plan, Termination
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem
from apportion.testing import check_plan, snapshots
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import policy_pb2 as policy_pb
from apportion.v1.allocation_service_pb2 import SolveRequest

Array = NDArray[np.float64]
TOL = 2e-5
"""Stated tolerance of the equilibrium conditions (relative to the largest budget): interior-
point duals are accurate to about 1e-6 on degenerate markets, and to 1.03e-5 on the worst
market apportion.testing's strategies found (5 jobs, gangs of 2 on types of 1 and 2
devices: a job overspent its budget 1 by 1.03e-5)."""
META = 1e-4
"""Relative tolerance when two solves are compared (utilities and prices of an interior-point
solution are accurate to about the square root of its 1e-10 gap)."""


@dataclass(frozen=True)
class Instance:
    T: Array
    W: Array
    s: Array
    w: Array

    def problem(self, w: Array | None = None, order: NDArray[np.int64] | None = None) -> Problem:
        idx = np.arange(self.T.shape[0]) if order is None else order
        weights = self.w if w is None else w
        return make_problem(
            [f"t{j}" for j in range(self.W.size)],
            self.W.astype(np.int64),
            self.T[idx],
            scale_factor=self.s[idx].astype(np.int64),
            priority_weight=weights[idx],
        )


def market_snapshots(equal_s: bool = False) -> st.SearchStrategy[SolveRequest]:
    """`apportion.testing.snapshots` for the market: 1-6 jobs on 1-3 types of 1-6 devices,
    throughputs 0 or in [0.1, 10], gangs of 1, 2 or 4 (1 with `equal_s`), weights (the budgets
    of fisher_market_weighted) in [0.2, 5]."""
    return snapshots(
        "fisher_market",
        jobs=st.integers(1, 6),
        types=st.integers(1, 3),
        count=st.integers(1, 6),
        throughput=st.one_of(st.just(0.0), st.floats(0.1, 10.0)),
        scale_factor=st.just(1) if equal_s else st.sampled_from([1, 2, 4]),
        priority_weight=st.floats(0.2, 5.0),
        nodes=False,
        full_gangs=False,
    )


def instances(equal_s: bool = False) -> st.SearchStrategy[Instance]:
    """`market_snapshots` validated, as raw arrays (every job has a usable cell)."""

    def of(request: SolveRequest) -> Instance:
        jobs = request_to_model(request)[0].jobs
        count = np.array([t.count for t in request.snapshot.cluster.accelerator_types], float)
        return Instance(jobs.throughput.copy(), count, jobs.scale_factor.astype(np.float64),
                        jobs.priority_weight.copy())

    return market_snapshots(equal_s).map(of)


def run(problem: Problem, budgets: BudgetSource = BudgetSource.EQUAL) -> Plan:
    return solve(problem, PolicyRequest("fisher_market", FisherMarketParameters(budgets)))


def budgets_of(problem: Problem, source: BudgetSource) -> Array:
    if source is BudgetSource.PRIORITY_WEIGHT:
        return problem.jobs.priority_weight
    return np.ones(problem.jobs.num_jobs)


def utilities(problem: Problem, X: Array) -> Array:
    a, *_ = market_inputs(problem, FisherMarketParameters())
    return np.einsum("ij,ij->i", a, X)


def check_equilibrium(problem: Problem, plan: Plan, source: BudgetSource) -> Array:
    """Conditions 1-4 of the module docstring; returns the derived sigma."""
    a, s, W, _, _ = market_inputs(problem, FisherMarketParameters())
    B = budgets_of(problem, source)
    X, q = plan.time_share, plan.accelerator_prices
    assert plan.certificate.termination is Termination.OPTIMAL
    # feasibility (B1-B4)
    assert np.all(X >= 0)
    assert np.all(X[a == 0] == 0)
    assert np.all(s @ X <= W + 1e-9)
    assert np.all(X.sum(axis=1) <= 1 + 1e-9)
    # objective recomputed
    u = np.einsum("ij,ij->i", a, X)
    assert np.all(u > 0)
    objective = float(np.sum(B * np.log(u)))
    assert plan.certificate.objective == pytest.approx(objective, rel=1e-9, abs=1e-12)
    assert plan.certificate.bound is not None
    assert plan.certificate.bound >= objective - 1e-12
    assert plan.certificate.bound - objective <= 1e-6 * max(1.0, B.sum())
    # budgets / time budget
    spending = s * (X @ q)
    assert plan.market is not None
    np.testing.assert_allclose(plan.market.spending, spending, rtol=1e-9, atol=1e-12)
    scale = max(1.0, float(B.max()))
    sigma = B - spending
    assert np.all(q >= 0)
    assert np.all(sigma >= -TOL * scale), "a job overspends its budget"
    binds = sigma > 10 * TOL * scale
    assert np.all(X[binds].sum(axis=1) >= 1 - 1e-5), "budget unspent but time budget slack"
    sigma = np.clip(sigma, 0, None)
    # bang per buck at effective prices s_i q_j + sigma_i
    lhs = a * (B / u)[:, None]
    rhs = s[:, None] * q[None, :] + sigma[:, None]
    allowed = a > 0
    assert np.all(lhs[allowed] <= rhs[allowed] * (1 + TOL) + TOL * scale)
    support = X > 1e-5
    np.testing.assert_allclose(lhs[support], rhs[support], rtol=10 * TOL, atol=TOL * scale)
    # market clearing
    priced = q > 1e-6 * scale
    np.testing.assert_allclose((s @ X)[priced], W[priced], rtol=1e-5)
    total = float(q @ W)
    assert total == pytest.approx(B.sum() - sigma.sum(), rel=1e-4, abs=1e-5 * scale)
    return sigma


@given(market_snapshots(), st.sampled_from(["fisher_market", "fisher_market_weighted"]))
def test_the_answer_on_the_wire_passes_check_plan(request: SolveRequest, name: str) -> None:
    """The same markets through the Python API: `check_plan` recomputes the log-welfare and
    checks spending against the prices, budgets and market clearing from the response."""
    solution = apportion.solve(request, name)
    report = check_plan(solution.request, solution)
    assert report.termination == "optimal"
    assert "prices and spending" in report.checked
    assert "objective recomputed from the plan (log_welfare)" in report.checked
    assert "objective in steps/s recomputed from the plan" in report.checked


@given(instances(), st.sampled_from(list(BudgetSource)))
def test_equilibrium_conditions(inst: Instance, source: BudgetSource) -> None:
    problem = inst.problem()
    check_equilibrium(problem, run(problem, source), source)


@given(instances(equal_s=False))
def test_proportionality_and_envy_freeness_with_equal_budgets(inst: Instance) -> None:
    problem = inst.problem()
    plan = run(problem)
    sigma = check_equilibrium(problem, plan, BudgetSource.EQUAL)
    a, s, W, _, _ = market_inputs(problem, FisherMarketParameters())
    u = utilities(problem, plan.time_share)
    m = problem.jobs.num_jobs
    del sigma
    free = plan.time_share.sum(axis=1) < 1 - 1e-6  # time budget slack => sigma_i = 0
    # proportionality: u_i >= sum_j (a_ij / s_i) W_j / m for jobs whose time budget is slack
    fair_share = (a / s[:, None]) @ W / m
    assert np.all(u[free] >= fair_share[free] * (1 - 1e-5) - 1e-9)
    # envy-freeness among jobs of equal scale factor (whose time budget is slack)
    for i in np.flatnonzero(free):
        for k in range(m):
            if s[k] == s[i]:
                other = float(a[i] @ plan.time_share[k])
                assert u[i] >= other * (1 - 1e-5) - 1e-9, (i, k)


def pareto_improvement(problem: Problem, u: Array) -> float:
    """max sum_i u'_i s.t. u'_i >= u_i, u' <= a X', capacity, time budgets (HiGHS via scipy)."""
    a, s, W, _, _ = market_inputs(problem, FisherMarketParameters())
    m, n = a.shape
    nx = m * n
    c = np.concatenate([np.zeros(nx), -np.ones(m)])
    rows: list[Array] = []
    rhs: list[float] = []
    for i in range(m):  # u'_i - a_i X_i <= 0
        r = np.zeros(nx + m)
        r[i * n : (i + 1) * n] = -a[i]
        r[nx + i] = 1
        rows.append(r)
        rhs.append(0.0)
        r = np.zeros(nx + m)  # time budget
        r[i * n : (i + 1) * n] = 1
        rows.append(r)
        rhs.append(1.0)
        r = np.zeros(nx + m)  # -u'_i <= -u_i
        r[nx + i] = -1
        rows.append(r)
        rhs.append(-u[i] * (1 - 1e-9))
    for j in range(n):
        r = np.zeros(nx + m)
        r[j:nx:n] = s
        rows.append(r)
        rhs.append(W[j])
    bounds = [(0, None if a.flat[k] > 0 else 0) for k in range(nx)] + [(0, None)] * m
    res = linprog(c, A_ub=np.array(rows), b_ub=np.array(rhs), bounds=bounds, method="highs")
    assert res.status == 0
    return float(-res.fun)


@given(instances(), st.sampled_from(list(BudgetSource)))
def test_pareto_optimal(inst: Instance, source: BudgetSource) -> None:
    problem = inst.problem()
    plan = run(problem, source)
    u = utilities(problem, plan.time_share)
    best = pareto_improvement(problem, u)
    assert best <= u.sum() * (1 + 1e-6) + 1e-9


@given(instances(), st.floats(0.05, 20.0))
def test_scaling_budgets_scales_prices(inst: Instance, beta: float) -> None:
    src = BudgetSource.PRIORITY_WEIGHT
    base = run(inst.problem(), src)
    scaled = run(inst.problem(w=inst.w * beta), src)
    problem = inst.problem()
    np.testing.assert_allclose(
        utilities(problem, scaled.time_share), utilities(problem, base.time_share), rtol=META
    )
    check_equilibrium(problem, base, src)
    if not np.all(base.time_share.sum(axis=1) < 1 - 1e-6):
        return  # prices are unique when no time budget binds; else only utilities compare
    q0 = base.accelerator_prices
    np.testing.assert_allclose(
        scaled.accelerator_prices, beta * q0, rtol=META, atol=META * beta * max(1.0, q0.max())
    )


@given(instances(), st.randoms(use_true_random=False))
def test_permuting_jobs_permutes_utilities(inst: Instance, rnd: object) -> None:
    m = inst.T.shape[0]
    order = np.arange(m)
    rnd.shuffle(order)  # type: ignore[attr-defined]
    base = run(inst.problem(), BudgetSource.PRIORITY_WEIGHT)
    perm = run(inst.problem(order=order), BudgetSource.PRIORITY_WEIGHT)
    u0 = utilities(inst.problem(), base.time_share)
    u1 = utilities(inst.problem(order=order), perm.time_share)
    np.testing.assert_allclose(u1, u0[order], rtol=META)
    if not np.all(base.time_share.sum(axis=1) < 1 - 1e-6):
        return  # prices are unique when no time budget binds
    np.testing.assert_allclose(
        perm.accelerator_prices,
        base.accelerator_prices,
        rtol=META,
        atol=META * max(1.0, base.accelerator_prices.max()),
    )


@given(instances(), st.sampled_from(list(BudgetSource)))
def test_second_formulation_agrees(inst: Instance, source: BudgetSource) -> None:
    """cvxpy's own model of the program (X over all cells, masked) reaches the same value."""
    import cvxpy as cp

    problem = inst.problem()
    a, s, W, _, _ = market_inputs(problem, FisherMarketParameters())
    B = budgets_of(problem, source)
    X = cp.Variable(a.shape, nonneg=True)
    u = cp.sum(cp.multiply(a, X), axis=1)
    cons = [s @ X <= W, cp.sum(X, axis=1) <= 1, cp.multiply((a == 0).astype(float), X) == 0]
    # tight tolerances: utilities are accurate to about the square root of the gap, and at
    # Clarabel's defaults a market with gangs of 2 on 2 devices was off by 1.3e-4
    value = cp.Problem(cp.Maximize(B @ cp.log(u)), cons).solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    plan = run(problem, source)
    assert plan.certificate.objective == pytest.approx(value, abs=1e-6 * max(1.0, B.sum()))
    np.testing.assert_allclose(
        utilities(problem, plan.time_share), np.einsum("ij,ij->i", a, X.value), rtol=META
    )


def test_three_buyers_two_goods_closed_form() -> None:
    """Buyer 0 wants only g0; buyers 1 and 2 value g0 and g1 equally; one device of each,
    budgets 1, time budgets slack. By hand: buyers 1, 2 are indifferent only if q0 = q1, and
    money clears (q0 + q1 = 3), so q = (1.5, 1.5); buyer 0 buys 1/1.5 = 2/3 of g0, buyers 1, 2
    split the remaining 4/3 device-time equally. Normalized utilities (prop = 0.5, 1, 1):
    u = (4/3, 2/3, 2/3)."""
    problem = make_problem(["g0", "g1"], [1, 1], [[1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    plan = run(problem)
    np.testing.assert_allclose(plan.time_share[0], [2 / 3, 0], atol=1e-6)
    np.testing.assert_allclose(plan.accelerator_prices, [1.5, 1.5], rtol=1e-6)
    np.testing.assert_allclose(plan.normalized_throughput, [4 / 3, 2 / 3, 2 / 3], rtol=1e-6)
    assert plan.market is not None
    np.testing.assert_allclose(plan.market.spending, [1, 1, 1], rtol=1e-6)
    # in steps/s every buyer runs at 2/3 step/s: 3 log(2/3), against log(4/3) + 2 log(2/3)
    assert plan.certificate.objective == pytest.approx(math.log(4 / 3) + 2 * math.log(2 / 3),
                                                       rel=1e-6)
    assert plan.market.throughput_objective == pytest.approx(3 * math.log(2 / 3), rel=1e-6)
    assert plan.market.throughput_bound is not None and plan.certificate.bound is not None
    assert plan.market.throughput_bound - plan.market.throughput_objective == pytest.approx(
        plan.certificate.bound - plan.certificate.objective, abs=1e-12)


# --------------------------------------------------------------------------------------------
# wire level


def request(budgets: int = 0, weight: float | None = None) -> service_pb.SolveRequest:
    req = service_pb.SolveRequest()
    for name, count in (("v100", 2), ("k80", 3)):
        acc = req.snapshot.cluster.accelerator_types.add()
        acc.name, acc.count = name, count
    for k, (v100, k80) in enumerate(((3.0, 1.0), (2.0, 2.0), (4.0, 0.5))):
        job = req.snapshot.jobs.add()
        job.id = f"j{k}"
        job.throughput["v100"] = v100
        job.throughput["k80"] = k80
        if weight is not None:
            job.priority_weight = weight
    req.policy.name = "fisher_market"
    req.policy.fisher_market.budgets = budgets  # type: ignore[assignment]
    return req


def test_end_to_end_prices_and_spending() -> None:
    response = solve_request(request(policy_pb.BUDGET_SOURCE_PRIORITY_WEIGHT, weight=2.0))
    assert response.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    prices = dict(response.plan.accelerator_prices)
    assert set(prices) == {"v100", "k80"}
    total = sum(prices[name] * count for name, count in (("v100", 2), ("k80", 3)))
    spent = sum(job.spending for job in response.plan.jobs)
    assert all(job.HasField("spending") for job in response.plan.jobs)
    assert total == pytest.approx(spent, rel=1e-6)
    assert spent <= 6.0 * (1 + 1e-6)


def test_the_objective_in_steps_on_the_wire() -> None:
    """`stats.throughput_objective` is sum_i B_i log(steps/s) of the returned plan (B_i = 2 with
    the weights as budgets), its bound as far from it as the certificate's."""
    response = solve_request(request(policy_pb.BUDGET_SOURCE_PRIORITY_WEIGHT, weight=2.0))
    assert response.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    expected = sum(2.0 * math.log(job.effective_throughput) for job in response.plan.jobs)
    assert response.stats.throughput_objective == pytest.approx(expected, rel=1e-9)
    assert (response.stats.throughput_best_bound - response.stats.throughput_objective
            == pytest.approx(response.stats.best_bound - response.stats.objective, abs=1e-12))


def test_bad_inputs_have_field_paths() -> None:
    req = request(budgets=9)
    req.snapshot.jobs[1].priority_weight = 0.0
    with pytest.raises(ValidationError) as err:
        request_to_model(req)
    fields = {v.field for v in err.value.violations}
    assert "policy.fisher_market.budgets" in fields
    assert "snapshot.jobs[1].priority_weight" in fields


def test_unservable_job_reported() -> None:
    problem = make_problem(["a"], [2], [[3.0], [0.0]])
    plan = run(problem)
    assert plan.certificate.termination is Termination.OPTIMAL
    assert plan.job_status[1].value == "unservable"
    assert plan.time_share[1].sum() == 0
    # the objective in steps/s leaves the unservable job out, as the objective does: job 0
    # runs all the time at 3 steps/s (prop = 3 on the cluster's mix, so u = 1)
    assert plan.market is not None and plan.certificate.objective == pytest.approx(0, abs=1e-9)
    assert plan.market.throughput_objective == pytest.approx(math.log(3.0), rel=1e-9)


@given(instances(), st.sampled_from(list(BudgetSource)))
def test_uncapped_market_is_the_plain_fisher_market(inst: Instance, source: BudgetSource) -> None:
    """Without the one-gang cap: the optimum equals cvxpy's Eisenberg-Gale program without the
    time-budget rows, every job spends exactly its budget (Fisher's equilibrium), priced types
    sell out, and each job buys only cells of maximum bang per buck."""
    import cvxpy as cp

    problem = inst.problem()
    a, s, W, _, _ = market_inputs(problem, FisherMarketParameters())
    B = budgets_of(problem, source)
    X = cp.Variable(a.shape, nonneg=True)
    u = cp.sum(cp.multiply(a, X), axis=1)
    cons = [s @ X <= W, cp.multiply((a == 0).astype(float), X) == 0]
    value = cp.Problem(cp.Maximize(B @ cp.log(u)), cons).solve(solver=cp.CLARABEL)
    plan = solve(problem, PolicyRequest("fisher_market",
                                        FisherMarketParameters(source, uncapped=True)))
    cert = plan.certificate
    assert cert.termination is Termination.OPTIMAL, cert
    assert cert.objective == pytest.approx(value, abs=1e-6 * max(1.0, B.sum()))
    Xp, q = plan.time_share, plan.accelerator_prices
    assert np.all(s @ Xp <= W + 1e-9) and np.all(Xp[a == 0] == 0)
    assert plan.market is not None
    np.testing.assert_allclose(plan.market.spending, B, rtol=META)
    sold = s @ Xp
    assert np.all((q <= 1e-7 * q.max()) | (sold >= W * (1 - 1e-5)))
    bang = np.where(a > 0, a / (s[:, None] * np.where(q > 0, q, np.inf)[None, :]), 0.0)
    best = bang.max(axis=1)
    bought = Xp > 1e-4  # above the interior point's noise
    assert np.all(bang[bought] >= np.repeat(best, bought.sum(axis=1)) * (1 - 1e-3))


def test_uncapped_lets_one_job_hold_several_gangs() -> None:
    """One job alone in the plain market buys every device (two gangs' worth of time on two
    devices); with Gavel's cap it gets one gang's worth."""
    problem = make_problem(["g"], [2], [[1.0]])
    capped = run(problem)
    plain = solve(problem, PolicyRequest("fisher_market", FisherMarketParameters(uncapped=True)))
    assert capped.time_share[0, 0] == pytest.approx(1.0, abs=1e-6)
    assert plain.time_share[0, 0] == pytest.approx(2.0, abs=1e-6)
    assert plain.certificate.termination is Termination.OPTIMAL


@st.composite
def repeated_instances(draw: st.DrawFn) -> Instance:
    """An instance whose jobs repeat: each job of a small instance 1-4 times (the solve merges
    identical buyers, so these are the markets where merging matters)."""
    base = draw(instances())
    times = np.array([draw(st.integers(1, 4)) for _ in range(base.T.shape[0])])
    idx = np.repeat(np.arange(base.T.shape[0]), times)
    return Instance(base.T[idx], base.W, base.s[idx], base.w[idx])


@given(repeated_instances(), st.sampled_from(list(BudgetSource)))
def test_identical_jobs_reach_the_equilibrium_of_the_whole_market(
    inst: Instance, source: BudgetSource
) -> None:
    """With repeated jobs the plan still satisfies every equilibrium condition job by job, and
    cvxpy's program over all jobs (no merging) reaches the same objective and utilities."""
    import cvxpy as cp

    problem = inst.problem()
    plan = run(problem, source)
    check_equilibrium(problem, plan, source)
    a, s, W, _, _ = market_inputs(problem, FisherMarketParameters())
    B = budgets_of(problem, source)
    X = cp.Variable(a.shape, nonneg=True)
    u = cp.sum(cp.multiply(a, X), axis=1)
    cons = [s @ X <= W, cp.sum(X, axis=1) <= 1, cp.multiply((a == 0).astype(float), X) == 0]
    # tight tolerances: utilities are accurate to about the square root of the gap
    value = cp.Problem(cp.Maximize(B @ cp.log(u)), cons).solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    assert plan.certificate.objective == pytest.approx(value, abs=1e-6 * max(1.0, B.sum()))
    np.testing.assert_allclose(
        utilities(problem, plan.time_share), np.einsum("ij,ij->i", a, X.value), rtol=META
    )
