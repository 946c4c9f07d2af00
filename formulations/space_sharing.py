"""Space sharing (two jobs with equal scale factors on the same devices): per-pair variables
and job types (A2.2, A2.3, docs/policies/gavel.md) in one LP over *groups* and *partner
classes*, linear in the number of jobs. Used by max-min fairness
(`max_min_fairness_packed`, here), water filling, makespan, finish-time fairness and
max-sum-throughput (their own modules).

Groups. Jobs named in an explicit `colocations` pair are groups of their own (k = 1) and share
devices only in the pairs listed for them (their job types' pairs do not apply). The other
jobs are grouped by (job type, throughput row, scale factor, weight, policy data such as the
remaining work); the k jobs of a group are interchangeable in the LP, so by the symmetry
argument of A2.3 (average an optimum over the permutations of identical jobs) there is an
optimal solution in which they all get the same shares.

Variables (all per type j; time shares of one job, devices in units of s):

    x[g, j]     time each job of group g runs alone on j
    X[p, j]     time the explicit pair p = (a, b) shares j (both singleton groups)
    V[g, c, j]  time each job of g shares j with *some* job of partner class c, where a class is
                (job type, scale factor) and `type_colocations` gives the pair rates of the two
                types, T_{tau|c}[j] for the job of g (A2.3's x[i, sigma, j], per group)
    S[c, j]     total pairing time of class c with itself on j (same-type pairs)

    level_g = scale_g (sum_j T[g,j] x[g,j] + sum_(p, j) Tpair_g^p[j] X[p,j]
                       + sum_(c, j) T_{tau(g)|c}[j] V[g,c,j])
    capacity:  sum_g k_g s_g x[g,j] + sum_p s_p X[p,j] + sum_(g,c) k_g s_g V[g,c,j] / 2 <= W[j]
    budget:    sum_j x[g,j] + sum_(p, j) X[p,j] + sum_(c, j) V[g,c,j] <= 1   (each job of g)
    balance:   sum_(g in u) k_g V[g,v,j] = sum_(h in v) k_h V[h,u,j]   (classes u != v)
    same type: sum_(g in u) k_g V[g,u,j] = S[u,j],  2 V[g,u,j] <= S[u,j]

with scale_g the policy's level per throughput (max-min fairness: s_g / (w_g prop_g), A2.1).

Why this is exact (no symmetry row needed, unlike A2.3's description). Any per-pair plan of
A2.2 aggregates to this LP with the same per-job throughput, budget and capacity (V = a job's
time with the jobs of class c). Conversely a solution decodes into concrete job pairs with
exactly those marginals, because the pair rate depends only on the two types: between
classes u and v the job degrees V have equal totals on both sides (balance), and the
north-west-corner rule pairs them with at most |u| + |v| - 1 pairs; within a class, degrees
with 2 d_a <= S (no job does more than half of the class's pairing) are paired by laying them
on a circle of length S and matching each point with the point S/2 further on, which never
pairs a job with itself. A pair holds s devices once: its two jobs' halves add up to s.

Pruning (A2.2 test 4, exact for every objective non-decreasing in per-job throughput): an
explicit pair cell with Tpair_a/T_a + Tpair_b/T_b <= 1 is dominated by time-slicing the two
jobs alone and is not created; V[g, c, j] is not created when that holds for g with every
group of c (all its pairs are dominated).

Certificate. The plan is decoded, repaired onto the feasible set (clip, scale budgets and
capacity) and its levels recomputed. The duals are made dual feasible (level multipliers
normalized; sigma raised until every column prices out; the S columns, which have no budget,
by the Lagrangian with S <= the class's job count) and their objective is a proven bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.formulations.max_min_fairness import level_coefficients
from apportion.solver.backends.lp import solve_lp
from apportion.solver.backends.status import SolverResult, SolverStatus
from apportion.solver.certificate import termination
from apportion.solver.deadline import Deadline
from apportion.solver.model import (
    Compat,
    FloatArray,
    IntArray,
    Problem,
    SolveOptions,
    SolverPreference,
)
from apportion.solver.parameters import MaxMinFairnessParameters
from apportion.solver.result import (
    Certificate,
    JobStatus,
    ModelSize,
    Plan,
    ShareSection,
    relative_gap,
)

TINY = 1e-9
"""Decoded time shares below this are dropped (A1.4)."""

BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class Groups:
    """Jobs grouped for the LP: `group[i]` of job i, `size[g]` = k_g, `rep[g]` a member."""

    group: IntArray
    size: FloatArray
    rep: IntArray


def make_groups(problem: Problem, extra_key: FloatArray | None = None) -> Groups:
    """Group interchangeable jobs (module docstring); `extra_key` (m, k) adds per-job values
    that must also agree within a group (e.g. remaining steps for makespan)."""
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
    if extra_key is not None:
        key = np.column_stack([key, extra_key])
    _, first, inverse, counts = np.unique(key, axis=0, return_index=True, return_inverse=True,
                                          return_counts=True)
    return Groups(inverse.reshape(-1), counts.astype(np.float64), first)


@dataclass(frozen=True)
class PackedLP:
    """The LP's cells and coefficients. `level_*` are per unit of the variable: with a unit
    scale (`build_cells`) a job's throughput in the policy's unit; `scaled` multiplies group
    g's coefficients by scale[g]. `real_*` are steps/s (for the reported throughput)."""

    level_single: FloatArray  # (G, n)
    si: IntArray  # single cells (group, type)
    sj: IntArray
    pair_g: IntArray  # explicit pair cells: the two singleton groups and the type
    pair_h: IntArray
    pj: IntArray
    level_pair_g: FloatArray
    level_pair_h: FloatArray
    real_pair_g: FloatArray
    real_pair_h: FloatArray
    qg: IntArray  # partner cells V[g, c, j]: group, balance row, type
    qj: IntArray
    q_row: IntArray
    q_coef: FloatArray  # coefficient in its balance row: +k_g (side u) or -k_g (side v)
    q_same: IntArray  # S variable of a same-class cell, -1 otherwise
    level_q: FloatArray
    real_q: FloatArray
    s_row: IntArray  # balance row of each S variable
    s_upper: FloatArray  # upper bound of each S variable (jobs in the class)
    k: FloatArray  # (G,)
    s: FloatArray  # (G,)
    W: FloatArray  # (n,)
    level_rows: BoolArray  # (G,) groups with a level row t <= level_g

    @property
    def sizes(self) -> tuple[int, int, int, int]:
        """(singles, explicit pair cells, partner cells, S variables)."""
        return self.si.size, self.pair_g.size, self.qg.size, self.s_row.size

    @property
    def num_vars(self) -> int:
        """Columns of the LP, t (the last) included."""
        return sum(self.sizes) + 1

    @property
    def num_balance(self) -> int:
        return int(max(self.q_row.max(initial=-1), self.s_row.max(initial=-1)) + 1)


