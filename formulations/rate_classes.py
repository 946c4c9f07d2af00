"""Level LPs with space sharing over *rate classes*, for policies whose jobs differ only in
their demand (makespan: remaining work; finish-time fairness: b_i(rho)). Exact; used by
`packed_gavel` when it makes the LP much smaller.

The problem (A2.2/A2.3, docs/policies/gavel.md with the level objective of A2.8/A2.5): maximize t
such that every active job i reaches thr_i >= d_i t, where d_i > 0 is the job's demand
(policy units per unit of t), over the partner-class LP of `space_sharing` with one group
per job. Jobs of one group of `space_sharing.make_groups` without the demand in the key (a
*rate class*: same type, throughput row, scale factor, weight) have the same rate in every
cell, so the LP only needs, per class r, the class totals M[r, m] = k_r v[r, m] of each cell
m (the coarse LP's columns: singles, partner cells, explicit pair cells) and a condition that
the totals can be split among the class's jobs:

    Polymatroid (why this is exact). Let F_r(k; M) = max rate . tau s.t. sum tau <= k,
    0 <= tau <= M (the best k units of time, best rate first). For fixed totals, the
    throughput vectors the jobs can reach (each job's time <= 1, sum over jobs <= M) are
    exactly {thr >= 0 : sum_(i in K) thr_i <= F_r(|K|; M) for every job set K}: the support
    function in a direction y >= 0 is a transportation problem with the Monge weights
    y_i rate_m, which the north-west corner (largest y with the best rates) solves, giving
    the Lovasz extension of k -> F_r(k). So the demands are reachable iff, with the jobs by
    demand, t (d_(1) + ... + d_(k)) <= F_r(k; M) for k = 1..k_r. F_r is the minimum of the
    lines sum_(l' <= l)(rate_l' - rate_(l+1)) M_l' + rate_(l+1) k (rates sorted, rate_(L+1)
    = 0), each linear in M; those lines are the *line cuts*.

    Two per-job rules are not in F: a partner cell's time must be used exactly (its balance
    row pairs it with the other class's time; unused single time can stay idle), and within
    a class a job does at most half of the class's same-class pairing (2 V <= S). A job's
    share of a same-class cell is capped by S/2 in F_r(1) (the k = 1 line cuts may use S/2
    in place of M), and anything else is caught by the *decode LP*: per class, the jobs'
    times with the totals fixed, every rule of the job-level LP and a slack on each demand.
    A class with slack gives a Benders feasibility cut from that LP's duals (weak duality: a
    dual point of the slack LP bounds the slack for every (M, S, t)), and the master is
    solved again.

Every cut is implied by the job-level LP, so the master is a relaxation: its value bounds t*
and its duals certify (`space_sharing.lagrangian_bound`). When no line cut is violated and
every class's decode LP has no slack, the decoded jobs reach the master's t: optimal. The
multipliers on the per-job rows d_i t - thr_i <= 0 implied by the master's duals are
y_i = sum over cuts c of mu_c w_ci (w: the job's weight in the cut), which finish-time
fairness needs for its lower bound. A cut's job set and weights do not depend on the demand,
so every cut holds for every demand vector: `DemandLP` keeps one master (and its basis) for a
sequence of demands, updating only the t coefficients. The rounds are capped (`MAX_ROUNDS`);
the master's bound holds whenever it stops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import scipy.sparse as sp

from apportion.formulations.space_sharing import (
    BoolArray,
    Groups,
    JobPlan,
    PackedLP,
    RawSolution,
    lagrangian_bound,
    level_entries,
    realize,
    resource_entries,
)
from apportion.solver.backends.highs import (
    INFINITY,
    HighsSession,
    HighsSettings,
    LinearModel,
    highs_version,
    solve_highs,
)
from apportion.solver.backends.lp import IPM_COLUMNS
from apportion.solver.backends.status import SolverResult, SolverStatus
from apportion.solver.deadline import Deadline
from apportion.solver.model import FloatArray, IntArray, Problem
from apportion.solver.result import ModelSize

MAX_ROUNDS = 200
IPM_SOLVES = 2
"""A master with more than `IPM_COLUMNS` columns is solved by HiGHS's interior point this many
times first."""
SLACK_TOLERANCE = 1e-7
"""A class's decode is accepted when every job reaches its demand within this fraction."""
USED = 1e-10
"""Class totals below this (in jobs x time) are treated as unused by the decode LP."""


