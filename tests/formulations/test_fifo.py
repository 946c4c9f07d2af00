"""Tests for Gavel's FIFO baselines (formulations.md A2.10): feasibility, no skipping,
`fifo_perf` picks the fastest fitting type, running jobs keep their type under `fifo`, and
determinism under a fixed seed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.solver.model import PolicyRequest, Problem, SolveOptions, make_problem
from apportion.solver.parameters import NoParameters
from apportion.solver.result import JobStatus, Plan, Termination
from apportion.solver.solve import solve


@st.composite
def problems(draw: st.DrawFn) -> Problem:
    n = draw(st.integers(1, 3))
    count = [draw(st.integers(1, 6)) for _ in range(n)]
    m = draw(st.integers(1, 10))
    s = [min(draw(st.sampled_from([1, 1, 2, 4])), max(count)) for _ in range(m)]
    T = np.array(
        [[draw(st.sampled_from([0.0, 1.0, 2.0, 5.0])) for _ in range(n)] for _ in range(m)]
    )
    for i in range(m):
        fits = [j for j in range(n) if count[j] >= s[i]]
        if not any(T[i, j] > 0 for j in fits):
            T[i, fits[0]] = 1.0
    prob = make_problem([f"t{j}" for j in range(n)], count, T, scale_factor=s)
    arrival = np.array([draw(st.sampled_from([0.0, 5.0, 10.0])) for _ in range(m)])
    return replace(prob, jobs=replace(prob.jobs, arrival_time_s=arrival))


def run(prob: Problem, name: str, seed: int = 0) -> Plan:
    return solve(prob, PolicyRequest(name, NoParameters()), SolveOptions(seed=seed))


def order(prob: Problem) -> list[int]:
    return sorted(range(prob.jobs.num_jobs), key=lambda i: (prob.jobs.arrival_time_s[i], i))


@given(problems(), st.sampled_from(["fifo", "fifo_perf"]), st.integers(0, 5))
def test_feasible_no_skipping_deterministic(prob: Problem, name: str, seed: int) -> None:
    plan = run(prob, name, seed)
    X = plan.time_share
    assert plan.certificate.termination is Termination.HEURISTIC
    assert set(np.unique(X)) <= {0.0, 1.0}
    assert np.all(X.sum(axis=1) <= 1)
    assert np.all(prob.jobs.scale_factor @ X <= prob.cluster.count)
    assert np.all(X[~prob.usable] == 0)
    scheduled = X.sum(axis=1) > 0
    seq = [bool(scheduled[i]) for i in order(prob)]
    assert seq == sorted(seq, reverse=True)  # no job behind an unscheduled one runs
    assert all((plan.job_status[i] is JobStatus.ALLOCATED) == scheduled[i] for i in range(len(seq)))
    np.testing.assert_array_equal(run(prob, name, seed).time_share, X)


@given(problems())
def test_fifo_perf_picks_the_fastest_fitting_type(prob: Problem) -> None:
    X = run(prob, "fifo_perf").time_share
    free = prob.cluster.count.copy()
    for i in order(prob):
        if X[i].sum() == 0:
            break
        fits = np.flatnonzero(prob.usable[i] & (free >= prob.jobs.scale_factor[i]))
        j = int(np.argmax(X[i]))
        assert prob.jobs.throughput[i, j] == prob.jobs.throughput[i, fits].max()
        free[j] -= prob.jobs.scale_factor[i]


def test_fifo_running_jobs_keep_their_type() -> None:
    prob = make_problem(["a", "b"], [1, 1], [[1.0, 5.0], [1.0, 1.0], [1.0, 1.0]])
    prob = replace(
        prob,
        jobs=replace(prob.jobs, arrival_time_s=np.array([0.0, 1.0, 2.0])),
        history=replace(
            prob.history,
            current_type=np.array([-1, -1, 0]),
            current_devices=np.array([0, 0, 1]),
        ),
    )
    for seed in range(5):
        X = run(prob, "fifo", seed).time_share
        assert X[2, 0] == 1.0  # the running job keeps type a
        assert X[0, 1] == 1.0  # the head gets the only free type
        assert X[1].sum() == 0  # nothing left: queued