def _type_pair_rows(problem: Problem) -> dict[tuple[str, str], tuple[FloatArray, FloatArray]]:
    """(tau, sigma) -> (rate of the tau job, rate of the sigma job) per type, both orders; a
    type with itself gets the mean of its two rows."""
    coloc = problem.colocations
    out: dict[tuple[str, str], tuple[FloatArray, FloatArray]] = {}
    if coloc is None:
        return out
    for q, (ta, tb) in enumerate(zip(coloc.type_a, coloc.type_b, strict=True)):
        ra, rb = coloc.type_throughput_a[q], coloc.type_throughput_b[q]
        if ta == tb:
            ra = rb = (ra + rb) / 2
        out[(ta, tb)] = (ra, rb)
        out[(tb, ta)] = (rb, ra)
    return out


class PairRates:
    """Co-location throughputs of two given jobs (steps/s per type), from the explicit pairs
    or, failing that, the type pairs of `Problem.colocations`; None when not listed or when
    the scale factors differ."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        coloc = problem.colocations
        self.explicit: dict[tuple[int, int], tuple[FloatArray, FloatArray]] = {}
        if coloc is not None:
            for p, (a, b) in enumerate(zip(coloc.job_a, coloc.job_b, strict=True)):
                self.explicit[(int(a), int(b))] = (coloc.throughput_a[p], coloc.throughput_b[p])
                self.explicit[(int(b), int(a))] = (coloc.throughput_b[p], coloc.throughput_a[p])
        self.types = _type_pair_rows(problem)
        self._dense: tuple[IntArray, BoolArray, FloatArray, FloatArray] | None = None
        self._by_job: dict[int, dict[int, tuple[FloatArray, FloatArray]]] | None = None

    def __call__(self, a: int, b: int) -> tuple[FloatArray, FloatArray] | None:
        jobs = self.problem.jobs
        if a == b or jobs.scale_factor[a] != jobs.scale_factor[b]:
            return None
        if (a, b) in self.explicit:
            return self.explicit[(a, b)]
        if jobs.job_type and jobs.job_type[a] and jobs.job_type[b]:
            return self.types.get((jobs.job_type[a], jobs.job_type[b]))
        return None

    def pair_rows(self, a: int, partners: IntArray) -> tuple[BoolArray, FloatArray, FloatArray]:
        """For job a and each partner b = partners[p]: whether the pair has rates (as
        `__call__`), a's rates and b's rates per type ((K, n) steps/s; 0 when none).
        Vectorized over the partners (the type-pair table is looked up as arrays)."""
        jobs = self.problem.jobs
        k, n = partners.size, self.problem.cluster.num_types
        has = np.zeros(k, dtype=bool)
        rate_a, rate_b = np.zeros((k, n)), np.zeros((k, n))
        if k == 0:
            return has, rate_a, rate_b
        same = (jobs.scale_factor[partners] == jobs.scale_factor[a]) & (partners != a)
        codes, table_has, table_a, table_b = self._table()
        if codes[a] >= 0:
            other = codes[partners]
            listed = same & (other >= 0)
            listed[listed] = table_has[codes[a], other[listed]]
            rows = np.flatnonzero(listed)
            has[rows] = True
            rate_a[rows] = table_a[codes[a], other[rows]]
            rate_b[rows] = table_b[codes[a], other[rows]]
        for b, pair in self._explicit_of(a).items():  # explicit pairs take precedence
            for p in np.flatnonzero(same & (partners == b)):
                has[p] = True
                rate_a[p], rate_b[p] = pair
        return has, rate_a, rate_b

    def on_types(
        self, a: int, partners: IntArray, types: IntArray
    ) -> tuple[BoolArray, FloatArray, FloatArray]:
        """`pair_rows` read on one type per partner: (has, a's rate, b's rate) on types[p]."""
        has, rate_a, rate_b = self.pair_rows(a, partners)
        index = np.arange(partners.size)
        return has, rate_a[index, types], rate_b[index, types]

    def _table(self) -> tuple[IntArray, BoolArray, FloatArray, FloatArray]:
        """(job type code per job, -1 = none; has (C, C); rate of the first (C, C, n); of the
        second), built once."""
        if self._dense is None:
            jobs = self.problem.jobs
            names = sorted({t for pair in self.types for t in pair})
            code_of = {name: c for c, name in enumerate(names)}
            m, n = jobs.num_jobs, self.problem.cluster.num_types
            codes = np.full(m, -1, np.int64)
            if jobs.job_type:
                codes = np.array([code_of.get(t, -1) if t else -1 for t in jobs.job_type],
                                 np.int64)
            c = len(names)
            has = np.zeros((c, c), dtype=bool)
            first, second = np.zeros((c, c, n)), np.zeros((c, c, n))
            for (ta, tb), (ra, rb) in self.types.items():
                has[code_of[ta], code_of[tb]] = True
                first[code_of[ta], code_of[tb]], second[code_of[ta], code_of[tb]] = ra, rb
            self._dense = (codes, has, first, second)
        return self._dense

    def _explicit_of(self, a: int) -> dict[int, tuple[FloatArray, FloatArray]]:
        """Explicit pairs of job a: partner -> (a's rates, the partner's rates)."""
        if self._by_job is None:
            self._by_job = {}
            for (x, y), pair in self.explicit.items():
                self._by_job.setdefault(x, {})[y] = pair
        return self._by_job.get(a, {})


def _ratio(rate: FloatArray, iso: FloatArray, allowed: BoolArray) -> FloatArray:
    """rate / iso on allowed cells (rate broadcast over rows), 0 elsewhere."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(allowed & (iso > 0), rate[None, :] / iso, 0.0)


