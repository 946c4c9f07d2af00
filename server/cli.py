"""The `apportion` command line: solve / validate a snapshot file, list policies, serve gRPC.

Exit codes: 0 success (including a solve that ends infeasible or at its time limit: the
termination is printed), 2 invalid input (unreadable file, bad JSON, unknown field, every
validation violation as ``field: description`` on stderr, usage errors), 3 internal failure
(one line; ``--debug`` prints the traceback), 141 (128 + SIGPIPE) when the reader of the
output went away (``apportion solve ... | head``), silently, as Unix tools do. Messages echo
values from the input bounded and with control characters escaped (`error_text`).

Importing this module must stay cheap (`apportion --help` answers instantly): numpy, solvers,
gRPC and the generated protobuf modules are imported inside the subcommand functions only.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from apportion.server.cli_errors import EXIT_INTERNAL, EXIT_INVALID_INPUT, EXIT_OK, InputError
from apportion.server.error_text import bounded, listed, one_line

if TYPE_CHECKING:
    from apportion.datasets.cluster import ClusterSpec
    from apportion.datasets.shockwave import EpochProfile
    from apportion.datasets.snapshot import GoodputSource
    from apportion.datasets.table import JobTable
    from apportion.v1 import allocation_service_pb2 as service_pb

PROG = "apportion"
MAX_PRINTED_VIOLATIONS = 100
"""Violations printed for one input; the rest are counted in a final line."""
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


# --------------------------------------------------------------------------- input


def load_request(path: str) -> service_pb.SolveRequest:
    """Read a snapshot file: the proto3 canonical JSON of `apportion.v1.SolveRequest`.

    Raises `InputError` naming the file for an unreadable file, invalid JSON or an unknown
    field.
    """
    return load_request_serialized(path)[0]


def load_request_serialized(path: str) -> tuple[service_pb.SolveRequest, bytes | None]:
    """`load_request`, with the bytes the request was parsed from when at hand (the jobs are
    decoded from them; None = from the message)."""
    from google.protobuf import json_format

    from apportion.server.snapshot_json import parse_request_serialized

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputError(f"{path}: cannot read file: {reason}") from exc
    try:
        return parse_request_serialized(text)
    except json_format.ParseError as exc:
        raise InputError(f"{path}: not a valid SolveRequest JSON: {exc}") from exc


def _apply_overrides(
    request: service_pb.SolveRequest, policy: str | None, time_limit: float | None
) -> None:
    """Command-line options take precedence over the file."""
    if policy is not None:
        request.policy.name = policy
    if time_limit is not None:
        request.options.time_limit_s = time_limit


# --------------------------------------------------------------------------- subcommands


def cmd_solve(args: argparse.Namespace) -> int:
    """`apportion solve FILE`: solve and print the plan (table, CSV or JSON), optionally
    drawing it (`--plot`)."""
    from google.protobuf import json_format

    from apportion.server import render
    from apportion.server.pipeline import solve_request_typed
    from apportion.server.progress import progress
    from apportion.solver.deadline import Deadline

    arrived = time.monotonic()  # the time limit counts from here: reading the file included
    deadline = Deadline.after(args.time_limit) if args.time_limit is not None else None
    request, serialized = load_request_serialized(args.file)
    # the overrides change the policy and options only: the bytes still hold the same jobs
    _apply_overrides(request, args.policy, args.time_limit)
    with progress(f"solving {len(request.snapshot.jobs)} jobs"):
        response = solve_request_typed(request, deadline, arrived, serialized).response
    type_names = [t.name for t in request.snapshot.cluster.accelerator_types]
    output_format = "json" if args.json else args.format
    if output_format == "json":
        print(json_format.MessageToJson(response, preserving_proto_field_name=False))
    elif output_format == "csv":
        sys.stdout.write(render.plan_csv(response, type_names))
    else:
        max_rows = 0 if args.all else render.DEFAULT_MAX_ROWS
        print(render.solve_report(response, type_names, max_rows))
    if args.plot:
        from apportion.server.plot import plot_plan

        plot_plan(response, type_names, args.plot)
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    """`apportion validate FILE`: parse and validate without solving."""
    from apportion.server.convert import request_to_model

    request = load_request(args.file)
    _apply_overrides(request, args.policy, None)
    problem, policy, _ = request_to_model(request)
    alias = (
        f" (requested as {policy.requested_name!r})"
        if (policy.requested_name and policy.requested_name != policy.name)
        else ""
    )
    print(
        f"ok: {problem.jobs.num_jobs} jobs, {problem.cluster.num_types} accelerator types, "
        f"policy {policy.name}{alias}"
    )
    return EXIT_OK


def cmd_policies(args: argparse.Namespace) -> int:
    """`apportion policies`: the policy registry."""
    from apportion.server.render import policy_list
    from apportion.solver.registry import policies

    print(policy_list(policies()))
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    """`apportion serve`: run the gRPC server (arguments defined by apportion.server.app)."""
    from apportion.server.app import run_from_args  # type: ignore[import-not-found,unused-ignore]

    code: int = run_from_args(args)
    return code


def cmd_snapshot(args: argparse.Namespace) -> int:
    """`apportion snapshot`: a trace (+ cluster + throughputs) -> snapshot JSON at time t."""
    from apportion.datasets.cluster import ClusterSpec
    from apportion.datasets.errors import TraceFormatError
    from apportion.datasets.generators import builtin_throughputs
    from apportion.datasets.readers import read_trace
    from apportion.datasets.snapshot import build_request, render_request

    try:
        table = read_trace(args.format, args.trace, tasks=args.tasks,
                           group_tags=args.group_tags, skip_bad=args.skip_bad)
        time_s = snapshot_time(args.time, table.origin_s)
        if args.openb_nodes:
            from apportion.datasets.openb import read_openb_nodes

            cluster = read_openb_nodes(args.openb_nodes, skip_bad=args.skip_bad)
        elif args.nodes:
            cluster = ClusterSpec.parse_nodes(args.nodes)
        else:
            cluster = ClusterSpec.parse(args.cluster)
        if args.throughputs == "builtin":
            import numpy as np

            exact = np.unique(table.gpus[np.isfinite(table.gpus)]) if args.gpus == "exact" else ()
            throughputs = builtin_throughputs(cluster.types, extra_scale_factors=[
                int(g) for g in exact if g >= 1 and g == int(g)])
            if args.colocations:
                from apportion.datasets.generators import pair_throughputs

                throughputs = pair_throughputs(throughputs, seed=args.seed,
                                               scale_factors=(1, 2, 4, 8))
        else:
            from apportion.datasets.throughput import read_gavel_throughputs

            throughputs = read_gavel_throughputs(args.throughputs, pairs=args.colocations)
        epoch_profiles = _snapshot_profiles(args.profiles, table, args.seed)
        goodputs = _snapshot_goodputs(args.goodputs, cluster, args.seed)
    except TraceFormatError as exc:
        raise InputError(str(exc)) from exc
    except (OSError, ValueError) as exc:
        raise InputError(str(exc)) from exc
    if table.report is not None:
        _err(table.report.summary())
    request, report = build_request(
        table,
        cluster,
        throughputs,
        time_s,
        seed=args.seed,
        policy=args.policy,
        round_duration_s=args.round_duration,
        colocations=args.colocations,
        epoch_profiles=epoch_profiles,
        goodputs=goodputs,
        gpus=args.gpus,
        start_times=args.start_times,
    )
    _err(report.summary())
    text = render_request(request)
    if args.output and args.output != "-":
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def snapshot_time(text: str, origin_s: float) -> float:
    """`--time`: seconds from the trace origin, or an ISO 8601 date and time (UTC unless it
    says otherwise) for a trace with timestamps (`origin_s`: the origin's Unix time, 0 for a
    trace without)."""
    try:
        return float(text)
    except ValueError:
        pass
    from datetime import UTC, datetime

    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(
            f"--time {text!r}: not a number of seconds nor an ISO date (2017-10-03T12:00:00)"
        ) from exc
    if origin_s == 0:
        raise ValueError(f"--time {text!r}: this trace has no timestamps; give seconds from "
                         "its first arrival")
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp() - origin_s


def _snapshot_profiles(
    spec: str | None, table: JobTable, seed: int
) -> dict[str, EpochProfile] | None:
    """`--profiles`: None, 'builtin' (generated per row) or a Shockwave profile file."""
    if not spec:
        return None
    from apportion.datasets import snapshot

    if spec == "builtin":
        return snapshot.builtin_epoch_profiles(table, seed=seed)
    from apportion.datasets.shockwave import read_shockwave_profiles

    return snapshot.profiles_by_job_id(read_shockwave_profiles(spec))


def _snapshot_goodputs(spec: str | None, cluster: ClusterSpec, seed: int) -> GoodputSource | None:
    """`--goodputs`: None, 'builtin' (synthetic per job) or a Sia profile directory."""
    if not spec:
        return None
    from apportion.datasets import snapshot

    if spec == "builtin":
        return snapshot.builtin_goodputs(cluster, seed=seed)
    return snapshot.profile_goodputs(spec)


def _add_snapshot(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    from apportion.datasets.snapshot_modes import GPU_MODES, START_MODES

    snap = sub.add_parser(
        "snapshot",
        help="build a snapshot JSON from a job trace at time T",
        description="Read a job trace, keep the jobs active at --time (arrived, not finished), "
        "attach throughputs and write the SolveRequest JSON for `apportion solve`. Read "
        "problems, excluded jobs and every changed or guessed value (GPU rounding, drawn job "
        "types, start times, steps from durations) are counted on stderr.",
    )
    snap.add_argument("trace", metavar="TRACE", help="trace file")
    snap.add_argument(
        "--format",
        required=True,
        choices=(
            "helios",
            "philly-csv",
            "philly-json",
            "pai",
            "openb",
            "gavel",
            "shockwave",
            "sia",
        ),
        help="trace format",
    )
    snap.add_argument("--tasks", metavar="FILE", help="PAI task table (format pai)")
    snap.add_argument(
        "--group-tags",
        metavar="FILE",
        help="PAI group_tag table (format pai, optional): gpu_type_spec -> the job's GPU type, "
        "workload -> its job type (matches --goodputs DIR applications, e.g. bert)",
    )
    snap.add_argument(
        "--time",
        required=True,
        metavar="TIME",
        help="snapshot time: seconds from the trace origin (earliest arrival), or for a trace "
        "with timestamps (helios, philly, pai) an ISO date and time, e.g. 2017-10-03T12:00 "
        "(UTC unless an offset is given)",
    )
    where = snap.add_mutually_exclusive_group()
    where.add_argument(
        "--cluster",
        default="v100:36,p100:36,k80:36",
        metavar="SPEC",
        help="TYPE:COUNT,... (default Gavel's 36/36/36); each type is one virtual node",
    )
    where.add_argument(
        "--nodes",
        metavar="SPEC",
        help="TYPE:NODES:GPUS,... nodes of GPUS devices each (e.g. a100:4:8,t4:2:4), so that "
        "Sia's multi-node configurations fit",
    )
    where.add_argument("--openb-nodes", metavar="FILE", help="cluster from an openb node list")
    snap.add_argument(
        "--gpus",
        choices=GPU_MODES,
        default="power-of-two",
        help="power-of-two: round each job's GPU count up to a power of two, at most 8 (Gavel's "
        "tables; default); exact: keep it (a fractional count excludes the job). Changes are "
        "counted on stderr",
    )
    snap.add_argument(
        "--start-times",
        choices=START_MODES,
        default="fifo",
        help="for a trace without start times (gavel, shockwave, sia): fifo = from a "
        "first-come-first-served replay on the cluster (default); arrival = every job runs "
        "from its arrival (more running jobs than GPUs). Counted on stderr",
    )
    snap.add_argument(
        "--throughputs",
        default="builtin",
        metavar="FILE",
        help="Gavel-schema throughput JSON, or 'builtin' (synthetic, default)",
    )
    snap.add_argument("--seed", type=int, default=0, help="seed for drawn job types")
    snap.add_argument("--policy", default="weighted_max_min_fairness", metavar="NAME")
    snap.add_argument("--round-duration", type=float, default=0.0, metavar="SECONDS")
    snap.add_argument(
        "--colocations",
        action="store_true",
        help="attach job types and type-pair (space-sharing) throughputs from the table's "
        "pair entries (builtin: synthetic pairs), for the _packed policies",
    )
    snap.add_argument(
        "--profiles",
        metavar="FILE",
        help="Shockwave per-epoch profiles (JSON list, .gz allowed), matched by job id, or "
        "'builtin' (synthetic, one per trace row): attach epoch_profile and epochs done / "
        "total for --policy shockwave (needs a cluster with one accelerator type)",
    )
    snap.add_argument(
        "--goodputs",
        metavar="DIR",
        help="Sia goodput per configuration for --policy sia/pollux: 'builtin' (synthetic, "
        "seeded per job id) or a directory of Sia profiles <application>/placements-<gpu>.csv "
        "matched by the job's application (profiled samples/s used as the goodput)",
    )
    snap.add_argument(
        "--skip-bad",
        action="store_true",
        help="skip malformed rows (counted and reported) instead of failing",
    )
    snap.add_argument("-o", "--output", metavar="FILE", help="output file (default stdout)")
    snap.set_defaults(handler=cmd_snapshot)
    return snap


# --------------------------------------------------------------------------- parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("apportion")
    except PackageNotFoundError:
        return "unknown"


def _add_common(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: a subcommand's --debug must not reset one given before the subcommand.
    parser.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print a traceback on internal errors",
    )


def _add_input(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file", metavar="FILE", help="snapshot JSON (canonical JSON of SolveRequest)"
    )
    parser.add_argument(
        "--policy", metavar="NAME", help="policy name or alias (overrides the file)"
    )


def build_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The top-level parser and its `serve` subparser (whose options are added lazily)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Optimization-based allocation of shared, heterogeneous GPU clusters.",
        epilog="Exit codes: 0 ok (also infeasible / time-limit solves), 2 invalid input, "
        "3 internal error.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument("--debug", action="store_true", help="print a traceback on internal errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    solve = sub.add_parser("solve", help="solve a snapshot file and print the plan")
    _add_input(solve)
    solve.add_argument(
        "--time-limit",
        metavar="SECONDS",
        type=float,
        help="time limit from the start of the command, reading the file included "
        "(overrides the file's)",
    )
    solve.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="table: the plan in the policy's terms and the solve statistics (default); csv: "
        "one row per job, full precision; json: the SolveResponse",
    )
    solve.add_argument("--json", action="store_true", help="same as --format json")
    solve.add_argument(
        "--all", action="store_true", help="table: print every job (default: first 50)"
    )
    solve.add_argument(
        "--plot",
        metavar="FILE",
        help="also draw the plan into an image (.png, .svg, .pdf): time shares per job and "
        "type, AlloX's queues or Sia's configurations (needs matplotlib: apportion[plot])",
    )
    solve.set_defaults(handler=cmd_solve)

    validate = sub.add_parser("validate", help="check a snapshot file without solving")
    _add_input(validate)
    validate.set_defaults(handler=cmd_validate)

    listing = sub.add_parser("policies", help="list the registered policies")
    listing.set_defaults(handler=cmd_policies)

    serve = sub.add_parser(
        "serve",
        help="run the gRPC allocation service",
        description="Run the apportion.v1.AllocationService gRPC server (plus health and "
        "reflection) until SIGINT/SIGTERM.",
        add_help=False,
    )
    serve.set_defaults(handler=cmd_serve)

    snapshot = _add_snapshot(sub)

    from apportion.simulator.cli import add_simulate

    simulate = add_simulate(sub)

    for subparser in (solve, validate, listing, serve, snapshot, simulate):
        _add_common(subparser)
    return parser, serve


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line. The `serve` options come from `apportion.server.app`, which
    imports gRPC, so that module is loaded only when the command is `serve`."""
    parser, serve = build_parser()
    first, _ = parser.parse_known_args(argv)
    if first.command == "serve":
        # (ignore: lets mypy pass while app.py is being written; harmless once it exists)
        from apportion.server.app import add_serve_arguments  # type: ignore[import-not-found,unused-ignore]

        serve.add_argument("-h", "--help", action="help", help="show this help message and exit")
        add_serve_arguments(serve)
    return parser.parse_args(argv)


