"""The LPs of water filling's rounds (A2.4), over the cells of
`apportion.formulations.space_sharing` in u units (normalized throughput): the round LP and
its certificate, the check that no job can rise any more, and the final plan's polish.

Rows are indexed by job group g (`RoundModel`); u_g(x) is the normalized throughput of each
job of the group. Running and frozen values are imposed `FLOOR_SLACK` below their value
(`relaxed`): the margin absorbs the solvers' feasibility tolerance (a value one round's plan
reaches must stay feasible in the next round) and keeps an interior for the interior-point
method. Bounds are stated for the rows at their exact values (weak duality holds for any
right-hand side): the slack never counts as a rise.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.formulations.space_sharing import (
    PackedLP,
    lagrangian_bound,
    level_entries,
    resource_entries,
)
from apportion.solver.backends.lp import solve_lp
from apportion.solver.backends.status import SolverResult
from apportion.solver.deadline import Deadline
from apportion.solver.model import FloatArray, IntArray, SolverPreference

BoolArray = NDArray[np.bool_]

FLOOR_SLACK = 1e-8
"""Running and frozen values u are imposed FLOOR_SLACK max(1, u) below (`relaxed`)."""


def relaxed(value: FloatArray, slack: float = FLOOR_SLACK) -> FloatArray:
    """The floors imposed for values u (u units): u - slack max(1, u), at least 0. The margin
    absorbs the solvers' feasibility tolerance (a value reached by one round's x must stay
    feasible in the next round) and keeps an interior for the interior-point method."""
    return np.asarray(np.maximum(value - slack * np.maximum(1.0, value), 0.0))


@dataclass(frozen=True)
class RoundModel:
    """The rows every round shares, over the variables of `cells` (t excluded)."""

    cells: PackedLP
    """Cells in u units (group g's coefficients per job of the group)."""
    u: sp.csr_matrix
    """(G, V): u_g(x) = (u @ x)[g]."""
    resources: sp.csr_matrix
    """(K, V) capacity, budget, same-class and balance rows (equalities last)."""
    rhs: FloatArray
    equalities: int
    s: FloatArray
    """(G,) devices per job."""
    cap: FloatArray
    """(G,) the largest u a job of the group can reach (all its time in its best cell)."""

    @staticmethod
    def of(cells: PackedLP) -> RoundModel:
        G = cells.k.size
        V = cells.num_vars - 1
        group, col, val = level_entries(cells)
        u = sp.csr_matrix((val, (group, col)), shape=(G, V))
        rows, cols, vals, rhs, equalities = resource_entries(cells, 0)
        resources = sp.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
            shape=(rhs.size, V))
        cap = np.asarray(u.max(axis=1).toarray()).ravel() if V else np.zeros(G)
        return RoundModel(cells, u, resources, rhs, equalities, cells.s, np.maximum(cap, 0.0))

    def entries(self) -> tuple[tuple[IntArray, IntArray, FloatArray],
                               tuple[IntArray, IntArray, FloatArray]]:
        """(row, column, value) of u's and of the resources' nonzeros."""
        u, r = self.u.tocoo(), self.resources.tocoo()
        return (u.row, u.col, u.data), (r.row, r.col, r.data)


@dataclass(frozen=True)
class RoundLP:
    """One round's LP: rows [level rows of `rising` (A), floor rows of `floored` (F), the cap
    row t <= M (compat gavel, optional), resources]; columns [x, t]."""

    matrix: sp.csc_matrix
    b: FloatArray
    c: FloatArray
    rising: IntArray
    floored: IntArray
    first_resource_row: int
    equalities: int
    t_rows: FloatArray
    """(first_resource_row,) t's coefficient in the rows before the resources."""


def round_lp(model: RoundModel, entries: tuple[tuple[IntArray, IntArray, FloatArray],
                                               tuple[IntArray, IntArray, FloatArray]],
             scale: FloatArray, rising: IntArray, floored: IntArray, floor: FloatArray,
             t_cap: float | None) -> RoundLP:
    """LP_k: maximize t s.t. scale_g (u_g(x) - floor_g) >= t (rising), u_g(x) >= floor_g
    (floored), t <= t_cap (when given) and the resource rows; `scale` = s_g / weight_g,
    `entries` = `model.entries()`. Built from the nonzeros in one step."""
    (ur, uc, uv), (rr, rc, rv) = entries
    G, V = model.u.shape
    A, F = rising.size, floored.size
    extra = 0 if t_cap is None else 1
    head = A + F + extra
    row_of = np.full(G, -1)
    row_of[rising] = np.arange(A)
    row_of[floored] = A + np.arange(F)
    factor = np.zeros(G)
    factor[rising] = scale[rising]
    factor[floored] = 1.0
    keep = row_of[ur] >= 0
    t_rows = np.concatenate([np.ones(A), np.zeros(F), np.ones(extra)])
    rows = np.concatenate([row_of[ur[keep]], head + rr, np.arange(head)[t_rows > 0]])
    cols = np.concatenate([uc[keep], rc, np.full(A + extra, V)])
    vals = np.concatenate([-factor[ur[keep]] * uv[keep], rv, np.ones(A + extra)])
    matrix = sp.csc_matrix((vals, (rows, cols)), shape=(head + model.rhs.size, V + 1))
    b = np.concatenate([-scale[rising] * floor[rising], -floor[floored],
                        [] if t_cap is None else [t_cap], model.rhs])
    c = np.zeros(V + 1)
    c[V] = 1.0
    return RoundLP(matrix, b, c, rising, floored, head, model.equalities, t_rows)


