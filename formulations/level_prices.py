"""Capacity prices for the max-min level LP (A2.1) from its Lagrangian dual, by cutting planes.

Pricing the capacity rows at pi >= 0 (per device of each type) splits the level LP of
`max_min_fairness` by row. Row i (a class of k_i identical jobs of s_i devices, levels a[i, :])
reaches level t most cheaply at the cost

    c_i(pi, t) = min { s_i pi.x : a[i,:].x >= t, sum_j x_j <= 1, x >= 0 }

per job, the lower convex hull of the points (0, 0) and (a[i,j], s_i pi_j) at t (+inf above
the row's best level u_i). The dual function

    D(pi) = W.pi + max_t [ t - C(pi, t) ],   C(pi, t) = sum_i k_i c_i(pi, t)         (A2.1 dual)

is convex in pi, D(pi) >= t* for every pi >= 0, and min D = t* (LP duality: D(pi) is the dual
objective of pi, the multipliers y_i = k_i dc_i/dt at the maximizing level t^ and the
smallest feasible sigma). Any plan that reaches level t on every row with device use U gives
the cut t + pi.(W - U) <= D(pi), valid for every pi.

D is cheap: the hulls cost O(m n^2) vector operations, and only rows whose cheapest type per
level sits below the highest level that matters (u_min = min_i u_i, or what the budget can
pay for) need more than one hull vertex. On a ray pi = scale rho (W.rho = 1) the least D is
found in the same pass (`ray_minimum`): it is tau(rho) = max {t <= u_min : C(rho, t) <= 1},
the highest level the cluster can pay for when its devices are valued at rho, reached at
scale = 1 / C'(rho, tau). Minimizing along rays removes the direction in which D is kinked at
the optimum (the maximizing level jumps as the prices' scale crosses the optimal one), so the
cutting planes only have to find the price ratios.

`PriceSearch` starts from a price direction, scales each price by its type's demand over its
supply twice, then runs Kelley's method with a trust region: the next direction minimizes
the cuts' maximum over {p >= 0, sum_j p_j <= D(best)} (p_j = W_j pi_j; W.pi <= D(pi) for all
pi) inside a box around the best prices, a small LP kept warm in a `HighsSession`. The
model's minimum over the whole region is a proven lower bound on t*, the best D met a proven
upper bound, and the dual of the model's LP combines the plans met into one that reaches the
lower bound (`PriceSearch.plan`). The exact optimum is left to the active-set method of
`max_min_fairness`, started from these prices with only the rows near a tie explicit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.solver.backends.highs import INFINITY, HighsSession, HighsSettings, LinearModel
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import FloatArray

PRICE_GAP = 1e-5
"""Relative gap between the proven bounds at which the price search stops: by then the
prices are within about 1e-3 of optimal prices and the active set settles in one round."""
MAX_EVALUATIONS = 80
"""Evaluations of the dual function before the search stops whatever the gap."""
INITIAL_REGION = 0.1
"""Trust region's half-width per type, relative to the best prices' total W.pi."""
REGION_GROWTH = 1.5
"""Factor on the region after a step that lowers the best D."""
REGION_SHRINK = 0.25
"""Factor on the region after a step that does not (measured on the benchmark families: 1.5
and 0.25 take a sixth fewer evaluations than 2 and 0.5)."""
DEMAND_STEPS = 2
"""Evaluations before the cutting planes that scale every price by its type's demand over
its supply at the last prices (a fifth fewer evaluations on the benchmark families)."""
MIN_REGION = 1e-6
"""A region shrunk to this (relative) gives way to one unconstrained step of Kelley's."""

IntVector = NDArray[np.int64]


