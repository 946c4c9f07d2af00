"""A self-contained HTML report of a simulation or a sweep: the parameters, seeds and version
of every run, the summary table (and the mean with a 95% confidence interval over seeds when
there are several), and the plots embedded as PNG data (one file, no external assets)."""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from apportion.simulator.metrics import RunResult
from apportion.simulator.tables import Table

SUMMARY_COLUMNS = (
    ("avg_jct_s", "avg JCT (s)"),
    ("p50_jct_s", "p50 JCT (s)"),
    ("p99_jct_s", "p99 JCT (s)"),
    ("geo_mean_jct_s", "geo-mean JCT (s)"),
    ("makespan_s", "makespan (s)"),
    ("worst_rho", "worst rho"),
    ("mean_rho", "mean rho"),
    ("frac_rho_gt1", "rho > 1"),
    ("worst_rho_themis", "worst rho (Themis)"),
    ("utilization", "utilization"),
    ("gpu_hours", "GPU-hours"),
    ("restarts", "restarts"),
    ("unfinished", "unfinished"),
    ("solver_s", "solver s"),
    ("wall_s", "wall s"),
)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    return html.escape(str(value))


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _image(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<figure><img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}"/>'
        f"<figcaption>{html.escape(path.stem)}</figcaption></figure>"
    )


def write_report(
    results: Sequence[RunResult],
    path: str | Path,
    plots: Sequence[Path] = (),
    aggregate: Table | None = None,
    title: str = "apportion simulation",
) -> Path:
    """The report of `results` (with the sweep's `aggregate` table when given)."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1200px}"
        "table{border-collapse:collapse;font-size:13px;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
        "th{background:#f3f3f3}figure{display:inline-block;margin:0.5em}"
        "img{max-width:560px}pre{background:#f7f7f7;padding:1em;overflow:auto;font-size:12px}"
        "</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    header = ["label", "seed", "load", *[label for _, label in SUMMARY_COLUMNS], "stopped"]
    rows = [
        [
            r.run.get("label", r.run["policy"]),
            r.run["seed"],
            r.run["load"] if r.run["load"] is not None else "-",
            *[r.summary.get(key, "") for key, _ in SUMMARY_COLUMNS],
            r.summary.get("stopped", ""),
        ]
        for r in results
    ]
    parts += ["<h2>Runs</h2>", _table(header, rows)]
    if aggregate:
        names = list(aggregate)
        agg_rows = [
            [aggregate[name][k] for name in names]
            for k in range(len(next(iter(aggregate.values()))))
        ]
        parts += ["<h2>Mean over seeds (95% confidence half-width)</h2>", _table(names, agg_rows)]
    if plots:
        parts += ["<h2>Plots</h2>", *(_image(p) for p in plots if p.exists())]
    parameters = [r.run for r in results]
    parts += [
        "<h2>Parameters, seeds and version</h2>",
        f"<pre>{html.escape(json.dumps(parameters, indent=1, default=str))}</pre>",
        "</body></html>",
    ]
    out = Path(path)
    out.write_text("\n".join(parts), encoding="utf-8")
    return out
