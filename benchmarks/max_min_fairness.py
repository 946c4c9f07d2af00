"""Max-min fairness: apportion against a plain cvxpy formulation of the same LP, same run.

    python benchmarks/max_min_fairness.py [--sizes 2048 32768 100000] [--reference ECOS]

Two instance families over 3 accelerator types (apportion.datasets.synthetic):
* catalog  - throughput rows from 26 job types x 4 scale factors (Gavel-like workloads);
* distinct - every job's throughput row drawn independently.
* congested5 - (extra, harder) 5 types, 20% of cells unusable, weights 0.5-3, capacity tight
  enough that every type is priced.
The reference is the LP written as Gavel writes it: one vectorized cvxpy variable X,
maximize min_i sum_j a[i,j] X[i,j], solved with ECOS (or Clarabel). Times are wall seconds of
the whole call (model build + solve) on this machine; the ratio is reference / apportion.
Both sides first solve a 600-job instance of every family (`--no-warm-up` skips it), so that
one-time imports and first-call caches, which a running service has paid before its first
request, stay out of the figures.
"""

from __future__ import annotations

import argparse
import time

import cvxpy as cp
import numpy as np

from apportion.datasets.synthetic import catalog_problem, distinct_problem
from apportion.formulations.max_min_fairness import level_coefficients
from apportion.solver.model import Compat, PolicyRequest, Problem
from apportion.solver.parameters import MaxMinFairnessParameters
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem


def congested_problem(num_jobs: int, seed: int = 0) -> Problem:
    """5 types, distinct rows spanning 2.6 decades, 20% unusable cells, weights 0.5-3."""
    rng = np.random.default_rng(seed)
    n = 5
    thr = np.exp(rng.uniform(-2, 4, (num_jobs, n)))
    thr[rng.random((num_jobs, n)) < 0.2] = 0
    thr[np.arange(num_jobs), rng.integers(0, n, num_jobs)] = 1.0 + rng.random(num_jobs)
    scale = rng.choice([1, 2, 4], num_jobs)
    weight = rng.uniform(0.5, 3, num_jobs)
    count = rng.integers(max(1, num_jobs // 40), max(2, num_jobs // 15), n)
    return make_problem([f"t{j}" for j in range(n)], count, thr, scale, weight)


def reference(problem: Problem, solver: str) -> tuple[float, float]:
    """(optimal t, wall seconds) of the plain vectorized cvxpy form."""
    started = time.perf_counter()
    a, _, _ = level_coefficients(problem, agnostic=False, compat=Compat.NONE)
    s = problem.jobs.scale_factor.astype(float)
    W = problem.cluster.count.astype(float)
    X = cp.Variable(a.shape, nonneg=True)
    constraints = [cp.sum(X, axis=1) <= 1, s @ X <= W, X[a == 0] == 0]
    objective = cp.Maximize(cp.min(cp.sum(cp.multiply(a, X), axis=1)))
    value = cp.Problem(objective, constraints).solve(solver=solver)
    return float(value), time.perf_counter() - started


def ours(problem: Problem) -> tuple[float, float, str, float | None]:
    """(objective, wall seconds, termination, certified gap) of apportion's solve()."""
    started = time.perf_counter()
    plan = solve(problem, PolicyRequest("weighted_max_min_fairness", MaxMinFairnessParameters()))
    elapsed = time.perf_counter() - started
    cert = plan.certificate
    return float(cert.objective or 0.0), elapsed, str(cert.termination), cert.gap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 32768, 100000])
    parser.add_argument("--families", nargs="+", default=["catalog", "distinct", "congested5"])
    parser.add_argument("--reference", default="ECOS", help="cvxpy solver: ECOS or CLARABEL")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-warm-up", action="store_true", help="time the first calls too")
    args = parser.parse_args()
    makers = {
        "catalog": catalog_problem,
        "distinct": distinct_problem,
        "congested5": congested_problem,
    }
    if not args.no_warm_up:
        for make in makers.values():
            warm = make(600, seed=args.seed + 1)
            ours(warm)
            reference(warm, args.reference)
    header = (
        f"{'family':9s} {'jobs':>7s} {'apportion s':>12s} {'reference s':>12s} "
        f"{'ratio':>7s} {'rel. obj diff':>13s} {'status':>8s} {'cert. gap':>9s}"
    )
    print(f"reference: plain cvxpy + {args.reference}")
    print(header)
    print("-" * len(header))
    for family in args.families:
        for size in args.sizes:
            problem = makers[family](size, seed=args.seed)
            objective, elapsed, status, gap = ours(problem)
            ref_value, ref_elapsed = reference(problem, args.reference)
            diff = abs(objective - ref_value) / max(abs(ref_value), 1e-12)
            print(
                f"{family:9s} {size:7d} {elapsed:12.3f} {ref_elapsed:12.3f} "
                f"{ref_elapsed / elapsed:6.1f}x {diff:13.1e} {status:>8s} "
                f"{gap if gap is not None else float('nan'):9.1e}",
                flush=True,
            )
    print(f"numpy {np.__version__}, cvxpy {cp.__version__}")


if __name__ == "__main__":
    main()