@dataclass(frozen=True)
class Modes:
    """Each group's cells in rate order: entries start[g]:start[g + 1]."""

    start: IntArray
    col: IntArray  # column of the coarse LP
    rate: FloatArray  # level per unit of one job's time in the cell
    s_col: IntArray  # S column of a same-class partner cell, -1 otherwise
    exact: BoolArray  # usage must be exact (partner cells): its balance row pairs it


def _modes(lp: PackedLP) -> Modes:
    ns, npc, nq, _ = lp.sizes
    group, col, rate = level_entries(lp)
    order = np.lexsort((-rate, group))
    group, col, rate = group[order], col[order], rate[order]
    q = col - ns - npc
    is_q = q >= 0
    s_col = np.full(col.size, -1)
    same = np.zeros(col.size, dtype=bool)
    same[is_q] = lp.q_same[q[is_q]] >= 0
    s_col[same] = ns + npc + nq + lp.q_same[q[same]]
    start = np.searchsorted(group, np.arange(lp.k.size + 1))
    return Modes(start, col, rate, s_col, is_q)


@dataclass
class Cut:
    """A row  sum(vals * x[cols]) <= rhs  of the master (t included), already scaled, with
    the weight w of each job in its t coefficient (the coefficient is sum w_i d_i / scale)."""

    cols: IntArray
    vals: FloatArray
    rhs: float
    jobs: IntArray
    weights: FloatArray


@dataclass(frozen=True)
class DemandSolution:
    """The level LP's answer: t reached by the decoded plan (`thr` its throughput, policy
    units), the master's proven bound on t*, the per-job multipliers y (m,) on the rows
    d_i t - thr_i <= 0 (sum y_i d_i = 1), capacity prices (n,), rounds of the master."""

    status: SolverStatus
    plan: JobPlan
    thr: FloatArray
    t: float
    bound: float | None
    y: FloatArray
    pi: FloatArray
    result: SolverResult
    size: ModelSize
    rounds: int
    decode_cuts: int
    """Benders cuts from the decode LP (classes the line cuts alone did not settle)."""


def _cut_matrix(cuts: list[Cut], num_cols: int) -> sp.csr_matrix:
    """The cuts as rows (len(cuts), num_cols)."""
    return sp.csr_matrix(
        (np.concatenate([c.vals for c in cuts]), np.concatenate([c.cols for c in cuts]),
         np.cumsum([0] + [c.cols.size for c in cuts])),
        shape=(len(cuts), num_cols))


def _scaled_cut(cols: list[int] | IntArray, vals: list[float] | FloatArray, rhs: float,
                jobs: IntArray, weights: FloatArray) -> Cut:
    c = np.asarray(cols, dtype=np.int64)
    v = np.asarray(vals, dtype=np.float64)
    merged = np.unique(c, return_inverse=True)
    total = np.bincount(merged[1].reshape(-1), v, minlength=merged[0].size)
    scale = float(np.max(np.abs(total))) if total.size else 1.0
    scale = scale if scale > 0 else 1.0
    return Cut(merged[0], total / scale, rhs / scale, jobs, weights / scale)