@dataclass(frozen=True)
class LevelRows:
    """The level LP's rows laid out by type for per-type vector work: `levels` (n, m) with 0
    on cells a row cannot use, `s` (m,) devices per job, `k` (m,) jobs per row, `W` (n,)
    devices per type (all > 0). Every row has a usable cell."""

    levels: FloatArray
    s: FloatArray
    k: FloatArray
    W: FloatArray
    inverse: FloatArray
    """1 / levels, +inf on unusable cells (n, m)."""
    lowest: float
    """u_min = min_i max_j levels[j, i]: no plan gives every row more."""
    bottleneck: int
    """A row whose best level is u_min."""

    @staticmethod
    def build(a: FloatArray, s: FloatArray, k: FloatArray, W: FloatArray) -> LevelRows:
        """From the row-major level coefficients a (m, n), every row with a positive entry."""
        levels = np.ascontiguousarray(a.T, dtype=np.float64)
        inverse = np.full(levels.shape, np.inf)
        np.divide(1.0, levels, out=inverse, where=levels > 0)
        best = levels.max(axis=0) if levels.size else np.zeros(levels.shape[1])
        bottleneck = int(np.argmin(best)) if best.size else 0
        lowest = float(best[bottleneck]) if best.size else 0.0
        return LevelRows(levels, s, k, W, inverse, lowest, bottleneck)

    @property
    def num_types(self) -> int:
        return int(self.levels.shape[0])


@dataclass(frozen=True)
class CostCurves:
    """C(pi, .) on [0, limit] (limit <= u_min, see `cost_curves`). Every row's first hull
    vertex (full time on `first_kind`, at level `first_level`, cost `first_cost`; the first
    edge has slope `first_slope`); for the rows in `climbing` (first vertex below the limit)
    their further vertices `level`, `cost`, `kind` (q, c) up to the first one at or above the
    limit (`count` (c,) vertices after the first; +inf levels pad). The total slope is
    `start_slope` from 0, then `slope_after[b]` from the sorted breakpoint `breakpoints[b]`
    on."""

    pi: FloatArray
    first_level: FloatArray
    first_cost: FloatArray
    first_kind: IntVector
    first_slope: FloatArray
    climbing: IntVector
    level: FloatArray
    cost: FloatArray
    kind: IntVector
    count: IntVector
    start_slope: float
    breakpoints: FloatArray
    slope_after: FloatArray


def cost_curves(rows: LevelRows, pi: FloatArray, budget: float | None = None) -> CostCurves:
    """The rows' cost curves at prices pi on [0, limit]: hulls walked from the origin, each
    next vertex the usable point of higher level with the least cost slope. The limit is
    u_min, or with a `budget` the level C(pi, .) cannot pass before costing it: C is convex
    from C(0) = 0, so C(t) >= t C'(0+), and no t above budget / C'(0+) is affordable. Only
    rows whose first vertex lies below the limit are walked further."""
    n, m = rows.levels.shape
    first_slope = np.full(m, np.inf)
    first_level = np.zeros(m)
    first_kind = np.zeros(m, dtype=np.int64)
    for j in range(n):
        if pi[j] > 0:
            per_level = rows.inverse[j] * (rows.s * pi[j])
        else:
            per_level = np.where(rows.levels[j] > 0, 0.0, np.inf)
        better = per_level < first_slope
        np.copyto(first_slope, per_level, where=better)
        np.copyto(first_level, rows.levels[j], where=better)
        np.copyto(first_kind, j, where=better)
    first_cost = rows.s * pi[first_kind]
    start_slope = float(np.einsum("i,i->", rows.k, first_slope))
    lowest = rows.lowest
    if budget is not None and start_slope * lowest > budget:
        lowest = budget / start_slope
    climbing = np.nonzero(first_level < lowest)[0]
    c = climbing.size
    level = np.full((n, c), np.inf)
    cost = np.zeros((n, c))
    kind = np.zeros((n, c), dtype=np.int64)
    count = np.zeros(c, dtype=np.int64)
    at_level, at_cost = first_level[climbing], first_cost[climbing]
    active = np.arange(c)
    s_climb = rows.s[climbing]
    for q in range(n):
        if active.size == 0:
            break
        sub = climbing[active]
        slope = np.full(active.size, np.inf)
        next_level = np.zeros(active.size)
        next_cost = np.zeros(active.size)
        next_kind = np.zeros(active.size, dtype=np.int64)
        for j in range(n):
            candidate = rows.levels[j, sub]
            rise = candidate - at_level
            price = s_climb[active] * pi[j]
            steep = np.full(active.size, np.inf)
            np.divide(price - at_cost, rise, out=steep, where=rise > 0)
            better = steep < slope
            np.copyto(slope, steep, where=better)
            np.copyto(next_level, candidate, where=better)
            np.copyto(next_cost, price, where=better)
            np.copyto(next_kind, j, where=better)
        found = np.isfinite(slope)  # always, as u_i >= u_min: a guard
        active, next_level, next_cost, next_kind = (
            active[found], next_level[found], next_cost[found], next_kind[found]
        )
        at_level, at_cost = at_level[found], at_cost[found]
        level[q, active] = next_level
        cost[q, active] = next_cost
        kind[q, active] = next_kind
        count[active] = q + 1
        going = next_level < lowest
        active, at_level, at_cost = active[going], next_level[going], next_cost[going]
    # breakpoints: every climbing row's vertices below u_min, where its slope rises
    k_climb = rows.k[climbing]
    vertex_level = np.concatenate([first_level[climbing][None, :], level], axis=0)
    vertex_cost = np.concatenate([first_cost[climbing][None, :], cost], axis=0)
    edge_slope = np.full(level.shape, np.inf)
    with np.errstate(invalid="ignore"):  # inf - inf on padding, masked out
        rise = np.diff(vertex_level, axis=0)
        np.divide(np.diff(vertex_cost, axis=0), rise, out=edge_slope, where=np.isfinite(rise))
        previous = np.concatenate([first_slope[climbing][None, :], edge_slope[:-1]], axis=0)
        below = vertex_level[:-1] < lowest
        breakpoints = vertex_level[:-1][below]
        jumps = (k_climb[None, :] * (edge_slope - previous))[below]
    order = np.argsort(breakpoints)
    return CostCurves(
        pi, first_level, first_cost, first_kind, first_slope, climbing, level, cost, kind,
        count, start_slope, breakpoints[order], start_slope + np.cumsum(jumps[order]),
    )


