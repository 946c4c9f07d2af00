"""Lyra's capacity reclaiming (EuroSys 2023), B7: the inference cluster asks for
k of the servers it loaned to training back; choose the k loaned servers whose return
preempts the fewest training jobs.

A running job loses the devices it holds on the returned servers. It is preempted when it is
inelastic and loses any device, or elastic and keeps fewer devices than its base demand
(shrinking an elastic job down to its base is free). With slack_i = devices held - base demand
(0 for inelastic jobs), job i is preempted iff its lost devices exceed slack_i.

* `greedy_reclaim`: Lyra's rule, one server at a time, the one adding the fewest preempted
  jobs (ties: fewer devices in use, then the lower node index), costs updated after each pick.
* `exact_reclaim`: the minimum as a MILP (HiGHS):
      minimize sum_i p_i  s.t.  sum_l r_l = k,  sum_l H[i,l] r_l - slack_i <= M_i p_i,
      r, p binary,  M_i = sum_l H[i,l]
  (the problem is NP-hard in general; exact for small sizes, and its bound certifies the
  greedy at any size the deadline allows).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.solver.backends.highs import INFINITY, HighsSettings, LinearModel, solve_highs
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import IntArray
from apportion.solver.result import ModelSize

BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class ReclaimInstance:
    """Running jobs on the loaned servers."""

    held: IntArray
    """(m, L) devices job i holds on loaned server l."""
    slack: IntArray
    """(m,) devices job i can lose without being preempted (0 = inelastic, any loss)."""
    count: int
    """k: servers to give back (0 <= k <= L)."""

    @property
    def num_servers(self) -> int:
        return int(self.held.shape[1])


@dataclass(frozen=True)
class ReclaimResult:
    """Servers chosen and what they cost."""

    chosen: BoolArray
    """(L,) True for the servers given back."""
    preempted: BoolArray
    """(m,) jobs preempted."""
    cost: int
    """Preempted jobs."""
    bound: float | None
    """Proven lower bound on the fewest preempted jobs (None = none)."""
    status: SolverStatus
    method: str
    solver: str = ""
    solver_version: str = ""
    solve_time_s: float = 0.0
    size: ModelSize = field(default_factory=ModelSize)


def preemption(instance: ReclaimInstance, chosen: BoolArray) -> BoolArray:
    """(m,) the jobs preempted when the `chosen` servers are given back."""
    lost = instance.held @ chosen.astype(np.int64)
    return np.asarray(lost > instance.slack)


def greedy_reclaim(instance: ReclaimInstance, deadline: Deadline = NO_DEADLINE) -> ReclaimResult:
    """Lyra's greedy (module docstring). Each server's added cost is kept up to date through
    the sparse job-server holdings (only the jobs on the server just returned change), so a
    pick costs the size of its neighbourhood, not jobs x servers. Past the deadline the rest
    of the k servers are the lowest-index ones still loaned (the answer must name k)."""
    started = time.perf_counter()
    held = sp.csr_matrix(instance.held)
    by_server = held.tocsc()
    slack = instance.slack
    L = instance.num_servers
    chosen = np.zeros(L, dtype=bool)
    lost = np.zeros(held.shape[0], np.int64)
    preempted = np.zeros(held.shape[0], dtype=bool)
    in_use = np.asarray(instance.held.sum(axis=0)).ravel()
    # added[l]: jobs not yet preempted that returning server l would preempt
    rows, cols = held.nonzero()
    added = np.bincount(cols, weights=(held.data > slack[rows]).astype(np.float64),
                        minlength=L).astype(np.int64)

    def contributions(i: int, sign: int) -> None:
        start, stop = held.indptr[i], held.indptr[i + 1]
        servers, amounts = held.indices[start:stop], held.data[start:stop]
        if not preempted[i]:
            np.add.at(added, servers, sign * (lost[i] + amounts > slack[i]).astype(np.int64))

    for _ in range(instance.count):
        open_servers = np.flatnonzero(~chosen)
        if deadline.expired():
            chosen[open_servers[: instance.count - int(chosen.sum())]] = True
            break
        order = np.lexsort((open_servers, in_use[open_servers], added[open_servers]))
        pick = int(open_servers[order[0]])
        chosen[pick] = True
        start, stop = by_server.indptr[pick], by_server.indptr[pick + 1]
        for i, amount in zip(by_server.indices[start:stop].tolist(),
                             by_server.data[start:stop].tolist(), strict=True):
            contributions(i, -1)
            lost[i] += amount
            preempted[i] = lost[i] > slack[i]
            contributions(i, +1)
    preempted = preemption(instance, chosen)
    return ReclaimResult(chosen, preempted, int(preempted.sum()), None, SolverStatus.OPTIMAL,
                         "greedy", solve_time_s=time.perf_counter() - started)


def exact_reclaim(
    instance: ReclaimInstance, deadline: Deadline = NO_DEADLINE, threads: int = 0
) -> ReclaimResult | None:
    """The fewest preempted jobs by MILP (module docstring); None when the solver stops
    without an incumbent (its bound is then unknown to the caller)."""
    held, slack, k = instance.held, instance.slack, instance.count
    touched = np.nonzero(held.sum(axis=1) > 0)[0]
    L, t = instance.num_servers, touched.size
    sub = held[touched]
    big = sub.sum(axis=1).astype(np.float64)
    # columns: r (L), p (t); rows: sum r = k, then per touched job
    coo = sp.coo_matrix(sub)
    rows = np.concatenate([np.zeros(L, np.int64), 1 + coo.row, 1 + np.arange(t)])
    cols = np.concatenate([np.arange(L), coo.col, L + np.arange(t)])
    vals = np.concatenate([np.ones(L), coo.data.astype(np.float64), -big])
    matrix = sp.csc_matrix((vals, (rows, cols)), shape=(1 + t, L + t))
    model = LinearModel(
        cost=np.concatenate([np.zeros(L), np.ones(t)]),
        matrix=matrix,
        row_lower=np.concatenate([[float(k)], np.full(t, -INFINITY)]),
        row_upper=np.concatenate([[float(k)], slack[touched].astype(np.float64)]),
        col_lower=np.zeros(L + t),
        col_upper=np.ones(L + t),
        integer=np.ones(L + t, dtype=bool),
    )
    result = solve_highs(model, HighsSettings(mip_rel_gap=0.0, threads=threads), deadline)
    if not result.has_solution:
        return None
    chosen = result.x[:L] > 0.5
    preempted = preemption(instance, chosen)
    cost = int(preempted.sum())
    bound = result.bound if result.bound is not None else None
    if bound is not None:
        bound = max(min(float(np.ceil(bound - 1e-6)), float(cost)), 0.0) + 0.0  # integer costs
    return ReclaimResult(chosen, preempted, cost, bound, result.status, "MILP",
                         result.solver, result.solver_version, result.solve_time_s, result.size)
