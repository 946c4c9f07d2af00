"""Chunked, bounded-memory reader for delimited text tables (CSV/TSV, with or without header).

Each block of about `block_chars` characters is parsed column-wise with numpy (fast path);
a block the fast path cannot take (quotes, ragged rows, an unparsable cell) is re-parsed
row by row with the `csv` module, which finds the exact line and column of every bad cell.
Rows must not contain embedded newlines inside quotes (none of the supported formats do).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
from numpy.typing import NDArray

from apportion.datasets.errors import ReadReport, RowError, TraceFormatError, TraceWarning

FloatArray = NDArray[np.float64]

Kind = Literal["str", "float", "opt_float", "time"]
"""str: kept as text; float: a number (required); opt_float: a number or empty (NaN);
time: a wall-clock ISO-8601 time or empty (NaN), converted to Unix seconds (naive = UTC)."""

MISSING = frozenset({"", "None", "none", "null", "NULL", "NaN", "nan", "NaT", "NA", "\\N"})
BLOCK_CHARS = 8 << 20


@dataclass(frozen=True)
class Field:
    name: str
    kind: Kind
    required: bool = True


Chunk = dict[str, NDArray[Any]]
"""Converted columns of one block, plus "_line": the 1-based line number of each row."""


def open_text(path: str | Path) -> IO[str]:
    """Open a text file, transparently decompressing `.gz`."""
    p = Path(path)
    if p.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(p, "rb"), encoding="utf-8", newline="")
    return open(p, encoding="utf-8", newline="")


def load_json(path: str | Path) -> Any:
    """A whole JSON document (`.gz` allowed); a syntax error names the file and line."""
    with open_text(path) as fh:
        try:
            return json.load(fh)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(str(path), exc.lineno, "", f"invalid JSON: {exc.msg}") from None


def _scalar(kind: Kind, text: str) -> Any:
    """Convert one cell (slow path); raises ValueError with a readable message."""
    if kind == "str":
        return text
    value = text.strip()
    if kind == "time":
        if value in MISSING:
            return math.nan
        try:
            stamp = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"cannot parse {text!r} as a date-time") from None
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)
        return stamp.timestamp()
    if kind == "opt_float" and value in MISSING:
        return math.nan
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"cannot parse {text!r} as a number") from None


def _vector(kind: Kind, cells: list[str]) -> NDArray[Any]:
    """Convert a column (fast path); raises ValueError/Warning on anything unusual."""
    if kind == "str":
        return np.array(cells, dtype=np.str_) if cells else np.zeros(0, dtype="U1")
    if kind == "time":
        ms = np.array(cells, dtype="datetime64[ms]").astype(np.int64)
        out = ms.astype(np.float64) / 1000.0
        out[ms == np.iinfo(np.int64).min] = np.nan
        return out
    arr = np.array(cells, dtype=np.str_)
    if kind == "opt_float":
        arr[arr == ""] = "nan"
    return arr.astype(np.float64)


class DelimitedReader:
    """Iterate over converted chunks of one delimited file."""

    def __init__(
        self,
        path: str | Path,
        fields: Sequence[Field],
        *,
        header: Sequence[str] | None = None,
        delimiter: str = ",",
        skip_bad: bool = False,
        report: ReadReport | None = None,
        block_chars: int = BLOCK_CHARS,
    ) -> None:
        self.path = str(path)
        self.fields = list(fields)
        self.header = list(header) if header is not None else None
        self.delimiter = delimiter
        self.skip_bad = skip_bad
        self.report = report if report is not None else ReadReport(self.path)
        self.block_chars = block_chars
        self.present: set[str] = set()
        """Field names present in the file (filled once the header is read)."""

    def _resolve(self, names: list[str]) -> tuple[int, dict[str, int]]:
        index = {name: k for k, name in enumerate(names)}
        missing = [f.name for f in self.fields if f.required and f.name not in index]
        if missing:
            raise TraceFormatError(
                self.path,
                1 if self.header is None else 0,
                missing[0],
                f"missing required column(s): {', '.join(missing)}",
            )
        known = {f.name for f in self.fields}
        unknown = [n for n in names if n not in known]
        if unknown and self.header is None:
            message = f"{self.path}:1: ignoring unknown column(s): {', '.join(unknown)}"
            warnings.warn(message, TraceWarning, stacklevel=4)
            self.report.warnings.append(message)
        self.present = {f.name for f in self.fields if f.name in index}
        return len(names), {f.name: index[f.name] for f in self.fields if f.name in index}

    def __iter__(self) -> Iterator[Chunk]:
        with open_text(self.path) as fh:
            line = 0
            if self.header is None:
                first = fh.readline()
                line = 1
                if not first.strip():
                    raise TraceFormatError(self.path, 1, "", "empty file: expected a header line")
                names = [
                    n.strip().lstrip("\ufeff")
                    for n in next(csv.reader([first], delimiter=self.delimiter))
                ]
            else:
                names = self.header
            ncols, where = self._resolve(names)
            rest = ""
            while True:
                block = fh.read(self.block_chars)
                text = rest + block
                if not block:
                    if not text:
                        break
                    if not text.endswith("\n"):
                        text += "\n"
                    rest = ""
                else:
                    cut = text.rfind("\n")
                    if cut < 0:
                        rest = text
                        continue
                    text, rest = text[: cut + 1], text[cut + 1 :]
                if "\r" in text:
                    text = text.replace("\r\n", "\n").replace("\r", "\n")
                nlines = text.count("\n")
                chunk = self._fast(text, nlines, ncols, where, line)
                if chunk is None:
                    chunk = self._slow(text, ncols, where, line)
                line += nlines
                yield chunk
                if not block:
                    break

    def _fast(
        self, text: str, nlines: int, ncols: int, where: dict[str, int], line: int
    ) -> Chunk | None:
        if '"' in text:
            return None
        flat = text.replace("\n", self.delimiter).split(self.delimiter)
        if len(flat) != nlines * ncols + 1:
            return None
        chunk: Chunk = {}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                for f in self.fields:
                    if f.name in where:
                        col = flat[where[f.name] : nlines * ncols : ncols]
                        chunk[f.name] = _vector(f.kind, col)
        except (ValueError, TypeError, Warning):
            return None
        chunk["_line"] = np.arange(line + 1, line + nlines + 1, dtype=np.int64)
        self.report.rows_read += nlines
        return chunk

    def _slow(self, text: str, ncols: int, where: dict[str, int], line: int) -> Chunk:
        values: dict[str, list[Any]] = {name: [] for name in where}
        lines: list[int] = []
        reader = csv.reader(io.StringIO(text), delimiter=self.delimiter)
        kinds = {f.name: f.kind for f in self.fields if f.name in where}
        for row in reader:
            lineno = line + reader.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            self.report.rows_read += 1
            error: RowError | None = None
            converted: dict[str, Any] = {}
            if len(row) != ncols:
                error = RowError(self.path, lineno, "", f"expected {ncols} fields, got {len(row)}")
            else:
                for name, k in where.items():
                    try:
                        converted[name] = _scalar(kinds[name], row[k])
                    except ValueError as exc:
                        error = RowError(self.path, lineno, name, str(exc))
                        break
            if error is not None:
                if not self.skip_bad:
                    raise TraceFormatError(error.path, error.line, error.column, error.message)
                self.report.skip(error)
                continue
            for name, value in converted.items():
                values[name].append(value)
            lines.append(lineno)
        chunk: Chunk = {}
        for name, vals in values.items():
            if kinds[name] == "str":
                chunk[name] = np.array(vals, dtype=np.str_) if vals else np.zeros(0, dtype="U1")
            else:
                chunk[name] = np.array(vals, dtype=np.float64)
        chunk["_line"] = np.array(lines, dtype=np.int64)
        return chunk


def check_rows(
    report: ReadReport,
    lines: NDArray[np.int64],
    mask: NDArray[np.bool_],
    kind: str,
    column: str,
    message: str,
) -> None:
    """Record rows where `mask` holds as an anomaly of `kind` (counts + first examples)."""
    count = int(np.count_nonzero(mask))
    if count:
        first = lines[mask][:5]
        report.anomaly(kind, count, [RowError(report.path, int(n), column, message) for n in first])


class OrderCheck:
    """Counts rows whose time is earlier than the previous row's (across chunks)."""

    def __init__(self, column: str) -> None:
        self.column = column
        self.last = -math.inf

    def __call__(self, report: ReadReport, lines: NDArray[np.int64], times: FloatArray) -> None:
        if len(times) == 0:
            return
        prev = np.concatenate(
            [[self.last], np.fmax.accumulate(np.nan_to_num(times, nan=-np.inf))[:-1]]
        )
        prev = np.maximum(prev, self.last)
        check_rows(
            report,
            lines,
            times < prev,
            "arrival_out_of_order",
            self.column,
            "earlier than a previous row (kept; rows are not re-sorted)",
        )
        finite = times[np.isfinite(times)]
        if len(finite):
            self.last = max(self.last, float(finite.max()))


def standard_checks(
    report: ReadReport,
    lines: NDArray[np.int64],
    *,
    gpus: FloatArray | None = None,
    duration: FloatArray | None = None,
    arrival: FloatArray | None = None,
    order: OrderCheck | None = None,
    gpus_column: str = "gpus",
    duration_column: str = "duration",
) -> None:
    """The anomalies every reader reports: zero GPUs, negative durations, arrivals out of
    order (values are kept as read)."""
    if gpus is not None:
        check_rows(report, lines, gpus == 0, "zero_gpus", gpus_column, "requests 0 GPUs")
        check_rows(report, lines, gpus < 0, "negative_gpus", gpus_column, "negative GPU count")
    if duration is not None:
        check_rows(
            report, lines, duration < 0, "negative_duration", duration_column, "negative duration"
        )
    if order is not None and arrival is not None:
        order(report, lines, arrival)