@dataclass(frozen=True)
class LagrangianPoint:
    """D at prices `pi` (= scale * curves.pi), its maximizing level and the rows' plans there.
    A row not climbing past its first vertex spends `along` of its time on `first_kind`; a
    climbing row sits on the hull edge from its vertex `edge - 1` to `edge` (vertex -1 =
    the first), `along` of the way."""

    pi: FloatArray
    value: float
    """D(pi): a proven upper bound on t*."""
    level: float
    """t^, a maximizing level."""
    use: FloatArray
    """U (n,): devices of every type used by the rows' plans at t^."""
    curves: CostCurves
    scale: float
    along: FloatArray
    edge: IntVector
    """Per climbing row: the vertex its edge ends at (0 = its first edge from the origin)."""
    k: FloatArray
    lowest: float
    bottleneck: int

    def plan(self) -> FloatArray:
        """The rows' plans at t^ (m, n): time shares of one job of each row."""
        curves = self.curves
        m, n = curves.first_level.size, curves.pi.size
        X = np.zeros((m, n))
        X[np.arange(m), curves.first_kind] = self.along
        on_edge = np.nonzero(self.edge > 0)[0]
        rows = curves.climbing[on_edge]
        start_kind, _, _ = _edge_start(curves, on_edge, self.edge[on_edge])
        share = self.along[rows]
        X[rows, curves.first_kind[rows]] = 0.0
        X[rows, start_kind] += 1.0 - share
        X[rows, curves.kind[self.edge[on_edge] - 1, on_edge]] += share
        return X

    def multipliers(self) -> FloatArray:
        """Row multipliers y (m,), sum 1: k_i times the slope of c_i(pi, .) left of t^; what
        they leave goes to a row whose best level is t^ (its slope rises to +inf there), or
        else all are rescaled. With pi they are dual feasible for the level LP (sigma the
        smallest feasible); their dual objective is D(pi) whenever the left slopes sum to 1,
        as at every `ray_minimum` with a positive scale."""
        curves = self.curves
        k = self.k
        if self.level <= 0.0:  # every row at the origin: any slope in [0, first slope]
            return np.asarray(k * curves.first_slope / curves.start_slope, np.float64)
        slope = curves.first_slope.copy()
        on_edge = np.nonzero(self.edge > 0)[0]
        q = self.edge[on_edge]
        _, start_level, start_cost = _edge_start(curves, on_edge, q)
        end_level, end_cost = curves.level[q - 1, on_edge], curves.cost[q - 1, on_edge]
        slope[curves.climbing[on_edge]] = (end_cost - start_cost) / (end_level - start_level)
        y = np.asarray(k * self.scale * slope, dtype=np.float64)
        missing = 1.0 - float(y.sum())
        if missing > 0 and self.level >= self.lowest:
            y[self.bottleneck] += missing
        elif y.sum() > 0:
            y /= y.sum()
        return y


