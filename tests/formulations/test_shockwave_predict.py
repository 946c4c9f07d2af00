"""Shockwave's prediction inputs (A4.6, docs/policies/market.md): the reference-finish-time rule and
the 40% throughput recalibration.

* F*: a hand-computed series; the incremental state against upstream's direct formula
  (`finish_time_momentumed_average`, written out here over the whole series) on random
  series; the momentum; a job-set change re-estimates every job, no change keeps the state.
* Recalibration: within 40% nothing changes; beyond, every duration is scaled by
  profiled/measured epochs, and both predictor modes scale with it.
* Wire level: the state comes back in the response, goes in again, and bad state fields are
  reported with their field paths.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import apportion.formulations.shockwave as sw
from apportion.formulations.shockwave_predict import (
    profiled_epochs_in,
    recalibrated_durations,
    reestimate_reference,
    reference_from_state,
    remaining_time_s,
)
from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.errors import ValidationError
from apportion.solver.model import Compat, Problem, ReferenceFinishState
from apportion.solver.parameters import RemainingTimePredictor, ShockwaveParameters
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import policy_pb2 as policy_pb

# --------------------------------------------------------------------------------------------
# reference finish time F*


def one(estimate: float) -> np.ndarray:
    return np.array([estimate])


def upstream_momentum_average(series: list[tuple[float, float]], now: float) -> float:
    """Upstream's `finish_time_momentumed_average` with times instead of round indices:
    weights = the time each estimate was in force until now (the last one until now), a single
    weight of 1 when all are zero, then 0.9 x mean + 0.1 x the latest estimate."""
    times = [t for t, _ in series] + [now]
    windows = np.diff(times)
    if max(windows) == 0:
        assert len(series) == 1
        probs = np.array([1.0])
    else:
        probs = windows / windows.sum()
    mean = float(probs @ np.array([v for _, v in series]))
    return 0.9 * mean + 0.1 * series[-1][1]


def test_reference_rule_by_hand() -> None:
    """Estimate 1000 made at t = 0, 2000 at t = 360 (job set change), Delta = 120 s:
    t = 0: 1000; t = 240: mean 1000 -> 1000; t = 360: mean 1000 (the new estimate has been in
    force 0 s) -> 0.9*1000 + 0.1*2000 = 1100; t = 600: mean (1000*360 + 2000*240)/600 = 1400
    -> 0.9*1400 + 0.1*2000 = 1460."""
    state = reestimate_reference(ReferenceFinishState.empty(1), one(1000.0), 0.0, 3)
    assert reference_from_state(state, 0.0)[0] == pytest.approx(1000.0)
    assert reference_from_state(state, 240.0)[0] == pytest.approx(1000.0)
    state = reestimate_reference(state, one(2000.0), 360.0, 4)
    assert state.earlier_average_s[0] == pytest.approx(1000.0)
    assert state.earlier_weight_s[0] == pytest.approx(360.0)
    assert state.job_count[0] == 4
    assert reference_from_state(state, 360.0)[0] == pytest.approx(1100.0)
    assert reference_from_state(state, 600.0)[0] == pytest.approx(1460.0)
    # the same numbers from upstream's formula over the whole series (in rounds of 120 s)
    assert upstream_momentum_average([(0, 1000.0), (3, 2000.0)], 5) == pytest.approx(1460.0)


def test_momentum_limits() -> None:
    """momentum 1 = the time-weighted mean only; 0 = the latest estimate only; 0.9 between."""
    state = reestimate_reference(ReferenceFinishState.empty(1), one(1000.0), 0.0, 2)
    state = reestimate_reference(state, one(3000.0), 100.0, 3)
    # at t = 300: mean = (1000*100 + 3000*200)/300 = 7000/3
    mean = 7000.0 / 3.0
    assert reference_from_state(state, 300.0, momentum=1.0)[0] == pytest.approx(mean)
    assert reference_from_state(state, 300.0, momentum=0.0)[0] == pytest.approx(3000.0)
    assert reference_from_state(state, 300.0)[0] == pytest.approx(0.9 * mean + 0.1 * 3000.0)
    # as time passes without a change, F* moves toward the latest estimate
    later = [reference_from_state(state, t)[0] for t in (300.0, 1000.0, 1e5)]
    assert later[0] < later[1] < later[2] < 3000.0


@given(
    st.lists(
        st.tuples(st.floats(0.0, 2000.0), st.floats(100.0, 1e5)),
        min_size=1,
        max_size=8,
    ),
    st.floats(0.0, 2000.0),
)
def test_incremental_state_matches_upstream_series(
    steps: list[tuple[float, float]], extra: float
) -> None:
    """Estimates at increasing times (gaps >= 0): the incremental state (latest estimate +
    earlier mean and weight) gives upstream's F* over the full series."""
    series: list[tuple[float, float]] = []
    state = ReferenceFinishState.empty(1)
    now = 0.0
    for gap, estimate in steps:
        if series:
            now += max(gap, 1.0)  # upstream re-estimates at most once per round
        state = reestimate_reference(state, one(estimate), now, 5)
        series.append((now, estimate))
    end = now + extra
    expected = upstream_momentum_average(series, end)
    assert reference_from_state(state, end)[0] == pytest.approx(expected, rel=1e-12)


