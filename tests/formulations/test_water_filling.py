"""Water filling / hierarchical max-min fairness (A2.4, docs/policies/gavel.md): proofs by
independent routes. The references are written from the document, not from the code: the per-round
LP and Gavel's LP + MILP in `reference_water_filling` (scipy's HiGHS), the leximin check with cvxpy,
and A2.1 through the existing max-min policy."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from itertools import pairwise

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from apportion.datasets.generators import builtin_throughputs, gavel_workload
from apportion.formulations.water_filling import run, solve_water_filling
from apportion.solver.deadline import Deadline
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
from apportion.solver.validation import make_problem

from .reference_water_filling import (
    dense_model,
    gavel_water_filling,
    max_rise,
    tenant_weights,
    water_filling,
)

TOL = 1e-6
U_TOL = 1e-6
"""Per-job agreement of normalized throughputs (u units, plus the same relative)."""


@st.composite
def problems(draw: st.DrawFn, max_jobs: int = 7, tenants: bool = False) -> Problem:
    n = draw(st.integers(1, 3))
    m = draw(st.integers(1, max_jobs))
    count = np.array([draw(st.integers(1, 6)) for _ in range(n)], dtype=np.int64)
    thr = np.array(
        [[draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 7.0])) for _ in range(n)]
         for _ in range(m)]
    )
    scale = np.array([draw(st.sampled_from([1, 1, 2])) for _ in range(m)], dtype=np.int64)
    for i in range(m):  # at least one usable cell per job
        if not np.any((thr[i] > 0) & (count >= scale[i])):
            j = int(np.argmax(count))
            thr[i, j] = 1.0
            scale[i] = 1
    weight = np.array([draw(st.sampled_from([0.5, 1.0, 2.0])) for _ in range(m)])
    problem = make_problem([f"t{j}" for j in range(n)], count, thr, scale, weight)
    if tenants:
        problem = with_tenants(problem, draw)
    return problem


def with_tenants(problem: Problem, draw: st.DrawFn) -> Problem:
    """Jobs spread over tenants 'a', 'b' (unequal weights, either mode) or none."""
    m = problem.jobs.num_jobs
    names = tuple(draw(st.sampled_from(["a", "b", ""])) for _ in range(m))
    specs = tuple(
        Tenant(name, draw(st.sampled_from([1.0, 2.0, 3.0])),
               draw(st.sampled_from(list(TenantSharing))))
        for name in ("a", "b")
    )
    arrival = np.array([float(draw(st.integers(0, 3))) for _ in range(m)])
    jobs = replace(problem.jobs, tenant=names, arrival_time_s=arrival)
    return replace(problem, jobs=jobs, tenants=specs)


def water_fill(problem: Problem, params: WaterFillingParameters | None = None,
               compat: Compat = Compat.NONE) -> Plan:
    plan = solve(problem, PolicyRequest("hierarchical_max_min_fairness",
                                        params or WaterFillingParameters(), compat))
    assert plan.certificate.termination is Termination.OPTIMAL, plan.certificate
    return plan


def u_coefficients(problem: Problem) -> NDArray[np.float64]:
    """T / prop on allowed cells (A1.3, B4), written out independently."""
    thr = problem.jobs.throughput
    count = problem.cluster.count.astype(float)
    prop = (thr * count).sum(axis=1) / count.sum()
    allowed = (thr > 0) & (problem.jobs.scale_factor[:, None] <= problem.cluster.count[None, :])
    return np.where(allowed, thr / prop[:, None], 0.0)


def check_feasible(problem: Problem, X: NDArray[np.float64]) -> None:
    s = problem.jobs.scale_factor.astype(float)
    assert X.min() >= 0
    assert np.all(X.sum(axis=1) <= 1 + 1e-7)
    assert np.all(s @ X <= problem.cluster.count + 1e-7)
    assert np.all(X[u_coefficients(problem) == 0] == 0)


def assert_same_u(actual: NDArray[np.float64], expected: NDArray[np.float64]) -> None:
    np.testing.assert_allclose(actual, expected, rtol=U_TOL, atol=U_TOL)


# --------------------------------------------------------------------------------------------
# A2.4 against the independent per-round route


@settings(max_examples=40)
@given(problem=problems(tenants=True))
def test_equals_the_independent_route_with_tenants(problem: Problem) -> None:
    """Every job's final normalized throughput equals A2.4's exact algorithm run by plain
    per-round LPs (tenants with unequal weights, FIFO and fairness modes, untenanted jobs)."""
    plan = water_fill(problem)
    check_feasible(problem, plan.time_share)
    u = np.einsum("ij,ij->i", u_coefficients(problem), plan.time_share)
    np.testing.assert_allclose(plan.normalized_throughput, u, rtol=1e-9, atol=1e-12)
    reference = water_filling(problem, dense_model(problem))
    assert_same_u(plan.normalized_throughput, reference.value)


@dataclass
class Catalog:
    """The issue's instance: 5 tenants of weight 1 (fairness), 256 single-device jobs of
    Gavel's catalog (the project's synthetic table), weight 1, equal v100/p100/k80 counts."""

    jobs: int = 256
    per_type: int = 100
    seed: int = 0
    sharing: TenantSharing = TenantSharing.FAIRNESS
    problem: Problem = field(init=False)

    def __post_init__(self) -> None:
        table = builtin_throughputs()
        workload = gavel_workload(self.jobs, seed=self.seed, scale_probabilities=(1, 0, 0, 0),
                                  num_tenants=5)
        types = ("v100", "p100", "k80")
        thr = [[table.isolated[(key, 1)][t] for t in types] for key in workload.job_type.values()]
        problem = make_problem(types, [self.per_type] * 3, thr, [1] * self.jobs, [1.0] * self.jobs)
        tenants = tuple(str(name) for name in workload.tenant.values())
        self.problem = replace(problem, jobs=replace(problem.jobs, tenant=tenants),
                               tenants=tuple(Tenant(f"t{e}", 1.0, self.sharing) for e in range(5)))


def round_levels(plan: Plan) -> list[float]:
    """The water levels the certificate lists per round."""
    return [float(v) for v in re.findall(r"round \d+: level ([0-9.e+-]+)", plan.certificate.detail)]


@pytest.mark.parametrize("case", [Catalog(), Catalog(per_type=128),
                                  Catalog(jobs=128, per_type=60, sharing=TenantSharing.FIFO)],
                         ids=["256-100", "256-128", "fifo-128-60"])
def test_issue_13_catalog_tenants_keep_the_first_round(case: Catalog) -> None:
    """Issue #13: the smallest level is at least the independent round-1 LP optimum, the
    termination agrees with the certificate, and the per-round levels never fall."""
    problem = case.problem
    plan = solve(problem, PolicyRequest("hierarchical_max_min_fairness",
                                        WaterFillingParameters()))
    cert = plan.certificate
    m = problem.jobs.num_jobs
    first = tenant_weights(problem, np.zeros(m, dtype=bool))
    model = dense_model(problem)
    rate = np.where(first > 0, first / model.s, 0.0)
    optimum, _ = max_rise(model, rate, np.zeros(m))
    u = np.einsum("ij,ij->i", u_coefficients(problem), plan.time_share)
    live = first > 0
    smallest = float(np.min(u[live] / rate[live]))
    assert smallest >= optimum * (1 - TOL), (smallest, optimum)
    assert cert.termination is Termination.OPTIMAL, cert
    assert cert.gap is not None and cert.gap <= TOL
    assert cert.objective == pytest.approx(optimum, rel=TOL)
    levels = round_levels(plan)
    assert levels and levels[0] == pytest.approx(optimum, rel=TOL)
    assert all(b >= a for a, b in pairwise(levels)), levels


# --------------------------------------------------------------------------------------------
# properties of every round (A2.4 "How to prove it" 1 and 7)


def round_one_problem(problem: Problem) -> Problem:
    """A2.1's instance of round 1: the jobs with a positive round-1 weight, weighted by it."""
    m = problem.jobs.num_jobs
    first = tenant_weights(problem, np.zeros(m, dtype=bool))
    keep = np.flatnonzero(first > 0)
    jobs = problem.jobs
    sub = make_problem(problem.cluster.type_names, problem.cluster.count,
                       jobs.throughput[keep], jobs.scale_factor[keep], first[keep])
    coloc = problem.colocations
    if coloc is not None:
        index = np.full(m, -1)
        index[keep] = np.arange(keep.size)
        ok = (index[coloc.job_a] >= 0) & (index[coloc.job_b] >= 0)
        sub = replace(sub, colocations=replace(coloc, job_a=index[coloc.job_a[ok]],
                                               job_b=index[coloc.job_b[ok]],
                                               throughput_a=coloc.throughput_a[ok],
                                               throughput_b=coloc.throughput_b[ok]))
    return sub