def build_cells(problem: Problem, groups: Groups, thr: FloatArray) -> PackedLP:
    """Cells and pruning (module docstring) for the policy throughput `thr` (m, n), 0 on the
    cells a job may not use; levels in the unit of `thr` (steps/s, or 1 when agnostic). A job
    in a pair runs at alpha = Tpair/T of its isolated rate, applied to `thr`."""
    jobs = problem.jobs
    n = problem.cluster.num_types
    rep = groups.rep
    thr_g = thr[rep]
    iso = jobs.throughput[rep]
    allowed = thr_g > 0
    si, sj = np.nonzero(allowed)
    k = groups.size
    s = jobs.scale_factor[rep].astype(np.float64)
    coloc = problem.colocations
    # explicit pairs
    empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0)
    pg, ph, pj = empty_i, empty_i, empty_i
    lpg, lph, rpg, rph = empty_f, empty_f, empty_f, empty_f
    if coloc is not None and coloc.job_a.size:
        g, h = groups.group[coloc.job_a], groups.group[coloc.job_b]
        ok = allowed[g] & allowed[h] & ((coloc.throughput_a > 0) | (coloc.throughput_b > 0))
        with np.errstate(divide="ignore", invalid="ignore"):
            alpha = np.where(ok, coloc.throughput_a / iso[g], 0.0)
            beta = np.where(ok, coloc.throughput_b / iso[h], 0.0)
        ok &= alpha + beta > 1  # A2.2 test 4: otherwise time-slicing dominates
        pp, pj = np.nonzero(ok)
        pg, ph = g[pp], h[pp]
        lpg = alpha[pp, pj] * thr_g[pg, pj]
        lph = beta[pp, pj] * thr_g[ph, pj]
        rpg, rph = coloc.throughput_a[pp, pj], coloc.throughput_b[pp, pj]
    # partner classes (type pairs)
    q_lists: dict[str, list[NDArray[Any]]] = {
        name: [] for name in ("g", "j", "row", "coef", "same", "level", "real")}
    s_rows: list[int] = []
    s_upper: list[float] = []
    rows_used = 0
    table = _type_pair_rows(problem)
    if table and jobs.job_type:
        explicit = np.zeros(jobs.num_jobs, dtype=bool)
        if coloc is not None:
            explicit[coloc.job_a] = True
            explicit[coloc.job_b] = True
        typed = ~explicit[rep]
        rep_type = np.array([jobs.job_type[r] for r in rep])
        classes: dict[tuple[str, int], IntArray] = {}
        for key in sorted({(str(t), int(f)) for t, f in zip(rep_type[typed], s[typed],
                                                             strict=True)}):
            classes[key] = np.flatnonzero(typed & (rep_type == key[0]) & (s == key[1]))
        keys = list(classes)
        for iu, u in enumerate(keys):
            for v in keys[iu:]:
                if u[1] != v[1] or (u[0], v[0]) not in table:
                    continue
                rate_u, rate_v = table[(u[0], v[0])]
                gu, gv = classes[u], classes[v]
                a_u = _ratio(rate_u, iso[gu], allowed[gu])
                a_v = _ratio(rate_v, iso[gv], allowed[gv])
                best_u, best_v = a_u.max(axis=0), a_v.max(axis=0)
                some = (rate_u > 0) | (rate_v > 0)
                keep_u = allowed[gu] & (a_u + best_v[None, :] > 1) & some[None, :]
                if u == v:
                    keep_u &= (k[gu].sum() >= 2)
                    keep_v = keep_u
                else:
                    keep_v = allowed[gv] & (a_v + best_u[None, :] > 1) & some[None, :]
                    both = keep_u.any(axis=0) & keep_v.any(axis=0)
                    keep_u &= both[None, :]
                    keep_v &= both[None, :]
                types_used = np.flatnonzero(keep_u.any(axis=0))
                row_of = np.full(n, -1)
                row_of[types_used] = rows_used + np.arange(types_used.size)
                rows_used += types_used.size
                sides = [(gu, keep_u, a_u, rate_u, 1.0)]
                if u != v:
                    sides.append((gv, keep_v, a_v, rate_v, -1.0))
                for members, keep, ratio, rate, sign in sides:
                    r, j = np.nonzero(keep)
                    grp = members[r]
                    q_lists["g"].append(grp)
                    q_lists["j"].append(j)
                    q_lists["row"].append(row_of[j])
                    q_lists["coef"].append(sign * k[grp])
                    q_lists["level"].append(ratio[r, j] * thr_g[grp, j])
                    q_lists["real"].append(rate[j])
                    if u == v:
                        first_s = len(s_rows)
                        s_rows.extend(int(row_of[t]) for t in types_used)
                        s_upper.extend([float(k[gu].sum())] * types_used.size)
                        s_index = np.full(n, -1)
                        s_index[types_used] = first_s + np.arange(types_used.size)
                        q_lists["same"].append(s_index[j])
                    else:
                        q_lists["same"].append(np.full(j.size, -1))

    def cat(name: str, dtype: type) -> NDArray[Any]:
        parts = q_lists[name]
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)

    return PackedLP(
        level_single=np.where(allowed, thr_g, 0.0), si=si, sj=sj,
        pair_g=pg, pair_h=ph, pj=pj, level_pair_g=lpg, level_pair_h=lph,
        real_pair_g=rpg, real_pair_h=rph,
        qg=cat("g", np.int64), qj=cat("j", np.int64), q_row=cat("row", np.int64),
        q_coef=cat("coef", np.float64), q_same=cat("same", np.int64),
        level_q=cat("level", np.float64), real_q=cat("real", np.float64),
        s_row=np.array(s_rows, dtype=np.int64), s_upper=np.array(s_upper, dtype=np.float64),
        k=k, s=s, W=problem.cluster.count_float,
        level_rows=np.ones(rep.size, dtype=bool),
    )


