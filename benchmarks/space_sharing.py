"""Space sharing (max-min fairness, makespan, finish-time fairness, max-sum-throughput,
water filling): apportion against the plain per-pair cvxpy form.

    python benchmarks/space_sharing.py [--sizes 512 2048] [--reference-max 512]
        [--policies max_min makespan ftf throughput water_filling] [--job-level]
        [--class-size K]

Workload: Gavel-like catalog (26 job types x 4 scale factors over 3 types, identical rows
within an entry) with co-location throughputs per job-type pair: each job keeps a factor in
[0.3, 0.9] of its isolated throughput when sharing (combined normalized throughput 0.6-1.8,
about the reference table's spread). apportion solves the job-type formulation (A2.3 groups);
the reference is A2.2 written per job pair and vectorized in cvxpy (Clarabel), run only up to
--reference-max jobs (it has m(m-1)/2 pair variables per type). Peak memory is the process's
maximum resident set size after apportion's solve, before the reference runs. Remaining work:
1-10 h at the job's best throughput; arrivals over the last 5 h and cumulative isolated time
half the time since arrival, so finish-time fairness has different t_i/D_i (the z-LP bracket
runs). The finish-time-fairness reference is the convex form of A2.5 (inv_pos, Clarabel) with
iso_i and C_i taken from apportion's response; water filling has no reference (Gavel's MILP
per round does not fit the reference budget). With --job-level, makespan and finish-time
fairness are also solved with the job-level partner-cell LP (one group per job, HiGHS interior
point: the route before rate classes), printed as a second reference row. With --class-size
K, the throughput rows of each job type are scaled by a factor in [0.9, 1.1] drawn per block
of K jobs, so rate classes (equal rates) hold about K jobs instead of a whole job type.
"""

from __future__ import annotations

import argparse
import resource
import time
from dataclasses import replace

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from apportion.datasets.synthetic import catalog_problem, make_catalog
from apportion.formulations import packed_gavel
from apportion.solver.model import (
    Colocations,
    PolicyRequest,
    Problem,
    SolveOptions,
    SolverPreference,
)
from apportion.solver.parameters import (
    FinishTimeFairnessParameters,
    MaxMinFairnessParameters,
    MaxSumThroughputParameters,
    MinMakespanParameters,
    WaterFillingParameters,
)
from apportion.solver.result import Plan
from apportion.solver.solve import solve

POLICIES = {
    "max_min": ("weighted_max_min_fairness", MaxMinFairnessParameters(space_sharing=True)),
    "makespan": ("min_makespan", MinMakespanParameters(space_sharing=True)),
    "ftf": ("themis_finish_time_fairness", FinishTimeFairnessParameters(space_sharing=True)),
    "throughput": ("max_sum_throughput", MaxSumThroughputParameters(space_sharing=True)),
    "water_filling": ("hierarchical_max_min_fairness", WaterFillingParameters(space_sharing=True)),
}


def workload(num_jobs: int, seed: int = 0) -> Problem:
    catalog = make_catalog(seed=seed)
    problem = catalog_problem(num_jobs, seed=seed, catalog=catalog)
    thr = problem.jobs.throughput
    # Job type = catalog entry (identical row and scale factor).
    _, entry = np.unique(np.column_stack([thr, problem.jobs.scale_factor]), axis=0,
                         return_inverse=True)
    entry = entry.reshape(-1)
    kinds = int(entry.max()) + 1
    base = np.zeros((kinds, thr.shape[1]))
    base[entry] = thr
    rng = np.random.default_rng(seed + 7)
    ratio = rng.uniform(0.3, 0.9, (kinds, kinds))
    type_a, type_b, rows_a, rows_b = [], [], [], []
    for u in range(kinds):
        for v in range(u, kinds):
            type_a.append(f"e{u}")
            type_b.append(f"e{v}")
            rows_a.append(ratio[u, v] * base[u])
            rows_b.append(ratio[v, u] * base[v] if u != v else ratio[u, v] * base[v])
    n = thr.shape[1]
    coloc = Colocations(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, n)),
                        np.zeros((0, n)), tuple(type_a), tuple(type_b), np.array(rows_a),
                        np.array(rows_b))
    hours = rng.uniform(1.0, 10.0, num_jobs)
    elapsed = rng.uniform(0.0, 5 * 3600.0, num_jobs)
    jobs = replace(problem.jobs, job_type=tuple(f"e{k}" for k in entry),
                   total_steps=hours * 3600.0 * thr.max(axis=1), steps_done=np.zeros(num_jobs),
                   arrival_time_s=5 * 3600.0 - elapsed)
    history = replace(problem.history, cumulative_isolated_time_s=0.5 * elapsed)
    return replace(problem, jobs=jobs, colocations=coloc, history=history, time_s=5 * 3600.0)


