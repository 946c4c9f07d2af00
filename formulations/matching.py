"""Maximum-weight matching on a general graph, exact, with a proven bound.

The matching polytope is the degree LP (every vertex in at most one chosen edge) plus the
odd-set (blossom) inequalities: for an odd vertex set S, at most (|S| - 1)/2 chosen edges lie
inside S (Edmonds). The LP is solved by HiGHS over a growing set of edges (column generation
priced on the whole dense weight matrix), odd-set cuts are separated from the components of
the fractional support, and a MIP over the edges whose reduced cost cannot exclude them
settles what the cuts leave fractional.

Certificate. For row duals y >= 0 (vertices) and z >= 0 (odd sets), every matching M has
    w(M) <= sum_u y_u + sum_S z_S (|S| - 1)/2 + 1/2 sum_u max(0, max_v rc_uv)
with rc_uv = w_uv - y_u - y_v - sum_{S contains u, v} z_S (each matched edge's reduced cost is
at most the mean of its two endpoints' largest positive reduced costs). At the end of the
pricing loop the last term is 0 and the bound is the LP value. An edge with
rc_e < -(bound - incumbent) is in no matching better than the incumbent, which is why the MIP
may leave such edges out.

Bipartite graphs. The incumbent is scipy's assignment algorithm (exact there); the LP only
has to prove it, and stops as soon as the bound meets it.

Twins. Two vertices are twins when their rows agree outside their own two entries
(interchangeable jobs: Muri's traces repeat a few models). Twins form classes with one
weight c_a inside class a, and a matching is then a b-matching of the classes: x_ab pairs
between classes a and b, x_aa inside a, sum_b x_ab + 2 x_aa <= n_a; any such counts are
realized by distinct members. When the classes are few, that small integer program (HiGHS) is
solved instead: exact, and immune to the ties that make the LP's optimal face huge.

Only positive weights are edges (a non-positive edge never increases the weight of a
matching). Vertices: at most `MAX_VERTICES` (a dense n x n weight matrix is priced).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.solver.backends.highs import (
    INFINITY,
    HighsSession,
    HighsSettings,
    LinearModel,
    solve_highs,
)
from apportion.solver.backends.status import SolverResult, SolverStatus
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import FloatArray, IntArray

BoolArray = NDArray[np.bool_]

_log = logging.getLogger(__name__)

MAX_VERTICES = 8192
"""Largest graph handled (the weight matrix is dense: 8192^2 doubles = 512 MiB)."""

INITIAL_EDGES_PER_VERTEX = 6
"""Heaviest edges per vertex in the first LP; pricing adds the rest when they matter."""

ALL_EDGES_UP_TO = 20_000
"""Graphs with at most this many edges start with all of them (no pricing rounds)."""

MAX_TWIN_CLASSES = 400
"""Twin compression (below) is used when the vertices fall into at most this many classes."""

MAX_CUT_ROUNDS = 30
"""Odd-set separation rounds before the MIP settles the remaining fractional part."""

IPM_FROM_EDGES = 8_000
"""A first LP with at least this many edges is solved by interior point with crossover (about
2x faster than a cold dual simplex on 2,048 vertices); later runs are warm simplex re-solves."""

@dataclass(frozen=True)
class Matching:
    """A matching of the vertices 0..n-1 and its certificate (weights in the caller's units)."""

    mate: IntArray
    """(n,) the vertex matched to each vertex, -1 = unmatched."""
    objective: float
    """Total weight of the matched edges."""
    bound: float | None
    """Proven upper bound on the largest matching weight (None = none proven)."""
    status: SolverStatus
    """OPTIMAL when the matching is proven maximum; TIME_LIMIT when the deadline stopped it."""
    lp_runs: int = 0
    cuts: int = 0
    columns: int = 0
    solve_time_s: float = 0.0
    method: str = ""
    """How optimality was reached: "lp" (the LP optimum is integral) or "lp+mip"."""

    def pairs(self) -> IntArray:
        """(k, 2) matched pairs (a < b), ascending a."""
        a = np.nonzero(self.mate > np.arange(self.mate.size))[0]
        return np.column_stack([a, self.mate[a]]).astype(np.int64).reshape(-1, 2)


def matching_weight(weight: FloatArray, mate: IntArray) -> float:
    """Total weight of the matching `mate` on the symmetric matrix `weight`."""
    a = np.nonzero(mate > np.arange(mate.size))[0]
    return float(weight[a, mate[a]].sum()) if a.size else 0.0


def is_matching(mate: IntArray) -> bool:
    """`mate` is symmetric and never matches a vertex with itself."""
    n = mate.size
    matched = mate >= 0
    if np.any(mate[matched] >= n) or np.any(mate[matched] == np.nonzero(matched)[0]):
        return False
    return bool(np.all(mate[mate[matched]] == np.nonzero(matched)[0]))


def greedy_matching(weight: FloatArray, candidates: IntArray | None = None) -> IntArray:
    """Heaviest edge first (ties to the lower vertex pair). `candidates`: restrict to these
    edges (flat indices into `weight`, either orientation)."""
    n = weight.shape[0]
    mate = np.full(n, -1, np.int64)
    if candidates is None:
        return _mutual_best(weight, mate)
    u, v = np.divmod(np.asarray(candidates, np.int64), n)
    lo, hi = np.minimum(u, v), np.maximum(u, v)
    keep = (weight[lo, hi] > 0) & (lo != hi)
    flat = np.unique(lo[keep] * n + hi[keep])
    flat = flat[np.argsort(-weight.reshape(-1)[flat], kind="stable")]
    for a, b in zip(*(arr.tolist() for arr in np.divmod(flat, n)), strict=True):
        if mate[a] < 0 and mate[b] < 0:
            mate[a], mate[b] = b, a
    return mate


def _mutual_best(weight: FloatArray, mate: IntArray) -> IntArray:
    """Greedy on the whole matrix: match every two free vertices that are each other's heaviest
    free neighbour (ties to the lower index), until none is left; the heaviest free edge is
    always such a pair, so this is the heaviest-edge-first greedy when weights are distinct."""
    free = np.nonzero((weight > 0).any(axis=1))[0]
    while free.size > 1:
        block = weight[np.ix_(free, free)]
        best = np.argmax(block, axis=1)
        has = block[np.arange(free.size), best] > 0
        mutual = has & (best[best] == np.arange(free.size))
        if not mutual.any():
            break
        mate[free[mutual]] = free[best[mutual]]
        free = free[~mutual & has]
        if free.size:
            free = free[(weight[np.ix_(free, free)] > 0).any(axis=1)]
    return mate


class _DegreeLP:
    """The matching LP over a growing edge set, kept warm in HiGHS."""

    def __init__(self, weight: FloatArray, edges: IntArray, threads: int) -> None:
        self.n = int(weight.shape[0])
        self.weight = weight
        self.u = np.zeros(0, np.int64)
        self.v = np.zeros(0, np.int64)
        self.cut_sets: list[IntArray] = []
        self.cut_member = np.zeros((0, self.n), bool)
        empty = LinearModel(
            cost=np.zeros(0),
            matrix=sp.csc_matrix((self.n, 0)),
            row_lower=np.full(self.n, -INFINITY),
            row_upper=np.ones(self.n),
            col_lower=np.zeros(0),
            col_upper=np.zeros(0),
            maximize=True,
        )
        self.session = HighsSession(empty, HighsSettings(method="simplex", threads=threads))
        self.in_model = np.zeros((self.n, self.n), bool)
        self.add_edges(edges)
        self.cold = True

    def run(self, deadline: Deadline) -> SolverResult:
        """Solve the current LP: the first run of a large one by interior point (simplex
        when that ends without a status), every later run warm by simplex."""
        if self.cold and self.u.size >= IPM_FROM_EDGES:
            self.session.set_method("ipm")
            result = self.session.run(deadline)
            self.session.set_method("simplex")
            if result.solved or deadline.expired():
                self.cold = False
                return result
        self.cold = False
        return self.session.run(deadline)

    @property
    def rows(self) -> int:
        return self.n + len(self.cut_sets)

    def add_edges(self, flat: IntArray) -> None:
        u, v = np.divmod(np.asarray(flat, np.int64), self.n)
        lo, hi = np.minimum(u, v), np.maximum(u, v)
        keep = ~self.in_model[lo, hi]
        lo, hi = lo[keep], hi[keep]
        if lo.size == 0:
            return
        self.in_model[lo, hi] = True
        k = lo.size
        rows = [lo, hi]
        cols = [np.arange(k), np.arange(k)]
        for c, _ in enumerate(self.cut_sets):
            inside = np.nonzero(self.cut_member[c, lo] & self.cut_member[c, hi])[0]
            rows.append(np.full(inside.size, self.n + c))
            cols.append(inside)
        r, cidx = np.concatenate(rows), np.concatenate(cols)
        matrix = sp.csc_matrix((np.ones(r.size), (r, cidx)), shape=(self.rows, k))
        self.session.add_cols(self.weight[lo, hi], np.zeros(k), np.full(k, INFINITY), matrix)
        self.u = np.concatenate([self.u, lo])
        self.v = np.concatenate([self.v, hi])

    def add_cut(self, members: IntArray) -> None:
        """Odd-set row: at most (|S| - 1)/2 model edges inside S."""
        member = np.zeros(self.n, bool)
        member[members] = True
        inside = np.nonzero(member[self.u] & member[self.v])[0]
        row = sp.csr_matrix(
            (np.ones(inside.size), (np.zeros(inside.size, np.int64), inside)),
            shape=(1, self.u.size),
        )
        self.session.add_rows(np.array([-INFINITY]), np.array([(members.size - 1) / 2]), row)
        self.cut_sets.append(np.asarray(members, np.int64))
        self.cut_member = np.vstack([self.cut_member, member[None, :]])

    def reduced_costs(self, dual: FloatArray, out: FloatArray) -> FloatArray:
        """(n, n) w_uv - y_u - y_v - sum_S z_S [u, v in S] over the whole graph, into `out`.
        Non-edges (weight 0) come out <= 0 since the duals are >= 0."""
        y = dual[: self.n]
        np.subtract(self.weight, y[:, None], out=out)
        out -= y[None, :]
        for c, members in enumerate(self.cut_sets):
            z = dual[self.n + c]
            if z > 0:
                out[np.ix_(members, members)] -= z
        return out

    def dual_bound(self, dual: FloatArray, row_best: FloatArray) -> float:
        """The certificate of the module docstring; `row_best[u]` = max_v rc_uv."""
        bound = float(dual[: self.n].sum())
        for c, members in enumerate(self.cut_sets):
            bound += float(dual[self.n + c]) * (members.size - 1) / 2
        return bound + 0.5 * float(np.maximum(row_best, 0.0).sum())


def _dual(raw: FloatArray) -> FloatArray:
    """HiGHS's row duals of the `<=` rows of a maximization (>= 0 up to its tolerance), clipped
    at 0: the bound of the module docstring holds for any non-negative duals."""
    return np.maximum(raw, 0.0)


def _odd_components(
    u: IntArray, v: IntArray, x: FloatArray, n: int
) -> list[IntArray]:
    """Vertex sets of the components of the fractional support with an odd number of vertices
    whose odd-set inequality x is violated."""
    frac = (x > 1e-6) & (x < 1 - 1e-6)
    if not frac.any():
        return []
    fu, fv = u[frac], v[frac]
    graph = sp.coo_matrix((np.ones(fu.size), (fu, fv)), shape=(n, n))
    from scipy.sparse.csgraph import connected_components

    _, label = connected_components(graph, directed=False)
    touched = np.unique(np.concatenate([fu, fv]))
    sets: list[IntArray] = []
    for comp in np.unique(label[touched]):
        members = touched[label[touched] == comp]
        if members.size < 3 or members.size % 2 == 0:
            continue
        member = np.zeros(n, bool)
        member[members] = True
        inside = member[u] & member[v]
        if x[inside].sum() > (members.size - 1) / 2 + 1e-6:
            sets.append(members)
    return sets


def _round(
    u: IntArray, v: IntArray, x: FloatArray, weight: FloatArray, deadline: Deadline, threads: int
) -> IntArray:
    """A matching from an LP point: its integral edges, then the best matching of the
    remaining vertices over their heaviest edges (a small MIP), then greedy for what is left."""
    n = weight.shape[0]
    mate = np.full(n, -1, np.int64)
    one = x > 1 - 1e-6
    mate[u[one]], mate[v[one]] = v[one], u[one]
    free = np.nonzero(mate < 0)[0]
    if free.size < 2:
        return mate
    sub = weight[np.ix_(free, free)]
    k = min(_REPAIR_EDGES_PER_VERTEX, free.size - 1)
    top = np.argpartition(-sub, k - 1, axis=1)[:, :k]
    a = np.repeat(np.arange(free.size), k)
    b = top.reshape(-1)
    support = (x > 1e-9) & ~one
    index = np.full(n, -1, np.int64)
    index[free] = np.arange(free.size)
    su, sv = index[u[support]], index[v[support]]
    inside = (su >= 0) & (sv >= 0)
    a = np.concatenate([a, su[inside], sv[inside]])
    b = np.concatenate([b, sv[inside], su[inside]])
    keep = sub[a, b] > 0
    lo, hi = np.minimum(a[keep], b[keep]), np.maximum(a[keep], b[keep])
    pairs = np.unique(lo * free.size + hi)
    lo, hi = np.divmod(pairs, free.size)
    if lo.size and lo.size <= _REPAIR_MAX_EDGES:
        chosen = _solve_matching_mip(sub, lo, hi, [], deadline, threads)
        if chosen is not None:
            pick = chosen[0]
            mate[free[lo[pick]]], mate[free[hi[pick]]] = free[hi[pick]], free[lo[pick]]
    rest = np.nonzero(mate < 0)[0]
    if rest.size >= 2:
        extra = greedy_matching(weight[np.ix_(rest, rest)])
        has = extra >= 0
        mate[rest[has]] = rest[extra[has]]
    return mate


_REPAIR_EDGES_PER_VERTEX = 8
_REPAIR_MAX_EDGES = 50_000


def max_weight_matching(
    weight: FloatArray,
    deadline: Deadline = NO_DEADLINE,
    threads: int = 0,
    relative_gap: float = 1e-9,
) -> Matching:
    """The maximum-weight matching of the symmetric (n, n) matrix `weight` (entries <= 0,
    NaN or -inf are no edge; the diagonal is ignored), with its proof (module docstring).

    `relative_gap`: stop once the matching is within this relative distance of the bound.
    The deadline is read before every LP run; when it passes, the best matching found so far
    comes back with the last proven bound and status TIME_LIMIT."""
    started = time.perf_counter()
    w = np.array(weight, dtype=np.float64, copy=True)
    n = w.shape[0]
    if w.shape != (n, n):
        raise ValueError(f"weight must be square, got {w.shape}")
    if n > MAX_VERTICES:
        raise ValueError(f"at most {MAX_VERTICES} vertices, got {n}")
    w[~(w > 0)] = 0.0  # NaN, -inf and non-positive weights: no edge
    w[np.isinf(w)] = 0.0
    np.fill_diagonal(w, 0.0)
    if not np.array_equal(w, w.T):
        raise ValueError("weight must be symmetric")
    if not w.any():
        return Matching(np.full(n, -1, np.int64), 0.0, 0.0, SolverStatus.OPTIMAL,
                        solve_time_s=time.perf_counter() - started, method="no edge")
    classes = twin_classes(w)
    if len(classes) < n and len(classes) <= MAX_TWIN_CLASSES:
        return _class_matching(w, classes, deadline, threads, relative_gap, started)
    scale = float(w.max())
    if np.count_nonzero(w) // 2 <= ALL_EDGES_UP_TO:
        initial = np.flatnonzero(np.triu(w, 1)).astype(np.int64)
    else:
        k = min(INITIAL_EDGES_PER_VERTEX, n - 1)
        top = np.argpartition(-w, k - 1, axis=1)[:, :k]
        rows = np.repeat(np.arange(n), k)
        cand = top.reshape(-1)
        initial = rows * n + cand
        initial = initial[w[rows, cand] > 0]
    sides = bipartition(w)  # bipartite: the assignment is exact, the LP only proves it
    best = _assignment(w, sides) if sides is not None else greedy_matching(w, initial)
    best_value = matching_weight(w, best)
    lp = _DegreeLP(w, np.concatenate([initial, _mate_edges(best, n)]), threads)
    reduced = np.empty_like(w)
    row_best = np.zeros(n)
    bound = last_bound = float("inf")
    runs = cuts = 0
    status = SolverStatus.OPTIMAL
    converged = False
    x = np.zeros(0)
    for _ in range(MAX_CUT_ROUNDS + 1):
        converged = False
        while True:  # price until no edge outside the model has a positive reduced cost
            if deadline.expired():
                status = SolverStatus.TIME_LIMIT
                break
            result = lp.run(deadline)
            runs += 1
            if not result.solved:
                status = result.status
                break
            x, dual = result.x, _dual(result.row_dual)
            lp.reduced_costs(dual, reduced)
            best_col = np.argmax(reduced, axis=1)
            row_best = reduced[np.arange(n), best_col]
            last_bound = lp.dual_bound(dual, row_best)
            bound = min(bound, last_bound)
            if _closed(best_value, bound, relative_gap):
                converged = True
                break
            entering = row_best > _PRICING_TOL * scale
            lo = np.minimum(np.arange(n), best_col)[entering]
            hi = np.maximum(np.arange(n), best_col)[entering]
            fresh = ~lp.in_model[lo, hi]
            _log.debug("lp run %d: %.6g (bound %.6g), %d columns, %d cuts, %d entering",
                       runs, result.objective, last_bound, lp.u.size, len(lp.cut_sets),
                       int(fresh.sum()))
            if not fresh.any():
                converged = True
                break
            lp.add_edges(np.unique(lo[fresh] * n + hi[fresh]))
        if not converged:
            break
        if _closed(best_value, bound, relative_gap):
            break
        rounded = _round(lp.u, lp.v, x, w, deadline, threads)
        value = matching_weight(w, rounded)
        if value > best_value:
            best, best_value = rounded, value
        if _closed(best_value, bound, relative_gap):
            break
        sets = _odd_components(lp.u, lp.v, x, n)
        _log.debug("rounded %.6g, bound %.6g, %d odd sets", best_value, bound, len(sets))
        if not sets:
            break
        for members in sets:
            lp.add_cut(members)
            cuts += 1
    method = "lp"
    if converged and not _closed(best_value, bound, relative_gap):
        # what the cuts left fractional: a MIP over the edges that can still matter
        method = "lp+mip"
        mip = _mip(w, reduced, last_bound, best_value, lp, deadline, threads)
        if mip is None:
            status = SolverStatus.TIME_LIMIT if deadline.expired() else SolverStatus.ERROR
        else:
            mate, mip_bound, status = mip
            value = matching_weight(w, mate)
            if value > best_value:
                best, best_value = mate, value
            if mip_bound is not None:
                bound = min(bound, max(mip_bound, best_value))
    if status is SolverStatus.OPTIMAL and not _closed(best_value, bound, relative_gap):
        status = SolverStatus.ITERATION_LIMIT
    return Matching(
        mate=best,
        objective=best_value,
        bound=bound if np.isfinite(bound) else None,
        status=status,
        lp_runs=runs,
        cuts=cuts,
        columns=int(lp.u.size),
        solve_time_s=time.perf_counter() - started,
        method=method,
    )


def bipartition(w: FloatArray) -> BoolArray | None:
    """(n,) one side of a 2-colouring of the graph, None when it has an odd cycle."""
    from scipy.sparse.csgraph import breadth_first_order

    n = w.shape[0]
    edge = w > 0
    if np.count_nonzero(edge) // 2 > n * n // 4:  # more edges than any bipartite graph has
        return None  # (Mantel: a triangle-free graph on n vertices has at most n^2/4 edges)
    graph = sp.csr_matrix(edge)
    color = np.full(n, -1, np.int64)
    for root in range(n):
        if color[root] >= 0:
            continue
        order, parent = breadth_first_order(graph, root, directed=False,
                                            return_predecessors=True)
        color[root] = 0
        for node in order[1:].tolist():
            color[node] = 1 - color[parent[node]]
    u, v = graph.nonzero()
    if (color[u] == color[v]).any():
        return None
    return np.asarray(color == 0)


def _assignment(w: FloatArray, left: BoolArray) -> IntArray:
    """A maximum-weight matching of a bipartite graph (scipy's assignment algorithm on the
    left x right weights; zero-weight assignments are dropped)."""
    from scipy.optimize import linear_sum_assignment

    a_side, b_side = np.nonzero(left)[0], np.nonzero(~left)[0]
    mate = np.full(w.shape[0], -1, np.int64)
    if a_side.size == 0 or b_side.size == 0:
        return mate
    rows, cols = linear_sum_assignment(w[np.ix_(a_side, b_side)], maximize=True)
    keep = w[a_side[rows], b_side[cols]] > 0
    mate[a_side[rows[keep]]] = b_side[cols[keep]]
    mate[b_side[cols[keep]]] = a_side[rows[keep]]
    return mate


def twin_classes(w: FloatArray) -> list[IntArray]:
    """The vertices grouped into classes of twins (module docstring), ascending."""
    n = w.shape[0]
    # twins have equal row sums, sums of squares and maxima (their rows are permutations)
    key = np.round(np.column_stack([w.sum(axis=1), (w * w).sum(axis=1)]), 9)
    order = np.lexsort((np.arange(n), key[:, 1], key[:, 0]))
    classes: list[IntArray] = []
    budget = 32 * n  # pairwise checks; rows that only look alike stay apart once it runs out
    start = 0
    while start < n:
        stop = start + 1
        while stop < n and (key[order[stop]] == key[order[start]]).all():
            stop += 1
        pending = order[start:stop].tolist()
        while pending:
            u = pending.pop(0)
            members = [u]
            rest = []
            for v in pending:
                budget -= 1
                if budget < 0:
                    rest.append(v)
                    continue
                differ = np.flatnonzero(w[u] != w[v])
                if np.isin(differ, (u, v)).all():
                    members.append(v)
                else:
                    rest.append(v)
            pending = rest
            classes.append(np.array(sorted(members), np.int64))
        start = stop
    classes.sort(key=lambda c: int(c[0]))
    return classes


def _class_matching(w: FloatArray, classes: list[IntArray], deadline: Deadline, threads: int,
                    relative_gap: float, started: float) -> Matching:
    """The b-matching of twin classes (module docstring), expanded to a matching."""
    k = len(classes)
    rep = np.array([c[0] for c in classes], np.int64)
    size = np.array([c.size for c in classes], np.float64)
    inside = np.array([w[c[0], c[1]] if c.size > 1 else 0.0 for c in classes])
    a, b = np.nonzero(np.triu(w[np.ix_(rep, rep)], 1))
    self_edges = np.nonzero((inside > 0) & (size > 1))[0]
    ca = np.concatenate([a, self_edges])
    cb = np.concatenate([b, self_edges])
    cols = ca.size
    value = np.concatenate([w[rep[a], rep[b]], inside[self_edges]])
    upper = np.concatenate([np.minimum(size[a], size[b]), np.floor(size[self_edges] / 2)])
    coef = np.concatenate([np.ones(a.size), 2 * np.ones(self_edges.size)])
    rows = np.concatenate([ca, cb[: a.size]])
    entries = np.concatenate([np.arange(cols), np.arange(a.size)])
    vals = np.concatenate([coef, np.ones(a.size)])
    model = LinearModel(
        cost=value,
        matrix=sp.csc_matrix((vals, (rows, entries)), shape=(k, cols)),
        row_lower=np.full(k, -INFINITY),
        row_upper=size,
        col_lower=np.zeros(cols),
        col_upper=upper,
        integer=np.ones(cols, bool),
        maximize=True,
    )
    result = solve_highs(
        model, HighsSettings(mip_rel_gap=relative_gap, mip_abs_gap=1e-12, threads=threads),
        deadline,
    )
    n = w.shape[0]
    mate = np.full(n, -1, np.int64)
    if result.has_solution:
        free = [list(c) for c in classes]
        counts = np.rint(result.x).astype(np.int64)
        for col in np.nonzero(counts > 0)[0].tolist():
            x, y = int(ca[col]), int(cb[col])
            for _ in range(int(counts[col])):
                u = free[x].pop()
                v = free[y].pop()
                mate[u], mate[v] = v, u
    objective = matching_weight(w, mate)
    bound = None if result.bound is None else max(result.bound, objective)
    return Matching(mate, objective, bound, result.status, lp_runs=0, cuts=0, columns=cols,
                    solve_time_s=time.perf_counter() - started,
                    method=f"twin classes ({k} of {n} vertices)")


_PRICING_TOL = 1e-9
"""Reduced costs above this (relative to the largest weight) price an edge into the LP."""


def _closed(value: float, bound: float, relative_gap: float) -> bool:
    """The matching of weight `value` is proven within `relative_gap` of `bound`."""
    return bound - value <= max(relative_gap * max(abs(bound), abs(value)), 1e-12)


def _mate_edges(mate: IntArray, n: int) -> IntArray:
    a = np.nonzero(mate > np.arange(n))[0]
    return (a * n + mate[a]).astype(np.int64)


def _mip(
    w: FloatArray,
    reduced: FloatArray,
    bound: float,
    incumbent: float,
    lp: _DegreeLP,
    deadline: Deadline,
    threads: int,
) -> tuple[IntArray, float | None, SolverStatus] | None:
    """The matching MIP over the edges with reduced cost >= -(bound - incumbent), `reduced`
    and `bound` from the same converged duals (no matching better than the incumbent uses
    another edge), with the odd-set rows found so far as valid inequalities."""
    n = w.shape[0]
    slack = bound - incumbent
    keep = np.triu(w > 0, 1) & (reduced >= -slack - _PRICING_TOL * float(w.max()))
    u, v = np.nonzero(keep)
    _log.debug("mip over %d edges (slack %.3g)", u.size, slack)
    solved = _solve_matching_mip(w, u, v, lp.cut_sets, deadline, threads)
    if solved is None:
        return None
    chosen, mip_bound, status = solved
    mate = np.full(n, -1, np.int64)
    mate[u[chosen]] = v[chosen]
    mate[v[chosen]] = u[chosen]
    return mate, mip_bound, status


def _solve_matching_mip(
    w: FloatArray,
    u: IntArray,
    v: IntArray,
    cut_sets: list[IntArray],
    deadline: Deadline,
    threads: int,
) -> tuple[BoolArray, float | None, SolverStatus] | None:
    """max sum w[u, v] x over binary x with vertex degrees <= 1 and the odd-set rows of
    `cut_sets`; the chosen edges, HiGHS's bound and status (None = no solution)."""
    n, k = w.shape[0], u.size
    rows = [u, v]
    cols = [np.arange(k), np.arange(k)]
    for c, members in enumerate(cut_sets):
        member = np.zeros(n, bool)
        member[members] = True
        inside = np.nonzero(member[u] & member[v])[0]
        rows.append(np.full(inside.size, n + c))
        cols.append(inside)
    r, ci = np.concatenate(rows), np.concatenate(cols)
    upper = np.concatenate([np.ones(n), [(s.size - 1) / 2 for s in cut_sets]])
    model = LinearModel(
        cost=w[u, v],
        matrix=sp.csc_matrix((np.ones(r.size), (r, ci)), shape=(upper.size, k)),
        row_lower=np.full(upper.size, -INFINITY),
        row_upper=upper,
        col_lower=np.zeros(k),
        col_upper=np.ones(k),
        integer=np.ones(k, bool),
        maximize=True,
    )
    result = solve_highs(
        model, HighsSettings(mip_rel_gap=1e-9, mip_abs_gap=1e-12, threads=threads), deadline
    )
    if not result.has_solution:
        return None
    return result.x > 0.5, result.bound, result.status