def check_rounds(problem: Problem, params: WaterFillingParameters) -> None:
    """Round 1 is A2.1's max-min LP (the max-min policy on round 1's weights); no job's running
    value falls from one round to the next and the plan keeps every one; the final smallest
    round-1 level is at least round 1's optimum; each round freezes a job, so there are at
    most as many rounds as jobs."""
    m = problem.jobs.num_jobs
    setup, filling = run(problem, params, Compat.NONE, SolveOptions(), Deadline.never(),
                         trace=True)
    group = setup.groups.group
    assert filling.status == "optimal" and filling.frozen.all()
    assert 1 <= len(filling.rounds) <= m
    previous = np.zeros(group.max() + 1)
    for r in filling.rounds:
        assert r.frozen.size >= 1
        assert r.running is not None and np.all(r.running >= previous)
        previous = r.running
    plan = water_fill(problem, params)  # within the tolerance of its certificate
    unit = max(1.0, float(previous.max()))
    assert np.all(plan.normalized_throughput >= previous[group] - TOL * unit)
    mmf = solve(round_one_problem(problem), PolicyRequest(
        "weighted_max_min_fairness", MaxMinFairnessParameters(space_sharing=params.space_sharing)))
    assert mmf.certificate.objective is not None
    optimum = mmf.certificate.objective
    assert filling.rounds[0].rise == pytest.approx(optimum, rel=TOL, abs=1e-9)
    first = tenant_weights(problem, np.zeros(m, dtype=bool))
    live = first > 0
    s = problem.jobs.scale_factor
    smallest = float(np.min(s[live] * plan.normalized_throughput[live] / first[live]))
    assert smallest >= optimum * (1 - TOL) - 1e-9
    assert plan.certificate.objective == pytest.approx(smallest, rel=1e-9)