class Master:
    """The coarse LP (capacity, class budgets, balance rows) with t and the cuts, in HiGHS;
    cuts are added as rows and the LP is re-solved from the last basis (dual simplex)."""

    def __init__(self, lp: PackedLP, threads: int) -> None:
        self.lp = lp
        self.num_cols = lp.num_vars
        self.t_col = self.num_cols - 1
        rows, cols, vals, rhs, nb = resource_entries(lp, 0)
        self.resources = sp.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
            shape=(rhs.size, self.num_cols))
        self.rhs = rhs
        self.equalities = nb
        n = self.num_cols
        cost = np.zeros(n)
        cost[self.t_col] = -1.0
        lower = np.full(rhs.size, -INFINITY)
        lower[rhs.size - nb:] = rhs[rhs.size - nb:]
        settings = HighsSettings(
            method="simplex", primal_tolerance=1e-10, dual_tolerance=1e-10, threads=threads,
            options=(("simplex_dual_edge_weight_strategy", 1),),  # devex
        )
        model = LinearModel(cost, sp.csc_matrix(self.resources), lower, rhs, np.zeros(n),
                            np.full(n, INFINITY))
        self.session = HighsSession(model, settings)
        self.last: SolverResult | None = None
        self.cuts: list[Cut] = []
        self.solves = 0

    def add(self, cuts: list[Cut]) -> None:
        if not cuts:
            return
        self.session.add_rows(np.full(len(cuts), -INFINITY), np.array([c.rhs for c in cuts]),
                              _cut_matrix(cuts, self.num_cols))
        self.cuts.extend(cuts)

    def retarget(self, demand: FloatArray) -> None:
        """Set every cut's t coefficient for `demand` (m,): sum_i w_ci d_i (scaled)."""
        first = self.rhs.size
        for row, cut in enumerate(self.cuts):
            coefficient = float(cut.weights @ demand[cut.jobs])
            at = int(np.searchsorted(cut.cols, self.t_col))
            if at < cut.cols.size and cut.cols[at] == self.t_col:
                cut.vals[at] = coefficient
            else:  # no t term before (weights summed to zero there)
                cut.cols = np.insert(cut.cols, at, self.t_col)
                cut.vals = np.insert(cut.vals, at, coefficient)
            self.session.change_coefficient(first + row, self.t_col, coefficient)

    def solve(self, deadline: Deadline) -> tuple[SolverStatus, FloatArray, float]:
        """(status, column values, seconds)."""
        # the first two solves of a large master by interior point (with crossover: a basis
        # for the warm starts after them), then dual simplex with devex weights. Measured on
        # `benchmarks/space_sharing.py --sizes 2048 --class-size 3|4|8` (2026-11-30): the
        # second round adds hundreds of cuts at once, after which a warm dual simplex took
        # 9 s where a fresh interior point takes 2 s (finish-time fairness: 27.6 -> 10.7 s,
        # 11.8 -> 4.1 s, 5.7 -> 2.7 s; makespan within 10%)
        early = self.solves < IPM_SOLVES and self.num_cols > IPM_COLUMNS
        self.session.set_method("ipm" if early else "simplex")
        result = self.session.run(deadline)
        self.solves += 1
        self.last = result
        return result.status, result.x, result.solve_time_s

    def certificate(self, m: int) -> tuple[float | None, FloatArray, FloatArray]:
        """(proven bound on t*, y (m,) per job, pi (n,)) from the last solve's duals."""
        n = self.lp.W.size
        nres, L = self.rhs.size, len(self.cuts)
        if self.last is None or L == 0:
            return None, np.zeros(m), np.zeros(n)
        duals = -self.last.row_dual  # HiGHS minimizes -t: negate for t's multipliers
        cut_rows = _cut_matrix(self.cuts, self.num_cols)
        matrix = sp.vstack([cut_rows, self.resources]).tocsc()
        b = np.concatenate([[c.rhs for c in self.cuts], self.rhs])
        mu = np.maximum(np.nan_to_num(duals[nres:], nan=0.0), 0.0)
        at_t = cut_rows[:, self.t_col].toarray().reshape(-1)
        total = float(mu @ at_t)
        if total <= 0:
            return None, np.zeros(m), np.zeros(n)
        ordered = np.concatenate([mu, duals[:nres]]) / total
        c = np.zeros(self.num_cols)
        c[self.t_col] = 1.0
        bound, lam = lagrangian_bound(self.lp, matrix, b, c, ordered, L, self.equalities)
        y = np.zeros(m)
        for cut, weight in zip(self.cuts, lam[:L], strict=True):
            if weight > 0:
                np.add.at(y, cut.jobs, weight * cut.weights)
        return (bound if math.isfinite(bound) else None), y, lam[L:L + n]


class Classes:
    """Per group: its members by demand, largest first (the top-k sets of the line cuts)."""

    def __init__(self, groups: Groups, demand: FloatArray, level_rows: BoolArray) -> None:
        order = np.lexsort((-demand, groups.group))
        self.members = order
        self.start = np.searchsorted(groups.group[order], np.arange(groups.size.size + 1))
        self.demand = demand
        self.level_rows = level_rows

    def jobs(self, g: int | np.integer[Any]) -> IntArray:
        return self.members[self.start[g]:self.start[g + 1]]


