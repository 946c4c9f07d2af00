"""Water filling (lexicographic max-min), with and without tenants: apportion against Gavel's
LP + MILP iteration.

    python benchmarks/water_filling.py [--sizes 64 256 1024] [--tenant-sizes 256 512]
                                       [--reference-max 256]

Families:
* capped: distinct throughput rows over 3 types (0.2-5 steps/s), scale factors 1/2/4, weights
  0.5/1/2, capacity loose enough that many jobs are capped by their own time budget (the case
  that needs many rounds); no tenants.
* tenants: issue #13's instance: single-device jobs of Gavel's catalog (the project's synthetic
  table), weight 1, spread over 5 tenants of weight 1 in fairness mode, 100 devices each of
  v100/p100/k80 per 256 jobs. Tenant weights change after every freeze.
apportion: progressive filling with LP duals (formulations/water_filling.py). Reference:
Gavel's algorithm as A2.4 (docs/policies/gavel.md) describes it (per round an LP, then a bottleneck
MILP with big-M and the 1.0001 / 1e-5 test, tenant weights recomputed after each freeze; HiGHS
through cvxpy for both). Prints times, their ratio, the rounds (apportion: LP rounds; the
reference: LP and MILP solves), the largest difference of a job's normalized throughput from
the reference's (|u - u_ref| / max(1, u_ref)), apportion's smallest round-1 level over the
reference's round-1 optimum (1 = the first round's max-min optimum is kept), and the
termination.
"""

from __future__ import annotations

import argparse
import re
import time
from dataclasses import replace

import cvxpy as cp
import numpy as np

from apportion.datasets.generators import builtin_throughputs, gavel_workload
from apportion.solver.model import PolicyRequest, Problem, Tenant
from apportion.solver.parameters import WaterFillingParameters
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem


def capped(num_jobs: int, seed: int = 1) -> Problem:
    rng = np.random.default_rng(seed)
    m = num_jobs
    return make_problem(["a", "b", "c"], [m // 2, m // 3, m // 2], rng.uniform(0.2, 5, (m, 3)),
                        rng.choice([1, 2, 4], m), rng.choice([0.5, 1.0, 2.0], m))


def tenants(num_jobs: int, seed: int = 0) -> Problem:
    table = builtin_throughputs()
    workload = gavel_workload(num_jobs, seed=seed, scale_probabilities=(1, 0, 0, 0),
                              num_tenants=5)
    types = ("v100", "p100", "k80")
    thr = [[table.isolated[(key, 1)][t] for t in types] for key in workload.job_type.values()]
    per_type = round(100 * num_jobs / 256)
    problem = make_problem(types, [per_type] * 3, thr, [1] * num_jobs, [1.0] * num_jobs)
    names = tuple(str(name) for name in workload.tenant.values())
    return replace(problem, jobs=replace(problem.jobs, tenant=names),
                   tenants=tuple(Tenant(f"t{e}", 1.0) for e in range(5)))


def fairness_weights(problem: Problem, frozen: np.ndarray) -> np.ndarray:
    """A2.4's effective weights with fairness-mode tenants (every tenant here): E_e w_i over
    the tenant's unfrozen weight; a job without a tenant keeps w_i; frozen jobs 0."""
    jobs = problem.jobs
    share = {t.name: t.weight for t in problem.tenants}
    w = np.where(frozen, 0.0, jobs.priority_weight)
    names = np.array(jobs.tenant)
    out = w.copy()
    for name in set(jobs.tenant) - {""}:
        members = names == name
        out[members] = share.get(name, 1.0) * w[members] / max(w[members].sum(), 1e-300)
    return out


def gavel(problem: Problem) -> tuple[np.ndarray, float, float, int]:
    """(u per job, first round's optimum, seconds, LP+MILP solves) of Gavel's water filling
    (A2.4): levels rise from the running values r, u >= r kept, weights recomputed."""
    started = time.perf_counter()
    thr = problem.jobs.throughput
    W = problem.cluster.count.astype(float)
    s = problem.jobs.scale_factor.astype(float)
    m, n = thr.shape
    prop = thr @ W / W.sum()
    allowed = (thr > 0) & (s[:, None] <= W[None, :])
    u_coef = np.where(allowed, thr / prop[:, None], 0.0)
    big_m = float((u_coef * s[:, None]).max())
    frozen = np.zeros(m, dtype=bool)
    r = np.zeros(m)  # running values (u units); frozen values once frozen
    solves = 0
    first = 0.0
    X = cp.Variable((m, n), nonneg=True)
    u = cp.sum(cp.multiply(u_coef, X), axis=1)
    base = [cp.sum(X, axis=1) <= 1, s @ X <= W, X[~allowed] == 0]
    while not frozen.all():
        rate = fairness_weights(problem, frozen) / s
        active = ~frozen & (rate > 0)
        c = cp.Variable()
        live = np.flatnonzero(active)
        rows = [c <= cp.multiply(1 / rate[live], u[live] - r[live])]
        if (~active).any():
            rows.append(c <= big_m)
        lp = cp.Problem(cp.Maximize(c), [*base, u >= r * (1 - 1e-9), *rows])
        lp.solve(solver=cp.HIGHS)
        solves += 1
        first = first or float(c.value)
        r = np.where(active, r + float(c.value) * rate, r)
        z = cp.Variable(m, boolean=True)
        milp = cp.Problem(cp.Maximize(cp.sum(z)), [
            *base,
            u >= r * (1 - 1e-9),
            big_m * z >= u - 1.0001 * r + 1e-5,
            big_m * (1 - z) >= 1.0001 * r - u,
            z[~active] == 0 if (~active).any() else z >= 0,
        ])
        milp.solve(solver=cp.HIGHS)
        solves += 1
        can_rise = np.round(z.value) > 0 if milp.status == "optimal" else np.zeros(m, bool)
        newly = active & ~can_rise
        if not newly.any():
            break
        frozen |= newly
    return r, first, time.perf_counter() - started, solves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--tenant-sizes", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--reference-max", type=int, default=256)
    args = parser.parse_args()
    print(f"{'family':8s} {'jobs':>5s} {'apportion s':>12s} {'rounds':>6s} {'reference s':>12s} "
          f"{'solves':>7s} {'ratio':>7s} {'u diff':>8s} {'LP1 kept':>8s} {'status':>18s}")
    runs = [("capped", size, capped(size)) for size in args.sizes]
    runs += [("tenants", size, tenants(size)) for size in args.tenant_sizes]
    for family, size, problem in runs:
        started = time.perf_counter()
        plan = solve(problem, PolicyRequest("hierarchical_max_min_fairness",
                                            WaterFillingParameters()))
        elapsed = time.perf_counter() - started
        found = re.search(r"(\d+) (?:LP )?rounds", plan.certificate.formulation)
        rounds = found.group(1) if found else "?"
        if size <= args.reference_max:
            u_ref, first, ref_s, solves = gavel(problem)
            diff = float(np.max(np.abs(plan.normalized_throughput - u_ref)
                                / np.maximum(1.0, u_ref)))
            kept = (plan.certificate.objective or 0.0) / first
            ref = f"{ref_s:12.3f} {solves:7d} {ref_s / elapsed:6.1f}x {diff:8.1e} {kept:8.4f}"
        else:
            ref = f"{'skipped':>12s} {'-':>7s} {'-':>7s} {'-':>8s} {'-':>8s}"
        print(f"{family:8s} {size:5d} {elapsed:12.3f} {rounds:>6s} {ref} "
              f"{plan.certificate.termination!s:>18s}", flush=True)


if __name__ == "__main__":
    main()