@given(problem=problems(tenants=True))
def test_rounds_start_at_max_min_and_never_lower_a_job(problem: Problem) -> None:
    check_rounds(problem, WaterFillingParameters())


@given(problem=problems())
def test_rounds_without_tenants(problem: Problem) -> None:
    check_rounds(problem, WaterFillingParameters())


# --------------------------------------------------------------------------------------------
# fixed weights: the leximin characterization (A2.4 test 2) and A2.4 tests 3-6


def max_single_level(problem: Problem, i: int, levels: NDArray[np.float64],
                     weight: NDArray[np.float64]) -> float:
    """max l_i(X) s.t. base constraints and l_k(X) >= levels_k for every k != i with
    levels_k <= levels_i (A2.4 test 2, fixed weights)."""
    b = u_coefficients(problem)
    s = problem.jobs.scale_factor.astype(float)
    m, n = b.shape
    X = cp.Variable((m, n), nonneg=True)
    lvl = cp.multiply((s / weight)[:, None], b)
    level = cp.sum(cp.multiply(lvl, X), axis=1)
    cons = [cp.sum(X, axis=1) <= 1, s @ X <= problem.cluster.count, X[b == 0] == 0]
    others = [k for k in range(m) if k != i and levels[k] <= levels[i] * (1 + 1e-9)]
    if others:  # barely relaxed: exchange rates of 100:1 occur (a vertex solver copes)
        cons.append(level[others] >= levels[others] * (1 - 1e-10))
    value = cp.Problem(cp.Maximize(level[i]), cons).solve(solver=cp.HIGHS)
    return float(value)


