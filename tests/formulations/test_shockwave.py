"""Shockwave's planning window (A4.2-A4.7, docs/policies/market.md) proven by independent routes.

* The remaining-time predictor against hand-computed values.
* Brute force over every plan for n*T <= 16 (an independent vectorized evaluation of the exact
  piecewise-linear objective) matches the MILP optimum at gap 0.
* The LP relaxation bounds the MILP; the reported bound is consistent.
* The upstream model with SOS2 indicators (scipy.optimize.milp) and a second MILP solver (SCIP
  through OR-Tools) reach the same optimum; permuting jobs leaves it unchanged.
* The ranking MILP with unit gangs has an integral LP relaxation (transportation problem).
* Capacity holds in every round (also after the work-conserving fill); round 0 is non-empty.
* Guard semantics: guarded plans meet the guard; fallback priorities follow the formula and the
  ranking MILP preserves every job's round count.
* Time-unit and time-origin metamorphic relations (the compat-shockwave origin quirk).
* Bad inputs with field paths; one request end to end.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

import apportion.formulations.shockwave as sw
from apportion.formulations.shockwave_predict import remaining_time_s
from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.errors import ValidationError
from apportion.solver.model import Compat, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import RemainingTimePredictor, ShockwaveParameters
from apportion.solver.result import Plan, Termination
from apportion.solver.solve import solve
from apportion.v1 import allocation_service_pb2 as service_pb

Array = NDArray[np.float64]


# --------------------------------------------------------------------------------------------
# predictor


def test_oracle_is_sum_of_remaining_durations() -> None:
    d = np.array([10.0, 20.0, 30.0, 40.0])
    b = np.array([8, 8, 16, 16])
    assert remaining_time_s(d, b, 1, RemainingTimePredictor.ORACLE) == 90.0
    assert remaining_time_s(d, b, 4, RemainingTimePredictor.ORACLE) == 0.0


def test_dirichlet_single_regime_by_hand() -> None:
    """|B| = 1: expected epochs E, remaining E - e, each of the mean duration, times the
    rescaling (E - e) / max(floor(E - e + 1), E - e) = (E - e)/(E - e + 1)."""
    d = np.array([10.0, 12.0, 14.0, 16.0, 18.0])  # mean 14
    b = np.full(5, 32)
    assert remaining_time_s(d, b, 2) == pytest.approx(3 * 14.0 * 3 / 4)


def test_dirichlet_two_regimes_by_hand() -> None:
    """E = 4, batch sizes (8, 8, 16, 16), durations (10, 10, 30, 30), e = 1 (one epoch at 8).
    Prior 2 each; posterior (3, 2), total 5; expected epochs 4*(3/5, 2/5) = (2.4, 1.6);
    remaining (1.4, 1.6) -> S = 3, time 1.4*10 + 1.6*30 = 62; scale 3 / max(floor(4), 3)."""
    d = np.array([10.0, 10.0, 30.0, 30.0])
    b = np.array([8, 8, 16, 16])
    assert remaining_time_s(d, b, 1) == pytest.approx(62.0 * 3 / 4)
    assert remaining_time_s(d, b, 4) == 0.0


# --------------------------------------------------------------------------------------------
# instances


@st.composite
def windows(draw: st.DrawFn, max_cells: int = 12) -> tuple[Problem, int]:
    n = draw(st.integers(1, 4))
    T = draw(st.integers(1, max(1, max_cells // n)))
    G = draw(st.integers(1, 4))
    s = [draw(st.sampled_from([v for v in (1, 2, 4) if v <= G])) for _ in range(n)]
    durations, batches, done = [], [], []
    for _ in range(n):
        E = draw(st.integers(1, 6))
        durations.append([draw(st.floats(30.0, 400.0)) for _ in range(E)])
        batches.append([draw(st.sampled_from([16, 32, 64])) for _ in range(E)])
        done.append(draw(st.integers(0, E - 1)))
    arrival = [draw(st.floats(0.0, 500.0)) for _ in range(n)]
    reference = [a + draw(st.floats(100.0, 5000.0)) for a in arrival]
    now = max(arrival) + draw(st.floats(0.0, 500.0))
    problem = sw.window_problem(G, s, durations, batches, done, arrival, reference, now, 120.0)
    return problem, T


def params(T: int, kappa: float = 1e-3, **kw: object) -> ShockwaveParameters:
    return ShockwaveParameters(planning_rounds=T, makespan_weight=kappa, **kw)  # type: ignore[arg-type]


def state(
    problem: Problem, p: ShockwaveParameters, compat: Compat = Compat.NONE
) -> sw.ShockwaveState:
    return sw.prepare(problem, p, compat, np.arange(problem.jobs.num_jobs))


def brute_force(inp: sw.WindowInputs, pi: Array) -> float:
    """Best objective over every capacity-feasible plan, evaluated independently: planned
    epochs min(Delta N/delta, E - e), linear interpolation of log on the breakpoints written
    out segment by segment, makespan of the remaining times."""
    n, T = inp.n, inp.T
    plans = np.array(list(itertools.product((0, 1), repeat=n * T)), dtype=np.int8).reshape(-1, T, n)
    ok = np.all(np.einsum("ptn,n->pt", plans, inp.s) <= inp.G, axis=1)
    plans = plans[ok]
    N = plans.sum(axis=1).astype(np.float64)  # (plans, n)
    p = np.minimum(inp.round_s * N / inp.delta, inp.E - inp.e)
    v = (inp.e + p) / inp.E
    b = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    logs = [math.log(1e-6)] + [math.log(x) for x in b[1:]]
    ell = np.empty_like(v)
    for k in range(5):
        inside = (v >= b[k]) & (v <= b[k + 1])
        w = (v - b[k]) / (b[k + 1] - b[k])
        ell = np.where(inside, (1 - w) * logs[k] + w * logs[k + 1], ell)
    rem = np.maximum(inp.P - inp.delta * p, 0.0)
    values = (ell @ pi) / (n * T) - inp.kappa * rem.max(axis=1)
    return float(values.max())


@given(windows(max_cells=16), st.sampled_from([0.0, 1e-3, 1e-1]))
def test_brute_force_matches_milp_at_gap_zero(case: tuple[Problem, int], kappa: float) -> None:
    problem, T = case
    inp = sw.prepare(problem, params(T, kappa), Compat.NONE, np.arange(problem.jobs.num_jobs))
    inputs = inp.inputs
    pi = np.linspace(1.0, 2.0, inputs.n)
    sol = sw.solve_window(inputs, pi, None, gap=0.0)
    assert sol.status == "optimal"
    best = brute_force(inputs, pi)
    assert sol.objective == pytest.approx(best, rel=1e-7, abs=1e-9)
    assert sol.bound is not None and sol.bound >= sol.objective - 1e-9
    # capacity in every round
    assert np.all(sol.x.astype(int) @ inputs.s <= inputs.G)
    # the LP relaxation bounds the MILP
    relaxed = sw.solve_window(inputs, pi, None, gap=0.0, relax=True)
    assert relaxed.objective >= sol.objective - 1e-7


def upstream_sos2_optimum(inp: sw.WindowInputs, pi: Array) -> float:
    """The upstream model with the SOS2 indicators z (mu <= z, sum z <= 2, z_k + z_k' <= 1 for
    |k - k'| >= 2), written independently with dense rows for scipy.optimize.milp."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    n, T, K = inp.n, inp.T, 6
    b = np.array([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    logb = np.log(np.maximum(b, 1e-6))
    nx = n * T
    X, P0, MU, Z, REM, MK = (
        0,
        nx,
        nx + n,
        nx + n + n * K,
        nx + n + 2 * n * K,
        nx + 2 * n + 2 * n * K,
    )
    nv = MK + 1
    rows: list[Array] = []
    lo: list[float] = []
    hi: list[float] = []

    def row(entries: dict[int, float], low: float, high: float) -> None:
        r = np.zeros(nv)
        for k, val in entries.items():
            r[k] += val
        rows.append(r)
        lo.append(low)
        hi.append(high)

    for t in range(T):
        row({X + i * T + t: float(inp.s[i]) for i in range(n)}, -np.inf, inp.G)
    for i in range(n):
        work = {X + i * T + t: -inp.round_s for t in range(T)}
        work[P0 + i] = float(inp.delta[i])
        row(work, -np.inf, 0.0)
        interp = {MU + i * K + k: float(b[k]) for k in range(K)}
        interp[P0 + i] = -1.0 / float(inp.E[i])
        e_over = float(inp.e[i] / inp.E[i])
        row(interp, e_over, e_over)
        row({MU + i * K + k: 1.0 for k in range(K)}, 1.0, 1.0)
        row({REM + i: 1.0, P0 + i: float(inp.delta[i])}, float(inp.P[i]), np.inf)
        row({MK: 1.0, REM + i: -1.0}, 0.0, np.inf)
        for k in range(K):
            row({MU + i * K + k: 1.0, Z + i * K + k: -1.0}, -np.inf, 0.0)
        row({Z + i * K + k: 1.0 for k in range(K)}, -np.inf, 2.0)
        for k in range(K):
            for k2 in range(k + 2, K):
                row({Z + i * K + k: 1.0, Z + i * K + k2: 1.0}, -np.inf, 1.0)
    c = np.zeros(nv)
    for i in range(n):
        c[MU + i * K : MU + (i + 1) * K] = -pi[i] * logb / (n * T)
    c[MK] = inp.kappa
    upper = np.full(nv, np.inf)
    upper[:nx] = 1
    upper[Z : Z + n * K] = 1
    upper[P0 : P0 + n] = inp.E - inp.e
    integrality = np.zeros(nv)
    integrality[:nx] = 1
    integrality[Z : Z + n * K] = 1
    res = milp(
        c,
        constraints=LinearConstraint(np.array(rows), lo, hi),
        integrality=integrality,
        bounds=Bounds(np.zeros(nv), upper),
        options={"mip_rel_gap": 0.0},
    )
    assert res.status == 0
    return float(-res.fun)


@given(windows(max_cells=8))
def test_sos2_binaries_change_nothing(case: tuple[Problem, int]) -> None:
    problem, T = case
    inputs = state(problem, params(T)).inputs
    pi = np.ones(inputs.n)
    ours = sw.solve_window(inputs, pi, None, gap=0.0)
    assert ours.objective == pytest.approx(upstream_sos2_optimum(inputs, pi), rel=1e-7, abs=1e-8)


@given(windows())
def test_policy_plan_is_feasible_and_filled(case: tuple[Problem, int]) -> None:
    problem, T = case
    plan = solve(problem, PolicyRequest("shockwave", params(T)))
    assert plan.certificate.termination is Termination.OPTIMAL
    assert plan.window is not None
    s = problem.jobs.scale_factor
    G = int(problem.cluster.count.sum())
    used = plan.window.schedule.astype(int) @ s
    assert np.all(used <= G)
    # work-conserving: no unscheduled job with work left fits in a round's leftover devices
    for t in range(T):
        idle = G - used[t]
        waiting = ~plan.window.schedule[t]
        assert not np.any(waiting & (s <= idle))
    assert plan.window.schedule[0].any()
    np.testing.assert_array_equal(plan.time_share[:, 0], plan.window.schedule[0])
    cert = plan.certificate
    assert cert.gap is not None and cert.gap <= 1e-3 + 1e-12


@given(windows())
def test_guard_semantics(case: tuple[Problem, int]) -> None:
    problem, T = case
    p = params(T)
    st_ = state(problem, p)
    out = sw.run_window(problem, p, Compat.NONE, SolveOptions(), np.arange(problem.jobs.num_jobs))
    inp = st_.inputs
    n = inp.n
    share = min(1.0, inp.G / n)
    now, a, F = problem.time_s, problem.jobs.arrival_time_s, st_.reference
    if out.branch == "guarded":
        # every planned finish meets the guard (durations since arrival)
        planned = np.minimum(inp.round_s * out.solution.x.sum(axis=0) / inp.delta, inp.E - inp.e)
        rem = np.maximum(inp.P - inp.delta * planned, 0.0)
        lhs = now + inp.round_s * T - a + rem / share
        assert np.all(lhs <= 1.0 * (F - a) + 1e-6 * np.maximum(1.0, F - a))
        np.testing.assert_array_equal(out.pi, np.ones(n))
    else:
        rho = (now - a + inp.P / share) / (F - a)
        behind = np.where(inp.round_s > inp.P, rho**100.0, rho**12.0)
        expected = np.where(rho > 1.0, behind, 1.0)
        np.testing.assert_allclose(out.pi, np.minimum(expected, sw.MAX_PRIORITY), rtol=1e-12)
        assert out.unranked is not None
        np.testing.assert_array_equal(out.solution.x.sum(axis=0), out.unranked.sum(axis=0))
        assert np.all(out.solution.x.astype(int) @ inp.s <= inp.G)


def generous(problem: Problem) -> Problem:
    """Same problem with reference finish times far in the future: the guard is feasible."""
    from dataclasses import replace

    ref = problem.jobs.arrival_time_s + 1e7
    return replace(problem, history=replace(problem.history, reference_finish_time_s=ref))


@given(windows())
def test_generous_guard_takes_guarded_branch(case: tuple[Problem, int]) -> None:
    problem, T = case
    problem = generous(problem)
    out = sw.run_window(
        problem, params(T), Compat.NONE, SolveOptions(), np.arange(problem.jobs.num_jobs)
    )
    assert out.branch == "guarded"


@given(windows(max_cells=8), st.floats(0.1, 10.0))
def test_time_unit_change_leaves_problem_identical(case: tuple[Problem, int], alpha: float) -> None:
    """Multiplying every time by alpha and kappa by 1/alpha: same priorities, same optimum."""
    from dataclasses import replace

    problem, T = case
    jobs = problem.jobs
    scaled = replace(
        problem,
        jobs=replace(
            jobs,
            arrival_time_s=jobs.arrival_time_s * alpha,
            epoch_duration_s=tuple(d * alpha for d in jobs.epoch_duration_s),
        ),
        history=replace(
            problem.history,
            reference_finish_time_s=problem.history.reference_finish_time_s * alpha,
        ),
        time_s=problem.time_s * alpha,
        round_duration_s=problem.round_duration_s * alpha,
    )
    a = state(problem, params(T))
    b = state(scaled, params(T))
    np.testing.assert_allclose(b.rho, a.rho, rtol=1e-9)
    one = sw.solve_window(a.inputs, np.ones(a.inputs.n), None, gap=0.0)
    inputs_b = replace(b.inputs, kappa=a.inputs.kappa / alpha)
    two = sw.solve_window(inputs_b, np.ones(a.inputs.n), None, gap=0.0)
    assert two.objective == pytest.approx(one.objective, rel=1e-7, abs=1e-9)


def test_time_origin_shift_only_matters_in_compat() -> None:
    durations = [[100.0] * 10, [200.0] * 5]
    batches = [[32] * 10, [32] * 5]
    base = dict(scale_factor=[1, 1], durations=durations, batch_sizes=batches, epochs_done=[2, 1])

    def rho(shift: float, compat: Compat) -> Array:
        problem = sw.window_problem(
            1,
            arrival_time_s=[shift, shift + 50.0],
            reference_finish_time_s=[shift + 1500.0, shift + 1800.0],
            time_s=shift + 300.0,
            round_duration_s=120.0,
            **base,  # type: ignore[arg-type]
        )
        return state(problem, params(4), compat).rho

    np.testing.assert_allclose(rho(0.0, Compat.NONE), rho(1e5, Compat.NONE), rtol=1e-9)
    assert not np.allclose(rho(0.0, Compat.SHOCKWAVE), rho(1e5, Compat.SHOCKWAVE), rtol=1e-3)


def test_fallback_priority_precedence_follows_upstream() -> None:
    """Upstream `relax_finish_time_constraints`: rho > rho_max gives rho^lambda, raised to
    rho^100 when less than one round of work is left; every other job keeps 1 (a short job on
    schedule is not demoted)."""
    rho = np.array([2.0, 1.1, 2.0, 0.5, 0.5])
    P = np.array([500.0, 50.0, 50.0, 50.0, 500.0])
    pi = sw.priorities(rho, P, 120.0, 12.0, 1.0)
    np.testing.assert_allclose(pi, [2.0**12, 1.1**100, sw.MAX_PRIORITY, 1.0, 1.0])


def test_ranking_milp_front_loads_high_priority() -> None:
    x, _ = sw.rank_rounds(np.array([2, 2]), np.array([1, 1]), np.array([10.0, 1.0]), 1, 4)
    assert x is not None
    np.testing.assert_array_equal(x[:, 0], [True, True, False, False])


# --------------------------------------------------------------------------------------------
# wire level


def request(**changes: object) -> service_pb.SolveRequest:
    req = service_pb.SolveRequest()
    acc = req.snapshot.cluster.accelerator_types.add()
    acc.name, acc.count = "v100", 4
    req.snapshot.time_s = 600.0
    for k in range(3):
        job = req.snapshot.jobs.add()
        job.id = f"j{k}"
        job.scale_factor = 1 + k
        job.arrival_time_s = 100.0 * k
        job.throughput["v100"] = 1.0  # the snapshot rules require a usable type; not read
        job.progress.total_epochs = 4
        job.progress.epochs_done = k
        job.epoch_profile.epoch_duration_s.extend([60.0, 60.0, 90.0, 90.0])
        job.epoch_profile.batch_size.extend([32, 32, 64, 64])
    req.policy.name = "shockwave"
    req.policy.shockwave.planning_rounds = 5
    return req


def test_end_to_end_rounds_and_reference_state() -> None:
    response = solve_request(request())
    assert response.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    assert len(response.plan.rounds) == 5
    assert "branch" in response.stats.formulation
    for round_msg in response.plan.rounds:
        assert sum(g.devices for g in round_msg.grants) <= 4
    first = {g.job_id for g in response.plan.rounds[0].grants}
    for job in response.plan.jobs:
        assert job.HasField("reference_finish_time_s") and job.reference_finish_time_s > 0
        assert (job.time_share.get("v100", 0.0) == 1.0) == (job.job_id in first)
    # the returned state, sent back, is used as is
    again = request()
    for job in response.plan.jobs:
        entry = again.snapshot.history.jobs.add()
        entry.job_id = job.job_id
        entry.reference_finish_time_s = job.reference_finish_time_s
    second = solve_request(again)
    assert [j.reference_finish_time_s for j in second.plan.jobs] == [
        j.reference_finish_time_s for j in response.plan.jobs
    ]


def test_bad_inputs_have_field_paths() -> None:
    req = request()
    jobs = req.snapshot.jobs
    jobs[0].progress.epochs_done = 7  # > total 4
    jobs[1].epoch_profile.batch_size.append(64)  # lengths differ
    jobs[2].epoch_profile.epoch_duration_s[1] = 0.0
    jobs[2].epoch_profile.batch_size[3] = -1
    jobs[1].scale_factor = 8  # more than the cluster has
    req.policy.shockwave.planning_rounds = 0
    req.policy.shockwave.makespan_weight = -1.0
    with pytest.raises(ValidationError) as err:
        request_to_model(req)
    fields = {v.field for v in err.value.violations}
    assert {
        "snapshot.jobs[0].progress.epochs_done",
        "snapshot.jobs[1].epoch_profile.batch_size",
        "snapshot.jobs[2].epoch_profile.epoch_duration_s[1]",
        "snapshot.jobs[2].epoch_profile.batch_size[3]",
        "snapshot.jobs[1].scale_factor",
        "policy.shockwave.planning_rounds",
        "policy.shockwave.makespan_weight",
    } <= fields


def test_shockwave_needs_homogeneous_cluster_and_full_profile() -> None:
    req = request()
    acc = req.snapshot.cluster.accelerator_types.add()
    acc.name, acc.count = "k80", 2
    del req.snapshot.jobs[0].epoch_profile.epoch_duration_s[3]
    del req.snapshot.jobs[0].epoch_profile.batch_size[3]
    with pytest.raises(ValidationError) as err:
        request_to_model(req)
    fields = {v.field for v in err.value.violations}
    assert "snapshot.cluster.accelerator_types" in fields
    assert "snapshot.jobs[0].epoch_profile.epoch_duration_s" in fields


def test_finished_jobs_are_reported() -> None:
    problem = sw.window_problem(2, [1, 1], [[50.0, 50.0], [60.0]], [[8, 8], [8]], [2, 0])
    plan: Plan = solve(problem, PolicyRequest("shockwave", params(3)))
    assert plan.job_status[0].value == "finished"
    assert plan.window is not None and not plan.window.schedule[:, 0].any()


def test_changing_thread_counts_between_solves() -> None:
    """HiGHS keeps a per-process scheduler; successive solves with different thread counts must
    all succeed (a server worker sees requests with different options.threads)."""
    problem = sw.window_problem(2, [1, 1], [[50.0, 50.0], [60.0]], [[8, 8], [8]], [0, 0])
    for threads in (2, 1, 0, 3):
        plan = solve(problem, PolicyRequest("shockwave", params(3)), SolveOptions(threads=threads))
        assert plan.certificate.termination is Termination.OPTIMAL


@given(st.integers(1, 5), st.integers(1, 6), st.integers(1, 4), st.data())
def test_ranking_lp_is_integral_with_unit_gangs(
    n: int, T: int, G: int, data: st.DataObject
) -> None:
    """With every s_i = 1 the ranking program is a transportation problem (totally unimodular,
    A4.7 #6): its LP relaxation has an integral optimal vertex with the MILP's value."""
    from scipy.optimize import linprog

    rounds = np.array([data.draw(st.integers(0, T)) for _ in range(n)])
    # make the round counts fit: at most G jobs per round
    while rounds.sum() > G * T:
        rounds[int(np.argmax(rounds))] -= 1
    pi = np.array([data.draw(st.floats(0.5, 50.0)) for _ in range(n)])
    x, _ = sw.rank_rounds(rounds, np.ones(n, np.int64), pi, G, T)
    assert x is not None
    np.testing.assert_array_equal(x.sum(axis=0), rounds)
    weight = np.where(rounds > 0, pi / np.maximum(rounds, 1), 0.0)
    cost = (weight[:, None] * (np.arange(T)[None, :] + 1.0)).ravel()  # variable i*T + t
    a_eq = np.kron(np.eye(n), np.ones((1, T)))
    a_ub = np.kron(np.ones((1, n)), np.eye(T))
    res = linprog(
        cost,
        A_ub=a_ub,
        b_ub=np.full(T, G),
        A_eq=a_eq,
        b_eq=rounds,
        bounds=(0, 1),
        method="highs-ds",
    )
    assert res.status == 0
    assert np.allclose(res.x, np.round(res.x), atol=1e-9)
    milp_value = float(cost @ x.T.ravel())
    assert milp_value == pytest.approx(res.fun, rel=1e-9, abs=1e-9)


@given(windows(max_cells=12), st.randoms(use_true_random=False))
def test_permuting_jobs_leaves_the_optimum(case: tuple[Problem, int], rnd: object) -> None:
    from dataclasses import replace

    problem, T = case
    n = problem.jobs.num_jobs
    order = list(range(n))
    rnd.shuffle(order)  # type: ignore[attr-defined]
    idx = np.array(order)
    inputs = state(problem, params(T)).inputs
    permuted = replace(
        inputs,
        s=inputs.s[idx],
        E=inputs.E[idx],
        e=inputs.e[idx],
        delta=inputs.delta[idx],
        P=inputs.P[idx],
    )
    one = sw.solve_window(inputs, np.ones(n), None, gap=0.0)
    two = sw.solve_window(permuted, np.ones(n), None, gap=0.0)
    assert two.objective == pytest.approx(one.objective, rel=1e-7, abs=1e-9)


def scip_optimum(inp: sw.WindowInputs, pi: Array) -> float:
    """The window program (lambda form) on a second MILP solver: SCIP through OR-Tools."""
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("SCIP")
    if solver is None:
        pytest.skip("SCIP not available in this OR-Tools build")
    n, T = inp.n, inp.T
    b = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    logb = [math.log(1e-6)] + [math.log(v) for v in b[1:]]
    x = [[solver.BoolVar(f"x{i}_{t}") for t in range(T)] for i in range(n)]
    p = [solver.NumVar(0, float(inp.E[i] - inp.e[i]), f"p{i}") for i in range(n)]
    mu = [[solver.NumVar(0, 1, f"mu{i}_{k}") for k in range(6)] for i in range(n)]
    rem = [solver.NumVar(0, solver.infinity(), f"r{i}") for i in range(n)]
    makespan = solver.NumVar(0, solver.infinity(), "M")
    for t in range(T):
        solver.Add(sum(int(inp.s[i]) * x[i][t] for i in range(n)) <= inp.G)
    for i in range(n):
        solver.Add(float(inp.delta[i]) * p[i] <= inp.round_s * sum(x[i]))
        solver.Add(
            sum(b[k] * mu[i][k] for k in range(6)) == (float(inp.e[i]) + p[i]) / float(inp.E[i])
        )
        solver.Add(sum(mu[i]) == 1)
        solver.Add(rem[i] >= float(inp.P[i]) - float(inp.delta[i]) * p[i])
        solver.Add(makespan >= rem[i])
    solver.Maximize(
        sum(float(pi[i]) * logb[k] * mu[i][k] for i in range(n) for k in range(6)) / (n * T)
        - inp.kappa * makespan
    )
    solver.SetSolverSpecificParametersAsString("limits/gap = 0\n")
    assert solver.Solve() == pywraplp.Solver.OPTIMAL
    return float(solver.Objective().Value())


@given(windows(max_cells=8))
def test_second_milp_solver_agrees(case: tuple[Problem, int]) -> None:
    problem, T = case
    inputs = state(problem, params(T)).inputs
    pi = np.linspace(1.0, 3.0, inputs.n)
    ours = sw.solve_window(inputs, pi, None, gap=0.0)
    assert ours.objective == pytest.approx(scip_optimum(inputs, pi), rel=1e-6, abs=1e-7)


@given(windows())
def test_a_window_too_large_for_the_time_left_is_not_started(
    case: tuple[Problem, int],
) -> None:
    """With less time left than HiGHS needs before it first reads its limit (here: any time,
    by making the allowance per nonzero huge), no MILP runs: the answer comes at once, says so,
    is never optimal, and any schedule it returns fits the devices."""
    from apportion.solver.backends.highs_startup import StartupCost
    from apportion.solver.deadline import Deadline

    problem, T = case
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sw, "MILP", StartupCost(per_nonzero_s=1e9))
        plan = solve(problem, PolicyRequest("shockwave", params(T)),
                     deadline=Deadline.after(3600.0))
    assert plan.certificate.termination is not Termination.OPTIMAL
    assert "not started" in plan.certificate.detail
    if plan.window is not None:
        used = plan.window.schedule.astype(int) @ problem.jobs.scale_factor
        assert np.all(used <= int(problem.cluster.count.sum()))
