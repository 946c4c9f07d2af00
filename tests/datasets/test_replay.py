"""The trace replay (apportion.datasets.replay) on tiny traces.

* Shockwave and the Gavel policies of the anchor table (max-min, finish-time fairness = Themis,
  static equal split = `isolated`, min makespan = OSSP, max-sum-throughput = MST) on 6 jobs /
  4 GPUs: every round fits the cluster and only runs arrived, unfinished jobs; every job
  finishes; JCT >= its standalone duration.
* A job alone finishes after ceil(duration / Delta) rounds at arrival + duration, under every
  policy.
* One hand-checkable property per new policy: FTF's C_i bookkeeping carried between solves
  equals the integral of progress / iso_i over the replay (A2.5 test 9); the static equal
  split gives identical jobs run counts within one of each other; min makespan's first
  allocation is the single-type closed form X_i = R_i z* (A2.8 test 2); max-sum-throughput
  with throughput 1 prefers 1-device jobs (fractional knapsack by 1/s_i, A2.6 test 2).
* The metrics (T7, docs/datasets.md) on a hand-computed two-job case with a first-fit policy
  (arrival
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
    RoundPolicy,
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


GAVEL_POLICIES = {
    "max_min_fairness": "weighted_max_min_fairness",
    "finish_time_fairness": "themis_finish_time_fairness",
    "gandiva_fair": "isolated",
    "min_total_duration": "min_makespan",
    "max_sum_throughput": "max_sum_throughput",
}
"""Anchor-table name -> apportion policy driven by GavelRoundPolicy."""


def make_policy(which: str) -> RoundPolicy:
    if which == "shockwave":
        return ShockwaveRoundPolicy(ShockwaveParameters(planning_rounds=4))
    return GavelRoundPolicy(policy=GAVEL_POLICIES[which], name=which)


@pytest.mark.parametrize("which", ["shockwave", *GAVEL_POLICIES])
def test_tiny_trace_invariants(which: str) -> None:
    jobs = tiny_trace()
    policy = make_policy(which)
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
    else:
        # the allocation is recomputed exactly when the job set changes
        assert isinstance(policy, GavelRoundPolicy)
        assert policy.solves == len(policy.solve_rounds) >= 2


def test_single_job_finishes_in_ceil_rounds() -> None:
    job = ReplayJob("a", 30.0, 2, (50.0, 100.0, 130.0), (32, 32, 64))
    policies: list[RoundPolicy] = [
        FirstFit(),
        ShockwaveRoundPolicy(ShockwaveParameters(planning_rounds=3)),
        *(make_policy(which) for which in GAVEL_POLICIES),
    ]
    for policy in policies:
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


def test_ftf_isolated_time_is_the_integral_of_progress_over_iso() -> None:
    """A2.5 test 9. 2 GPUs, Delta = 100 s, gangs 1/1/2/1 arriving over three rounds. The client
    sends each response's C_i, iso_i and R_i back with the next solve; C_i of the last solve
    that included job i must equal the sum over the rounds before it of
    (profiled seconds of progress) / iso_i, with iso_i = min(1, G / (m s_i)) for the m jobs
    active in that round (throughput 1 on one type: Gavel's static 1/m share)."""
    jobs = [
        ReplayJob("a", 0.0, 1, (150.0, 250.0), (32, 32)),
        ReplayJob("b", 0.0, 1, (90.0,), (32,)),
        ReplayJob("c", 120.0, 2, (130.0, 70.0), (32, 64)),
        ReplayJob("d", 250.0, 1, (300.0,), (32,)),
    ]
    gpus, delta = 2, 100.0
    policy = GavelRoundPolicy(policy="themis_finish_time_fairness", name="ftf")
    result = replay(jobs, gpus, policy, round_s=delta, keep_schedule=True)
    assert np.all(np.isfinite(result.finish_s))
    # no idle gap: simulated round k starts at k * Delta
    arrival = np.array([j.arrival_s for j in jobs])
    remaining = np.array([j.standalone_s for j in jobs])
    integral = np.zeros(len(jobs))
    at_call: dict[int, float] = {}
    calls = set(policy.solve_rounds)
    for k, chosen in enumerate(result.schedule):
        now = k * delta
        active = [i for i in range(len(jobs)) if arrival[i] <= now and result.finish_s[i] > now]
        if k in calls:
            for i in active:
                at_call[i] = float(integral[i])
        for i in chosen:
            progress = min(delta, remaining[i])
            remaining[i] -= progress
            iso = min(1.0, gpus / (len(active) * jobs[i].scale_factor))
            integral[i] += progress / iso
    assert set(at_call) == set(policy.isolated_time_s) == set(range(len(jobs)))
    for i, c in policy.isolated_time_s.items():
        assert c == pytest.approx(at_call[i], rel=1e-9, abs=1e-9)
    # some job accumulated C while sharing (iso < 1), so the check is not vacuous
    assert any(c > 0 for c in policy.isolated_time_s.values())


def test_equal_split_alternates_identical_jobs() -> None:
    """Static equal split (`isolated`) on 1 GPU: three identical 400 s jobs get X = 1/3 each;
    while all are active their run counts never differ by more than one round."""
    jobs = [ReplayJob(k, 0.0, 1, (400.0,), (32,)) for k in "abc"]
    result = replay(jobs, 1, make_policy("gandiva_fair"), round_s=100.0, keep_schedule=True)
    runs = np.zeros(3)
    for chosen in result.schedule:
        for i in chosen:
            runs[i] += 1
        if runs.max() < 4:  # nobody finished yet
            assert runs.max() - runs.min() <= 1
    np.testing.assert_allclose(np.sort(result.finish_s), [1000.0, 1100.0, 1200.0])


def test_min_makespan_allocation_is_the_closed_form() -> None:
    """One GPU, static batch A (300 s) and B (100 s): z* = min(1/300, 1/100, 1 / 400) = 1/400,
    so X = R z* = (0.75, 0.25) exactly (capacity binds). Rounds: both fresh, A first (larger
    X); then priorities tie at 1 and B's deficit (25 s) beats A's (-25 s); B finishes at 200,
    A runs alone to 400."""
    jobs = [ReplayJob("A", 0.0, 1, (300.0,), (32,)), ReplayJob("B", 0.0, 1, (100.0,), (32,))]
    policy = GavelRoundPolicy(policy="min_makespan", name="ossp")
    seen: list[np.ndarray] = []

    class Spy:
        name = "spy"

        def round_jobs(self, ctx: RoundContext) -> list[int]:
            out = policy.round_jobs(ctx)
            if ctx.round_index == 0:
                assert policy.allocation is not None
                seen.append(policy.allocation.copy())
            return out

    result = replay(jobs, 1, Spy(), round_s=100.0, keep_schedule=True)
    np.testing.assert_allclose(seen[0][:, 0], [0.75, 0.25], atol=1e-7)
    assert result.schedule == ((0,), (1,), (0,), (0,))
    np.testing.assert_allclose(result.finish_s, [400.0, 200.0])


def test_max_sum_throughput_prefers_one_device_jobs() -> None:
    """Two GPUs, throughput 1: max sum X_i s.t. sum s_i X_i <= 2 runs the two 1-GPU jobs B, C
    (objective 2) rather than the 2-GPU job A (objective 1); A starts once both finished."""
    jobs = [
        ReplayJob("A", 0.0, 2, (100.0,), (32,)),
        ReplayJob("B", 0.0, 1, (200.0,), (32,)),
        ReplayJob("C", 0.0, 1, (200.0,), (32,)),
    ]
    result = replay(jobs, 2, make_policy("max_sum_throughput"), round_s=100.0, keep_schedule=True)
    assert result.schedule == ((1, 2), (1, 2), (0,))
    np.testing.assert_allclose(result.finish_s, [300.0, 200.0, 200.0])
