"""`apportion solve --plot FILE`: a picture of a plan, in the shape of its policy's plan.

* time shares (and markets, windows): a jobs x types heat map of the time shares;
* queues (AlloX): per device, each queued job as a bar from its planned start to its
  predicted completion;
* configurations (Sia, Pollux): per job, a bar as long as its GPUs, coloured by accelerator
  type and labelled with its nodes.

matplotlib is an optional extra (``pip install 'apportion[plot]'``), imported only here, and
only when a plot is asked for. The file format follows the file name's suffix (png, svg, pdf).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from apportion.server.cli_errors import InputError
from apportion.solver.capabilities import PlanKind
from apportion.solver.errors import ValidationError
from apportion.solver.registry import lookup
from apportion.v1 import allocation_service_pb2 as service_pb

MAX_PLOTTED_JOBS = 200
"""Jobs drawn at most (the first ones); the title says when more were left out."""
_ROW_INCHES = 0.22


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise InputError(
            "--plot needs matplotlib: pip install 'apportion[plot]' (or matplotlib)"
        ) from exc
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _plan_kind(response: service_pb.SolveResponse) -> PlanKind:
    try:
        return lookup(response.stats.policy).capabilities.plan_kind
    except ValidationError:
        return PlanKind.TIME_SHARE


def _title(response: service_pb.SolveResponse, what: str, shown: int) -> str:
    total = len(response.plan.jobs)
    more = f" (first {shown} of {total} jobs)" if shown < total else ""
    return f"{response.stats.policy or 'plan'}: {what}{more}"


def _time_shares(plt: Any, response: service_pb.SolveResponse, type_names: Sequence[str]) -> Any:
    import numpy as np

    jobs = list(response.plan.jobs)[:MAX_PLOTTED_JOBS]
    names = list(type_names) or sorted({n for job in jobs for n in job.time_share})
    shares = np.array([[job.time_share.get(n, 0.0) for n in names] for job in jobs])
    figure, axes = plt.subplots(
        figsize=(max(4.0, 1.2 * len(names) + 2.5), max(2.5, _ROW_INCHES * len(jobs) + 1.5))
    )
    image = axes.imshow(shares.reshape(len(jobs), len(names)), aspect="auto", vmin=0.0,
                        vmax=1.0, cmap="viridis")
    axes.set_xticks(range(len(names)), names)
    axes.set_yticks(range(len(jobs)), [job.job_id for job in jobs])
    axes.set_xlabel("accelerator type")
    figure.colorbar(image, ax=axes, label="time share")
    axes.set_title(_title(response, "time share per job and type", len(jobs)))
    return figure


def _queues(plt: Any, response: service_pb.SolveResponse) -> Any:
    jobs = [job for job in response.plan.jobs if job.HasField("queue")][:MAX_PLOTTED_JOBS]
    rows: dict[str, int] = {}
    for job in jobs:
        for device in job.queue.devices:
            rows.setdefault(f"{job.queue.accelerator_type}[{device}]", len(rows))
    figure, axes = plt.subplots(figsize=(9.0, max(2.5, 0.35 * len(rows) + 1.5)))
    for job in jobs:
        queue = job.queue
        length = queue.completion_time_s - queue.start_time_s
        for device in queue.devices:
            row = rows[f"{queue.accelerator_type}[{device}]"]
            axes.barh(row, length, left=queue.start_time_s, height=0.7,
                      color="tab:orange" if queue.running else "tab:blue", edgecolor="white")
            if len(jobs) <= 60:
                axes.text(queue.start_time_s + length / 2, row, job.job_id, ha="center",
                          va="center", fontsize=7, clip_on=True)
    axes.set_yticks(range(len(rows)), list(rows))
    axes.invert_yaxis()
    axes.set_xlabel("time (s, snapshot clock): planned start to predicted completion")
    axes.set_title(_title(response, "per-device queues (orange = running)", len(jobs)))
    return figure


def _configurations(plt: Any, response: service_pb.SolveResponse) -> Any:
    jobs = list(response.plan.jobs)[:MAX_PLOTTED_JOBS]
    types = sorted({j.configuration.accelerator_type for j in jobs if j.HasField("configuration")})
    colors = {name: plt.get_cmap("tab10")(i % 10) for i, name in enumerate(types)}
    figure, axes = plt.subplots(figsize=(8.0, max(2.5, _ROW_INCHES * len(jobs) + 1.5)))
    for row, job in enumerate(jobs):
        if not job.HasField("configuration"):
            continue
        config = job.configuration
        axes.barh(row, config.devices, color=colors[config.accelerator_type])
        axes.text(config.devices, row, f" {config.nodes} node{'s' * (config.nodes != 1)}",
                  va="center", fontsize=7)
    for name in types:
        axes.barh(0, 0, color=colors[name], label=name)  # legend entries
    if types:
        axes.legend(title="type", loc="lower right")
    axes.set_yticks(range(len(jobs)), [job.job_id for job in jobs])
    axes.invert_yaxis()
    axes.set_xlabel("GPUs in the chosen configuration")
    axes.set_title(_title(response, "configuration per job", len(jobs)))
    return figure


def plot_plan(response: service_pb.SolveResponse, type_names: Sequence[str], path: str) -> None:
    """Draw the plan of `response` into the image file `path`."""
    plt = _pyplot()
    kind = _plan_kind(response)
    if kind is PlanKind.QUEUE:
        figure = _queues(plt, response)
    elif kind is PlanKind.CONFIGURATION:
        figure = _configurations(plt, response)
    else:
        figure = _time_shares(plt, response, type_names)
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=120)
    except (OSError, ValueError) as exc:
        raise InputError(f"--plot {path}: cannot write the picture: {exc}") from exc
    finally:
        plt.close(figure)
