"""Microsoft Philly traces (ATC 2019; CC-BY-4.0; T3.5 and T6, docs/datasets.md).

* `read_philly_csv`: the per-job CSV derivative (`sia_philly_jobs.csv`): `timestamp`
  (submit, wall clock), `duration` (s), `num_gpus`, `gpu_time`, `cluster` (the VC, used as
  tenant). The file has no job id: the id is the data-row index (line - 2).
* `read_philly_json`: the raw `cluster_job_log` (a JSON array of job objects, read one object
  at a time): arrival = `submitted_time`; GPUs = sum of len(gpus) over the last attempt's
  `detail`; duration = sum of (end - start) over the attempts; start = first attempt start.
  Jobs without an attempt are dropped and counted (the recipe's rule).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from apportion.datasets.columns import (
    DelimitedReader,
    Field,
    OrderCheck,
    open_text,
    standard_checks,
)
from apportion.datasets.errors import ReadReport, RowError, TraceFormatError
from apportion.datasets.helios import _num, _stamp, rebase
from apportion.datasets.table import JobTable, TableBuilder

CSV_FIELDS = (
    Field("timestamp", "time"),
    Field("duration", "opt_float"),
    Field("num_gpus", "float"),
    Field("gpu_time", "opt_float", required=False),
    Field("cluster", "str"),
)


def read_philly_csv(path: str | Path, *, skip_bad: bool = False) -> JobTable:
    report = ReadReport(str(path))
    builder = TableBuilder()
    order = OrderCheck("timestamp")
    for chunk in DelimitedReader(path, CSV_FIELDS, skip_bad=skip_bad, report=report):
        lines = chunk["_line"]
        # the derivative is not sorted by submission: count, but do not re-sort
        standard_checks(
            report,
            lines,
            gpus=chunk["num_gpus"],
            duration=chunk["duration"],
            arrival=chunk["timestamp"],
            order=order,
            gpus_column="num_gpus",
        )
        builder.add(
            (lines - 2).astype(str),
            {
                "arrival_s": chunk["timestamp"],
                "duration_s": chunk["duration"],
                "gpus": chunk["num_gpus"],
                "tenant": chunk["cluster"],
            },
        )
    table = builder.build(source="philly-csv", report=report)
    report.rows_kept = len(table)
    return rebase(table)


def write_philly_csv(table: JobTable, path: str | Path) -> None:
    tenant = table.column("tenant")
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write("timestamp,duration,num_gpus,gpu_time,cluster\n")
        for k in range(len(table)):
            gpu_time = table.gpus[k] * table.duration_s[k]
            fh.write(
                f"{_stamp(table.origin_s, table.arrival_s[k])},{_num(table.duration_s[k])},"
                f"{_num(table.gpus[k])},{_num(gpu_time)},{tenant[k]}\n"
            )


# --------------------------------------------------------------------------- raw JSON log


def iter_json_records(path: str | Path, block_chars: int = 1 << 20) -> Iterator[tuple[int, Any]]:
    """Yield (line, value) for each element of a top-level JSON array (or each value of a
    JSON-lines file), reading the file block by block."""
    decoder = json.JSONDecoder()
    with open_text(path) as fh:
        buf, pos, line, eof = "", 0, 1, False
        while True:
            # skip separators
            while True:
                while pos < len(buf) and buf[pos] in " \t\r\n,[]":
                    if buf[pos] == "\n":
                        line += 1
                    pos += 1
                if pos < len(buf) or eof:
                    break
                more = fh.read(block_chars)
                eof = not more
                buf, pos = buf[pos:] + more, 0
            if pos >= len(buf):
                return
            try:
                value, end = decoder.raw_decode(buf, pos)
            except json.JSONDecodeError as exc:
                if not eof:
                    more = fh.read(block_chars)
                    eof = not more
                    buf, pos = buf[pos:] + more, 0
                    continue
                raise TraceFormatError(
                    str(path), line + buf.count("\n", pos, exc.pos), "", f"invalid JSON: {exc.msg}"
                ) from None
            yield line, value
            line += buf.count("\n", pos, end)
            pos = end
            if pos > block_chars:
                buf, pos = buf[pos:], 0


def _time(text: Any, key: str) -> float:
    if text is None or text in ("None", ""):
        return math.nan
    if not isinstance(text, str):
        raise ValueError(f"{key}: expected a date-time string, got {text!r}")
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"cannot parse {text!r} as a date-time") from None
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()


def _philly_job(obj: Any) -> tuple[dict[str, Any] | None, str]:
    """Normalize one raw job; (None, reason) to drop it; raises KeyError/ValueError (with the
    key as args[0]) for malformed records."""
    if not isinstance(obj, dict):
        raise ValueError("", "expected a JSON object")
    for key in ("jobid", "submitted_time", "attempts"):
        if key not in obj:
            raise ValueError(key, "missing key")
    attempts = obj["attempts"]
    if not isinstance(attempts, list):
        raise ValueError("attempts", "expected a list")
    if not attempts:
        return None, "no attempt (the recipe skips these jobs)"
    try:
        arrival = _time(obj["submitted_time"], "submitted_time")
    except ValueError as exc:
        raise ValueError("submitted_time", str(exc)) from None
    duration, start, gpus = 0.0, math.nan, 0.0
    known = False
    for attempt in attempts:
        try:
            begin = _time(attempt.get("start_time"), "start_time")
            end = _time(attempt.get("end_time"), "end_time")
        except (AttributeError, ValueError) as exc:
            raise ValueError("attempts", str(exc)) from None
        if math.isnan(start):
            start = begin
        if not (math.isnan(begin) or math.isnan(end)):
            duration += end - begin
            known = True
        detail = attempt.get("detail", [])
        if not isinstance(detail, list):
            raise ValueError("attempts", "detail: expected a list")
        gpus = float(sum(len(d.get("gpus", [])) for d in detail))
    return {
        "id": str(obj["jobid"]),
        "arrival_s": arrival,
        "start_s": start,
        "duration_s": duration if known else math.nan,
        "gpus": gpus,
        "tenant": str(obj.get("vc", "")),
        "user": str(obj.get("user", "")),
        "status": str(obj.get("status", "")),
    }, ""


def read_philly_json(
    path: str | Path, *, skip_bad: bool = False, chunk_rows: int = 100_000
) -> JobTable:
    """Read the raw Philly job log (`cluster_job_log`, JSON)."""
    report = ReadReport(str(path))
    builder = TableBuilder()
    order = OrderCheck("submitted_time")
    rows: list[dict[str, Any]] = []
    lines: list[int] = []

    def flush() -> None:
        if not rows:
            return
        cols = {k: np.array([r[k] for r in rows]) for k in rows[0] if k != "id"}
        ln = np.array(lines, dtype=np.int64)
        standard_checks(
            report,
            ln,
            gpus=cols["gpus"],
            duration=cols["duration_s"],
            arrival=cols["arrival_s"],
            order=order,
            duration_column="attempts",
            gpus_column="attempts",
        )
        builder.add(np.array([r["id"] for r in rows], dtype=np.str_), cols)
        rows.clear()
        lines.clear()

    for line, obj in iter_json_records(path):
        report.rows_read += 1
        try:
            row, reason = _philly_job(obj)
        except ValueError as exc:
            column, message = exc.args if len(exc.args) == 2 else ("", str(exc))
            error = RowError(str(path), line, column, message)
            if not skip_bad:
                raise TraceFormatError(
                    error.path, error.line, error.column, error.message
                ) from None
            report.skip(error)
            continue
        if row is None:
            report.drop(reason)
            continue
        rows.append(row)
        lines.append(line)
        if len(rows) >= chunk_rows:
            flush()
    flush()
    table = builder.build(source="philly-json", report=report)
    report.rows_kept = len(table)
    return rebase(table)


def write_philly_json(table: JobTable, path: str | Path) -> None:
    """Write a raw-log-style JSON array (one attempt per job, GPUs on one machine per 8)."""
    tenant, user, status = (table.column(c) for c in ("tenant", "user", "status"))
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("[\n")
        for k in range(len(table)):
            start = table.start_s[k] if np.isfinite(table.start_s[k]) else table.arrival_s[k]
            gpus = int(table.gpus[k])
            detail = [
                {"ip": f"m{m}", "gpus": [f"gpu{g}" for g in range(min(8, gpus - 8 * m))]}
                for m in range((gpus + 7) // 8)
            ]
            attempt = {
                "start_time": _stamp(table.origin_s, start),
                "end_time": _stamp(table.origin_s, start + table.duration_s[k])
                if np.isfinite(table.duration_s[k])
                else "None",
                "detail": detail,
            }
            obj = {
                "status": str(status[k]),
                "vc": str(tenant[k]),
                "jobid": str(table.id[k]),
                "attempts": [attempt],
                "submitted_time": _stamp(table.origin_s, table.arrival_s[k]),
                "user": str(user[k]),
            }
            fh.write(json.dumps(obj) + (",\n" if k + 1 < len(table) else "\n"))
        fh.write("]\n")
