"""Gavel (`.trace`, MIT) and Shockwave (12-field, MIT) job traces: tab-separated, no header.

Field layouts (T3.1 and T3.2, docs/datasets.md), chosen per line by its field count:
* 7 (older Gavel): job_type, command, num_steps_arg, needs_data_dir, total_steps,
  arrival_time, scale_factor
* 10 (Gavel): job_type, command, working_dir, num_steps_arg, needs_data_dir, total_steps,
  scale_factor, priority_weight, SLO, arrival_time (SLO -1 = none)
* 12 (Shockwave): job_type, command, working_dir, num_steps_arg, needs_data_dir, total_steps,
  scale_factor, mode, priority_weight, SLO, duration, arrival_time

Job ids are the 0-based line index (as Gavel numbers them). GPUs = scale_factor.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from apportion.datasets.columns import open_text, standard_checks
from apportion.datasets.errors import ReadReport, RowError, TraceFormatError
from apportion.datasets.helios import _num
from apportion.datasets.table import JobTable

LAYOUTS: dict[int, tuple[str, ...]] = {
    7: (
        "job_type",
        "command",
        "num_steps_arg",
        "needs_data_dir",
        "total_steps",
        "arrival_time",
        "scale_factor",
    ),
    10: (
        "job_type",
        "command",
        "working_dir",
        "num_steps_arg",
        "needs_data_dir",
        "total_steps",
        "scale_factor",
        "priority_weight",
        "SLO",
        "arrival_time",
    ),
    12: (
        "job_type",
        "command",
        "working_dir",
        "num_steps_arg",
        "needs_data_dir",
        "total_steps",
        "scale_factor",
        "mode",
        "priority_weight",
        "SLO",
        "duration",
        "arrival_time",
    ),
}
NUMERIC = ("total_steps", "scale_factor", "priority_weight", "SLO", "duration", "arrival_time")


def read_gavel_trace(path: str | Path, *, skip_bad: bool = False) -> JobTable:
    """Read a Gavel or Shockwave trace (format detected per line)."""
    report = ReadReport(str(path))
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    with open_text(path) as fh:
        for lineno, raw in enumerate(fh, start=1):
            text = raw.rstrip("\r\n")
            if not text.strip():
                continue
            report.rows_read += 1
            cells = text.split("\t")
            layout = LAYOUTS.get(len(cells))
            error: RowError | None = None
            row: dict[str, Any] = {}
            if layout is None:
                error = RowError(
                    str(path),
                    lineno,
                    "",
                    f"expected 7, 10 or 12 tab-separated fields, got {len(cells)}",
                )
            else:
                for name, cell in zip(layout, cells, strict=True):
                    if name in NUMERIC:
                        try:
                            row[name] = float(cell)
                        except ValueError:
                            error = RowError(
                                str(path), lineno, name, f"cannot parse {cell!r} as a number"
                            )
                            break
                    else:
                        row[name] = cell
            if error is not None:
                if not skip_bad:
                    raise TraceFormatError(error.path, error.line, error.column, error.message)
                report.skip(error)
                continue
            rows.append(row)
            lines.append(lineno)
    ln = np.array(lines, dtype=np.int64)

    def col(name: str, default: float = math.nan) -> np.ndarray:
        return np.array([r.get(name, default) for r in rows], dtype=np.float64)

    slo = col("SLO")
    slo[slo < 0] = np.nan
    table = JobTable.from_columns(
        [str(k) for k in range(len(rows))],
        arrival_s=col("arrival_time"),
        gpus=col("scale_factor"),
        duration_s=col("duration"),
        total_steps=col("total_steps"),
        priority_weight=col("priority_weight"),
        slo_factor=slo,
        job_type=[r["job_type"] for r in rows],
        mode=[r.get("mode", "") for r in rows],
        source="shockwave" if rows and "mode" in rows[0] else "gavel",
        report=report,
    )
    standard_checks(
        report, ln, gpus=table.gpus, duration=table.duration_s, gpus_column="scale_factor"
    )
    report.rows_kept = len(table)
    return table


def write_gavel_trace(table: JobTable, path: str | Path, *, shockwave: bool = False) -> None:
    """Write the 10-field Gavel layout (or the 12-field Shockwave layout)."""
    job_type, mode = table.column("job_type"), table.column("mode")
    with open(path, "w", encoding="utf-8") as fh:
        for k in range(len(table)):
            weight = table.priority_weight[k] if np.isfinite(table.priority_weight[k]) else 1.0
            slo = table.slo_factor[k] if np.isfinite(table.slo_factor[k]) else -1.0
            head = [
                str(job_type[k]),
                "python3 train.py",
                "workdir",
                "--num_steps",
                "1",
                _num(table.total_steps[k]),
                _num(table.gpus[k]),
            ]
            if shockwave:
                tail = [
                    str(mode[k]) or "static",
                    _num(weight),
                    f"{slo:.6f}",
                    _num(table.duration_s[k]),
                    _num(table.arrival_s[k]),
                ]
            else:
                tail = [_num(weight), f"{slo:.6f}", _num(table.arrival_s[k])]
            fh.write("\t".join(head + tail) + "\n")
