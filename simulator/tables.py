"""Column tables (name -> 1-D array, equal lengths) and their files: CSV always, Parquet when
pyarrow is installed (the optional extra `apportion[sim]`)."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

Table = dict[str, np.ndarray]


def rows(table: Table) -> int:
    return len(next(iter(table.values()))) if table else 0


def with_columns(table: Table, values: Mapping[str, Any]) -> Table:
    """`table` with constant columns `values` put first (sweep keys such as policy, seed)."""
    n = rows(table)
    out: Table = {}
    for name, value in values.items():
        out[name] = np.full(
            n, value, dtype=object if isinstance(value, str) or value is None else None
        )
    out.update(table)
    return out


def concat(tables: Sequence[Table]) -> Table:
    """Rows of tables with the same columns, in order."""
    tables = [t for t in tables if t]
    if not tables:
        return {}
    names = list(tables[0])
    return {name: np.concatenate([np.asarray(t[name]) for t in tables]) for name in names}


def _cell(value: Any) -> str:
    if isinstance(value, float | np.floating):
        return "" if math.isnan(value) else repr(float(value))
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


def write_csv(table: Table, path: str | Path) -> Path:
    out = Path(path)
    with out.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(list(table))
        columns = [np.asarray(v) for v in table.values()]
        for k in range(rows(table)):
            writer.writerow(
                [_cell(c[k].item() if hasattr(c[k], "item") else c[k]) for c in columns]
            )
    return out


def read_csv(path: str | Path) -> dict[str, list[str]]:
    """A CSV written by `write_csv`, as text columns (for tests and reports)."""
    with Path(path).open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        cols: dict[str, list[str]] = {name: [] for name in header}
        for row in reader:
            for name, cell in zip(header, row, strict=True):
                cols[name].append(cell)
    return cols


def parquet_available() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def write_parquet(table: Table, path: str | Path) -> Path | None:
    """The table as Parquet; None when pyarrow is not installed."""
    if not parquet_available():
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrays = {}
    for name, values in table.items():
        arr = np.asarray(values)
        if arr.dtype == object:
            arrays[name] = pa.array([None if v is None else v for v in arr.tolist()])
        else:
            arrays[name] = pa.array(arr)
    out = Path(path)
    pq.write_table(pa.table(arrays), out)
    return out
