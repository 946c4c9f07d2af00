"""OR-Tools CP-SAT (integer programs with integer coefficients): the one place apportion runs it.

Callers build a `cp_model.CpModel` (the modelling API is CP-SAT's own) and hand it here with
the variables whose values they want; `STATUS_MAP` is the only translation of CP-SAT's status.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cache
from importlib.metadata import version
from typing import Any

import numpy as np

from apportion.solver.backends.status import SolverResult, SolverStatus
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.result import ModelSize

STATUS_MAP: dict[str, SolverStatus] = {
    "OPTIMAL": SolverStatus.OPTIMAL,
    "FEASIBLE": SolverStatus.TIME_LIMIT,  # stopped at a limit with an incumbent
    "INFEASIBLE": SolverStatus.INFEASIBLE,
    "MODEL_INVALID": SolverStatus.ERROR,
    "UNKNOWN": SolverStatus.TIME_LIMIT,  # stopped at a limit before finding anything
}
"""CP-SAT's `CpSolverStatus` names -> `SolverStatus`."""


@cache
def ortools_version() -> str:
    return version("ortools")


def solve_cpsat(
    model: Any,
    variables: Sequence[Any],
    size: ModelSize,
    deadline: Deadline = NO_DEADLINE,
    threads: int = 0,
    seed: int = 1,
) -> SolverResult:
    """Solve a CP-SAT `model`; `x` holds the values of `variables` (in order), `objective` and
    `bound` are CP-SAT's objective value and best bound (in the model's integer units).
    `threads` 0 = 2 workers."""
    from ortools.sat.python import cp_model

    solver: Any = cp_model.CpSolver()
    solver.parameters.num_workers = threads if threads > 0 else 2
    solver.parameters.random_seed = int(seed) % 2_147_483_647
    limit = deadline.solver_limit_s()
    if limit > 0:
        solver.parameters.max_time_in_seconds = float(limit)
    started = time.perf_counter()
    code = solver.Solve(model)
    elapsed = time.perf_counter() - started
    name = solver.StatusName(code)
    status = STATUS_MAP.get(name, SolverStatus.ERROR)
    has_solution = code in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    x = (
        np.asarray([solver.Value(v) for v in variables], np.float64)
        if has_solution
        else np.zeros(len(variables))
    )
    return SolverResult(
        status=status,
        x=x,
        objective=float(solver.ObjectiveValue()) if has_solution else None,
        bound=float(solver.BestObjectiveBound()) if has_solution else None,
        has_solution=has_solution,
        solver="cp-sat",
        solver_version=ortools_version(),
        solve_time_s=elapsed,
        size=size,
        detail=name,
    )
