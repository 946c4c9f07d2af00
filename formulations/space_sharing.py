"""Max-min fairness with space sharing (Gavel's `max_min_fairness_packed`), formulations.md
A2.2 (per-pair variables) and A2.3 (job types), in one formulation over *groups*.

Groups. Jobs named in an explicit `colocations` pair are groups of their own (k = 1). The other
jobs are grouped by (job type, throughput row, scale factor, weight); a group of k identical
jobs is interchangeable in the LP, so by the symmetry argument of A2.3 (average an optimum
over the permutations of identical jobs) there is an optimal solution in which they all get the
same single shares and the same total time with each partner group. Pairs are between groups:
explicit job pairs, and for every type pair (tau, sigma) of `type_colocations` every pair of
groups of those types with equal scale factors, including a group with itself when k >= 2.

Variables and rows, per type j (all time shares in [0, 1], devices in units of s):

    x[g, j]  time share of each job of g alone on j
    X[p, j]  total time share of all job pairs of pair-group p = (g, h) on j, summed over them
    each job of g spends c[g, p] X[p, j] in p on j:  c = 1/k_g (g != h) or 2/k_g (g == h)

    maximize t  s.t.  t <= scale_g (sum_j T[g,j] x[g,j] + sum_(p, j) c[g,p] Tpair_g^p[j] X[p,j])
                      sum_g k_g s_g x[g,j] + sum_p s_p X[p,j] <= W[j]    (a pair holds s GPUs once)
                      sum_j x[g,j] + sum_(p, j) c[g,p] X[p,j] <= 1       (each job's time)
    with scale_g = s_g / (w_g prop_g) (A2.1). With one job per group this is exactly A2.2.

Pruning (A2.2 test 4, exact): a pair cell where Tpair_a/T_a + Tpair_b/T_b <= 1 is dominated by
time-slicing the two jobs alone and is not created.

Decoding. A pair-group's total X[p, j] is split into concrete job pairs: between two groups by
the north-west-corner rule (each job of g supplies X/k_g, each job of h takes X/k_h: at most
k_g + k_h - 1 pairs), within a group by a cycle (job r with job r+1, X/k each; one pair when
k = 2), so every job gets exactly its share and every pair holds its devices once.

Certificate. As in A2.1: the plan is repaired onto the feasible set and its minimum level
recomputed; the duals are repaired onto the dual feasible set (sigma raised until every single
and pair column prices out) and their objective is a proven upper bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from apportion.formulations.lp import solve_lp
from apportion.formulations.max_min_fairness import level_coefficients
from apportion.solver.model import (
    Compat,
    FloatArray,
    IntArray,
    Problem,
    SolveOptions,
    SolverPreference,
)
from apportion.solver.parameters import MaxMinFairnessParameters
from apportion.solver.result import Certificate, JobStatus, ModelSize, Plan, Termination

DEFAULT_GAP = 1e-6


@dataclass(frozen=True)
class Groups:
    """Jobs grouped for the LP: `group[i]` of job i, `size[g]` = k_g, `rep[g]` a member."""

    group: IntArray
    size: FloatArray
    rep: IntArray


@dataclass(frozen=True)
class PairGroups:
    """Pair-groups p = (g[p], h[p]) with the per-type throughput of g's job and h's job."""

    g: IntArray
    h: IntArray
    thr_g: FloatArray
    thr_h: FloatArray


def make_groups(problem: Problem) -> Groups:
    """Group interchangeable jobs (module docstring)."""
    jobs = problem.jobs
    m = jobs.num_jobs
    coloc = problem.colocations
    own = np.zeros(m)
    if coloc is not None and coloc.job_a.size:
        involved = np.union1d(coloc.job_a, coloc.job_b)
        own[involved] = involved + 1
    types = jobs.job_type or ("",) * m
    codes = {name: c for c, name in enumerate(sorted(set(types)))}
    type_code = np.array([codes[name] for name in types], dtype=np.float64)
    key = np.column_stack([own, type_code, jobs.throughput, jobs.scale_factor,
                           jobs.priority_weight])
    _, first, inverse, counts = np.unique(key, axis=0, return_index=True, return_inverse=True,
                                          return_counts=True)
    return Groups(inverse.reshape(-1), counts.astype(np.float64), first)


def make_pairs(problem: Problem, groups: Groups) -> PairGroups:
    """Explicit job pairs, then type pairs over groups of those types with equal scale."""
    jobs = problem.jobs
    coloc = problem.colocations
    n = problem.cluster.num_types
    g_list: list[IntArray] = []
    h_list: list[IntArray] = []
    tg_list: list[FloatArray] = []
    th_list: list[FloatArray] = []
    if coloc is None:
        return PairGroups(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, n)),
                          np.zeros((0, n)))
    if coloc.job_a.size:
        g_list.append(groups.group[coloc.job_a])
        h_list.append(groups.group[coloc.job_b])
        tg_list.append(coloc.throughput_a)
        th_list.append(coloc.throughput_b)
    if coloc.type_a and jobs.job_type:
        explicit = np.zeros(jobs.num_jobs, dtype=bool)
        explicit[coloc.job_a] = True
        explicit[coloc.job_b] = True
        rep_type = np.array([jobs.job_type[r] for r in groups.rep])
        rep_scale = jobs.scale_factor[groups.rep]
        typed = ~explicit[groups.rep]
        for q, (ta, tb) in enumerate(zip(coloc.type_a, coloc.type_b, strict=True)):
            ga = np.flatnonzero(typed & (rep_type == ta))
            gb = np.flatnonzero(typed & (rep_type == tb))
            if ta == tb:
                row = (coloc.type_throughput_a[q] + coloc.type_throughput_b[q]) / 2
                gg, hh = np.meshgrid(ga, ga, indexing="ij")
                keep = (gg <= hh) & (rep_scale[gg] == rep_scale[hh])
                keep &= (gg != hh) | (groups.size[gg] >= 2)
                gg, hh = gg[keep], hh[keep]
                g_list.append(gg)
                h_list.append(hh)
                tg_list.append(np.repeat(row[None, :], gg.size, axis=0))
                th_list.append(np.repeat(row[None, :], gg.size, axis=0))
            else:
                gg, hh = np.meshgrid(ga, gb, indexing="ij")
                keep = rep_scale[gg] == rep_scale[hh]
                gg, hh = gg[keep], hh[keep]
                g_list.append(gg)
                h_list.append(hh)
                tg_list.append(np.repeat(coloc.type_throughput_a[q][None, :], gg.size, axis=0))
                th_list.append(np.repeat(coloc.type_throughput_b[q][None, :], gg.size, axis=0))
    if not g_list:
        return PairGroups(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, n)),
                          np.zeros((0, n)))
    return PairGroups(np.concatenate(g_list).astype(np.int64),
                      np.concatenate(h_list).astype(np.int64),
                      np.concatenate(tg_list), np.concatenate(th_list))


@dataclass(frozen=True)
class PackedLP:
    """The LP data: single cells (si, sj), pair cells (pp, pj), their level coefficients."""

    level_single: FloatArray  # (G, n) level per unit of x[g, j]
    si: IntArray
    sj: IntArray
    pp: IntArray
    pj: IntArray
    level_pair_g: FloatArray  # per pair cell: level of g's job per unit of X
    level_pair_h: FloatArray
    c_g: FloatArray  # per pair cell: time of each g job per unit of X
    c_h: FloatArray
    pair_g: IntArray
    pair_h: IntArray
    k: FloatArray
    s: FloatArray  # (G,)
    W: FloatArray


def build_lp(problem: Problem, groups: Groups, pairs: PairGroups, agnostic: bool,
             compat: Compat) -> PackedLP:
    """Cells, coefficients and pruning (module docstring)."""
    a, _, thr = level_coefficients(problem, agnostic, compat)
    rep = groups.rep
    a_g = a[rep]
    thr_g = thr[rep]
    scale_g = np.divide(a_g.sum(axis=1), thr_g.sum(axis=1) + (a_g.sum(axis=1) == 0),
                        where=a_g.sum(axis=1) > 0, out=np.zeros(rep.size))
    iso = problem.jobs.throughput[rep]
    si, sj = np.nonzero(a_g > 0)
    k = groups.size
    s = problem.jobs.scale_factor[rep].astype(np.float64)
    g, h = pairs.g, pairs.h
    allowed = (a_g[g] > 0) & (a_g[h] > 0) & ((pairs.thr_g > 0) | (pairs.thr_h > 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = np.where(allowed, pairs.thr_g / iso[g], 0.0)
        beta = np.where(allowed, pairs.thr_h / iso[h], 0.0)
    allowed &= alpha + beta > 1  # A2.2 test 4: otherwise time-slicing dominates
    pp, pj = np.nonzero(allowed)
    self_pair = g[pp] == h[pp]
    c_g = np.where(self_pair, 2.0, 1.0) / k[g[pp]]
    c_h = np.where(self_pair, 0.0, 1.0 / k[h[pp]])
    # Throughput unit: aware = steps/s of the pair; agnostic = relative to running alone.
    pair_thr_g = alpha[pp, pj] * thr_g[g[pp], pj]
    pair_thr_h = beta[pp, pj] * thr_g[h[pp], pj]
    return PackedLP(
        level_single=a_g, si=si, sj=sj, pp=pp, pj=pj,
        level_pair_g=scale_g[g[pp]] * c_g * pair_thr_g,
        level_pair_h=scale_g[h[pp]] * c_h * pair_thr_h,
        c_g=c_g, c_h=c_h, pair_g=g[pp], pair_h=h[pp], k=k, s=s,
        W=problem.cluster.count.astype(np.float64),
    )


def _matrix(lp: PackedLP) -> tuple[sp.csc_matrix, FloatArray, FloatArray]:
    """max t: variables [singles, pairs, t]; rows [level (G), capacity (n), budget (G)]."""
    G, n = lp.level_single.shape
    ns, npair = lp.si.size, lp.pp.size
    single_cols = np.arange(ns)
    pair_cols = ns + np.arange(npair)
    t_col = ns + npair
    not_self = lp.pair_g != lp.pair_h
    rows = [
        lp.si, lp.pair_g, lp.pair_h[not_self], np.arange(G),
        G + lp.sj, G + lp.pj,
        G + n + lp.si, G + n + lp.pair_g, G + n + lp.pair_h[not_self],
    ]
    cols = [
        single_cols, pair_cols, pair_cols[not_self], np.full(G, t_col),
        single_cols, pair_cols,
        single_cols, pair_cols, pair_cols[not_self],
    ]
    vals = [
        -lp.level_single[lp.si, lp.sj], -lp.level_pair_g, -lp.level_pair_h[not_self], np.ones(G),
        lp.k[lp.si] * lp.s[lp.si], lp.s[lp.pair_g],
        np.ones(ns), lp.c_g, lp.c_h[not_self],
    ]
    matrix = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                           shape=(2 * G + n, t_col + 1))
    b = np.concatenate([np.zeros(G), lp.W, np.ones(G)])
    c = np.zeros(t_col + 1)
    c[t_col] = 1.0
    return matrix, b, c


def _repair(lp: PackedLP, x: FloatArray, X: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Clip and scale (singles x per cell, pairs X per cell) onto the feasible set."""
    G, n = lp.level_single.shape
    x = np.maximum(x, 0.0)
    X = np.maximum(X, 0.0)
    x[x < 1e-9] = 0.0
    X[X < 1e-9] = 0.0
    budget = np.bincount(lp.si, x, minlength=G) + np.bincount(lp.pair_g, lp.c_g * X, minlength=G)
    budget += np.bincount(lp.pair_h, lp.c_h * X, minlength=G)
    f = 1.0 / np.maximum(1.0, budget)
    x = x * f[lp.si]
    X = X * np.minimum(f[lp.pair_g], f[lp.pair_h])
    use = np.bincount(lp.sj, lp.k[lp.si] * lp.s[lp.si] * x, minlength=n)
    use += np.bincount(lp.pj, lp.s[lp.pair_g] * X, minlength=n)
    factor = np.where(use > lp.W, lp.W / np.where(use > 0, use, 1.0), 1.0)
    return x * factor[lp.sj], X * factor[lp.pj]


