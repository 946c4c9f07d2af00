"""`apportion replay`: replay a trace of per-epoch job profiles on a homogeneous cluster
through several round-based policies and print their metrics (T7, docs/datasets.md) side by side
(`apportion.datasets.replay`).

Jobs come from a Shockwave per-epoch profile file (T2.2, docs/datasets.md, `.json` or `.json.gz`) or
from the seeded synthetic generator (`--synthetic N`). Policies: `shockwave` (its planning
window, re-solved on every arrival or completion and at least every 8 rounds) and the
time-share policies that have Gavel's round mechanism (the allocation recomputed on every
arrival or completion, work measured in standalone seconds)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from apportion.server.cli_errors import EXIT_OK, InputError

REPLAY_POLICIES_DEFAULT = ("shockwave", "max_min_fairness_perf", "finish_time_fairness_perf")


def add_replay(sub: Any) -> argparse.ArgumentParser:
    """The `replay` subcommand's parser."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "replay",
        help="replay a job trace through several policies and compare their metrics",
        description="Replay per-epoch job profiles on G identical devices with rounds of "
        "--round s through each policy, and print makespan, mean JCT, finish-time fairness "
        "(worst, mean, fraction > 1, Themis-style worst) and utilization (T7, docs/datasets.md).",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--profiles", metavar="FILE",
                        help="Shockwave per-epoch profile file (.json or .json.gz)")
    source.add_argument("--synthetic", type=int, metavar="N",
                        help="N seeded synthetic jobs instead of a file")
    parser.add_argument("--gpus", type=int, default=32, help="devices (default 32)")
    parser.add_argument("--round", type=float, default=120.0, metavar="SECONDS",
                        help="round length (default 120)")
    parser.add_argument("--policies", nargs="+", default=list(REPLAY_POLICIES_DEFAULT),
                        metavar="NAME", help="policies or aliases (default: %(default)s)")
    parser.add_argument("--jobs", type=int, metavar="N", help="keep the first N jobs")
    parser.add_argument("--time-limit", type=float, default=15.0, metavar="SECONDS",
                        help="limit per Shockwave MILP (default 15)")
    parser.add_argument("--threads", type=int, default=0, help="solver threads (0 = default)")
    parser.add_argument("--seed", type=int, default=0, help="seed of --synthetic")
    parser.add_argument("--json", metavar="FILE",
                        help="also write per-policy metrics and per-job finish times as JSON")
    return parser


def cmd_replay(args: argparse.Namespace) -> int:
    """Run `apportion replay` (see the module docstring)."""
    from apportion.datasets.errors import TraceFormatError
    from apportion.datasets.replay import (
        GavelRoundPolicy,
        RoundPolicy,
        ShockwaveRoundPolicy,
        jobs_from_profiles,
        replay,
        synthetic_jobs,
    )
    from apportion.solver.capabilities import PlanKind
    from apportion.solver.errors import ValidationError
    from apportion.solver.model import SolveOptions
    from apportion.solver.parameters import ShockwaveParameters
    from apportion.solver.registry import lookup, policies

    if args.gpus < 1:
        raise InputError(f"--gpus must be >= 1, got {args.gpus}")
    if not args.round > 0:
        raise InputError(f"--round must be > 0, got {args.round}")
    resolved: list[tuple[str, str]] = []
    replayable = sorted(spec.name for spec in policies()
                        if spec.capabilities.round_schedule
                        or spec.capabilities.plan_kind is PlanKind.WINDOW)
    for name in args.policies:
        try:
            spec = lookup(name)
        except ValidationError as exc:
            raise InputError(str(exc)) from exc
        if spec.name not in replayable:
            raise InputError(f"policy {name!r} has no round schedule to replay "
                             f"(replayable: {', '.join(replayable)})")
        resolved.append((name, spec.name))
    if args.profiles:
        from apportion.datasets.shockwave import read_shockwave_profiles

        try:
            jobs = jobs_from_profiles(read_shockwave_profiles(args.profiles))
        except (TraceFormatError, OSError, ValueError) as exc:
            raise InputError(str(exc)) from exc
        source = Path(args.profiles).name
    else:
        if args.synthetic < 1:
            raise InputError(f"--synthetic must be >= 1, got {args.synthetic}")
        jobs = synthetic_jobs(args.synthetic, seed=args.seed)
        source = f"{args.synthetic} synthetic jobs (seed {args.seed})"
    if args.jobs is not None:
        jobs = jobs[: max(args.jobs, 0)]
    if not jobs:
        raise InputError("no jobs to replay")
    too_big = [j.job_id for j in jobs if j.scale_factor > args.gpus]
    if too_big:
        raise InputError(f"{len(too_big)} jobs need more than {args.gpus} devices "
                         f"(first: {too_big[0]!r})")
    print(f"{len(jobs)} jobs from {source}; {args.gpus} devices, rounds of {args.round:g} s")
    header = (f"{'policy':<28} {'makespan s':>11} {'avg JCT s':>11} {'worst rho':>10} "
              f"{'mean rho':>9} {'rho>1':>6} {'worst rho(Themis)':>18} {'util':>5} {'wall s':>7}")
    print(header)
    report: dict[str, object] = {"jobs": [j.job_id for j in jobs], "gpus": args.gpus,
                                 "round_s": args.round, "policies": {}}
    for requested, name in resolved:
        policy: RoundPolicy
        if lookup(name).capabilities.plan_kind is PlanKind.WINDOW:
            options = SolveOptions(time_limit_s=args.time_limit, threads=args.threads)
            policy = ShockwaveRoundPolicy(ShockwaveParameters(), options)
        else:
            policy = GavelRoundPolicy(policy=name, name=requested)
        started = time.perf_counter()
        result = replay(jobs, args.gpus, policy, args.round)
        wall = time.perf_counter() - started
        m = result.metrics
        print(f"{requested:<28} {m.makespan_s:>11,.0f} {m.avg_jct_s:>11,.0f} "
              f"{m.worst_rho:>10.2f} {m.mean_rho:>9.2f} {m.frac_rho_gt1:>6.3f} "
              f"{m.worst_rho_themis:>18.2f} {m.utilization:>5.2f} {wall:>7.1f}", flush=True)
        per_policy = report["policies"]
        assert isinstance(per_policy, dict)
        per_policy[requested] = {
            "metrics": {k: float(v) for k, v in vars(m).items()},
            "finish_s": [float(x) for x in result.finish_s],
            "rounds": result.rounds,
        }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json}", file=sys.stderr)
    return EXIT_OK
