"""The jobs' main columns from either form of the wire: `Snapshot.jobs` (one `Job` message per
job) and `Snapshot.job_columns` (parallel arrays).

Both readers only gather: map keys and column lengths are checked as they are read, value
ranges are judged afterwards as whole columns by `apportion.solver.validation`, with the field
paths of `JobPaths` (`snapshot.jobs[3].priority_weight` or
`snapshot.job_columns.priority_weight[3]`). Rows are decoded from their serialized bytes
(`apportion.server.job_wire`) except those the decoder leaves to their messages (read in one
pass touching each set field once, with the same columns and violations); columns are numpy
arrays of the repeated fields.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from apportion.server.job_wire import JobFields, JobSpans, WireJobs, all_jobs, job_spans
from apportion.server.packed_fields import read_packed
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.errors import Violation, echo, key, listing
from apportion.solver.model import DEFAULT_RESTART_PENALTY_S, Cluster, FloatArray, IntArray
from apportion.solver.validation import JobPaths
from apportion.v1 import snapshot_pb2 as snapshot_pb


@dataclass(frozen=True)
class MainColumns:
    """The per-job fields every form carries, as given (not yet judged)."""

    ids: list[str]
    throughput: FloatArray
    """(m, n) over the cluster's types."""
    scale_factor: IntArray
    priority_weight: FloatArray
    tenant: list[str]
    arrival_time_s: FloatArray
    steps_done: FloatArray
    total_steps: FloatArray
    deadline_s: FloatArray
    restart_penalty_s: FloatArray
    job_type: list[str]
    epochs_done: IntArray
    """As given (judged by `market_inputs.epoch_columns`); 0 for columnar jobs."""
    total_epochs: IntArray

    def concatenate(self, more: MainColumns) -> MainColumns:
        """These jobs followed by `more`."""
        values: dict[str, Any] = {}
        for item in fields(self):
            a, b = getattr(self, item.name), getattr(more, item.name)
            values[item.name] = a + b if isinstance(a, list) else np.concatenate([a, b])
        return MainColumns(**values)

    def with_rows(self, rows: list[int], given: MainColumns) -> MainColumns:
        """These jobs with rows `rows` replaced by the rows of `given`, in order."""
        values: dict[str, Any] = {}
        for item in fields(self):
            mine, theirs = getattr(self, item.name), getattr(given, item.name)
            if isinstance(mine, list):
                mine = list(mine)
                for row, value in zip(rows, theirs, strict=True):
                    mine[row] = value
            else:
                mine = mine.copy()
                mine[rows] = theirs
            values[item.name] = mine
        return MainColumns(**values)


def read_rows(
    jobs: Sequence[snapshot_pb.Job], cluster: Cluster, violations: list[Violation],
    wire: WireJobs | None = None,
) -> MainColumns:
    """The main columns of `Snapshot.jobs`: those `wire` decoded from the jobs' bytes, and the
    others (every job without `wire`) read from their messages."""
    if wire is None:
        return _read_messages(jobs, range(len(jobs)), cluster, violations)
    columns = _wire_columns(wire, cluster)
    if not wire.unread.size:
        return columns
    unread = wire.unread.tolist()
    return columns.with_rows(unread, _read_messages(jobs, unread, cluster, violations))


def _wire_columns(wire: WireJobs, cluster: Cluster) -> MainColumns:
    """The main columns of the jobs `wire` decoded (placeholders for its `unread` ones)."""
    m = wire.count
    throughput = np.zeros((m, cluster.num_types))
    job, column, value = wire.cells
    throughput[job, column] = value
    numbers, given = wire.numbers, wire.given
    optional = {name: np.where(given[name], numbers[name], _OPTIONAL_COLUMNS[name])
                for name in given}
    return MainColumns(
        wire.text["id"], throughput, optional["scale_factor"].astype(np.int64),
        optional["priority_weight"], wire.text["tenant"],
        numbers["arrival_time_s"].astype(np.float64), numbers["steps_done"].astype(np.float64),
        numbers["total_steps"].astype(np.float64), optional["deadline_s"],
        optional["restart_penalty_s"], wire.text["job_type"],
        numbers["epochs_done"].astype(np.int64), numbers["total_epochs"].astype(np.int64),
    )


