"""Sia under a deadline: cut at every place it looks at the deadline (a countdown), the answer
is a plan within the capacity with a valid bound, `optimal` only when the gap is closed; a cut
anywhere (the Lagrangian bound has a bound and prices from its first evaluation) answers with
the best plan read off its prices (`feasible`), never with no plan. The vectorized greedy
fills and LP rounding against their rules written plainly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apportion.datasets.generators import builtin_throughputs, gavel_workload, make_cluster
from apportion.datasets.snapshot import build_request, builtin_goodputs
from apportion.formulations import sia, sia_ilp
from apportion.server.convert import request_to_model
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import PolluxParameters, SiaParameters
from apportion.solver.result import Certificate, ModelSize, Plan, Termination
from apportion.solver.solve import solve
from tests.countdown import CountdownDeadline, ReservingDeadline
from tests.formulations.test_pollux_policy import brute_force_fitness
from tests.formulations.test_sia import brute_force, instance_of, problems


def sia_problem(jobs: int) -> tuple[Problem, object, object]:
    """A congested seeded snapshot with per-configuration goodputs (as the benchmarks')."""
    table = gavel_workload(jobs, seed=3)
    cluster = make_cluster(total=max(8, int(0.75 * jobs)), mix={"v100": 1, "p100": 1, "k80": 1})
    request, _ = build_request(table, cluster, builtin_throughputs(cluster.types), 0.0, seed=3,
                               policy="sia", goodputs=builtin_goodputs(cluster, seed=3))
    return request_to_model(request)


def assert_within_capacity(problem: Problem, plan: Plan) -> None:
    assert plan.configurations is not None
    used = np.zeros(problem.cluster.num_types, np.int64)
    for choice in plan.configurations.choices:
        if choice is not None:
            used[choice.type_index] += choice.devices
    assert np.all(used <= problem.cluster.count)


def assert_brackets(cert: Certificate, optimum: float, tolerance: float) -> None:
    """The plan's objective and the proven bound lie on either side of `optimum` (within
    `tolerance`, relative); a `feasible` answer says it stopped at the time limit."""
    assert cert.objective is not None and cert.bound is not None
    slack = tolerance * max(1.0, abs(optimum))
    if cert.maximize:
        assert cert.objective <= optimum + slack and cert.bound >= optimum - slack
    else:
        assert cert.objective >= optimum - slack and cert.bound <= optimum + slack
    if cert.termination is Termination.FEASIBLE:
        assert "time limit" in cert.detail


def test_a_cut_at_every_look_gives_a_plan_with_a_valid_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sia_ilp, "DEADLINE_EVERY_JOBS", 16)  # look often in a small problem
    problem, policy, options = sia_problem(120)
    whole = CountdownDeadline(checks=10**9)
    best = solve(problem, policy, options, whole)  # type: ignore[arg-type]
    assert best.certificate.termination is Termination.OPTIMAL
    optimum, looks = best.certificate.objective, whole.looks[0]
    assert optimum is not None and looks > 10
    seen = set()
    for checks in range(looks + 1):
        plan = solve(problem, policy, options, CountdownDeadline(checks=checks))  # type: ignore[arg-type]
        cert = plan.certificate
        seen.add(cert.termination)
        assert cert.termination in (Termination.OPTIMAL, Termination.FEASIBLE), cert.detail
        assert_within_capacity(problem, plan)
        assert_brackets(cert, optimum, 1e-4)
    assert Termination.FEASIBLE in seen, seen  # some cuts answer with the plan so far


# --------------------------------------------------------------------------------------------
# the vectorized greedy fills against the rule written plainly, and plans at a passed deadline


