"""HiGHS (LP and MIP): the one place apportion drives the `highspy` library.

Two ways in:
- `solve_highs(model, settings, deadline)`: one sparse model (`LinearModel`) solved once;
- `HighsSession`: a model kept in HiGHS and changed between runs (rows added, coefficients or
  bounds changed) so each run starts from the previous basis, for the algorithms that re-solve
  (cutting planes, active sets, lexicographic rounds).

Both return a `SolverResult` whose `row_dual` and `col_dual` follow HiGHS's convention for the
model as posed (for a minimization, the dual of a binding `<=` row is <= 0). `STATUS_MAP` is the
only translation of HiGHS's model status.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field, replace
from functools import cache
from importlib.metadata import version
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.solver.backends.highs_startup import NO_STARTUP, StartupCost, can_start
from apportion.solver.backends.status import SolverResult, SolverStatus
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import FloatArray
from apportion.solver.result import ModelSize

INFINITY = float("inf")
"""Use for absent bounds; HiGHS treats values >= 1e30 as infinite."""

STATUS_MAP: dict[str, SolverStatus] = {
    "kOptimal": SolverStatus.OPTIMAL,
    "kModelEmpty": SolverStatus.OPTIMAL,  # no columns and no rows: the empty point is optimal
    "kInfeasible": SolverStatus.INFEASIBLE,
    "kUnbounded": SolverStatus.UNBOUNDED,
    "kUnboundedOrInfeasible": SolverStatus.INFEASIBLE_OR_UNBOUNDED,
    "kTimeLimit": SolverStatus.TIME_LIMIT,
    "kIterationLimit": SolverStatus.ITERATION_LIMIT,
    "kSolutionLimit": SolverStatus.ITERATION_LIMIT,
    "kObjectiveBound": SolverStatus.ITERATION_LIMIT,
    "kObjectiveTarget": SolverStatus.ITERATION_LIMIT,
    "kInterrupt": SolverStatus.INTERRUPTED,
    "kHighsInterrupt": SolverStatus.INTERRUPTED,
    "kNotset": SolverStatus.ERROR,
    "kLoadError": SolverStatus.ERROR,
    "kModelError": SolverStatus.ERROR,
    "kPresolveError": SolverStatus.ERROR,
    "kSolveError": SolverStatus.NUMERICAL_ERROR,
    "kPostsolveError": SolverStatus.NUMERICAL_ERROR,
    "kMemoryLimit": SolverStatus.ERROR,
    "kUnknown": SolverStatus.ERROR,
}
"""HiGHS's `HighsModelStatus` member names -> `SolverStatus`."""

_FEASIBLE_POINT = 2
"""HiGHS's `primal_solution_status` for a feasible point (0 = none, 1 = infeasible)."""


@dataclass(frozen=True)
class LinearModel:
    """minimize (or maximize) cost @ x + offset  s.t.  row_lower <= matrix @ x <= row_upper,
    col_lower <= x <= col_upper, x integer where `integer` is True. Infinite bounds are
    +-inf."""

    cost: FloatArray
    matrix: sp.csc_matrix
    row_lower: FloatArray
    row_upper: FloatArray
    col_lower: FloatArray
    col_upper: FloatArray
    integer: NDArray[np.bool_] | None = None
    maximize: bool = False
    offset: float = 0.0

    @property
    def size(self) -> ModelSize:
        rows, cols = self.matrix.shape
        integers = 0 if self.integer is None else int(np.count_nonzero(self.integer))
        return ModelSize(cols, rows, int(self.matrix.nnz), integers)


@dataclass(frozen=True)
class HighsSettings:
    """How to run HiGHS. None = HiGHS's own default."""

    method: str | None = None
    """"simplex", "ipm" (interior point, with crossover to a vertex unless `crossover` is
    False), "pdlp" or "choose"."""
    crossover: bool | None = None
    primal_tolerance: float | None = None
    dual_tolerance: float | None = None
    mip_rel_gap: float | None = None
    mip_abs_gap: float | None = None
    seed: int | None = None
    threads: int = 0
    """0 = HiGHS's default (see `set_threads`)."""
    fallback_to_simplex: bool = False
    """Re-run with simplex when another method ends without a status (HiGHS's interior point
    can stall on small degenerate instances; simplex settles them)."""
    options: tuple[tuple[str, Any], ...] = field(default_factory=tuple)
    """Other HiGHS options by name, e.g. (("simplex_dual_edge_weight_strategy", 1),)."""
    startup: StartupCost = NO_STARTUP
    """The kind of program, for `solve_highs`'s estimate of the time before HiGHS first reads
    its limit: with less time left the program is not started."""