@settings(max_examples=30)
@given(problem=problems())
def test_leximin_certificate(problem: Problem) -> None:
    """No job can rise without lowering a job that is no better off: the characterization of
    (weighted) max-min fairness on a convex set. No tenants, so weights are fixed (w_i)."""
    plan = water_fill(problem)
    check_feasible(problem, plan.time_share)
    b = u_coefficients(problem)
    s = problem.jobs.scale_factor.astype(float)
    w = problem.jobs.priority_weight
    achieved = s / w * np.einsum("ij,ij->i", b, plan.time_share)
    # with fixed weights the water level at which a job froze is its level
    np.testing.assert_allclose(achieved, plan.objective_value, rtol=1e-6, atol=1e-9)
    for i in range(problem.jobs.num_jobs):
        best = max_single_level(problem, i, plan.objective_value, w)
        assert best <= plan.objective_value[i] * (1 + TOL) + 1e-7, (i, best, plan.objective_value)


@given(problem=problems())
def test_first_level_is_weighted_max_min(problem: Problem) -> None:
    """A2.4 test 1: the first round's level is A2.1's optimum, with a proven bound."""
    wf = water_fill(problem)
    mmf = solve(problem, PolicyRequest("weighted_max_min_fairness", MaxMinFairnessParameters()),
                SolveOptions())
    assert wf.certificate.objective is not None and mmf.certificate.objective is not None
    assert wf.certificate.objective == pytest.approx(mmf.certificate.objective, rel=TOL)
    assert wf.certificate.gap is not None and wf.certificate.gap <= TOL


@given(problem=problems())
def test_sorted_levels_dominate_plain_max_min(problem: Problem) -> None:
    """A2.4 test 3: the sorted level vector is lexicographically >= that of A2.1's plan."""
    b = u_coefficients(problem)
    scale = problem.jobs.scale_factor / problem.jobs.priority_weight
    wf = np.sort(scale * np.einsum("ij,ij->i", b, water_fill(problem).time_share))
    plain_plan = solve(problem, PolicyRequest("weighted_max_min_fairness",
                                              MaxMinFairnessParameters()))
    plain = np.sort(scale * np.einsum("ij,ij->i", b, plain_plan.time_share))
    for x, y in zip(wf, plain, strict=True):
        if x > y * (1 + 1e-6) + 1e-9:
            return
        assert x >= y * (1 - 1e-6) - 1e-9, (wf, plain)


@given(problem=problems())
def test_one_tenant_with_all_jobs_equals_no_tenants(problem: Problem) -> None:
    """A2.4 test 4: uniform scaling of the active jobs' weights changes no optimal set."""
    grouped = replace(problem, jobs=replace(problem.jobs, tenant=("all",) * problem.jobs.num_jobs),
                      tenants=(Tenant("all", 3.0),))
    assert_same_u(water_fill(grouped).normalized_throughput,
                  water_fill(problem).normalized_throughput)


@given(problem=problems())
def test_fifo_with_one_job_per_tenant_equals_fairness(problem: Problem) -> None:
    """A2.4 test 5."""
    m = problem.jobs.num_jobs
    names = tuple(f"e{i}" for i in range(m))
    weights = [1.0 + (i % 3) for i in range(m)]
    base = replace(problem, jobs=replace(problem.jobs, tenant=names))
    fifo = replace(base, tenants=tuple(Tenant(names[i], weights[i], TenantSharing.FIFO)
                                       for i in range(m)))
    fair = replace(base, tenants=tuple(Tenant(names[i], weights[i], TenantSharing.FAIRNESS)
                                       for i in range(m)))
    assert_same_u(water_fill(fifo).normalized_throughput, water_fill(fair).normalized_throughput)


@given(problem=problems(tenants=True), data=st.data())
def test_row_and_weight_scaling_change_no_job(problem: Problem, data: st.DataObject) -> None:
    """A2.4 test 6 (A2.1 relations 4-5): scaling one job's throughput row, or every priority
    and tenant weight, leaves every job's normalized throughput unchanged."""
    m = problem.jobs.num_jobs
    base = water_fill(problem).normalized_throughput
    i = data.draw(st.integers(0, m - 1))
    alpha = data.draw(st.sampled_from([0.25, 3.0]))
    thr = problem.jobs.throughput.copy()
    thr[i] *= alpha
    rows = replace(problem, jobs=replace(problem.jobs, throughput=thr))
    assert_same_u(water_fill(rows).normalized_throughput, base)
    beta = data.draw(st.sampled_from([0.5, 4.0]))
    weights = replace(problem, jobs=replace(problem.jobs,
                                            priority_weight=problem.jobs.priority_weight * beta),
                      tenants=tuple(replace(t, weight=t.weight * beta) for t in problem.tenants))
    assert_same_u(water_fill(weights).normalized_throughput, base)