def take_one_by_one(instance: sia_ilp.SiaInstance, order: np.ndarray, cost: np.ndarray,
                    choice: np.ndarray, used: np.ndarray) -> None:
    """`_take_best_fitting`'s rule, job by job: in `order`, a job without a configuration
    takes its cheapest option with cost < 0 (ties: the lowest index) that still fits."""
    for i in order.tolist():
        if choice[i] >= 0:
            continue
        for k in np.argsort(cost[i], kind="stable").tolist():
            if not cost[i, k] < 0:
                break
            t, d = instance.config_type[k], instance.config_devices[k]
            if used[t] + d <= instance.capacity[t]:
                choice[i], used[t] = k, used[t] + d
                break


@st.composite
def fills(draw: st.DrawFn) -> tuple[sia_ilp.SiaInstance, np.ndarray, np.ndarray, np.ndarray]:
    """A random instance (1-3 types, 1-6 configurations, 1-40 jobs, tight capacities), a cost
    matrix with forbidden (inf) and unattractive (>= 0) options and many ties, an order of
    some of the jobs, and a start where some jobs already hold a configuration."""
    types = draw(st.integers(1, 3))
    configs = draw(st.integers(1, 6))
    m = draw(st.integers(1, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    config_type = rng.integers(0, types, configs)
    devices = rng.choice([1, 2, 4, 8], configs)
    cost = rng.choice([-3.0, -2.0, -1.0, -0.5, 0.0, 1.0, np.inf], (m, configs))
    start = np.where(rng.random(m) < 0.2, rng.integers(0, configs, m), -1)
    instance = sia_ilp.SiaInstance(
        config_type=config_type, config_devices=devices,
        capacity=rng.integers(0, 3 * m, types), coefficient=np.zeros((m, configs)),
        allowed=np.ones((m, configs), bool), weight=np.ones(m), no_allocation_penalty=0.0,
        maximize=False, pinned=start)
    order = rng.permutation(m)[: draw(st.integers(0, m))]
    return instance, order, cost, start


@settings(max_examples=300)
@given(fills(), st.sampled_from([1, 3, 4096]))
def test_the_vectorized_fill_takes_the_jobs_one_by_ones_options(
    case: tuple[sia_ilp.SiaInstance, np.ndarray, np.ndarray, np.ndarray], every: int,
) -> None:
    """The same plan as the rule taken job by job, whatever the block between looks at the
    deadline."""
    instance, order, cost, _ = case
    choice, used, _ = sia_ilp._start(instance)
    want_choice, want_used = choice.copy(), used.copy()
    take_one_by_one(instance, order, cost, want_choice, want_used)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sia_ilp, "DEADLINE_EVERY_JOBS", every)
        sia_ilp._take_best_fitting(instance, order, cost, choice, used)
    assert choice.tolist() == want_choice.tolist()
    assert used.tolist() == want_used.tolist()


@settings(max_examples=100)
@given(fills(), st.integers(0, 6))
def test_a_fill_cut_by_the_deadline_keeps_what_it_took_and_stays_within_capacity(
    case: tuple[sia_ilp.SiaInstance, np.ndarray, np.ndarray, np.ndarray], checks: int,
) -> None:
    instance, order, cost, start = case
    choice, used, _ = sia_ilp._start(instance)
    full_choice, full_used = choice.copy(), used.copy()
    take_one_by_one(instance, order, cost, full_choice, full_used)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sia_ilp, "DEADLINE_EVERY_JOBS", 2)
        sia_ilp._take_best_fitting(instance, order, cost, choice, used,
                                   CountdownDeadline(checks))
    taken = choice >= 0
    assert np.all((choice == full_choice) | ~taken)  # the jobs it reached: as the full fill
    again = np.bincount(instance.config_type[choice[taken]],
                        weights=instance.config_devices[choice[taken]],
                        minlength=instance.capacity.size)
    assert used.tolist() == again.tolist()
    assert np.all((used <= instance.capacity) | (start >= 0).any())  # the start may overfill


