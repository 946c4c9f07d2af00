"""Free devices of one accelerator type, per node, for policies that hand out whole gangs one at
a time (Themis leases, Gandiva_fair quanta, Astraea leases).

A gang of `need` devices goes (1) on the nodes it held before, if they still have room for all
of it (no migration); else (2) on the single node with the fewest free devices that holds it
(best fit, keeps large holes for large gangs); else (3) on whole nodes in decreasing free
devices, as few as possible. Without a node layout the type is one pool and placements name
no node.
"""

from __future__ import annotations

import heapq

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
        self._by_free: dict[int, list[int]] | None = None

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
            best = self._best_fit(need)
            if best is not None:
                taken = self._take_from([best], need)
            elif not single_node:
                taken = self._take_largest(need)
        if taken is not None:
            self.pool -= need
        return taken

    def take_exactly(self, node_devices: tuple[tuple[int, int], ...]) -> tuple[int, ...]:
        """Take the given (node, devices) pairs (the caller checked that they fit)."""
        for k, devices in node_devices:
            self._set(k, self.free[k] - devices)
            self.pool -= devices
        return tuple(k for k, _ in node_devices)

    def _index(self) -> dict[int, list[int]]:
        """Nodes by free devices (a heap of node indices per count, with stale entries that
        `_lowest` drops): a gang's node is found without scanning every node of the type."""
        if self._by_free is None:
            self._by_free = {}
            for k in self.nodes:
                self._by_free.setdefault(self.free[k], []).append(k)
            for heap in self._by_free.values():
                heapq.heapify(heap)
        return self._by_free

    def _set(self, k: int, free: int) -> None:
        self.free[k] = free
        if self._by_free is not None:
            heapq.heappush(self._by_free.setdefault(free, []), k)

    def _lowest(self, count: int) -> int | None:
        """The lowest-index node with exactly `count` free devices, if any."""
        heap = self._index().get(count)
        while heap:
            if self.free[heap[0]] == count:
                return heap[0]
            heapq.heappop(heap)
        return None

    def _best_fit(self, need: int) -> int | None:
        """The node with the fewest free devices >= `need` (ties: lowest index)."""
        for count in sorted(c for c in self._index() if c >= need):
            k = self._lowest(count)
            if k is not None:
                return k
        return None

    def _take_largest(self, need: int) -> tuple[int, ...]:
        """`need` devices from nodes in decreasing free devices (ties: lowest index)."""
        taken: list[int] = []
        for count in sorted((c for c in self._index() if c > 0), reverse=True):
            while need > 0:
                k = self._lowest(count)
                if k is None:
                    break
                use = min(count, need)
                self._set(k, count - use)
                need -= use
                taken.append(k)
            if need == 0:
                break
        return tuple(taken)

    def _take_from(self, order: list[int], need: int) -> tuple[int, ...]:
        taken: list[int] = []
        for k in order:
            if need == 0:
                break
            use = min(self.free[k], need)
            if use:
                self._set(k, self.free[k] - use)
                need -= use
                taken.append(k)
        return tuple(taken)

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
