"""Throughput normalizers shared by the Gavel policies (formulations.md A1.3)."""

from __future__ import annotations

import numpy as np

from apportion.solver.model import FloatArray, Problem


def proportional_throughput(throughput: FloatArray, count: FloatArray) -> FloatArray:
    """prop_i = sum_j T[i,j] W[j] / sum_k W[k] (steps/s): job i's throughput on a device mix
    identical to the cluster's. Independent of the number of jobs and of scale factors."""
    total = float(np.sum(count))
    return np.asarray(throughput @ count / total, dtype=np.float64)


def isolated_time_share(problem: Problem, block_unusable: bool = True) -> FloatArray:
    """X^iso[i,j] = (W[j]/m)/s_i, each row divided by max(1, row sum) (A1.3).

    With `block_unusable`, cells the job cannot use (B4) are set to 0 afterwards, which keeps
    B1-B3 (only entries are lowered)."""
    m = problem.jobs.num_jobs
    if m == 0:
        return np.zeros((0, problem.cluster.num_types))
    count = problem.cluster.count.astype(np.float64)
    share = (count[None, :] / m) / problem.jobs.scale_factor[:, None].astype(np.float64)
    share = share / np.maximum(1.0, share.sum(axis=1, keepdims=True))
    if block_unusable:
        share = np.where(problem.usable, share, 0.0)
    return np.asarray(share, dtype=np.float64)
