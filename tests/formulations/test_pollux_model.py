"""Pollux's goodput model (A5.1, docs/policies/sia.md): hand-computed values, the model's own
monotonicity claims, and the sampled batch-size optimizer against an exhaustive integer grid."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations.pollux_model import (
    BatchLimits,
    GradParams,
    PerfParams,
    best_goodput,
    best_goodput_exhaustive,
    bootstrap_goodput,
    efficiency,
    goodput,
    network_time,
    noise_scale,
    throughput,
)

THETA = PerfParams(0.1, 0.01, 0.5, 0.1, 0.2, 0.05, 1.0)


def test_throughput_hand_computed() -> None:
    # K=1: T_c = 0.1 + 0.01*10 = 0.2, no network: 10 / 0.2
    assert math.isclose(float(throughput(THETA, 1, 1, 10, 0)), 50.0)
    # K=4 on one node: T_n = 0.2 + 0.05*2 = 0.3, gamma=1 sums: 40 / 0.5
    assert math.isclose(float(throughput(THETA, 1, 4, 10, 0)), 80.0)
    # K=4 on two nodes, s=1: T_n = 0.5 + 0.1*2 = 0.7, T_iter = 0.2 + 0.9, M = 80
    assert math.isclose(float(throughput(THETA, 2, 4, 10, 1)), 80.0 / 1.1)
    # gamma=2: T_o = sqrt(0.2^2 + 0.3^2)
    theta2 = PerfParams(0.1, 0.01, 0.5, 0.1, 0.2, 0.05, 2.0)
    assert math.isclose(float(throughput(theta2, 1, 4, 10, 0)), 40.0 / math.sqrt(0.13))


def test_efficiency_hand_computed() -> None:
    grad = GradParams(sqr=1.0, var=3.0)
    assert noise_scale(grad, 32) == 96.0
    assert math.isclose(float(efficiency(grad, 32, 128)), 4.0 / 7.0)
    assert math.isclose(float(efficiency(grad, 32, 128)), (96 + 32) / (96 + 128))
    assert float(efficiency(grad, 32, 32)) == 1.0
    # goodput = throughput x efficiency
    value = goodput(THETA, grad, 32, 1, 4, 32, 0)
    assert math.isclose(float(value), float(throughput(THETA, 1, 4, 32, 0)) * 128 / 224)


def test_network_time_cases() -> None:
    assert float(network_time(THETA, 1, 1)) == 0.0
    assert math.isclose(float(network_time(THETA, 1, 2)), 0.2)
    assert math.isclose(float(network_time(THETA, 3, 8)), 0.5 + 0.1 * 6)


def test_gamma_overlap_limits() -> None:
    """gamma = 1 sums compute and network time; large gamma approaches their maximum."""
    t_c = 0.1 + 0.01 * 16
    t_n = 0.2 + 0.05 * 6
    sum_theta = PerfParams(0.1, 0.01, 0.5, 0.1, 0.2, 0.05, 1.0)
    max_theta = PerfParams(0.1, 0.01, 0.5, 0.1, 0.2, 0.05, 200.0)
    assert math.isclose(float(throughput(sum_theta, 1, 8, 16, 0)), 128 / (t_c + t_n))
    assert math.isclose(
        float(throughput(max_theta, 1, 8, 16, 0)), 128 / max(t_c, t_n), rel_tol=1e-2
    )


thetas = st.builds(
    PerfParams,
    st.floats(1e-3, 1.0),
    st.floats(1e-5, 1e-2),
    st.floats(1e-3, 1.0),
    st.floats(1e-4, 0.1),
    st.floats(1e-3, 1.0),
    st.floats(1e-4, 0.1),
    st.floats(1.0, 10.0),
)
grads = st.builds(GradParams, st.floats(1e-3, 10.0), st.floats(0.0, 100.0))


@given(grads, st.integers(1, 512), st.lists(st.floats(1.0, 1e5), min_size=2, max_size=6))
def test_efficiency_in_unit_interval_and_decreasing(
    grad: GradParams, m0: int, factors: list[float]
) -> None:
    batches = np.sort(m0 * np.asarray(factors))
    eff = efficiency(grad, m0, batches)
    assert np.all(eff > 0) and np.all(eff <= 1 + 1e-12)
    assert np.all(np.diff(eff) <= 1e-12)


@given(thetas, st.integers(1, 4), st.integers(1, 16), st.integers(0, 3))
def test_throughput_monotone_in_atomic_batch(theta: PerfParams, n: int, k: int, s: int) -> None:
    nodes = min(n, k)
    values = throughput(theta, nodes, k, np.arange(1, 200), s)
    assert np.all(np.diff(values) >= -1e-9 * values[1:])


@given(thetas, grads, st.integers(1, 3), st.sampled_from([1, 2, 4, 8]), st.booleans())
def test_sampled_optimizer_against_exhaustive_grid(
    theta: PerfParams, grad: GradParams, n: int, k: int, accumulation: bool
) -> None:
    limits = BatchLimits(32, 512, 4, 64, accumulation)
    nodes = min(n, k)
    sampled = best_goodput(theta, grad, limits, nodes, k)
    exact = best_goodput_exhaustive(theta, grad, limits, nodes, k)
    assert sampled.goodput <= exact.goodput * (1 + 1e-12)
    if sampled.goodput > 0:
        # the reported choice is consistent and within the limits
        batch = k * sampled.atomic_batch * (sampled.accumulation_steps + 1)
        assert 4 <= sampled.atomic_batch <= 64
        again = goodput(theta, grad, 32, nodes, k, sampled.atomic_batch, sampled.accumulation_steps)
        assert math.isclose(float(again), sampled.goodput, rel_tol=1e-12)
        assert math.isclose(sampled.efficiency, float(efficiency(grad, 32, batch)), rel_tol=1e-12)
        assert sampled.goodput >= 0.5 * exact.goodput
    # the exhaustive optimum really is a maximum over the grid it defines
    m = np.arange(4, 65)
    for s in range(0, 512 // (k * 4) + 1 if accumulation else 1):
        ok = (k * m * (s + 1) >= 32) & (k * m * (s + 1) <= 512)
        if ok.any():
            values = goodput(theta, grad, 32, nodes, k, m[ok], s)
            assert values.max() <= exact.goodput * (1 + 1e-12)


@given(thetas, grads, st.floats(1.01, 100.0), st.sampled_from([1, 2, 4, 8]))
def test_goodput_monotone_in_noise_scale(
    theta: PerfParams, grad: GradParams, factor: float, k: int
) -> None:
    """A larger gradient noise scale (var/sqr) makes large batches more useful: the efficiency
    of every batch M >= M0 rises, so the best goodput never falls."""
    limits = BatchLimits(32, 512, 4, 64, True)
    noisier = GradParams(grad.sqr, grad.var * factor + 1e-6)
    low = best_goodput_exhaustive(theta, grad, limits, 1, k)
    high = best_goodput_exhaustive(theta, noisier, limits, 1, k)
    assert high.goodput >= low.goodput * (1 - 1e-12)
    sampled_low = best_goodput(theta, grad, limits, 1, k)
    sampled_high = best_goodput(theta, noisier, limits, 1, k)
    assert sampled_high.goodput >= sampled_low.goodput * (1 - 1e-12)


def test_single_replica_accumulates_above_baseline() -> None:
    grad = GradParams(sqr=0.01, var=10.0)
    limits = BatchLimits(32, 256, 1, 256, True)
    best = best_goodput(THETA, grad, limits, 1, 1)
    if best.atomic_batch * (best.accumulation_steps + 1) > 32:
        assert best.accumulation_steps >= 1


def test_bootstrap_goodput_by_hand() -> None:
    """A5.3: goodput on the profiled type s at the same GPU count, nodes ceil(g / G_s), times
    the 1-GPU seed-throughput ratio t / s."""
    theta_s = PerfParams(0.1, 0.01, 0.2, 0.01, 0.05, 0.005, 1.0)
    # M0 = M_max = 96 and no accumulation: the only batch is m = 96 / K per GPU, efficiency 1.
    limits = BatchLimits(96, 96, 1, 96, accumulation=False)
    grad = GradParams(1.0, 1.0)
    # 12 GPUs, G_s = 8 -> 2 nodes: T_c = 0.1 + 0.01*8 = 0.18, T_n = 0.2 + 0.01*(12 - 2) = 0.3,
    # gamma = 1 -> T_o = 0.48, throughput 96 / 0.48 = 200; ratio 30 / 60 -> 100.
    assert math.isclose(bootstrap_goodput(theta_s, grad, limits, 8, 12, 30.0, 60.0), 100.0)
    # 8 GPUs -> 1 node: T_c = 0.1 + 0.12 = 0.22, T_n = 0.05 + 0.005*6 = 0.08, T_o = 0.30,
    # throughput 320; ratio 0.5 -> 160.
    assert math.isclose(bootstrap_goodput(theta_s, grad, limits, 8, 8, 30.0, 60.0), 160.0)
    # The same 8 GPUs on 4-GPU source nodes -> 2 nodes: T_n = 0.2 + 0.06 = 0.26, T_o = 0.48,
    # throughput 200, ratio 2 (target faster) -> 400.
    assert math.isclose(bootstrap_goodput(theta_s, grad, limits, 4, 8, 120.0, 60.0), 400.0)
    # A missing seed profile gives no estimate.
    assert bootstrap_goodput(theta_s, grad, limits, 8, 8, 0.0, 60.0) == 0.0
