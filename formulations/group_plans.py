"""A `Plan` from groups of jobs sharing devices (the common tail of the co-location policies).

Every member of a placed group runs all the time (time share 1 on the group's type) at its
throughput alone divided by its slowdown; jobs in no group get nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from apportion.solver.backends.status import SolverStatus
from apportion.solver.certificate import termination
from apportion.solver.groups import ColocationGroup, GroupSection
from apportion.solver.model import FloatArray, Problem
from apportion.solver.result import (
    Certificate,
    JobStatus,
    ModelSize,
    Plan,
    Termination,
    relative_gap,
)

NO_USABLE_TYPE = "no usable accelerator type (zero throughput or too few devices)"
"""Reason of a job that can run on no type (`Problem.usable` is false on every type)."""


def groups_plan(
    problem: Problem,
    section: GroupSection,
    certificate: Certificate,
    job_status: list[JobStatus],
    job_reason: list[str],
    objective_value: FloatArray | None = None,
    step_rate: FloatArray | None = None,
) -> Plan:
    """The plan of `section`'s groups; `objective_value` (m,) each job's term in the
    objective (default: its relative throughput 1 / slowdown, 0 outside groups);
    `step_rate` (m,) each job's steps/s alone when the policy knows it better than
    `jobs.throughput` (0 = use the throughput on the group's type)."""
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    share = np.zeros((m, n))
    effective = np.zeros(m)
    relative = np.zeros(m)
    for group in section.groups:
        for member, slowdown in zip(group.members, group.slowdown, strict=True):
            speed = 1.0 / slowdown if slowdown > 0 else 0.0
            relative[member] = speed
            if group.type_index >= 0:
                share[member, group.type_index] = 1.0
                alone = problem.jobs.throughput[member, group.type_index]
                if step_rate is not None and step_rate[member] > 0:
                    alone = step_rate[member]
                effective[member] = alone * speed
    return Plan(
        time_share=share,
        effective_throughput=effective,
        normalized_throughput=relative,
        objective_value=relative if objective_value is None else objective_value,
        job_dual=np.zeros(m),
        accelerator_prices=np.zeros(n),
        certificate=certificate,
        job_status=tuple(job_status),
        job_reason=tuple(job_reason),
        groups=section,
    )


def solo(job: int, type_index: int, devices: int,
         node_devices: tuple[tuple[str, int], ...] = ()) -> ColocationGroup:
    """A job running alone at its own speed."""
    return ColocationGroup((job,), (1.0,), type_index, devices, node_devices)


@dataclass(frozen=True)
class ExactRun:
    """How the exact solve of a co-location policy ended (its plan's objective included)."""

    objective: float
    bound: float | None
    """Proven bound on the optimum (the plan's objective is folded in: never below it)."""
    status: SolverStatus
    formulation: str
    solve_time_s: float = 0.0
    size: ModelSize = field(default_factory=ModelSize)
    detail: str = ""
    feasible_when_open: bool = False
    """A solved relaxation whose bound the plan does not meet means a feasible plan (synergy:
    placement lost part of the shape ILP's optimum), not an inaccurate optimum."""


def compared_plan(
    problem: Problem,
    section: GroupSection,
    job_status: list[JobStatus],
    job_reason: list[str],
    heuristic: str,
    heuristic_value: float,
    exact: ExactRun | None,
    tolerance: float,
    objective_value: FloatArray | None = None,
    step_rate: FloatArray | None = None,
    detail: str = "",
) -> Plan:
    """The plan of an exact solve (`exact`), reporting the published heuristic's objective on
    the same instance beside it; `exact` None = the heuristic's own plan (compat), whose
    termination is `heuristic` without a bound and whose certificate says `detail` (e.g. that
    the time limit cut it)."""
    if exact is None:
        cert = Certificate(Termination.HEURISTIC, True, heuristic_value, None,
                           formulation=f"{heuristic} (compat)", detail=detail, gap_scale=1.0)
        return groups_plan(problem, section, cert, job_status, job_reason, objective_value,
                           step_rate)
    bound = None if exact.bound is None else max(exact.bound, exact.objective)
    term = termination(exact.status, True, relative_gap(exact.objective, bound, 1.0), tolerance)
    if exact.feasible_when_open and term is Termination.OPTIMAL_INACCURATE:
        term = Termination.FEASIBLE
    cert = Certificate(
        termination=term,
        maximize=True,
        objective=exact.objective,
        bound=bound,
        solver="highs",
        formulation=exact.formulation,
        solve_time_s=exact.solve_time_s,
        model_size=exact.size,
        detail=exact.detail,
        gap_scale=1.0,
    )
    section = replace(section, heuristic=heuristic, heuristic_objective=heuristic_value)
    return groups_plan(problem, section, cert, job_status, job_reason, objective_value,
                       step_rate)
