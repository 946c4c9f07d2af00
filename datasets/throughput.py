"""Throughput tables in Gavel's JSON schema (T2.1, docs/datasets.md; also Shockwave's TACC table).

    { worker_type : { "('<model>', <scale factor>)" :
                        { "null": <isolated steps/s>,
                          "('<other model>', <same scale factor>)": [<self steps/s>, <other>] } } }

`read_gavel_throughputs(path)` reads such a file (`.json` or `.json.gz`) into a
`ThroughputTable`; `write_gavel_throughputs` writes one. The project ships no copy of the
upstream tables: `apportion.datasets.generators.throughput_table` makes a synthetic one.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from apportion.datasets.columns import load_json
from apportion.datasets.errors import TraceFormatError

JobKey = tuple[str, int]
"""(job type, e.g. 'ResNet-50 (batch size 64)', scale factor)."""


@dataclass(frozen=True)
class ThroughputTable:
    """Isolated and co-located throughputs (steps/s of the whole job at its scale factor)."""

    types: tuple[str, ...]
    isolated: Mapping[JobKey, Mapping[str, float]]
    """job key -> type -> steps/s (0 = cannot run, e.g. out of memory)."""
    pairs: Mapping[str, Mapping[tuple[JobKey, JobKey], tuple[float, float]]] = field(
        default_factory=dict
    )
    """type -> (key a, key b) -> (a's steps/s, b's steps/s) when co-located."""

    def job_keys(self, scale_factor: int | None = None) -> list[JobKey]:
        """Job keys (sorted), optionally only those with the given scale factor."""
        return sorted(k for k in self.isolated if scale_factor is None or k[1] == scale_factor)

    def job_types(self) -> list[str]:
        return sorted({k[0] for k in self.isolated})

    def throughput(self, key: JobKey, types: Iterable[str]) -> dict[str, float]:
        """Positive finite isolated throughputs of `key` on `types` (others omitted)."""
        row = self.isolated.get(key, {})
        return {
            t: float(row[t]) for t in types if t in row and math.isfinite(row[t]) and row[t] > 0
        }


def _parse_key(text: str, path: str, where: str) -> JobKey:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or not isinstance(value[0], str)
        or not isinstance(value[1], int)
    ):
        raise TraceFormatError(
            path, 0, where, f"bad job key {text!r}: expected \"('<model>', <n>)\""
        )
    return value[0], value[1]


def read_gavel_throughputs(path: str | Path, *, pairs: bool = True) -> ThroughputTable:
    """Read a Gavel-schema throughput JSON (optionally skipping the pair entries)."""
    spath = str(path)
    data = load_json(path)
    if not isinstance(data, dict):
        raise TraceFormatError(spath, 0, "", "expected an object {worker_type: {...}}")
    isolated: dict[JobKey, dict[str, float]] = {}
    pair_table: dict[str, dict[tuple[JobKey, JobKey], tuple[float, float]]] = {}
    for wtype, jobs in data.items():
        if not isinstance(jobs, dict):
            raise TraceFormatError(spath, 0, wtype, "expected an object of job keys")
        for key_text, entry in jobs.items():
            key = _parse_key(key_text, spath, f"{wtype}/{key_text}")
            if not isinstance(entry, dict) or "null" not in entry:
                raise TraceFormatError(spath, 0, f"{wtype}/{key_text}", 'missing "null" entry')
            value = entry["null"]
            if not isinstance(value, int | float):
                raise TraceFormatError(
                    spath, 0, f"{wtype}/{key_text}/null", f"not a number: {value!r}"
                )
            isolated.setdefault(key, {})[wtype] = float(value)
            if not pairs:
                continue
            for other_text, both in entry.items():
                if other_text == "null":
                    continue
                other = _parse_key(other_text, spath, f"{wtype}/{key_text}/{other_text}")
                if not (isinstance(both, list) and len(both) == 2):
                    raise TraceFormatError(
                        spath, 0, f"{wtype}/{key_text}/{other_text}", "expected [self, other]"
                    )
                pair_table.setdefault(wtype, {})[(key, other)] = (float(both[0]), float(both[1]))
    return ThroughputTable(tuple(data), isolated, pair_table)


def write_gavel_throughputs(table: ThroughputTable, path: str | Path) -> None:
    """Write in Gavel's schema (keys formatted as Gavel writes them)."""
    out: dict[str, dict[str, dict[str, object]]] = {}
    for wtype in table.types:
        jobs: dict[str, dict[str, object]] = {}
        for key in table.job_keys():
            if wtype not in table.isolated[key]:
                continue
            entry: dict[str, object] = {"null": table.isolated[key][wtype]}
            for (a, b), both in sorted(table.pairs.get(wtype, {}).items()):
                if a == key:
                    entry[repr(b)] = list(both)
            jobs[repr(key)] = entry
        out[wtype] = jobs
    Path(path).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