def _read_messages(
    jobs: Sequence[snapshot_pb.Job], indices: Sequence[int], cluster: Cluster,
    violations: list[Violation],
) -> MainColumns:
    """The main columns of the jobs `indices` read from their messages. Optional fields are
    asked `HasField` only when their value is the default (an explicit 0 is kept, to be
    judged; unset is the default)."""
    whole = isinstance(indices, range) and indices == range(len(jobs))
    messages = jobs if whole else map(jobs.__getitem__, indices)
    type_index = {name: j for j, name in enumerate(cluster.type_names)}
    ids: list[str] = []
    scale: list[int] = []
    weight: list[float] = []
    tenant: list[str] = []
    arrival: list[float] = []
    done: list[float] = []
    total: list[float] = []
    deadline: list[float] = []
    penalty: list[float] = []
    job_type: list[str] = []
    epochs_done: list[int] = []
    total_epochs: list[int] = []
    rows: list[int] = []
    cols: list[int] = []
    values: list[float] = []
    for row, (i, job) in enumerate(zip(indices, messages, strict=True)):
        ids.append(job.id)
        s = job.scale_factor
        scale.append(s if s or job.HasField("scale_factor") else 1)
        w = job.priority_weight
        weight.append(w if w or job.HasField("priority_weight") else 1.0)
        tenant.append(job.tenant)
        arrival.append(job.arrival_time_s)
        progress = job.progress
        done.append(progress.steps_done)
        total.append(progress.total_steps)
        epochs_done.append(progress.epochs_done)
        total_epochs.append(progress.total_epochs)
        d = job.deadline_s
        deadline.append(d if d or job.HasField("deadline_s") else math.nan)
        r = job.restart_penalty_s
        penalty.append(r if r or job.HasField("restart_penalty_s") else DEFAULT_RESTART_PENALTY_S)
        job_type.append(job.job_type)
        thr = job.throughput
        for name in thr:
            j = type_index.get(name)
            if j is None:
                violations.append(Violation(
                    f"snapshot.jobs[{i}].throughput{key(name)}",
                    f"unknown accelerator type {echo(name)}; the cluster has "
                    f"{listing(cluster.type_names)}",
                ))
            else:
                rows.append(row)
                cols.append(j)
                values.append(thr[name])
    m = len(ids)
    throughput = np.zeros((m, cluster.num_types))
    throughput[rows, cols] = values
    return MainColumns(
        ids, throughput, np.array(scale, np.int64).reshape(m), np.array(weight).reshape(m),
        tenant, np.array(arrival).reshape(m), np.array(done).reshape(m),
        np.array(total).reshape(m), np.array(deadline).reshape(m), np.array(penalty).reshape(m),
        job_type, np.array(epochs_done, np.int64).reshape(m),
        np.array(total_epochs, np.int64).reshape(m),
    )


_OPTIONAL_COLUMNS: dict[str, float] = {
    "scale_factor": 1, "priority_weight": 1.0, "arrival_time_s": 0.0, "steps_done": 0.0,
    "total_steps": 0.0, "deadline_s": math.nan, "restart_penalty_s": DEFAULT_RESTART_PENALTY_S,
}


