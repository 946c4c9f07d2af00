"""Thin, solver-neutral LP plumbing: a sparse LP in inequality form solved by Clarabel
(interior point) or HiGHS (dual simplex), returning primal values and row duals.

Form: maximize c @ x  subject to  A @ x <= b,  x >= 0, where the last `equalities` rows of A
are equalities (A @ x = b there). Duals returned are >= 0 on inequality rows (the multipliers
of the rows in the maximization's Lagrangian) and of either sign on equality rows.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import numpy as np
import scipy.sparse as sp

from apportion.solver.model import FloatArray, SolverPreference


@dataclass(frozen=True)
class LPResult:
    status: str
    """"optimal", "infeasible", "unbounded", "time_limit", "error" (solver words mapped)."""
    x: FloatArray
    row_dual: FloatArray
    objective: float
    solver: str
    solver_version: str
    solve_time_s: float
    detail: str = ""


def solve_lp(
    c: FloatArray,
    a_matrix: sp.csc_matrix,
    b: FloatArray,
    solver: SolverPreference = SolverPreference.CLARABEL,
    time_limit_s: float = 0.0,
    threads: int = 0,
    equalities: int = 0,
    highs_method: str = "simplex",
) -> LPResult:
    """Solve max c@x s.t. A@x <= b (the last `equalities` rows: A@x = b), x >= 0.
    `highs_method`: HiGHS's "simplex" or "ipm" (interior point with crossover: a vertex)."""
    if solver is SolverPreference.HIGHS:
        return _solve_highs(c, a_matrix, b, time_limit_s, threads, equalities, highs_method)
    return _solve_clarabel(c, a_matrix, b, time_limit_s, equalities)


def _solve_clarabel(
    c: FloatArray, a_matrix: sp.csc_matrix, b: FloatArray, time_limit_s: float,
    equalities: int = 0,
) -> LPResult:
    import clarabel

    rows, cols = a_matrix.shape
    g = sp.vstack([a_matrix, -sp.identity(cols, format="csc")], format="csc")
    h = np.concatenate([b, np.zeros(cols)])
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.presolve_enable = False
    settings.tol_gap_abs = 1e-10
    settings.tol_gap_rel = 1e-10
    settings.tol_feas = 1e-10
    settings.tol_ktratio = 1e-8
    if time_limit_s > 0:
        settings.time_limit = time_limit_s
    started = time.perf_counter()
    if equalities:
        cones = [clarabel.NonnegativeConeT(rows - equalities), clarabel.ZeroConeT(equalities),
                 clarabel.NonnegativeConeT(cols)]
    else:
        cones = [clarabel.NonnegativeConeT(rows + cols)]
    solver = clarabel.DefaultSolver(sp.csc_matrix((cols, cols)), -c, g, h, cones, settings)
    solution = solver.solve()
    elapsed = time.perf_counter() - started
    status_text = str(solution.status)
    if "AlmostSolved" in status_text or status_text.endswith("Solved"):
        status = "optimal"
    elif "PrimalInfeasible" in status_text:
        status = "infeasible"
    elif "DualInfeasible" in status_text:
        status = "unbounded"
    elif "MaxTime" in status_text:
        status = "time_limit"
    else:
        status = "error"
    x = np.asarray(solution.x, dtype=np.float64)
    z = np.asarray(solution.z, dtype=np.float64)
    return LPResult(
        status=status,
        x=x,
        row_dual=z[:rows],
        objective=float(c @ x) if x.size else 0.0,
        solver="clarabel",
        solver_version=version("clarabel"),
        solve_time_s=elapsed,
        detail=status_text,
    )


_quiet_highs_done = False


def new_highs(threads: int = 0, time_limit_s: float = 0.0) -> Any:
    """A quiet highspy.Highs instance asking for `threads` (0 = HiGHS's default; see
    `set_threads`) with a wall-clock limit of `time_limit_s` (s; 0 = none).

    Create every HiGHS object through this. The first construction in a process prints a
    banner on the C stdout (before any option can be set), which would corrupt
    `apportion solve --json`; it is sent to /dev/null."""
    global _quiet_highs_done
    import highspy

    if _quiet_highs_done:
        highs = highspy.Highs()  # type: ignore[no-untyped-call]
    else:
        sys.stdout.flush()
        saved = os.dup(1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            highs = highspy.Highs()  # type: ignore[no-untyped-call]
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
            _quiet_highs_done = True
    highs.setOptionValue("output_flag", False)
    if time_limit_s > 0:
        highs.setOptionValue("time_limit", float(time_limit_s))
    set_threads(highs, threads)
    return highs


_scheduler_threads: int | None = None


def set_threads(highs: Any, threads: int) -> None:
    """Ask HiGHS for `threads` (0 = its default). HiGHS keeps one global scheduler per
    process, and a run asking for a different thread count than the scheduler was started with
    fails ("Not Set"), so the scheduler is restarted whenever the request changes."""
    global _scheduler_threads
    import highspy

    if _scheduler_threads is not None and _scheduler_threads != threads:
        highspy.Highs.resetGlobalScheduler(True)
    _scheduler_threads = threads
    if threads:
        highs.setOptionValue("threads", int(threads))


def _solve_highs(
    c: FloatArray, a_matrix: sp.csc_matrix, b: FloatArray, time_limit_s: float, threads: int,
    equalities: int = 0, method: str = "simplex",
) -> LPResult:
    import highspy

    rows, cols = a_matrix.shape
    highs = new_highs(threads, time_limit_s)
    highs.setOptionValue("output_flag", False)
    highs.setOptionValue("solver", method)
    highs.setOptionValue("primal_feasibility_tolerance", 1e-10)
    highs.setOptionValue("dual_feasibility_tolerance", 1e-10)
    lp = highspy.HighsLp()
    lp.num_col_ = cols
    lp.num_row_ = rows
    lp.col_cost_ = -c
    lp.col_lower_ = np.zeros(cols)
    lp.col_upper_ = np.full(cols, highspy.kHighsInf)
    row_lower = np.full(rows, -highspy.kHighsInf)
    if equalities:
        row_lower[rows - equalities:] = b[rows - equalities:]
    lp.row_lower_ = row_lower
    lp.row_upper_ = b
    csc = sp.csc_matrix(a_matrix)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = csc.indptr
    lp.a_matrix_.index_ = csc.indices
    lp.a_matrix_.value_ = csc.data
    highs.passModel(lp)
    started = time.perf_counter()
    highs.run()
    elapsed = time.perf_counter() - started
    model_status = highs.getModelStatus()
    text = highs.modelStatusToString(model_status)
    mapping = {
        highspy.HighsModelStatus.kOptimal: "optimal",
        highspy.HighsModelStatus.kInfeasible: "infeasible",
        highspy.HighsModelStatus.kUnbounded: "unbounded",
        highspy.HighsModelStatus.kTimeLimit: "time_limit",
    }
    status = mapping.get(model_status, "error")
    solution = highs.getSolution()
    x = np.asarray(solution.col_value, dtype=np.float64)
    duals = -np.asarray(solution.row_dual, dtype=np.float64)
    if x.size != cols:
        x = np.zeros(cols)
        duals = np.zeros(rows)
    return LPResult(
        status=status,
        x=x,
        row_dual=duals,
        objective=float(c @ x),
        solver="highs",
        solver_version=version("highspy"),
        solve_time_s=elapsed,
        detail=text,
    )