def _levels(lp: PackedLP, x: FloatArray, X: FloatArray) -> FloatArray:
    G = lp.level_single.shape[0]
    levels = np.bincount(lp.si, lp.level_single[lp.si, lp.sj] * x, minlength=G)
    levels += np.bincount(lp.pair_g, lp.level_pair_g * X, minlength=G)
    levels += np.bincount(lp.pair_h, lp.level_pair_h * X, minlength=G)
    return np.asarray(levels, dtype=np.float64)


def _dual_bound(lp: PackedLP, y: FloatArray, pi: FloatArray, sigma0: FloatArray
                ) -> float | None:
    """Objective of a dual feasible point built from the solver's (y, pi, sigma): y normalized,
    sigma raised until every single and pair column prices out; a proven upper bound on t*
    (weak duality)."""
    y = np.maximum(y, 0.0)
    if y.sum() <= 0:
        return None
    scale = y.sum()
    y = y / scale
    pi = np.maximum(pi, 0.0) / scale
    need = y[lp.si] * lp.level_single[lp.si, lp.sj] - lp.k[lp.si] * lp.s[lp.si] * pi[lp.sj]
    sigma = np.maximum(sigma0, 0.0) / scale
    np.maximum.at(sigma, lp.si, need)
    G = sigma.size
    deficit = (y[lp.pair_g] * lp.level_pair_g + y[lp.pair_h] * lp.level_pair_h
               - lp.s[lp.pair_g] * pi[lp.pj] - lp.c_g * sigma[lp.pair_g]
               - lp.c_h * sigma[lp.pair_h])
    raise_by = np.zeros(G)
    np.maximum.at(raise_by, lp.pair_g, np.maximum(deficit, 0.0) / lp.c_g)
    sigma += raise_by
    return float(lp.W @ pi + sigma.sum())


