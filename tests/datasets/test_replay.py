"""The trace replay (apportion.datasets.replay) on tiny traces.

* Shockwave and Gavel max-min on 6 jobs / 4 GPUs: every round fits the cluster and only runs
  arrived, unfinished jobs; every job finishes; JCT >= its standalone duration.
* A job alone finishes after ceil(duration / Delta) rounds at arrival + duration.
* The metrics of data.md §7 on a hand-computed two-job case with a first-fit policy (arrival
  between round boundaries, an epoch crossing a round boundary).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from apportion.datasets.replay import (
    GavelRoundPolicy,
    ReplayJob,
    RoundContext,
    ShockwaveRoundPolicy,
    replay,
    synthetic_jobs,
)
from apportion.solver.parameters import ShockwaveParameters


class FirstFit:
    """Active jobs in index order while they fit."""

    name = "first_fit"

    def round_jobs(self, ctx: RoundContext) -> list[int]:
        free, out = ctx.gpus, []
        for i in ctx.active:
            if ctx.jobs[i].scale_factor <= free:
                out.append(i)
                free -= ctx.jobs[i].scale_factor
        return out


class Greedy(FirstFit):
    """Ignores the capacity (to check that the replay refuses it)."""

    name = "greedy"

    def round_jobs(self, ctx: RoundContext) -> list[int]:
        return list(ctx.active)


def tiny_trace() -> list[ReplayJob]:
    jobs = synthetic_jobs(6, seed=3, span_s=600.0)
    # shorten: 3-8 epochs of 40-150 s each
    out = []
    for k, j in enumerate(jobs):
        epochs = 3 + k % 6
        out.append(
            ReplayJob(
                j.job_id,
                j.arrival_s,
                [1, 2, 1, 4, 1, 2][k],
                tuple(40.0 + 20.0 * ((k + e) % 6) for e in range(epochs)),
                tuple([32] * (epochs // 2) + [64] * (epochs - epochs // 2)),
            )
        )
    return out


@pytest.mark.parametrize("which", ["shockwave", "max_min_fairness"])
def test_tiny_trace_invariants(which: str) -> None:
    jobs = tiny_trace()
    policy = (
        ShockwaveRoundPolicy(ShockwaveParameters(planning_rounds=4))
        if which == "shockwave"
        else GavelRoundPolicy()
    )
    result = replay(jobs, 4, policy, round_s=120.0, keep_schedule=True)
    arrival = np.array([j.arrival_s for j in jobs])
    assert np.all(np.isfinite(result.finish_s))
    standalone = np.array([j.standalone_s for j in jobs])
    assert np.all(result.jct_s >= standalone - 1e-9)
    assert len(result.schedule) == result.rounds
    # every round fits (the replay also refuses inactive jobs: ValueError)
    for chosen in result.schedule:
        assert sum(jobs[i].scale_factor for i in chosen) <= 4
    runs = np.zeros(len(jobs))
    for chosen in result.schedule:
        for i in chosen:
            runs[i] += 1
    # a job needs at least ceil(standalone / Delta) rounds of running
    assert np.all(runs >= np.ceil(standalone / 120.0 - 1e-9))
    m = result.metrics
    assert m.makespan_s == pytest.approx(result.finish_s.max() - arrival.min())
    assert 0.0 < m.utilization <= 1.0 + 1e-12
    if which == "shockwave":
        assert isinstance(policy, ShockwaveRoundPolicy)
        assert policy.solves >= 1


def test_single_job_finishes_in_ceil_rounds() -> None:
    job = ReplayJob("a", 30.0, 2, (50.0, 100.0, 130.0), (32, 32, 64))
    for policy in (FirstFit(), ShockwaveRoundPolicy(ShockwaveParameters(planning_rounds=3))):
        result = replay([job], 4, policy, round_s=120.0, keep_schedule=True)
        assert result.rounds == math.ceil(280.0 / 120.0) == 3
        assert [len(c) for c in result.schedule] == [1, 1, 1]
        assert result.finish_s[0] == pytest.approx(30.0 + 280.0)
        assert result.jct_s[0] == pytest.approx(280.0)
        # one job on 4 GPUs: N/G < 1, rho = JCT / T_exclusive = 1
        assert result.metrics.worst_rho == pytest.approx(1.0)
        # busy 2 GPUs x 280 s over 4 GPUs x 280 s
        assert result.metrics.utilization == pytest.approx(0.5)


def test_metrics_by_hand() -> None:
    """One GPU, Delta = 100 s. A (epochs 150 + 50 s) arrives at 0, B (100 s) at 50 s.
    Round 0 [0, 100): only A is active, runs 100 s into its first epoch. Round 1: A and B are
    active, first fit runs A: 50 s finish epoch 0, 50 s epoch 1 -> A finishes at 200. Round 2:
    B runs, finishes at 300.
    JCT: A 200, B 250 -> mean 225; makespan 300 - 0 = 300; rho = JCT / (T_excl * max(1, 2/1)):
    A 200/400 = 0.5, B 250/200 = 1.25 (worst 1.25, mean 0.875, fraction > 1: 0.5).
    Themis-style: A active in rounds 0, 1 with 1, 2 jobs (mean 1.5): 200/(200*1.5);
    B in rounds 1, 2 with 2, 1 jobs (1.5): 250/(100*1.5). Utilization (200 + 100)/(1 * 300)."""
    jobs = [
        ReplayJob("A", 0.0, 1, (150.0, 50.0), (32, 32)),
        ReplayJob("B", 50.0, 1, (100.0,), (32,)),
    ]
    result = replay(jobs, 1, FirstFit(), round_s=100.0, keep_schedule=True)
    assert result.schedule == ((0,), (0,), (1,))
    np.testing.assert_allclose(result.finish_s, [200.0, 300.0])
    m = result.metrics
    assert m.makespan_s == pytest.approx(300.0)
    assert m.avg_jct_s == pytest.approx(225.0)
    np.testing.assert_allclose(result.rho, [0.5, 1.25])
    assert m.worst_rho == pytest.approx(1.25)
    assert m.mean_rho == pytest.approx(0.875)
    assert m.frac_rho_gt1 == pytest.approx(0.5)
    np.testing.assert_allclose(result.rho_themis, [200.0 / 300.0, 250.0 / 150.0])
    assert m.worst_rho_themis == pytest.approx(250.0 / 150.0)
    assert m.utilization == pytest.approx(1.0)


def test_idle_gap_between_arrivals_is_skipped() -> None:
    jobs = [
        ReplayJob("A", 0.0, 1, (100.0,), (32,)),
        ReplayJob("B", 1000.0, 1, (100.0,), (32,)),
    ]
    result = replay(jobs, 1, FirstFit(), round_s=100.0)
    np.testing.assert_allclose(result.finish_s, [100.0, 1100.0])
    assert result.rounds == 2
    assert result.metrics.utilization == pytest.approx(200.0 / 1100.0)


def test_capacity_violation_is_refused() -> None:
    jobs = [ReplayJob(k, 0.0, 1, (100.0,), (32,)) for k in "ab"]
    with pytest.raises(ValueError, match="more than 1 devices"):
        replay(jobs, 1, Greedy(), round_s=100.0)
