"""Clarabel (interior point for LPs and conic programs): the one place apportion drives it.

The model is Clarabel's own standard form:

    minimize 1/2 x'Px + q'x  s.t.  A x + s = b,  s in K

with K a product of cones given as `Cone` descriptors (so callers never import clarabel). The
result's `row_dual` is Clarabel's z (in the dual cone; >= 0 on nonnegative-cone rows), and
`objective` is the primal objective. `STATUS_MAP` is the only translation of Clarabel's status.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib.metadata import version

import numpy as np
import scipy.sparse as sp

from apportion.solver.backends.status import SolverResult, SolverStatus
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import FloatArray
from apportion.solver.result import ModelSize

STATUS_MAP: dict[str, SolverStatus] = {
    "Solved": SolverStatus.OPTIMAL,
    "AlmostSolved": SolverStatus.ALMOST_OPTIMAL,
    "PrimalInfeasible": SolverStatus.INFEASIBLE,
    "AlmostPrimalInfeasible": SolverStatus.INFEASIBLE,
    "DualInfeasible": SolverStatus.UNBOUNDED,  # a dual infeasibility certificate: unbounded
    "AlmostDualInfeasible": SolverStatus.UNBOUNDED,
    "MaxIterations": SolverStatus.ITERATION_LIMIT,
    "MaxTime": SolverStatus.TIME_LIMIT,
    "CallbackTerminated": SolverStatus.INTERRUPTED,
    "NumericalError": SolverStatus.NUMERICAL_ERROR,
    "InsufficientProgress": SolverStatus.NUMERICAL_ERROR,
    "Unsolved": SolverStatus.ERROR,
}
"""Clarabel's `SolverStatus` names -> `SolverStatus`."""


class ConeKind(StrEnum):
    ZERO = "zero"
    """Equality rows (s = 0)."""
    NONNEGATIVE = "nonnegative"
    """Inequality rows (s >= 0, i.e. A x <= b)."""
    EXPONENTIAL = "exponential"
    """One 3-row exponential cone {(x, y, z): y e^(x/y) <= z, y > 0}."""


@dataclass(frozen=True)
class Cone:
    kind: ConeKind
    rows: int
    """Rows of A the cone covers (3 for an exponential cone)."""


@dataclass(frozen=True)
class ClarabelSettings:
    """Clarabel's tolerances (apportion's defaults: tight, since certificates are recomputed
    from the returned point and duals)."""

    gap_abs: float = 1e-10
    gap_rel: float = 1e-10
    feasibility: float = 1e-10
    kt_ratio: float = 1e-8
    presolve: bool = True


@dataclass(frozen=True)
class ConicModel:
    """minimize 1/2 x'Px + q'x  s.t.  A x + s = b, s in the product of `cones` (in row order)."""

    q: FloatArray
    A: sp.csc_matrix
    b: FloatArray
    cones: tuple[Cone, ...]
    P: sp.csc_matrix | None = None
    """None = a linear objective."""

    @property
    def size(self) -> ModelSize:
        rows, cols = self.A.shape
        return ModelSize(cols, rows, int(self.A.nnz), 0)


@cache
def clarabel_version() -> str:
    return version("clarabel")


def _cones(cones: tuple[Cone, ...]) -> list[object]:
    import clarabel

    built: list[object] = []
    for cone in cones:
        if cone.kind is ConeKind.ZERO:
            built.append(clarabel.ZeroConeT(cone.rows))
        elif cone.kind is ConeKind.NONNEGATIVE:
            built.append(clarabel.NonnegativeConeT(cone.rows))
        else:
            if cone.rows != 3:
                raise ValueError("an exponential cone covers exactly 3 rows")
            built.append(clarabel.ExponentialConeT())
    return built


def solve_clarabel(
    model: ConicModel,
    settings: ClarabelSettings = ClarabelSettings(),
    deadline: Deadline = NO_DEADLINE,
) -> SolverResult:
    """Solve `model` once."""
    import clarabel

    rows, cols = model.A.shape
    options = clarabel.DefaultSettings()
    options.verbose = False
    options.presolve_enable = settings.presolve
    options.tol_gap_abs = settings.gap_abs
    options.tol_gap_rel = settings.gap_rel
    options.tol_feas = settings.feasibility
    options.tol_ktratio = settings.kt_ratio
    limit = deadline.solver_limit_s()
    if limit > 0:
        options.time_limit = float(limit)
    P = model.P if model.P is not None else sp.csc_matrix((cols, cols))
    started = time.perf_counter()
    solver = clarabel.DefaultSolver(
        sp.csc_matrix(P), np.asarray(model.q, np.float64), sp.csc_matrix(model.A),
        np.asarray(model.b, np.float64), _cones(model.cones), options,
    )
    solution = solver.solve()
    elapsed = time.perf_counter() - started
    name = str(solution.status).rsplit(".", 1)[-1]
    status = STATUS_MAP.get(name, SolverStatus.ERROR)
    x = np.asarray(solution.x, dtype=np.float64)
    z = np.asarray(solution.z, dtype=np.float64)
    has_solution = status.solved and x.size == cols
    if x.size != cols:
        x = np.zeros(cols)
    if z.size != rows:
        z = np.zeros(rows)
    return SolverResult(
        status=status,
        x=x,
        row_dual=z,
        objective=float(solution.obj_val) if has_solution else None,
        bound=None,
        has_solution=has_solution,
        solver="clarabel",
        solver_version=clarabel_version(),
        solve_time_s=elapsed,
        size=model.size,
        detail=name,
    )
