"""Throughput normalizers shared by the Gavel policies (A1.3, docs/policies/common.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from apportion.solver.model import FloatArray, Problem


def proportional_throughput(throughput: FloatArray, count: FloatArray) -> FloatArray:
    """prop_i = sum_j T[i,j] W[j] / sum_k W[k] (steps/s): job i's throughput on a device mix
    identical to the cluster's. Independent of the number of jobs and of scale factors."""
    total = float(np.sum(count))
    return np.asarray(throughput @ count / total, dtype=np.float64)


def isolated_share(
    scale_factor: NDArray[Any], count: NDArray[Any], num_jobs: int
) -> FloatArray:
    """X^iso[i,j] = (W[j]/m)/s_i with m = `num_jobs`, each row divided by max(1, row sum)
    (A1.3): a static 1/m partition of every type. One row per entry of `scale_factor`."""
    s = np.asarray(scale_factor, dtype=np.float64)
    if num_jobs == 0:
        return np.zeros((s.size, np.size(count)))
    share = (np.asarray(count, dtype=np.float64)[None, :] / num_jobs) / s[:, None]
    return np.asarray(share / np.maximum(1.0, share.sum(axis=1, keepdims=True)), np.float64)


def isolated_time_share(problem: Problem, block_unusable: bool = True) -> FloatArray:
    """X^iso over the problem's jobs (see `isolated_share`).

    With `block_unusable`, cells the job cannot use (B4) are set to 0 afterwards, which keeps
    B1-B3 (only entries are lowered)."""
    share = isolated_share(problem.jobs.scale_factor, problem.cluster.count,
                           problem.jobs.num_jobs)
    if block_unusable:
        share = np.where(problem.usable, share, 0.0)
    return np.asarray(share, dtype=np.float64)


def repair_time_share(
    X: FloatArray, allowed: NDArray[np.bool_], scale_factor: NDArray[Any], count: NDArray[Any]
) -> FloatArray:
    """Project a solver's time shares onto the base constraints (A1.2, A1.4): entries outside
    `allowed` and below 1e-9 set to 0, clip to [0, 1], each job's row scaled to sum <= 1, then
    each type's column scaled so that sum_i s_i X[i,j] <= W[j]. Only entries are lowered, so
    a feasible X is returned unchanged (up to the zeroed noise)."""
    out = np.where(allowed, np.clip(X, 0.0, 1.0), 0.0)
    out[out < 1e-9] = 0.0  # A1.4: tiny entries are solver noise
    out /= np.maximum(1.0, out.sum(axis=1, keepdims=True))
    use = np.asarray(scale_factor, dtype=np.float64) @ out
    W = np.asarray(count, dtype=np.float64)
    out *= np.where(use > W, W / np.where(use > 0, use, 1.0), 1.0)[None, :]
    return np.asarray(out, dtype=np.float64)
