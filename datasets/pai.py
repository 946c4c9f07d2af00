"""Alibaba PAI 2020 GPU trace (NSDI 2022; CC-BY-4.0; T3.5 and T6, docs/datasets.md).

Headerless CSV tables; column names from the trace's `*.header` files:
* job:  `job_name, inst_id, user, status, start_time, end_time` (s, shifted; start = submit)
* task: `job_name, task_name, inst_num, status, start_time, end_time, plan_cpu, plan_mem,
  plan_gpu, gpu_type` (`plan_cpu` % of a core, `plan_mem` GB, `plan_gpu` % of a GPU, each
  *per instance*).

* group_tag (optional): `inst_id, user, gpu_type_spec, group, workload`, joined on the job's
  `inst_id` (one per job).

A job's GPUs = sum over its tasks of `inst_num x plan_gpu / 100`, CPUs likewise from
`plan_cpu`, memory from `plan_mem`; its GPU type is the type of its task with the most GPUs.
Arrival = job `start_time` - the earliest (`origin_s`); duration = end - start.
Jobs without tasks get GPU count 0 (reported as an anomaly).

With the group_tag table (T6, docs/datasets.md step 1, "job x task (x group_tag)"): a non-empty
`gpu_type_spec` (the type the user required; one of the task table's types) replaces the GPU
type, and a non-empty `workload` (the trace's application tag, e.g. bert, ctr, graphlearn;
about 9% of jobs) becomes the job type. `group` (a tag of jobs with similar scripts, inputs
and parameters, i.e. repeated runs) and the table's `user` (the job table's) are not read: the
job table has no column for a repetition group and the tenant stays the job's user.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from apportion.datasets.columns import DelimitedReader, Field, OrderCheck, standard_checks
from apportion.datasets.errors import ReadReport
from apportion.datasets.helios import _num, rebase
from apportion.datasets.table import JobTable, TableBuilder

JOB_HEADER = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
TASK_HEADER = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)
GROUP_TAG_HEADER = ("inst_id", "user", "gpu_type_spec", "group", "workload")
JOB_FIELDS = (
    Field("job_name", "str"),
    Field("inst_id", "str"),
    Field("user", "str"),
    Field("status", "str"),
    Field("start_time", "opt_float"),
    Field("end_time", "opt_float"),
)
TASK_FIELDS = (
    Field("job_name", "str"),
    Field("inst_num", "opt_float"),
    Field("plan_cpu", "opt_float"),
    Field("plan_mem", "opt_float"),
    Field("plan_gpu", "opt_float"),
    Field("gpu_type", "str"),
)
GROUP_TAG_FIELDS = (
    Field("inst_id", "str"),
    Field("gpu_type_spec", "str"),
    Field("workload", "str"),
)


def _aggregate_tasks(
    path: str | Path, skip_bad: bool, report: ReadReport
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    names, gpus, cpus, mem, types = [], [], [], [], []
    for chunk in DelimitedReader(
        path, TASK_FIELDS, header=TASK_HEADER, skip_bad=skip_bad, report=report
    ):
        inst = np.nan_to_num(chunk["inst_num"], nan=1.0)
        names.append(chunk["job_name"])
        gpus.append(inst * np.nan_to_num(chunk["plan_gpu"]) / 100.0)
        cpus.append(inst * np.nan_to_num(chunk["plan_cpu"]) / 100.0)
        mem.append(inst * np.nan_to_num(chunk["plan_mem"]))
        types.append(chunk["gpu_type"])
    if not names:
        empty = np.zeros(0)
        return np.zeros(0, dtype="U1"), empty, empty, empty, np.zeros(0, dtype="U1")
    all_names = np.concatenate(names)
    all_gpus = np.concatenate(gpus)
    uniq, inverse = np.unique(all_names, return_inverse=True)
    inverse = inverse.ravel()
    n = len(uniq)
    job_gpus = np.bincount(inverse, weights=all_gpus, minlength=n)
    job_cpus = np.bincount(inverse, weights=np.concatenate(cpus), minlength=n)
    job_mem = np.bincount(inverse, weights=np.concatenate(mem), minlength=n)
    order = np.lexsort((-all_gpus, inverse))  # per job, the task with the most GPUs first
    first = order[np.r_[True, inverse[order][1:] != inverse[order][:-1]]]
    job_type = np.concatenate(types)[first]
    return uniq, job_gpus, job_cpus, job_mem, job_type


def _read_group_tags(
    path: str | Path, skip_bad: bool, report: ReadReport
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted unique `inst_id`s with their `gpu_type_spec` and `workload` (first row wins)."""
    ids, specs, workloads = [], [], []
    for chunk in DelimitedReader(
        path, GROUP_TAG_FIELDS, header=GROUP_TAG_HEADER, skip_bad=skip_bad, report=report
    ):
        ids.append(chunk["inst_id"])
        specs.append(chunk["gpu_type_spec"])
        workloads.append(chunk["workload"])
    if not ids:
        empty = np.zeros(0, dtype="U1")
        return empty, empty, empty
    uniq, first = np.unique(np.concatenate(ids), return_index=True)
    return uniq, np.concatenate(specs)[first], np.concatenate(workloads)[first]


