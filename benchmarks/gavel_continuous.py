"""Reproduction of Gavel's heterogeneity-aware vs agnostic comparison (OSDI'20, Figures 8-10):
average JCT vs input job rate on 36 V100 + 36 P100 + 36 K80 with Gavel's continuous traces,
for LAS (max-min fairness) and finish-time fairness, through `apportion.simulator`.

    python benchmarks/gavel_continuous.py [--figures las-single las-multi ftf-multi]
        [--rates ...] [--seeds 0] [--window 1500 2000] [--jobs 2600] [--workers 2] [--out DIR]

Gavel's protocol (scheduler/scripts/sweeps/run_sweep_continuous.py): jobs generated with
Poisson arrivals at each rate (jobs/h), job types uniform over the 26 templates, durations
60 x 10^U(1.5, 3) s w.p. 0.8 else 60 x 10^U(3, 4) s on a V100, steps = duration x V100
throughput; 1-GPU jobs (continuous-single) or Gavel's multi-GPU sizes (1/2/4/8 GPUs w.p.
0.7/0.1/0.15/0.05, continuous-multiple); 360 s rounds; the average JCT of jobs 4000-4999,
the simulation running until they have finished (later jobs keep arriving). Throughputs:
Gavel's simulation table (../shared/reference/gavel/simulation_throughputs.json) when
present, else the project's synthetic table. Pairs compared:

  las-single: max_min_fairness (agnostic) vs max_min_fairness_perf (Gavel)   Figure 8
  las-multi:  the same with multi-GPU jobs                                    Figure 9
  ftf-multi:  finish_time_fairness (agnostic) vs finish_time_fairness_perf    Figure 10

Defaults are scaled to a shared 2-core machine: jobs 2000-2499 measured out of 3,000 generated
(a warm-up of 2,000 jobs, 250-1,000 h at these rates, against 167 h for the longest job; a
warm-up of 600 jobs left the queues short of their steady state and the ratios at 1.1-1.6x),
one seed, and the upper part of Gavel's rates, where the policies differ, extended past them
(Gavel sweeps 0.4-6 jobs/h single-GPU and 0.3-3 multi-GPU; below these rates both policies
give about the standalone times). Runs go two at a time (the two policies of a point); the
script prints, per figure and rate, both average JCTs (h) and their ratio as they finish.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from apportion.datasets.cluster import ClusterSpec
from apportion.datasets.generators import (
    GAVEL_SCALE_PROBABILITIES,
    builtin_throughputs,
    gavel_workload,
)
from apportion.datasets.throughput import ThroughputTable, read_gavel_throughputs
from apportion.simulator.cluster import parse_cluster
from apportion.simulator.engine import SimulationConfig
from apportion.simulator.output import write_outputs
from apportion.simulator.sweep import Task, run_tasks
from apportion.simulator.workload import workload_from_table
from apportion.solver.model import SolverPreference

REFERENCE = Path(
    os.environ.get("APPORTION_REFERENCE")
    or Path(__file__).resolve().parents[1].parent / "shared" / "reference"
)
THROUGHPUTS = REFERENCE / "gavel" / "simulation_throughputs.json"

FIGURES: dict[str, tuple[str, str, bool, tuple[float, ...]]] = {
    # figure: (agnostic policy, aware policy, multi-GPU jobs, default rates in jobs/h)
    "las-single": ("max_min_fairness", "max_min_fairness_perf", False, (4.0, 5.0, 6.0, 7.0, 8.0)),
    "las-multi": ("max_min_fairness", "max_min_fairness_perf", True, (2.0, 2.5, 3.0, 3.5)),
    "ftf-multi": ("finish_time_fairness", "finish_time_fairness_perf", True, (2.0, 2.5, 3.0, 3.5)),
}


def throughput_table(cluster: ClusterSpec) -> tuple[ThroughputTable, str]:
    if THROUGHPUTS.exists():
        return read_gavel_throughputs(THROUGHPUTS, pairs=False), "Gavel's simulation table"
    return builtin_throughputs(cluster.types), "the synthetic table (reference absent)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--figures", nargs="+", default=list(FIGURES), choices=FIGURES)
    parser.add_argument("--rates", type=float, nargs="+", help="jobs/h (default per figure)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--window", type=int, nargs=2, default=(2000, 2500))
    parser.add_argument("--jobs", type=int, default=3000, help="jobs generated per run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--solver", default="auto", choices=("auto", "clarabel", "highs"),
                        help="the policies' solve path (clarabel: an interior point, as Gavel's "
                        "ECOS, where the optimum is not unique)")
    parser.add_argument("--out", help="write the simulator's tables, plots and report here")
    args = parser.parse_args()
    cluster = parse_cluster("v100:36,p100:36,k80:36")
    table, source = throughput_table(cluster)
    groups: list[tuple[str, float, int, list[Task]]] = []
    for figure in args.figures:
        agnostic, aware, multi, default_rates = FIGURES[figure]
        scale = GAVEL_SCALE_PROBABILITIES if multi else (1.0, 0.0, 0.0, 0.0)
        for rate in args.rates or default_rates:
            for seed in args.seeds:
                jobs = gavel_workload(args.jobs, seed=seed, table=table, jobs_per_hour=rate,
                                      scale_probabilities=scale)
                workload, _ = workload_from_table(jobs, cluster, table, seed=seed)
                pair = [
                    Task(f"{figure}/{policy}", workload, cluster,
                         SimulationConfig(policy=policy, round_s=360.0, seed=seed,
                                          window=(args.window[0], args.window[1]),
                                          solver=SolverPreference(args.solver)), rate)
                    for policy in (agnostic, aware)
                ]
                groups.append((figure, rate, seed, pair))
    print(f"{2 * len(groups)} runs; 36/36/36 V100/P100/K80, 360 s rounds, throughputs from "
          f"{source}; jobs {args.window[0]}-{args.window[1] - 1} of {args.jobs} measured")
    print(f"{'figure':<11} {'rate/h':>6} {'seed':>4} {'agnostic JCT h':>14} {'aware JCT h':>11} "
          f"{'ratio':>6} {'util agn/aware':>14} {'wall s':>7}", flush=True)
    started = time.perf_counter()
    results = []
    for figure, rate, seed, pair in groups:  # the two policies of a point run side by side
        pair_results = run_tasks(pair, workers=args.workers)
        results += pair_results
        a, b = (r.summary for r in pair_results)
        ratio = a["avg_jct_s"] / b["avg_jct_s"]
        print(f"{figure:<11} {rate:>6g} {seed:>4} {a['avg_jct_s'] / 3600:>14.1f} "
              f"{b['avg_jct_s'] / 3600:>11.1f} {ratio:>5.2f}x "
              f"{a['utilization']:>6.2f}/{b['utilization']:<7.2f} "
              f"{a['wall_s'] + b['wall_s']:>7.1f}", flush=True)
    wall = time.perf_counter() - started
    print(f"wall {wall:.0f} s for {2 * len(groups)} runs on {args.workers} workers")
    if args.out:
        write_outputs(results, args.out, title="Gavel continuous traces, 36/36/36")


if __name__ == "__main__":
    main()