@dataclass(frozen=True)
class RoundSolution:
    result: SolverResult
    x: FloatArray
    """(V,) the LP's values without t, clipped at 0."""
    t: float
    """min over the rising rows of scale_g (u_g(x) - floor_g), recomputed from x."""
    bound: float
    """Proven upper bound on the round's optimum with the rows at their exact values (inf
    when the duals give none)."""
    y: FloatArray
    """(A,) the rising rows' duals, normalized to sum 1 with the cap row's."""
    prices: FloatArray
    """(n,) capacity duals of the repaired dual point."""
    lps: int


def solve_round(model: RoundModel, lp: RoundLP, scale: FloatArray, floor: FloatArray,
                exact: FloatArray, deadline: Deadline, fallback: bool) -> RoundSolution:
    """Solve with Clarabel (strictly complementary duals); on failure with HiGHS's simplex
    (late rounds are nearly degenerate; its vertex duals are optimal too, so freezing on them
    stays exact, only slower). Certify with the repaired duals: their Lagrangian bound for the
    rows at their `exact` values instead of the relaxed `floor` (weak duality holds for any
    right-hand side, so this bounds the round without the slack; it also takes back what the
    slack handed on)."""
    args = (lp.c, lp.matrix, lp.b)
    result = solve_lp(*args, SolverPreference.CLARABEL, deadline,
                      equalities=lp.equalities)
    lps = 1
    failed = not result.solved and not result.status.limit_reached
    if fallback and failed and not deadline.expired():
        slow = solve_lp(*args, SolverPreference.HIGHS, deadline,
                        equalities=lp.equalities)
        result = replace(slow, solve_time_s=slow.solve_time_s + result.solve_time_s,
                         solver=f"{result.solver}+{slow.solver}")
        lps = 2
    V = model.u.shape[1]
    A = lp.rising.size
    n = model.cells.W.size
    x = np.maximum(result.x[:V], 0.0) if result.x.size else np.zeros(V)
    rise = scale[lp.rising] * (model.u[lp.rising] @ x - floor[lp.rising])
    t = float(rise.min()) if A else 0.0
    bound, y, prices = float("inf"), np.zeros(A), np.zeros(n)
    duals = np.nan_to_num(result.row_dual, nan=0.0, posinf=0.0, neginf=0.0)
    first = lp.first_resource_row
    if duals.size == lp.b.size:
        weight = float(np.maximum(duals[:first], 0.0) @ lp.t_rows)
        if weight > 0:
            bound, lam = lagrangian_bound(model.cells, lp.matrix, lp.b, lp.c, duals / weight,
                                          first, lp.equalities)
            slack = np.concatenate([scale[lp.rising] * (exact - floor)[lp.rising],
                                    (exact - floor)[lp.floored]])
            bound -= float(lam[:slack.size] @ slack)
            y = lam[:A]
            prices = lam[first:first + n]
    return RoundSolution(result, x, t, bound, y, prices, lps)


def polish(model: RoundModel, value: FloatArray, frozen: BoolArray,
           deadline: Deadline) -> SolverResult:
    """A plan that keeps every frozen job within the floors' slack of its value, above and
    below (the last round's plan may hand a job what the slack freed elsewhere, amplified by
    exchange rates between jobs): any point of relaxed(value) <= u_g(x) <= value +
    FLOOR_SLACK max(1, value) for frozen rows, u_g(x) >= relaxed(value) for the others."""
    V = model.u.shape[1]
    rows = np.flatnonzero(frozen)
    ceiling = value[rows] + FLOOR_SLACK * np.maximum(1.0, value[rows])  # as `fill` checks
    matrix = sp.vstack([-model.u, model.u[rows], model.resources], format="csc")
    b = np.concatenate([-relaxed(value), ceiling, model.rhs])
    return solve_lp(np.zeros(V), matrix, b, SolverPreference.CLARABEL, deadline,
                    equalities=model.equalities)


@dataclass(frozen=True)
class Saturation:
    rise: float
    """Proven bound (u units) on how far any group not yet frozen can rise while every job
    keeps its value (inf when not proven)."""
    solve_time_s: float


def saturation(model: RoundModel, value: FloatArray, frozen: BoolArray,
               deadline: Deadline) -> Saturation:
    """maximize sum_g k_g (u_g(x) - r_g) over the groups not yet frozen s.t. u_g(x) >= r_g
    for every row (relaxed as in the rounds) and the resources; its repaired dual bound at
    the exact values bounds the total, hence every group's, rise."""
    G = model.u.shape[0]
    live = ~frozen
    floor = relaxed(value)
    matrix = sp.hstack([sp.vstack([-model.u, model.resources]),
                        sp.csr_matrix((G + model.rhs.size, 1))], format="csc")
    b = np.concatenate([-floor, model.rhs])
    c = np.concatenate([model.u.T @ np.where(live, model.cells.k, 0.0), [0.0]])
    result = solve_lp(c, matrix, b, SolverPreference.CLARABEL, deadline,
                      equalities=model.equalities)
    rise = float("inf")
    if result.solved:
        bound, lam = lagrangian_bound(model.cells, matrix, b, c, result.row_dual, G,
                                      model.equalities)
        bound -= float(lam[:G] @ (value - floor))
        rise = max(bound - float(np.sum(np.where(live, model.cells.k * value, 0.0))), 0.0)
    return Saturation(rise, result.solve_time_s)
