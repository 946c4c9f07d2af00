"""Writing a simulation's (or a sweep's) results into a directory:

jobs.csv      one row per job and run (label, policy, seed, load first)
rounds.csv    one row per round and run
grants.csv    one row per (round, job) that ran: type index, devices, nodes, the pair or
              group sharing its devices (its smallest job index) and its slowdown there
summary.csv   one row per run
aggregate.csv mean and 95% confidence half-width over seeds (sweeps)
*.parquet     the same tables when pyarrow is installed (`apportion[sim]`)
run.json      every run's parameters, seeds, version and summary
plots/*.png   JCT CDF, rho CDF, utilization over time, allocation heatmaps (matplotlib)
report.html   all of the above in one self-contained page
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from apportion.simulator import plots as plot_module
from apportion.simulator.metrics import RunResult
from apportion.simulator.report import write_report
from apportion.simulator.sweep import aggregate
from apportion.simulator.tables import Table, concat, with_columns, write_csv, write_parquet


def _keys(result: RunResult) -> dict[str, Any]:
    run = result.run
    return {
        "label": str(run.get("label") or run["policy"]),
        "policy": str(run["policy"]),
        "seed": int(run["seed"]),
        "load": math.nan if run["load"] is None else float(run["load"]),
    }


def summary_table(results: Sequence[RunResult]) -> Table:
    """One row per run: its keys and its summary."""
    rows = [{**_keys(r), **r.summary} for r in results]
    names = list(rows[0]) if rows else []
    return {
        name: np.array(
            [row.get(name) for row in rows],
            dtype=object if any(isinstance(row.get(name), str) for row in rows) else None,
        )
        for name in names
    }


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    return value


def write_outputs(
    results: Sequence[RunResult],
    directory: str | Path,
    *,
    plots: bool = True,
    title: str = "apportion simulation",
) -> list[Path]:
    """Every file of the module docstring; returns the paths written."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tables: dict[str, Table] = {
        "jobs": concat([with_columns(r.jobs, _keys(r)) for r in results]),
        "rounds": concat([with_columns(r.rounds, _keys(r)) for r in results]),
        "grants": concat([with_columns(r.grants, _keys(r)) for r in results]),
        "summary": summary_table(results),
    }
    agg: Table | None = None
    if len(results) > 1:
        agg = aggregate(results)
        tables["aggregate"] = agg
    written: list[Path] = []
    for name, table in tables.items():
        written.append(write_csv(table, out / f"{name}.csv"))
        parquet = write_parquet(table, out / f"{name}.parquet")
        if parquet is not None:
            written.append(parquet)
    runs = [_json_safe({**r.run, "summary": r.summary}) for r in results]
    run_json = out / "run.json"
    run_json.write_text(json.dumps({"runs": runs}, indent=1) + "\n", encoding="utf-8")
    written.append(run_json)
    images = plot_module.plot_all(results, out / "plots") if plots else []
    written += images
    written.append(write_report(results, out / "report.html", images, agg, title))
    return written
