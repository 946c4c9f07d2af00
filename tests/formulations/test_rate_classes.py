"""The rate-class master for level LPs with space sharing (formulations/rate_classes.py):
equal to the job-level partner-cell LP (a second formulation, one group per demand) on
random instances; every decoded plan feasible and reaching its demands; the decode cuts
necessary; the per-job multipliers valid bounds for other demand vectors (what the
finish-time-fairness bracket relies on); and the makespan and finish-time-fairness policies
on this route equal the per-pair cvxpy programs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations import rate_classes
from apportion.formulations.packed_gavel import packed_cells
from apportion.formulations.rate_classes import DemandSolution, solve_demand_lp
from apportion.formulations.space_sharing import Groups, PackedLP, scaled, solve_level_lp
from apportion.solver.deadline import NO_DEADLINE
from apportion.solver.model import Colocations, Compat, Problem, SolverPreference
from apportion.solver.validation import make_problem
from tests.countdown import CountdownDeadline
from tests.formulations.test_packed_gavel import (
    FTF,
    MAKESPAN,
    reference_ftf,
    reference_makespan,
    solved,
    value,
    with_work,
)
from tests.formulations.test_space_sharing import check_decoded, typed_problem

REL = 1e-7


def one_type(rates: list[float], pair: list[float], counts: list[int], m: int) -> Problem:
    """m identical jobs of job type "a" on accelerator types x, y; "a" with itself shares
    at `pair` (steps/s per job)."""
    problem = make_problem(["x", "y"], counts, [rates] * m, [1] * m)
    coloc = Colocations(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 2)),
                        np.zeros((0, 2)), ("a",), ("a",), np.array([pair]), np.array([pair]))
    return replace(problem, jobs=replace(problem.jobs, job_type=("a",) * m), colocations=coloc)


def class_cells(problem: Problem) -> tuple[Groups, PackedLP]:
    """Rate classes of all jobs and their unit-scale cells, every class with a level row."""
    active = np.ones(problem.jobs.num_jobs, dtype=bool)
    cells = packed_cells(problem, "", Compat.NONE, active, active[:, None].astype(float))
    return cells.groups, replace(cells.base, level_rows=np.ones(cells.groups.size.size,
                                                                 dtype=bool))


def by_rate_class(problem: Problem, demand: np.ndarray) -> DemandSolution:
    return solve_demand_lp(problem, *class_cells(problem), demand, NO_DEADLINE, 1)


def job_level(problem: Problem, demand: np.ndarray) -> float:
    """The same LP with the demand in the group key (space_sharing's level LP): t*."""
    active = np.ones(problem.jobs.num_jobs, dtype=bool)
    cells = packed_cells(problem, "", Compat.NONE, active, demand[:, None])
    rep = cells.groups.rep
    sol = solve_level_lp(scaled(cells.base, 1.0 / demand[rep]), SolverPreference.HIGHS,
                         NO_DEADLINE, 1)
    assert sol.status == "optimal"
    return sol.t_lp


def check_plan(problem: Problem, sol: DemandSolution, demand: np.ndarray) -> None:
    """Each job's time <= 1, each type's devices <= W (a pair holds s devices once), pairs of
    two distinct jobs with equal scale factors, and every job reaches demand_i t."""
    plan = sol.plan
    s = problem.jobs.scale_factor.astype(float)
    m = s.size
    used = plan.single.sum(axis=1) + np.bincount(plan.pa, plan.share, minlength=m)
    used += np.bincount(plan.pb, plan.share, minlength=m)
    assert np.all(used <= 1 + 1e-7)
    devices = s @ plan.single + np.bincount(plan.pj, s[plan.pa] * plan.share,
                                            minlength=problem.cluster.num_types)
    assert np.all(devices <= problem.cluster.count + 1e-7)
    assert np.all(plan.pa != plan.pb) and np.all(s[plan.pa] == s[plan.pb])
    assert np.all(sol.thr >= demand * sol.t * (1 - 1e-6))


@st.composite
def typed_instances(draw: st.DrawFn) -> tuple[Problem, np.ndarray]:
    """Job types with several copies each (rate classes of more than one job, sometimes two
    per type), type-pair rates with a strong same-type pair half of the time, sometimes one
    explicit pair, and a demand per job."""
    copies = draw(st.lists(st.integers(1, 6), min_size=1, max_size=3))
    seed = draw(st.integers(0, 10**6))
    typed, _ = typed_problem(copies, seed)
    rng = np.random.default_rng(seed)
    m = typed.jobs.num_jobs
    if draw(st.booleans()):  # two rate classes per job type: a class's pairing is < S
        kind = np.unique(np.array(typed.jobs.job_type), return_inverse=True)[1].reshape(-1)
        second = np.array([np.sum(kind[:i] == kind[i]) % 2 for i in range(m)])
        typed = replace(typed, jobs=replace(
            typed.jobs, throughput=typed.jobs.throughput * (1 + 0.1 * second)[:, None]))
    coloc = typed.colocations
    assert coloc is not None
    if draw(st.booleans()):
        rows_a, rows_b = coloc.type_throughput_a.copy(), coloc.type_throughput_b.copy()
        for q, (a, b) in enumerate(zip(coloc.type_a, coloc.type_b, strict=True)):
            if a == b:
                job = typed.jobs.job_type.index(a)
                rows_a[q] = rows_b[q] = rng.uniform(0.7, 0.98) * typed.jobs.throughput[job]
        coloc = replace(coloc, type_throughput_a=rows_a, type_throughput_b=rows_b)
    if m >= 3 and draw(st.booleans()):
        a, b = rng.choice(m, 2, replace=False)
        thr = typed.jobs.throughput
        coloc = replace(coloc, job_a=np.array([a]), job_b=np.array([b]),
                        throughput_a=0.9 * thr[[a]], throughput_b=0.85 * thr[[b]])
    demand = np.array([draw(st.sampled_from([1.0, 2.0, 5.0, 20.0])) for _ in range(m)])
    return replace(typed, colocations=coloc), demand


@given(instance=typed_instances())
def test_equals_the_job_level_lp(instance: tuple[Problem, np.ndarray]) -> None:
    problem, demand = instance
    sol = by_rate_class(problem, demand)
    assert sol.status == "optimal"
    expected = job_level(problem, demand)
    assert sol.t == pytest.approx(expected, rel=REL, abs=1e-9)
    assert sol.bound is not None and sol.bound == pytest.approx(expected, rel=REL, abs=1e-9)
    assert sol.bound >= sol.t * (1 - 1e-9)
    check_plan(problem, sol, demand)


# 3 jobs of one type, devices x and y (one each), pairing at 60% of the isolated rate.
# Line cuts alone (per-class totals, F with the S/2 cap for one job) reach t = 12/17: the
# totals cannot be split so that no job pairs for more than half of the class's pairing
# while the two large jobs still reach 4t each. The decode LP's cut brings t to the
# job-level optimum 30/43.
NEEDS_DECODE_CUT = (one_type([2.0, 4.0], [1.2, 2.4], [1, 1], 3), np.array([4.0, 4.0, 1.0]))


def test_the_decode_cut_is_needed_and_reaches_the_job_level_optimum() -> None:
    problem, demand = NEEDS_DECODE_CUT
    sol = by_rate_class(problem, demand)
    assert sol.decode_cuts >= 1
    assert sol.t == pytest.approx(30 / 43, rel=REL)
    assert job_level(problem, demand) == pytest.approx(30 / 43, rel=REL)
    check_plan(problem, sol, demand)


def test_without_decode_cuts_the_master_overestimates(monkeypatch: pytest.MonkeyPatch) -> None:
    """The relaxation the decode cuts close: their absence is visible (bound 12/17 > t*)."""
    original = rate_classes._decode

    def without_cuts(*args: object, **kwargs: object) -> rate_classes.Decoded:
        decoded = original(*args, **kwargs)  # type: ignore[arg-type]
        decoded.cuts = []
        return decoded

    monkeypatch.setattr(rate_classes, "_decode", without_cuts)
    problem, demand = NEEDS_DECODE_CUT
    sol = by_rate_class(problem, demand)
    assert sol.bound == pytest.approx(12 / 17, rel=REL)


@given(instance=typed_instances(), seed=st.integers(0, 10**6))
def test_multipliers_bound_every_other_demand(instance: tuple[Problem, np.ndarray],
                                              seed: int) -> None:
    """y (on the rows d_i t - thr_i <= 0) with the bound V prove t*(d') <= V / sum y_i d'_i
    for any demand d' (the same dual point, scaled): what finish-time fairness uses to
    prove its lower bound."""
    problem, demand = instance
    sol = by_rate_class(problem, demand)
    assert sol.bound is not None
    assert float(sol.y @ demand) == pytest.approx(1.0, rel=1e-9)
    other = demand * np.random.default_rng(seed).uniform(0.2, 5.0, demand.size)
    assert job_level(problem, other) <= sol.bound / float(sol.y @ other) * (1 + 1e-7) + 1e-9


@given(copies=st.lists(st.integers(2, 4), min_size=1, max_size=3), seed=st.integers(0, 10**6))
def test_policies_on_rate_classes_equal_the_per_pair_programs(copies: list[int],
                                                              seed: int) -> None:
    """Every job has its own remaining work and arrival, so the policies take the rate-class
    route (at most half as many classes as jobs); makespan and finish-time fairness equal
    the per-pair cvxpy programs and their plans decode into feasible job pairs."""
    typed, explicit = typed_problem(copies, seed)
    rng = np.random.default_rng(seed)
    m = typed.jobs.num_jobs
    remaining = rng.uniform(100.0, 1000.0, m)
    elapsed = rng.uniform(0.0, 400.0, m)
    typed, explicit = (with_work(p, remaining, elapsed, elapsed * 0.5) for p in (typed, explicit))
    a = solved(typed, "min_makespan", MAKESPAN)
    assert "rate classes" in a.certificate.formulation
    assert value(a) == pytest.approx(reference_makespan(explicit), rel=1e-5)
    check_decoded(explicit, a)
    b = solved(typed, "themis_finish_time_fairness", FTF)
    assert "rate classes" in b.certificate.formulation
    assert value(b) == pytest.approx(reference_ftf(explicit, b), rel=1e-5)
    assert b.certificate.bound is not None and b.certificate.bound <= value(b) * (1 + 1e-9)
    check_decoded(explicit, b)


def test_decode_serves_a_master_point_slightly_over_its_budgets() -> None:
    """A master answer a little outside its rows (solver tolerance) still decodes: here a
    class's partner-cell totals exceed its jobs' budgets by 1e-6. The decode LP's budgets
    follow the master's point (the uniform split stays feasible), so it answers, and no job
    gets more than its class's own budget."""
    problem, demand = NEEDS_DECODE_CUT
    m = problem.jobs.num_jobs
    groups, lp = class_cells(problem)
    solver = rate_classes.DemandLP(problem, groups, lp, 1)
    solver.solve(demand, NO_DEADLINE)
    assert solver.master.last is not None
    x = solver.master.last.x.copy()
    ns, npc, nq, _ = lp.sizes
    cells_q = slice(ns + npc, ns + npc + nq)
    assert x[cells_q].sum() > 0
    x[:ns] = 0.0  # all the class's time in pairs, 1e-6 over its budget
    x[cells_q] *= (1 + 1e-6) / x[cells_q].sum()
    classes = rate_classes.Classes(groups, demand, lp.level_rows)
    decoded = rate_classes._decode(lp, solver.modes, classes, solver.expanded, x,
                                   solver.master.t_col, 1)
    fine = solver.expanded.lp
    used = np.bincount(fine.si, decoded.raw.x, minlength=m)
    used += np.bincount(fine.qg, decoded.raw.V, minlength=m)
    assert np.isfinite(decoded.worst)
    assert np.all(used <= 1 + 2e-6)


@given(instance=typed_instances(), seed=st.integers(0, 10**6))
def test_a_kept_master_serves_the_next_demand(instance: tuple[Problem, np.ndarray],
                                              seed: int) -> None:
    """The finish-time-fairness bracket solves one level after another on one master: the
    cuts of the first demand stay (their t coefficients retargeted), and the second answer
    equals the job-level LP for the second demand."""
    problem, demand = instance
    m = problem.jobs.num_jobs
    solver = rate_classes.DemandLP(problem, *class_cells(problem), 1)
    solver.solve(demand, NO_DEADLINE)
    other = demand * np.random.default_rng(seed).uniform(0.2, 5.0, m)
    sol = solver.solve(other, NO_DEADLINE)
    expected = job_level(problem, other)
    assert sol.status == "optimal"
    assert sol.t == pytest.approx(expected, rel=REL, abs=1e-9)
    assert sol.bound is not None and sol.bound == pytest.approx(expected, rel=REL, abs=1e-9)
    check_plan(problem, sol, other)


@pytest.mark.parametrize("checks", range(10))
def test_a_deadline_gives_an_explicit_status_and_a_feasible_plan(checks: int) -> None:
    """Cut short at any point, the rate-class route still answers: a feasible (repaired)
    plan with status `feasible`, or `no_solution`; the bound, when given, is below the
    makespan. (A deadline passing after a given number of checks, not a clock: no timing.)"""
    from apportion.solver.model import PolicyRequest, SolveOptions
    from apportion.solver.result import Termination
    from apportion.solver.solve import solve

    typed, explicit = typed_problem([6, 5, 4], 5)
    m = typed.jobs.num_jobs
    rng = np.random.default_rng(5)
    typed, explicit = (with_work(p, rng.uniform(100.0, 1000.0, m)) for p in (typed, explicit))
    plan = solve(typed, PolicyRequest("min_makespan", MAKESPAN), SolveOptions(),
                 CountdownDeadline(checks=checks))
    cert = plan.certificate
    assert "rate classes" in cert.formulation
    assert cert.termination in (Termination.OPTIMAL, Termination.FEASIBLE,
                                Termination.NO_SOLUTION)
    if cert.termination is not Termination.NO_SOLUTION:
        assert cert.objective is not None
        check_decoded(explicit, plan)
        if cert.bound is not None:
            assert cert.bound <= cert.objective * (1 + 1e-9)
