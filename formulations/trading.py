"""Gandiva_fair's heterogeneity trading (B2), greedy and exact.

Users u hold shares A[u, j] of each type j (devices, time-averaged). A user's rate on type j,
`rate[u, j]`, is its throughput per device there in its own units (Gandiva_fair profiles it per
job; `gandiva_fair` uses the mean over the user's jobs of T[i,j] / max_k T[i,k]), so its
throughput is thr_u(A) = sum_j rate[u, j] A[u, j]. For a fast type F and a slow type S the
user's speedup is sigma_u = rate[u, F] / rate[u, S].

**Greedy trades.** Repeatedly, over all ordered type pairs (F, S), take the buyer u with the
largest sigma_u among users holding S share and the seller v != u with the smallest sigma_v
among users holding F share; if sigma_u > sigma_v the buyer gets x devices of F from the
seller for P x devices of S, P = sigma_v + theta (sigma_u - sigma_v) (theta in (0, 1), our
choice of the price the paper leaves open), with x as large as the holdings and the users'
demand caps allow. Both gain in their own units: the seller x rate[v,S] (P - sigma_v) > 0,
the buyer x rate[u,S] (sigma_u - P) > 0 [derived], so every trade is individually rational
and no user ends below its pre-trade throughput. The most profitable pair (largest
sigma_u / sigma_v) trades first; it stops when no profitable pair can trade (the fixed point
of B2 test 5) or after `MAX_TRADE_ROUNDS` trades. A heuristic.

**Exact trading (LP).** maximize sum_u thr_u(Y) s.t. thr_u(Y) >= thr_u(A) for every u,
sum_u Y[u, j] <= W[j], sum_j Y[u, j] <= d_u (demand cap), Y >= 0 on the cells a user can use.
Solved with HiGHS; the bound is the Lagrangian value of its duals (weak duality), so the
greedy trades' gap to the best trade-based reallocation is proven.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from apportion.formulations.gavel_lp import lagrangian_bound
from apportion.solver.backends.lp import solve_lp
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.fairness_result import Trade
from apportion.solver.model import FloatArray, SolverPreference
from apportion.solver.result import ModelSize

EPS = 1e-9
"""Shares and trade amounts below this (devices) count as 0."""
PAIR_CANDIDATES = 4
"""Buyers and sellers considered per type pair (the highest and lowest speedups)."""
MAX_TRADE_ROUNDS = 100_000
"""Most greedy trades (each one exhausts a holding or a demand cap, so far fewer are made)."""


@dataclass(frozen=True)
class GreedyTrades:
    share: FloatArray
    """(U, n) shares after trading (devices)."""
    trades: tuple[Trade, ...]
    throughput: FloatArray
    """(U,) sum_j rate * share after trading."""
    complete: bool
    """Stopped at the fixed point (not at the round cap or the deadline)."""


@dataclass(frozen=True)
class ExactTrading:
    share: FloatArray
    """(U, n) the LP's shares, repaired onto capacity and demand caps."""
    objective: float
    """sum_u thr_u of `share`."""
    bound: float
    """Proven upper bound on the LP optimum."""
    status: SolverStatus
    violation: float
    """Largest shortfall of a user below its pre-trade throughput after the repair."""
    solve_time_s: float
    size: ModelSize
    solver: str
    solver_version: str


def speedups(rate: FloatArray, fast: int, slow: int) -> FloatArray:
    """(U,) sigma_u = rate[u, fast] / rate[u, slow]; NaN where rate[u, slow] = 0."""
    num, den = rate[:, fast], rate[:, slow]
    return np.asarray(np.divide(num, den, out=np.full(num.shape, np.nan), where=den > 0))


def _pair(
    share: FloatArray,
    rate: FloatArray,
    room: FloatArray,
    fast: int,
    slow: int,
    blocked: set[tuple[int, int, int, int]],
) -> tuple[int, int, float, float] | None:
    """(buyer, seller, sigma_buyer, sigma_seller) of the most profitable trade of `fast` for
    `slow` that is not `blocked`: among the few highest-speedup buyers (holding slow share)
    and lowest-speedup sellers (holding fast share). A seller ends with more devices when the
    price is above 1, a buyer when it is below: users without demand room are left out on the
    side where that happens (sigma >= 1 sellers, sigma <= 1 buyers)."""
    sigma = speedups(rate, fast, slow)
    ok = ~np.isnan(sigma)
    has_room = room > EPS
    buyers = np.flatnonzero(ok & (share[:, slow] > EPS) & (rate[:, fast] > 0)
                            & (has_room | (sigma > 1)))
    sellers = np.flatnonzero(ok & (share[:, fast] > EPS) & (has_room | (sigma < 1)))
    if buyers.size == 0 or sellers.size == 0:
        return None
    top = buyers[np.lexsort((buyers, -sigma[buyers]))][:PAIR_CANDIDATES]
    bottom = sellers[np.lexsort((sellers, sigma[sellers]))][:PAIR_CANDIDATES]
    best: tuple[int, int, float, float] | None = None
    for u in top:
        for v in bottom:
            if u == v or (int(u), int(v), fast, slow) in blocked:
                continue
            if sigma[u] > sigma[v] * (1 + 1e-9) and (
                best is None or sigma[u] / sigma[v] > best[2] / best[3]
            ):
                best = (int(u), int(v), float(sigma[u]), float(sigma[v]))
    return best


