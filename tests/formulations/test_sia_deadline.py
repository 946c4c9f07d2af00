"""Sia under a deadline: cut at every place it looks at the deadline (a countdown), the answer
is a plan within the capacity with a valid bound, `optimal` only when the gap is closed, and
a cut that comes after the Lagrangian bound still answers with the best plan read off its
prices (`feasible`) instead of no plan."""

from __future__ import annotations

import numpy as np
import pytest

from apportion.datasets.generators import builtin_throughputs, gavel_workload, make_cluster
from apportion.datasets.snapshot import build_request, builtin_goodputs
from apportion.formulations import sia_ilp
from apportion.server.convert import request_to_model
from apportion.solver.model import Problem
from apportion.solver.result import Plan, Termination
from apportion.solver.solve import solve
from tests.countdown import CountdownDeadline


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
        if cert.termination is Termination.NO_SOLUTION:
            continue
        assert cert.termination in (Termination.OPTIMAL, Termination.FEASIBLE), cert.detail
        assert_within_capacity(problem, plan)
        assert cert.objective is not None and cert.bound is not None
        slack = 1e-4 * max(1.0, abs(optimum))
        if cert.maximize:
            assert cert.objective <= optimum + slack and cert.bound >= optimum - slack
        else:
            assert cert.objective >= optimum - slack and cert.bound <= optimum + slack
        if cert.termination is Termination.FEASIBLE:
            assert "time limit" in cert.detail
    assert Termination.FEASIBLE in seen, seen  # some cuts answer with the plan so far
