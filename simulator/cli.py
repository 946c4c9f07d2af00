"""`apportion simulate` (alias `apportion replay`): replay a trace or generated jobs on a
cluster through one or more policies, over seeds and loads, and report JCT, finish-time
fairness, utilization and solver time as tables, plots and an HTML report.

Registered on the top-level parser by `apportion.server.cli` through `add_simulate`; the heavy
imports happen inside `cmd_simulate` so that `apportion --help` stays instant.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from apportion.server.cli_errors import EXIT_OK, InputError

if TYPE_CHECKING:
    from apportion.datasets.cluster import ClusterSpec
    from apportion.datasets.throughput import ThroughputTable
    from apportion.simulator.engine import SimulationConfig
    from apportion.simulator.metrics import RunResult
    from apportion.simulator.workload import Workload

FORMATS = ("helios", "philly-csv", "philly-json", "pai", "openb", "gavel", "shockwave", "sia")
"""`apportion.datasets.readers.FORMATS`, spelled here so that building the parser stays cheap."""
DEFAULT_CLUSTER = "v100:36,p100:36,k80:36"
DEFAULT_PROFILE_GPUS = 32
SHOCKWAVE_FLAGS = {
    "shockwave_k": "makespan_weight",
    "shockwave_lambda": "fairness_exponent",
    "shockwave_window": "planning_rounds",
    "shockwave_rho_max": "rho_max",
}
"""Named flags -> fields of the parameters of planning-window policies."""


def add_simulate(sub: Any) -> argparse.ArgumentParser:
    """The `simulate` subcommand (alias `replay`) on the top-level subparsers."""
    p: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        aliases=["replay"],
        help="replay a trace or generated jobs through policies and compare them",
        description="Replay jobs (a trace, per-epoch profiles or Gavel-style generated jobs) on "
        "a cluster through each policy, round by round, and report JCT, finish-time fairness, "
        "utilization and solver time per run; --seeds and --loads make a sweep run in "
        "parallel processes (or on Ray). Read problems are reported on stderr.",
    )
    src = p.add_argument_group("jobs")
    src.add_argument("trace", nargs="?", metavar="TRACE", help="trace file (with --format)")
    src.add_argument("--format", choices=FORMATS, help="trace format")
    src.add_argument("--tasks", metavar="FILE", help="PAI task table (format pai)")
    src.add_argument("--group-tags", metavar="FILE", help="PAI group_tag table (format pai)")
    src.add_argument("--skip-bad", action="store_true", help="skip malformed trace rows")
    src.add_argument(
        "--profiles",
        metavar="FILE",
        help="Shockwave per-epoch profiles (.json/.json.gz): the workload itself "
        "without TRACE, else matched to the trace's jobs by id; 'builtin' = "
        "synthetic profiles for the trace's jobs",
    )
    src.add_argument(
        "--synthetic",
        type=int,
        metavar="N",
        help="N jobs from Gavel's generator instead of a trace",
    )
    src.add_argument(
        "--rate",
        type=float,
        default=0.0,
        metavar="JOBS_PER_HOUR",
        help="--synthetic arrivals: Poisson at this rate (0 = all at time 0)",
    )
    src.add_argument(
        "--multi-gpu",
        action="store_true",
        help="--synthetic: Gavel's multi-GPU sizes (1/2/4/8 GPUs w.p. "
        "0.7/0.1/0.15/0.05) instead of 1-GPU jobs",
    )
    src.add_argument("--jobs", type=int, metavar="N", help="keep the first N jobs")
    src.add_argument(
        "--window",
        type=int,
        nargs=2,
        metavar=("START", "END"),
        help="measure jobs START..END-1 (trace order); the run ends when they "
        "finished (Gavel's continuous-trace measurement)",
    )
    src.add_argument(
        "--max-scale-factor",
        type=int,
        default=8,
        metavar="N",
        help="cap on a job's gang (GPUs rounded up to a power of two; default 8)",
    )
    cl = p.add_argument_group("cluster and speeds")
    cl.add_argument(
        "--cluster",
        metavar="SPEC",
        help=f"TYPE:COUNT[:GPUS_PER_NODE],... (default {DEFAULT_CLUSTER}; "
        f"{DEFAULT_PROFILE_GPUS} 'gpu' devices for a profile file)",
    )
    cl.add_argument("--gpus", type=int, metavar="G", help="G devices of one type 'gpu'")
    cl.add_argument(
        "--gpus-per-node",
        type=int,
        default=0,
        metavar="N",
        help="node size for the types of --cluster that give none (0 = no nodes)",
    )
    cl.add_argument(
        "--cluster-file",
        metavar="FILE",
        help="cluster as apportion.v1.Cluster JSON (or a snapshot), or an openb node list (.csv)",
    )
    cl.add_argument(
        "--throughputs",
        default="builtin",
        metavar="FILE",
        help="Gavel-schema throughput JSON, or 'builtin' (synthetic, default)",
    )
    cl.add_argument(
        "--goodputs",
        metavar="DIR",
        help="goodput per configuration for configuration policies (sia, pollux): "
        "'builtin' or a directory of Sia profiles <application>/placements-<gpu>.csv",
    )
    cl.add_argument(
        "--resource-profiles",
        metavar="SOURCE",
        help="each job's throughput over CPU cores and host memory per GPU, for resource-shape "
        "policies (synergy): 'builtin' (a synthetic concave grid per job type) or Synergy's "
        "throughput-matrix CSV (each job type draws one of its models); nodes without cpus "
        "and memoryGib get 3 cores and 62.5 GiB per GPU, a cluster without nodes 8-GPU nodes",
    )
    cl.add_argument(
        "--colocations",
        action="store_true",
        help="pair throughputs from the table, for space-sharing policies",
    )
    pol = p.add_argument_group("policies")
    pol.add_argument(
        "--policies",
        nargs="+",
        default=["max_min_fairness_perf"],
        metavar="NAME",
        help="policies or aliases (default: %(default)s); NAME=LABEL names a run",
    )
    pol.add_argument("--compat", default="none", metavar="NAME",
                     help="an upstream system's behaviour: none (default), gavel, shockwave, "
                          "sia, tiresias, synergy (Synergy's TUNE instead of the exact OPT), "
                          "muri, antman, lucid, iadeep")
    pol.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="POLICY.FIELD=VALUE",
        help="a policy parameter, e.g. shockwave.planning_rounds=30 (repeatable)",
    )
    pol.add_argument(
        "--shockwave-k", type=float, metavar="K", help="Shockwave's k (makespan weight)"
    )
    pol.add_argument(
        "--shockwave-lambda",
        type=float,
        metavar="LAMBDA",
        help="Shockwave's lambda (fairness exponent)",
    )
    pol.add_argument(
        "--shockwave-window",
        type=int,
        metavar="ROUNDS",
        help="Shockwave's planning window (rounds)",
    )
    pol.add_argument("--shockwave-rho-max", type=float, metavar="RHO", help="Shockwave's rho_max")
    pol.add_argument(
        "--time-limit",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="per-solve time limit (default 15)",
    )
    pol.add_argument(
        "--threads", type=int, default=0, metavar="N", help="solver threads (0 = default)"
    )
    pol.add_argument(
        "--solver",
        default="auto",
        choices=("auto", "clarabel", "highs"),
        help="the policy's solve path: auto = its fastest exact method; clarabel = an interior "
        "point on the full model (spreads shares where the optimum is not unique, as Gavel's "
        "ECOS does); highs = simplex on the full model",
    )
    pol.add_argument(
        "--resolve-every",
        type=int,
        metavar="N",
        help="re-solve at least every N rounds (default: time shares and queues on "
        "arrivals and completions only, planning windows every 8, configurations and "
        "co-location groups every round)",
    )
    pol.add_argument(
        "--placement",
        metavar="PLACER",
        help="place every round's grants on devices with the placement stage: 'exact' (the "
        "MILP) or a compat placer such as blox_consolidated or tiresias_yarn (a wrong name "
        "lists them); needs nodes in the cluster (default: the simulator's best fit on nodes)",
    )
    sim = p.add_argument_group("simulation")
    sim.add_argument(
        "--round",
        type=float,
        metavar="SECONDS",
        help="round length (default 360, Gavel's; 120 for per-epoch profiles)",
    )
    sim.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        metavar="S",
        help="seeds (job types, generated jobs, noise, policy); default 0",
    )
    sim.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    sim.add_argument(
        "--loads",
        type=float,
        nargs="+",
        metavar="L",
        help="--synthetic: arrival rates (jobs/h); traces: arrival speed-up factors",
    )
    sim.add_argument(
        "--restart-overhead",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="lost time per (re)start on new devices (default 0 = off)",
    )
    sim.add_argument(
        "--throughput-noise",
        type=float,
        default=0.0,
        metavar="SIGMA",
        help="per-round lognormal speed noise (default 0 = off)",
    )
    sim.add_argument(
        "--estimate-error",
        type=float,
        default=0.0,
        metavar="SIGMA",
        help="fixed lognormal error of the throughputs the policy sees (0 = off)",
    )
    sim.add_argument(
        "--recalibrate",
        action="store_true",
        help="send measured epoch progress (Shockwave's recalibration)",
    )
    sim.add_argument("--max-rounds", type=int, default=1_000_000, metavar="N")
    run = p.add_argument_group("execution and output")
    run.add_argument(
        "--workers",
        type=int,
        default=0,
        metavar="N",
        help="worker processes for several runs (0 = one per core)",
    )
    run.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the runs on Ray ('local' = start one here); needs apportion[ray]",
    )
    run.add_argument(
        "--server",
        metavar="HOST:PORT",
        help="solve every snapshot with a running `apportion serve`",
    )
    run.add_argument(
        "--out",
        metavar="DIR",
        help="write tables (CSV, Parquet), plots, run.json and report.html here",
    )
    run.add_argument("--no-plots", action="store_true", help="with --out: skip the plots")
    run.add_argument(
        "--json",
        metavar="FILE",
        help="also write each run's summary and per-job finish times as JSON",
    )
    run.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bars on stderr (default: when stderr is a terminal)",
    )
    p.set_defaults(handler=cmd_simulate)
    return p


def _err(message: str) -> None:
    print(message, file=sys.stderr)


def _convert(text: str, kind: Any, where: str) -> Any:
    """A command-line value as the type of a parameter field."""
    try:
        if kind is bool or kind == "bool":
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(text)
            return text.lower() in ("true", "1", "yes")
        if kind is int or kind == "int":
            return int(text)
        if kind is float or kind == "float":
            return float(text)
        if isinstance(kind, type) and issubclass(kind, StrEnum):
            return kind(text)
    except ValueError as exc:
        raise InputError(f"{where}: cannot use {text!r}") from exc
    if kind is str or kind == "str":
        return text
    raise InputError(f"{where}: this field cannot be set from the command line")


def policy_configs(args: argparse.Namespace) -> list[tuple[str, SimulationConfig]]:
    """(label, config) of every --policies entry with its --param values and flags."""
    import typing

    from apportion.simulator.engine import SimulationConfig
    from apportion.simulator.fidelity import Fidelity
    from apportion.solver.errors import ValidationError
    from apportion.solver.model import Compat
    from apportion.solver.registry import lookup, resolve_parameters

    known = [c.value for c in Compat]
    if args.compat not in known:
        raise InputError(f"--compat {args.compat!r}: expected one of {', '.join(known)}")
    params: dict[str, dict[str, str]] = {}
    for item in args.param:
        key, sep, value = item.partition("=")
        policy, dot, name = key.partition(".")
        if not sep or not dot or not policy or not name:
            raise InputError(f"--param {item!r}: expected POLICY.FIELD=VALUE")
        params.setdefault(policy, {})[name] = value
    fidelity = Fidelity(
        restart_overhead_s=args.restart_overhead,
        throughput_noise=args.throughput_noise,
        estimate_error=args.estimate_error,
        recalibrate=args.recalibrate,
    )
    placement = None
    if args.placement:
        from apportion.solver.stages import PlacementParameters, Placer

        known = [placer.value for placer in Placer]
        if args.placement not in known:
            raise InputError(
                f"--placement {args.placement!r}: expected one of {', '.join(known)}"
            )
        placement = PlacementParameters(placer=Placer(args.placement))
    out = []
    labels: set[str] = set()
    for entry in args.policies:
        name, _, label = entry.partition("=")
        label = label or name
        if label in labels:
            raise InputError(f"--policies: {label!r} given twice (name runs with NAME=LABEL)")
        labels.add(label)
        try:
            spec = lookup(name, "--policies")
        except ValidationError as exc:
            raise InputError(str(exc)) from exc
        parameters = resolve_parameters(spec, name, None)
        hints = typing.get_type_hints(spec.parameters_type)
        fields = {f.name for f in dataclasses.fields(parameters)}  # type: ignore[arg-type]
        given = {**params.get(spec.name, {}), **params.get(name, {})}
        for flag, field_name in SHOCKWAVE_FLAGS.items():
            value = getattr(args, flag)
            if (
                value is not None
                and field_name in fields
                and spec.capabilities.reads_epoch_profiles
            ):
                given[field_name] = str(value)
        changes = {}
        for field_name, text in given.items():
            if field_name not in fields:
                raise InputError(
                    f"--param {name}.{field_name}: {spec.name} has no parameter {field_name!r} "
                    f"(it has {', '.join(sorted(fields)) or 'none'})"
                )
            changes[field_name] = _convert(text, hints[field_name], f"--param {name}.{field_name}")
        if changes:
            parameters = dataclasses.replace(parameters, **changes)  # type: ignore[type-var]
        out.append(
            (
                label,
                SimulationConfig(
                    policy=name,
                    parameters=parameters,
                    compat=Compat(args.compat),
                    round_s=args.round,
                    time_limit_s=args.time_limit,
                    threads=args.threads,
                    resolve_every=args.resolve_every,
                    fidelity=fidelity,
                    window=tuple(args.window) if args.window else None,
                    max_rounds=args.max_rounds,
                    server=args.server or "",
                    placement=placement,
                ),
            )
        )
    return out


def _cluster(args: argparse.Namespace) -> ClusterSpec:
    from apportion.simulator.cluster import parse_cluster, read_cluster_file, single_type

    given = [x for x in (args.cluster, args.gpus, args.cluster_file) if x is not None]
    if len(given) > 1:
        raise InputError("give one of --cluster, --gpus and --cluster-file")
    if args.cluster_file:
        return read_cluster_file(args.cluster_file)
    if args.gpus is not None:
        return single_type(args.gpus)
    if args.cluster is None and args.profiles and not args.trace and args.synthetic is None:
        return single_type(DEFAULT_PROFILE_GPUS)
    return parse_cluster(args.cluster or DEFAULT_CLUSTER, args.gpus_per_node)


def _throughputs(args: argparse.Namespace, cluster: ClusterSpec) -> ThroughputTable:
    from apportion.datasets.generators import builtin_throughputs, pair_throughputs

    if args.throughputs == "builtin":
        table = builtin_throughputs(cluster.types)
        if args.colocations:
            table = pair_throughputs(table, scale_factors=(1, 2, 4, 8))
        return table
    from apportion.datasets.throughput import read_gavel_throughputs

    return read_gavel_throughputs(args.throughputs, pairs=args.colocations)


def workload_source(
    args: argparse.Namespace, cluster: ClusterSpec, needs_profiles: bool
) -> tuple[Callable[[int, float | None], Workload], str]:
    """A function (seed, load) -> the workload, and a description of the jobs."""
    from apportion.datasets.generators import GAVEL_SCALE_PROBABILITIES, gavel_workload
    from apportion.datasets.readers import read_trace
    from apportion.datasets.shockwave import read_shockwave_profiles
    from apportion.datasets.snapshot import (
        builtin_epoch_profiles,
        builtin_goodputs,
        profile_goodputs,
        profiles_by_job_id,
    )
    from apportion.simulator.workload import first_jobs, workload_from_profiles, workload_from_table

    sources = [x for x in (args.trace, args.synthetic) if x is not None]
    if len(sources) > 1:
        raise InputError("give a TRACE or --synthetic N, not both")
    if not sources and not args.profiles:
        raise InputError("no jobs: give a TRACE with --format, --synthetic N or --profiles FILE")
    if args.trace and not args.format:
        raise InputError("a TRACE needs --format (one of " + ", ".join(FORMATS) + ")")
    if args.synthetic is not None and args.synthetic < 1:
        raise InputError(f"--synthetic must be >= 1, got {args.synthetic}")
    if not (math.isfinite(args.rate) and args.rate >= 0):
        raise InputError(f"--rate must be finite and >= 0, got {args.rate}")
    if args.jobs is not None and args.jobs < 1:
        raise InputError(f"--jobs must be >= 1, got {args.jobs}")
    throughputs = _throughputs(args, cluster)
    if args.trace:
        table = read_trace(
            args.format,
            args.trace,
            tasks=args.tasks,
            group_tags=args.group_tags,
            skip_bad=args.skip_bad,
        )
        if table.report is not None:
            _err(table.report.summary())
        describe = f"{Path(args.trace).name} ({args.format})"
    elif args.synthetic is None:
        profile_list = read_shockwave_profiles(args.profiles)
        fixed = workload_from_profiles(profile_list, cluster, path=str(args.profiles))

        def from_profiles(seed: int, load: float | None) -> Workload:
            w = first_jobs(fixed, args.jobs) if args.jobs else fixed
            return w.with_load(load) if load is not None else w

        return (_with_resource_profiles(from_profiles, args.resource_profiles),
                f"{fixed.num_jobs} jobs from {Path(args.profiles).name}")
    else:
        describe = f"{args.synthetic} generated jobs"
    goodputs = None
    if args.goodputs == "builtin":
        goodputs = builtin_goodputs(cluster)
    elif args.goodputs:
        goodputs = profile_goodputs(args.goodputs)
    scale_p = GAVEL_SCALE_PROBABILITIES if args.multi_gpu else (1.0, 0.0, 0.0, 0.0)
    fmt = args.format or "generated"

    def build(seed: int, load: float | None) -> Workload:
        if args.trace:
            source = table
        else:
            rate = load if load is not None else args.rate
            source = gavel_workload(
                args.synthetic,
                seed=seed,
                table=throughputs,
                jobs_per_hour=rate,
                scale_probabilities=scale_p,
            )
        profiles = None
        if args.profiles == "builtin" or (needs_profiles and not args.profiles):
            profiles = builtin_epoch_profiles(source, seed=seed)
        elif args.profiles:
            profiles = profiles_by_job_id(read_shockwave_profiles(args.profiles))
        workload, report = workload_from_table(
            source,
            cluster,
            throughputs,
            fmt=fmt,
            path=args.trace or "generated",
            seed=seed,
            max_scale_factor=args.max_scale_factor,
            profiles=profiles,
            goodputs=goodputs,
            colocations=args.colocations,
        )
        if report.excluded or report.drawn_durations:
            _err(report.summary())
        if args.jobs:
            workload = first_jobs(workload, args.jobs)
        if args.trace and load is not None:
            workload = workload.with_load(load)
        return workload

    return _with_resource_profiles(build, args.resource_profiles), describe


def _with_resource_profiles(
    build: Callable[[int, float | None], Workload], source: str | None
) -> Callable[[int, float | None], Workload]:
    """`build` whose workloads carry resource profiles from `source` (None = none)."""
    if source is None:
        return build

    def with_profiles(seed: int, load: float | None) -> Workload:
        from apportion.simulator.host_resources import attach_profiles

        return attach_profiles(build(seed, load), source, seed)

    return with_profiles


def _print_summary(
    results: Sequence[RunResult], describe: str, cluster: ClusterSpec, round_s: float
) -> None:
    spec = ",".join(f"{t}:{c}" for t, c in zip(cluster.types, cluster.counts, strict=True))
    nodes = f" ({len(cluster.nodes)} nodes)" if cluster.nodes else ""
    print(f"{describe}; cluster {spec}{nodes}; rounds of {round_s:g} s")
    header = (
        f"{'run':<28} {'seed':>4} {'load':>6} {'makespan s':>11} {'avg JCT s':>11} "
        f"{'p99 JCT s':>11} {'worst rho':>9} {'mean rho':>8} {'rho>1':>6} "
        f"{'worst rho(Themis)':>17} {'util':>5} {'unfin':>5} {'solver s':>8} {'wall s':>7}"
    )
    print(header)
    for r in results:
        s = r.summary
        load = r.run["load"]
        print(
            f"{r.run.get('label')!s:<28} {r.run['seed']:>4} "
            f"{'-' if load is None else f'{load:g}':>6} {s['makespan_s']:>11,.0f} "
            f"{s['avg_jct_s']:>11,.0f} {s['p99_jct_s']:>11,.0f} {s['worst_rho']:>9.2f} "
            f"{s['mean_rho']:>8.2f} {s['frac_rho_gt1']:>6.3f} {s['worst_rho_themis']:>17.2f} "
            f"{s['utilization']:>5.2f} {s['unfinished']:>5} {s['solver_s']:>8.1f} "
            f"{s['wall_s']:>7.1f}",
            flush=True,
        )
        if str(s["stopped"]).startswith("stalled"):
            _err(f"{r.run.get('label')} seed {r.run['seed']}: {s['stopped']}")


def _write_json(results: Sequence[RunResult], path: str) -> None:
    from apportion.simulator.output import _json_safe

    first = results[0]
    report: dict[str, Any] = {
        "jobs": [str(x) for x in first.jobs["job_id"]],
        "cluster": first.run["cluster"],
        "round_s": first.run["round_s"],
        "runs": [],
        "policies": {},
    }
    for r in results:
        entry = {
            "label": r.run.get("label"),
            "seed": r.run["seed"],
            "load": r.run["load"],
            "metrics": r.summary,
            "arrival_s": [float(x) for x in r.jobs["arrival_s"]],
            "standalone_s": [float(x) for x in r.jobs["standalone_s"]],
            "finish_s": [float(x) for x in r.jobs["finish_s"]],
            "rounds": r.summary["rounds"],
            "parameters": r.run,
        }
        report["runs"].append(entry)
        report["policies"].setdefault(str(r.run.get("label")), entry)
    Path(path).write_text(json.dumps(_json_safe(report), indent=1) + "\n", encoding="utf-8")


def cmd_simulate(args: argparse.Namespace) -> int:
    """Run `apportion simulate` (see the module docstring)."""
    from apportion.datasets.errors import TraceFormatError
    from apportion.simulator.errors import SimulationInputError
    from apportion.simulator.output import write_outputs
    from apportion.simulator.sweep import grid, run_tasks
    from apportion.solver.registry import lookup

    if args.server and (":" not in args.server or not args.server.rsplit(":", 1)[1].isdigit()):
        raise InputError(f"--server {args.server!r}: expected HOST:PORT")
    if args.workers < 0:
        raise InputError(f"--workers must be >= 0, got {args.workers}")
    seeds = args.seeds or [args.seed if args.seed is not None else 0]
    try:
        cluster = _cluster(args)
        labels = policy_configs(args)
        needs_profiles = any(lookup(c.policy).capabilities.reads_epoch_profiles for _, c in labels)
        build, describe = workload_source(args, cluster, needs_profiles)
        profiled = bool(args.profiles) or needs_profiles
        round_s = args.round if args.round is not None else (120.0 if profiled else 360.0)
        if not (math.isfinite(round_s) and round_s > 0):
            raise InputError(f"--round must be > 0, got {round_s}")
        labels = [(label, dataclasses.replace(c, round_s=round_s)) for label, c in labels]
        loads: list[float | None] = list(args.loads) if args.loads else [None]
        tasks = grid(labels, seeds, loads, build, cluster)
        progress = sys.stderr.isatty() if args.progress is None else args.progress
        results = run_tasks(tasks, args.workers, args.ray or "", progress)
    except (SimulationInputError, TraceFormatError) as exc:
        raise InputError(str(exc)) from exc
    except (OSError, ValueError) as exc:
        raise InputError(str(exc)) from exc
    _print_summary(results, describe, cluster, round_s)
    if args.json:
        _write_json(results, args.json)
        _err(f"wrote {args.json}")
    if args.out:
        written = write_outputs(
            results, args.out, plots=not args.no_plots, title=f"apportion simulate: {describe}"
        )
        _err(f"wrote {len(written)} files to {args.out} (report: {Path(args.out) / 'report.html'})")
    return EXIT_OK
