"""Human-readable text for the command line: the plan table, the stats block, the policy list.

Pure functions from wire messages (or registry entries) to strings; no I/O. Every table cell
has its control characters escaped (a raw newline in a job id must not start a fake line).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from typing import Literal

from apportion.server.error_text import escape
from apportion.solver.registry import PolicySpec
from apportion.v1 import allocation_service_pb2 as service_pb

DEFAULT_MAX_ROWS = 50
"""Jobs printed before the table is cut short (0 or less = print every job)."""

_MAX_ID_WIDTH = 32
_TERMINATION_PREFIX = "TERMINATION_REASON_"
_STATUS_PREFIX = "JOB_STATUS_"


def termination_name(value: service_pb.TerminationReason.ValueType) -> str:
    """`TERMINATION_REASON_TIME_LIMIT`-style enum value as a short lower-case word."""
    try:
        name = service_pb.TerminationReason.Name(value)
    except ValueError:
        return f"unknown ({value})"
    return name.removeprefix(_TERMINATION_PREFIX).lower()


def _status_name(value: service_pb.JobStatus.ValueType) -> str:
    try:
        name = service_pb.JobStatus.Name(value)
    except ValueError:
        return f"unknown ({value})"
    return name.removeprefix(_STATUS_PREFIX).lower()


def _number(value: float, digits: int = 4) -> str:
    """Compact fixed/scientific number: 4 significant digits by default."""
    return f"{value:.{digits}g}"


def _share(value: float) -> str:
    """A time share in [0, 1]; '-' for none."""
    return f"{value:.3f}" if value > 0 else "-"


def _clip(text: str, width: int = _MAX_ID_WIDTH) -> str:
    """`text` escaped, then cut to `width` characters."""
    text = escape(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def _format_rows(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """Align columns: the first `left` columns left-aligned, the others right-aligned."""
    header = [escape(cell) for cell in header]
    rows = [[escape(cell) for cell in row] for row in rows]
    widths = [max(len(row[c]) for row in [header, *rows]) for c in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [
            cell.ljust(widths[c]) if c < left else cell.rjust(widths[c])
            for c, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _job_row(
    job: service_pb.JobAllocation, type_names: Sequence[str], with_status: bool,
    with_devices: bool = False,
) -> list[str]:
    row = [_clip(job.job_id)]
    row += [_share(job.time_share.get(name, 0.0)) for name in type_names]
    if with_devices:
        row.append(str(job.configuration.devices) if job.HasField("configuration") else "-")
    row += [
        _number(job.effective_throughput),
        _number(job.normalized_throughput),
        _number(job.objective_value),
    ]
    if with_status:
        status = _status_name(job.status)
        row.append(f"{status}: {job.reason}" if job.reason else status)
    return row


def plan_table(
    response: service_pb.SolveResponse,
    type_names: Sequence[str],
    max_rows: int = DEFAULT_MAX_ROWS,
) -> str:
    """Jobs × accelerator types: time share per type, then effective throughput (steps/s),
    normalized throughput and the job's objective value (level). At most `max_rows` jobs
    (<= 0: all), followed by a "... N more jobs" line."""
    jobs = list(response.plan.jobs)
    if not jobs:
        reason = termination_name(response.stats.termination)
        return f"(no plan: termination {reason})"
    names = list(type_names) or sorted({n for job in jobs for n in job.time_share})
    with_status = any(job.status != service_pb.JOB_STATUS_ALLOCATED for job in jobs)
    with_devices = any(job.HasField("configuration") for job in jobs)
    header = ["job", *names, *(["devices"] if with_devices else []),
              "throughput", "normalized", "level"]
    if with_status:
        header.append("status")
    shown = jobs if max_rows <= 0 else jobs[:max_rows]
    rows = [_job_row(job, names, with_status, with_devices) for job in shown]
    lines = _format_rows(header, rows)
    hidden = len(jobs) - len(shown)
    if hidden:
        lines.append(f"... {hidden} more jobs (use --all to print every job)")
    if response.plan.HasField("reclaim"):
        reclaim = response.plan.reclaim
        preempted = ", ".join(reclaim.preempted_job_ids) or "none"
        lines.append(f"reclaimed nodes: {', '.join(reclaim.nodes) or 'none'}; preempted: "
                     f"{preempted}")
    return "\n".join(lines)


def colocation_table(response: service_pb.SolveResponse, max_rows: int = DEFAULT_MAX_ROWS
                     ) -> str:
    """Space sharing: the pairs of jobs that share devices, with type and time share."""
    pairs = list(response.plan.colocated)
    shown = pairs if max_rows <= 0 else pairs[:max_rows]
    rows = [[_clip(p.job_a), _clip(p.job_b), p.accelerator_type, _share(p.time_share)]
            for p in shown]
    lines = ["shared devices:", *_format_rows(["job", "with", "type", "share"], rows, left=3)]
    if len(pairs) > len(shown):
        lines.append(f"... {len(pairs) - len(shown)} more pairs (use --all to print every pair)")
    return "\n".join(lines)


def _optional(
    stats: service_pb.SolveStats | service_pb.PlacementSummary,
    field: Literal["objective", "best_bound", "relative_gap"],
    digits: int = 10,
) -> str:
    return _number(getattr(stats, field), digits) if stats.HasField(field) else "-"


def _times(stats: service_pb.SolveStats) -> str:
    limit = f"{stats.time_limit_s:g} s" if stats.time_limit_s > 0 else "none"
    return (
        f"build {stats.build_time_s:.3f} s, solve {stats.solve_time_s:.3f} s, "
        f"wall {stats.wall_time_s:.3f} s (limit {limit})"
    )


def _model_size(stats: service_pb.SolveStats) -> str:
    size = stats.model_size
    text = f"{size.variables} variables, {size.constraints} constraints, {size.nonzeros} nonzeros"
    if size.integer_variables:
        text += f", {size.integer_variables} integer"
    return text


def stats_block(stats: service_pb.SolveStats) -> str:
    """The solve statistics and optimality certificate, one `label  value` line each."""
    sense = "maximize" if stats.maximize else "minimize"
    solver = " ".join(part for part in (stats.solver, stats.solver_version) if part) or "-"
    items: list[tuple[str, str]] = [
        ("termination", termination_name(stats.termination)),
        ("objective", f"{_optional(stats, 'objective')} ({sense})"),
        ("best bound", _optional(stats, "best_bound")),
        ("gap", _optional(stats, "relative_gap", 3)),
        ("policy", stats.policy or "-"),
        ("formulation", stats.formulation or "-"),
        ("solver", solver),
        ("time", _times(stats)),
        ("model size", _model_size(stats)),
        ("max violation", _number(stats.max_constraint_violation, 3)),
    ]
    if stats.detail:
        items.append(("detail", stats.detail))
    width = max(len(label) for label, _ in items)
    return "\n".join(f"{label.ljust(width)}  {value}" for label, value in items)


def solve_report(
    response: service_pb.SolveResponse,
    type_names: Sequence[str],
    max_rows: int = DEFAULT_MAX_ROWS,
) -> str:
    """The full `apportion solve` text output: plan table, blank line, stats block, and a
    closing note when the solve did not prove optimality."""
    parts = [plan_table(response, type_names, max_rows)]
    if response.plan.colocated:
        parts += ["", colocation_table(response, max_rows)]
    parts += ["", stats_block(response.stats)]
    if response.plan.HasField("placement"):
        parts += ["", placement_block(response, max_rows)]
    if response.stats.termination != service_pb.TERMINATION_REASON_OPTIMAL:
        reason = termination_name(response.stats.termination)
        parts += ["", f"note: the solve ended with termination {reason!r}, not a proven optimum"]
    return "\n".join(parts)


def placement_block(response: service_pb.SolveResponse, max_rows: int = DEFAULT_MAX_ROWS) -> str:
    """The placement stage's answer: one row per job with devices (nodes, kept / moved, its
    cost, widest level crossed), then the stage's certificate and the compared placers."""
    summary = response.plan.placement
    rows = []
    jobs = [job for job in response.plan.jobs if job.HasField("placement")]
    shown = jobs if max_rows <= 0 else jobs[:max_rows]
    for job in shown:
        place = job.placement
        nodes = ", ".join(f"{name}:{count}" for name, count in sorted(place.node_devices.items()))
        state = "kept" if place.kept else "moved" if place.migrated else \
            "resized" if place.resized else "preempted" if place.preempted else ""
        rows.append([_clip(job.job_id), nodes if place.placed else f"- ({place.reason})",
                     state, _number(place.cost), place.widest_level or "-"])
    lines = _format_rows(["job", "nodes:devices", "run", "cost", "crosses"], rows, left=3)
    if len(jobs) > len(shown):
        lines.append(f"... {len(jobs) - len(shown)} more jobs (use --all to print every job)")
    items = [
        ("placer", summary.placer),
        ("termination", termination_name(summary.termination)),
        ("cost", _optional(summary, "objective", 6) + " (minimize)"),
        ("best bound", _optional(summary, "best_bound", 6)),
        ("gap", _optional(summary, "relative_gap", 3)),
        ("placed", f"{summary.jobs_placed} jobs (value {_number(summary.placed_value)} of at "
                   f"most {_number(summary.placed_value_bound)}), "
                   f"{summary.jobs_not_placed} not placed"),
        ("time", f"{summary.solve_time_s:.3f} s"),
    ]
    for other in summary.compared:
        items.append((f"vs {other.placer}",
                       f"{other.jobs_placed} placed, cost {_number(other.objective)} "
                       f"({other.objective_difference:+.4g})"))
    if summary.detail:
        items.append(("detail", summary.detail))
    width = max(len(label) for label, _ in items)
    lines += [""] + [f"{label.ljust(width)}  {value}" for label, value in items]
    return "\n".join(lines)


def _wrapped(label: str, text: str, width: int = 88) -> list[str]:
    indent = " " * 4
    first = f"{indent}{label:<13}"
    return textwrap.wrap(
        text, width=width, initial_indent=first, subsequent_indent=" " * len(first)
    ) or [first.rstrip()]


def _joined(values: Iterable[str]) -> str:
    return ", ".join(values) or "-"


def policy_list(specs: Iterable[PolicySpec]) -> str:
    """The registered policies for `apportion policies`: name, then indented details."""
    blocks = []
    for spec in specs:
        lines = [f"{spec.name}  ({'maximize' if spec.maximize else 'minimize'})"]
        lines += _wrapped("aliases", _joined(sorted(spec.aliases)))
        lines += _wrapped("parameters", spec.parameters_message or "none")
        lines += _wrapped("inputs", _joined(spec.required_inputs))
        if spec.capabilities.partitionable:
            lines += _wrapped("options", "partitions (POP: k sub-problems in parallel)")
        lines += _wrapped("description", spec.description)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
