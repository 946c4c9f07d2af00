"""Water filling (lexicographic max-min): apportion against Gavel's LP + MILP iteration.

    python benchmarks/water_filling.py [--sizes 64 256 1024] [--reference-max 256]

Instances: distinct throughput rows over 3 types (0.2-5 steps/s), scale factors 1/2/4,
weights 0.5/1/2, capacity loose enough that many jobs are capped by their own time budget
(the case that needs many rounds). apportion: progressive filling with LP duals and batch
freezing at caps (formulations/water_filling.py). Reference: Gavel's algorithm as
formulations.md A2.4 writes it (per iteration an LP, then a bottleneck MILP with big-M and the
1.0001 / 1e-5 test; HiGHS through cvxpy for both). Prints times, ratio, the number of LPs, and
the largest relative difference between the two sorted level vectors.
"""

from __future__ import annotations

import argparse
import time

import cvxpy as cp
import numpy as np

from apportion.solver.model import PolicyRequest, Problem, make_problem
from apportion.solver.parameters import WaterFillingParameters
from apportion.solver.solve import solve


def instance(num_jobs: int, seed: int = 1) -> Problem:
    rng = np.random.default_rng(seed)
    m = num_jobs
    return make_problem(["a", "b", "c"], [m // 2, m // 3, m // 2], rng.uniform(0.2, 5, (m, 3)),
                        rng.choice([1, 2, 4], m), rng.choice([0.5, 1.0, 2.0], m))


def gavel(problem: Problem) -> tuple[np.ndarray, float, int]:
    """(levels, seconds, LP+MILP solves) of Gavel's water filling (A2.4, no entities)."""
    started = time.perf_counter()
    thr = problem.jobs.throughput
    W = problem.cluster.count.astype(float)
    s = problem.jobs.scale_factor.astype(float)
    p = 1.0 / problem.jobs.priority_weight
    m, n = thr.shape
    prop = thr @ W / W.sum()
    allowed = (thr > 0) & (s[:, None] <= W[None, :])
    u_coef = np.where(allowed, thr / prop[:, None], 0.0)
    big_m = float((u_coef * s[:, None]).max())
    frozen = np.zeros(m, dtype=bool)
    value = np.zeros(m)  # frozen u values
    r = np.zeros(m)  # running levels (u units)
    solves = 0
    X = cp.Variable((m, n), nonneg=True)
    u = cp.sum(cp.multiply(u_coef, X), axis=1)
    base = [cp.sum(X, axis=1) <= 1, s @ X <= W, X[~allowed] == 0]
    while not frozen.all():
        lower = np.where(frozen, value, r)
        A = np.where(frozen, big_m, 0.0)
        c = cp.Variable()
        lp = cp.Problem(cp.Maximize(c), [*base, u >= lower, c <= cp.multiply(p * s, u - r) + A])
        lp.solve(solver=cp.HIGHS)
        solves += 1
        r = np.where(frozen, r, r + float(c.value) / (p * s))
        z = cp.Variable(m, boolean=True)
        lower = np.where(frozen, value, r)
        milp = cp.Problem(cp.Maximize(cp.sum(z)), [
            *base,
            u >= lower * (1 - 1e-9),
            big_m * z >= u - 1.0001 * r + 1e-5,
            big_m * (1 - z) >= 1.0001 * r - u,
            z[frozen] == 0 if frozen.any() else z >= 0,
        ])
        milp.solve(solver=cp.HIGHS)
        solves += 1
        newly = ~frozen & (np.round(z.value) == 0)
        if not newly.any():
            break
        value[newly] = r[newly]
        frozen |= newly
    levels = s * p * np.where(frozen, value, r)
    return levels, time.perf_counter() - started, solves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--reference-max", type=int, default=256)
    args = parser.parse_args()
    print(f"{'jobs':>6s} {'apportion s':>12s} {'LPs':>5s} {'reference s':>12s} {'solves':>7s} "
          f"{'ratio':>7s} {'levels diff':>11s} {'status':>8s}")
    for size in args.sizes:
        problem = instance(size)
        started = time.perf_counter()
        plan = solve(problem, PolicyRequest("hierarchical_max_min_fairness",
                                            WaterFillingParameters()))
        elapsed = time.perf_counter() - started
        lps = plan.certificate.formulation.rsplit(";", 1)[-1].split()[0]
        if size <= args.reference_max:
            levels, ref_s, solves = gavel(problem)
            ours = np.sort(plan.objective_value)
            diff = float(np.max(np.abs(ours - np.sort(levels)) / np.maximum(ours, 1e-12)))
            ref = f"{ref_s:12.3f} {solves:7d} {ref_s / elapsed:6.1f}x {diff:11.1e}"
        else:
            ref = f"{'skipped':>12s} {'-':>7s} {'-':>7s} {'-':>11s}"
        print(f"{size:6d} {elapsed:12.3f} {lps:>5s} {ref} {plan.certificate.termination!s:>8s}",
              flush=True)


if __name__ == "__main__":
    main()