def _split_between(members_a: IntArray, members_b: IntArray, total: float
                   ) -> list[tuple[int, int, float]]:
    """North-west corner: each of A supplies total/|A|, each of B takes total/|B|."""
    supply = total / members_a.size
    demand = total / members_b.size
    out: list[tuple[int, int, float]] = []
    ia = ib = 0
    left_a, left_b = supply, demand
    while ia < members_a.size and ib < members_b.size:
        amount = min(left_a, left_b)
        if amount > 1e-15:
            out.append((int(members_a[ia]), int(members_b[ib]), amount))
        left_a -= amount
        left_b -= amount
        if left_a <= 1e-15 * max(1.0, total):
            ia += 1
            left_a = supply
        if left_b <= 1e-15 * max(1.0, total):
            ib += 1
            left_b = demand
    return out


def _split_within(members: IntArray, total: float) -> list[tuple[int, int, float]]:
    """A cycle over the group's jobs: each job in two pairs of total/k (one pair if k = 2)."""
    k = members.size
    if k == 2:
        return [(int(members[0]), int(members[1]), total)]
    return [(int(members[r]), int(members[(r + 1) % k]), total / k) for r in range(k)]


def solve_packed(problem: Problem, params: MaxMinFairnessParameters, compat: Compat,
                 options: SolveOptions) -> Plan:
    """Max-min fairness with space sharing; see the module docstring."""
    started = time.perf_counter()
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    groups = make_groups(problem)
    pairs = make_pairs(problem, groups)
    lp = build_lp(problem, groups, pairs, params.heterogeneity_agnostic, compat)
    matrix, b, c = _matrix(lp)
    build = time.perf_counter() - started
    result = solve_lp(c, matrix, b, SolverPreference.CLARABEL, options.time_limit_s,
                      options.threads)
    G = lp.level_single.shape[0]
    ns, npair = lp.si.size, lp.pp.size
    x_raw = result.x[:ns] if result.x.size else np.zeros(ns)
    X_raw = result.x[ns:ns + npair] if result.x.size else np.zeros(npair)
    x, X = _repair(lp, x_raw, X_raw)
    levels = _levels(lp, x, X)
    objective = float(levels.min()) if G else 0.0
    duals = result.row_dual if result.row_dual.size else np.zeros(2 * G + n)
    bound = _dual_bound(lp, duals[:G], duals[G:G + n], duals[G + n:2 * G + n])
    gap = Certificate(Termination.OPTIMAL, True, objective, bound).gap
    tolerance = options.relative_gap or DEFAULT_GAP
    if result.status == "optimal":
        ok = gap is not None and gap <= tolerance
        termination = Termination.OPTIMAL if ok else Termination.OPTIMAL_INACCURATE
    elif result.status == "time_limit":
        termination = Termination.FEASIBLE if objective > 0 else Termination.NO_SOLUTION
    else:
        termination = Termination.ERROR
    # Per-job outputs: time alone and in pairs; throughput (steps/s) at the real pair rates.
    single = np.zeros((G, n))
    np.add.at(single, (lp.si, lp.sj), x)
    time_share = (single + _pair_time(lp, X, G, n))[groups.group]
    pair_steps = np.bincount(lp.pair_g, lp.c_g * X * pairs.thr_g[lp.pp, lp.pj], minlength=G)
    pair_steps += np.bincount(lp.pair_h, lp.c_h * X * pairs.thr_h[lp.pp, lp.pj], minlength=G)
    effective = (np.einsum("ij,ij->i", problem.jobs.throughput, single[groups.group])
                 + pair_steps[groups.group])
    order = np.argsort(groups.group, kind="stable")  # jobs of each group, one sort
    members = np.split(order, np.cumsum(groups.size.astype(np.int64))[:-1])
    colocated: list[tuple[int, int, int, float]] = []
    for cell in np.flatnonzero(X > 0):
        g, h, j = int(lp.pair_g[cell]), int(lp.pair_h[cell]), int(lp.pj[cell])
        split = (_split_within(members[g], float(X[cell])) if g == h
                 else _split_between(members[g], members[h], float(X[cell])))
        colocated.extend((ja, jb, j, share) for ja, jb, share in split)
    _, prop, _ = level_coefficients(problem, params.heterogeneity_agnostic, compat)
    cert = Certificate(
        termination=termination,
        maximize=True,
        objective=objective,
        bound=bound,
        solver=result.solver,
        solver_version=result.solver_version,
        formulation=(f"max-min fairness with space sharing (A2.2/A2.3): {G} groups of {m} "
                     f"jobs, {npair} pair cells after pruning"),
        build_time_s=build,
        solve_time_s=result.solve_time_s,
        model_size=ModelSize(matrix.shape[1], matrix.shape[0], int(matrix.nnz), 0),
        max_violation=0.0,
        detail=result.detail,
    )
    group_levels = levels[groups.group]
    return Plan(
        time_share=time_share,
        effective_throughput=effective,
        normalized_throughput=np.divide(effective, prop, out=np.zeros(m), where=prop > 0),
        objective_value=group_levels,
        job_dual=np.zeros(m),
        accelerator_prices=np.maximum(duals[G:G + n], 0.0),
        certificate=cert,
        job_status=(JobStatus.ALLOCATED,) * m,
        job_reason=("",) * m,
        colocated=tuple(colocated),
    )


def _pair_time(lp: PackedLP, X: FloatArray, G: int, n: int) -> FloatArray:
    """(G, n) time each job of a group spends in pairs on each type."""
    out = np.zeros((G, n))
    np.add.at(out, (lp.pair_g, lp.pj), lp.c_g * X)
    np.add.at(out, (lp.pair_h, lp.pj), lp.c_h * X)
    return out
