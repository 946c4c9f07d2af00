"""How the elastic policies (Optimus, SLAQ, Lyra) spend a deadline: admission and the greedy
stop early enough to leave the later stages their time, the dynamic program and the MILP stop
at the deadline, and the work done over every job (admission order, the greedy's first moves)
agrees with a plain reference. No timing: the clock is frozen or the deadline counts looks."""

from __future__ import annotations

import heapq
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations import elastic_menu, elastic_plan
from apportion.formulations.elastic_menu import Menu, exact, greedy, ladder_moves
from apportion.formulations.elastic_speed import job_entries
from apportion.formulations.optimus import optimus
from apportion.solver import deadline as deadline_module
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import Deadline
from apportion.solver.model import GivenGoodput, SolveOptions
from apportion.solver.parameters import OptimusParameters
from apportion.solver.result import JobStatus
from tests.countdown import CountdownDeadline, FrozenClock

from .elastic_cases import elastic_problem, sync_model

OPTIONS = SolveOptions(relative_gap=1e-6)


def reference_greedy(menu: Menu, capacity: np.ndarray) -> np.ndarray:
    """The marginal-gain rule written plainly: every job's best move pushed one job at a time,
    then the best move taken until none fits (ties: lower job, then earlier move)."""
    m = menu.num_jobs
    state = np.zeros(m, np.int64)
    left = capacity - menu.demand[:, 0, :].sum(axis=0)
    cap = np.where(capacity > 0, capacity, 1).astype(float)
    heap: list[tuple[float, int, int]] = []

    def push(i: int) -> None:
        best: tuple[float, int] | None = None
        for source, target in menu.moves.tolist():
            if source != state[i]:
                continue
            gain = menu.value[i, target] - menu.value[i, source]
            added = menu.demand[i, target] - menu.demand[i, source]
            if not (np.all(added <= left) and gain > 0 and np.isfinite(gain)):
                continue
            share = float(np.max(np.maximum(added, 0) / cap))
            score = gain / (share if share > 0 else elastic_menu.FREE_MOVE_SHARE)
            if best is None or score > best[0]:
                best = (score, target)
        if best is not None:
            heapq.heappush(heap, (-best[0], i, best[1]))

    for i in range(m):
        push(i)
    while heap:
        _, i, target = heapq.heappop(heap)
        added = menu.demand[i, target] - menu.demand[i, state[i]]
        if np.all(added <= left):
            left = left - added
            state[i] = target
        push(i)
    return state


@st.composite
def two_resource_menus(draw: st.DrawFn) -> tuple[Menu, np.ndarray]:
    """Jobs on a (parameter servers x workers) grid of 2 x 3 states over two resources."""
    m = draw(st.integers(1, 6))
    rows, axis = 2, 3
    value = np.array(draw(st.lists(st.lists(st.integers(0, 20), min_size=6, max_size=6),
                                   min_size=m, max_size=m)), float)
    value[:, 0] = 0.0
    value[value == 20] = -np.inf  # some states not offered
    demand = np.zeros((m, rows * axis, 2), np.int64)
    for s in range(rows * axis):
        demand[:, s, 0] = s % axis + 1
        demand[:, s, 1] = s // axis + 1
    moves = [(p * axis + w, p * axis + w + 1) for p in range(rows) for w in range(axis - 1)]
    moves += [(w, axis + w) for w in range(axis)]
    capacity = np.array([draw(st.integers(m, 4 * m)), draw(st.integers(m, 3 * m))], np.int64)
    return Menu(value, demand, np.array(moves, np.int64)), capacity


@given(two_resource_menus())
def test_the_greedy_takes_the_reference_rules_moves(case: tuple[Menu, np.ndarray]) -> None:
    """The greedy's first moves (worked out for every job at once) and later steps give the
    plain rule's allocation."""
    menu, capacity = case
    result = greedy(menu, capacity)
    assert result.complete
    np.testing.assert_array_equal(result.state, reference_greedy(menu, capacity))


def test_the_greedy_leaves_time_for_each_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """With 1 s left (frozen clock) and 0.25 s held back per step, the greedy stops after 4
    steps, incomplete; without the reserve it takes every move."""
    monkeypatch.setattr(deadline_module, "time", FrozenClock)
    monkeypatch.setattr(elastic_menu, "DEADLINE_CHECK_EVERY", 1)
    values = np.tile(np.arange(10, dtype=float) * 10.0 - np.arange(10) ** 2, (3, 1))
    menu = Menu(values, (np.arange(10)[None, :, None] + np.ones((3, 1, 1), np.int64)),
                ladder_moves(10))
    capacity = np.array([100], np.int64)
    cut = greedy(menu, capacity, Deadline(1.0), step_reserve_s=0.25)
    assert not cut.complete and int(cut.state.sum()) == 3
    whole = greedy(menu, capacity, Deadline(1.0))
    assert whole.complete and int(whole.state.sum()) > 3


