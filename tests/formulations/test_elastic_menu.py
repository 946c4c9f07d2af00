"""The elastic core (B7-B9): greedy, dynamic program and MILP over per-job menus.

Optimality is checked by independent routes: brute force over every combination of states on
tiny instances, and the MILP (HiGHS) against the dynamic program."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from apportion.formulations.elastic_menu import (
    Menu,
    evaluate,
    exact,
    feasible,
    greedy,
    ladder_moves,
)
from apportion.solver.backends.status import SolverStatus


def brute_force(menu: Menu, capacity: np.ndarray) -> float:
    """The optimum by enumerating every state per job."""
    offered = [np.nonzero(menu.offered()[i])[0] for i in range(menu.num_jobs)]
    best = -np.inf
    for combo in itertools.product(*offered):
        state = np.array(combo, np.int64)
        if feasible(menu, state, capacity):
            best = max(best, evaluate(menu, state)[0])
    return best


def ladder_menu(values: np.ndarray, unit: np.ndarray | None = None) -> Menu:
    """One resource; job i's state s holds (s + 1) * unit_i devices."""
    m, S = values.shape
    unit = np.ones(m, np.int64) if unit is None else unit
    demand = ((np.arange(S)[None, :] + 1) * unit[:, None])[:, :, None].astype(np.int64)
    return Menu(values, demand, ladder_moves(S))


@st.composite
def concave_ladders(draw: st.DrawFn) -> tuple[Menu, np.ndarray]:
    m = draw(st.integers(1, 6))
    S = draw(st.integers(1, 6))
    gains = np.array(draw(st.lists(st.lists(st.floats(-1.0, 10.0), min_size=S - 1,
                                            max_size=S - 1), min_size=m, max_size=m)))
    gains = -np.sort(-gains.reshape(m, S - 1), axis=1)  # non-increasing marginal gains
    values = np.concatenate([np.zeros((m, 1)), np.cumsum(gains, axis=1)], axis=1)
    capacity = np.array([draw(st.integers(m, m * S + 2))])
    return ladder_menu(values), capacity


@given(concave_ladders())
def test_greedy_is_optimal_for_concave_unit_steps(case: tuple[Menu, np.ndarray]) -> None:
    """[derived, B8] one resource, unit steps, non-increasing marginal gains: greedy = DP."""
    menu, capacity = case
    greedy_value = greedy(menu, capacity).objective
    result = exact(menu, capacity)
    assert result.status is SolverStatus.OPTIMAL
    assert result.allocation is not None
    assert greedy_value == pytest.approx(result.allocation.objective, rel=1e-9, abs=1e-9)


@st.composite
def random_menus(draw: st.DrawFn, resources: int = 1) -> tuple[Menu, np.ndarray]:
    m = draw(st.integers(1, 4))
    S = draw(st.integers(1, 4))
    values = np.array(draw(st.lists(st.floats(0.0, 10.0), min_size=m * S, max_size=m * S)))
    values = values.reshape(m, S)
    values[:, 0] = 0.0
    hole = draw(st.lists(st.booleans(), min_size=m * S, max_size=m * S))
    values = np.where(np.array(hole).reshape(m, S) & (np.arange(S)[None, :] > 0), -np.inf,
                      values)
    step = np.array(draw(st.lists(st.integers(0, 3), min_size=m * S * resources,
                                  max_size=m * S * resources))).reshape(m, S, resources)
    demand = np.cumsum(step, axis=1) + 1  # with two resources: both used by every state
    base = demand[:, 0, :].sum(axis=0)  # admission guarantees the bases fit
    capacity = np.array([draw(st.integers(int(b), int(b) + 3 * m * S)) for b in base])
    moves = ladder_moves(S)
    return Menu(values, demand.astype(np.int64), moves), capacity


@given(random_menus())
@example((ladder_menu(np.array([[0.0, 5.0], [0.0, 10.0]]), np.array([1, 1])),
          np.array([3])))  # only job 1 may grow: the trace back must follow the capacity
def test_dynamic_program_matches_brute_force_and_milp(case: tuple[Menu, np.ndarray]) -> None:
    """B7: the multiple-choice knapsack DP against brute force and the HiGHS MILP."""
    menu, capacity = case
    dp = exact(menu, capacity)
    milp = exact(menu, capacity, cell_limit=-1)
    assert dp.allocation is not None and milp.allocation is not None
    assert feasible(menu, dp.allocation.state, capacity)
    truth = brute_force(menu, capacity)
    assert dp.allocation.objective == pytest.approx(truth, rel=1e-9, abs=1e-9)
    assert milp.allocation.objective == pytest.approx(truth, rel=1e-6, abs=1e-6)
    assert milp.bound is not None and milp.bound >= truth - 1e-6


@given(random_menus(resources=2))
def test_milp_on_two_resources_matches_brute_force(case: tuple[Menu, np.ndarray]) -> None:
    menu, capacity = case
    result = exact(menu, capacity)
    assert result.allocation is not None
    assert result.allocation.method.startswith("MILP")
    assert result.allocation.objective == pytest.approx(brute_force(menu, capacity), abs=1e-6)


@given(random_menus())
def test_greedy_is_feasible_and_never_beats_the_optimum(case: tuple[Menu, np.ndarray]) -> None:
    menu, capacity = case
    plan = greedy(menu, capacity)
    assert feasible(menu, plan.state, capacity)
    assert plan.objective <= brute_force(menu, capacity) + 1e-9


def test_greedy_gap_on_a_non_concave_menu() -> None:
    """A job whose gain comes only with its second extra device: the greedy takes the other
    job's small first gain and misses it; the DP does not. The gap is reported, not 0."""
    values = np.array([[0.0, 0.1, 10.0], [0.0, 1.0, 1.5]])
    menu = ladder_menu(values)
    capacity = np.array([4])  # bases hold 2, two devices to give
    plan = greedy(menu, capacity)
    best = exact(menu, capacity)
    assert best.allocation is not None
    assert best.allocation.objective == pytest.approx(10.0)
    assert plan.objective == pytest.approx(1.5)


def test_greedy_divides_gains_by_the_dominant_share() -> None:
    """Equal gains: the task adding the smaller share of its resource goes first."""
    values = np.array([[0.0, 5.0], [0.0, 5.0]])
    demand = np.array([[[1, 0], [2, 0]], [[0, 1], [0, 2]]], np.int64)
    menu = Menu(values, demand, ladder_moves(2))
    plan = greedy(menu, np.array([2, 10]))  # resource 0 is scarce: only job 1 may grow
    assert plan.state.tolist() == [1, 1]
    plan = greedy(menu, np.array([3, 3]))
    assert plan.state.tolist() == [1, 1]
