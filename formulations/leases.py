"""Leases (Themis's auction, Astraea; B1, B3): a job whose lease in the
snapshot (`history.jobs[].lease_expires_s`) ends after `time_s` keeps its current placement
(`history.jobs[].current`) for the fraction `lease_time_share` of the time."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from apportion.solver.fairness_model import FairnessInputs
from apportion.solver.fairness_result import Lease
from apportion.solver.model import FloatArray, IntArray, Problem


def holding_leases(problem: Problem, fair: FairnessInputs) -> NDArray[np.bool_]:
    """(m,) jobs with an unexpired lease on a current placement."""
    m = problem.jobs.num_jobs
    return np.asarray((fair.lease_expires_s > problem.time_s) & problem.history.running(m))


def held_devices(problem: Problem, jobs: IntArray) -> IntArray:
    """Devices each running job of `jobs` holds: `history.jobs[].current`'s count, or its
    scale factor when that is not given."""
    given = problem.history.current_devices[jobs].astype(np.int64)
    return np.where(given > 0, given, problem.jobs.scale_factor[jobs].astype(np.int64))


def keep_leases(
    problem: Problem, fair: FairnessInputs, holding: NDArray[np.bool_], X: FloatArray
) -> list[Lease | None]:
    """Per job, its kept lease (None for the others); the holders' time shares are written
    into X (their lease's time share on the leased type)."""
    hist = problem.history
    names = problem.cluster.node_names
    leases: list[Lease | None] = [None] * problem.jobs.num_jobs
    held = np.flatnonzero(holding)
    types = hist.current_type[held]
    X[held, types] = fair.lease_time_share[held]
    for i, j, devices, expires, share in zip(
            held.tolist(), types.tolist(), held_devices(problem, held).tolist(),
            fair.lease_expires_s[held].tolist(), X[held, types].tolist(), strict=True):
        leases[i] = Lease(j, devices, tuple(names[k] for k in hist.current_nodes[i]),
                          expires, share, kept=True)
    return leases
