"""A columnar plan (`Plan.columns`, asked for with `options.columnar_plan`) read back as the
`JobAllocation`s it stands for, so that `check_plan` checks both forms with the same code.
Column i is the i-th job of the snapshot; failures in the columns' shape are reported with
`plan.columns.<field>` paths, everything after with `plan.jobs[i]` paths."""

from __future__ import annotations

import math

from apportion.solver.model import Problem
from apportion.v1 import allocation_service_pb2 as service_pb

PER_JOB = ("status", "effective_throughput", "normalized_throughput", "objective_value")
"""Columns with one entry per job."""
STATE = ("cumulative_isolated_time_s", "isolated_throughput", "remaining_steps", "slo_shortfall")
"""Columns with one entry per job or none (the policy returns no such state)."""
SPARSE = (("job_index", "type_index", "time_share"), ("dual_job_index", "dual"),
          ("reason_job_index", "reason"))
"""Parallel columns of entries for some jobs."""


def expand_columns(
    response: service_pb.SolveResponse, problem: Problem, failures: list[tuple[str, str]]
) -> service_pb.SolveResponse:
    """`response` with `plan.jobs` filled from `plan.columns` (the entries a plan with row-only
    sections already lists keep those sections); unchanged when the plan has no columns. The
    columns' shape defects are appended to `failures` as (path, message), and then the
    response is returned unchanged."""
    plan = response.plan
    if not plan.HasField("columns"):
        return response
    columns = plan.columns
    m = problem.jobs.num_jobs
    before = len(failures)
    for name in PER_JOB:
        if len(getattr(columns, name)) != m:
            failures.append((f"plan.columns.{name}",
                             f"has {len(getattr(columns, name))} entries for {m} jobs"))
    for name in STATE:
        if len(getattr(columns, name)) not in (0, m):
            failures.append((f"plan.columns.{name}", f"has {len(getattr(columns, name))} "
                             f"entries: 0 or one per job ({m})"))
    for group in SPARSE:
        sizes = {len(getattr(columns, name)) for name in group}
        if len(sizes) > 1:
            failures.append((f"plan.columns.{group[0]}",
                             f"{', '.join(group)} differ in length"))
        indices = getattr(columns, group[0])
        if any(not 0 <= i < m for i in indices):
            failures.append((f"plan.columns.{group[0]}", f"an index outside [0, {m})"))
    types = problem.cluster.type_names
    if any(not 0 <= t < len(types) for t in columns.type_index):
        failures.append(("plan.columns.type_index", f"an index outside [0, {len(types)})"))
    cells = list(zip(columns.job_index, columns.type_index, strict=False))
    if len(set(cells)) != len(cells):
        failures.append(("plan.columns.job_index", "a (job, type) cell listed twice"))
    if plan.jobs and len(plan.jobs) != m:
        failures.append(("plan.jobs", f"lists {len(plan.jobs)} jobs beside the columns, the "
                         f"snapshot has {m}"))
    if len(failures) > before:
        return response
    expanded = service_pb.SolveResponse()
    expanded.CopyFrom(response)
    out = expanded.plan
    if not out.jobs:
        for job_id in problem.jobs.ids:
            out.jobs.add(job_id=job_id)
    entries = list(out.jobs)
    for k, entry in enumerate(entries):
        entry.status = columns.status[k]
        entry.effective_throughput = columns.effective_throughput[k]
        entry.normalized_throughput = columns.normalized_throughput[k]
        entry.objective_value = columns.objective_value[k]
        for name in STATE:
            values = getattr(columns, name)
            if values and not math.isnan(values[k]):  # NaN slo_shortfall: the job has no SLO
                setattr(entry, name, values[k])
    for i, t, share in zip(columns.job_index, columns.type_index, columns.time_share,
                           strict=True):
        entries[i].time_share[types[t]] = share
    for i, dual in zip(columns.dual_job_index, columns.dual, strict=True):
        entries[i].dual = dual
    for i, reason in zip(columns.reason_job_index, columns.reason, strict=True):
        entries[i].reason = reason
    return expanded
