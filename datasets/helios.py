"""SenseTime Helios `cluster_log.csv` (SC 2021; CC-BY-4.0; T3.5, docs/datasets.md).

Columns `job_id, user, vc, gpu_num, cpu_num, node_num, state, submit_time, start_time,
end_time, duration, queue` (times wall-clock strings, duration/queue in s). Other columns
(e.g. `jobname`) are ignored with a warning. Arrival = submit_time - the earliest submit
time (`origin_s`); duration = `duration`, or end - start when that cell is empty.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from apportion.datasets.columns import DelimitedReader, Field, OrderCheck, standard_checks
from apportion.datasets.errors import ReadReport
from apportion.datasets.table import JobTable, TableBuilder

COLUMNS = (
    "job_id",
    "user",
    "vc",
    "gpu_num",
    "cpu_num",
    "node_num",
    "state",
    "submit_time",
    "start_time",
    "end_time",
    "duration",
    "queue",
)
FIELDS = (
    Field("job_id", "str"),
    Field("user", "str", required=False),
    Field("vc", "str"),
    Field("gpu_num", "float"),
    Field("cpu_num", "opt_float", required=False),
    Field("node_num", "opt_float", required=False),
    Field("state", "str", required=False),
    Field("submit_time", "time"),
    Field("start_time", "time", required=False),
    Field("end_time", "time", required=False),
    Field("duration", "opt_float", required=False),
    Field("queue", "opt_float", required=False),
)


def read_helios(
    path: str | Path, *, skip_bad: bool = False, block_chars: int = 8 << 20
) -> JobTable:
    """Read a Helios-format cluster log in bounded memory (block by block)."""
    report = ReadReport(str(path))
    reader = DelimitedReader(
        path, FIELDS, skip_bad=skip_bad, report=report, block_chars=block_chars
    )
    builder = TableBuilder()
    order = OrderCheck("submit_time")
    for chunk in reader:
        lines = chunk["_line"]
        n = len(lines)
        nan = np.full(n, np.nan)
        start = chunk.get("start_time", nan)
        duration = chunk.get("duration", nan)
        if "end_time" in chunk:
            duration = np.where(np.isnan(duration), chunk["end_time"] - start, duration)
        standard_checks(
            report,
            lines,
            gpus=chunk["gpu_num"],
            duration=duration,
            arrival=chunk["submit_time"],
            order=order,
            gpus_column="gpu_num",
        )
        builder.add(
            chunk["job_id"],
            {
                "arrival_s": chunk["submit_time"],
                "start_s": start,
                "duration_s": duration,
                "gpus": chunk["gpu_num"],
                "cpus": chunk.get("cpu_num"),
                "tenant": chunk["vc"],
                "user": chunk.get("user"),
                "status": chunk.get("state"),
            },
        )
    table = builder.build(source="helios", report=report)
    report.rows_kept = len(table)
    return rebase(table)


def rebase(table: JobTable) -> JobTable:
    """Shift arrival/start so that the earliest arrival is 0 (`origin_s` keeps the shift)."""
    finite = table.arrival_s[np.isfinite(table.arrival_s)]
    if len(finite) == 0:
        return table
    origin = float(finite.min())
    table.arrival_s[:] -= origin
    table.start_s[:] -= origin
    object.__setattr__(table, "origin_s", table.origin_s + origin)
    return table


def _stamp(origin: float, seconds: float) -> str:
    if not np.isfinite(seconds):
        return ""
    return datetime.fromtimestamp(origin + seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def write_helios(table: JobTable, path: str | Path) -> None:
    """Write a table in the Helios cluster_log format (whole seconds)."""
    cols = {name: table.column(name) for name in ("tenant", "user", "status")}
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(",".join(COLUMNS) + "\n")
        for k in range(len(table)):
            arrival, start, dur = table.arrival_s[k], table.start_s[k], table.duration_s[k]
            end = start + dur if np.isfinite(start) and np.isfinite(dur) else np.nan
            queue = start - arrival if np.isfinite(start) else np.nan
            fh.write(
                ",".join(
                    [
                        str(table.id[k]),
                        str(cols["user"][k]),
                        str(cols["tenant"][k]),
                        _num(table.gpus[k]),
                        _num(table.cpus[k]),
                        "1",
                        str(cols["status"][k]),
                        _stamp(table.origin_s, arrival),
                        _stamp(table.origin_s, start),
                        _stamp(table.origin_s, end),
                        _num(dur),
                        _num(queue),
                    ]
                )
                + "\n"
            )


def _num(x: float) -> str:
    if not np.isfinite(x):
        return ""
    return str(int(x)) if float(x).is_integer() else repr(float(x))
