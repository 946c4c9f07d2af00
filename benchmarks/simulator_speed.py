"""How fast the simulator is: one large replay, and a sweep on both cores.

    python benchmarks/simulator_speed.py [--jobs 1000] [--policy max_min_fairness_perf]
        [--sweep-jobs 300] [--workers 2]

1. Replay: the first `--jobs` jobs (by arrival) of the Philly-derived trace
   (../shared/reference/traces/philly/sia_philly_jobs.csv, Sia's flattening of the Philly job
   log; without it, Gavel-style generated jobs at Philly's arrival rate) on 36 V100 + 36 P100 +
   36 K80 with 360 s rounds, max-min fairness. Prints the simulation's wall time (target
   < 60 s for 1,000 jobs), its rounds and solves, and the share of the time spent in the
   solver and in the simulator itself. Reference in the same run: the time to build and solve
   one snapshot of all the jobs at once (the cost a simulator could not go below per solve).
2. Sweep: 3 policies x 3 seeds of `--sweep-jobs` generated jobs in `--workers` processes.
   Prints the wall time, the CPU time of the worker processes and their ratio (~2 = both
   cores busy), against the same 9 runs one after the other in this process.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from pathlib import Path

import numpy as np

from apportion.datasets.generators import builtin_throughputs, gavel_workload
from apportion.datasets.philly import read_philly_csv
from apportion.simulator.cluster import parse_cluster
from apportion.simulator.engine import SimulationConfig, simulate
from apportion.simulator.metrics import run_result
from apportion.simulator.problems import ProblemContext, build_problem, model_cluster
from apportion.simulator.state import JobState
from apportion.simulator.sweep import grid, run_tasks
from apportion.simulator.workload import Workload, first_jobs, workload_from_table
from apportion.solver.model import PolicyRequest, SolveOptions
from apportion.solver.registry import lookup, resolve_parameters
from apportion.solver.solve import solve

REFERENCE = Path(
    os.environ.get("APPORTION_REFERENCE")
    or Path(__file__).resolve().parents[1].parent / "shared" / "reference"
)
PHILLY = REFERENCE / "traces" / "philly" / "sia_philly_jobs.csv"
CLUSTER = parse_cluster("v100:36,p100:36,k80:36")


def philly_workload(jobs: int) -> tuple[Workload, str]:
    thr = builtin_throughputs(CLUSTER.types)
    if PHILLY.exists():
        w, _ = workload_from_table(read_philly_csv(PHILLY), CLUSTER, thr, fmt="philly-csv",
                                   path=str(PHILLY))
        return first_jobs(w, jobs), f"first {jobs} jobs of {PHILLY.name}"
    table = gavel_workload(jobs, seed=0, table=thr, jobs_per_hour=31.0)
    return workload_from_table(table, CLUSTER, thr)[0], f"{jobs} generated jobs (no trace)"


def one_snapshot_solve(w: Workload, policy: str) -> float:
    spec = lookup(policy)
    caps = spec.capabilities
    model = model_cluster(CLUSTER)
    context = ProblemContext(w, model, caps, 360.0, w.throughput, np.ones_like(w.throughput))
    started = time.perf_counter()
    problem = build_problem(context, JobState.start(w), np.arange(w.num_jobs), 0.0)
    solve(problem, PolicyRequest(spec.name, resolve_parameters(spec, policy, None)),
          SolveOptions())
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--policy", default="max_min_fairness_perf")
    parser.add_argument("--sweep-jobs", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    w, source = philly_workload(args.jobs)
    started = time.perf_counter()
    result = run_result(simulate(w, CLUSTER, SimulationConfig(policy=args.policy)))
    wall = time.perf_counter() - started
    s = result.summary
    print(f"replay: {source}, 36/36/36, {args.policy}: {wall:.1f} s wall "
          f"({s['rounds']:,} rounds, {s['solves']:,} solves; solver calls {s['solve_wall_s']:.1f}"
          f" s = {s['solve_wall_s'] / wall:.0%}, simulator {wall - s['solve_wall_s']:.1f} s); "
          f"target < 60 s")
    print(f"  reference: one snapshot of all {w.num_jobs} jobs built and solved in "
          f"{one_snapshot_solve(w, args.policy):.3f} s")
    print(f"  avg JCT {s['avg_jct_s'] / 3600:.1f} h, makespan {s['makespan_s'] / 3600:.0f} h, "
          f"utilization {s['utilization']:.2f}")

    thr = builtin_throughputs(CLUSTER.types)

    def build(seed: int, load: float | None) -> Workload:
        table = gavel_workload(args.sweep_jobs, seed=seed, table=thr, jobs_per_hour=4.0)
        return workload_from_table(table, CLUSTER, thr, seed=seed)[0]

    labels = [(p, SimulationConfig(policy=p)) for p in
              ("max_min_fairness_perf", "finish_time_fairness_perf", "fifo_perf")]
    tasks = grid(labels, [0, 1, 2], [None], build, CLUSTER)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    results = run_tasks(tasks, workers=args.workers)
    parallel = time.perf_counter() - started
    busy = sum(r.summary["wall_s"] for r in results)
    processes = len({r.run["process"] for r in results})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    started, cpu_started = time.perf_counter(), time.process_time()
    run_tasks(tasks, workers=1)
    serial, serial_cpu = time.perf_counter() - started, time.process_time() - cpu_started
    print(f"sweep: 3 policies x 3 seeds of {args.sweep_jobs} jobs: {parallel:.1f} s on "
          f"{args.workers} workers ({processes} processes, {busy / parallel:.2f} runs at once on "
          f"average), worker CPU {cpu:.1f} s = {cpu / parallel:.2f} cores busy; "
          f"one after the other in this process {serial:.1f} s ({serial_cpu:.1f} s CPU = "
          f"{serial_cpu / serial:.2f} cores); speed-up {serial / parallel:.2f}x; load average "
          f"during the run {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
