"""The columnar forms of `apportion.v1`.

* `expand_columns`: a columnar plan (`Plan.columns`, asked for with `options.columnar_plan`)
  read back as the `JobAllocation`s it stands for, so that `check_plan` checks both forms with
  the same code. Column i is the i-th job of the snapshot; failures in the columns' shape are
  reported with `plan.columns.<field>` paths, everything after with `plan.jobs[i]` paths.
* `to_job_columns`: a request's plain jobs moved into `Snapshot.job_columns`, to test a
  service or a policy with the columnar job form."""

from __future__ import annotations

import math
from collections.abc import Sequence

from apportion.solver.model import DEFAULT_RESTART_PENALTY_S, Problem
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

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


PLAIN_JOB_FIELDS = frozenset({
    "id", "scale_factor", "priority_weight", "tenant", "arrival_time_s", "throughput",
    "progress", "deadline_s", "restart_penalty_s", "job_type",
})
"""The `Job` fields `JobColumns` can carry (of `progress`: steps_done and total_steps)."""


def _plain(job: snapshot_pb.Job) -> bool:
    names = {f.name for f, _ in job.ListFields()}
    progress = {f.name for f, _ in job.progress.ListFields()}
    return names <= PLAIN_JOB_FIELDS and progress <= {"steps_done", "total_steps"}


def to_job_columns(
    request: service_pb.SolveRequest, keep_rows: int = 0, types: Sequence[str] | None = None
) -> service_pb.SolveRequest:
    """A copy of `request` with the trailing `Snapshot.jobs` entries that use only the plain
    fields moved into `Snapshot.job_columns` (columnar jobs follow the rows, so a plain job
    before one that needs a row keeps its row and the order is unchanged); the first
    `keep_rows` jobs always stay rows. Unset row fields become their documented defaults
    (scale factor 1, weight 1, no deadline, restart penalty 30 s), so the service reads the same
    jobs either way. `types`: the order of `JobColumns.throughput_types` (default: the
    cluster's order, only the types some moved job names)."""
    out = service_pb.SolveRequest()
    out.CopyFrom(request)
    jobs = out.snapshot.jobs
    start = len(jobs)
    while start > keep_rows and _plain(jobs[start - 1]):
        start -= 1
    moved = list(jobs)[start:]
    if not moved:
        return out
    kept = list(jobs)[:start]
    del jobs[:]
    jobs.extend(kept)
    columns = out.snapshot.job_columns
    names = [t.name for t in out.snapshot.cluster.accelerator_types]
    used = [n for n in names if any(n in job.throughput for job in moved)] \
        if types is None else list(types)
    columns.throughput_types.extend(used)
    for job in moved:
        columns.ids.append(job.id)
        columns.throughput.extend(job.throughput.get(n, 0.0) for n in used)
        size = job.scale_factor
        columns.scale_factor.append(size if size or job.HasField("scale_factor") else 1)
        weight = job.priority_weight
        columns.priority_weight.append(weight if weight or job.HasField("priority_weight")
                                       else 1.0)
        columns.tenant.append(job.tenant)
        columns.arrival_time_s.append(job.arrival_time_s)
        columns.steps_done.append(job.progress.steps_done)
        columns.total_steps.append(job.progress.total_steps)
        columns.deadline_s.append(job.deadline_s if job.HasField("deadline_s") else math.nan)
        penalty = job.restart_penalty_s
        columns.restart_penalty_s.append(
            penalty if penalty or job.HasField("restart_penalty_s")
            else DEFAULT_RESTART_PENALTY_S)
        columns.job_type.append(job.job_type)
    return out
