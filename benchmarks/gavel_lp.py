"""Gavel's LP family: apportion against plain cvxpy formulations of the same policy, same run.

    python benchmarks/gavel_lp.py [--ftf-sizes 2048] [--makespan-sizes 2048 32768]
                                  [--max-sum-sizes 2048 32768]

* finish-time fairness (A2.5, docs/policies/gavel.md), 3 types: the reference is Gavel's form, one
  cvxpy expression per job `(t_i + R_i * inv_pos(thr_i)) / D_i` and `Minimize(maximum(...))`,
  solved with ECOS (Gavel's solver; `--ftf-reference CLARABEL` for the other). apportion:
  z-LPs with dual lower bounds.
* min makespan (A2.8), 3 types: the reference is bisection over feasibility LPs
  "exists X with thr_i(X) >= R_i / M" written once in cvxpy with a DPP parameter (compiled
  once, re-solved with HiGHS at each M), both Gavel's (bracket [100, 1e6], stop at ratio 1.05)
  and to 1e-6 relative (the precision of apportion's certificate). apportion: one LP.

* max-sum-throughput and cost-normalized throughput (A2.6, A2.7), Gavel-catalog and distinct
  jobs: the reference is the plain per-job LP of the same problem (sparse, built with numpy,
  solved by HiGHS through scipy's linprog), timed in the same run. apportion solves one LP row
  per class of interchangeable jobs.

Instances: `apportion.datasets.synthetic.distinct_problem` (independent throughput rows, scale
factors 1-8, ~0.75 GPUs per job) plus remaining steps, ages and FTF state drawn with a seed.
Times are wall seconds of the whole call (model build + solve); ratio = reference / apportion.
"""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import replace

import cvxpy as cp
import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from apportion.datasets.synthetic import catalog_problem, distinct_problem
from apportion.formulations.gavel_lp import isolated_throughput
from apportion.solver.backends.highs import new_highs
from apportion.solver.model import FloatArray, PolicyRequest, Problem
from apportion.solver.parameters import (
    CostThroughputParameters,
    FinishTimeFairnessParameters,
    MaxSumThroughputParameters,
    MinMakespanParameters,
)
from apportion.solver.solve import solve


def instance(num_jobs: int, seed: int, work: str = "spread") -> Problem:
    """distinct_problem with remaining work (spread: log-uniform 1e3-1e6 steps; balanced:
    about 1e4 s on the job's best type, so that capacity binds), ages 0-1e4 s and
    C_i = age * U(0.5, 1)."""
    prob = distinct_problem(num_jobs, seed)
    rng = np.random.default_rng(seed + 7)
    age = rng.uniform(0, 1e4, num_jobs)
    if work == "spread":
        total = np.exp(rng.uniform(np.log(1e3), np.log(1e6), num_jobs))
    else:
        best = np.where(prob.usable, prob.jobs.throughput, 0.0).max(axis=1)
        total = 1e4 * best * rng.uniform(0.9, 1.1, num_jobs)
    return replace(
        prob,
        time_s=1e4,
        jobs=replace(prob.jobs, total_steps=total, arrival_time_s=1e4 - age),
        history=replace(
            prob.history, cumulative_isolated_time_s=age * rng.uniform(0.5, 1.0, num_jobs)
        ),
    )


def _base(problem: Problem, X: cp.Variable) -> list[cp.Constraint]:
    s = problem.jobs.scale_factor.astype(float)
    W = problem.cluster.count.astype(float)
    return [cp.sum(X, axis=1) <= 1, s @ X <= W, X[~problem.usable] == 0]


def ftf_reference(problem: Problem, solver: str) -> tuple[float, float]:
    """(rho*, wall s) of Gavel's cvxpy form (inv_pos per job, maximum over m expressions)."""
    started = time.perf_counter()
    jobs = problem.jobs
    T = jobs.throughput
    R = jobs.remaining_steps
    iso = isolated_throughput(
        T, jobs.scale_factor.astype(float), problem.cluster.count.astype(float)
    )
    D = problem.history.cumulative_isolated_time_s + R / iso
    t = problem.time_s - jobs.arrival_time_s
    X = cp.Variable(T.shape, nonneg=True)
    thr = cp.sum(cp.multiply(T, X), axis=1)
    terms = [(t[i] + R[i] * cp.inv_pos(thr[i])) / D[i] for i in range(jobs.num_jobs)]
    value = cp.Problem(cp.Minimize(cp.maximum(*terms)), _base(problem, X)).solve(solver=solver)
    return float(value), time.perf_counter() - started


def makespan_reference(
    problem: Problem, ratio: float, gavel_bracket: bool
) -> tuple[float, float, int]:
    """(makespan, wall s, LPs) by bisection over cvxpy feasibility LPs (HiGHS), one DPP
    compilation. Gavel's bracket [100, 1e6] (x10 shifts) or a proven one from A2.8 3."""
    started = time.perf_counter()
    T = problem.jobs.throughput
    R = problem.jobs.remaining_steps
    X = cp.Variable(T.shape, nonneg=True)
    inv_m = cp.Parameter(nonneg=True)
    thr = cp.sum(cp.multiply(T, X), axis=1)
    prob = cp.Problem(cp.Minimize(0), [*_base(problem, X), thr >= R * inv_m])
    lps = 0

    def feasible(makespan: float) -> bool:
        nonlocal lps
        lps += 1
        inv_m.value = 1.0 / makespan
        try:
            prob.solve(solver=cp.HIGHS)
        except ValueError:
            # HiGHS's "infeasible or unbounded": the objective is 0, so it is infeasible
            return False
        return prob.status == cp.OPTIMAL

    if gavel_bracket:
        lo, hi = 100.0, 1e6
        while not feasible(hi):
            lo, hi = lo * 10, hi * 10
    else:
        best = np.where(problem.usable, T, 0).max(axis=1)
        lo = float(np.max(R / best))
        hi = lo * 1e3
        while not feasible(hi):
            lo, hi = hi, hi * 10
    while ratio * lo < hi:
        mid = 0.5 * (lo + hi)
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return hi, time.perf_counter() - started, lps