def _edge_start(
    curves: CostCurves, on_edge: IntVector, edge: IntVector
) -> tuple[IntVector, FloatArray, FloatArray]:
    """(type, level, cost) of the vertex each climbing row's edge `edge` (>= 1) starts at."""
    rows = curves.climbing[on_edge]
    before = np.maximum(edge - 2, 0)
    later = edge >= 2
    return (
        np.where(later, curves.kind[before, on_edge], curves.first_kind[rows]),
        np.where(later, curves.level[before, on_edge], curves.first_level[rows]),
        np.where(later, curves.cost[before, on_edge], curves.first_cost[rows]),
    )


def lagrangian(rows: LevelRows, pi: FloatArray) -> LagrangianPoint:
    """D(pi), a maximizing level t^ (where the total cost slope reaches 1) and the rows' plans
    there (module docstring)."""
    curves = cost_curves(rows, pi)
    t_hat = rows.lowest
    if curves.start_slope >= 1.0:
        t_hat = 0.0
    else:
        hit = int(np.searchsorted(curves.slope_after, 1.0))
        if hit < curves.breakpoints.size:
            t_hat = float(curves.breakpoints[hit])
    return _point(rows, curves, 1.0, t_hat)


def ray_minimum(rows: LevelRows, direction: FloatArray) -> LagrangianPoint:
    """The least D on the ray {scale * direction : scale >= 0} (direction >= 0, W.direction
    > 0), for the cost of one evaluation of D.

    With W.rho = 1, D(scale rho) = scale + max_t [t - scale C(rho, t)] is least where
    C(rho, t^) = 1, at t^ = tau := max {t <= u_min : C(rho, t) <= 1}, scale = 1 / C'(rho,
    tau-) (0 when u_min is reached within the budget), and there D = tau."""
    rho = direction / float(rows.W @ direction)
    curves = cost_curves(rows, rho, budget=1.0)
    # C at 0, at every breakpoint and at u_min; the slope on each piece
    levels = np.concatenate([[0.0], curves.breakpoints, [rows.lowest]])
    slopes = np.concatenate([[curves.start_slope], curves.slope_after])
    total = np.concatenate([[0.0], np.cumsum(slopes * np.diff(levels))])
    reach = int(np.searchsorted(total, 1.0))  # first level where C >= 1
    if reach >= levels.size or not slopes[reach - 1] > 0:
        return _point(rows, curves, 0.0, rows.lowest)  # the budget does not bind
    piece = reach - 1
    tau = min(float(levels[piece] + (1.0 - total[piece]) / slopes[piece]), rows.lowest)
    return _point(rows, curves, 1.0 / float(slopes[piece]), tau)