def scaled(lp: PackedLP, scale: FloatArray, level_rows: BoolArray | None = None) -> PackedLP:
    """The same cells with group g's level coefficients multiplied by scale[g] (G,)."""
    return replace(
        lp,
        level_single=lp.level_single * scale[:, None],
        level_pair_g=lp.level_pair_g * scale[lp.pair_g],
        level_pair_h=lp.level_pair_h * scale[lp.pair_h],
        level_q=lp.level_q * scale[lp.qg],
        level_rows=lp.level_rows if level_rows is None else level_rows,
    )


def build_lp(problem: Problem, groups: Groups, agnostic: bool, compat: Compat
             ) -> tuple[PackedLP, PackedLP]:
    """Max-min fairness (A2.1): (unit-scale cells, cells scaled by s_g / (w_g prop_g))."""
    a, _, thr = level_coefficients(problem, agnostic, compat)
    rep = groups.rep
    a_g = a[rep]
    usable_thr = np.where(a > 0, thr, 0.0)  # a = scale * thr on these cells only (B4)
    scale_g = np.divide(a_g.sum(axis=1), usable_thr[rep].sum(axis=1) + (a_g.sum(axis=1) == 0),
                        where=a_g.sum(axis=1) > 0, out=np.zeros(rep.size))
    base = build_cells(problem, groups, usable_thr)
    return base, scaled(base, scale_g)


