"""How a solve ended and how big its model was: the leaf types of a certificate, in a module of
their own so that every result module can use them without importing another."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Termination(StrEnum):
    """How a solve ended (A1.4, docs/policies/common.md)."""

    OPTIMAL = "optimal"
    OPTIMAL_INACCURATE = "optimal_inaccurate"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    UNBOUNDED = "unbounded"
    HEURISTIC = "heuristic"
    NO_SOLUTION = "no_solution"
    ERROR = "error"


@dataclass(frozen=True)
class ModelSize:
    variables: int = 0
    constraints: int = 0
    nonzeros: int = 0
    integer_variables: int = 0