def _line_cut(modes: Modes, g: int, k_g: float, jobs: IntArray, demand: FloatArray,
              t_col: int, count: int, prefix: int, halved: BoolArray | None = None) -> Cut:
    """t sum_(top count) d_i <= sum_(l < prefix) (rate_l - rate_prefix) M_l
    + rate_prefix count, with M_l = k_g v_l, or S/2 for the same-class cells marked in
    `halved` (over the class's cells in rate order; count = 1)."""
    a, b = modes.start[g], modes.start[g + 1]
    rate = modes.rate[a:b]
    nxt = float(rate[prefix]) if prefix < rate.size else 0.0
    coef = rate[:prefix] - nxt
    use = coef > 0
    cols = modes.col[a:a + prefix][use]
    vals = -coef[use] * k_g
    if halved is not None:
        half = halved[:prefix][use]
        cols = np.where(half, modes.s_col[a:a + prefix][use], cols)
        vals = np.where(half, -coef[use] / 2, vals)
    top = jobs[:count]
    d = float(demand[top].sum())
    return _scaled_cut(np.concatenate([[t_col], cols]), np.concatenate([[d], vals]),
                       nxt * count, top, np.ones(top.size))


def _violated(cut: Cut, x: FloatArray) -> bool:
    return float(cut.vals @ x[cut.cols]) > cut.rhs + 1e-9 * max(1.0, abs(cut.rhs))


def _separate(modes: Modes, classes: Classes, lp: PackedLP, x: FloatArray, t_col: int
              ) -> list[Cut]:
    """The most violated line cut of each line piece, per class (module docstring); only cuts
    the point violates as written (a guard against re-adding a cut the master holds)."""
    t = x[t_col]
    cuts: list[Cut] = []
    for g in np.flatnonzero(classes.level_rows):
        jobs = classes.jobs(g)
        a, b = modes.start[g], modes.start[g + 1]
        if jobs.size < 2 or a == b:  # one job: the seed cut is its level row
            continue
        k_g = float(lp.k[g])
        rate = modes.rate[a:b]
        total = k_g * x[modes.col[a:b]]
        demand = np.cumsum(classes.demand[jobs]) * t
        for capped in (False, True):
            used = total
            counts = np.arange(1, jobs.size + 1)
            halved: BoolArray | None = None
            if capped:  # one job's share of a same-class cell is at most S/2
                s_col = modes.s_col[a:b]
                half = np.where(s_col >= 0, x[np.maximum(s_col, 0)] / 2, np.inf)
                halved = half < total
                if not halved.any():
                    continue
                used = np.minimum(total, half)
                counts = counts[:1]
            ends = np.cumsum(used)
            best = np.interp(counts, np.concatenate([[0.0], ends]),
                             np.concatenate([[0.0], np.cumsum(rate * used)]))
            excess = demand[counts - 1] - best
            bad = excess > 1e-9 * np.maximum(best, 1e-12)
            if not bad.any():
                continue
            piece = np.searchsorted(ends, counts, side="right")
            for p in np.unique(piece[bad]):
                here = bad & (piece == p)
                count = int(counts[here][np.argmax(excess[here])])
                cut = _line_cut(modes, int(g), k_g, jobs, classes.demand, t_col, count,
                                int(p), halved)
                if _violated(cut, x):
                    cuts.append(cut)
    return cuts


@dataclass(frozen=True)
class Expanded:
    """The coarse LP with one group per job (for `realize`); fine cell of (coarse cell c,
    member p) = offset[c] + p, singles and partner cells; explicit pair cells unchanged."""

    groups: Groups
    lp: PackedLP
    single_offset: IntArray
    q_offset: IntArray
    member_pos: IntArray  # (m,) position of each job in its group's member list