# --------------------------------------------------------------------------------------------
# the LP


def level_entries(lp: PackedLP) -> tuple[IntArray, IntArray, FloatArray]:
    """(group, column, coefficient) of every level term. Columns: singles, explicit pair
    cells (each counts for both of its groups), partner cells, then S variables and t."""
    ns, npc, nq, _ = lp.sizes
    pair_cols = ns + np.arange(npc)
    q_cols = ns + npc + np.arange(nq)
    group = np.concatenate([lp.si, lp.pair_g, lp.pair_h, lp.qg])
    col = np.concatenate([np.arange(ns), pair_cols, pair_cols, q_cols])
    val = np.concatenate([lp.level_single[lp.si, lp.sj], lp.level_pair_g, lp.level_pair_h,
                          lp.level_q])
    return group, col, val


def resource_entries(lp: PackedLP, first_row: int
                     ) -> tuple[list[IntArray], list[IntArray], list[FloatArray], FloatArray, int]:
    """Rows from `first_row` on: capacity (n), budget (G), same-class (2 V - S <= 0), then the
    balance rows (equalities, the last rows of the LP). Returns (rows, cols, values) lists,
    the right-hand sides and the number of equality rows."""
    G, n = lp.level_single.shape
    ns, npc, nq, nS = lp.sizes
    singles = np.arange(ns)
    pairs = ns + np.arange(npc)
    cells = ns + npc + np.arange(nq)
    s_cols = ns + npc + nq + np.arange(nS)
    same = np.flatnonzero(lp.q_same >= 0)
    cap, bud = first_row, first_row + n
    same_row = bud + G
    bal = same_row + same.size
    nb = lp.num_balance
    rows = [cap + lp.sj, cap + lp.pj, cap + lp.qj,
            bud + lp.si, bud + lp.pair_g, bud + lp.pair_h, bud + lp.qg,
            same_row + np.arange(same.size), same_row + np.arange(same.size),
            bal + lp.q_row, bal + lp.s_row]
    cols = [singles, pairs, cells, singles, pairs, pairs, cells,
            cells[same], s_cols[lp.q_same[same]], cells, s_cols]
    vals = [lp.k[lp.si] * lp.s[lp.si], lp.s[lp.pair_g], lp.k[lp.qg] * lp.s[lp.qg] / 2,
            np.ones(ns), np.ones(npc), np.ones(npc), np.ones(nq),
            np.full(same.size, 2.0), np.full(same.size, -1.0), lp.q_coef, np.full(nS, -1.0)]
    rhs = np.concatenate([lp.W, np.ones(G), np.zeros(same.size), np.zeros(nb)])
    return rows, cols, vals, rhs, nb


def _matrix(lp: PackedLP, level_scale: FloatArray | None = None
            ) -> tuple[sp.csc_matrix, FloatArray, FloatArray, int]:
    """max t: rows [level (groups with a level row), resources]; (A, b, c, equalities)."""
    G = lp.k.size
    t_col = lp.num_vars - 1
    L = int(lp.level_rows.sum())
    level_row = np.full(G, -1)
    level_row[lp.level_rows] = np.arange(L)
    group, col, val = level_entries(lp)
    keep = lp.level_rows[group]
    rows, cols, vals, rhs, nb = resource_entries(lp, L)
    rows += [level_row[group[keep]], np.arange(L)]
    cols += [col[keep], np.full(L, t_col)]
    vals += [-val[keep], np.ones(L)]
    matrix = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                           shape=(L + rhs.size, t_col + 1))
    b = np.concatenate([np.zeros(L), rhs])
    c = np.zeros(t_col + 1)
    c[t_col] = 1.0
    return matrix, b, c, nb


@dataclass(frozen=True)
class DualPoint:
    """A dual feasible point: y (G,) on the level rows (summing to 1 for a level LP), pi (n,)
    per type; `bound` >= the LP optimum (weak duality)."""

    bound: float
    y: FloatArray
    pi: FloatArray


