"""A `Plan` from groups of jobs sharing devices (the common tail of the co-location policies).

Every member of a placed group runs all the time (time share 1 on the group's type) at its
throughput alone divided by its slowdown; jobs in no group get nothing.
"""

from __future__ import annotations

import numpy as np

from apportion.solver.groups import ColocationGroup, GroupSection
from apportion.solver.model import FloatArray, Problem
from apportion.solver.result import Certificate, JobStatus, Plan


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