def problem_for(done: list[int], now: float, n_jobs: int = 2) -> Problem:
    durations = [[100.0] * 10, [200.0] * 5, [50.0] * 8][:n_jobs]
    batches = [[32] * len(d) for d in durations]
    return sw.window_problem(
        2,
        [1] * n_jobs,
        durations,
        batches,
        done[:n_jobs],
        [0.0, 60.0, 120.0][:n_jobs],
        None,
        now,
        120.0,
    )


def prepared(problem: Problem) -> sw.ShockwaveState:
    params = ShockwaveParameters(predictor=RemainingTimePredictor.ORACLE)
    return sw.prepare(problem, params, Compat.NONE, np.arange(problem.jobs.num_jobs))


def test_first_call_estimates_equal_share_finish() -> None:
    """No state: every job is new; F* = F^ = a + (done + P)/min(1, G/n); with G = 2 >= n = 2
    the share is 1: job 0: 0 + 1000, job 1: 60 + 1000."""
    st0 = prepared(problem_for([0, 0], 0.0))
    assert st0.reestimated
    np.testing.assert_allclose(st0.reference, [1000.0, 1060.0])
    np.testing.assert_allclose(st0.reference_state.estimate_s, [1000.0, 1060.0])
    np.testing.assert_array_equal(st0.reference_state.job_count, [2, 2])


def test_no_job_set_change_keeps_state_and_a_change_reestimates() -> None:
    first = prepared(problem_for([0, 0], 0.0))
    # same two jobs 480 s later, some progress (and a different predicted remaining time):
    # no re-estimate, F* from the state (still the first estimates)
    later = problem_for([3, 1], 480.0)
    later = replace(later, history=replace(later.history, reference_state=first.reference_state))
    same = prepared(later)
    assert not same.reestimated
    np.testing.assert_array_equal(same.reference_state.estimate_s, first.reference_state.estimate_s)
    np.testing.assert_allclose(same.reference, [1000.0, 1060.0])
    # a third job arrives: n = 3 > G = 2, share 2/3; every job is re-estimated at t = 480
    grown = problem_for([3, 1, 0], 480.0, n_jobs=3)
    grown_state = ReferenceFinishState(
        estimate_s=np.append(first.reference_state.estimate_s, np.nan),
        estimate_time_s=np.append(first.reference_state.estimate_time_s, 0.0),
        earlier_average_s=np.append(first.reference_state.earlier_average_s, 0.0),
        earlier_weight_s=np.append(first.reference_state.earlier_weight_s, 0.0),
        job_count=np.append(first.reference_state.job_count, 0),
    )
    grown = replace(grown, history=replace(grown.history, reference_state=grown_state))
    changed = prepared(grown)
    assert changed.reestimated
    new_estimate = np.array([0.0 + 1000.0 * 1.5, 60.0 + 1000.0 * 1.5, 120.0 + 400.0 * 1.5])
    np.testing.assert_allclose(changed.reference_state.estimate_s, new_estimate)
    np.testing.assert_array_equal(changed.reference_state.job_count, [3, 3, 3])
    np.testing.assert_allclose(changed.reference_state.earlier_weight_s, [480.0, 480.0, 0.0])
    # right after the change: 0.9 * old estimate + 0.1 * new one (a new job: its estimate)
    expected = np.array([0.9 * 1000.0 + 0.1 * 1500.0, 0.9 * 1060.0 + 0.1 * 1560.0, new_estimate[2]])
    np.testing.assert_allclose(changed.reference, expected)