_quiet_done = False


def new_highs(threads: int = 0) -> Any:
    """A quiet `highspy.Highs` asking for `threads` (0 = default).

    The first construction in a process prints a banner on the C stdout before any option can
    be set, which would corrupt `apportion solve --json`; it is sent to /dev/null."""
    global _quiet_done
    import highspy

    if _quiet_done:
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
            _quiet_done = True
    highs.setOptionValue("output_flag", False)
    set_threads(highs, threads)
    return highs


_scheduler_threads: int | None = None


def set_threads(highs: Any, threads: int) -> None:
    """Ask HiGHS for `threads` (0 = its default). HiGHS keeps one global scheduler per
    process, and a run asking for a different thread count than the scheduler was started with
    fails, so the scheduler is restarted whenever the request changes."""
    global _scheduler_threads
    import highspy

    if _scheduler_threads is not None and _scheduler_threads != threads:
        highspy.Highs.resetGlobalScheduler(True)
    _scheduler_threads = threads
    if threads:
        highs.setOptionValue("threads", int(threads))


@cache
def highs_version() -> str:
    return version("highspy")


def apply_settings(highs: Any, settings: HighsSettings) -> None:
    """Set `settings` on a HiGHS object (threads excepted: `new_highs`)."""
    if settings.method is not None:
        highs.setOptionValue("solver", settings.method)
    if settings.crossover is not None:
        highs.setOptionValue("run_crossover", "on" if settings.crossover else "off")
    if settings.primal_tolerance is not None:
        highs.setOptionValue("primal_feasibility_tolerance", float(settings.primal_tolerance))
    if settings.dual_tolerance is not None:
        highs.setOptionValue("dual_feasibility_tolerance", float(settings.dual_tolerance))
    if settings.mip_rel_gap is not None:
        highs.setOptionValue("mip_rel_gap", float(settings.mip_rel_gap))
    if settings.mip_abs_gap is not None:
        highs.setOptionValue("mip_abs_gap", float(settings.mip_abs_gap))
    if settings.seed is not None:
        highs.setOptionValue("random_seed", int(settings.seed) % 2_147_483_647)
    for name, value in settings.options:
        highs.setOptionValue(name, value)


def set_deadline(highs: Any, deadline: Deadline) -> None:
    """HiGHS's wall-clock limit from `deadline` (none = HiGHS's infinite default)."""
    limit = deadline.solver_limit_s()
    highs.setOptionValue("time_limit", float(limit) if limit > 0 else INFINITY)


def _status_name(highs: Any) -> tuple[SolverStatus, str]:
    model_status = highs.getModelStatus()
    name = getattr(model_status, "name", str(model_status)).rsplit(".", 1)[-1]
    return STATUS_MAP.get(name, SolverStatus.ERROR), highs.modelStatusToString(model_status)


def read_result(highs: Any, size: ModelSize, elapsed_s: float, mip: bool) -> SolverResult:
    """The `SolverResult` of the last run of `highs` (a model of `size`)."""
    status, text = _status_name(highs)
    info = highs.getInfo()
    solution = highs.getSolution()
    x = np.asarray(solution.col_value, dtype=np.float64)
    row_dual = np.asarray(solution.row_dual, dtype=np.float64)
    cols, rows = size.variables, size.constraints
    if mip:
        has_solution = x.size == cols and int(info.primal_solution_status) == _FEASIBLE_POINT
    else:
        has_solution = x.size == cols and (
            status is SolverStatus.OPTIMAL or int(info.primal_solution_status) == _FEASIBLE_POINT
        )
    if x.size != cols:
        x = np.zeros(cols)
    if row_dual.size != rows:
        row_dual = np.zeros(rows)
    objective = float(info.objective_function_value) if has_solution else None
    if cols == 0 and status is SolverStatus.OPTIMAL:
        has_solution, objective = True, float(highs.getLp().offset_)
    bound: float | None = None
    if mip:
        dual_bound = float(info.mip_dual_bound)
        bound = dual_bound if np.isfinite(dual_bound) else None
        if status is SolverStatus.OPTIMAL and bound is None:
            bound = objective
    return SolverResult(
        status=status,
        x=x,
        row_dual=row_dual,
        objective=objective,
        bound=bound,
        has_solution=has_solution,
        solver="highs",
        solver_version=highs_version(),
        solve_time_s=elapsed_s,
        size=size,
        detail=text,
    )


