"""End-to-end anchor (A4.7, docs/policies/market.md; T4.1, docs/datasets.md): replay the 120-job
Shockwave trace on 32 GPUs with 120 s rounds and compare with the published simulation row.

    python benchmarks/shockwave_anchor.py [--jobs N] [--policies shockwave max_min_fairness ...]
                                          [--time-limit 15] [--threads 2] [--synthetic]

Policies (default: all), named after the published rows: `shockwave` (ShockwaveRoundPolicy);
through Gavel's round mechanism (GavelRoundPolicy, allocation recomputed on every arrival or
completion, work in standalone seconds): `max_min_fairness` (weighted_max_min_fairness),
`finish_time_fairness` = Themis (themis_finish_time_fairness, C_i state carried between
calls), `gandiva_fair` = the static equal split of the published row (gandiva_fair_equal_split),
`min_total_duration` = OSSP (min_makespan), `max_sum_throughput` = MST (max_sum_throughput,
published key max_sum_throughput_perf_sim). The published AlloX row is not reproduced: AlloX is
a non-preemptive matching of 1-device jobs, not a time share, and needs another driver.

Jobs: ../shared/reference/shockwave/profiles_120jobs.json.gz (read with
`apportion.datasets.shockwave.read_shockwave_profiles`; `--jobs N` keeps the first N in trace
order) or, when absent (or with --synthetic), `apportion.datasets.replay.synthetic_jobs`.
Shockwave's knobs are config_tacc_32gpus.json's (T = 20, k = 1e-3, lambda = 12, rho_max = 1,
gap 1e-3, 15 s per MILP) when present, else the same defaults. The replay is
`apportion.datasets.replay.replay` (see its docstring for the round model). The published rows
are the `tacc_32gpus/<policy>_sim` entries of reproduce_120jobs_32gpus_policy_summary.json
(printed only for the full 120-job reference trace).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from apportion.datasets.replay import (
    GavelRoundPolicy,
    ReplayJob,
    RoundPolicy,
    ShockwaveRoundPolicy,
    jobs_from_profiles,
    replay,
    synthetic_jobs,
)
from apportion.datasets.shockwave import read_shockwave_profiles
from apportion.solver.model import Compat, SolveOptions
from apportion.solver.parameters import GandivaFairParameters, ShockwaveParameters

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "shockwave"
PROFILES = REFERENCE / "profiles_120jobs.json.gz"
CONFIG = REFERENCE / "config_tacc_32gpus.json"
SUMMARY = REFERENCE / "reproduce_120jobs_32gpus_policy_summary.json"
PUBLISHED_KEYS = {
    "shockwave": "tacc_32gpus/shockwave_sim",
    "finish_time_fairness": "tacc_32gpus/finish_time_fairness_sim",
    "gandiva_fair": "tacc_32gpus/gandiva_fair_sim",
    "max_min_fairness": "tacc_32gpus/max_min_fairness_sim",
    "min_total_duration": "tacc_32gpus/min_total_duration_sim",
    "max_sum_throughput": "tacc_32gpus/max_sum_throughput_perf_sim",
}
GAVEL_POLICIES = {
    "finish_time_fairness": "themis_finish_time_fairness",
    "gandiva_fair": "gandiva_fair",
    "max_min_fairness": "weighted_max_min_fairness",
    "min_total_duration": "min_makespan",
    "max_sum_throughput": "max_sum_throughput",
}
"""Benchmark name -> apportion policy run by GavelRoundPolicy."""
GAVEL_PARAMETERS: dict[str, object] = {
    "gandiva_fair": GandivaFairParameters(static_equal_split=True),  # gandiva_fair_equal_split
}
"""Parameters other than the policy's defaults."""
PUBLISHED_FALLBACK = {"shockwave": (24197.0, 9958.0, 1.78, 0.75, 0.075, 2.57, 0.82)}
"""(makespan s, avg JCT s, worst rho, mean rho, frac rho > 1, worst Themis rho, util)."""


def load_jobs(num_jobs: int, synthetic: bool) -> tuple[list[ReplayJob], str]:
    if PROFILES.exists() and not synthetic:
        jobs = jobs_from_profiles(read_shockwave_profiles(PROFILES))
        return jobs[:num_jobs], f"reference profiles ({PROFILES.name}), first {num_jobs}"
    return synthetic_jobs(num_jobs, seed=0), f"synthetic_jobs({num_jobs}, seed=0)"


