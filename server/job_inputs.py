"""The jobs' main columns from either form of the wire: `Snapshot.jobs` (one `Job` message per
job) and `Snapshot.job_columns` (parallel arrays).

Both readers only gather: map keys and column lengths are checked as they are read, value
ranges are judged afterwards as whole columns by `apportion.solver.validation`, with the field
paths of `JobPaths` (`snapshot.jobs[3].priority_weight` or
`snapshot.job_columns.priority_weight[3]`). Rows are read in one pass touching each set field
once; columns are numpy arrays of the repeated fields.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from apportion.server.packed_fields import read_packed
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


def read_rows(
    jobs: Sequence[snapshot_pb.Job], cluster: Cluster, violations: list[Violation]
) -> MainColumns:
    """The main columns of `Snapshot.jobs`. Optional fields are asked `HasField` only when
    their value is the default (an explicit 0 is kept, to be judged; unset is the default)."""
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
    for i, job in enumerate(jobs):
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
                rows.append(i)
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


def read_jobs(
    msg: snapshot_pb.Snapshot, cluster: Cluster, violations: list[Violation]
) -> tuple[MainColumns, JobPaths]:
    """Every job's main columns (the `jobs` entries, then the `job_columns` ids) and their
    field paths."""
    rows = read_rows(msg.jobs, cluster, violations)
    if not msg.HasField("job_columns"):
        return rows, JobPaths(len(msg.jobs), (), cluster.type_names)
    columns = read_columns(msg.job_columns, cluster, violations)
    paths = JobPaths(len(msg.jobs), tuple(msg.job_columns.throughput_types), cluster.type_names)
    return rows.concatenate(columns), paths