def expand(lp: PackedLP, groups: Groups, members: IntArray, member_start: IntArray
           ) -> Expanded:
    m = groups.group.size
    k = np.diff(member_start)
    pos = np.zeros(m, dtype=np.int64)
    pos[members] = np.arange(m) - member_start[groups.group[members]]

    def spread(owner: IntArray) -> tuple[IntArray, IntArray, IntArray]:
        counts = k[owner]
        offset = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        cell = np.repeat(np.arange(owner.size), counts)
        within = np.arange(cell.size) - offset[cell]
        jobs = members[member_start[owner[cell]] + within]
        return offset, cell, jobs

    s_off, s_cell, s_jobs = spread(lp.si)
    q_off, q_cell, q_jobs = spread(lp.qg)
    sign = np.sign(lp.q_coef[q_cell])
    fine = replace(
        lp,
        level_single=lp.level_single[groups.group],
        si=s_jobs, sj=lp.sj[s_cell],
        pair_g=groups.rep[lp.pair_g], pair_h=groups.rep[lp.pair_h],
        qg=q_jobs, qj=lp.qj[q_cell], q_row=lp.q_row[q_cell], q_coef=sign,
        q_same=lp.q_same[q_cell], level_q=lp.level_q[q_cell], real_q=lp.real_q[q_cell],
        k=np.ones(m), s=lp.s[groups.group], level_rows=lp.level_rows[groups.group],
    )
    jobs = Groups(np.arange(m), np.ones(m), np.arange(m))
    return Expanded(jobs, fine, s_off, q_off, pos)


@dataclass
class Decoded:
    raw: RawSolution
    cuts: list[Cut]
    worst: float  # largest demand shortfall (fraction of the demand)


def _pairing_within(lp: PackedLP, modes: Modes, x: FloatArray, g: int) -> bool:
    """Does class g use a same-class partner cell (the only rule F does not settle)?"""
    a, b = modes.start[g], modes.start[g + 1]
    same = modes.s_col[a:b] >= 0
    return bool(np.any(x[modes.col[a:b][same]] * lp.k[g] > USED))