def shockwave_parameters() -> ShockwaveParameters:
    if not CONFIG.exists():
        return ShockwaveParameters()
    config = json.loads(CONFIG.read_text())
    return ShockwaveParameters(
        planning_rounds=int(config["future_rounds"]),
        makespan_weight=float(config["k"]),
        fairness_exponent=float(config["lambda"]),
        rho_max=float(config["rhomax"]),
    )


def published(policy: str) -> tuple[float, ...] | None:
    if SUMMARY.exists() and policy in PUBLISHED_KEYS:
        row = json.loads(SUMMARY.read_text()).get(PUBLISHED_KEYS[policy])
        if row:
            return tuple(
                float(row[k])
                for k in (
                    "makespan_s",
                    "avg_jct_s",
                    "ftf_max",
                    "ftf_mean",
                    "frac_ftf_gt1",
                    "ftf_themis_max",
                    "cluster_util",
                )
            )
    return PUBLISHED_FALLBACK.get(policy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=120)
    parser.add_argument("--gpus", type=int, default=32)
    parser.add_argument("--round", type=float, default=120.0, help="round length (s)")
    parser.add_argument(
        "--policies", nargs="+", default=list(PUBLISHED_KEYS), choices=PUBLISHED_KEYS
    )
    parser.add_argument("--time-limit", type=float, default=15.0, help="s per Shockwave MILP")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--synthetic", action="store_true", help="ignore the reference trace")
    parser.add_argument(
        "--compat",
        choices=["none", "shockwave"],
        default="none",
        help="shockwave = upstream's absolute-timestamp guard and rho (A4.3)",
    )
    args = parser.parse_args()
    jobs, source = load_jobs(args.jobs, args.synthetic)
    full_reference = source.startswith("reference") and args.jobs >= 120
    print(f"jobs: {source}; {args.gpus} GPUs, rounds of {args.round:g} s; compat {args.compat}")
    columns = "makespan s   avg JCT s  worst rho  mean rho  rho>1  worst rho(Themis)  util"
    print(f"{'policy':<20} {'run':<10} {columns}")
    for name in args.policies:
        policy: RoundPolicy
        if name == "shockwave":
            policy = ShockwaveRoundPolicy(
                shockwave_parameters(),
                SolveOptions(time_limit_s=args.time_limit, threads=args.threads),
                compat=Compat(args.compat),
            )
        else:
            policy = GavelRoundPolicy(policy=GAVEL_POLICIES[name], name=name,
                                      parameters=GAVEL_PARAMETERS.get(name))
        started = time.perf_counter()
        result = replay(jobs, args.gpus, policy, args.round)
        wall = time.perf_counter() - started
        m = result.metrics
        print(
            f"{name:<20} {'ours':<10} {m.makespan_s:>10,.0f} {m.avg_jct_s:>11,.0f} "
            f"{m.worst_rho:>10.2f} {m.mean_rho:>9.2f} {m.frac_rho_gt1:>6.3f} "
            f"{m.worst_rho_themis:>18.2f} {m.utilization:>5.2f}"
        )
        row = published(name) if full_reference else None
        if row is not None:
            print(
                f"{'':<20} {'published':<10} {row[0]:>10,.0f} {row[1]:>11,.0f} {row[2]:>10.2f} "
                f"{row[3]:>9.2f} {row[4]:>6.3f} {row[5]:>18.2f} {row[6]:>5.2f}"
            )
            ours = (m.makespan_s, m.avg_jct_s, m.worst_rho)
            labels = ("makespan", "avg JCT", "worst rho")
            ratios = ", ".join(
                f"{label} {a / b - 1.0:+.1%}"
                for label, a, b in zip(labels, ours, row[:3], strict=True)
            )
            print(f"{'':<20} ours vs published: {ratios}")
        solves = getattr(policy, "solves", 0)
        solve_time = getattr(policy, "solve_time_s", 0.0)
        branches = getattr(policy, "branches", None)
        extra = f", branches {branches}" if branches else ""
        print(
            f"{'':<20} {result.rounds} rounds, {solves} solves ({solve_time:.1f} s in solve), "
            f"wall {wall:.1f} s{extra}"
        )


if __name__ == "__main__":
    main()