def _lookup(keys: np.ndarray, uniq: np.ndarray, values: np.ndarray) -> np.ndarray:
    """values[uniq == key] per key ("" when absent); `uniq` sorted."""
    if not len(uniq):
        return np.full(len(keys), "", dtype="U1")
    pos = np.minimum(np.searchsorted(uniq, keys), len(uniq) - 1)
    return np.where(uniq[pos] == keys, values[pos], "")


def read_pai(
    job_path: str | Path,
    task_path: str | Path,
    *,
    group_tag_path: str | Path | None = None,
    skip_bad: bool = False,
) -> JobTable:
    """Read the PAI job and task tables and join them (task table aggregated first); with
    `group_tag_path`, also the group_tag table (GPU type requirement, workload)."""
    report = ReadReport(str(job_path))
    task_report = ReadReport(str(task_path))
    uniq, t_gpus, t_cpus, t_mem, t_type = _aggregate_tasks(task_path, skip_bad, task_report)
    tag_report = ReadReport(str(group_tag_path or ""))
    tags = (
        _read_group_tags(group_tag_path, skip_bad, tag_report)
        if group_tag_path is not None
        else None
    )
    builder = TableBuilder()
    order = OrderCheck("start_time")
    for chunk in DelimitedReader(
        job_path, JOB_FIELDS, header=JOB_HEADER, skip_bad=skip_bad, report=report
    ):
        names = chunk["job_name"]
        pos = np.searchsorted(uniq, names)
        pos_c = np.minimum(pos, max(len(uniq) - 1, 0))
        found = (
            (pos < len(uniq)) & (uniq[pos_c] == names) if len(uniq) else np.zeros(len(names), bool)
        )
        gpus = np.where(found, t_gpus[pos_c] if len(uniq) else 0.0, 0.0)
        cpus = np.where(found, t_cpus[pos_c] if len(uniq) else np.nan, np.nan)
        mem = np.where(found, t_mem[pos_c] if len(uniq) else np.nan, np.nan)
        gtype = np.where(found, t_type[pos_c] if len(uniq) else "", "")
        job_type = None
        if tags is not None:
            spec = _lookup(chunk["inst_id"], tags[0], tags[1])
            gtype = np.where(spec != "", spec, gtype)
            job_type = _lookup(chunk["inst_id"], tags[0], tags[2])
        duration = chunk["end_time"] - chunk["start_time"]
        standard_checks(
            report,
            chunk["_line"],
            gpus=gpus,
            duration=duration,
            arrival=chunk["start_time"],
            order=order,
            gpus_column="plan_gpu",
            duration_column="end_time",
        )
        builder.add(
            names,
            {
                "arrival_s": chunk["start_time"],
                "start_s": chunk["start_time"],
                "duration_s": duration,
                "gpus": gpus,
                "cpus": cpus,
                "memory_gib": mem,
                "user": chunk["user"],
                "tenant": chunk["user"],
                "status": chunk["status"],
                "gpu_type": gtype,
                "job_type": job_type,
            },
        )
    for other in (task_report, tag_report):
        report.skipped += other.skipped
        report.skipped_examples += other.skipped_examples[:5]
        report.warnings += other.warnings
    table = builder.build(source="pai", report=report)
    report.rows_kept = len(table)
    return rebase(table)


def write_pai(table: JobTable, job_path: str | Path, task_path: str | Path) -> None:
    """Write job + task tables (one task per job, one instance per GPU or one instance)."""
    user, status, gtype = (table.column(c) for c in ("user", "status", "gpu_type"))
    with (
        open(job_path, "w", encoding="utf-8") as jobs,
        open(task_path, "w", encoding="utf-8") as tasks,
    ):
        for k in range(len(table)):
            start = table.arrival_s[k] + table.origin_s
            end = start + table.duration_s[k]
            jobs.write(f"{table.id[k]},inst{k},{user[k]},{status[k]},{_num(start)},{_num(end)}\n")
            gpus = table.gpus[k]
            inst = int(gpus) if gpus >= 1 and float(gpus).is_integer() else 1
            per = 100.0 * gpus / inst
            cpu = 100.0 * table.cpus[k] / inst if np.isfinite(table.cpus[k]) else np.nan
            mem = table.memory_gib[k] / inst if np.isfinite(table.memory_gib[k]) else np.nan
            tasks.write(
                f"{table.id[k]},worker,{inst},{status[k]},{_num(start)},{_num(end)},"
                f"{_num(cpu)},{_num(mem)},{_num(per)},{gtype[k]}\n"
            )
