"""One entry point for every trace format: `read_trace(format, path, ...)`."""

from __future__ import annotations

from pathlib import Path

from apportion.datasets.table import JobTable

FORMATS: dict[str, str] = {
    "helios": "SenseTime Helios cluster_log.csv",
    "philly-csv": "Philly per-job CSV derivative (timestamp,duration,num_gpus,gpu_time,cluster)",
    "philly-json": "Philly raw job log (cluster_job_log JSON)",
    "pai": "Alibaba PAI 2020 job table (needs the task table: --tasks)",
    "openb": "Alibaba 2023 openb pod list",
    "gavel": "Gavel .trace (7 or 10 tab-separated fields)",
    "shockwave": "Shockwave .trace (12 tab-separated fields)",
    "sia": "Sia / Pollux workload CSV (name,time,application,num_replicas,batch_size)",
}


def read_trace(
    fmt: str,
    path: str | Path,
    *,
    tasks: str | Path | None = None,
    group_tags: str | Path | None = None,
    skip_bad: bool = False,
) -> JobTable:
    """Read `path` as `fmt` (a key of FORMATS) into the normalized job table (`tasks` and
    `group_tags`: the PAI task and optional group_tag tables)."""
    if group_tags is not None and fmt != "pai":
        raise ValueError("a group_tag table belongs to the pai format")
    if fmt == "helios":
        from apportion.datasets.helios import read_helios

        return read_helios(path, skip_bad=skip_bad)
    if fmt == "philly-csv":
        from apportion.datasets.philly import read_philly_csv

        return read_philly_csv(path, skip_bad=skip_bad)
    if fmt == "philly-json":
        from apportion.datasets.philly import read_philly_json

        return read_philly_json(path, skip_bad=skip_bad)
    if fmt == "pai":
        from apportion.datasets.pai import read_pai

        if tasks is None:
            raise ValueError("the pai format needs the task table as well")
        return read_pai(path, tasks, group_tag_path=group_tags, skip_bad=skip_bad)
    if fmt == "openb":
        from apportion.datasets.openb import read_openb_pods

        return read_openb_pods(path, skip_bad=skip_bad)
    if fmt in ("gavel", "shockwave"):
        from apportion.datasets.gavel_trace import read_gavel_trace

        return read_gavel_trace(path, skip_bad=skip_bad)
    if fmt == "sia":
        from apportion.datasets.sia import read_sia_workload

        return read_sia_workload(path, skip_bad=skip_bad)
    raise ValueError(f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")
