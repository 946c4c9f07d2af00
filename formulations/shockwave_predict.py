"""Shockwave's utility-prediction inputs (formulations.md A4.6), as pure functions.

* `remaining_time_s`: predicted remaining runtime P_i (Dirichlet posterior over batch-size
  regimes, or the oracle sum of the remaining profiled durations).
* `interpolated_epoch_s`: delta_i, the mean profiled duration of the epochs seen so far.
* `reference_finish_time_s`: the equal-share finish-time estimate F^_i that seeds F*_i.

All durations are seconds; epochs are counts.
"""

from __future__ import annotations

import math

import numpy as np

from apportion.solver.model import FloatArray, IntArray
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
    the predicted remaining epochs (the upstream rescaling term; formulations.md C2.5 notes it
    is unexplained). 0 for a finished job."""
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