# --------------------------------------------------------------------------------------------
# compat gavel: Gavel's MILP freezing test (A2.4, C1)


@settings(max_examples=30)
@given(problem=problems(max_jobs=5, tenants=True))
def test_compat_gavel_equals_gavels_algorithm(problem: Problem) -> None:
    """Under `compat: gavel` the rounds reproduce Gavel's LP + MILP algorithm (0.01% / 1e-5
    threshold, infeasible MILP = freeze everything), per job."""
    params = WaterFillingParameters()
    setup, filling = run(problem, params, Compat.GAVEL, SolveOptions(), Deadline.never())
    reference = gavel_water_filling(problem, dense_model(problem, gavel=True))
    group = setup.groups.group
    assert_same_u(filling.value[group], reference.value)
    np.testing.assert_array_equal(filling.frozen[group], reference.frozen)
    plan = water_fill(problem, params, Compat.GAVEL)
    assert np.all(plan.normalized_throughput >= reference.value * (1 - 1e-6) - 1e-8)


def test_gavel_threshold_only_under_compat() -> None:
    """A job that can still rise by less than 0.01% is frozen by Gavel's test (compat) and
    raised by the default. Three jobs on three devices of one type (u = time share), weights
    1, 1.00005, 1.00005: round 1 stops when the heavier two reach their whole time (u = 1),
    with job 0 at 1/1.00005, which can still rise by 0.005%."""
    problem = make_problem(["g"], [3], [[1.0]] * 3, [1, 1, 1], [1.0, 1 + 5e-5, 1 + 5e-5])
    default = water_fill(problem).normalized_throughput
    np.testing.assert_allclose(default, [1.0, 1.0, 1.0], rtol=1e-7)
    assert_same_u(default, water_filling(problem, dense_model(problem)).value)
    setup, gavel = run(problem, WaterFillingParameters(), Compat.GAVEL, SolveOptions(),
                       Deadline.never())
    assert gavel.frozen.all() and len(gavel.rounds) == 1
    np.testing.assert_allclose(gavel.value[setup.groups.group], [1 / (1 + 5e-5), 1.0, 1.0],
                               rtol=1e-9)


# --------------------------------------------------------------------------------------------
# feasibility, FIFO, deadlines, wire format


@given(problem=problems(tenants=True))
def test_hierarchical_plans_are_feasible_and_every_job_frozen(problem: Problem) -> None:
    plan = water_fill(problem)
    check_feasible(problem, plan.time_share)
    _, filling = run(problem, WaterFillingParameters(), Compat.NONE, SolveOptions(),
                     Deadline.never())
    assert filling.frozen.all()
    # the water level at which each job froze: never negative, and a job's u never is
    assert np.all(plan.objective_value >= 0)
    assert np.all(plan.normalized_throughput >= 0)


def test_fifo_tail_on_a_full_cluster_gets_nothing_and_no_negative_level() -> None:
    """The flaky case of issue #13 item 7: a FIFO tenant's seven jobs on one device. The head
    takes it all; the others freeze at 0 in rounds that rise by 0 (solver noise once made one
    of those levels -7e-14, and the property `level > 0` failed at random)."""
    problem = make_problem(["t0", "t1"], [1, 1], [[1.0, 0.0]] * 7, [1] * 7, [0.5] * 7)
    problem = replace(problem, jobs=replace(problem.jobs, tenant=("a",) * 7),
                      tenants=(Tenant("a", 2.0, TenantSharing.FIFO), Tenant("b", 1.0)))
    plan = water_fill(problem)
    assert np.all(plan.objective_value >= 0)
    np.testing.assert_allclose(plan.normalized_throughput, [2.0] + [0.0] * 6, atol=1e-7)