def test_the_dynamic_program_reads_the_deadline_every_job() -> None:
    """A deadline that passes at its second look cuts the program after its first job."""
    values = np.tile(np.array([0.0, 1.0, 1.5]), (5, 1))
    menu = Menu(values, (np.arange(3)[None, :, None] + np.ones((5, 1, 1), np.int64)),
                ladder_moves(3))
    result = exact(menu, np.array([8], np.int64), CountdownDeadline(checks=1))
    assert result.allocation is None and result.status is SolverStatus.TIME_LIMIT
    assert "cut by the deadline" in result.detail


def test_a_menu_milp_too_large_for_the_time_left_is_not_started(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A two-resource menu (MILP route) with less time left than HiGHS needs to start it comes
    back unsolved without running; with time it is solved."""
    monkeypatch.setattr(deadline_module, "time", FrozenClock)
    demand = np.stack([np.arange(1, 4), np.arange(1, 4)], axis=1)[None].repeat(4, axis=0)
    menu = Menu(np.tile(np.array([0.0, 2.0, 3.0]), (4, 1)), demand.astype(np.int64),
                ladder_moves(3))
    capacity = np.array([8, 8], np.int64)
    short = exact(menu, capacity, Deadline(1e-6))
    assert short.allocation is None and "not started" in short.detail
    solved = exact(menu, capacity, Deadline(60.0))
    assert solved.allocation is not None and solved.status is SolverStatus.OPTIMAL


def test_admission_leaves_the_later_stages_their_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """With 1 s left (frozen clock) and 0.25 s kept per admitted job for the later stages,
    admission stops at 4 of the 10 jobs that fit: the others wait, saying why, and the plan
    holds the 4; without that reserve all 10 are admitted."""
    monkeypatch.setattr(deadline_module, "time", FrozenClock)
    monkeypatch.setattr(elastic_plan, "DEADLINE_CHECK_EVERY", 1)
    monkeypatch.setattr(elastic_plan, "PLAN_S_PER_JOB", 0.0)
    monkeypatch.setattr(elastic_plan, "PLAN_S_PER_ADMITTED", 0.0)
    monkeypatch.setattr(elastic_plan, "MENU_S_PER_ADMITTED", 0.25)
    problem = elastic_problem([16], [1e4] * 10, models=[sync_model(0.02, 0.1, 0.0)] * 10)
    out = optimus(problem, OptimusParameters(), OPTIONS, Deadline(1.0))
    status = out.settled.status
    assert [s is JobStatus.ALLOCATED for s in status] == [True] * 4 + [False] * 6
    assert all("time limit" in out.settled.reason[i] for i in range(4, 10))
    monkeypatch.setattr(elastic_plan, "MENU_S_PER_ADMITTED", 0.0)
    every = optimus(problem, OptimusParameters(), OPTIONS, Deadline(1.0))
    assert all(s is JobStatus.ALLOCATED for s in every.settled.status)


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3),
                          st.text("ab", min_size=1, max_size=3)),
                min_size=0, max_size=30, unique_by=lambda job: job[2]))
def test_admission_order_is_running_then_arrival_then_id(
        jobs: list[tuple[bool, int, str]]) -> None:
    """The order (computed for every job at once) is the sort by (not running, arrival, id)."""
    m = len(jobs)
    problem = elastic_problem([4], [1.0] * m, arrival=[float(a) for _, a, _ in jobs])
    problem = replace(problem, jobs=replace(problem.jobs, ids=tuple(i for _, _, i in jobs)))
    running = np.array([r for r, _, _ in jobs], bool)
    expected = sorted(range(m), key=lambda k: (not jobs[k][0], jobs[k][1], jobs[k][2]))
    assert elastic_plan.admission_order(problem, running).tolist() == expected


def test_a_jobs_entries_are_read_from_its_slices() -> None:
    """`job_entries` (read when the job's turn comes) gives the model's entries of each job,
    also for a job without any."""
    configurations = [
        [GivenGoodput(0, 1, 1, 10.0), GivenGoodput(0, 1, 2, 18.0), GivenGoodput(1, 2, 4, 30.0)],
        [],
        [GivenGoodput(1, 1, 1, 5.0)],
    ]
    problem = elastic_problem([4, 4], [1e3] * 3, configurations=configurations)
    for i in range(3):
        assert job_entries(problem, i) == problem.jobs.given_goodput.entries(i)