def _pass_model(highs: Any, model: LinearModel) -> None:
    """Hand `model` to HiGHS as arrays in one call (4x faster than filling a HighsLp at 10^6
    nonzeros)."""
    import highspy

    rows, cols = model.matrix.shape
    matrix = sp.csc_matrix(model.matrix)
    integrality = (
        np.asarray(model.integer, dtype=np.int32)  # kContinuous = 0, kInteger = 1
        if model.integer is not None
        else np.zeros(cols, dtype=np.int32)
    )
    sense = highspy.ObjSense.kMaximize if model.maximize else highspy.ObjSense.kMinimize
    highs.passModel(
        int(cols), int(rows), int(matrix.nnz), int(highspy.MatrixFormat.kColwise), int(sense),
        float(model.offset),
        np.asarray(model.cost, dtype=np.float64),
        np.asarray(model.col_lower, dtype=np.float64),
        np.asarray(model.col_upper, dtype=np.float64),
        np.asarray(model.row_lower, dtype=np.float64),
        np.asarray(model.row_upper, dtype=np.float64),
        matrix.indptr[:-1].astype(np.int32, copy=False),
        matrix.indices.astype(np.int32, copy=False),
        matrix.data.astype(np.float64, copy=False),
        integrality,
    )


def _run(highs: Any, settings: HighsSettings) -> float:
    """Run, with the simplex fallback when asked; seconds spent."""
    started = time.perf_counter()
    highs.run()
    if settings.fallback_to_simplex and settings.method not in (None, "simplex"):
        status, _ = _status_name(highs)
        if status in (SolverStatus.ERROR, SolverStatus.NUMERICAL_ERROR):
            highs.setOptionValue("solver", "simplex")
            highs.clearSolver()
            highs.run()
    return time.perf_counter() - started


def solve_highs(
    model: LinearModel,
    settings: HighsSettings = HighsSettings(),
    deadline: Deadline = NO_DEADLINE,
    start: FloatArray | None = None,
) -> SolverResult:
    """Solve `model` once. `start`: a feasible point (column values) handed to a MIP as its
    first incumbent; ignored when None. HiGHS 1.16 can report a better objective than the
    point it returns after a start (presolve on); such a run is repeated without the start.
    A program HiGHS could not start and stop by `deadline` (`settings.startup`) is not started:
    TIME_LIMIT, no point, no time spent."""
    if not can_start(deadline, settings.startup, model.size):
        return not_started(model.size)
    highs = new_highs(settings.threads)
    apply_settings(highs, settings)
    set_deadline(highs, deadline)
    _pass_model(highs, model)
    if start is not None:
        _set_start(highs, start)
    elapsed = _run(highs, settings)
    mip = model.integer is not None and bool(model.integer.any())
    result = read_result(highs, model.size, elapsed, mip)
    if start is not None and result.has_solution and result.objective is not None:
        value = float(model.cost @ result.x) + model.offset
        if abs(value - result.objective) > 1e-6 * max(1.0, abs(result.objective)):
            again = solve_highs(model, settings, deadline)
            return replace(again, solve_time_s=again.solve_time_s + elapsed)
    return result


def not_started(size: ModelSize) -> SolverResult:
    """The result of a program of `size` not started for want of time."""
    return SolverResult(SolverStatus.TIME_LIMIT, np.zeros(size.variables),
                        np.zeros(size.constraints), solver="highs", size=size,
                        detail="not started: too little time left for a program this size")


def _set_start(highs: Any, start: FloatArray) -> None:
    import highspy

    solution = highspy.HighsSolution()
    solution.col_value = np.asarray(start, np.float64).tolist()
    solution.value_valid = True
    highs.setSolution(solution)