def round_job_by_job(instance: sia_ilp.SiaInstance, fractional: np.ndarray) -> np.ndarray:
    """`round_relaxation`'s rule written plainly for instances without pinned jobs."""
    choice = np.full(instance.num_jobs, -1, np.int64)
    rows, cols = np.nonzero(fractional >= 1 - 1e-6)
    choice[rows] = cols
    used = np.zeros(instance.capacity.size, np.int64)
    np.add.at(used, instance.config_type[cols], instance.config_devices[cols])
    jobs, confs, cost = sia_ilp._columns(instance)
    dense = np.full(instance.coefficient.shape, np.inf)
    dense[jobs, confs] = cost
    open_jobs = np.flatnonzero(choice < 0)
    order = open_jobs[np.argsort(dense[open_jobs].min(axis=1), kind="stable")]
    take_one_by_one(instance, order, dense, choice, used)
    return choice


@settings(max_examples=100)
@given(st.integers(0, 10**6), st.booleans())
def test_rounding_an_lp_point_follows_the_rule(seed: int, pin: bool) -> None:
    """Jobs the LP assigns integrally keep their configuration, the others take their best
    option that fits in order of their best gain; with pinned jobs the plan stays feasible."""
    rng = np.random.default_rng(seed)
    m, configs = int(rng.integers(1, 30)), 6
    coef = rng.uniform(0.1, 3.0, (m, configs))
    pinned = np.where(pin & (rng.random(m) < 0.2), rng.integers(0, configs, m), -1)
    instance = sia_ilp.SiaInstance(
        config_type=np.array([0, 0, 0, 1, 1, 1]), config_devices=np.array([1, 2, 4, 1, 2, 4]),
        capacity=rng.integers(m // 2, 2 * m + 1, 2), coefficient=coef,
        allowed=rng.random((m, configs)) < 0.8, weight=np.ones(m),
        no_allocation_penalty=0.3, maximize=True, pinned=pinned)
    lp = sia_ilp.solve_highs(instance, relax=True)
    if lp.fractional is None:
        return
    got = sia_ilp.round_relaxation(instance, lp.fractional)
    if not pin:
        assert got.tolist() == round_job_by_job(instance, lp.fractional).tolist()
    elif not violations_of_lp_start(instance, lp.fractional):
        assert not sia_ilp.violations_of(instance, got)


def violations_of_lp_start(instance: sia_ilp.SiaInstance, fractional: np.ndarray) -> bool:
    """Whether the LP's integral part alone already breaks a pin (then no rounding can help)."""
    whole = fractional >= 1 - 1e-6
    pinned = np.flatnonzero(instance.pinned >= 0)
    return bool((~whole[pinned, instance.pinned[pinned]]).any())


def sia_policy(p: float) -> PolicyRequest:
    return PolicyRequest("sia", SiaParameters(fairness_power=p), Compat.NONE)


def expired() -> Deadline:
    """A deadline already past."""
    return Deadline(0.0)


def solve_stage_cut() -> Deadline:
    """A deadline that never passes whose solve stage (what is left after holding back the
    time to build the plan) has already passed."""
    return ReservingDeadline(share=lambda seconds: Deadline(0.0))


@settings(max_examples=60)
@given(problems(), st.sampled_from([-0.5, -1.0, 0.5, 1.0]), st.sampled_from(["expired", "cut"]))
def test_a_plan_at_a_passed_deadline_is_feasible_with_a_valid_bound(
    problem: Problem, p: float, how: str,
) -> None:
    """At a deadline already past (or when only the solve stage's share has passed) Sia still
    answers with a plan read off the bound's prices: within capacity, every job with a
    status, `feasible` (or `optimal` when the gap is closed), and its objective and bound on
    either side of the brute-force optimum."""
    deadline = expired() if how == "expired" else solve_stage_cut()
    plan = solve(problem, sia_policy(p), SolveOptions(), deadline)
    cert = plan.certificate
    assert cert.termination in (Termination.FEASIBLE, Termination.OPTIMAL), cert.detail
    assert len(plan.job_status) == problem.jobs.num_jobs
    assert_within_capacity(problem, plan)
    exact = brute_force(instance_of(problem, SiaParameters(fairness_power=p)))
    assert_brackets(cert, exact, 1e-7)


@settings(max_examples=40)
@given(problems(max_jobs=4), st.sampled_from([-1.0, 0.5]), st.sampled_from(["expired", "cut"]))
def test_pollux_at_a_passed_deadline_answers_a_plan_with_a_valid_bound(
    problem: Problem, p: float, how: str,
) -> None:
    deadline = expired() if how == "expired" else solve_stage_cut()
    policy = PolicyRequest("pollux", PolluxParameters(fairness_power=p), Compat.NONE)
    plan = solve(problem, policy, SolveOptions(), deadline)
    cert = plan.certificate
    assert cert.termination in (Termination.FEASIBLE, Termination.OPTIMAL), cert.detail
    assert_within_capacity(problem, plan)
    exact = brute_force_fitness(problem, p)
    assert cert.objective is not None and cert.bound is not None
    assert cert.objective <= exact * (1 + 1e-7) + 1e-12
    assert cert.bound >= exact * (1 - 1e-7)


def test_a_later_route_keeps_the_better_plan_and_the_tighter_bound() -> None:
    """`solve_exact`'s answer after a HiGHS route: the better of the priced plan and the
    route's, with the tighter of both proven bounds, `optimal` only when they meet; a route
    that found nothing leaves the priced plan and its bound."""
    def result(status: SolverStatus, objective: float | None, bound: float | None,
               plan: int) -> sia_ilp.IlpResult:
        return sia_ilp.IlpResult(status, np.array([plan]), objective, bound, "s", "1", 0.0,
                                 ModelSize(), "d")

    priced = result(SolverStatus.TIME_LIMIT, 10.0, 6.0, 0)  # minimized: bound below
    nothing = result(SolverStatus.TIME_LIMIT, None, None, -1)
    kept = sia_ilp._better(priced, nothing, False, 1e-4)
    assert (kept.objective, kept.bound, kept.choice.tolist()) == (10.0, 6.0, [0])
    assert kept.status is SolverStatus.TIME_LIMIT and "time limit" in kept.detail
    better = sia_ilp._better(priced, result(SolverStatus.TIME_LIMIT, 8.0, 7.5, 1), False, 1e-4)
    assert (better.objective, better.bound, better.choice.tolist()) == (8.0, 7.5, [1])
    closed = sia_ilp._better(priced, result(SolverStatus.OPTIMAL, 10.0, 10.0, 1), False, 1e-4)
    assert closed.status is SolverStatus.OPTIMAL and closed.bound == 10.0
    assert closed.choice.tolist() == [0]  # a tie keeps the priced plan
    up = sia_ilp._better(result(SolverStatus.TIME_LIMIT, 5.0, 9.0, 0),
                         result(SolverStatus.TIME_LIMIT, 6.0, 8.0, 1), True, 1e-4)
    assert (up.objective, up.bound, up.choice.tolist()) == (6.0, 8.0, [1])


@pytest.mark.parametrize("policy", [sia_policy(-1.0),
                                    PolicyRequest("pollux", PolluxParameters(), Compat.NONE)])
def test_no_plan_is_started_that_would_end_well_past_the_deadline(
    policy: PolicyRequest, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the time left cannot cover the work before a first plan (here 1 s per job, with
    10 s left), the answer is `no_solution` at once, saying why; without a deadline, a plan."""
    problem, _, _ = sia_problem(24)
    monkeypatch.setattr(sia, "FIRST_PLAN_PER_JOB_S", 1.0)
    plan = solve(problem, policy, SolveOptions(), Deadline.after(10.0))
    assert plan.certificate.termination is Termination.NO_SOLUTION
    assert "not started" in plan.certificate.detail
    assert plan.configurations is None
    planned = solve(problem, policy, SolveOptions(), Deadline.never())
    assert planned.certificate.termination in (Termination.OPTIMAL, Termination.FEASIBLE)
