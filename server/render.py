"""Human-readable text for the command line: the plan table, the stats block, the policy list.

Pure functions from wire messages (or registry entries) to strings; no I/O. Every table cell
has its control characters escaped (a raw newline in a job id must not start a fake line).
"""

from __future__ import annotations

import contextlib
import csv
import io
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from apportion.server.error_text import escape
from apportion.solver.capabilities import Capabilities, PlanKind, Quantity
from apportion.solver.errors import ValidationError
from apportion.solver.registry import PolicySpec, lookup
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


def _format_rows(
    header: Sequence[str], rows: Sequence[Sequence[str]], left: int | Sequence[bool] = 1
) -> list[str]:
    """Align columns: left-aligned where `left` says so (a count of leading columns or a flag
    per column), the others right-aligned."""
    flags = [c < left for c in range(len(header))] if isinstance(left, int) else list(left)
    header = [escape(cell) for cell in header]
    rows = [[escape(cell) for cell in row] for row in rows]
    widths = [max(len(row[c]) for row in [header, *rows]) for c in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [
            cell.ljust(widths[c]) if flags[c] else cell.rjust(widths[c])
            for c, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


@dataclass(frozen=True)
class Column:
    """One column of the plan table: its heading, the table cell (short) and the CSV value
    (full precision) of a job."""

    heading: str
    cell: Callable[[service_pb.JobAllocation], str]
    value: Callable[[service_pb.JobAllocation], object]
    left: bool = False


def _policy(response: service_pb.SolveResponse) -> PolicySpec | None:
    """The registry entry of the policy that produced `response` (None when unknown)."""
    try:
        return lookup(response.stats.policy)
    except ValidationError:
        return None


def _share_column(type_name: str) -> Column:
    """The job's time share on one accelerator type."""

    def value(job: service_pb.JobAllocation) -> float:
        return job.time_share.get(type_name, 0.0)

    return Column(type_name, lambda job: _share(value(job)), value)


def _part_column(
    heading: str,
    part: Callable[[service_pb.JobAllocation], Any],
    field: Callable[[Any], Any],
    text: Callable[[Any], str] = str,
    left: bool = False,
) -> Column:
    """A column showing `field` of a part of the job's allocation (its configuration, its
    queue place) that may be unset: '-' in the table and empty in CSV when it is."""

    def cell(job: service_pb.JobAllocation) -> str:
        found = part(job)
        return "-" if found is None else text(field(found))

    def value(job: service_pb.JobAllocation) -> object:
        found = part(job)
        return "" if found is None else field(found)

    return Column(heading, cell, value, left)


def _configuration(job: service_pb.JobAllocation) -> service_pb.ConfigurationChoice | None:
    return job.configuration if job.HasField("configuration") else None


def _queue(job: service_pb.JobAllocation) -> service_pb.QueueAssignment | None:
    return job.queue if job.HasField("queue") else None


def _device(queue: service_pb.QueueAssignment) -> str:
    return f"{queue.accelerator_type}[{','.join(map(str, queue.devices))}]"


def _configuration_columns() -> list[Column]:
    """The chosen configuration of a configuration policy (Sia, Pollux)."""
    return [
        _part_column("type", _configuration, lambda c: c.accelerator_type, _clip, left=True),
        _part_column("nodes", _configuration, lambda c: c.nodes),
        _part_column("GPUs", _configuration, lambda c: c.devices),
        _part_column("goodput", _configuration, lambda c: c.goodput, _number),
    ]


def _queue_columns() -> list[Column]:
    """Where a queue policy (AlloX) runs the job: device, position, start and completion."""
    return [
        _part_column("device", _queue, _device, _clip, left=True),
        _part_column("position", _queue, lambda q: q.position),
        _part_column("start (s)", _queue, lambda q: q.start_time_s,
                     lambda v: _number(v, 6)),
        _part_column("completion (s)", _queue, lambda q: q.completion_time_s,
                     lambda v: _number(v, 6)),
    ]


def plan_columns(
    response: service_pb.SolveResponse, type_names: Sequence[str], *, with_status: bool
) -> list[Column]:
    """The plan table's columns in the policy's own terms: its plan kind decides the
    allocation columns (time shares per type, a configuration, a queue place) and its
    registry entry names the job's value in its objective (rho, completion time, ...)."""
    spec = _policy(response)
    kind = spec.capabilities.plan_kind if spec else None
    columns = [Column("job", lambda job: _clip(job.job_id), lambda job: job.job_id, left=True)]
    if with_status:
        columns.append(Column("status", lambda job: _status_name(job.status),
                              lambda job: _status_name(job.status), left=True))
    if kind is PlanKind.CONFIGURATION:
        columns += _configuration_columns()
    elif kind is PlanKind.QUEUE:
        columns += _queue_columns()
    else:
        columns += [_share_column(name) for name in type_names]
        if any(job.HasField("configuration") for job in response.plan.jobs):  # elastic
            columns.append(_part_column("devices", _configuration, lambda c: c.devices))
    columns += [
        Column("throughput (steps/s)", lambda job: _number(job.effective_throughput),
               lambda job: job.effective_throughput),
        Column("normalized", lambda job: _number(job.normalized_throughput),
               lambda job: job.normalized_throughput),
    ]
    job_value = spec.reporting.job_value if spec else Quantity("objective value")
    if job_value is not None:
        columns.append(Column(job_value.heading(), lambda job: _number(job.objective_value),
                              lambda job: job.objective_value))
    if kind is PlanKind.MARKET:
        columns.append(Column("spending", lambda job: _number(job.spending),
                              lambda job: job.spending))
    return columns


def _type_names(response: service_pb.SolveResponse, type_names: Sequence[str]) -> list[str]:
    return list(type_names) or sorted({n for job in response.plan.jobs for n in job.time_share})


def _notes(jobs: Sequence[service_pb.JobAllocation], max_rows: int) -> list[str]:
    """Why jobs are not allocated, one line each (below the table, so that a long reason
    does not widen every line of it)."""
    reasons = [job for job in jobs if job.reason]
    shown = reasons if max_rows <= 0 else reasons[:max_rows]
    lines = [f"  {_clip(job.job_id)}: {escape(job.reason)}" for job in shown]
    if len(reasons) > len(shown):
        lines.append(f"  ... {len(reasons) - len(shown)} more")
    return ["", "notes:", *lines] if lines else []


def plan_table(
    response: service_pb.SolveResponse,
    type_names: Sequence[str],
    max_rows: int = DEFAULT_MAX_ROWS,
) -> str:
    """Jobs in the policy's terms (`plan_columns`): at most `max_rows` jobs (<= 0: all),
    followed by a "... N more jobs" line, then the reasons of jobs not allocated and, for a
    market, the prices."""
    jobs = list(response.plan.jobs)
    if not jobs:
        reason = termination_name(response.stats.termination)
        return f"(no plan: termination {reason})"
    with_status = any(job.status != service_pb.JOB_STATUS_ALLOCATED for job in jobs)
    columns = plan_columns(response, _type_names(response, type_names), with_status=with_status)
    shown = jobs if max_rows <= 0 else jobs[:max_rows]
    rows = [[column.cell(job) for column in columns] for job in shown]
    lines = _format_rows([c.heading for c in columns], rows,
                         left=[c.left for c in columns])
    hidden = len(jobs) - len(shown)
    if hidden:
        lines.append(f"... {hidden} more jobs (use --all to print every job)")
    if response.plan.HasField("reclaim"):
        reclaim = response.plan.reclaim
        preempted = ", ".join(reclaim.preempted_job_ids) or "none"
        lines.append(f"reclaimed nodes: {', '.join(reclaim.nodes) or 'none'}; preempted: "
                     f"{preempted}")
    lines += _notes(jobs, max_rows)
    spec = _policy(response)
    if spec is not None and spec.capabilities.plan_kind is PlanKind.MARKET:
        prices = ", ".join(f"{escape(name)} {_number(price)}"
                           for name, price in sorted(response.plan.accelerator_prices.items()))
        lines += ["", f"prices per device: {prices}"]
    return "\n".join(lines)


def plan_csv(response: service_pb.SolveResponse, type_names: Sequence[str]) -> str:
    """Every job as one CSV row (RFC 4180, full precision), with status and reason always."""
    columns = plan_columns(response, _type_names(response, type_names), with_status=True)
    columns.append(Column("reason", lambda job: job.reason, lambda job: job.reason))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([c.heading for c in columns])
    for job in response.plan.jobs:
        writer.writerow([column.value(job) for column in columns])
    return out.getvalue()


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


def _in_steps(stats: service_pb.SolveStats) -> list[tuple[str, str]]:
    """The objective and bound with throughputs in steps/s, where the policy reports them."""
    if not stats.HasField("throughput_objective"):
        return []
    bound = (_number(stats.throughput_best_bound, 10)
             if stats.HasField("throughput_best_bound") else "-")
    return [("in steps/s", f"{_number(stats.throughput_objective, 10)} (bound {bound})")]


def stats_block(stats: service_pb.SolveStats) -> str:
    """The solve statistics and optimality certificate, one `label  value` line each; the
    objective named as its policy declares it (e.g. "largest rho", "makespan (s)")."""
    sense = "maximize" if stats.maximize else "minimize"
    with contextlib.suppress(ValidationError):  # an unknown policy: the sense alone
        sense += f" {lookup(stats.policy).reporting.objective.heading()}"
    solver = " ".join(part for part in (stats.solver, stats.solver_version) if part) or "-"
    items: list[tuple[str, str]] = [
        ("termination", termination_name(stats.termination)),
        ("objective", f"{_optional(stats, 'objective')} ({sense})"),
        ("best bound", _optional(stats, "best_bound")),
        *_in_steps(stats),
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


_PLAN_KINDS = {
    PlanKind.TIME_SHARE: "time shares per type",
    PlanKind.QUEUE: "per-device queues",
    PlanKind.CONFIGURATION: "one configuration per job",
    PlanKind.MARKET: "time shares at market prices",
    PlanKind.WINDOW: "a 0/1 schedule over a window of rounds",
    PlanKind.GROUPS: "groups of jobs sharing devices",
}


def _reads(caps: Capabilities) -> list[str]:
    flags = [
        (caps.reads_tenants, "tenants"),
        (caps.needs_history, "history"),
        (caps.needs_remaining_work, "remaining work"),
        (caps.uses_colocations, "pair throughputs"),
        (caps.reads_epoch_profiles, "epoch profiles"),
        (caps.reads_configurations, "configurations"),
    ]
    return [name for on, name in flags if on]


def policy_list(specs: Iterable[PolicySpec]) -> str:
    """The registered policies for `apportion policies`: name, then indented details (what
    it optimizes and in which unit, its plan, what it reads, its options, its inputs)."""
    blocks = []
    for spec in specs:
        caps = spec.capabilities
        sense = "maximize" if spec.maximize else "minimize"
        job_value = spec.reporting.job_value
        lines = [f"{spec.name}  ({sense} {spec.reporting.objective.heading()})"]
        lines += _wrapped("aliases", _joined(sorted(spec.aliases)))
        lines += _wrapped(
            "parameters",
            f"{spec.parameters_field} ({spec.parameters_message})"
            if spec.parameters_field else "none",
        )
        lines += _wrapped(
            "plan",
            f"{_PLAN_KINDS[caps.plan_kind]}; {caps.problem_class.value}, gap "
            f"{caps.default_relative_gap:g}; per job: "
            f"{job_value.heading() if job_value else 'throughput (steps/s)'}",
        )
        lines += _wrapped("reads", _joined(_reads(caps)))
        options = [name for on, name in ((caps.round_schedule, "schedule_rounds"),
                                         (bool(spec.packed_entry_point), "space_sharing"),
                                         (caps.partitionable, "partitions (POP: k sub-problems "
                                          "in parallel)"))
                   if on]
        lines += _wrapped("options", _joined(options))
        lines += _wrapped("inputs", _joined(spec.required_inputs))
        lines += _wrapped("description", spec.description)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