def test_a_fifo_head_that_cannot_run_does_not_stop_the_jobs_behind_it() -> None:
    """Types t0 and t1, one device each. Tenant x (fairness) has job X on t0; FIFO tenant q has
    A0, A1, A2 (oldest first, t0 only) and B (t1 only). Round 1: X and A0 share t0. Round 2:
    the head A1 cannot rise at all (t0 is full), a round that rises by 0 while A2 and B wait;
    B can still take t1, so the jobs left must not all be frozen where they are."""
    problem = make_problem(["t0", "t1"], [1, 1], [[1.0, 0.0]] * 4 + [[0.0, 1.0]], [1] * 5,
                           [1.0] * 5)
    jobs = replace(problem.jobs, tenant=("x", "q", "q", "q", "q"),
                   arrival_time_s=np.array([0.0, 1.0, 2.0, 3.0, 4.0]))
    problem = replace(problem, jobs=jobs, tenants=(Tenant("x", 1.0),
                                                   Tenant("q", 1.0, TenantSharing.FIFO)))
    plan = water_fill(problem)
    # u = 2 x time share here (prop = 0.5 for every job)
    np.testing.assert_allclose(plan.normalized_throughput, [1.0, 1.0, 0.0, 0.0, 2.0], atol=1e-7)
    assert_same_u(plan.normalized_throughput, water_filling(problem, dense_model(problem)).value)


def test_optimal_only_within_the_tolerance_asked() -> None:
    """The termination follows the certificate: asked for a tolerance below what the rounds
    can prove (the floors' slack alone is 1e-8), the same plan is not called optimal."""
    problem = Catalog(jobs=64, per_type=40).problem
    params = WaterFillingParameters()
    request = PolicyRequest("hierarchical_max_min_fairness", params)
    assert solve(problem, request).certificate.termination is Termination.OPTIMAL
    strict = SolveOptions(relative_gap=1e-13)
    assert solve(problem, request, strict).certificate.termination is (
        Termination.OPTIMAL_INACCURATE)
    # the formulation's own certificate, before solve()'s check of round 1's gap
    direct = solve_water_filling(problem, params, Compat.NONE, strict, Deadline.never())
    assert direct.certificate.termination is Termination.OPTIMAL_INACCURATE, direct.certificate


def test_fifo_tenant_serves_its_oldest_job_first() -> None:
    """One type, 2 devices; tenant 'q' in FIFO mode with two jobs, tenant 'r' with one.
    The oldest job of 'q' reaches the level of 'r''s job before the younger one gets anything
    beyond what is left over."""
    problem = make_problem(["gpu"], [2], [[1.0], [1.0], [1.0]], [1, 1, 1], [1.0, 1.0, 1.0])
    jobs = replace(problem.jobs, tenant=("q", "q", "r"),
                   arrival_time_s=np.array([5.0, 1.0, 0.0]))
    problem = replace(problem, jobs=jobs, tenants=(Tenant("q", 1.0, TenantSharing.FIFO),
                                                   Tenant("r", 1.0)))
    X = water_fill(problem).time_share[:, 0]
    # Round 1: the oldest job of q (index 1) and r's job share the cluster 1:1 up to budget 1
    # each, which uses both devices: the younger job of q gets nothing.
    np.testing.assert_allclose(X, [0.0, 1.0, 1.0], atol=1e-6)


def test_doubling_a_tenant_weight_never_lowers_its_smallest_share() -> None:
    """The issue's tenant-weight relation, on a contended single-type cluster: the tenant with
    doubled weight gets at least as much normalized throughput for its worst-off job."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        m = 6
        problem = make_problem(["a", "b"], [2, 1], rng.uniform(0.5, 3, (m, 2)), [1] * m,
                               rng.choice([1.0, 2.0], m))
        names = ("x", "x", "y", "y", "z", "z")
        base = replace(problem, jobs=replace(problem.jobs, tenant=names))
        before = replace(base, tenants=(Tenant("x", 1.0),))
        after = replace(base, tenants=(Tenant("x", 2.0),))
        b = u_coefficients(problem)
        u_before = np.einsum("ij,ij->i", b, water_fill(before).time_share)[:2].min()
        u_after = np.einsum("ij,ij->i", b, water_fill(after).time_share)[:2].min()
        assert u_after >= u_before * (1 - 1e-6) - 1e-9


@dataclass(frozen=True)
class ExpiresAfter(Deadline):
    """A deadline that passes after `checks` calls of `expired` (no time limit otherwise):
    stops the rounds at a chosen point without depending on the machine's speed."""

    checks: list[int] = field(default_factory=lambda: [1])

    def expired(self) -> bool:
        self.checks[0] -= 1
        return self.checks[0] < 0