def split_classes(problem: Problem, size: int, seed: int = 3) -> Problem:
    """Scale the throughput rows of each job type by a factor per block of `size` jobs."""
    types = np.array(problem.jobs.job_type)
    _, kind = np.unique(types, return_inverse=True)
    block = np.zeros(types.size, dtype=np.int64)
    for k in np.unique(kind):
        members = np.flatnonzero(kind == k)
        block[members] = np.arange(members.size) // size
    _, key = np.unique(np.column_stack([kind, block]), axis=0, return_inverse=True)
    key = key.reshape(-1)
    factor = np.random.default_rng(seed).uniform(0.9, 1.1, int(key.max()) + 1)[key]
    jobs = replace(problem.jobs, throughput=problem.jobs.throughput * factor[:, None])
    return replace(problem, jobs=jobs)


def reference(problem: Problem, policy: str, plan: Plan) -> tuple[float, float]:
    """(optimum, seconds) of A2.2 per job pair, vectorized cvxpy + Clarabel."""
    started = time.perf_counter()
    jobs, coloc = problem.jobs, problem.colocations
    assert coloc is not None
    thr = jobs.throughput
    m, n = thr.shape
    W = problem.cluster.count.astype(float)
    s = jobs.scale_factor.astype(float)
    prop = thr @ W / W.sum()
    index = {(a, b): q for q, (a, b) in enumerate(zip(coloc.type_a, coloc.type_b, strict=True))}
    ia, ib = np.triu_indices(m, k=1)
    same = jobs.scale_factor[ia] == jobs.scale_factor[ib]
    ia, ib = ia[same], ib[same]
    pa = np.zeros((ia.size, n))
    pb = np.zeros((ia.size, n))
    for p, (a, b) in enumerate(zip(ia, ib, strict=True)):
        ta, tb = jobs.job_type[a], jobs.job_type[b]
        if (ta, tb) in index:
            q = index[(ta, tb)]
            pa[p], pb[p] = coloc.type_throughput_a[q], coloc.type_throughput_b[q]
        else:
            q = index[(tb, ta)]
            pa[p], pb[p] = coloc.type_throughput_b[q], coloc.type_throughput_a[q]
        if ta == tb:
            pa[p] = pb[p] = (coloc.type_throughput_a[q] + coloc.type_throughput_b[q]) / 2
    P = ia.size
    inc_a = sp.csr_matrix((np.ones(P), (ia, np.arange(P))), shape=(m, P))
    inc_b = sp.csr_matrix((np.ones(P), (ib, np.arange(P))), shape=(m, P))
    x = cp.Variable((m, n), nonneg=True)
    y = cp.Variable((P, n), nonneg=True)
    rate = (cp.sum(cp.multiply(thr, x), axis=1) + inc_a @ cp.sum(cp.multiply(pa, y), axis=1)
            + inc_b @ cp.sum(cp.multiply(pb, y), axis=1))
    budget = cp.sum(x, axis=1) + (inc_a + inc_b) @ cp.sum(y, axis=1)
    cons = [budget <= 1, s @ x + s[ia] @ y <= W]
    R = jobs.total_steps - jobs.steps_done
    if policy == "max_min":
        t = cp.Variable()
        cons.append(t <= cp.multiply(s / (jobs.priority_weight * prop), rate))
        value = cp.Problem(cp.Maximize(t), cons).solve(solver=cp.CLARABEL)
    elif policy == "makespan":
        z = cp.Variable()  # 1/makespan in 1/h: O(1) for the solver's tolerances
        cons.append(rate >= (R / 3600.0) * z)
        value = 3600.0 / cp.Problem(cp.Maximize(z), cons).solve(solver=cp.CLARABEL)
    elif policy == "throughput":
        value = cp.Problem(cp.Maximize(cp.sum(rate)), cons).solve(solver=cp.CLARABEL)
    else:  # ftf, with D_i from the response's state
        state = plan.shares
        assert state.isolated_throughput is not None
        assert state.cumulative_isolated_time_s is not None
        C, iso = state.cumulative_isolated_time_s, state.isolated_throughput
        D = (C + R / iso) / jobs.priority_weight
        t_i = problem.time_s - jobs.arrival_time_s
        level = cp.Variable()
        cons.append(t_i + cp.multiply(R, cp.inv_pos(rate)) <= level * D)
        value = cp.Problem(cp.Minimize(level), cons).solve(solver=cp.CLARABEL)
    return float(value), time.perf_counter() - started


