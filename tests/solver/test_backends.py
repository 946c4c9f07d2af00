"""The solver layer: every backend status has a mapping, and the runners agree on small models
whose answers are known by hand."""

from __future__ import annotations

import time

import clarabel
import highspy
import numpy as np
import pytest
import scipy.sparse as sp
from ortools.sat import cp_model_pb2
from ortools.sat.python import cp_model

from apportion.solver.backends import clarabel as clarabel_backend
from apportion.solver.backends import highs as highs_backend
from apportion.solver.backends import ortools as ortools_backend
from apportion.solver.backends.clarabel import Cone, ConeKind, ConicModel, solve_clarabel
from apportion.solver.backends.highs import (
    INFINITY,
    HighsSession,
    HighsSettings,
    LinearModel,
    solve_highs,
)
from apportion.solver.backends.highs_startup import NO_STARTUP, StartupCost, can_start
from apportion.solver.backends.lp import solve_lp
from apportion.solver.backends.ortools import solve_cpsat
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import Deadline
from apportion.solver.model import SolverPreference
from apportion.solver.result import ModelSize


def test_every_highs_model_status_is_mapped() -> None:
    names = {name for name in dir(highspy.HighsModelStatus) if name.startswith("k")}
    assert names <= set(highs_backend.STATUS_MAP), names - set(highs_backend.STATUS_MAP)


def test_every_clarabel_status_is_mapped() -> None:
    names = {name for name in dir(clarabel.SolverStatus) if not name.startswith("_")}
    assert names <= set(clarabel_backend.STATUS_MAP), names - set(clarabel_backend.STATUS_MAP)


def test_every_cpsat_status_is_mapped() -> None:
    names = set(cp_model_pb2.CpSolverStatus.keys())
    assert names <= set(ortools_backend.STATUS_MAP), names - set(ortools_backend.STATUS_MAP)


def test_dual_infeasible_means_unbounded_in_one_place() -> None:
    # the two Clarabel tables of the past disagreed on this one
    assert clarabel_backend.STATUS_MAP["DualInfeasible"] is SolverStatus.UNBOUNDED
    assert highs_backend.STATUS_MAP["kUnbounded"] is SolverStatus.UNBOUNDED


def _box_lp() -> tuple[np.ndarray, sp.csc_matrix, np.ndarray]:
    """max x + 2y s.t. x + y <= 4, y <= 3, x, y >= 0: optimum 7 at (1, 3), duals (1, 1)."""
    c = np.array([1.0, 2.0])
    a = sp.csc_matrix(np.array([[1.0, 1.0], [0.0, 1.0]]))
    b = np.array([4.0, 3.0])
    return c, a, b


@pytest.mark.parametrize("solver", [SolverPreference.HIGHS, SolverPreference.CLARABEL])
def test_inequality_lp_on_both_backends(solver: SolverPreference) -> None:
    c, a, b = _box_lp()
    result = solve_lp(c, a, b, solver)
    assert result.status is SolverStatus.OPTIMAL and result.solved
    assert result.objective == pytest.approx(7.0, abs=1e-7)
    np.testing.assert_allclose(result.x, [1.0, 3.0], atol=1e-6)
    # the maximization's multipliers: >= 0, and c - A'y <= 0 with equality on the support
    np.testing.assert_allclose(result.row_dual, [1.0, 1.0], atol=1e-6)


@pytest.mark.parametrize("solver", [SolverPreference.HIGHS, SolverPreference.CLARABEL])
def test_infeasible_and_unbounded_are_named(solver: SolverPreference) -> None:
    c = np.array([1.0])
    infeasible = solve_lp(c, sp.csc_matrix(np.array([[1.0], [-1.0]])), np.array([1.0, -2.0]),
                          solver)
    assert infeasible.status is SolverStatus.INFEASIBLE and not infeasible.has_solution
    unbounded = solve_lp(c, sp.csc_matrix(np.array([[-1.0]])), np.array([1.0]), solver)
    assert unbounded.status in (SolverStatus.UNBOUNDED, SolverStatus.INFEASIBLE_OR_UNBOUNDED)
    assert not unbounded.solved


