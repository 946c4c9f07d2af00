"""The LP form most formulations build, solved on either backend.

    maximize c @ x  subject to  A @ x <= b,  x >= 0,

where the last `equalities` rows of A are equalities (A @ x = b there). The result's
`row_dual` holds the multipliers of the rows in the maximization's Lagrangian: >= 0 on
inequality rows, either sign on equality rows, so that c - A' y <= 0 at an optimum (the
formulations' certificates repair and check them). `objective` is c @ x of the returned x.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import scipy.sparse as sp

from apportion.solver.backends.clarabel import (
    ClarabelSettings,
    Cone,
    ConeKind,
    ConicModel,
    solve_clarabel,
)
from apportion.solver.backends.highs import INFINITY, HighsSettings, LinearModel, solve_highs
from apportion.solver.backends.status import SolverResult
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import FloatArray, SolverPreference

LP_TOLERANCE = 1e-10
"""Primal and dual feasibility tolerance asked of both backends for these LPs (rows are
scaled to O(1) by the formulations)."""
IPM_COLUMNS = 20_000
"""HiGHS method "auto": dual simplex up to this many columns, interior point with crossover
(still a vertex with exact duals) above: on the per-job LPs of 10^5 columns simplex takes
minutes where the interior point takes seconds (max-sum-throughput on 32,768 distinct jobs:
141 s against 6.3 s, measured 2026-12-01)."""


def solve_lp(
    c: FloatArray,
    a_matrix: sp.csc_matrix | sp.csr_matrix,
    b: FloatArray,
    solver: SolverPreference = SolverPreference.CLARABEL,
    deadline: Deadline = NO_DEADLINE,
    threads: int = 0,
    equalities: int = 0,
    highs_method: str = "auto",
) -> SolverResult:
    """Solve max c@x s.t. A@x <= b (the last `equalities` rows: A@x = b), x >= 0 with Clarabel
    (interior point) or HiGHS (`highs_method`: "simplex", "ipm" with crossover: a vertex, or
    "auto": by size, `IPM_COLUMNS`)."""
    if highs_method == "auto":
        highs_method = "ipm" if a_matrix.shape[1] > IPM_COLUMNS else "simplex"
    if solver is SolverPreference.HIGHS:
        return _solve_highs(c, a_matrix, b, deadline, threads, equalities, highs_method)
    return _solve_clarabel(c, a_matrix, b, deadline, equalities)


def _solve_clarabel(
    c: FloatArray, a_matrix: sp.spmatrix, b: FloatArray, deadline: Deadline, equalities: int
) -> SolverResult:
    rows, cols = a_matrix.shape
    # x >= 0 as -x <= 0 rows after A's rows; Clarabel's z on them are the bound multipliers
    stacked = sp.vstack([a_matrix, -sp.identity(cols, format="csc")], format="csc")
    rhs = np.concatenate([b, np.zeros(cols)])
    cones = (
        (Cone(ConeKind.NONNEGATIVE, rows - equalities), Cone(ConeKind.ZERO, equalities),
         Cone(ConeKind.NONNEGATIVE, cols))
        if equalities
        else (Cone(ConeKind.NONNEGATIVE, rows + cols),)
    )
    settings = ClarabelSettings(presolve=False)
    result = solve_clarabel(ConicModel(-c, stacked, rhs, cones), settings, deadline)
    x = result.x
    return replace(
        result,
        row_dual=result.row_dual[:rows],
        objective=float(c @ x) if result.has_solution else None,
    )


def _solve_highs(
    c: FloatArray, a_matrix: sp.spmatrix, b: FloatArray, deadline: Deadline, threads: int,
    equalities: int, method: str,
) -> SolverResult:
    rows, cols = a_matrix.shape
    row_lower = np.full(rows, -INFINITY)
    if equalities:
        row_lower[rows - equalities:] = b[rows - equalities:]
    model = LinearModel(
        cost=-np.asarray(c, np.float64),
        matrix=sp.csc_matrix(a_matrix),
        row_lower=row_lower,
        row_upper=np.asarray(b, np.float64),
        col_lower=np.zeros(cols),
        col_upper=np.full(cols, INFINITY),
    )
    settings = HighsSettings(
        method=method, primal_tolerance=LP_TOLERANCE, dual_tolerance=LP_TOLERANCE,
        threads=threads,
    )
    result = solve_highs(model, settings, deadline)
    x = result.x
    # HiGHS minimizes -c@x; its row duals are <= 0 on binding <= rows: negate for the
    # maximization's multipliers
    return replace(
        result,
        row_dual=-result.row_dual,
        objective=float(c @ x) if result.has_solution else None,
    )