def test_departure_is_a_job_set_change() -> None:
    """A job left (its state says 3 active jobs, now 2): every job is re-estimated."""
    problem = problem_for([3, 1], 480.0)
    state = reestimate_reference(ReferenceFinishState.empty(2), np.array([900.0, 950.0]), 0.0, 3)
    problem = replace(problem, history=replace(problem.history, reference_state=state))
    out = prepared(problem)
    assert out.reestimated
    np.testing.assert_array_equal(out.reference_state.job_count, [2, 2])
    np.testing.assert_allclose(out.reference_state.earlier_average_s, [900.0, 950.0])


# --------------------------------------------------------------------------------------------
# recalibration


def test_profiled_epochs_in_time() -> None:
    d = np.array([10.0, 20.0, 30.0])
    assert profiled_epochs_in(d, 0.0) == 0.0
    assert profiled_epochs_in(d, 5.0) == pytest.approx(0.5)
    assert profiled_epochs_in(d, 30.0) == pytest.approx(2.0)
    assert profiled_epochs_in(d, 45.0) == pytest.approx(2.5)
    assert profiled_epochs_in(d, 90.0) == pytest.approx(4.0)  # past the end: last duration


@pytest.mark.parametrize("mode", list(RemainingTimePredictor))
def test_recalibration_threshold_and_scale(mode: RemainingTimePredictor) -> None:
    d = np.array([100.0, 100.0, 200.0, 200.0, 200.0])
    b = np.array([16, 16, 32, 32, 32])
    # the profile completes 3 epochs in 400 s
    assert profiled_epochs_in(d, 400.0) == pytest.approx(3.0)
    base = remaining_time_s(d, b, 2, mode)
    # measured 2.0 epochs: |2 - 3|/3 = 33% <= 40%: unchanged
    same = recalibrated_durations(d, 400.0, 2.0)
    np.testing.assert_array_equal(same, d)
    assert remaining_time_s(same, b, 2, mode) == base
    # measured 1.5 epochs: 50% slower than profiled: every duration x 3/1.5 = 2
    slow = recalibrated_durations(d, 400.0, 1.5)
    np.testing.assert_allclose(slow, 2.0 * d)
    assert remaining_time_s(slow, b, 2, mode) == pytest.approx(2.0 * base)
    # measured 6 epochs: faster, x 0.5
    fast = recalibrated_durations(d, 400.0, 6.0)
    np.testing.assert_allclose(fast, 0.5 * d)
    assert remaining_time_s(fast, b, 2, mode) == pytest.approx(0.5 * base)
    # no measurement
    np.testing.assert_array_equal(recalibrated_durations(d, 0.0, 0.0), d)


@pytest.mark.parametrize("mode", list(RemainingTimePredictor))
def test_recalibration_reaches_the_window_inputs(mode: RemainingTimePredictor) -> None:
    problem = problem_for([2, 1], 300.0)
    params = ShockwaveParameters(predictor=mode)
    plain = sw.prepare(problem, params, Compat.NONE, np.arange(2)).inputs
    # job 0 (100 s epochs) ran 400 s but did only 2 epochs: 4 profiled -> x2; job 1 within 40%
    jobs = replace(
        problem.jobs,
        measured_run_time_s=np.array([400.0, 200.0]),
        measured_epochs=np.array([2.0, 0.9]),
    )
    slow = sw.prepare(replace(problem, jobs=jobs), params, Compat.NONE, np.arange(2)).inputs
    np.testing.assert_allclose(slow.P, plain.P * [2.0, 1.0])
    np.testing.assert_allclose(slow.delta, plain.delta * [2.0, 1.0])


# --------------------------------------------------------------------------------------------
# wire level