def test_equality_rows_and_the_empty_model() -> None:
    # max x + y s.t. x - y = 0 (equality), x + y <= 2
    a = sp.csc_matrix(np.array([[1.0, 1.0], [1.0, -1.0]]))
    for solver in (SolverPreference.HIGHS, SolverPreference.CLARABEL):
        result = solve_lp(np.ones(2), a, np.array([2.0, 0.0]), solver, equalities=1)
        np.testing.assert_allclose(result.x, [1.0, 1.0], atol=1e-6)
    empty = LinearModel(np.zeros(0), sp.csc_matrix((0, 0)), np.zeros(0), np.zeros(0),
                        np.zeros(0), np.zeros(0))
    result = solve_highs(empty)
    assert result.status is SolverStatus.OPTIMAL and result.has_solution
    assert result.objective == 0.0


def test_mip_bound_and_incumbent() -> None:
    # max 5a + 4b + 3c s.t. 2a + 3b + c <= 5, 4a + b + 2c <= 11, 3a + 4b + 2c <= 8, binary:
    # optimum 13 at (1, 0, 1)... checked by enumeration here
    values = np.array([5.0, 4.0, 3.0])
    rows = np.array([[2.0, 3.0, 1.0], [4.0, 1.0, 2.0], [3.0, 4.0, 2.0]])
    caps = np.array([5.0, 11.0, 8.0])
    best = max(
        float(values @ x) for x in np.array(np.meshgrid(*[[0, 1]] * 3)).T.reshape(-1, 3)
        if np.all(rows @ x <= caps)
    )
    model = LinearModel(values, sp.csc_matrix(rows), np.full(3, -INFINITY), caps, np.zeros(3),
                        np.ones(3), integer=np.ones(3, dtype=bool), maximize=True)
    result = solve_highs(model, HighsSettings(mip_rel_gap=0.0))
    assert result.status is SolverStatus.OPTIMAL and result.has_solution
    assert result.objective == pytest.approx(best)
    assert result.bound is not None and result.bound >= best - 1e-9
    assert result.size == ModelSize(3, 3, 9, 3)


def test_a_program_too_large_for_the_time_left_is_not_started() -> None:
    """`settings.startup` estimates HiGHS's time before it first reads its limit: with more
    than that left the program runs as usual, with less it is not started (TIME_LIMIT, no
    point, the model's sizes), and without a deadline it always runs."""
    rows = np.array([[2.0, 3.0, 1.0], [4.0, 1.0, 2.0]])
    model = LinearModel(np.ones(3), sp.csc_matrix(rows), np.full(2, -INFINITY),
                        np.array([5.0, 11.0]), np.zeros(3), np.ones(3), maximize=True)
    per_nonzero = StartupCost(per_nonzero_s=1.0)  # 6 s for this program's 6 nonzeros
    assert per_nonzero.seconds(model.size) == pytest.approx(6.0)
    settings = HighsSettings(startup=per_nonzero)
    ran = solve_highs(model, settings, Deadline.after(3600.0))
    assert ran.status is SolverStatus.OPTIMAL and ran.has_solution
    assert solve_highs(model, settings).status is SolverStatus.OPTIMAL
    stopped = solve_highs(model, settings, Deadline.after(5.0))
    assert stopped.status is SolverStatus.TIME_LIMIT and not stopped.has_solution
    assert "not started" in stopped.detail and stopped.solve_time_s == 0.0
    assert stopped.x.shape == (3,) and stopped.row_dual.shape == (2,)
    assert stopped.size == model.size
    # growth with the square beyond a size, and with the columns squared
    assert StartupCost(per_nonzero_s=1.0, growth_nonzeros=3).seconds(model.size) == \
        pytest.approx(12.0)
    assert StartupCost(per_column_pair_s=1.0).seconds(model.size) == pytest.approx(9.0)
    assert not can_start(Deadline(0.0), NO_STARTUP, model.size)  # a past deadline