def _decode(lp: PackedLP, modes: Modes, classes: Classes, ex: Expanded, x: FloatArray,
            t_col: int, threads: int, pairing_only: bool = False) -> Decoded:
    """Per-job times for the master's class totals (module docstring): uniform within a
    class, then the decode LP for the classes of more than one job with a level row (with
    `pairing_only`, only those pairing within the class: the check before the final decode);
    Benders cuts for the classes it cannot serve."""
    ns, npc, _, _ = lp.sizes
    t = float(x[t_col])
    uniform = _uniform(lp, x)
    fx, X, fV = uniform.x, uniform.X, uniform.V
    todo = [g for g in np.flatnonzero(classes.level_rows & (lp.k >= 2))
            if modes.start[g + 1] > modes.start[g]
            and (not pairing_only or _pairing_within(lp, modes, x, int(g)))]
    if not todo:
        return Decoded(RawSolution(fx, X, fV), [], 0.0)
    # columns: (group, used mode, member); rows: usage per (group, used mode), then budget
    # and demand per member
    col_mode: list[IntArray] = []
    col_job: list[IntArray] = []
    col_rate: list[FloatArray] = []
    col_upper: list[FloatArray] = []
    col_fine: list[IntArray] = []
    col_single: list[BoolArray] = []
    use_group: list[int] = []
    use_lower: list[float] = []
    use_upper: list[float] = []
    use_entry: list[int] = []
    member_lists: list[IntArray] = []
    budget: list[FloatArray] = []
    for g in todo:
        a, b = modes.start[g], modes.start[g + 1]
        jobs = classes.jobs(g)
        member_lists.append(jobs)
        k_g = float(lp.k[g])
        total = k_g * x[modes.col[a:b]]
        used = np.flatnonzero(total > USED)
        entry = a + used
        first_use = len(use_lower)
        use_group.extend([int(g)] * used.size)
        use_entry.extend(entry.tolist())
        exact = modes.exact[entry]
        use_lower.extend(np.where(exact, total[used], -np.inf).tolist())
        use_upper.extend(total[used].tolist())
        # caps S/2 and budgets 1, or the master's own values where it exceeds them within
        # its tolerance: the uniform split stays feasible, so the LP always has an answer
        cap = np.where(modes.s_col[entry] >= 0,
                       np.maximum(x[np.maximum(modes.s_col[entry], 0)] / 2, total[used] / k_g),
                       np.inf)
        budget.append(np.full(jobs.size, max(1.0, float(total.sum() / k_g))))
        for u, e in enumerate(entry):
            col_mode.append(np.full(jobs.size, first_use + u))
            col_job.append(jobs)
            col_rate.append(np.full(jobs.size, modes.rate[e]))
            col_upper.append(np.full(jobs.size, cap[u]))
            c = int(modes.col[e])
            if c < ns:
                col_fine.append(ex.single_offset[c] + ex.member_pos[jobs])
                col_single.append(np.ones(jobs.size, dtype=bool))
            else:
                qi = c - ns - npc
                col_fine.append(ex.q_offset[qi] + ex.member_pos[jobs])
                col_single.append(np.zeros(jobs.size, dtype=bool))
    all_jobs = np.concatenate(member_lists)
    row_of_job = np.full(classes.demand.size, -1)
    row_of_job[all_jobs] = np.arange(all_jobs.size)
    nuse, nj = len(use_lower), all_jobs.size
    mode_of = np.concatenate(col_mode) if col_mode else np.zeros(0, np.int64)
    job_of = np.concatenate(col_job) if col_job else np.zeros(0, np.int64)
    rate_of = np.concatenate(col_rate) if col_rate else np.zeros(0)
    upper_of = np.concatenate(col_upper) if col_upper else np.zeros(0)
    nt = mode_of.size
    jr = row_of_job[job_of]
    rows = np.concatenate([mode_of, nuse + jr, nuse + nj + jr, nuse + nj + np.arange(nj)])
    cols = np.concatenate([np.arange(nt), np.arange(nt), np.arange(nt), nt + np.arange(nj)])
    vals = np.concatenate([np.ones(nt), np.ones(nt), rate_of, np.ones(nj)])
    matrix = sp.csc_matrix((vals, (rows, cols)), shape=(nuse + 2 * nj, nt + nj))
    inf = INFINITY
    demand = classes.demand[all_jobs] * t
    lower = np.concatenate([np.array(use_lower), np.full(nj, -inf), demand])
    upper = np.concatenate([np.array(use_upper), np.concatenate(budget), np.full(nj, inf)])
    model = LinearModel(
        cost=np.concatenate([np.zeros(nt), np.ones(nj)]),
        matrix=matrix,
        row_lower=lower,
        row_upper=upper,
        col_lower=np.zeros(nt + nj),
        col_upper=np.concatenate([upper_of, np.full(nj, inf)]),
    )
    settings = HighsSettings(method="simplex", primal_tolerance=1e-10, dual_tolerance=1e-10,
                             threads=threads)
    solution = solve_highs(model, settings)
    values = solution.x
    if solution.status is not SolverStatus.OPTIMAL:
        # no answer: keep the uniform split, no cut
        return Decoded(RawSolution(fx, X, fV), [], math.inf)
    times = np.maximum(values[:nt], 0.0)
    fine = np.concatenate(col_fine) if col_fine else np.zeros(0, np.int64)
    single = np.concatenate(col_single) if col_single else np.zeros(0, dtype=bool)
    # members of decoded classes: only the LP's cells
    for g, jobs in zip(todo, member_lists, strict=True):
        a, b = modes.start[g], modes.start[g + 1]
        for e in range(a, b):
            c = int(modes.col[e])
            if c < ns:
                fx[ex.single_offset[c] + ex.member_pos[jobs]] = 0.0
            elif c >= ns + npc:
                fV[ex.q_offset[c - ns - npc] + ex.member_pos[jobs]] = 0.0
    fx[fine[single]] = times[single]
    fV[fine[~single]] = times[~single]
    slack = np.maximum(values[nt:], 0.0)
    short = np.divide(slack, demand, out=np.zeros(nj), where=demand > 0)
    worst = float(short.max(initial=0.0))
    cuts: list[Cut] = []
    if worst > SLACK_TOLERANCE:
        row_dual = solution.row_dual
        group_of_job = np.repeat(np.arange(len(todo)), [j.size for j in member_lists])
        for index, g in enumerate(todo):
            here = group_of_job == index
            if short[here].max(initial=0.0) <= SLACK_TOLERANCE:
                continue
            cuts.append(_benders_cut(
                lp, modes, int(g), member_lists[index], classes.demand, t_col, row_dual,
                np.flatnonzero(np.array(use_group) == g), np.array(use_entry),
                np.flatnonzero(here), nuse, nj))
    return Decoded(RawSolution(fx, X, fV), cuts, worst)


