"""AlloX: apportion's grouped transportation LP against Gavel's explicit Hungarian matrix, same run.

    python benchmarks/allox.py [--sizes 128 512 2048] [--reference-max 512] [--catalog 0]

Instances: N pending 1-device jobs on 3 accelerator types (v100, p100, k80) with 0.75 devices
per job (apportion.datasets.synthetic.cluster_counts: 96 devices at 128 jobs, 384 at 512,
1,536 at 2,048), all devices free (Gavel's case), single-device throughputs drawn as in the
synthetic catalog, remaining work = 60 * 10^U(1.5, 3) s on the k80, arrivals in the last hour.
With `--catalog K`, each job copies the throughputs and work of one of K jobs drawn that way
(its arrival stays its own): jobs with identical rows, which the LP takes as one class.

The reference is Gavel's formulation: a dense |P| x |P|*N matrix (one column per device and
position k = 1..|P|, cost now - a_i + k * p[i, type(g)]) solved by scipy's rectangular
Hungarian algorithm (linear_sum_assignment), as Gavel does. It is skipped above
--reference-max jobs (2,048 jobs x 1,536 devices would need ~6.4e9 entries). Times are wall
seconds of the whole call (model build + solve): apportion through solve() (validated model
in, plan with certificate out), the reference from the processing-time matrix. Ratio =
reference / apportion. "rel. diff" compares the two optimal objectives.
"""

from __future__ import annotations

import argparse
import re
import time
from dataclasses import replace

import numpy as np
from scipy.optimize import linear_sum_assignment

from apportion.datasets.synthetic import DEFAULT_TYPES, cluster_counts
from apportion.solver.model import PolicyRequest, Problem
from apportion.solver.parameters import AlloxParameters
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem

NOW = 3600.0


def instance(num_jobs: int, seed: int, catalog: int = 0) -> Problem:
    """The module docstring's instance; `catalog` > 0: every job is a copy (throughputs and
    work; not arrival) of one of `catalog` jobs drawn that way."""
    rng = np.random.default_rng(seed)
    drawn = catalog if catalog > 0 else num_jobs
    k80 = np.exp(rng.uniform(np.log(0.3), np.log(30.0), drawn))
    p100 = k80 * rng.uniform(1.2, 3.0, drawn)
    v100 = p100 * rng.uniform(1.1, 2.0, drawn)
    duration_k80 = 60.0 * 10 ** rng.uniform(1.5, 3.0, drawn)
    pick = rng.integers(0, drawn, num_jobs) if catalog > 0 else np.arange(num_jobs)
    throughput = np.stack([v100, p100, k80], axis=1)[pick]
    base = make_problem(DEFAULT_TYPES, cluster_counts(num_jobs), throughput)
    jobs = replace(
        base.jobs,
        total_steps=(duration_k80 * k80)[pick],
        arrival_time_s=rng.uniform(0.0, NOW, num_jobs),
    )
    return replace(base, jobs=jobs, time_s=NOW)


def reference(problem: Problem) -> tuple[float, float]:
    """(optimal total JCT, wall seconds) of Gavel's dense per-device per-position matrix."""
    started = time.perf_counter()
    jobs = problem.jobs
    p = jobs.remaining_steps[:, None] / jobs.throughput  # (N, types)
    device_type = np.repeat(np.arange(problem.cluster.num_types), problem.cluster.count)
    N = jobs.num_jobs
    k = np.arange(1, N + 1, dtype=np.float64)
    # columns (device g, position k), built by repetition as Gavel does
    cost = (problem.time_s - jobs.arrival_time_s)[:, None, None] + p[:, device_type, None] * k
    matrix = cost.reshape(N, device_type.size * N)
    rows, cols = linear_sum_assignment(matrix)
    value = float(matrix[rows, cols].sum())
    return value, time.perf_counter() - started


def ours(problem: Problem) -> tuple[float, float, str, float | None, str]:
    started = time.perf_counter()
    plan = solve(problem, PolicyRequest("allox", AlloxParameters(alpha=1.0)))
    elapsed = time.perf_counter() - started
    cert = plan.certificate
    classes = re.search(r"\d+ job classes", cert.formulation)
    size = f"{cert.model_size.variables} vars, {classes.group(0) if classes else '?'}"
    return float(cert.objective or 0.0), elapsed, str(cert.termination), cert.gap, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 512, 2048])
    parser.add_argument("--reference-max", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=3, help="apportion runs (best is shown)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--catalog", type=int, default=0,
                        help="jobs copied from this many drawn jobs (0 = every job drawn)")
    args = parser.parse_args()
    header = (
        f"{'jobs':>6s} {'devices':>7s} {'apportion s':>11s} {'reference s':>11s} {'ratio':>8s} "
        f"{'rel. diff':>9s} {'status':>8s} {'cert. gap':>9s}  model"
    )
    print("reference: Gavel-style dense |P| x |P|*N matrix + scipy linear_sum_assignment")
    print(header)
    print("-" * len(header))
    ours(instance(8, args.seed))  # warm-up: imports, HiGHS start-up
    for size in args.sizes:
        problem = instance(size, args.seed, args.catalog)
        runs = [ours(problem) for _ in range(max(1, args.repeat))]
        objective, elapsed, status, gap, model = min(runs, key=lambda r: r[1])
        devices = int(problem.cluster.count.sum())
        if size <= args.reference_max:
            ref_value, ref_elapsed = reference(problem)
            diff = abs(objective - ref_value) / max(abs(ref_value), 1e-12)
            ref_s, ratio, diff_s = (
                f"{ref_elapsed:11.3f}",
                f"{ref_elapsed / elapsed:7.0f}x",
                (f"{diff:9.1e}"),
            )
        else:
            ref_s, ratio, diff_s = f"{'skipped':>11s}", f"{'-':>8s}", f"{'-':>9s}"
        print(
            f"{size:6d} {devices:7d} {elapsed:11.4f} {ref_s} {ratio} {diff_s} {status:>8s} "
            f"{gap if gap is not None else float('nan'):9.1e}  {model}",
            flush=True,
        )


if __name__ == "__main__":
    main()