# --------------------------------------------------------------------------- main


def _err(message: str) -> None:
    print(message, file=sys.stderr)


def run(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a subcommand, mapping exceptions to exit codes and messages on stderr."""
    from apportion.solver.errors import ValidationError

    try:
        code = handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        return _output_closed()
    except InputError as exc:
        _err(f"{PROG}: error: {bounded(str(exc))}")
        return EXIT_INVALID_INPUT
    except ValidationError as exc:
        for violation in listed(exc.violations, MAX_PRINTED_VIOLATIONS):
            _err(str(violation))  # one `field: description` line each
        return EXIT_INVALID_INPUT
    except KeyboardInterrupt:
        _err(f"{PROG}: interrupted")
        return 130
    except Exception as exc:
        if getattr(args, "debug", False):
            traceback.print_exc()
        else:
            _err(
                f"{PROG}: internal error: {one_line(f'{type(exc).__name__}: {exc}')} "
                "(run with --debug for a traceback)"
            )
        return EXIT_INTERNAL


def _output_closed() -> int:
    """The reader of stdout went away: stop quietly, as a Unix tool killed by SIGPIPE does
    (stdout is pointed at /dev/null so that the interpreter's final flush stays silent)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; returns the exit code."""
    try:
        args = parse_args(argv)
    except ImportError as exc:  # `serve` without apportion.server.app / grpc
        _err(f"{PROG}: error: the gRPC server is not available: {exc}")
        return EXIT_INTERNAL
    except SystemExit as exc:  # --help, --version (0) and usage errors (2)
        return exc.code if isinstance(exc.code, int) else EXIT_INVALID_INPUT
    handler: Callable[[argparse.Namespace], int] = args.handler
    return run(handler, args)


if __name__ == "__main__":
    sys.exit(main())
