"""Shockwave per-epoch profiles (T2.2, docs/datasets.md; MIT): a JSON list (optionally .gz) of
objects with `job_id, arrival_s, job_type, mode, model, dataset, scale_factor, num_epochs,
num_samples_per_epoch, bs_every_epoch, duration_every_epoch_s, mem_every_epoch_mb,
util_every_epoch`. The trace itself is read by `apportion.datasets.gavel_trace`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from apportion.datasets.columns import load_json
from apportion.datasets.errors import TraceFormatError

REQUIRED = ("job_id", "scale_factor", "num_epochs", "bs_every_epoch", "duration_every_epoch_s")


@dataclass(frozen=True)
class EpochProfile:
    job_id: int
    arrival_s: float
    job_type: str
    mode: str
    scale_factor: int
    num_epochs: int
    num_samples_per_epoch: int
    bs_every_epoch: tuple[int, ...]
    duration_every_epoch_s: tuple[float, ...]
    mem_every_epoch_mb: tuple[float, ...] = ()
    util_every_epoch: tuple[float, ...] = ()
    model: str = ""
    dataset: str = ""

    @property
    def total_duration_s(self) -> float:
        return float(sum(self.duration_every_epoch_s))


def read_shockwave_profiles(path: str | Path) -> list[EpochProfile]:
    spath = str(path)
    data = load_json(path)
    if not isinstance(data, list):
        raise TraceFormatError(spath, 0, "", "expected a JSON list of job profiles")
    out = []
    for k, obj in enumerate(data):
        where = f"[{k}]"
        if not isinstance(obj, dict):
            raise TraceFormatError(spath, 0, where, "expected an object")
        for key in REQUIRED:
            if key not in obj:
                raise TraceFormatError(spath, 0, f"{where}.{key}", "missing key")
        n = int(obj["num_epochs"])
        for key in ("bs_every_epoch", "duration_every_epoch_s"):
            if not isinstance(obj[key], list) or len(obj[key]) != n:
                raise TraceFormatError(spath, 0, f"{where}.{key}", f"expected a list of {n} values")
        if any(d <= 0 for d in obj["duration_every_epoch_s"]):
            raise TraceFormatError(spath, 0, f"{where}.duration_every_epoch_s", "must be > 0")
        out.append(
            EpochProfile(
                job_id=int(obj["job_id"]),
                arrival_s=float(obj.get("arrival_s", 0.0)),
                job_type=str(obj.get("job_type", "")),
                mode=str(obj.get("mode", "")),
                scale_factor=int(obj["scale_factor"]),
                num_epochs=n,
                num_samples_per_epoch=int(obj.get("num_samples_per_epoch", 0)),
                bs_every_epoch=tuple(int(b) for b in obj["bs_every_epoch"]),
                duration_every_epoch_s=tuple(float(d) for d in obj["duration_every_epoch_s"]),
                mem_every_epoch_mb=tuple(float(m) for m in obj.get("mem_every_epoch_mb", [])),
                util_every_epoch=tuple(float(u) for u in obj.get("util_every_epoch", [])),
                model=str(obj.get("model", "")),
                dataset=str(obj.get("dataset", "")),
            )
        )
    return out


def write_shockwave_profiles(profiles: list[EpochProfile], path: str | Path) -> None:
    data = [
        {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(p).items()} for p in profiles
    ]
    Path(path).write_text(json.dumps(data) + "\n", encoding="utf-8")
