"""Reproduction of Shockwave's 120-job / 32-GPU table with `apportion.simulator` (A4.7,
docs/policies/market.md; T4.1, docs/datasets.md): the published rows (Shockwave, Themis, AlloX,
Gandiva_fair, Gavel max-min, OSSP, MST) next to ours.

    python benchmarks/shockwave_anchor.py [--jobs N] [--rows shockwave max_min ...]
        [--time-limit 15] [--workers 2] [--compat shockwave] [--restart-overhead S]
        [--out DIR]

Jobs: ../shared/reference/shockwave/profiles_120jobs.json.gz (the per-epoch profiles of the
120-job trace, what Shockwave's solver consumes) on 32 identical GPUs with 120 s rounds;
without the file, 120 generated jobs with synthetic profiles (no published row to compare).
Shockwave's knobs from config_tacc_32gpus.json (T = 20, k = 1e-3, lambda = 12, rho_max = 1,
15 s per MILP). Rows, named as in the published summary
(reproduce_120jobs_32gpus_policy_summary.json, `tacc_32gpus/<key>_sim`):

  shockwave      -> shockwave (planning window, re-planned on changes and every 8 rounds)
  themis         -> themis_finish_time_fairness (the published "Themis" row is Gavel's
                    finish-time fairness policy, C_i state carried between solves)
  themis_auction -> themis_auction (Themis's partial-allocation auction itself; no published
                    row: Shockwave compared with Gavel's finish-time fairness under that name)
  allox          -> allox, alpha = 0.2 (apportion's AlloX serves 1-GPU jobs only)
  gandiva_fair   -> gandiva_fair_equal_split (Shockwave's baseline: a static equal split);
                    `isolated` (Gavel's static 1/m share) is shown beside it
  max_min        -> max_min_fairness (Gavel's LAS)
  ossp           -> min_makespan (Gavel's min_total_duration)
  mst            -> max_sum_throughput (Gavel's max_sum_throughput_perf)

Runs go to worker processes (`apportion.simulator.sweep`); Shockwave's takes the longest.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from apportion.datasets.generators import gavel_workload, shockwave_profiles
from apportion.datasets.shockwave import read_shockwave_profiles
from apportion.simulator.cluster import single_type
from apportion.simulator.engine import SimulationConfig
from apportion.simulator.fidelity import Fidelity
from apportion.simulator.output import write_outputs
from apportion.simulator.sweep import Task, run_tasks
from apportion.simulator.workload import Workload, first_jobs, workload_from_profiles
from apportion.solver.model import Compat
from apportion.solver.parameters import AlloxParameters, ShockwaveParameters

REFERENCE = Path(
    os.environ.get("APPORTION_REFERENCE")
    or Path(__file__).resolve().parents[1].parent / "shared" / "reference"
) / "shockwave"
"""The reference data beside the checkout (or where $APPORTION_REFERENCE points)."""
PROFILES = REFERENCE / "profiles_120jobs.json.gz"
CONFIG = REFERENCE / "config_tacc_32gpus.json"
SUMMARY = REFERENCE / "reproduce_120jobs_32gpus_policy_summary.json"

ROWS: dict[str, tuple[str, str]] = {
    # row: (policy, published key)
    "shockwave": ("shockwave", "tacc_32gpus/shockwave_sim"),
    "themis": ("themis_finish_time_fairness", "tacc_32gpus/finish_time_fairness_sim"),
    "themis_auction": ("themis_auction", ""),
    "allox": ("allox", "tacc_32gpus/allox_sim"),
    "gandiva_fair": ("gandiva_fair_equal_split", "tacc_32gpus/gandiva_fair_sim"),
    "isolated": ("isolated", ""),
    "max_min": ("max_min_fairness", "tacc_32gpus/max_min_fairness_sim"),
    "ossp": ("min_makespan", "tacc_32gpus/min_total_duration_sim"),
    "mst": ("max_sum_throughput", "tacc_32gpus/max_sum_throughput_perf_sim"),
}
METRICS = (
    ("makespan_s", "makespan_s", "makespan s", "{:>10,.0f}"),
    ("avg_jct_s", "avg_jct_s", "avg JCT s", "{:>10,.0f}"),
    ("worst_rho", "ftf_max", "worst rho", "{:>9.2f}"),
    ("mean_rho", "ftf_mean", "mean rho", "{:>8.2f}"),
    ("frac_rho_gt1", "frac_ftf_gt1", "rho>1", "{:>6.3f}"),
    ("worst_rho_themis", "ftf_themis_max", "worst rho(Themis)", "{:>17.2f}"),
    ("utilization", "cluster_util", "util", "{:>5.2f}"),
)


def load_workload(jobs: int) -> tuple[Workload, bool]:
    cluster = single_type(32)
    if PROFILES.exists():
        w = workload_from_profiles(read_shockwave_profiles(PROFILES), cluster, str(PROFILES))
        return first_jobs(w, jobs), jobs >= 120
    table = gavel_workload(jobs, seed=0, jobs_per_hour=80.0,
                           scale_probabilities=(92 / 120, 20 / 120, 8 / 120, 0.0))
    return workload_from_profiles(shockwave_profiles(table, seed=0), cluster, "generated"), False


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


def published() -> dict[str, dict[str, float]]:
    return json.loads(SUMMARY.read_text()) if SUMMARY.exists() else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=120)
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    parser.add_argument("--time-limit", type=float, default=15.0, help="s per Shockwave MILP")
    parser.add_argument("--threads", type=int, default=1, help="HiGHS threads per MILP")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--compat", choices=["none", "shockwave"], default="none")
    parser.add_argument("--restart-overhead", type=float, default=0.0)
    parser.add_argument("--out", help="write the simulator's tables, plots and report here")
    args = parser.parse_args()
    workload, full = load_workload(args.jobs)
    cluster = single_type(32)
    tasks = []
    for row in args.rows:
        policy, _ = ROWS[row]
        if not policy:
            continue
        params: object | None = None
        if policy == "shockwave":
            params = shockwave_parameters()
        elif policy == "allox":
            params = AlloxParameters(alpha=0.2)
        config = SimulationConfig(
            policy=policy, parameters=params, compat=Compat(args.compat), round_s=120.0,
            time_limit_s=args.time_limit, threads=args.threads,
            fidelity=Fidelity(restart_overhead_s=args.restart_overhead),
        )
        tasks.append(Task(row, workload, cluster, config))
    print(f"{workload.num_jobs} jobs from {Path(workload.source).name}, 32 GPUs, 120 s rounds, "
          f"compat {args.compat}, restart overhead {args.restart_overhead:g} s")
    started = time.perf_counter()
    results = {r.run["label"]: r for r in run_tasks(tasks, workers=args.workers)}
    wall = time.perf_counter() - started
    reference = published() if full else {}
    head = " ".join(f"{label:>{len(fmt.format(0.0))}}" for _, _, label, fmt in METRICS)
    print(f"{'row':<15} {'run':<10} {head} {'unfin':>5} {'wall s':>7}")
    for row in args.rows:
        policy, key = ROWS[row]
        result = results.get(row)
        if result is not None:
            s = result.summary
            cells = " ".join(fmt.format(s[ours]) for ours, _, _, fmt in METRICS)
            print(f"{row:<15} {'ours':<10} {cells} {s['unfinished']:>5} {s['wall_s']:>7.1f}")
        if key and key in reference:
            pub = reference[key]
            cells = " ".join(fmt.format(pub[theirs]) for _, theirs, _, fmt in METRICS)
            print(f"{'':<15} {'published':<10} {cells}")
    print(f"wall {wall:.1f} s for {len(tasks)} runs on {args.workers} workers")
    if args.out:
        write_outputs(list(results.values()), args.out, title="Shockwave 120 jobs / 32 GPUs")


if __name__ == "__main__":
    main()
