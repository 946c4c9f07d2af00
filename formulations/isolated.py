"""Gavel's `isolated` baseline: a static 1/m share of every type (A1.3, docs/policies/common.md)."""

from __future__ import annotations

import time

import numpy as np

from apportion.formulations.normalizers import isolated_time_share
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, Problem, SolveOptions
from apportion.solver.parameters import NoParameters
from apportion.solver.result import Certificate, JobStatus, Plan, Termination


def solve_policy(
    problem: Problem,
    parameters: NoParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """X^iso; cells a job cannot use stay idle unless compat is gavel. Objective: the smallest
    normalized throughput thr_i/prop_i (reported for comparison with max-min fairness)."""
    started = time.perf_counter()
    share = isolated_time_share(problem, block_unusable=compat is not Compat.GAVEL)
    thr = np.einsum("ij,ij->i", problem.jobs.throughput, share)
    prop = problem.proportional_throughput
    normalized = np.divide(thr, prop, out=np.zeros_like(thr), where=prop > 0)
    m, n = share.shape
    cert = Certificate(
        termination=Termination.HEURISTIC,
        maximize=True,
        objective=float(normalized.min()) if m else None,
        formulation="isolated (static 1/m share of every type)",
        solver="closed form",
        build_time_s=time.perf_counter() - started,
    )
    return Plan(
        time_share=share,
        effective_throughput=thr,
        normalized_throughput=normalized,
        objective_value=normalized,
        job_dual=np.zeros(m),
        accelerator_prices=np.zeros(n),
        certificate=cert,
        job_status=(JobStatus.ALLOCATED,) * m,
        job_reason=("",) * m,
    )