def _benders_cut(lp: PackedLP, modes: Modes, g: int, jobs: IntArray, demand: FloatArray,
                 t_col: int, row_dual: FloatArray, uses: IntArray, use_entry: IntArray,
                 members: IntArray, nuse: int, nj: int) -> Cut:
    """A feasibility cut for class g from the decode LP's duals (HiGHS's signs, minimizing
    the slack): value >= sum_r (y_r+ L_r + y_r- U_r) + sum_j min(0, d_j) u_j, made valid
    for every right-hand side by completing the duals of its unused cells and lowering the
    budget duals until every uncapped column prices out."""
    a, b = modes.start[g], modes.start[g + 1]
    y_dem = np.clip(row_dual[nuse + nj + members], 0.0, 1.0)
    y_bud = np.minimum(row_dual[nuse + members], 0.0)
    entries = np.arange(a, b)
    y_use = np.zeros(entries.size)
    known = np.full(entries.size, False)
    pos = use_entry[uses] - a
    y_use[pos] = row_dual[uses]
    known[pos] = True
    exact = modes.exact[entries]
    rate = modes.rate[entries]
    y_use = np.where(exact | ~known, y_use, np.minimum(y_use, 0.0))
    # reduced cost of t[i, e] = -(y_use[e] + y_bud[i] + rate[e] y_dem[i])
    need = y_bud[:, None] + rate[None, :] * y_dem[:, None]
    fill = -need.max(axis=0)
    y_use = np.where(known, y_use, np.where(exact, fill, np.minimum(fill, 0.0)))
    capped = modes.s_col[entries] >= 0
    reduced = -(y_use[None, :] + need)
    # capped cells pay min(0, d) S / 2; the others must price out: lower the budget duals
    short = np.where(capped[None, :], 0.0, np.maximum(-reduced, 0.0)).max(axis=1)
    y_bud = y_bud - short
    reduced = -(y_use[None, :] + y_bud[:, None] + rate[None, :] * y_dem[:, None])
    k_g = float(lp.k[g])
    cols = [np.array([t_col]), modes.col[entries]]
    vals = [np.array([float(y_dem @ demand[jobs])]), k_g * y_use]
    s_cols = modes.s_col[entries][capped]
    if s_cols.size:
        cols.append(s_cols)
        vals.append(np.minimum(reduced[:, capped], 0.0).sum(axis=0) / 2)
    return _scaled_cut(np.concatenate(cols), np.concatenate(vals), float(-y_bud.sum()), jobs,
                       y_dem)