def max_sum_reference(problem: Problem, weight: FloatArray) -> tuple[float, float]:
    """(optimum, wall s) of the plain per-job LP max sum_ij weight_j T_ij X_ij over usable cells,
    capacity and time budgets, with HiGHS (scipy.optimize.linprog)."""
    started = time.perf_counter()
    T = problem.jobs.throughput
    m, n = T.shape
    rows, cols = np.nonzero(problem.usable)
    k = rows.size
    s = problem.jobs.scale_factor.astype(float)
    a_ub = sp.csc_matrix(
        (np.concatenate([s[rows], np.ones(k)]),
         (np.concatenate([cols, n + rows]), np.concatenate([np.arange(k), np.arange(k)]))),
        shape=(n + m, k),
    )
    b_ub = np.concatenate([problem.cluster.count.astype(float), np.ones(m)])
    result = linprog(-(T[rows, cols] * weight[cols]), A_ub=a_ub, b_ub=b_ub,
                     bounds=(0, None), method="highs")
    return float(-result.fun), time.perf_counter() - started


def ours(
    problem: Problem, name: str, params: object
) -> tuple[float, float, str, float | None, str]:
    started = time.perf_counter()
    plan = solve(problem, PolicyRequest(name, params))
    elapsed = time.perf_counter() - started
    cert = plan.certificate
    return float(cert.objective or 0.0), elapsed, str(cert.termination), cert.gap, cert.formulation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ftf-sizes", type=int, nargs="*", default=[2048])
    parser.add_argument("--makespan-sizes", type=int, nargs="*", default=[2048, 32768])
    parser.add_argument("--max-sum-sizes", type=int, nargs="*", default=[2048, 32768])
    parser.add_argument("--ftf-reference", default="ECOS")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--work", nargs="+", default=["spread", "balanced"])
    args = parser.parse_args()
    new_highs()  # HiGHS's one-time banner goes to /dev/null, not into the table
    print(
        f"{'policy':14s} {'jobs':>6s} {'seed':>4s} {'apportion s':>11s} {'reference':28s} "
        f"{'ref s':>8s} {'ratio':>7s} {'rel diff':>9s} {'status':>8s} {'gap':>8s}"
    )
    for m, seed, work in itertools.product(args.ftf_sizes, args.seeds, args.work):
        prob = instance(m, seed, work)
        params = FinishTimeFairnessParameters()
        obj, sec, status, gap, _ = ours(prob, "themis_finish_time_fairness", params)
        ref, ref_sec = ftf_reference(prob, args.ftf_reference)
        label = f"cvxpy inv_pos {args.ftf_reference}"
        print(
            f"{'ftf/' + work:14s} {m:6d} {seed:4d} {sec:11.3f} {label:28s} {ref_sec:8.2f} "
            f"{ref_sec / sec:7.1f} {abs(obj - ref) / ref:9.1e} {status:>8s} {gap or 0:8.1e}"
        )
    for m, seed, work in itertools.product(args.makespan_sizes, args.seeds, args.work):
        prob = instance(m, seed, work)
        obj, sec, status, gap, _ = ours(prob, "min_makespan", MinMakespanParameters())
        for name, ratio, gavel in (("1.05 [100,1e6]", 1.05, True), ("1e-6", 1 + 1e-6, False)):
            ref, ref_sec, lps = makespan_reference(prob, ratio, gavel)
            label = f"bisection {name} ({lps} LPs)"
            print(
                f"{'makespan/' + work:14s} {m:6d} {seed:4d} {sec:11.3f} {label:28s} "
                f"{ref_sec:8.2f} {ref_sec / sec:7.1f} {(ref - obj) / obj:9.1e} {status:>8s} "
                f"{gap or 0:8.1e}"
            )


    for m, seed, kind in itertools.product(args.max_sum_sizes, args.seeds, ("catalog", "distinct")):
        prob = catalog_problem(m, seed) if kind == "catalog" else distinct_problem(m, seed)
        n = prob.cluster.num_types
        cost = np.linspace(1.0, 3.0, n)
        prob = replace(prob, cluster=replace(prob.cluster, cost_per_hour=cost))
        cases = (("max_sum", "max_sum_throughput", MaxSumThroughputParameters(), np.ones(n)),
                 ("cost", "cost_normalized_throughput", CostThroughputParameters(), 1.0 / cost))
        for label, name, params, weight in cases:
            obj, sec, status, gap, _ = ours(prob, name, params)
            ref, ref_sec = max_sum_reference(prob, weight)
            print(
                f"{label + '/' + kind:14s} {m:6d} {seed:4d} {sec:11.3f} {'per-job LP (HiGHS)':28s} "
                f"{ref_sec:8.2f} {ref_sec / sec:7.1f} {abs(obj - ref) / ref:9.1e} {status:>8s} "
                f"{gap or 0:8.1e}"
            )


if __name__ == "__main__":
    main()
