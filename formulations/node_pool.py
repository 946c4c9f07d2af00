"""Free devices of one accelerator type, per node, for policies that hand out whole gangs one at
a time (Themis leases, Gandiva_fair quanta, Astraea leases).

A gang of `need` devices goes (1) on the nodes it held before, if they still have room for all
of it (no migration); else (2) on the single node with the fewest free devices that holds it
(best fit, keeps large holes for large gangs); else (3) on whole nodes in decreasing free
devices, as few as possible. Without a node layout the type is one pool and placements name
no node. The nodes are also kept sorted by (free devices, index), so the best fit is a
bisection instead of a scan of every node (a quantum of 100,000 jobs on 9,375 nodes took
seconds).

`take_many` places a sequence of gangs with the same rule, faster: a run of consecutive gangs
of one size without previous nodes is a single walk up that index (the best fit for `need`
devices stays on one node until fewer than `need` are left there, then moves to the next node
in (free devices, index) order), so its cost grows with the nodes it touches, not the gangs.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from apportion.formulations.leases import held_devices
from apportion.solver.model import Problem


class NodePool:
    """Free devices per node of one type (`nodes` = node indices of the type)."""

    def __init__(self, nodes: list[int], free: list[int], total: int) -> None:
        self.nodes = [int(k) for k in nodes]
        free = [int(f) for f in free]
        self.free = dict(zip(self.nodes, free, strict=True))
        self.size = dict(self.free)
        """Free devices of each node when the pool was made."""
        self.pool = int(total)
        """Free devices of the type (the sum of `free` when nodes are known)."""
        self._by_free = sorted(zip(free, self.nodes, strict=True))
        """(free devices, node) of every node, ascending."""

    @property
    def layout(self) -> bool:
        return bool(self.nodes)

    def fits(self, need: int) -> bool:
        return need <= self.pool

    @property
    def largest_node(self) -> int:
        """Devices of the largest node of the type (the pool's total without a layout)."""
        return max(self.size.values(), default=self.pool) if self.layout else self.pool

    def take(
        self, need: int, previous: tuple[int, ...] = (), single_node: bool = False
    ) -> tuple[int, ...] | None:
        """Nodes for a gang of `need` devices (module docstring); None if it does not fit
        (with `single_node`: if no single node holds it). Without a node layout: () when it
        fits."""
        if need > self.pool:
            return None
        if not self.layout:
            self.pool -= need
            return ()
        taken: tuple[int, ...] | None = None
        if previous and all(k in self.free for k in previous) and (
            sum(self.free[k] for k in previous) >= need
            and (not single_node or len(previous) == 1)
        ):
            taken = self._take_from(list(previous), need)
        else:
            best = bisect_left(self._by_free, (need, -1))  # the fewest free that hold it
            if best < len(self._by_free):
                taken = self._take_from([self._by_free[best][1]], need)
            elif not single_node:
                taken = self._take_from(self._largest_first(need), need)
        if taken is not None:
            self.pool -= need
        return taken

    def take_many(
        self, needs: Sequence[int], previous: Sequence[tuple[int, ...]]
    ) -> list[tuple[int, ...] | None]:
        """`take(needs[g], previous[g])` for each gang g in turn (the same placements and the
        same pool after): runs of consecutive gangs of one size without previous nodes are
        placed by `_best_fit_run` (module docstring)."""
        out: list[tuple[int, ...] | None] = []
        count = len(needs)
        g = 0
        while g < count:
            need = needs[g]
            end = g
            while end < count and needs[end] == need and not previous[end]:
                end += 1
            if end == g or need <= 0 or not self.layout:
                out.append(self.take(need, previous[g]))
                g += 1
            else:
                out.extend(self._best_fit_run(need, end - g))
                g = end
        return out

    def _best_fit_run(self, need: int, count: int) -> list[tuple[int, ...] | None]:
        """`count` gangs of `need` (> 0) devices without previous nodes, in turn. While a node
        holds `need`, the best fit is the first node of the index with at least `need` free,
        and it stays the best fit until it has fewer than `need` left (its free devices only
        shrink, below every later node's), so the run walks the index from there, node by
        node; the gangs no single node holds take `take`'s whole-node route."""
        by_free = self._by_free
        start = bisect_left(by_free, (need, -1))
        placeable = min(count, self.pool // need)  # `take` refuses a gang over the pool
        out: list[tuple[int, ...] | None] = []
        moved: list[tuple[int, int]] = []
        stop = start
        while len(out) < placeable and stop < len(by_free):
            free, k = by_free[stop]
            use = min(free // need, placeable - len(out))
            out.extend([(k,)] * use)
            moved.append((free - use * need, k))
            self.free[k] = free - use * need
            stop += 1
        self.pool -= len(out) * need
        del by_free[start:stop]
        if 32 * len(moved) > len(by_free):  # many nodes moved: one merge of two sorted runs
            by_free.extend(sorted(moved))
            by_free.sort()
        else:
            for entry in moved:
                insort(by_free, entry)
        out.extend(self.take(need) for _ in range(count - len(out)))
        return out

    def take_exactly(self, node_devices: tuple[tuple[int, int], ...]) -> tuple[int, ...]:
        """Take the given (node, devices) pairs (the caller checked that they fit)."""
        for k, devices in node_devices:
            self._use(k, devices)
            self.pool -= devices
        return tuple(k for k, _ in node_devices)

    def _take_from(self, order: list[int], need: int) -> tuple[int, ...]:
        taken: list[int] = []
        for k in order:
            if need == 0:
                break
            use = min(self.free[k], need)
            if use:
                self._use(k, use)
                need -= use
                taken.append(k)
        return tuple(taken)

    def _use(self, k: int, devices: int) -> None:
        """Take `devices` of node k's free devices."""
        free = self.free[k]
        del self._by_free[bisect_left(self._by_free, (free, k))]
        insort(self._by_free, (free - devices, k))
        self.free[k] = free - devices

    def _largest_first(self, need: int) -> list[int]:
        """Nodes with free devices in decreasing free devices (ties: index), as many as hold
        `need` (all of them when they do not)."""
        order: list[int] = []
        held = 0
        end = len(self._by_free)
        while held < need and end > 0 and self._by_free[end - 1][0] > 0:
            free = self._by_free[end - 1][0]
            start = bisect_left(self._by_free, (free, -1), 0, end)
            for _, k in self._by_free[start:end]:
                order.append(k)
                held += free
                if held >= need:
                    break
            end = start
        return order

    def copy(self) -> NodePool:
        """A pool with the same free devices (taking from it leaves this one unchanged)."""
        return NodePool(self.nodes, [self.free[k] for k in self.nodes], self.pool)


def node_pools(problem: Problem, holding: NDArray[np.bool_]) -> list[NodePool]:
    """One pool per type: the cluster's devices minus those of the jobs `holding` their
    current placement (`history.current`; a job's devices fill its listed nodes in order; a
    job listing no nodes is taken off the type's total only)."""
    cluster, hist = problem.cluster, problem.history
    n = cluster.num_types
    m = problem.jobs.num_jobs
    holders = np.flatnonzero(holding & hist.running(m))
    devices = held_devices(problem, holders)
    free_type = cluster.count.astype(np.int64) - np.bincount(
        hist.current_type[holders], weights=devices, minlength=n).astype(np.int64)
    node_free = cluster.node_devices.astype(np.int64).tolist()
    current_nodes = hist.current_nodes
    for i, held in zip(holders.tolist(), devices.tolist(), strict=True):
        for k in current_nodes[i]:  # in order, as far as the node has devices left
            use = min(node_free[k], held)
            node_free[k] -= use
            held -= use
    free_of = np.array(node_free, np.int64)
    pools = []
    for j in range(n):
        nodes = np.flatnonzero(cluster.node_type == j) if cluster.node_names else \
            np.zeros(0, np.int64)
        free = free_of[nodes]
        total = int(max(free_type[j], 0))
        pools.append(NodePool(nodes.tolist(), free.tolist(),
                              min(total, int(free.sum())) if nodes.size else total))
    return pools