def test_session_warm_resolve_equals_a_fresh_solve() -> None:
    c, a, b = _box_lp()
    model = LinearModel(-c, a, np.full(2, -INFINITY), b, np.zeros(2), np.full(2, INFINITY))
    session = HighsSession(model, HighsSettings(method="simplex"))
    first = session.run()
    assert first.objective == pytest.approx(-7.0)
    # add x <= 0.5: the optimum moves to (0.5, 3), value 6.5
    session.add_rows(np.array([-INFINITY]), np.array([0.5]), sp.csr_matrix([[1.0, 0.0]]))
    second = session.run()
    fresh = solve_highs(LinearModel(
        -c, sp.csc_matrix(np.array([[1.0, 1.0], [0.0, 1.0], [1.0, 0.0]])),
        np.full(3, -INFINITY), np.array([4.0, 3.0, 0.5]), np.zeros(2), np.full(2, INFINITY)))
    assert second.objective == pytest.approx(fresh.objective) == pytest.approx(-6.5)
    assert second.size.constraints == 3 and session.runs == 2
    session.change_coefficient(2, 0, 2.0)  # 2x <= 0.5
    assert session.run().objective == pytest.approx(-6.25)


def test_session_dense_row_equals_the_sparse_one() -> None:
    c, a, b = _box_lp()
    model = LinearModel(-c, a, np.full(2, -INFINITY), b, np.zeros(2), np.full(2, INFINITY))
    dense = HighsSession(model, HighsSettings(method="simplex"))
    dense.run()
    dense.add_row(-INFINITY, 0.5, np.array([1.0, 0.0]))  # x <= 0.5, zero entries skipped
    sparse = HighsSession(model, HighsSettings(method="simplex"))
    sparse.add_rows(np.array([-INFINITY]), np.array([0.5]), sp.csr_matrix([[1.0, 0.0]]))
    assert dense.run().objective == pytest.approx(sparse.run().objective) == pytest.approx(-6.5)
    assert dense.size == sparse.size == ModelSize(2, 3, 4, 0)


def test_conic_exponential_cone() -> None:
    # max t s.t. t <= log(u), u <= 2  ->  log 2. Variables (t, u); cone rows (t, 1, u)
    q = np.array([-1.0, 0.0])
    A = sp.csc_matrix(np.array([[0.0, 1.0], [-1.0, 0.0], [0.0, 0.0], [0.0, -1.0]]))
    b = np.array([2.0, 0.0, 1.0, 0.0])
    model = ConicModel(q, A, b, (Cone(ConeKind.NONNEGATIVE, 1), Cone(ConeKind.EXPONENTIAL, 3)))
    result = solve_clarabel(model)
    assert result.status.solved
    assert result.x[0] == pytest.approx(np.log(2.0), abs=1e-7)


def test_cpsat_values_objective_and_bound() -> None:
    model = cp_model.CpModel()
    xs = [model.new_bool_var(f"x{k}") for k in range(3)]
    model.add(2 * xs[0] + 3 * xs[1] + xs[2] <= 3)
    model.maximize(5 * xs[0] + 4 * xs[1] + 3 * xs[2])
    result = solve_cpsat(model, xs, ModelSize(3, 1, 3, 3))
    assert result.status is SolverStatus.OPTIMAL and result.has_solution
    np.testing.assert_array_equal(result.x, [1.0, 0.0, 1.0])
    assert result.objective == 8.0 and result.bound == 8.0


def test_a_past_deadline_stops_the_solver_with_a_status() -> None:
    """A MIP too large to finish instantly, given a deadline already past: HiGHS stops at its
    1 ms floor and says so (a limit, never a made-up optimum)."""
    rng = np.random.default_rng(0)
    n, rows = 300, 40
    values = rng.uniform(1, 10, n)
    weights = rng.uniform(1, 10, (rows, n))
    model = LinearModel(values, sp.csc_matrix(weights), np.full(rows, -INFINITY),
                        weights.sum(axis=1) / 3, np.zeros(n), np.ones(n),
                        integer=np.ones(n, dtype=bool), maximize=True)
    result = solve_highs(model, HighsSettings(mip_rel_gap=0.0), Deadline(time.monotonic() - 1))
    assert result.status in (SolverStatus.TIME_LIMIT, SolverStatus.OPTIMAL)
    if result.status is SolverStatus.TIME_LIMIT and result.has_solution:
        assert result.bound is not None and result.objective is not None
        assert result.bound >= result.objective - 1e-9