def _point(rows: LevelRows, curves: CostCurves, scale: float, t_hat: float) -> LagrangianPoint:
    """The evaluation at prices scale * curves.pi with maximizing level t^ <= u_min."""
    n = rows.num_types
    along = t_hat / curves.first_level
    row_cost = along * curves.first_cost
    ks = rows.k * rows.s
    weight = ks * along
    # climbing rows past their first vertex: on the edge that ends at or after t^
    c = curves.climbing.size
    edge = np.zeros(c, dtype=np.int64)
    if c:
        past_first = curves.first_level[curves.climbing] < t_hat
        edge = past_first.astype(np.int64)
        for vertex in range(n - 1):
            edge += past_first & (curves.level[vertex] < t_hat)
        on_edge = np.nonzero(edge > 0)[0]
        q = edge[on_edge]
        rows_on = curves.climbing[on_edge]
        start_kind, start_level, start_cost = _edge_start(curves, on_edge, q)
        end_level, end_cost = curves.level[q - 1, on_edge], curves.cost[q - 1, on_edge]
        share = (t_hat - start_level) / (end_level - start_level)
        along[rows_on] = share
        row_cost[rows_on] = start_cost + share * (end_cost - start_cost)
        weight[rows_on] = 0.0
        extra = np.bincount(curves.kind[q - 1, on_edge], weights=ks[rows_on] * share,
                            minlength=n).astype(np.float64)
        extra += np.bincount(start_kind, weights=ks[rows_on] * (1.0 - share), minlength=n)
    else:
        extra = np.zeros(n)
    use = np.bincount(curves.first_kind, weights=weight, minlength=n) + extra
    pi = scale * curves.pi
    value = float(rows.W @ pi) + t_hat - scale * float(np.einsum("i,i->", rows.k, row_cost))
    return LagrangianPoint(pi, value, t_hat, use.astype(np.float64), curves, scale, along, edge,
                           rows.k, rows.lowest, rows.bottleneck)


