"""Free devices of one accelerator type, per node, for policies that hand out whole gangs one at
a time (Themis leases, Gandiva_fair quanta, Astraea leases).

A gang of `need` devices goes (1) on the nodes it held before, if they still have room for all
of it (no migration); else (2) on the single node with the fewest free devices that holds it
(best fit, keeps large holes for large gangs); else (3) on whole nodes in decreasing free
devices, as few as possible. Without a node layout the type is one pool and placements name
no node. The nodes are also kept sorted by (free devices, index), so the best fit is a
bisection instead of a scan of every node (a quantum of 100,000 jobs on 9,375 nodes took
seconds).
"""

from __future__ import annotations

from bisect import bisect_left, insort

import numpy as np
from numpy.typing import NDArray

from apportion.solver.model import Problem


class NodePool:
    """Free devices per node of one type (`nodes` = node indices of the type)."""

    def __init__(self, nodes: list[int], free: list[int], total: int) -> None:
        self.nodes = list(nodes)
        self.free = {k: int(f) for k, f in zip(nodes, free, strict=True)}
        self.size = dict(self.free)
        """Free devices of each node when the pool was made."""
        self.pool = int(total)
        """Free devices of the type (the sum of `free` when nodes are known)."""
        self._by_free = sorted((f, k) for k, f in self.free.items())
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
    free_type = cluster.count.astype(np.int64).copy()
    node_free = cluster.node_devices.astype(np.int64).copy()
    running = hist.running(m)
    for i in np.flatnonzero(holding & running):
        j = int(hist.current_type[i])
        devices = int(hist.current_devices[i]) or int(problem.jobs.scale_factor[i])
        free_type[j] -= devices
        held_nodes = hist.current_nodes[i]
        for k in held_nodes:
            use = min(int(node_free[k]), devices)
            node_free[k] -= use
            devices -= use
    pools = []
    for j in range(n):
        nodes = [int(k) for k in np.flatnonzero(cluster.node_type == j)] if cluster.node_names \
            else []
        free = [int(node_free[k]) for k in nodes]
        total = int(max(free_type[j], 0))
        pools.append(NodePool(nodes, free, min(total, sum(free)) if nodes else total))
    return pools
