"""The synthetic co-location inputs: stage times Muri accepts, and device use AntMan accepts
(opportunistic jobs on one device, each measured with distinct guaranteed one-device jobs,
slowdowns of at least 1), seeded."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.datasets.colocation_profiles import (
    SYNTHETIC_MIN_GPU_S,
    SYNTHETIC_STAGE_SCALE_S,
    synthetic_device_use,
    synthetic_stage_times,
)


@given(st.integers(0, 10_000), st.integers(0, 300))
def test_stage_times_are_within_their_scales_and_every_job_computes(seed: int,
                                                                    count: int) -> None:
    stage = synthetic_stage_times(np.random.default_rng(seed), count)
    assert stage.shape == (count, 4)
    assert (stage >= 0).all() and (stage[:, 0] == 0).all()
    top = np.array(SYNTHETIC_STAGE_SCALE_S) + np.array([0, 0, SYNTHETIC_MIN_GPU_S, 0])
    assert (stage <= top).all()
    assert (stage[:, 2] >= SYNTHETIC_MIN_GPU_S).all()
    again = synthetic_stage_times(np.random.default_rng(seed), count)
    assert np.array_equal(stage, again)


@given(st.integers(0, 10_000), st.integers(0, 300), st.integers(0, 4))
def test_device_use_pairs_opportunistic_jobs_with_distinct_guaranteed_ones(
    seed: int, count: int, partners: int
) -> None:
    rng = np.random.default_rng(seed)
    scale = rng.choice([1, 2, 4], count, p=[0.7, 0.2, 0.1]).astype(np.int64)
    use = synthetic_device_use(np.random.default_rng(seed), scale, partners=partners)
    assert ((use.gpu_memory_gib >= 1) & (use.gpu_memory_gib <= 10)).all()
    assert ((use.gpu_utilization >= 0.05) & (use.gpu_utilization <= 0.5)).all()
    assert (scale[use.opportunistic] == 1).all()
    hosts = np.nonzero(~use.opportunistic & (scale == 1))[0]
    guests = np.nonzero(use.opportunistic)[0]
    per_guest = min(partners, hosts.size) if guests.size else 0
    assert use.pairs.shape == (guests.size * per_guest, 2)
    assert (use.pair_slowdown >= 1).all() and use.pair_slowdown.shape == use.pairs.shape
    for guest in guests.tolist():
        mine = use.pairs[use.pairs[:, 1] == guest, 0]
        assert mine.size == per_guest and np.unique(mine).size == mine.size
        assert np.isin(mine, hosts).all()
