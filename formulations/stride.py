"""Gang-aware stride scheduling per quantum (Gandiva_fair, B2).

Every job is a stride client of one type (its home) with tickets tau_i > 0 (devices of its
user's share); its pass advances by s_i / tau_i each quantum it runs (device-quanta per
ticket), so over many quanta with everyone backlogged its device-time is proportional to its
tickets, with an O(1) quantum error per client (stride scheduling's guarantee).

Each quantum, for each type (in decreasing total throughput, Gavel's order): the type's own
clients in increasing pass (ties: job index) are placed while they fit, gang-aware: a job
that fits in one node (s_i <= the largest node of the type) gets all its devices on one
node, a larger one takes whole nodes (the central scheduler's reservation); a job that does
not fit is skipped and smaller ones behind it still run. Then every type with devices left
takes, in increasing pass, any job not yet running this quantum that can use the type and
fits (redistribution of unused share: no device idles while a job that could run there
waits); such a job is charged on its own pass as usual.

Gandiva_fair splits this scheduler across servers (one per server for small jobs, a central
one for large ones) for scale, with a load balancer keeping tickets per device even; we keep
one pass order per type, which is the schedule that split aims at, and place each chosen gang
on nodes as the split would (small jobs on one server; a job stays on the nodes it used in
the previous quantum when they have room, so migrations are rare, and they are counted).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from apportion.formulations.node_pool import NodePool, node_pools
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import FloatArray, IntArray, Problem
from apportion.solver.result import RoundGrant, ScheduledRound

CHECK_EVERY = 2048
"""Gangs placed between two looks at the deadline within a quantum."""
RESPONSE_S_PER_GRANT = 3e-6
"""Time (s) a planned quantum costs after the schedule per grant (building and sending the
response's rounds): a quantum is started only when the time left covers the last quantum's
own time and this for its grants."""


@dataclass(frozen=True)
class StrideSchedule:
    rounds: tuple[ScheduledRound, ...]
    """One entry per quantum planned."""
    ran: FloatArray
    """(m, n) quanta each job ran on each type."""
    final_pass: FloatArray
    """(m,) passes after the planned quanta."""
    migrations: int
    """Times a job ran on other nodes (or another type) than in its previous quantum."""
    partial: bool = False
    """The deadline passed within the first quantum: it holds only the gangs placed before
    (feasible, but not work-conserving)."""


def initial_passes(passes: FloatArray, home: IntArray, clients: NDArray[np.bool_]) -> FloatArray:
    """A client without a pass (NaN) joins at the smallest pass of its type's clients (0 if
    none has one), so it neither starves nor monopolizes the type."""
    out = np.array(passes, dtype=np.float64)
    for j in np.unique(home[clients]):
        on = clients & (home == j)
        known = on & ~np.isnan(out)
        start = float(out[known].min()) if known.any() else 0.0
        out[on & np.isnan(out)] = start
    out[~clients] = np.nan
    return out


def _place(
    i: int,
    j: int,
    pool: NodePool,
    gang: int,
    largest: int,
    previous: tuple[IntArray, list[tuple[int, ...]]],
    placed: dict[int, tuple[int, tuple[int, ...]]],
) -> None:
    """Place job i's gang on type j if it fits (one node when it fits in one; its previous
    nodes when they still have room), recording it in `placed`."""
    last_type, last_nodes = previous
    before = last_nodes[i] if last_type[i] == j else ()
    taken = pool.take(gang, before, single_node=gang <= largest)
    if taken is not None:
        placed[i] = (j, taken)


def stride_schedule(
    problem: Problem,
    tickets: FloatArray,
    home: IntArray,
    passes: FloatArray,
    quanta: int,
    deadline: Deadline = NO_DEADLINE,
) -> StrideSchedule:
    """Plan `quanta` quanta (module docstring). `tickets` (m,) > 0 for clients (0 = not a
    client), `home` (m,) the client's type, `passes` (m,) (NaN = new client). Stops early once
    `deadline` has passed or the time left would not cover another quantum: the quanta
    planned so far are kept, and a first quantum cut short keeps the gangs placed in it
    (`partial`)."""
    jobs, cluster, hist = problem.jobs, problem.cluster, problem.history
    m, n = jobs.num_jobs, cluster.num_types
    s = jobs.scale_factor.astype(np.int64)
    sizes = s.tolist()
    clients = tickets > 0
    current = initial_passes(passes, home, clients)
    stride = np.divide(s, tickets, out=np.zeros(m), where=clients)
    usable = problem.usable
    empty = node_pools(problem, np.zeros(m, bool))
    largest = [pool.largest_node for pool in empty]
    order = np.argsort(-jobs.throughput.sum(axis=0), kind="stable").tolist()
    names = cluster.node_names
    running = hist.running(m)
    last_type = np.where(running, hist.current_type, -1)
    last_nodes: list[tuple[int, ...]] = list(hist.current_nodes)
    ran = np.zeros((m, n))
    rounds: list[ScheduledRound] = []
    migrations = 0
    partial = False
    own = [np.flatnonzero(clients & (home == j)) for j in range(n)]
    client_index = np.flatnonzero(clients)
    quantum_s = 0.0
    for q in range(quanta):
        if q > 0 and (deadline.expired() or deadline.remaining()
                      < quantum_s + RESPONSE_S_PER_GRANT * len(rounds[-1].grants)):
            break
        started = time.perf_counter()
        pools = [pool.copy() for pool in empty]
        placed: dict[int, tuple[int, tuple[int, ...]]] = {}
        previous = (last_type, last_nodes)
        looks = _Looks(deadline)
        for j in order:
            for i in own[j][np.lexsort((own[j], current[own[j]]))].tolist():
                if looks.expired():
                    break
                _place(i, j, pools[j], sizes[i], largest[j], previous, placed)
        waiting = client_index[~np.isin(client_index, list(placed))]
        waiting = waiting[np.lexsort((waiting, current[waiting]))]
        for j in order:
            pool = pools[j]
            for i in waiting[usable[waiting, j]].tolist():
                if pool.pool <= 0 or looks.expired():
                    break
                if i not in placed and sizes[i] <= pool.pool:
                    _place(i, j, pool, sizes[i], largest[j], previous, placed)
        if looks.cut and q > 0:  # the complete quanta are the plan
            break
        grants = []
        this_type = np.full(m, -1)
        this_nodes: list[tuple[int, ...]] = [()] * m
        for i, (j, nodes) in sorted(placed.items()):
            same = last_type[i] == j and last_nodes[i] == nodes
            if last_type[i] >= 0 and not same and (names or last_type[i] != j):
                migrations += 1
            grants.append(RoundGrant(job=i, type_index=j, devices=sizes[i],
                                     nodes=tuple(names[k] for k in nodes),
                                     lease_extended=bool(names) and same and bool(nodes)))
            ran[i, j] += 1
            current[i] += stride[i]
            this_type[i], this_nodes[i] = j, nodes
        last_type, last_nodes = this_type, this_nodes
        grants.sort(key=lambda g: (g.type_index, g.job))
        rounds.append(ScheduledRound(index=q, grants=tuple(grants)))
        quantum_s = time.perf_counter() - started
        if looks.cut:
            partial = True
            break
    return StrideSchedule(tuple(rounds), ran, current, migrations, partial)


class _Looks:
    """Looks at the deadline once every `CHECK_EVERY` gangs placed (or tried); `cut` once it
    has passed."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.count = 0
        self.cut = False

    def expired(self) -> bool:
        if not self.cut:
            self.count += 1
            if self.count % CHECK_EVERY == 0:
                self.cut = self.deadline.expired()
        return self.cut
