"""Pollux's p-mean fitness as an exact ILP (B4, docs/policies/sia.md): the returned plan's fitness
equals the brute-force maximum of the fitness, computed here directly from the goodput table
(not from the ILP's coefficients), over every configuration choice of tiny instances."""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations.pollux import fair_share_goodput
from apportion.formulations.sia import current_configuration, goodput_table, job_restart_factor
from apportion.solver.model import Compat, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import PolluxParameters
from apportion.solver.result import Termination
from apportion.solver.solve import solve
from tests.formulations.test_sia import problems


def brute_force_fitness(problem: Problem, p: float) -> float:
    table = goodput_table(problem, 64)
    current = current_configuration(problem, table.configs, table.layout)
    restart = job_restart_factor(problem, current >= 0)
    devices = np.asarray([c.devices for c in table.configs])
    fair = fair_share_goodput(table.raw, devices, int(problem.cluster.count.sum()))
    m = problem.jobs.num_jobs
    options = [[-1] + [int(c) for c in np.nonzero(table.raw[i] > 0)[0]] for i in range(m)]
    best = -math.inf
    for combo in itertools.product(*options):
        used = np.zeros(problem.cluster.num_types, np.int64)
        speedups = []
        for i, c in enumerate(combo):
            if c < 0:
                speedups.append(0.0)
                continue
            used[table.configs[c].type_index] += table.configs[c].devices
            r = 1.0 if current[i] == c else restart[i]
            speedups.append(r * table.raw[i, c] / fair[i])
        if np.any(used > problem.cluster.count):
            continue
        value = np.mean((np.asarray(speedups) + 1e-3) ** p) ** (1 / p)
        best = max(best, float(value))
    return best


@given(problems(max_jobs=4), st.sampled_from([-1.0, -0.5, 0.5, 1.0]))
def test_fitness_matches_brute_force(problem: Problem, p: float) -> None:
    policy = PolicyRequest("pollux", PolluxParameters(fairness_power=p), Compat.NONE)
    plan = solve(problem, policy, SolveOptions())
    cert = plan.certificate
    assert cert.termination is Termination.OPTIMAL and cert.objective is not None
    exact = brute_force_fitness(problem, p)
    assert abs(cert.objective - exact) <= 2e-4 * max(1.0, abs(exact))
    assert cert.bound is not None and cert.bound >= exact * (1 - 1e-7)


@given(problems(max_jobs=4))
def test_p_one_is_the_arithmetic_mean(problem: Problem) -> None:
    policy = PolicyRequest("pollux", PolluxParameters(fairness_power=1.0), Compat.NONE)
    plan = solve(problem, policy, SolveOptions())
    choices = plan.configurations.choices
    speedups = np.asarray([0.0 if c is None else c.normalized_goodput for c in choices])
    restart = np.asarray(
        [1.0 if c is None or c.unchanged else c.restart_factor for c in choices]
    )
    assert plan.certificate.objective is not None
    assert math.isclose(
        plan.certificate.objective, float(np.mean(restart * speedups + 1e-3)), rel_tol=1e-9
    )


def test_end_to_end_request_reports_fitness() -> None:
    from apportion.server.pipeline import solve_request
    from apportion.v1 import allocation_service_pb2 as service_pb
    from tests.formulations.test_sia import _request

    response = solve_request(
        _request(policy={"name": "pollux", "pollux": {"fairnessPower": -1, "maxGpus": 16}})
    )
    assert response.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    assert response.stats.maximize and 0 < response.stats.objective <= response.stats.best_bound
    assert all(job.HasField("configuration") for job in response.plan.jobs)
    assert max(job.configuration.devices for job in response.plan.jobs) <= 16
