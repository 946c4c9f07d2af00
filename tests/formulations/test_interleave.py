"""Muri's interleaving period (B6): every order by a plain loop, the derived period bounds."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations.interleave import (
    STAGES,
    best_periods,
    period_lower_bound,
    period_upper_bound,
)


@st.composite
def stage_tables(draw: st.DrawFn) -> np.ndarray:
    k = draw(st.integers(1, 4))
    values = st.one_of(st.just(0.0), st.floats(0.001, 5.0))
    table = np.array(draw(st.lists(values, min_size=k * STAGES, max_size=k * STAGES)))
    table = table.reshape(k, STAGES)
    table[:, 2] += 0.01  # every job computes
    return table


def loop_period(stage: np.ndarray, order: tuple[int, ...]) -> float:
    """(B6) written as the sum over slots of the longest stage in the slot."""
    total = 0.0
    for r in range(STAGES):
        total += max(stage[job][(r - idx) % STAGES] for idx, job in enumerate(order))
    return total


@given(stage_tables())
def test_best_period_is_the_minimum_over_orders(stage: np.ndarray) -> None:
    k = stage.shape[0]
    members = np.arange(k)[None, :]
    best = best_periods(stage, members)
    expected = min(loop_period(stage, order) for order in itertools.permutations(range(k)))
    assert abs(best.period_s[0] - expected) <= 1e-12 * max(1.0, expected)
    assert sorted(best.order[0].tolist()) == list(range(k))
    assert abs(loop_period(stage, tuple(best.order[0])) - expected) <= 1e-12 * max(1, expected)


@given(stage_tables())
def test_period_bounds(stage: np.ndarray) -> None:
    k = stage.shape[0]
    members = np.arange(k)[None, :]
    lower = period_lower_bound(stage, members)[0]
    upper = period_upper_bound(stage, members)[0]
    for order in itertools.permutations(range(k)):
        period = loop_period(stage, order)
        assert lower - 1e-12 <= period <= upper + 1e-12
    best = best_periods(stage, members).period_s[0]
    if k == 1:
        assert abs(best - stage.sum()) <= 1e-12
    used_ratio = stage.sum() / (STAGES * best)
    assert used_ratio <= 1 + 1e-12


def test_complementary_jobs_interleave_perfectly() -> None:
    # four jobs, each busy in one stage only: the period is one stage long
    stage = np.eye(4) * 2.0 + 0.0
    best = best_periods(stage, np.arange(4)[None, :])
    assert best.period_s[0] == 2.0


def test_many_groups_at_once_match_one_by_one() -> None:
    rng = np.random.default_rng(1)
    stage = rng.random((30, STAGES))
    groups = np.array([rng.choice(30, 3, replace=False) for _ in range(200)])
    together = best_periods(stage, groups).period_s
    alone = [best_periods(stage, g[None, :]).period_s[0] for g in groups]
    np.testing.assert_allclose(together, alone, rtol=0, atol=0)