def request(time_s: float = 600.0) -> service_pb.SolveRequest:
    req = service_pb.SolveRequest()
    acc = req.snapshot.cluster.accelerator_types.add()
    acc.name, acc.count = "v100", 2
    req.snapshot.time_s = time_s
    for k in range(3):
        job = req.snapshot.jobs.add()
        job.id = f"j{k}"
        job.arrival_time_s = 100.0 * k
        job.throughput["v100"] = 1.0
        job.progress.total_epochs = 4
        job.progress.epochs_done = 1
        job.epoch_profile.epoch_duration_s.extend([60.0, 60.0, 90.0, 90.0])
        job.epoch_profile.batch_size.extend([32, 32, 64, 64])
    req.policy.name = "shockwave"
    req.policy.shockwave.planning_rounds = 3
    req.policy.shockwave.predictor = policy_pb.REMAINING_TIME_PREDICTOR_ORACLE
    return req


STATE: tuple[Any, ...] = (
    "reference_estimate_s",
    "reference_estimate_time_s",
    "reference_earlier_average_s",
    "reference_earlier_weight_s",
    "reference_job_count",
)


def test_state_round_trip_on_the_wire() -> None:
    """First call: every job new, F* = estimate, state returned. Sent back 600 s later with the
    same jobs: no re-estimate, F* unchanged (one estimate only). Then one job dropped: all
    re-estimated with n = 2, F* = 0.9 x old estimate + 0.1 x new one."""
    first = solve_request(request(600.0))
    for job in first.plan.jobs:
        assert all(job.HasField(name) for name in STATE)
        assert job.reference_finish_time_s == pytest.approx(job.reference_estimate_s)
        assert job.reference_estimate_time_s == 600.0 and job.reference_job_count == 3

    def again(time_s: float, drop: bool) -> service_pb.SolveResponse:
        req = request(time_s)
        if drop:
            del req.snapshot.jobs[2]
        for job in first.plan.jobs:
            if drop and job.job_id == "j2":
                continue
            entry = req.snapshot.history.jobs.add()
            entry.job_id = job.job_id
            entry.reference_finish_time_s = job.reference_finish_time_s
            for name in STATE:
                setattr(entry, name, getattr(job, name))
        return solve_request(req)

    same = again(1200.0, drop=False)
    for a, b in zip(first.plan.jobs, same.plan.jobs, strict=True):
        assert b.reference_estimate_s == a.reference_estimate_s
        assert b.reference_finish_time_s == pytest.approx(a.reference_finish_time_s)
    fewer = again(1200.0, drop=True)
    for a, b in zip(first.plan.jobs[:2], fewer.plan.jobs, strict=True):
        assert b.reference_job_count == 2 and b.reference_estimate_time_s == 1200.0
        assert b.reference_earlier_average_s == pytest.approx(a.reference_estimate_s)
        assert b.reference_earlier_weight_s == pytest.approx(600.0)
        assert b.reference_finish_time_s == pytest.approx(
            0.9 * a.reference_estimate_s + 0.1 * b.reference_estimate_s
        )


def test_bad_state_and_measurements_have_field_paths() -> None:
    req = request(600.0)
    bad = req.snapshot.history.jobs.add()
    bad.job_id = "j0"
    bad.reference_estimate_s = float("nan")
    bad.reference_estimate_time_s = 700.0  # after time_s
    bad.reference_earlier_weight_s = -1.0
    bad.reference_job_count = 0
    missing = req.snapshot.history.jobs.add()
    missing.job_id = "j1"
    missing.reference_earlier_average_s = 5.0  # state without the estimate
    req.snapshot.jobs[2].epoch_profile.measured_run_time_s = -3.0
    req.snapshot.jobs[1].epoch_profile.measured_epochs = 9.0  # > total_epochs 4
    with pytest.raises(ValidationError) as err:
        request_to_model(req)
    fields = {v.field for v in err.value.violations}
    assert {
        "snapshot.history.jobs[0].reference_estimate_s",
        "snapshot.history.jobs[0].reference_estimate_time_s",
        "snapshot.history.jobs[0].reference_earlier_weight_s",
        "snapshot.history.jobs[0].reference_job_count",
        "snapshot.history.jobs[1].reference_estimate_s",
        "snapshot.jobs[2].epoch_profile.measured_run_time_s",
        "snapshot.jobs[1].epoch_profile.measured_epochs",
    } <= fields