class PriceSearch:
    """Kelley's cutting-plane method with a trust region on D along rays of prices (module
    docstring), resumable: `run` until a gap, then `run` again for a smaller one. Variables
    of the small LP: z and p_j = W_j pi_j (a share of the bound, so that every coefficient is
    O(1)); row 0 is sum_j p_j <= D(best), row k >= 1 the cut of evaluation k."""

    def __init__(self, rows: LevelRows, initial: FloatArray) -> None:
        """Start from the price direction `initial` (>= 0, W.initial > 0)."""
        self.rows = rows
        n = rows.num_types
        self._inputs: list[tuple[FloatArray, bool]] = []
        self._weights = np.zeros(0)
        self._bound_dual = 0.0
        self.lower_bound = -np.inf
        """A proven lower bound on t* (the cutting-plane model's minimum; -inf if none)."""
        self._master = HighsSession(
            LinearModel(
                cost=np.concatenate([[1.0], np.zeros(n)]),
                matrix=sp.csc_matrix(np.concatenate([[0.0], np.ones(n)])[None, :]),
                row_lower=np.array([-INFINITY]),
                row_upper=np.array([INFINITY]),
                col_lower=np.concatenate([[-INFINITY], np.zeros(n)]),
                col_upper=np.full(n + 1, INFINITY),
            ),
            HighsSettings(method="simplex", primal_tolerance=1e-10, dual_tolerance=1e-10),
        )
        self._region = INITIAL_REGION
        self._initial = np.maximum(initial, 0.0)
        self.best = self._evaluate(self._initial, ray=True)
        """The evaluated point with the least D: its value is a proven upper bound on t*."""
        self._solve_whole(self.best)
        self._last = self.best

    @property
    def evaluations(self) -> int:
        return len(self._inputs)

    @property
    def gap(self) -> float:
        """Relative distance of the proven bounds."""
        upper = self.best.value
        return (upper - self.lower_bound) / upper if upper > 0 else 0.0

    def run(
        self, gap: float = PRICE_GAP, max_evaluations: int = MAX_EVALUATIONS,
        deadline: Deadline = NO_DEADLINE,
    ) -> None:
        """Evaluate until the proven relative gap is at most `gap`, `max_evaluations`
        evaluations in all, the deadline, or a master LP without a solution."""
        n = self.rows.num_types
        W = self.rows.W
        prices = np.arange(1, n + 1)
        while self.evaluations <= DEMAND_STEPS and self.gap > gap and not deadline.expired():
            # each price times its type's demand over its supply at the last prices
            last = self._last
            direction = last.pi if last.pi.any() else self._initial
            self._last = self._evaluate(direction * np.maximum(last.use / W, 1e-3), ray=True)
            if self._last.value < self.best.value:
                self.best = self._last
            if not self._solve_whole(self._last):
                return
        while self.gap > gap and self.evaluations < max_evaluations and not deadline.expired():
            centre = self.best.pi * W
            if centre.sum() <= 0 or self._region <= MIN_REGION:
                # no trust region around the origin (a ray there says nothing of directions)
                # or after a run of null steps: Kelley's own step, the model's minimum
                self._master.change_col_bounds(prices, np.zeros(n), np.full(n, INFINITY))
                step_result = self._master.run(deadline)
                if not step_result.solved:
                    return
                self._lower(step_result.x[0], step_result.row_dual)
                self._region = INITIAL_REGION
                whole = True
            else:  # the model's minimum inside the trust region around the best prices
                width = self._region * self.best.value
                low, high = np.maximum(centre - width, 0.0), centre + width
                self._master.change_col_bounds(prices, low, high)
                step_result = self._master.run(deadline)
                if not step_result.solved:
                    return
                inside = ((step_result.x[1:] > low + 1e-12 * width) | (low <= 0)) & (
                    step_result.x[1:] < high - 1e-12 * width
                )
                whole = bool(inside.all())
                if whole:  # the model's minimum over the whole region: a lower bound
                    self._lower(step_result.x[0], step_result.row_dual)
            step = np.maximum(step_result.x[1:], 0.0)
            predicted = float(step_result.x[0])
            point = self._evaluate(step / W, ray=bool(step.sum() > 0))
            if point.value < self.best.value:  # a serious step: the region grows
                self.best = point
                self._region = min(REGION_GROWTH * self._region, 1.0)
            else:  # a null step: the model was wrong this far out
                self._region = max(REGION_SHRINK * self._region, MIN_REGION)
            if not whole and predicted >= self.best.value * (1 - gap):
                # the box predicts little progress: solve the model over the whole region
                if not self._solve_whole(point):
                    return
            else:
                self._add_cut(point)

    def plan(self) -> FloatArray:
        """A plan (m, n) reaching level `lower_bound` on every row within the devices (up to
        the master LP's tolerances), from the dual of the model's LP at its minimum: weights
        mu >= 0 (sum 1) on the cuts and nu >= 0 on row 0 with sum_k mu_k U_k <= (1 + nu) W and
        sum_k mu_k t_k - nu D(best) = the minimum; the mu-combination of the evaluated plans
        divided by 1 + nu reaches (min + nu D(best)) / (1 + nu) >= the minimum."""
        n, m = self.rows.levels.shape
        X = np.zeros((m, n))
        total = float(self._weights.sum())
        for k in np.nonzero(self._weights > 1e-12 * total)[0]:
            vector, ray = self._inputs[k]
            point = ray_minimum(self.rows, vector) if ray else lagrangian(self.rows, vector)
            X += (self._weights[k] / total) * point.plan()
        return X / (1.0 + self._bound_dual / total) if total > 0 else X

    def _evaluate(self, vector: FloatArray, ray: bool) -> LagrangianPoint:
        self._inputs.append((vector, ray))
        return ray_minimum(self.rows, vector) if ray else lagrangian(self.rows, vector)

    def _add_cut(self, point: LagrangianPoint) -> None:
        """The cut t^ + sum_j p_j (1 - U_j / W_j) <= z of `point`; row 0 bound D(best)."""
        cut = np.concatenate([[1.0], point.use / self.rows.W - 1.0])
        self._master.add_row(point.level, INFINITY, cut)
        self._master.change_row_bounds(np.array([0]), np.array([-INFINITY]),
                                       np.array([self.best.value]))

    def _solve_whole(self, point: LagrangianPoint) -> bool:
        """Add `point`'s cut and minimize the model over the whole region (a lower bound)."""
        self._add_cut(point)
        n = self.rows.num_types
        self._master.change_col_bounds(np.arange(1, n + 1), np.zeros(n), np.full(n, INFINITY))
        result = self._master.run()
        if result.solved:
            self._lower(result.x[0], result.row_dual)
        return result.solved

    def _lower(self, value: float, row_dual: FloatArray) -> None:
        if value > self.lower_bound:
            self.lower_bound = float(value)
            self._weights = np.maximum(np.asarray(row_dual[1:], np.float64), 0.0)
            self._bound_dual = abs(float(row_dual[0]))