def lagrangian_bound(lp: PackedLP, matrix: sp.csc_matrix, b: FloatArray, c: FloatArray,
                     duals: FloatArray, first_resource_row: int, equalities: int
                     ) -> tuple[float, FloatArray]:
    """Upper bound on max c@x s.t. the LP's rows, from any multipliers: inequality duals
    clipped to >= 0, equality duals free; each job budget sigma_g raised until the columns it
    owns (singles, pair cells via their first group, partner cells) price out; what is left
    (S columns, t) by the Lagrangian with their upper bounds (t's must price out exactly).
    Returns (bound, the repaired multipliers)."""
    lam = np.nan_to_num(duals, nan=0.0).copy()
    rows = lam.size
    lam[: rows - equalities] = np.maximum(lam[: rows - equalities], 0.0)
    G, n = lp.level_single.shape
    ns, npc, nq, _ = lp.sizes
    budget = first_resource_row + n
    reduced = c - matrix.T @ lam
    owner = np.concatenate([lp.si, lp.pair_g, lp.qg])
    need = np.zeros(G)
    np.maximum.at(need, owner, np.maximum(reduced[: ns + npc + nq], 0.0))
    lam[budget:budget + G] += need
    reduced = c - matrix.T @ lam
    upper = np.concatenate([np.zeros(ns + npc + nq), lp.s_upper, [0.0]])
    slack = np.maximum(reduced, 0.0)
    if slack[-1] > 1e-12 * max(1.0, abs(c[-1])):  # t unpriced: no valid bound from these
        return float("inf"), lam
    return float(b @ lam + slack[:-1] @ upper[:-1]), lam


def level_dual(lp: PackedLP, matrix: sp.csc_matrix, b: FloatArray, c: FloatArray,
               duals: FloatArray, equalities: int) -> DualPoint | None:
    """The level LP's dual point: level multipliers normalized to sum 1, then
    `lagrangian_bound`."""
    L = int(lp.level_rows.sum())
    y = np.maximum(np.nan_to_num(duals[:L], nan=0.0), 0.0)
    if y.sum() <= 0:
        return None
    scaled_duals = duals / y.sum()
    scaled_duals[:L] = y / y.sum()
    bound, lam = lagrangian_bound(lp, matrix, b, c, scaled_duals, L, equalities)
    y_g = np.zeros(lp.k.size)
    y_g[lp.level_rows] = lam[:L]
    n = lp.W.size
    return DualPoint(bound, y_g, lam[L:L + n])


@dataclass(frozen=True)
class RawSolution:
    """The solver's values per cell (clipped at 0): singles, explicit pairs, partner cells."""

    x: FloatArray
    X: FloatArray
    V: FloatArray


def split_raw(lp: PackedLP, values: FloatArray) -> RawSolution:
    ns, npc, nq, _ = lp.sizes
    v = np.maximum(values, 0.0) if values.size else np.zeros(lp.num_vars)
    return RawSolution(v[:ns], v[ns:ns + npc], v[ns + npc:ns + npc + nq])


@dataclass(frozen=True)
class LevelSolution:
    """One level LP (max t s.t. t <= level_g for the groups with a level row)."""

    status: SolverStatus
    raw: RawSolution
    t_lp: float
    dual: DualPoint | None
    result: SolverResult
    size: ModelSize

    @property
    def bound(self) -> float | None:
        return self.dual.bound if self.dual is not None else None


def solve_level_lp(lp: PackedLP, solver: SolverPreference, deadline: Deadline, threads: int,
                   highs_method: str = "simplex") -> LevelSolution:
    """Build and solve the level LP of `lp`; certify with its duals."""
    matrix, b, c, nb = _matrix(lp)
    result = solve_lp(c, matrix, b, solver, deadline, threads, equalities=nb,
                      highs_method=highs_method)
    raw = split_raw(lp, result.x)
    t_lp = float(result.x[-1]) if result.has_solution else 0.0
    dual = level_dual(lp, matrix, b, c, result.row_dual, nb) if result.has_solution else None
    size = ModelSize(matrix.shape[1], matrix.shape[0], int(matrix.nnz), 0)
    return LevelSolution(result.status, raw, t_lp, dual, result, size)


# --------------------------------------------------------------------------------------------
# decoding into job pairs, repair, evaluation


@dataclass(frozen=True)
class JobPlan:
    """A plan over jobs: time alone (m, n) and concrete pairs (a, b, type, share) with each
    member's rate per unit of shared time, in the policy's unit (`pol_*`) and steps/s."""

    single: FloatArray
    pa: IntArray
    pb: IntArray
    pj: IntArray
    share: FloatArray
    pol_a: FloatArray
    pol_b: FloatArray
    real_a: FloatArray
    real_b: FloatArray

    def policy_throughput(self, thr: FloatArray) -> FloatArray:
        """(m,) throughput in the policy's unit, `thr` (m, n) the policy's single rates."""
        m = self.single.shape[0]
        out = np.einsum("ij,ij->i", thr, self.single)
        out += np.bincount(self.pa, self.pol_a * self.share, minlength=m)
        out += np.bincount(self.pb, self.pol_b * self.share, minlength=m)
        return np.asarray(out, dtype=np.float64)

    def time_share(self) -> FloatArray:
        """(m, n) each job's time alone and in pairs."""
        out = self.single.copy()
        np.add.at(out, (self.pa, self.pj), self.share)
        np.add.at(out, (self.pb, self.pj), self.share)
        return out

    def colocated(self) -> tuple[tuple[int, int, int, float], ...]:
        return tuple((int(a), int(b), int(j), float(x)) for a, b, j, x in
                     zip(self.pa, self.pb, self.pj, self.share, strict=True))