def test_a_plan_cut_short_by_the_deadline_is_feasible_not_optimal() -> None:
    """Stopped after round 1: the plan of round 1 (feasible, with round 1's optimum), labelled
    FEASIBLE, the jobs not frozen said in the detail. Stopped before round 1: no solution.
    A real time limit that has passed on arrival: no solution either."""
    problem = Catalog(jobs=64, per_type=40).problem
    params = WaterFillingParameters()
    full = water_fill(problem)
    assert len(round_levels(full)) >= 2
    cut = solve_water_filling(problem, params, Compat.NONE, SolveOptions(),
                              ExpiresAfter(checks=[1]))
    assert cut.certificate.termination is Termination.FEASIBLE
    assert "not frozen" in cut.certificate.detail
    assert len(round_levels(cut)) == 1
    check_feasible(problem, cut.time_share)
    assert cut.certificate.objective == pytest.approx(full.certificate.objective, rel=TOL)
    none = solve_water_filling(problem, params, Compat.NONE, SolveOptions(),
                               ExpiresAfter(checks=[0]))
    assert none.certificate.termination is Termination.NO_SOLUTION
    late = solve(problem, PolicyRequest("hierarchical_max_min_fairness", params),
                 SolveOptions(time_limit_s=1e-12))
    assert late.certificate.termination is Termination.NO_SOLUTION


def test_end_to_end_with_tenants_and_bad_tenant_fields() -> None:
    """Through the wire format: tenants parsed, the policy solves; bad tenant fields are
    reported with their field paths."""
    from google.protobuf import json_format

    from apportion.server.pipeline import solve_request
    from apportion.solver.errors import ValidationError
    from apportion.v1 import allocation_service_pb2 as pb

    doc = {
        "snapshot": {
            "cluster": {"acceleratorTypes": [{"name": "v100", "count": 2},
                                              {"name": "k80", "count": 2}]},
            "jobs": [
                {"id": "a", "tenant": "x", "throughput": {"v100": 3.0, "k80": 1.0}},
                {"id": "b", "tenant": "x", "throughput": {"v100": 2.0, "k80": 1.0}},
                {"id": "c", "tenant": "y", "throughput": {"v100": 4.0, "k80": 1.0}},
            ],
            "tenants": [
                {"name": "x", "weight": 2.0},
                {"name": "y", "sharing": "TENANT_SHARING_FIFO"},
            ],
        },
        "policy": {"name": "max_min_fairness_water_filling_perf"},
    }
    response = solve_request(json_format.ParseDict(doc, pb.SolveRequest()))
    assert response.stats.termination == pb.TERMINATION_REASON_OPTIMAL
    assert response.stats.policy == "hierarchical_max_min_fairness"
    assert len(response.plan.jobs) == 3
    doc["snapshot"]["tenants"] = [{"name": "x", "weight": -1.0}, {"name": "x"}]  # type: ignore[index]
    with pytest.raises(ValidationError) as caught:
        solve_request(json_format.ParseDict(doc, pb.SolveRequest()))
    fields = {v.field for v in caught.value.violations}
    assert {"snapshot.tenants[0].weight", "snapshot.tenants[1].name"} <= fields
    # a job naming a tenant the snapshot does not list (once it lists any)
    doc["snapshot"]["tenants"] = [{"name": "x", "weight": 2.0}]  # type: ignore[index]
    with pytest.raises(ValidationError) as caught:
        solve_request(json_format.ParseDict(doc, pb.SolveRequest()))
    assert [v.field for v in caught.value.violations] == ["snapshot.jobs[2].tenant"]
    assert "unknown tenant 'y'" in caught.value.violations[0].description
    # with no list, tenant names are labels of weight 1; other policies ignore tenants
    doc["snapshot"]["tenants"] = []  # type: ignore[index]
    assert solve_request(json_format.ParseDict(doc, pb.SolveRequest())).plan.jobs
    doc["snapshot"]["tenants"] = [{"name": "x", "weight": 2.0}]  # type: ignore[index]
    doc["policy"] = {"name": "max_min_fairness_perf"}
    assert solve_request(json_format.ParseDict(doc, pb.SolveRequest())).plan.jobs
