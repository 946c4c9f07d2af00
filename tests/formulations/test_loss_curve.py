"""Loss-curve fits (B8, B9): exact recovery, the NNLS optimality of the linear part, and the
convergence step."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import nnls

from apportion.formulations.loss_curve import (
    CurveForm,
    LossCurve,
    best_fit,
    fit,
    recency_weights,
)

STEPS = np.linspace(0.0, 4000.0, 25)


@given(a=st.floats(0.5, 500.0), b=st.floats(5.0, 2000.0), c=st.floats(0.0, 2.0))
def test_inverse_fit_recovers_exact_data(a: float, b: float, c: float) -> None:
    truth = LossCurve(CurveForm.INVERSE, a, b, c, 0.0)
    curve = fit(STEPS, truth.loss(STEPS))
    assert curve.residual <= 1e-6 * (1 + a / b)
    ahead = np.array([8000.0, 20000.0])
    assert curve.loss(ahead) == pytest.approx(truth.loss(ahead), rel=1e-3, abs=1e-6)


@given(a=st.floats(0.1, 10.0), r=st.floats(2e-4, 5e-3), c=st.floats(0.0, 2.0))
def test_exponential_fit_recovers_exact_data(a: float, r: float, c: float) -> None:
    truth = LossCurve(CurveForm.EXPONENTIAL, a, r, c, 0.0)
    curve = fit(STEPS, truth.loss(STEPS), CurveForm.EXPONENTIAL)
    assert curve.scale == pytest.approx(a, rel=1e-3)
    assert curve.shape == pytest.approx(r, rel=1e-3)
    assert curve.asymptote == pytest.approx(c, abs=1e-4)
    assert best_fit(STEPS, truth.loss(STEPS)).form is CurveForm.EXPONENTIAL


@given(seed=st.integers(0, 10_000), noise=st.floats(0.0, 0.2),
       asymptote=st.sampled_from([0.0, 0.3]))
def test_linear_part_is_the_nonnegative_least_squares_optimum(
    seed: int, noise: float, asymptote: float
) -> None:
    """At the fitted shape, (a, c) solve the NNLS on [1/(k + b), 1] (scipy's nnls agrees; with
    asymptote 0 the noise often pushes the unconstrained c below 0: the face c = 0), and the
    fit is no worse than the curve that generated the data."""
    rng = np.random.default_rng(seed)
    truth = LossCurve(CurveForm.INVERSE, 40.0, 150.0, asymptote, 0.0)
    loss = truth.loss(STEPS) * (1 + noise * rng.standard_normal(STEPS.size))
    loss = np.maximum(loss, 0.0)
    curve = fit(STEPS, loss)
    basis = np.stack([1.0 / (STEPS + curve.shape), np.ones_like(STEPS)], axis=1)
    (a, c), _ = nnls(basis, loss)
    assert curve.scale == pytest.approx(a, rel=1e-6, abs=1e-9)
    assert curve.asymptote == pytest.approx(c, rel=1e-6, abs=1e-9)
    sse_truth = float(np.mean((truth.loss(STEPS) - loss) ** 2))
    assert curve.residual ** 2 <= sse_truth * (1 + 1e-6) + 1e-15


def test_flat_and_rising_curves_fit_with_zero_scale() -> None:
    """NNLS never fits a rising curve as a falling one: the scale is 0, the loss constant, and
    the job counts as converged at its first step."""
    rising = fit(STEPS, 1.0 + 1e-4 * STEPS)
    assert rising.scale == 0.0
    assert rising.convergence_step(0.0, 0.01) == 0.0
    flat = fit(STEPS, np.full(STEPS.size, 0.7))
    assert flat.scale == 0.0 and flat.asymptote == pytest.approx(0.7)


def test_convergence_step_closed_forms() -> None:
    inverse = LossCurve(CurveForm.INVERSE, 10.0, 100.0, 0.2, 0.0)
    k = inverse.convergence_step(0.0, 0.01)  # (0 + 100)/0.01 - 100
    assert k == pytest.approx(9900.0)
    assert inverse.excess(k) == pytest.approx(0.01 * inverse.excess(0.0))
    exponential = LossCurve(CurveForm.EXPONENTIAL, 3.0, 1e-3, 0.0, 0.0)
    k = exponential.convergence_step(500.0, 0.05)
    assert exponential.excess(k) == pytest.approx(0.05 * exponential.excess(500.0))


def test_too_few_points_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        fit(np.array([0.0, 1.0]), np.array([2.0, 1.0]))


def test_recency_weights_favour_the_latest_points() -> None:
    weights = recency_weights(4, 0.5)
    assert weights.tolist() == [0.125, 0.25, 0.5, 1.0]
    assert recency_weights(3, 1.0).tolist() == [1.0, 1.0, 1.0]


@given(seed=st.integers(0, 10_000), slope=st.floats(-2.0, 2.0), intercept=st.floats(-1.0, 1.0))
def test_two_variable_nonnegative_least_squares_in_closed_form(
    seed: int, slope: float, intercept: float
) -> None:
    """The closed form (interior solution, else the better face) equals scipy's NNLS for any
    weights and data, including data that push a or c to 0."""
    from apportion.formulations.loss_curve import _nonnegative_fit

    rng = np.random.default_rng(seed)
    u = rng.uniform(0.0, 1.0, (1, 1, 9))
    loss = intercept + slope * u[0, 0] + rng.normal(0.0, 0.1, 9)
    weight = rng.uniform(0.1, 1.0, 9)
    weight /= weight.sum()
    a, c, sse = _nonnegative_fit(u, loss[None, :], weight[None, :])
    root = np.sqrt(weight)
    (ref_a, ref_c), _ = nnls(np.stack([u[0, 0] * root, root], axis=1), loss * root)
    ref_sse = float(np.sum(weight * (ref_a * u[0, 0] + ref_c - loss) ** 2))
    assert float(sse[0, 0]) == pytest.approx(ref_sse, rel=1e-9, abs=1e-12)
    assert float(a[0, 0]) == pytest.approx(ref_a, rel=1e-6, abs=1e-9)
    assert float(c[0, 0]) == pytest.approx(ref_c, rel=1e-6, abs=1e-9)
