"""Sia / Pollux workloads (5-column CSV) and Sia per-configuration profiles.

* workload CSV: `name, time, application, num_replicas, batch_size` (time = s from the start
  of the workload) -> id = name, arrival = time, GPUs = num_replicas, job_type = application.
* profiles (`placements-<gpu>.csv`: `placement, local_bsz, step_time, sync_time`; seed and
  AdaptDL profiles add `gpu_type`): `read_sia_profile` -> `SiaProfile` rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from apportion.datasets.columns import DelimitedReader, Field, OrderCheck, standard_checks
from apportion.datasets.errors import ReadReport
from apportion.datasets.helios import _num
from apportion.datasets.table import JobTable, TableBuilder

WORKLOAD_FIELDS = (
    Field("name", "str"),
    Field("time", "float"),
    Field("application", "str"),
    Field("num_replicas", "float"),
    Field("batch_size", "opt_float", required=False),
)


def read_sia_workload(path: str | Path, *, skip_bad: bool = False) -> JobTable:
    report = ReadReport(str(path))
    builder = TableBuilder()
    order = OrderCheck("time")
    for chunk in DelimitedReader(path, WORKLOAD_FIELDS, skip_bad=skip_bad, report=report):
        standard_checks(
            report,
            chunk["_line"],
            gpus=chunk["num_replicas"],
            arrival=chunk["time"],
            order=order,
            gpus_column="num_replicas",
        )
        builder.add(
            chunk["name"],
            {
                "arrival_s": chunk["time"],
                "gpus": chunk["num_replicas"],
                "job_type": chunk["application"],
                "batch_size": chunk.get("batch_size"),
            },
        )
    table = builder.build(source="sia", report=report)
    report.rows_kept = len(table)
    return table


def write_sia_workload(table: JobTable, path: str | Path) -> None:
    app = table.column("job_type")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("name,time,application,num_replicas,batch_size\n")
        for k in range(len(table)):
            fh.write(
                f"{table.id[k]},{_num(table.arrival_s[k])},{app[k]},{_num(table.gpus[k])},"
                f"{_num(table.batch_size[k])}\n"
            )


PROFILE_FIELDS = (
    Field("gpu_type", "str", required=False),
    Field("placement", "str"),
    Field("local_bsz", "float"),
    Field("step_time", "float"),
    Field("sync_time", "opt_float", required=False),
)


@dataclass(frozen=True)
class SiaProfile:
    """Profiled step times per (GPU type, placement, local batch size)."""

    gpu_type: NDArray[np.str_]
    placement: NDArray[np.str_]
    """Digit string, one digit per node = replicas on that node (e.g. "1114")."""
    local_bsz: NDArray[np.float64]
    step_time: NDArray[np.float64]
    """s per step (compute)."""
    sync_time: NDArray[np.float64]
    """s per step (gradient synchronisation; NaN = not profiled)."""

    def __len__(self) -> int:
        return len(self.placement)

    def configurations(self) -> list[tuple[str, int, int, float]]:
        """(gpu_type, nodes, gpus, best samples/s over local batch sizes) per placement shape:
        samples/s = replicas x local_bsz / step_time (`step_time` is the whole optimizer step,
        its `sync_time` included, as Sia's simulator reads these files; see
        `apportion.datasets.sia_models`). A throughput, not a goodput: statistical efficiency
        is not applied here."""
        best: dict[tuple[str, int, int], float] = {}
        for k in range(len(self)):
            digits = [int(c) for c in str(self.placement[k]) if c.isdigit() and c != "0"]
            gpus, nodes = sum(digits), len(digits)
            if gpus == 0:
                continue
            step = self.step_time[k]
            rate = gpus * self.local_bsz[k] / step if step > 0 else 0.0
            key = (str(self.gpu_type[k]), nodes, gpus)
            best[key] = max(best.get(key, 0.0), float(rate))
        return [(t, n, g, r) for (t, n, g), r in sorted(best.items())]


def read_sia_profile(
    path: str | Path, *, gpu_type: str | None = None, skip_bad: bool = False
) -> SiaProfile:
    """Read one profile CSV; `gpu_type` names the type for files without a gpu_type column
    (default: the suffix of `placements-<gpu>.csv`)."""
    p = Path(path)
    default = gpu_type or (p.stem.split("-", 1)[1] if "-" in p.stem else "")
    cols: dict[str, list[NDArray[Any]]] = {}
    for chunk in DelimitedReader(p, PROFILE_FIELDS, skip_bad=skip_bad):
        n = len(chunk["_line"])
        chunk.setdefault("gpu_type", np.full(n, default))
        chunk.setdefault("sync_time", np.full(n, np.nan))
        for name in ("gpu_type", "placement", "local_bsz", "step_time", "sync_time"):
            cols.setdefault(name, []).append(chunk[name])

    def cat(name: str, kind: type) -> NDArray[Any]:
        return np.concatenate(cols[name]) if cols.get(name) else np.zeros(0, dtype=kind)

    return SiaProfile(
        cat("gpu_type", np.str_).astype(np.str_),
        cat("placement", np.str_).astype(np.str_),
        cat("local_bsz", np.float64).astype(np.float64),
        cat("step_time", np.float64).astype(np.float64),
        cat("sync_time", np.float64).astype(np.float64),
    )


def read_sia_app_profiles(directory: str | Path, types: Sequence[str] | None = None) -> SiaProfile:
    """All `placements-<gpu>.csv` of one application directory (the unsuffixed
    `placements.csv` duplicates `aws` and is skipped)."""
    files = sorted(Path(directory).glob("placements-*.csv"))
    profiles = [
        read_sia_profile(f) for f in files if types is None or f.stem.split("-", 1)[1] in types
    ]
    if not profiles:
        raise FileNotFoundError(f"{directory}: no placements-<gpu>.csv files")
    return SiaProfile(
        *(
            np.concatenate([getattr(pr, f) for pr in profiles])
            for f in ("gpu_type", "placement", "local_bsz", "step_time", "sync_time")
        )
    )