class HighsSession:
    """A model kept inside HiGHS across runs; each run starts from the last basis.

    Start from a `LinearModel` (possibly with no rows) and change it with the methods below.
    The raw `highspy.Highs` object is not exposed: every change goes through here."""

    def __init__(self, model: LinearModel, settings: HighsSettings = HighsSettings()) -> None:
        self.settings = settings
        self._highs = new_highs(settings.threads)
        apply_settings(self._highs, settings)
        _pass_model(self._highs, model)
        self.num_cols = int(model.matrix.shape[1])
        self.num_rows = int(model.matrix.shape[0])
        self.nonzeros = int(model.matrix.nnz)
        self.mip = model.integer is not None and bool(model.integer.any())
        self.runs = 0

    @property
    def size(self) -> ModelSize:
        return ModelSize(self.num_cols, self.num_rows, self.nonzeros, 0)

    def add_rows(
        self, lower: FloatArray, upper: FloatArray, rows: sp.csr_matrix
    ) -> None:
        """Append rows `lower <= rows @ x <= upper` (rows: (k, num_cols))."""
        matrix = sp.csr_matrix(rows)
        if matrix.shape[0] == 0:
            return
        self._highs.addRows(
            matrix.shape[0],
            np.asarray(lower, dtype=np.float64),
            np.asarray(upper, dtype=np.float64),
            int(matrix.nnz),
            matrix.indptr[:-1].astype(np.int32),
            matrix.indices.astype(np.int32),
            matrix.data.astype(np.float64),
        )
        self.num_rows += matrix.shape[0]
        self.nonzeros += int(matrix.nnz)

    def add_cols(
        self, cost: FloatArray, lower: FloatArray, upper: FloatArray, cols: sp.csc_matrix
    ) -> None:
        """Append columns with objective `cost` and bounds `lower <= x <= upper`; `cols` is
        (num_rows, k), their entries in the existing rows (column generation)."""
        matrix = sp.csc_matrix(cols)
        if matrix.shape[1] == 0:
            return
        self._highs.addCols(
            matrix.shape[1],
            np.asarray(cost, dtype=np.float64),
            np.asarray(lower, dtype=np.float64),
            np.asarray(upper, dtype=np.float64),
            int(matrix.nnz),
            matrix.indptr[:-1].astype(np.int32),
            matrix.indices.astype(np.int32),
            matrix.data.astype(np.float64),
        )
        self.num_cols += matrix.shape[1]
        self.nonzeros += int(matrix.nnz)

    def add_row(self, lower: float, upper: float, coefficients: FloatArray) -> None:
        """Append one row `lower <= coefficients @ x <= upper` given densely (num_cols,): for
        the small models of cutting-plane loops, without building a sparse matrix per row."""
        index = np.flatnonzero(coefficients).astype(np.int32)
        self._highs.addRow(float(lower), float(upper), int(index.size), index,
                           np.asarray(coefficients, np.float64)[index])
        self.num_rows += 1
        self.nonzeros += int(index.size)

    def change_coefficient(self, row: int, col: int, value: float) -> None:
        self._highs.changeCoeff(int(row), int(col), float(value))

    def change_row_bounds(self, rows: NDArray[np.int64], lower: FloatArray,
                          upper: FloatArray) -> None:
        index = np.asarray(rows, dtype=np.int32)
        self._highs.changeRowsBounds(index.size, index, np.asarray(lower, np.float64),
                                     np.asarray(upper, np.float64))

    def change_col_bounds(self, cols: NDArray[np.int64], lower: FloatArray,
                          upper: FloatArray) -> None:
        index = np.asarray(cols, dtype=np.int32)
        self._highs.changeColsBounds(index.size, index, np.asarray(lower, np.float64),
                                     np.asarray(upper, np.float64))

    def change_costs(self, cols: NDArray[np.int64], cost: FloatArray) -> None:
        index = np.asarray(cols, dtype=np.int32)
        self._highs.changeColsCost(index.size, index, np.asarray(cost, np.float64))

    def set_method(self, method: str) -> None:
        """Switch the LP method for the next runs ("simplex", "ipm", ...)."""
        self._highs.setOptionValue("solver", method)
        self.settings = HighsSettings(**{**self.settings.__dict__, "method": method})

    def run(self, deadline: Deadline = NO_DEADLINE) -> SolverResult:
        """Solve the current model (warm from the last basis)."""
        set_deadline(self._highs, deadline)
        elapsed = _run(self._highs, self.settings)
        self.runs += 1
        return read_result(self._highs, self.size, elapsed, self.mip)
