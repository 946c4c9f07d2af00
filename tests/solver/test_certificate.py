"""The gap, the termination mapping and the 'optimal only when proven' rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from apportion.solver.backends.status import SolverStatus
from apportion.solver.certificate import enforce, termination
from apportion.solver.result import Certificate, Plan, Termination, relative_gap


def test_relative_gap_definition() -> None:
    assert relative_gap(None, 1.0) is None and relative_gap(1.0, None) is None
    assert relative_gap(10.0, 9.0) == pytest.approx(0.1)
    assert relative_gap(-10.0, -9.0) == pytest.approx(0.1)
    assert relative_gap(0.0, 0.0) == 0.0
    assert relative_gap(math.inf, 1.0) == math.inf and relative_gap(1.0, math.nan) == math.inf
    # near 0 the denominator floor decides; a scale makes it the objective's natural size
    assert relative_gap(1e-16, 2e-16) == pytest.approx(1e-16 / 1e-12)
    assert relative_gap(1e-16, 2e-16, scale=1.0) == pytest.approx(1e-16)


@pytest.mark.parametrize("status", list(SolverStatus))
@pytest.mark.parametrize("has_plan", [True, False])
def test_termination_table(status: SolverStatus, has_plan: bool) -> None:
    got = termination(status, has_plan, 1e-9, 1e-6)
    if status.solved:
        assert got is (Termination.OPTIMAL if has_plan else Termination.ERROR)
    elif status is SolverStatus.INFEASIBLE:
        assert got is Termination.INFEASIBLE
    elif status is SolverStatus.UNBOUNDED:
        assert got is Termination.UNBOUNDED
    elif has_plan:
        assert got is Termination.FEASIBLE
    elif status.limit_reached:
        assert got is Termination.NO_SOLUTION
    else:
        assert got is Termination.ERROR


def test_solver_optimal_but_certificate_loose_is_not_optimal() -> None:
    assert termination(SolverStatus.OPTIMAL, True, 1e-3, 1e-6) is Termination.OPTIMAL_INACCURATE
    assert termination(SolverStatus.OPTIMAL, True, None, 1e-6) is Termination.OPTIMAL_INACCURATE
    assert termination(SolverStatus.OPTIMAL, True, 1e-6, 1e-6) is Termination.OPTIMAL


def _plan(objective: float | None, bound: float | None, ended: Termination = Termination.OPTIMAL,
          scale: float = 1e-12) -> Plan:
    cert = Certificate(ended, True, objective, bound, detail="solver words", gap_scale=scale)
    return Plan.empty(1, 1, cert)


@pytest.mark.parametrize(
    ("objective", "bound", "kept"),
    [
        (18.6745, 18.6745, True),
        (14.92, 18.674, False),  # the water-filling plan of issue 13: gap 0.20
        (1.0, None, False),
        (None, None, False),
        (math.inf, math.nan, False),  # allox at time 1e308: objective inf, gap nan
        (1.0, 1.0 + 5e-7, True),
    ],
)
def test_enforce_downgrades_unproven_optima(
    objective: float | None, bound: float | None, kept: bool
) -> None:
    out = enforce(_plan(objective, bound), 1e-6)
    if kept:
        assert out.certificate.termination is Termination.OPTIMAL
        assert out.certificate.detail == "solver words"
    else:
        assert out.certificate.termination is Termination.OPTIMAL_INACCURATE
        assert "not proven optimal" in out.certificate.detail
        assert out.certificate.detail.startswith("solver words; ")
    np.testing.assert_array_equal(out.time_share, np.zeros((1, 1)))


def test_enforce_leaves_other_terminations_alone() -> None:
    for ended in Termination:
        if ended is Termination.OPTIMAL:
            continue
        plan = _plan(14.92, 18.674, ended)
        assert enforce(plan, 1e-6) is plan


def test_gap_scale_for_objectives_near_zero() -> None:
    """A sum of logarithms can be ~0 on any instance: its gap is measured on its scale."""
    assert enforce(_plan(-1.1e-16, -2.2e-16), 1e-6).certificate.termination is (
        Termination.OPTIMAL_INACCURATE)
    assert enforce(_plan(-1.1e-16, -2.2e-16, scale=1.0), 1e-6).certificate.termination is (
        Termination.OPTIMAL)
