"""Plots of simulation results (matplotlib, from the `apportion[sim]` extra), written as PNG:

* `jct_cdf.png`: the CDF of job completion times, one line per run label;
* `rho_cdf.png`: the CDFs of finish-time fairness, static (solid) and Themis-style (dashed);
* `utilization.png`: device utilization per round over simulated time, per accelerator type;
* `allocation_<label>.png`: a heatmap of jobs x rounds colored by the accelerator type each
  job ran on (blank = not running), the first run of each label.

Every function returns the files it wrote (none when matplotlib is missing).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from apportion.simulator.metrics import RunResult

MAX_POINTS = 400
"""Utilization curves are averaged over bins of rounds to at most this many points."""
MAX_HEATMAP_CELLS = 4_000_000
"""Larger heatmaps are subsampled (every k-th round) to stay below this many cells."""


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(result: RunResult) -> str:
    return str(result.run.get("label") or result.run["policy"])


def _cdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.sort(values[np.isfinite(values)])
    return x, np.arange(1, x.size + 1) / max(x.size, 1)


def _first_per_label(results: Sequence[RunResult]) -> list[RunResult]:
    seen: dict[str, RunResult] = {}
    for r in results:
        seen.setdefault(_label(r), r)
    return list(seen.values())


def plot_all(results: Sequence[RunResult], directory: str | Path) -> list[Path]:
    """Every plot of the module docstring into `directory`."""
    if not available() or not results:
        return []
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    files = [
        jct_cdf(results, out / "jct_cdf.png"),
        rho_cdf(results, out / "rho_cdf.png"),
        utilization(results, out / "utilization.png"),
    ]
    for r in _first_per_label(results):
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", _label(r))
        files.append(allocation_heatmap(r, out / f"allocation_{safe}.png"))
    return files


def _finish_cdf(plt: Any, fig: Any, ax: Any, xlabel: str, path: Path, legend: str) -> Path:
    """Label, grid, legend and save a CDF figure."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of jobs")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend)
    return _save(plt, fig, path)


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def jct_cdf(results: Sequence[RunResult], path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r in _first_per_label(results):
        mask = r.jobs["measured"].astype(bool)
        x, y = _cdf(r.jobs["jct_s"][mask] / 3600.0)
        ax.step(x, y, where="post", label=_label(r))
    ax.set_xscale("log")
    return _finish_cdf(plt, fig, ax, "job completion time (h)", path, "small")


def rho_cdf(results: Sequence[RunResult], path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for k, r in enumerate(_first_per_label(results)):
        mask = r.jobs["measured"].astype(bool)
        color = f"C{k % 10}"
        x, y = _cdf(r.jobs["rho"][mask])
        ax.step(x, y, where="post", color=color, label=f"{_label(r)} (static)")
        x, y = _cdf(r.jobs["rho_themis"][mask])
        ax.step(x, y, where="post", color=color, linestyle="--", label=f"{_label(r)} (Themis)")
    ax.axvline(1.0, color="grey", linewidth=0.8)
    return _finish_cdf(plt, fig, ax, "finish-time fairness rho", path, "x-small")


def _binned(values: np.ndarray, width: int) -> np.ndarray:
    """Means over consecutive bins of `width` values (the last bin may be shorter)."""
    if width <= 1:
        return values
    bins = np.arange(0, values.size, width)
    return np.add.reduceat(values, bins) / np.diff(np.append(bins, values.size))


def utilization(results: Sequence[RunResult], path: Path) -> Path:
    """Utilization per round, averaged over bins so that at most MAX_POINTS are drawn."""
    plt = _pyplot()
    runs = _first_per_label(results)
    fig, axes = plt.subplots(
        len(runs), 1, figsize=(7.0, 1.9 * len(runs) + 0.6), sharex=True, squeeze=False
    )
    for ax, r in zip(axes[:, 0], runs, strict=True):
        start = r.rounds["start_s"]
        width = max(1, int(np.ceil(start.size / MAX_POINTS)))
        hours = _binned((start - (start[0] if start.size else 0.0)) / 3600.0, width)
        for name in r.type_names:
            ax.plot(
                hours, _binned(r.rounds[f"utilization_{name}"], width), linewidth=0.8, label=name
            )
        ax.plot(
            hours,
            _binned(r.rounds["utilization"], width),
            color="black",
            linewidth=1.0,
            label="all",
        )
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("utilization")
        title = f" (mean of {width} rounds per point)" if width > 1 else ""
        ax.set_title(_label(r) + title, fontsize="small")
        ax.legend(fontsize="x-small", ncol=4, loc="lower right")
    axes[-1, 0].set_xlabel("simulated time (h)")
    return _save(plt, fig, path)


def allocation_heatmap(result: RunResult, path: Path) -> Path:
    """Jobs (rows, workload order) x rounds (columns), colored by the type a job ran on."""
    plt = _pyplot()
    from matplotlib.colors import ListedColormap

    g = result.grants
    jobs = result.jobs["job_id"].size
    rounds = int(g["round"].max()) + 1 if g["round"].size else 1
    step = max(1, int(np.ceil(jobs * rounds / MAX_HEATMAP_CELLS)))
    cols = (rounds + step - 1) // step
    grid = np.full((jobs, cols), -1, np.int64)
    grid[g["job"], g["round"] // step] = g["type"]
    n = len(result.type_names)
    cmap = ListedColormap(["white"] + [f"C{k % 10}" for k in range(n)])
    fig, ax = plt.subplots(figsize=(8.0, 5.0))
    ax.imshow(grid + 1, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=n)
    ax.set_xlabel("round" + (f" (every {step})" if step > 1 else ""))
    ax.set_ylabel("job")
    ax.set_title(f"{_label(result)}: accelerator type per job and round", fontsize="small")
    handles = [plt.Rectangle((0, 0), 1, 1, color=f"C{k % 10}") for k in range(n)]
    ax.legend(handles, result.type_names, fontsize="x-small", loc="upper right")
    return _save(plt, fig, path)
