"""The Lagrangian dual of the max-min level LP (A2.1) and the price search on it
(`apportion.formulations.level_prices`), proven against independent routes: every row's
cheapest cost to reach a level by enumerating the vertices of its two-row LP, the dual
function by scanning levels, weak duality against the cvxpy reference optimum, the dual
objective of the returned multipliers, and the feasibility of the recovered plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from apportion.formulations.level_prices import LevelRows, PriceSearch, lagrangian, ray_minimum

from .reference_max_min import dual_objective, reference_optimum

Array = NDArray[np.float64]
REL = 1e-9


@dataclass(frozen=True)
class Rows:
    """A level LP over rows: a (m, n) > 0 on usable cells (every row has one), s (m,) devices
    per job, k (m,) jobs per row, W (n,) devices per type (all > 0)."""

    a: Array
    s: Array
    k: Array
    W: Array

    def jobs(self) -> tuple[Array, Array]:
        """The per-job LP: every row repeated k times (a, s)."""
        count = self.k.astype(np.int64)
        return np.repeat(self.a, count, axis=0), np.repeat(self.s, count)

    def build(self) -> LevelRows:
        return LevelRows.build(self.a, self.s, self.k, self.W)


@dataclass(frozen=True)
class RowsSpec:
    """Seeded rows (a falsifying example prints the three numbers that rebuild it): m rows of
    level coefficients over n types, log-uniform over two decades, a quarter of the cells
    unusable, some rows duplicated into ties, scale factors 1-4, 1-3 jobs per row, capacity
    from tight (every type priced) to loose."""

    seed: int
    m: int
    n: int

    def build(self) -> Rows:
        rng = np.random.default_rng(self.seed)
        m, n = self.m, self.n
        a = np.exp(rng.uniform(math.log(0.1), math.log(10.0), (m, n)))
        a[rng.random((m, n)) < 0.25] = 0.0
        a[np.arange(m), rng.integers(0, n, m)] = np.exp(rng.uniform(-1.0, 1.0, m))
        copies = rng.random(m) < 0.2  # exact ties between rows, and ratios that tie
        a[copies] = a[rng.integers(0, m, int(copies.sum()))]
        a[rng.random(m) < 0.1] = np.round(a[rng.random(m) < 0.1].sum() + 1.0)
        s = rng.choice([1.0, 2.0, 4.0], m)
        k = rng.integers(1, 4, m).astype(np.float64)
        devices = float((k * s).sum())
        W = np.maximum(1.0, np.round(rng.uniform(0.02, 0.4, n) * devices))
        return Rows(a, s, k, W)


ROWS = st.builds(RowsSpec, seed=st.integers(0, 2**32 - 1), m=st.integers(2, 25),
                 n=st.integers(1, 5))


def cheapest_cost(a_row: Array, s: float, pi: Array, t: float) -> float:
    """min s pi.x s.t. a.x >= t, sum x <= 1, x >= 0, by the vertices of its two rows: one
    type at time t/a_j, or two at full time with levels bracketing t (inf if none)."""
    if t <= 0:
        return 0.0
    best = math.inf
    usable = [j for j in range(a_row.size) if a_row[j] > 0]
    for j in usable:
        if a_row[j] >= t:
            best = min(best, s * pi[j] * t / a_row[j])
    for j in usable:
        for k in usable:
            if a_row[j] < t < a_row[k]:
                share_k = (t - a_row[j]) / (a_row[k] - a_row[j])
                best = min(best, s * (pi[j] * (1 - share_k) + pi[k] * share_k))
    return best


def dual_at(rows: Rows, pi: Array, t: float) -> float:
    """W.pi + t - sum_i k_i c_i(pi, t): the Lagrangian at one level (-inf above u_min)."""
    costs = [cheapest_cost(rows.a[i], rows.s[i], pi, t) for i in range(rows.a.shape[0])]
    return float(rows.W @ pi + t - sum(rows.k[i] * costs[i] for i in range(len(costs))))


def check_point(rows: Rows, point_pi: Array, value: float, level: float, use: Array,
                X: Array, y: Array) -> None:
    """A Lagrangian evaluation is what it says: D(pi) at level t^ (no level does better),
    plans that reach t^ within every row's time with the reported use, and multipliers
    whose dual objective is a proven bound equal to D(pi) up to rounding."""
    u_min = float(rows.a.max(axis=1).min())
    assert 0.0 <= level <= u_min * (1 + REL)
    assert math.isclose(value, dual_at(rows, point_pi, level), rel_tol=1e-9, abs_tol=1e-12)
    for t in np.linspace(0.0, u_min, 41):
        assert dual_at(rows, point_pi, float(t)) <= value + 1e-9 * max(1.0, abs(value))
    assert X.min() >= -1e-12 and np.all(X.sum(axis=1) <= 1 + 1e-9)
    assert np.all(X[rows.a <= 0] == 0)
    levels = np.einsum("ij,ij->i", rows.a, X)
    np.testing.assert_allclose(levels, level, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(use, np.einsum("i,ij->j", rows.k * rows.s, X), rtol=1e-9,
                               atol=1e-9)
    assert y.min() >= -1e-12 and math.isclose(float(y.sum()), 1.0, rel_tol=1e-9)
    jobs_a, jobs_s = rows.jobs()
    per_job = np.repeat(y / rows.k, rows.k.astype(np.int64))
    bound, _ = dual_objective(jobs_a, jobs_s, rows.W, per_job, np.maximum(point_pi, 0.0))
    assert bound >= value - 1e-9 * max(1.0, value)


@given(spec=ROWS, prices=st.lists(st.floats(0.0, 1.0), min_size=5, max_size=5))
def test_lagrangian_is_the_dual_function(spec: RowsSpec, prices: list[float]) -> None:
    rows = spec.build()
    pi = np.array(prices[: spec.n]) / rows.W.sum()
    point = lagrangian(rows.build(), pi)
    check_point(rows, pi, point.value, point.level, point.use, point.plan(),
                point.multipliers())


@given(spec=ROWS, direction=st.lists(st.floats(0.0, 1.0), min_size=5, max_size=5))
def test_ray_minimum_is_the_least_dual_value_on_its_ray(
    spec: RowsSpec, direction: list[float]
) -> None:
    rows = spec.build()
    rho = np.array(direction[: spec.n]) + 1e-3
    built = rows.build()
    point = ray_minimum(built, rho)
    # on the ray (the origin when the budget never binds), with the dual function there
    if point.pi.any():
        np.testing.assert_allclose(point.pi / np.linalg.norm(point.pi),
                                   rho / np.linalg.norm(rho), rtol=1e-12)
    check_point(rows, point.pi, point.value, point.level, point.use, point.plan(),
                point.multipliers())
    assert math.isclose(point.value, lagrangian(built, point.pi).value, rel_tol=1e-9,
                        abs_tol=1e-12)
    unit = rho / float(rows.W @ rho)
    for scale in np.geomspace(1e-3, 1e3, 25) * max(point.value, 1e-9):
        assert lagrangian(built, scale * unit).value >= point.value - 1e-9 * point.value


@given(spec=ROWS)
def test_weak_duality_and_price_search_bounds(spec: RowsSpec) -> None:
    rows = spec.build()
    jobs_a, jobs_s = rows.jobs()
    t_star = reference_optimum(jobs_a, jobs_s, rows.W).t
    search = PriceSearch(rows.build(), np.ones(spec.n))
    first = search.best.value
    assert first >= t_star * (1 - 1e-7)
    search.run(gap=1e-7, max_evaluations=200)
    assert search.lower_bound <= t_star * (1 + 1e-7) + 1e-12
    assert search.best.value >= t_star * (1 - 1e-7)
    assert search.best.value <= first
    assert search.gap <= 1e-7 or search.evaluations == 200
    # the plan recovered from the cuts reaches the lower bound within the devices
    X = search.plan()
    assert X.min() >= -1e-12 and np.all(X.sum(axis=1) <= 1 + 1e-9)
    levels = np.einsum("ij,ij->i", rows.a, X)
    assert levels.min() >= search.lower_bound - 1e-7 * max(1.0, t_star)
    use = np.einsum("i,ij->j", rows.k * rows.s, X)
    assert np.all(use <= rows.W * (1 + 1e-7) + 1e-9)


def test_single_row_single_type_closed_form() -> None:
    """One type: t* = min(W / sum k s / a, min a) (the agnostic closed form, A2.1), and the
    search proves it."""
    rows = Rows(np.array([[2.0], [0.5], [4.0]]), np.array([1.0, 2.0, 1.0]),
                np.array([1.0, 2.0, 1.0]), np.array([3.0]))
    expected = min(3.0 / float(np.sum(rows.k * rows.s / rows.a[:, 0])), 0.5)
    search = PriceSearch(rows.build(), np.ones(1))
    search.run(gap=1e-12)
    assert math.isclose(search.best.value, expected, rel_tol=1e-12)
    assert math.isclose(search.lower_bound, expected, rel_tol=1e-9)
