"""Shockwave's utility-prediction inputs (A4.6, docs/policies/market.md), as pure functions.

* `remaining_time_s`: predicted remaining runtime P_i (Dirichlet posterior over batch-size
  regimes, or the oracle sum of the remaining profiled durations).
* `interpolated_epoch_s`: delta_i, the mean profiled duration of the epochs seen so far.
* `reference_finish_time_s`: the equal-share finish-time estimate F^_i that seeds F*_i.
* `reestimate_reference` and `reference_from_state`: Shockwave's update rule for F*_i
  (a momentum-damped, time-weighted mean of the job's estimates).
* `recalibrated_durations`: the 40% throughput recalibration of the profile.

All durations are seconds; epochs are counts.
"""

from __future__ import annotations

import math

import numpy as np

from apportion.solver.model import FloatArray, IntArray, ReferenceFinishState
from apportion.solver.parameters import RemainingTimePredictor


def interpolated_epoch_s(durations: FloatArray, epochs_done: int) -> float:
    """delta_i = mean of d_i[0..e_i] (inclusive: the epochs done and the current one), s."""
    upto = min(max(epochs_done, 0) + 1, durations.size)
    return float(np.mean(durations[:upto]))


def remaining_time_s(
    durations: FloatArray,
    batch_sizes: IntArray,
    epochs_done: int,
    mode: RemainingTimePredictor = RemainingTimePredictor.DIRICHLET,
) -> float:
    """Predicted remaining runtime P_i (s) of a job with E = len(durations) epochs, e done.

    ORACLE: ``sum(d[e:])``.

    DIRICHLET (A4.6): the batch-size regimes are the distinct values of ``batch_sizes``
    (|B| of them). Prior concentration E/|B| on each; +1 per epoch observed at that batch size
    (the e completed epochs 0..e-1). The posterior mean, rescaled to E epochs, gives the
    expected number of epochs at each batch size; subtracting the observed counts (floor 0)
    leaves the predicted remaining epochs per regime, each costing the mean profiled duration
    at that batch size. The total is scaled by ``(E - e) / max(floor(S + 1), E - e)`` with S
    the predicted remaining epochs (the upstream rescaling term, which upstream does not
    explain). 0 for a finished job."""
    E = durations.size
    e = min(max(epochs_done, 0), E)
    if e >= E:
        return 0.0
    if mode is RemainingTimePredictor.ORACLE:
        return float(np.sum(durations[e:]))
    regimes, inverse = np.unique(batch_sizes, return_inverse=True)
    mean_duration = np.bincount(inverse, weights=durations) / np.bincount(inverse)
    observed = np.bincount(inverse[:e], minlength=regimes.size).astype(np.float64)
    posterior = E / regimes.size + observed
    expected = E * posterior / posterior.sum()
    remaining = np.clip(expected - observed, 0.0, None)
    predicted = float(remaining.sum())
    total = float(remaining @ mean_duration)
    return total * (E - e) / max(math.floor(predicted + 1.0), E - e)


def equal_share(gpus: int, jobs: int) -> float:
    """Shockwave's contention factor min(1, G/n) (gang sizes ignored, A1.3)."""
    return min(1.0, gpus / jobs) if jobs > 0 else 1.0


def reference_finish_time_s(
    arrival_s: float, done_s: float, remaining_s: float, share: float
) -> float:
    """F^_i = a_i + (time of the epochs done + P_i) / min(1, G/n) (absolute s)."""
    return arrival_s + (done_s + remaining_s) / share


REFERENCE_MOMENTUM = 0.9
"""Weight of the time-weighted mean of the estimates in F*_i (upstream `momentum`)."""
CALIBRATION_TOLERANCE = 0.4
"""Relative deviation of measured from profiled progress above which the profile is scaled."""


