"""One vocabulary for how a solver run ended, and one result type for every backend.

Each backend module (`highs`, `clarabel`, `ortools`) maps its library's own status codes to
`SolverStatus` in a single table (`STATUS_MAP`), as cvxpy's solver interfaces do; nothing else
in apportion reads a library's status. The public `Termination` of a plan is derived from a
`SolverStatus` and the plan's certificate in one place, `apportion.solver.certificate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from apportion.solver.model import FloatArray
from apportion.solver.outcome import ModelSize


class SolverStatus(StrEnum):
    """How a solver run ended (the solver's claim, before apportion checks the certificate)."""

    OPTIMAL = "optimal"
    """Solved to the requested tolerances (an LP/conic optimum, or a MIP within its gap)."""
    ALMOST_OPTIMAL = "almost_optimal"
    """Solved to reduced tolerances (Clarabel's AlmostSolved)."""
    INFEASIBLE = "infeasible"
    UNBOUNDED = "unbounded"
    INFEASIBLE_OR_UNBOUNDED = "infeasible_or_unbounded"
    TIME_LIMIT = "time_limit"
    ITERATION_LIMIT = "iteration_limit"
    """An iteration, node or solution-count limit."""
    INTERRUPTED = "interrupted"
    NUMERICAL_ERROR = "numerical_error"
    ERROR = "error"
    """Anything else: a failed run, a model the solver rejected, an unknown status."""

    @property
    def solved(self) -> bool:
        """The solver claims an optimum (possibly at reduced accuracy)."""
        return self in (SolverStatus.OPTIMAL, SolverStatus.ALMOST_OPTIMAL)

    @property
    def limit_reached(self) -> bool:
        """The run stopped at a limit (time, iterations, interrupt) before proving anything."""
        return self in (
            SolverStatus.TIME_LIMIT,
            SolverStatus.ITERATION_LIMIT,
            SolverStatus.INTERRUPTED,
        )


@dataclass(frozen=True)
class SolverResult:
    """What one solver run returned. Arrays have the model's sizes even when the run found no
    point (zeros then; `has_solution` says whether `x` is a point of the model)."""

    status: SolverStatus
    x: FloatArray
    """Column values."""
    row_dual: FloatArray = field(default_factory=lambda: np.zeros(0))
    """Row multipliers; the runner that produced the result documents their sign."""
    objective: float | None = None
    """Objective value of `x` as the solver evaluates it (offset included); None = no point."""
    bound: float | None = None
    """The solver's proven bound on the optimum (MIP best bound, or the dual objective);
    None = none proven."""
    has_solution: bool = False
    """`x` satisfies the model's constraints within the solver's tolerances (an optimum or a
    MIP incumbent)."""
    solver: str = ""
    solver_version: str = ""
    solve_time_s: float = 0.0
    """Seconds inside the solver library."""
    size: ModelSize = field(default_factory=ModelSize)
    detail: str = ""
    """The library's own words for the status."""

    @property
    def solved(self) -> bool:
        """The solver claims an optimum and returned the point."""
        return self.status.solved and self.has_solution
