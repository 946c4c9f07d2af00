"""Invariants of `solve()` for every registered policy on random small snapshots: it never
raises, a plan says `optimal` only within the policy's tolerance, and a time-share plan is
feasible. No job list at all is a valid snapshot with a trivial plan."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations.shockwave import window_problem
from apportion.solver.capabilities import PlanKind
from apportion.solver.model import PolicyRequest, Problem, SolveOptions
from apportion.solver.registry import PolicySpec, policies
from apportion.solver.result import Termination
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem
from tests.formulations.colocation_cases import with_sharing_inputs

POLICIES = policies()
HAS_PLAN = (Termination.OPTIMAL, Termination.OPTIMAL_INACCURATE, Termination.FEASIBLE,
            Termination.HEURISTIC)


@st.composite
def small_problems(draw: st.DrawFn, min_jobs: int = 0) -> Problem:
    n = draw(st.integers(1, 3))
    m = draw(st.integers(min_jobs, 5))
    count = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    cells = st.one_of(st.just(0.0), st.floats(0.05, 50.0))
    throughput = np.array(draw(st.lists(st.lists(cells, min_size=n, max_size=n),
                                        min_size=m, max_size=m)), dtype=float).reshape(m, n)
    throughput[:, 0] = np.maximum(throughput[:, 0], 0.05)  # every job can run somewhere
    scale = draw(st.lists(st.integers(1, min(count)), min_size=m, max_size=m))
    weight = draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=m, max_size=m))
    problem = make_problem([f"t{j}" for j in range(n)], count, throughput, scale, weight)
    total = np.array(draw(st.lists(st.floats(10.0, 1e4), min_size=m, max_size=m)))
    done = total * np.array(draw(st.lists(st.floats(0.0, 0.9), min_size=m, max_size=m)))
    jobs = replace(problem.jobs, total_steps=total.reshape(m), steps_done=done.reshape(m),
                   arrival_time_s=np.zeros(m))
    return replace(problem, jobs=jobs, time_s=100.0)


def problem_for(spec: PolicySpec, problem: Problem) -> Problem:
    """Planning-window policies read epoch profiles on one type: give them the same jobs.
    Co-location policies get their profiles, stage times and devices."""
    caps = spec.capabilities
    if caps.reads_resource_profiles or caps.reads_stage_times or caps.reads_device_sharing:
        return with_sharing_inputs(problem)
    if not spec.capabilities.reads_epoch_profiles:
        return problem
    m = problem.jobs.num_jobs
    gpus = int(problem.cluster.count.max())
    scale = np.minimum(problem.jobs.scale_factor, gpus)
    return window_problem(gpus, scale, [[30.0, 30.0, 45.0]] * m, [[16, 16, 32]] * m, [0] * m)


def check(spec: PolicySpec, problem: Problem) -> None:
    problem = problem_for(spec, problem)
    plan = solve(problem, PolicyRequest(spec.name, spec.parameters_type()), SolveOptions())
    cert = plan.certificate
    tolerance = spec.capabilities.default_relative_gap
    if cert.termination is Termination.OPTIMAL:
        assert cert.gap is not None and cert.gap <= tolerance, (spec.name, cert)
    assert cert.termination is not Termination.ERROR, (spec.name, cert)
    if cert.termination in HAS_PLAN and cert.objective is not None:
        assert np.isfinite(cert.objective), (spec.name, cert)
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    assert plan.time_share.shape == (m, n)
    if spec.capabilities.plan_kind is PlanKind.TIME_SHARE and cert.termination in HAS_PLAN:
        X = plan.time_share
        assert np.all(X >= -1e-9) and np.all(X.sum(axis=1) <= 1 + 1e-6), spec.name
        use = problem.jobs.scale_factor @ X
        assert np.all(use <= problem.cluster.count + 1e-6), (spec.name, use)


@pytest.mark.parametrize("spec", POLICIES, ids=[p.name for p in POLICIES])
@given(problem=small_problems())
def test_every_policy_keeps_the_invariants(spec: PolicySpec, problem: Problem) -> None:
    check(spec, problem)


@pytest.mark.parametrize("spec", POLICIES, ids=[p.name for p in POLICIES])
def test_no_jobs_is_a_trivial_plan(spec: PolicySpec) -> None:
    problem = make_problem(["a", "b"], [2, 2], np.zeros((0, 2)))
    plan = solve(problem_for(spec, problem), PolicyRequest(spec.name, spec.parameters_type()))
    assert plan.certificate.termination in (Termination.OPTIMAL, Termination.HEURISTIC), (
        plan.certificate)
