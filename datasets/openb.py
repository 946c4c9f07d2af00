"""Alibaba 2023 GPU "openb" traces (ATC 2023 FGD; no licence file: cite the paper).

* pods (`openb_pod_list_*.csv`): `name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec,
  qos, pod_phase, creation_time, deletion_time, scheduled_time` (times s from trace start).
  Arrival = creation_time; start = scheduled_time; duration = deletion - creation;
  GPUs = num_gpu, x gpu_milli/1000 for a fractional single-GPU pod; gpu_type = gpu_spec
  (allowed types, "|"-separated; "" = any); CPUs = cpu_milli/1000; memory GiB = MiB/1024.
* nodes (`openb_node_list_*.csv`): `sn, cpu_milli, memory_mib, gpu, model` -> a `ClusterSpec`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from apportion.datasets.cluster import ClusterSpec, NodeSpec
from apportion.datasets.columns import DelimitedReader, Field, OrderCheck, standard_checks
from apportion.datasets.errors import ReadReport
from apportion.datasets.helios import _num
from apportion.datasets.table import JobTable, TableBuilder

POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
POD_FIELDS = (
    Field("name", "str"),
    Field("cpu_milli", "opt_float", required=False),
    Field("memory_mib", "opt_float", required=False),
    Field("num_gpu", "float"),
    Field("gpu_milli", "opt_float", required=False),
    Field("gpu_spec", "str", required=False),
    Field("qos", "str", required=False),
    Field("pod_phase", "str", required=False),
    Field("creation_time", "float"),
    Field("deletion_time", "opt_float", required=False),
    Field("scheduled_time", "opt_float", required=False),
)
NODE_FIELDS = (
    Field("sn", "str"),
    Field("cpu_milli", "opt_float", required=False),
    Field("memory_mib", "opt_float", required=False),
    Field("gpu", "float"),
    Field("model", "str"),
)


def read_openb_pods(path: str | Path, *, skip_bad: bool = False) -> JobTable:
    report = ReadReport(str(path))
    builder = TableBuilder()
    order = OrderCheck("creation_time")
    for chunk in DelimitedReader(path, POD_FIELDS, skip_bad=skip_bad, report=report):
        n = len(chunk["_line"])
        nan = np.full(n, np.nan)
        num = chunk["num_gpu"]
        milli = chunk.get("gpu_milli", nan)
        fractional = (num == 1) & (milli > 0) & (milli < 1000)
        gpus = np.where(fractional, milli / 1000.0, num)
        arrival = chunk["creation_time"]
        duration = chunk.get("deletion_time", nan) - arrival
        standard_checks(
            report,
            chunk["_line"],
            gpus=gpus,
            duration=duration,
            arrival=arrival,
            order=order,
            gpus_column="num_gpu",
            duration_column="deletion_time",
        )
        builder.add(
            chunk["name"],
            {
                "arrival_s": arrival,
                "start_s": chunk.get("scheduled_time"),
                "duration_s": duration,
                "gpus": gpus,
                "cpus": chunk.get("cpu_milli", nan) / 1000.0,
                "memory_gib": chunk.get("memory_mib", nan) / 1024.0,
                "gpu_type": chunk.get("gpu_spec"),
                "status": chunk.get("pod_phase"),
            },
        )
    table = builder.build(source="openb", report=report)
    report.rows_kept = len(table)
    return table


def write_openb_pods(table: JobTable, path: str | Path) -> None:
    spec, status = table.column("gpu_type"), table.column("status")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(",".join(POD_COLUMNS) + "\n")
        for k in range(len(table)):
            g = table.gpus[k]
            num, milli = (1, round(g * 1000)) if 0 < g < 1 else (int(g), 1000 if g > 0 else 0)
            a = table.arrival_s[k]
            fh.write(
                f"{table.id[k]},{_num(table.cpus[k] * 1000)},{_num(table.memory_gib[k] * 1024)},"
                f"{num},{milli},{spec[k]},LS,{status[k]},{_num(a)},{_num(a + table.duration_s[k])},"
                f"{_num(table.start_s[k])}\n"
            )


def read_openb_nodes(path: str | Path, *, skip_bad: bool = False) -> ClusterSpec:
    """Nodes with at least one GPU, grouped by GPU model (CPU-only nodes are counted in the
    report's `dropped`)."""
    report = ReadReport(str(path))
    nodes: list[NodeSpec] = []
    for chunk in DelimitedReader(path, NODE_FIELDS, skip_bad=skip_bad, report=report):
        n = len(chunk["_line"])
        cpus = chunk.get("cpu_milli", np.full(n, np.nan)) / 1000.0
        mem = chunk.get("memory_mib", np.full(n, np.nan)) / 1024.0
        for k in range(n):
            gpus = int(chunk["gpu"][k])
            if gpus <= 0:
                report.drop("node without GPUs")
                continue
            nodes.append(
                NodeSpec(
                    str(chunk["sn"][k]),
                    str(chunk["model"][k]),
                    gpus,
                    float(np.nan_to_num(cpus[k])),
                    float(np.nan_to_num(mem[k])),
                )
            )
    report.rows_kept = len(nodes)
    return ClusterSpec.from_nodes(nodes, report=report)
