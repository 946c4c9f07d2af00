"""Each LP time-share policy's objective evaluated on any time share X of the whole problem.

POP (B10, `apportion.solver.partition`) solves sub-problems with their own normalizers and
reports the concatenated X with the *full* problem's (B10 consequences): these functions give
that objective, each job's term, and its normalized throughput, with the same definitions as
the policies (A2.1, A2.4-A2.8). X is the non-packed time share (POP does not partition space
sharing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from apportion.formulations.gavel_lp import (
    ftf_data,
    max_sum_weights,
    policy_throughput,
    rho,
)
from apportion.formulations.max_min_fairness import level_coefficients
from apportion.formulations.water_filling import effective_weights
from apportion.solver.model import Compat, FloatArray, Problem
from apportion.solver.parameters import (
    CostThroughputParameters,
    FinishTimeFairnessParameters,
    MaxMinFairnessParameters,
    MaxSumThroughputParameters,
    MinMakespanParameters,
    ThroughputNormalization,
    WaterFillingParameters,
)


@dataclass(frozen=True)
class TimeShareScore:
    """The policy's objective of X on the whole problem (None = not finite), each job's term
    in it, and each job's normalized throughput (the policy's normalizer)."""

    objective: float | None
    job_value: FloatArray
    normalized: FloatArray


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def score_max_min(
    problem: Problem, parameters: MaxMinFairnessParameters, compat: Compat, X: FloatArray
) -> TimeShareScore:
    """Smallest level s_i/w_i thr_i(X)/prop_i (A2.1)."""
    a, prop, thr = level_coefficients(problem, parameters.heterogeneity_agnostic, compat)
    levels = np.einsum("ij,ij->i", a, X)
    normalized = np.divide(np.einsum("ij,ij->i", thr, X), prop,
                           out=np.zeros(levels.size), where=prop > 0)
    objective = float(levels.min()) if levels.size else 0.0
    return TimeShareScore(objective, levels, normalized)


def score_water_filling(
    problem: Problem, parameters: WaterFillingParameters, compat: Compat, X: FloatArray
) -> TimeShareScore:
    """Smallest level with the first round's tenant weights (A2.4; the first round is A2.1)."""
    m = problem.jobs.num_jobs
    unit = replace(problem, jobs=replace(problem.jobs, priority_weight=np.ones(m)))
    a, _, _ = level_coefficients(unit, parameters.heterogeneity_agnostic, compat)
    s = problem.jobs.scale_factor.astype(np.float64)
    u = np.einsum("ij,ij->i", a / s[:, None], X)
    weight = effective_weights(problem, np.zeros(m, dtype=bool))
    levels = np.divide(s, weight, out=np.zeros(m), where=weight > 0) * u
    live = weight > 0
    objective = float(levels[live].min()) if live.any() else 0.0
    return TimeShareScore(objective, levels, u)


def score_max_sum(
    problem: Problem, parameters: MaxSumThroughputParameters, compat: Compat, X: FloatArray
) -> TimeShareScore:
    """sum_i mult_i thr_i(X) (A2.6)."""
    T = policy_throughput(problem, parameters.reference_type)
    normalize = ThroughputNormalization.NONE if compat is Compat.GAVEL else parameters.normalize
    per_job = max_sum_weights(problem, T, normalize) * np.einsum("ij,ij->i", T, X)
    return TimeShareScore(float(per_job.sum()), per_job, per_job)


def score_cost(
    problem: Problem, parameters: CostThroughputParameters, compat: Compat, X: FloatArray
) -> TimeShareScore:
    """sum_ij T[i,j]/cost_j X[i,j] over priced types (A2.7's last stage; the SLO and free-type
    stages come before it lexicographically and are not part of this number)."""
    T = policy_throughput(problem, parameters.reference_type)
    cost = problem.cluster.cost_per_hour.astype(np.float64)
    mult = np.where(cost <= 0, 0.0, 1.0 / np.where(cost <= 0, 1.0, cost))
    per_job = (T * X) @ mult
    return TimeShareScore(float(per_job.sum()), per_job, per_job)


def score_makespan(
    problem: Problem, parameters: MinMakespanParameters, compat: Compat, X: FloatArray
) -> TimeShareScore:
    """max_i R_i/thr_i(X) over jobs with remaining work (A2.8), s; inf when one gets none."""
    T = policy_throughput(problem, parameters.reference_type)
    remaining = np.maximum(problem.jobs.remaining_steps, 0.0)
    active = remaining > 0
    thr = np.einsum("ij,ij->i", T, X)
    finish = np.divide(remaining, thr, out=np.where(active, np.inf, 0.0), where=thr > 0)
    objective = float(finish[active].max()) if active.any() else 0.0
    rate = np.divide(thr, remaining, out=np.zeros(thr.size), where=active)
    return TimeShareScore(_finite(objective), finish, rate)


def score_finish_time_fairness(
    problem: Problem, parameters: FinishTimeFairnessParameters, compat: Compat, X: FloatArray
) -> TimeShareScore:
    """max_i w_i rho_i(X) with the whole problem's isolated throughputs (A2.5)."""
    T = policy_throughput(problem, parameters.reference_type)
    data = ftf_data(problem, T, compat)
    thr = np.einsum("ij,ij->i", T, X)
    per_job = rho(data, thr)
    objective = float(per_job.max()) if per_job.size else 0.0
    normalized = np.divide(thr, data.iso, out=np.zeros(thr.size), where=data.iso > 0)
    return TimeShareScore(_finite(objective), per_job, normalized)