def job_level(problem: Problem, name: str, params: object) -> tuple[Plan, float]:
    """Solve with the job-level LP: `level_cells` sees a Clarabel preference (which keeps
    the job-level LP) while the solve itself keeps HiGHS's interior point."""
    original = packed_gavel.level_cells

    def job_level_cells(*args: object) -> object:
        *rest, options = args
        assert isinstance(options, SolveOptions)
        return original(*rest, replace(options, solver=SolverPreference.CLARABEL))  # type: ignore[arg-type]

    packed_gavel.level_cells = job_level_cells  # type: ignore[assignment]
    try:
        started = time.perf_counter()
        plan = solve(problem, PolicyRequest(name, params))
        return plan, time.perf_counter() - started
    finally:
        packed_gavel.level_cells = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--reference-max", type=int, default=512)
    parser.add_argument("--policies", nargs="+", choices=sorted(POLICIES),
                        default=list(POLICIES))
    parser.add_argument("--job-level", action="store_true",
                        help="also solve makespan and ftf with the job-level LP")
    parser.add_argument("--class-size", type=int, default=0,
                        help="about this many jobs per rate class (0: one class per job type)")
    args = parser.parse_args()
    print(f"{'policy':>13s} {'jobs':>6s} {'apportion s':>12s} {'peak MiB':>9s} "
          f"{'reference s':>12s} {'ratio':>7s} {'rel. diff':>9s} {'status':>8s} {'gap':>8s}  model")
    for policy in args.policies:
        name, params = POLICIES[policy]
        for size in args.sizes:
            problem = workload(size)
            if args.class_size:
                problem = split_classes(problem, args.class_size)
            started = time.perf_counter()
            plan = solve(problem, PolicyRequest(name, params))
            elapsed = time.perf_counter() - started
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            cert = plan.certificate
            ours = float(cert.objective or 0.0)
            if size <= args.reference_max and policy != "water_filling":
                ref, ref_s = reference(problem, policy, plan)
                ref_text = (f"{ref_s:12.3f} {ref_s / elapsed:6.0f}x "
                            f"{abs(ours - ref) / abs(ref):9.1e}")
            else:
                ref_text = f"{'skipped':>12s} {'-':>7s} {'-':>9s}"
            print(f"{policy:>13s} {size:6d} {elapsed:12.3f} {peak:9.0f} {ref_text} "
                  f"{cert.termination!s:>8s} {cert.gap or 0:8.1e}  "
                  f"{cert.model_size.variables} vars", flush=True)
            if args.job_level and policy in ("makespan", "ftf"):
                other, other_s = job_level(problem, name, params)
                value = float(other.certificate.objective or 0.0)
                print(f"{'  job-level LP':>13s} {size:6d} {other_s:12.3f} {'':>9s} "
                      f"{'':>12s} {other_s / elapsed:6.0f}x {abs(ours - value) / abs(value):9.1e} "
                      f"{other.certificate.termination!s:>8s} {other.certificate.gap or 0:8.1e}  "
                      f"{other.certificate.model_size.variables} vars", flush=True)


if __name__ == "__main__":
    main()