def _north_west(left: FloatArray, right: FloatArray) -> tuple[IntArray, IntArray, FloatArray]:
    """Pair two degree lists of equal total: (index in left, index in right, amount)."""
    cut = np.union1d(np.cumsum(left)[:-1], np.cumsum(right)[:-1])
    total = min(left.sum(), right.sum())
    points = np.concatenate([[0.0], cut[cut < total], [total]])
    amount = np.diff(points)
    mid = points[:-1] + amount / 2
    ia = np.searchsorted(np.cumsum(left), mid, side="right")
    ib = np.searchsorted(np.cumsum(right), mid, side="right")
    keep = (amount > 0) & (ia < left.size) & (ib < right.size)
    return ia[keep], ib[keep], amount[keep]


def _half_shift(degree: FloatArray) -> tuple[IntArray, IntArray, FloatArray]:
    """Pair jobs of one class: degrees on a circle of length S, point p with p + S/2."""
    total = degree.sum()
    half = total / 2
    ends = np.cumsum(degree)
    cut = np.union1d(ends[ends < half], ends[(ends > half) & (ends < total)] - half)
    points = np.concatenate([[0.0], cut, [half]])
    amount = np.diff(points)
    mid = points[:-1] + amount / 2
    ia = np.searchsorted(ends, mid, side="right")
    ib = np.searchsorted(ends, mid + half, side="right")
    keep = (amount > 0) & (ia < degree.size) & (ib < degree.size) & (ia != ib)
    return ia[keep], ib[keep], amount[keep]


def decode(problem: Problem, groups: Groups, base: PackedLP, raw: RawSolution) -> JobPlan:
    """Concrete job pairs with the LP's marginals (module docstring); `base` = unit scale."""
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    G = base.k.size
    x = np.where(raw.x > TINY, raw.x, 0.0)
    single_g = np.zeros((G, n))
    single_g[base.si, base.sj] = x
    single = single_g[groups.group]
    rep = groups.rep
    keep = raw.X > TINY
    pa = [rep[base.pair_g[keep]]]
    pb = [rep[base.pair_h[keep]]]
    pj = [base.pj[keep]]
    share = [raw.X[keep]]
    pol_a, pol_b = [base.level_pair_g[keep]], [base.level_pair_h[keep]]
    real_a, real_b = [base.real_pair_g[keep]], [base.real_pair_h[keep]]
    order = np.argsort(groups.group, kind="stable")
    starts = np.concatenate([[0], np.cumsum(groups.size.astype(np.int64))])
    V = np.where(raw.V > TINY, raw.V, 0.0)
    live = np.flatnonzero(V > 0)
    by_row = live[np.argsort(base.q_row[live], kind="stable")]
    bounds = np.searchsorted(base.q_row[by_row], np.arange(base.num_balance + 1))
    for r in range(base.num_balance):
        cells = by_row[bounds[r]:bounds[r + 1]]
        if cells.size == 0:
            continue
        j = int(base.qj[cells[0]])
        sides = []
        for sign in (1.0, -1.0):
            part = cells[np.sign(base.q_coef[cells]) == sign]
            counts = groups.size[base.qg[part]].astype(np.int64)
            jobs = np.concatenate([order[starts[g]:starts[g + 1]] for g in base.qg[part]]
                                  ) if part.size else np.zeros(0, np.int64)
            sides.append((jobs, np.repeat(part, counts)))
        (jobs_u, cell_u), (jobs_v, cell_v) = sides
        if jobs_v.size:  # two classes
            ia, ib, amount = _north_west(V[cell_u], V[cell_v])
            a_jobs, b_jobs, a_cell, b_cell = jobs_u[ia], jobs_v[ib], cell_u[ia], cell_v[ib]
        else:  # one class with itself; 2 d <= S up to solver noise
            degree = np.minimum(V[cell_u], V[cell_u].sum() / 2)
            ia, ib, amount = _half_shift(degree)
            a_jobs, b_jobs, a_cell, b_cell = jobs_u[ia], jobs_u[ib], cell_u[ia], cell_u[ib]
        pa.append(a_jobs)
        pb.append(b_jobs)
        pj.append(np.full(amount.size, j))
        share.append(amount)
        pol_a.append(base.level_q[a_cell])
        pol_b.append(base.level_q[b_cell])
        real_a.append(base.real_q[a_cell])
        real_b.append(base.real_q[b_cell])
    share_all = np.concatenate(share)
    keep_pairs = share_all > TINY

    def cat(parts: list[NDArray[Any]], dtype: type) -> NDArray[Any]:
        return np.concatenate(parts).astype(dtype)[keep_pairs]

    plan = JobPlan(single, cat(pa, np.int64), cat(pb, np.int64), cat(pj, np.int64),
                   share_all[keep_pairs], cat(pol_a, np.float64), cat(pol_b, np.float64),
                   cat(real_a, np.float64), cat(real_b, np.float64))
    assert plan.single.shape == (m, n)
    return plan