class DemandLP:
    """The level LP of one set of rate classes, solved for one demand vector after another
    (the finish-time-fairness bracket): the master, its cuts and its basis are kept, since
    every cut holds for every demand (a cut's t coefficient sum_i w_ci d_i is updated)."""

    def __init__(self, problem: Problem, groups: Groups, lp: PackedLP, threads: int) -> None:
        self.problem = problem
        self.groups = groups
        self.lp = lp
        self.threads = threads
        self.modes = _modes(lp)
        members = np.argsort(groups.group, kind="stable")
        self.expanded = expand(lp, groups, members,
                               np.searchsorted(groups.group[members], np.arange(lp.k.size + 1)))
        self.master = Master(lp, threads)
        self.seeded = np.zeros(lp.k.size, dtype=bool)

    def solve(self, demand: FloatArray, deadline: Deadline) -> DemandSolution:
        """max t s.t. thr_i >= demand_i t for the jobs of groups with a level row (module
        docstring); `demand` (m,) > 0 for those jobs."""
        lp, modes, master, ex = self.lp, self.modes, self.master, self.expanded
        m, threads = self.groups.group.size, self.threads
        demand = np.where(demand > 0, demand, 0.0)
        level_rows = lp.level_rows & (np.bincount(self.groups.group, demand > 0,
                                                  minlength=lp.k.size) > 0)
        classes = Classes(self.groups, demand, level_rows)
        t_col = master.t_col
        master.retarget(demand)
        new = np.flatnonzero(level_rows & ~self.seeded)
        master.add([_line_cut(modes, int(g), float(lp.k[g]), classes.jobs(g), demand, t_col,
                              classes.jobs(g).size, modes.start[g + 1] - modes.start[g])
                    for g in new])
        self.seeded[new] = True
        solve_time, rounds, status, decode_cuts = 0.0, 0, SolverStatus.ERROR, 0
        bounded = False  # stopped by the deadline right after an optimal master
        x = np.zeros(master.num_cols)
        decoded: Decoded | None = None
        while True:
            decoded = None
            if deadline.expired():
                status = SolverStatus.TIME_LIMIT
                break
            status, x, elapsed = master.solve(deadline)
            solve_time += elapsed
            rounds += 1
            if status is not SolverStatus.OPTIMAL:
                break
            cuts = _separate(modes, classes, lp, x, t_col)
            if not cuts:  # the pairing classes first (small), then every class once
                cuts = _decode(lp, modes, classes, ex, x, t_col, threads,
                               pairing_only=True).cuts
                if not cuts:
                    decoded = _decode(lp, modes, classes, ex, x, t_col, threads)
                    cuts = decoded.cuts
                # a cut the point satisfies as written (its duals repaired to validity)
                # would only come back: stop with the plan and its honest gap instead
                cuts = [cut for cut in cuts if _violated(cut, x)]
                decode_cuts += len(cuts)
                if not cuts:
                    break
            if rounds >= MAX_ROUNDS:  # the master is still a relaxation: its bound holds
                break
            if deadline.expired():  # the last master is solved: its bound holds
                status, bounded = SolverStatus.TIME_LIMIT, True
                break
            master.add(cuts)
        if decoded is None and status is SolverStatus.OPTIMAL:
            decoded = _decode(lp, modes, classes, ex, x, t_col, threads)
        raw = decoded.raw if decoded is not None else _uniform(lp, x)
        plan, thr = realize(self.problem, ex.groups, ex.lp, raw)
        served = demand > 0
        t_reached = float(np.min(thr[served] / demand[served])) if served.any() else 0.0
        bound, y, pi = master.certificate(m) if status is SolverStatus.OPTIMAL or bounded else (
            None, np.zeros(m), np.zeros(lp.W.size))
        rows = master.rhs.size + len(master.cuts)
        nnz = master.resources.nnz + sum(c.cols.size for c in master.cuts)
        kept = status is SolverStatus.OPTIMAL or status.limit_reached
        result = SolverResult(
            status=status if kept else SolverStatus.ERROR,
            x=np.zeros(0), objective=t_reached, has_solution=True, solver="highs",
            solver_version=highs_version(), solve_time_s=solve_time,
            detail=(f"{rounds} master rounds, {len(master.cuts)} cuts ({decode_cuts} from "
                    "the decode LP)"),
        )
        return DemandSolution(result.status, plan, thr, t_reached, bound, y, pi, result,
                              ModelSize(master.num_cols, rows, nnz, 0), rounds, decode_cuts)


def solve_demand_lp(problem: Problem, groups: Groups, lp: PackedLP, demand: FloatArray,
                    deadline: Deadline, threads: int) -> DemandSolution:
    """One demand vector (`DemandLP.solve`). `groups`/`lp`: rate classes and their
    unit-scale cells (levels = policy throughput)."""
    return DemandLP(problem, groups, lp, threads).solve(demand, deadline)


def _uniform(lp: PackedLP, x: FloatArray) -> RawSolution:
    """Every job of a class gets the class's per-job cell values (clipped at 0)."""
    ns, npc, nq, _ = lp.sizes
    xs, X, V = np.maximum(x[:ns], 0.0), np.maximum(x[ns:ns + npc], 0.0), \
        np.maximum(x[ns + npc:ns + npc + nq], 0.0)
    return RawSolution(xs[np.repeat(np.arange(ns), lp.k[lp.si].astype(np.int64))], X,
                       V[np.repeat(np.arange(nq), lp.k[lp.qg].astype(np.int64))])
