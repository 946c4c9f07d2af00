"""The normalized job table every trace reader produces (T6, docs/datasets.md, step 1).

One row per job, column-oriented (numpy arrays) so that millions of rows stay compact:
float columns use NaN for "unknown", string columns are dictionary-encoded (`Categorical`)
with "" for "unknown". Times are seconds relative to the trace origin (`origin_s`, Unix
seconds of time 0; 0 when the format's times are already relative).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from apportion.datasets.errors import ReadReport

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
StrArray = NDArray[np.str_]

FLOAT_COLUMNS: tuple[str, ...] = (
    "arrival_s",  # submission time (s from origin)
    "start_s",  # first start (s from origin); NaN = unknown or never started
    "duration_s",  # run time (s); NaN = unknown
    "gpus",  # GPUs requested (fractional for shared GPUs)
    "cpus",  # CPU cores
    "memory_gib",  # host memory (GiB)
    "total_steps",  # work in steps (Gavel/Shockwave traces)
    "priority_weight",  # NaN = unset (1)
    "slo_factor",  # Gavel SLO factor (deadline = arrival + factor x duration); NaN = none
    "batch_size",  # global batch size (Sia/Pollux)
)
STRING_COLUMNS: tuple[str, ...] = (
    "tenant",  # tenant / virtual cluster
    "user",
    "status",  # as spelled by the trace (COMPLETED, Pass, Running, ...)
    "gpu_type",  # GPU type or type constraint (e.g. "V100M16|V100M32")
    "job_type",  # model / application (Gavel job type, Sia application)
    "mode",  # Shockwave batch-size mode (static / gns / accordion)
)
COLUMNS: tuple[str, ...] = ("id", *FLOAT_COLUMNS, *STRING_COLUMNS)


@dataclass(frozen=True, eq=False)
class Categorical:
    """Dictionary-encoded strings: value of row k = labels[codes[k]]."""

    codes: NDArray[np.int32]
    labels: tuple[str, ...]

    @classmethod
    def from_values(cls, values: Sequence[str] | StrArray) -> Categorical:
        arr = np.asarray(values, dtype=np.str_)
        if arr.size == 0:
            return cls(np.zeros(0, np.int32), ())
        labels, inverse = np.unique(arr, return_inverse=True)
        return cls(inverse.astype(np.int32).ravel(), tuple(str(x) for x in labels))

    @classmethod
    def constant(cls, value: str, n: int) -> Categorical:
        return cls(np.zeros(n, np.int32), (value,))

    def values(self) -> StrArray:
        if not self.labels:
            return np.zeros(len(self.codes), dtype="U1")
        return np.asarray(self.labels, dtype=np.str_)[self.codes]

    def take(self, index: NDArray[Any]) -> Categorical:
        return Categorical(self.codes[index], self.labels)

    def __len__(self) -> int:
        return len(self.codes)


@dataclass(frozen=True, eq=False)
class JobTable:
    """Normalized jobs. Build with `JobTable.from_columns`; columns are documented in
    FLOAT_COLUMNS / STRING_COLUMNS."""

    id: StrArray
    arrival_s: FloatArray
    start_s: FloatArray
    duration_s: FloatArray
    gpus: FloatArray
    cpus: FloatArray
    memory_gib: FloatArray
    total_steps: FloatArray
    priority_weight: FloatArray
    slo_factor: FloatArray
    batch_size: FloatArray
    tenant: Categorical
    user: Categorical
    status: Categorical
    gpu_type: Categorical
    job_type: Categorical
    mode: Categorical
    origin_s: float = 0.0
    source: str = ""
    """Format name ("helios", "philly-csv", ..., "generated")."""
    report: ReadReport | None = field(default=None)

    @classmethod
    def from_columns(
        cls,
        id: Sequence[str] | StrArray,
        *,
        origin_s: float = 0.0,
        source: str = "",
        report: ReadReport | None = None,
        **columns: Any,
    ) -> JobTable:
        """Missing float columns are NaN, missing string columns "". String columns may be
        given as sequences/arrays of str or as `Categorical`."""
        ids = np.asarray(id, dtype=np.str_)
        n = len(ids)
        unknown = set(columns) - set(FLOAT_COLUMNS) - set(STRING_COLUMNS)
        if unknown:
            raise TypeError(f"unknown column(s): {sorted(unknown)}")
        kwargs: dict[str, Any] = {}
        for name in FLOAT_COLUMNS:
            value = columns.get(name)
            arr = np.full(n, np.nan) if value is None else np.asarray(value, dtype=np.float64)
            if arr.shape != (n,):
                raise ValueError(f"column {name!r} has shape {arr.shape}, expected ({n},)")
            kwargs[name] = arr
        for name in STRING_COLUMNS:
            value = columns.get(name)
            if value is None:
                cat = Categorical.constant("", n)
            elif isinstance(value, Categorical):
                cat = value
            else:
                cat = Categorical.from_values(value)
            if len(cat) != n:
                raise ValueError(f"column {name!r} has {len(cat)} rows, expected {n}")
            kwargs[name] = cat
        return cls(id=ids, origin_s=origin_s, source=source, report=report, **kwargs)

    def __len__(self) -> int:
        return len(self.id)

    def column(self, name: str) -> NDArray[Any]:
        """A column as a plain array (strings decoded)."""
        value = getattr(self, name)
        if isinstance(value, Categorical):
            return value.values()
        return np.asarray(value)

    def take(self, index: NDArray[Any]) -> JobTable:
        """Rows selected by a boolean mask or an index array (metadata kept)."""
        kwargs: dict[str, Any] = {}
        for name in COLUMNS:
            value = getattr(self, name)
            kwargs[name] = value.take(index) if isinstance(value, Categorical) else value[index]
        return replace(self, **kwargs)

    def rows(self) -> Iterator[dict[str, Any]]:
        """Row dicts (for small tables and tests)."""
        cols = {name: self.column(name) for name in COLUMNS}
        for k in range(len(self)):
            yield {name: cols[name][k].item() for name in COLUMNS}

    def diff(
        self, other: JobTable, columns: Sequence[str] = COLUMNS, rtol: float = 1e-9
    ) -> list[str]:
        """Differences between two tables on `columns` (empty list = same). NaN equals NaN."""
        if len(self) != len(other):
            return [f"row count {len(self)} != {len(other)}"]
        out = []
        for name in columns:
            a, b = self.column(name), other.column(name)
            if name in FLOAT_COLUMNS:
                same = np.isclose(a, b, rtol=rtol, atol=1e-9, equal_nan=True)
            else:
                same = a == b
            if not np.all(same):
                k = int(np.argmin(same))
                out.append(f"column {name!r} differs at row {k}: {a[k]!r} != {b[k]!r}")
        return out


def concat(tables: Sequence[JobTable]) -> JobTable:
    """Rows of several tables (metadata of the first)."""
    if not tables:
        return JobTable.from_columns([])
    kwargs: dict[str, Any] = {}
    for name in COLUMNS:
        if name in STRING_COLUMNS:
            kwargs[name] = np.concatenate([t.column(name) for t in tables]).astype(np.str_)
        else:
            kwargs[name] = np.concatenate([getattr(t, name) for t in tables])
    first = tables[0]
    ids = kwargs.pop("id")
    return JobTable.from_columns(ids, origin_s=first.origin_s, source=first.source, **kwargs)


class TableBuilder:
    """Accumulates column chunks (bounded memory: string columns are encoded per chunk)."""

    def __init__(self) -> None:
        self._ids: list[StrArray] = []
        self._floats: dict[str, list[FloatArray]] = {name: [] for name in FLOAT_COLUMNS}
        self._codes: dict[str, list[NDArray[np.int32]]] = {name: [] for name in STRING_COLUMNS}
        self._labels: dict[str, dict[str, int]] = {name: {} for name in STRING_COLUMNS}
        self._rows = 0

    def add(self, ids: StrArray, columns: Mapping[str, NDArray[Any] | None]) -> None:
        n = len(ids)
        self._ids.append(np.asarray(ids, dtype=np.str_))
        for name in FLOAT_COLUMNS:
            value = columns.get(name)
            self._floats[name].append(
                np.full(n, np.nan) if value is None else np.asarray(value, np.float64)
            )
        for name in STRING_COLUMNS:
            value = columns.get(name)
            if value is None:
                value = np.full(n, "", dtype="U1")
            uniq, inverse = np.unique(np.asarray(value, dtype=np.str_), return_inverse=True)
            table = self._labels[name]
            mapping = np.array([table.setdefault(str(u), len(table)) for u in uniq], np.int32)
            self._codes[name].append(mapping[inverse.ravel()] if n else np.zeros(0, np.int32))
        self._rows += n

    def __len__(self) -> int:
        return self._rows

    def build(
        self, *, origin_s: float = 0.0, source: str = "", report: ReadReport | None = None
    ) -> JobTable:
        # concatenate column by column, releasing each column's parts at once: the peak is
        # the finished table plus one column, not twice the table
        ids = np.concatenate(self._ids) if self._ids else np.zeros(0, dtype="U1")
        self._ids = []
        floats = {}
        for name in FLOAT_COLUMNS:
            parts = self._floats[name]
            floats[name] = np.concatenate(parts) if parts else np.zeros(0)
            self._floats[name] = []
        cats = {}
        for name in STRING_COLUMNS:
            codes_parts = self._codes[name]
            codes = np.concatenate(codes_parts) if codes_parts else np.zeros(0, np.int32)
            self._codes[name] = []
            labels = tuple(sorted(self._labels[name], key=self._labels[name].__getitem__))
            cats[name] = Categorical(codes.astype(np.int32, copy=False), labels)
        return JobTable.from_columns(
            ids, origin_s=origin_s, source=source, report=report, **floats, **cats
        )