def repair(problem: Problem, plan: JobPlan) -> JobPlan:
    """Scale onto the feasible set: each job's time <= 1 (a pair by the smaller factor of its
    two jobs), then each type's devices <= W[j] (a pair holds s devices once)."""
    s = problem.jobs.scale_factor_float
    W = problem.cluster.count_float
    m = s.size
    used = plan.single.sum(axis=1) + np.bincount(plan.pa, plan.share, minlength=m)
    used += np.bincount(plan.pb, plan.share, minlength=m)
    f = 1.0 / np.maximum(1.0, used)
    single = plan.single * f[:, None]
    share = plan.share * np.minimum(f[plan.pa], f[plan.pb])
    devices = s @ single + np.bincount(plan.pj, s[plan.pa] * share, minlength=W.size)
    factor = np.where(devices > W, W / np.where(devices > 0, devices, 1.0), 1.0)
    return replace(plan, single=single * factor[None, :], share=share * factor[plan.pj])


def realize(problem: Problem, groups: Groups, base: PackedLP, raw: RawSolution
            ) -> tuple[JobPlan, FloatArray]:
    """Decoded and repaired plan, and each job's throughput in the policy's unit (m,)."""
    plan = repair(problem, decode(problem, groups, base, raw))
    return plan, plan.policy_throughput(base.level_single[groups.group])


def plan_of(plan: JobPlan, problem: Problem, shares: ShareSection | None = None,
            **fields: object) -> Plan:
    """A `Plan` with the job plan's time shares, steps/s and pairs, `shares`' per-job state
    and `fields`."""
    real = replace(plan, pol_a=plan.real_a, pol_b=plan.real_b)
    return Plan(
        time_share=plan.time_share(),
        effective_throughput=real.policy_throughput(problem.jobs.throughput),
        shares=replace(shares or ShareSection(), colocated=plan.colocated()),
        **fields,  # type: ignore[arg-type]
    )


def solve_packed(
    problem: Problem,
    params: MaxMinFairnessParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Max-min fairness with space sharing; see the module docstring."""
    started = time.perf_counter()
    m = problem.jobs.num_jobs
    groups = make_groups(problem)
    base, lp = build_lp(problem, groups, params.heterogeneity_agnostic, compat)
    build = time.perf_counter() - started
    sol = solve_level_lp(lp, SolverPreference.CLARABEL, deadline, options.threads)
    plan, thr = realize(problem, groups, base, sol.raw)
    scale = np.divide(lp.level_single.sum(axis=1), base.level_single.sum(axis=1),
                      out=np.zeros(lp.k.size), where=base.level_single.sum(axis=1) > 0)
    levels = scale[groups.group] * thr
    objective = float(levels.min()) if m else 0.0
    gap = relative_gap(objective, sol.bound)
    # the realized plan is feasible; short of an optimum it counts when every job has a level
    ended = termination(sol.status, sol.status.solved or objective > 0, gap,
                        options.relative_gap)
    _, prop, _ = level_coefficients(problem, params.heterogeneity_agnostic, compat)
    _, npc, nq, _ = lp.sizes
    cert = Certificate(
        termination=ended,
        maximize=True,
        objective=objective,
        bound=sol.bound,
        solver=sol.result.solver,
        solver_version=sol.result.solver_version,
        formulation=(f"max-min fairness with space sharing (A2.2/A2.3): {lp.k.size} groups of "
                     f"{m} jobs, {npc} pair cells and {nq} partner cells after pruning"),
        build_time_s=build,
        solve_time_s=sol.result.solve_time_s,
        model_size=sol.size,
        max_violation=0.0,
        detail=sol.result.detail,
    )
    out = plan_of(plan, problem, normalized_throughput=np.zeros(m), objective_value=levels,
                  job_dual=np.zeros(m), certificate=cert,
                  accelerator_prices=sol.dual.pi if sol.dual is not None else np.zeros(lp.W.size),
                  job_status=(JobStatus.ALLOCATED,) * m, job_reason=("",) * m)
    normalized = np.divide(out.effective_throughput, prop, out=np.zeros(m), where=prop > 0)
    return replace(out, normalized_throughput=normalized)