def greedy_trades(
    share: FloatArray,
    rate: FloatArray,
    demand: FloatArray,
    theta: float = 0.5,
    deadline: Deadline = NO_DEADLINE,
) -> GreedyTrades:
    """Gandiva_fair's trades (module docstring) from shares (U, n), rates (U, n) and demand
    caps (U,) (devices a user can use at once)."""
    A = np.array(share, dtype=np.float64)
    n = A.shape[1]
    trades: list[Trade] = []
    blocked: set[tuple[int, int, int, int]] = set()
    complete = True
    while True:
        if len(trades) >= MAX_TRADE_ROUNDS or deadline.expired():
            complete = False
            break
        total = A.sum(axis=1)
        room = demand - total
        options = []
        for fast in range(n):
            for slow in range(n):
                if fast == slow:
                    continue
                found = _pair(A, rate, room, fast, slow, blocked)
                if found is not None:
                    options.append((found[2] / found[3], fast, slow, found))
        if not options:
            break
        options.sort(key=lambda o: (-o[0], o[1], o[2]))
        _, fast, slow, (u, v, s_u, s_v) = options[0]
        price = s_v + theta * (s_u - s_v)
        x = min(A[v, fast], A[u, slow] / price)
        if price > 1:  # the seller ends with more devices than it gave
            x = min(x, (demand[v] - total[v]) / (price - 1.0))
        elif price < 1:
            x = min(x, (demand[u] - total[u]) / (1.0 - price))
        if x <= EPS:
            blocked.add((u, v, fast, slow))
            continue
        A[v, fast] -= x
        A[u, fast] += x
        A[u, slow] -= price * x
        A[v, slow] += price * x
        A[np.abs(A) < EPS] = 0.0
        trades.append(Trade(u, v, fast, slow, float(x), float(price)))
    return GreedyTrades(A, tuple(trades), np.einsum("uj,uj->u", rate, A), complete)


def exact_trading(
    share: FloatArray,
    rate: FloatArray,
    demand: FloatArray,
    capacity: FloatArray,
    deadline: Deadline = NO_DEADLINE,
    threads: int = 0,
) -> ExactTrading:
    """The trading LP (module docstring), HiGHS simplex, with a weak-duality bound."""
    started = time.perf_counter()
    U, n = share.shape
    pre = np.einsum("uj,uj->u", rate, share)
    users, types = np.nonzero(rate > 0)
    k = users.size
    cells = np.arange(k)
    rows = np.concatenate([users, U + types, U + n + users])
    cols = np.concatenate([cells, cells, cells])
    vals = np.concatenate([-rate[users, types], np.ones(k), np.ones(k)])
    a_matrix = sp.csc_matrix((vals, (rows, cols)), shape=(U + n + U, k))
    b = np.concatenate([-pre, capacity, demand])
    c = rate[users, types]
    result = solve_lp(c, a_matrix, b, SolverPreference.HIGHS, deadline, threads)
    Y = np.zeros((U, n))
    Y[users, types] = np.clip(result.x[:k], 0.0, None)
    Y /= np.maximum(1.0, Y.sum(axis=1) / np.where(demand > 0, demand, 1.0))[:, None]
    use = Y.sum(axis=0)
    Y *= np.where(use > capacity, capacity / np.where(use > 0, use, 1.0), 1.0)[None, :]
    thr = np.einsum("uj,uj->u", rate, Y)
    upper = np.minimum(capacity[types], demand[users])
    bound = lagrangian_bound(c, a_matrix, b, result.row_dual, upper) if result.solved \
        else float("inf")
    scale = np.maximum(pre, 1e-12)
    violation = float(np.max(np.maximum(pre - thr, 0.0) / scale, initial=0.0))
    if not result.solved:  # no trade is always feasible
        Y, thr = share.copy(), pre
    return ExactTrading(
        share=Y,
        objective=float(thr.sum()),
        bound=bound,
        status=result.status,
        violation=violation,
        solve_time_s=time.perf_counter() - started,
        size=result.size,
        solver=result.solver,
        solver_version=result.solver_version,
    )
