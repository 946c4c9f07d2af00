"""Leases (Themis's auction, Astraea; B1, B3): a job whose lease in the
snapshot (`history.jobs[].lease_expires_s`) ends after `time_s` keeps its current placement
(`history.jobs[].current`) for the fraction `lease_time_share` of the time."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from apportion.solver.fairness_model import FairnessInputs
from apportion.solver.fairness_result import Lease
from apportion.solver.model import FloatArray, Problem


def holding_leases(problem: Problem, fair: FairnessInputs) -> NDArray[np.bool_]:
    """(m,) jobs with an unexpired lease on a current placement."""
    m = problem.jobs.num_jobs
    return np.asarray((fair.lease_expires_s > problem.time_s) & problem.history.running(m))


def keep_leases(
    problem: Problem, fair: FairnessInputs, holding: NDArray[np.bool_], X: FloatArray
) -> list[Lease | None]:
    """Per job, its kept lease (None for the others); the holders' time shares are written
    into X (their lease's time share on the leased type)."""
    hist = problem.history
    m = problem.jobs.num_jobs
    names = problem.cluster.node_names
    leases: list[Lease | None] = [None] * m
    for i in np.flatnonzero(holding):
        j = int(hist.current_type[i])
        X[i, j] = fair.lease_time_share[i]
        nodes = hist.current_nodes[i]
        devices = int(hist.current_devices[i]) or int(problem.jobs.scale_factor[i])
        leases[i] = Lease(j, devices, tuple(names[k] for k in nodes),
                          float(fair.lease_expires_s[i]), float(X[i, j]), kept=True)
    return leases