def reestimate_reference(
    state: ReferenceFinishState, estimate_s: FloatArray, now_s: float, job_count: int
) -> ReferenceFinishState:
    """The job set changed at `now_s`: every job gets the new estimate `estimate_s` (absolute
    s) as its latest one, made now with `job_count` active jobs.

    The previous latest estimate F_k of a job with state was in force from its
    `estimate_time_s` t_k until now: it joins the earlier estimates with weight
    w = max(now - t_k, 0) s, i.e. the earlier mean becomes (avg W + F_k w) / (W + w) and the
    weight W + w (an estimate in force for no time drops out). A job without state (NaN
    estimate) starts a fresh series."""
    has = ~np.isnan(state.estimate_s)
    latest = np.where(has, state.estimate_s, 0.0)
    w = np.where(has, np.maximum(now_s - state.estimate_time_s, 0.0), 0.0)
    W = np.where(has, state.earlier_weight_s, 0.0)
    total = W + w
    average = np.divide(
        state.earlier_average_s * W + latest * w,
        total,
        out=np.zeros_like(total),
        where=total > 0,
    )
    m = estimate_s.size
    return ReferenceFinishState(
        estimate_s=np.asarray(estimate_s, np.float64).copy(),
        estimate_time_s=np.full(m, float(now_s)),
        earlier_average_s=np.asarray(average, np.float64),
        earlier_weight_s=np.asarray(total, np.float64),
        job_count=np.full(m, int(job_count), np.int64),
    )


def reference_from_state(
    state: ReferenceFinishState, now_s: float, momentum: float = REFERENCE_MOMENTUM
) -> FloatArray:
    """F*_i at `now_s` (absolute s): with the latest estimate F_k in force since t_k and the
    earlier estimates' time-weighted mean A over W s,

        mean = (A W + F_k (now - t_k)) / (W + now - t_k)      (F_k when the weight is 0)
        F*   = momentum * mean + (1 - momentum) * F_k.

    This is upstream's `finish_time_momentumed_average(series, round)` (Shockwave,
    `scheduler/shockwave.py`): the estimates of a job's series are weighted by the number of
    rounds each was in force up to the current round (the latest one until now), then moved
    toward the latest estimate. Weights here are seconds on the snapshot clock; with the
    clock at Delta * round index they are the round counts times Delta, the same weights
    after normalization. F*_i therefore drifts toward the latest estimate as time passes even
    when the job set does not change. NaN where a job has no state."""
    span = np.maximum(now_s - state.estimate_time_s, 0.0)
    total = state.earlier_weight_s + span
    mean = np.divide(
        state.earlier_average_s * state.earlier_weight_s + state.estimate_s * span,
        total,
        out=state.estimate_s.copy(),
        where=total > 0,
    )
    return np.asarray(momentum * mean + (1.0 - momentum) * state.estimate_s, np.float64)


def profiled_epochs_in(durations: FloatArray, run_time_s: float) -> float:
    """Epochs (fractional) the profile completes in `run_time_s` s from the job's start: the
    whole epochs whose cumulative duration fits, plus the fraction of the next one; beyond the
    profile's end, extrapolated at the last epoch's duration (as upstream)."""
    if durations.size == 0 or run_time_s <= 0:
        return 0.0
    cum = np.cumsum(durations)
    whole = int(np.searchsorted(cum, run_time_s, side="right"))
    if whole >= durations.size:
        return durations.size + (run_time_s - float(cum[-1])) / float(durations[-1])
    base = float(cum[whole - 1]) if whole > 0 else 0.0
    return whole + (run_time_s - base) / float(durations[whole])


def recalibrated_durations(
    durations: FloatArray,
    measured_run_time_s: float,
    measured_epochs: float,
    tolerance: float = CALIBRATION_TOLERANCE,
) -> FloatArray:
    """Shockwave's throughput recalibration (A4.6; upstream
    `JobMetaData.calibrate_profiled_epoch_duration`): the job has run `measured_run_time_s` s
    and completed `measured_epochs` epochs; the profile completes p = `profiled_epochs_in`
    epochs in that time. If |measured - p| / p > `tolerance` (40%), every epoch duration is
    multiplied by p / measured (the measured time per epoch over the profiled one: a job
    running at half the profiled speed gets durations twice as long); otherwise, or without
    a measurement (either value <= 0), the profile is returned unchanged.

    Upstream measures samples (epochs x samples per epoch, constant per job), so the ratio is
    the same in epochs. Differences from upstream, on purpose: the measurement is one
    cumulative pair instead of per-round throughput x batch-size samples, and the fraction of
    the current epoch uses the profiled duration (upstream: the already-scaled one)."""
    if measured_run_time_s <= 0 or measured_epochs <= 0:
        return durations
    profiled = profiled_epochs_in(durations, measured_run_time_s)
    if profiled <= 0 or abs(measured_epochs - profiled) / profiled <= tolerance:
        return durations
    return np.asarray(durations * (profiled / measured_epochs), np.float64)