def read_columns(
    msg: snapshot_pb.JobColumns, cluster: Cluster, violations: list[Violation]
) -> MainColumns:
    """The main columns of `Snapshot.job_columns`: every column empty or of length m, the
    throughput types known and listed once, the throughput m x types."""
    p = "snapshot.job_columns"
    m = len(msg.ids)
    names = list(msg.throughput_types)
    type_index = {name: j for j, name in enumerate(cluster.type_names)}
    first: dict[str, int] = {}
    usable_columns: list[int] = []
    targets: list[int] = []
    for k, name in enumerate(names):
        if name not in type_index:
            violations.append(Violation(f"{p}.throughput_types[{k}]",
                                        f"unknown accelerator type {echo(name)}; the cluster "
                                        f"has {listing(cluster.type_names)}"))
        elif name in first:
            violations.append(Violation(f"{p}.throughput_types[{k}]",
                                        f"duplicate {echo(name)} (first at [{first[name]}])"))
        else:
            first[name] = k
            usable_columns.append(k)
            targets.append(type_index[name])
    numbers = read_packed(msg, ["throughput", *_OPTIONAL_COLUMNS])
    throughput = np.zeros((m, cluster.num_types))
    given = numbers["throughput"]
    if given.size != m * len(names):
        violations.append(Violation(f"{p}.throughput",
                                    f"has {given.size} entries; {m} jobs x {len(names)} "
                                    f"throughput_types need {m * len(names)}"))
    else:
        throughput[:, targets] = given.reshape(m, len(names))[:, usable_columns]
    numeric: dict[str, np.ndarray] = {}
    for name, default in _OPTIONAL_COLUMNS.items():
        column = numbers[name].astype(np.float64)
        if column.size not in (0, m):
            violations.append(Violation(f"{p}.{name}",
                                        f"has {column.size} entries; must be empty or {m}"))
            column = np.zeros(0)
        numeric[name] = column if column.size else np.full(m, default)
    text: dict[str, list[str]] = {}
    for name in ("tenant", "job_type"):
        column_text = list(getattr(msg, name))
        if len(column_text) not in (0, m):
            violations.append(Violation(f"{p}.{name}",
                                        f"has {len(column_text)} entries; must be empty or {m}"))
            column_text = []
        text[name] = column_text or [""] * m
    return MainColumns(
        list(msg.ids), throughput, numeric["scale_factor"].astype(np.int64),
        numeric["priority_weight"], text["tenant"], numeric["arrival_time_s"],
        numeric["steps_done"], numeric["total_steps"], numeric["deadline_s"],
        numeric["restart_penalty_s"], text["job_type"], np.zeros(m, np.int64),
        np.zeros(m, np.int64),
    )


DECODE_FROM_JOBS = 128
"""Fewer `Snapshot.jobs` entries are read from their messages: below about this many, that
costs less than the decoder's fixed cost (about 0.4 ms)."""


def read_jobs(
    msg: snapshot_pb.Snapshot, cluster: Cluster, violations: list[Violation],
    serialized: bytes | None = None, deadline: Deadline = NO_DEADLINE,
) -> tuple[MainColumns, JobPaths, JobFields, JobSpans | None]:
    """Every job's main columns (the `jobs` entries, then the `job_columns` ids), their field
    paths, which jobs may set which other fields and where the serialized `jobs` entries are
    (None when they were read from their messages). `serialized`: the `SolveRequest` bytes `msg`
    was parsed from (its jobs are decoded from them), or None (`msg` is serialized for
    it). Raises `DeadlineExpiredError` once `deadline` passes (read between blocks of jobs
    while they are decoded)."""
    jobs = msg.jobs
    spans = job_spans(msg, serialized) if len(jobs) >= DECODE_FROM_JOBS else None
    if spans is not None and spans.count == len(jobs):
        wire = WireJobs.decode_spans(spans, cluster.type_names, deadline)
        present = JobFields(jobs, wire.others, wire.unread, wire.other_records)
    else:  # few jobs, or bytes of another request: read the messages
        wire, present, spans = None, all_jobs(jobs), None
    rows = read_rows(jobs, cluster, violations, wire)
    if not msg.HasField("job_columns"):
        return rows, JobPaths(len(jobs), (), cluster.type_names), present, spans
    columns = read_columns(msg.job_columns, cluster, violations)
    paths = JobPaths(len(jobs), tuple(msg.job_columns.throughput_types), cluster.type_names)
    return rows.concatenate(columns), paths, present, spans
