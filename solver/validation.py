"""The rules every model satisfies, checked as numpy expressions over whole columns.

`snapshot_violations` checks a problem's cluster, its jobs' main arrays and its scalars against
the invariants documented on `apportion.solver.model` and the bounds of
`apportion.solver.limits`, and names the offending entries only, with the field path a
snapshot would have (``snapshot.jobs[3].throughput["v100"]``). Conversion runs it on the
columns it gathered from a request, `make_problem` on the arrays it was given, so both
reject the same inputs with the same messages. The predicates (`rate_ok`, `time_ok`, ...) let
conversion replace rejected values by defaults, so that the later checks of one request
see a well-formed model and report their own violations too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from apportion.solver import limits
from apportion.solver.arrays import FloatArray, IntArray
from apportion.solver.errors import ValidationError, Violation, echo, key
from apportion.solver.model import Cluster, History, Jobs, Problem

BoolArray = NDArray[np.bool_]

RATE_RULE = f"must be 0 or in [{limits.MIN_RATE:g}, {limits.MAX_RATE:g}]"
TIME_RULE = f"must be finite with magnitude at most {limits.MAX_TIME_S:g} s"
DURATION_RULE = f"must be in [0, {limits.MAX_TIME_S:g}] s"
WEIGHT_RULE = f"must be in [{1 / limits.MAX_WEIGHT:g}, {limits.MAX_WEIGHT:g}]"
STEPS_RULE = f"must be 0 or in [{limits.MIN_STEPS:g}, {limits.MAX_STEPS:g}]"
COST_RULE = (
    f"must be 0 or in [{1 / limits.MAX_COST_PER_HOUR:g}, {limits.MAX_COST_PER_HOUR:g}] "
    "$ per device-hour"
)


def within(x: Any, lo: float, hi: float) -> BoolArray:
    """Finite and in [lo, hi], elementwise."""
    a = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.asarray(np.isfinite(a) & (a >= lo) & (a <= hi))


def rate_ok(x: Any) -> BoolArray:
    """A throughput or goodput: 0 or in [MIN_RATE, MAX_RATE] (steps/s)."""
    a = np.asarray(x, dtype=np.float64)
    return np.asarray((a == 0) | within(a, limits.MIN_RATE, limits.MAX_RATE))


def time_ok(x: Any) -> BoolArray:
    """An absolute time: finite, |x| <= MAX_TIME_S."""
    return within(x, -limits.MAX_TIME_S, limits.MAX_TIME_S)


def duration_ok(x: Any) -> BoolArray:
    """A duration: in [0, MAX_TIME_S]."""
    return within(x, 0.0, limits.MAX_TIME_S)


def weight_ok(x: Any) -> BoolArray:
    """A priority or tenant weight: in [1/MAX_WEIGHT, MAX_WEIGHT]."""
    return within(x, 1 / limits.MAX_WEIGHT, limits.MAX_WEIGHT)


def steps_ok(x: Any) -> BoolArray:
    """A step count: 0 or in [MIN_STEPS, MAX_STEPS]."""
    a = np.asarray(x, dtype=np.float64)
    return np.asarray((a == 0) | within(a, limits.MIN_STEPS, limits.MAX_STEPS))


def cost_ok(x: Any) -> BoolArray:
    """A price per device-hour: 0 or in [1/MAX_COST_PER_HOUR, MAX_COST_PER_HOUR]."""
    a = np.asarray(x, dtype=np.float64)
    return np.asarray(
        (a == 0) | within(a, 1 / limits.MAX_COST_PER_HOUR, limits.MAX_COST_PER_HOUR)
    )


def flagged(
    bad: BoolArray, field: Callable[[int], str], describe: Callable[[int], str]
) -> list[Violation]:
    """One violation per True entry of `bad` (only those rows cost Python work)."""
    return [Violation(field(int(i)), describe(int(i))) for i in np.flatnonzero(bad)]


def cells_flagged(
    bad: BoolArray, field: Callable[[int, int], str], describe: Callable[[int, int], str]
) -> list[Violation]:
    """One violation per True cell of a 2-D `bad`."""
    rows, cols = np.nonzero(bad)
    return [Violation(field(int(i), int(j)), describe(int(i), int(j)))
            for i, j in zip(rows.tolist(), cols.tolist(), strict=True)]


def duplicates(names: Sequence[str], field: Callable[[int], str], what: str) -> list[Violation]:
    """Empty names and repeats of an earlier name."""
    if len(set(names)) == len(names) and all(names):  # the usual case, without a Python loop
        return []
    out: list[Violation] = []
    first: dict[str, int] = {}
    for idx, name in enumerate(names):
        if not name:
            out.append(Violation(field(idx), "must be non-empty"))
        elif name in first:
            out.append(Violation(field(idx), f"duplicate {what} {echo(name)} "
                                             f"(first at [{first[name]}])"))
        else:
            first[name] = idx
    return out


def cluster_violations(cluster: Cluster) -> list[Violation]:
    """Types and counts within bounds, costs valid, at least one device, node sizes."""
    path = "snapshot.cluster.accelerator_types"
    n = cluster.num_types
    out: list[Violation] = []
    if n == 0:
        out.append(Violation(path, "must list at least one accelerator type"))
    elif n > limits.MAX_ACCELERATOR_TYPES:
        out.append(Violation(path, f"{n} types is more than {limits.MAX_ACCELERATOR_TYPES}"))
    count = cluster.count
    bad_count = (count < 0) | (count > limits.MAX_DEVICES_PER_TYPE)
    out += flagged(
        bad_count, lambda j: f"{path}[{j}].count",
        lambda j: f"must be in [0, {limits.MAX_DEVICES_PER_TYPE}], got {count[j]}",
    )
    total = int(np.clip(count, 0, limits.MAX_DEVICES_PER_TYPE).sum())
    if n and total == 0:
        out.append(Violation("snapshot.cluster", "empty cluster: no accelerator devices"))
    elif total > limits.MAX_DEVICES and not bad_count.any():
        out.append(Violation(path, f"{total} devices in all is more than {limits.MAX_DEVICES}"))
    cost = cluster.cost_per_hour
    out += flagged(~cost_ok(cost), lambda j: f"{path}[{j}].cost_per_hour",
                   lambda j: f"{COST_RULE}, got {cost[j]}")
    nodes = "snapshot.cluster.nodes"
    if len(cluster.node_names) > limits.MAX_NODES:
        out.append(Violation(nodes, f"{len(cluster.node_names)} nodes is more than "
                                    f"{limits.MAX_NODES}"))
    devices = cluster.node_devices
    out += flagged(
        (devices < 0) | (devices > limits.MAX_DEVICES_PER_TYPE),
        lambda k: f"{nodes}[{k}].devices",
        lambda k: f"must be in [0, {limits.MAX_DEVICES_PER_TYPE}], got {devices[k]}",
    )
    return out


_COLUMN_OF = {"id": "ids", "progress.steps_done": "steps_done",
              "progress.total_steps": "total_steps"}
_COLUMNS = frozenset({"ids", "scale_factor", "priority_weight", "tenant", "arrival_time_s",
                      "steps_done", "total_steps", "deadline_s", "restart_penalty_s",
                      "job_type"})
"""The `JobColumns` fields with one entry per job."""
_JOB_ROW = re.compile(r"snapshot\.jobs\[(\d+)\]")
_JOB_COLUMN = re.compile(r"snapshot\.job_columns\.(\w+)\[(\d+)")


@dataclass(frozen=True)
class JobPaths:
    """The field path of each job's entries: the first `rows` jobs are `snapshot.jobs[i]`
    messages, the others entries of the `snapshot.job_columns` arrays."""

    rows: int
    column_types: tuple[str, ...] = ()
    """`JobColumns.throughput_types`: the throughput columns of the columnar jobs."""
    type_names: tuple[str, ...] = ()
    """The cluster's types (the model's columns)."""

    def field(self, i: int, name: str) -> str:
        """Job i's field `name` (a path below `Job`, e.g. "progress.total_steps"); for a
        columnar job, its entry in that column, or its id when the columns lack the field."""
        if i < self.rows:
            return f"snapshot.jobs[{i}].{name}"
        k, width = i - self.rows, len(self.column_types)
        if name == "throughput":
            return f"snapshot.job_columns.throughput[{k * width}:{(k + 1) * width}]"
        column = _COLUMN_OF.get(name, name)
        return f"snapshot.job_columns.{column if column in _COLUMNS else 'ids'}[{k}]"

    def cell(self, i: int, j: int) -> str:
        """Job i's throughput on the cluster's type j."""
        name = self.type_names[j]
        if i < self.rows:
            return f"snapshot.jobs[{i}].throughput{key(name)}"
        flat = (i - self.rows) * len(self.column_types) + self.column_types.index(name)
        return f"snapshot.job_columns.throughput[{flat}]"

    def job_of(self, path: str) -> int | None:
        """The index of the job a field path names, None when it names none."""
        match = _JOB_ROW.match(path)
        if match:
            return int(match.group(1))
        match = _JOB_COLUMN.match(path)
        if not match or match.group(1) == "throughput_types":
            return None
        k = int(match.group(2))
        if match.group(1) == "throughput":
            k //= max(len(self.column_types), 1)
        return self.rows + k


ROW_PATHS = JobPaths(rows=1 << 62)
"""Every job a `snapshot.jobs` message (make_problem, tests)."""


def jobs_violations(jobs: Jobs, cluster: Cluster, paths: JobPaths | None = None
                    ) -> list[Violation]:
    """Ids, sizes and the ranges of the main per-job arrays (throughput, scale factor,
    weight, arrival, progress, deadline, restart penalty)."""
    m, n = jobs.num_jobs, cluster.num_types
    at = paths or replace(ROW_PATHS, type_names=cluster.type_names)
    out: list[Violation] = []
    if m > limits.MAX_JOBS:
        out.append(Violation("snapshot.jobs", f"{m} jobs is more than {limits.MAX_JOBS}"))
    if m * n > limits.MAX_JOB_TYPE_CELLS:
        out.append(Violation("snapshot.jobs", f"{m} jobs x {n} accelerator types is more than "
                                              f"{limits.MAX_JOB_TYPE_CELLS} cells"))
    out += duplicates(jobs.ids, lambda i: at.field(i, "id"), "job id")
    thr = jobs.throughput
    out += cells_flagged(~rate_ok(thr), at.cell,
                         lambda i, j: f"{RATE_RULE} steps/s, got {thr[i, j]}")
    s = jobs.scale_factor
    largest = int(cluster.count.max()) if n else 0
    out += flagged(s < 1, lambda i: at.field(i, "scale_factor"),
                   lambda i: f"must be >= 1, got {s[i]}")
    out += flagged(
        (s >= 1) & (s > max(largest, 1)) if largest > 0 else np.zeros(m, bool),
        lambda i: at.field(i, "scale_factor"),
        lambda i: f"{s[i]} devices is more than the cluster can ever give (the largest type "
                  f"has {largest})",
    )
    w = jobs.priority_weight
    out += flagged(~weight_ok(w), lambda i: at.field(i, "priority_weight"),
                   lambda i: f"{WEIGHT_RULE}, got {w[i]}")
    a = jobs.arrival_time_s
    out += flagged(~time_ok(a), lambda i: at.field(i, "arrival_time_s"),
                   lambda i: f"{TIME_RULE}, got {a[i]}")
    done, total = jobs.steps_done, jobs.total_steps
    done_ok, total_ok = steps_ok(done), steps_ok(total)
    out += flagged(~done_ok, lambda i: at.field(i, "progress.steps_done"),
                   lambda i: f"{STEPS_RULE}, got {done[i]}")
    out += flagged(done_ok & ~total_ok, lambda i: at.field(i, "progress.total_steps"),
                   lambda i: f"{STEPS_RULE}, got {total[i]}")
    out += flagged(
        done_ok & total_ok & (total > 0) & (total < done),
        lambda i: at.field(i, "progress.total_steps"),
        lambda i: f"{total[i]} is less than steps_done {done[i]}",
    )
    deadline = jobs.deadline_s
    out += flagged(~np.isnan(deadline) & ~time_ok(deadline), lambda i: at.field(i, "deadline_s"),
                   lambda i: f"{TIME_RULE}, got {deadline[i]}")
    delta = jobs.restart_penalty_s
    out += flagged(~duration_ok(delta), lambda i: at.field(i, "restart_penalty_s"),
                   lambda i: f"{DURATION_RULE}, got {delta[i]}")
    return out


def snapshot_violations(
    cluster: Cluster, jobs: Jobs, time_s: float = 0.0, round_duration_s: float = 0.0,
    paths: JobPaths | None = None,
) -> list[Violation]:
    """Every violation of the cluster, the jobs' main arrays and the snapshot's scalars."""
    out = cluster_violations(cluster)
    out += jobs_violations(jobs, cluster, paths)
    if not time_ok(time_s):
        out.append(Violation("snapshot.time_s", f"{TIME_RULE}, got {time_s}"))
    if not duration_ok(round_duration_s):
        out.append(Violation("snapshot.round_duration_s",
                             f"{DURATION_RULE}, got {round_duration_s}"))
    return out


def problem_violations(problem: Problem) -> list[Violation]:
    """`snapshot_violations` of a problem."""
    return snapshot_violations(problem.cluster, problem.jobs, problem.time_s,
                               problem.round_duration_s)


def checked(problem: Problem) -> Problem:
    """`problem`, or ValidationError listing every violation of `problem_violations`."""
    violations = problem_violations(problem)
    if violations:
        raise ValidationError(violations)
    return problem


def make_problem(
    type_names: list[str] | tuple[str, ...],
    count: list[int] | IntArray,
    throughput: list[list[float]] | FloatArray,
    scale_factor: list[int] | IntArray | None = None,
    priority_weight: list[float] | FloatArray | None = None,
    ids: list[str] | None = None,
) -> Problem:
    """A complete, validated problem from its main arrays (every other field at its default),
    for tests, benchmarks and the simulator. Raises `ValidationError` (with the field paths a
    snapshot would get) for anything conversion would reject."""
    thr = np.asarray(throughput, dtype=np.float64)
    n = len(type_names)
    thr = thr.reshape(-1, n) if thr.size == 0 else thr
    m = thr.shape[0]
    jobs = Jobs.default(m, n)
    jobs = replace(
        jobs,
        ids=tuple(ids) if ids is not None else jobs.ids,
        throughput=thr,
        scale_factor=(
            jobs.scale_factor if scale_factor is None else np.asarray(scale_factor, np.int64)
        ),
        priority_weight=(
            jobs.priority_weight if priority_weight is None
            else np.asarray(priority_weight, np.float64)
        ),
    )
    return checked(
        Problem(
            cluster=Cluster(
                type_names=tuple(type_names),
                count=np.asarray(count, np.int64),
                cost_per_hour=np.ones(n),
            ),
            jobs=jobs,
            history=History.default(m, n),
        )
    )
