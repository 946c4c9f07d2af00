"""Sia's configuration set (A5.2, docs/policies/sia.md) and the placement of chosen configurations
on concrete nodes (A5.6). Pure Python/numpy; devices are GPUs.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from apportion.solver.model import Cluster, IntArray


@dataclass(frozen=True)
class Configuration:
    """c = (type, nodes n_c, GPUs g_c)."""

    type_index: int
    nodes: int
    devices: int


@dataclass(frozen=True)
class NodeLayout:
    """Nodes of the cluster: real ones, or one virtual node per type holding all its GPUs when
    the snapshot gives no node layout."""

    node_type: IntArray
    """(nodes,) type index."""
    node_devices: IntArray
    """(nodes,) GPUs per node."""
    names: tuple[str, ...]
    """Node names ("" for virtual nodes)."""

    def gpus_per_node(self, type_index: int) -> int:
        """G_t: the largest node of the type (0 when the type has no node)."""
        sizes = self.node_devices[self.node_type == type_index]
        return int(sizes.max()) if sizes.size else 0

    def full_nodes(self, type_index: int) -> int:
        """Nodes of the type holding G_t GPUs (the ones multi-node shapes can use)."""
        g = self.gpus_per_node(type_index)
        return int(((self.node_type == type_index) & (self.node_devices == g)).sum()) if g else 0


def node_layout(cluster: Cluster) -> NodeLayout:
    """The cluster's nodes (types without any node get one virtual node holding `count`)."""
    types = list(cluster.node_type.tolist())
    devices = list(cluster.node_devices.tolist())
    names = list(cluster.node_names)
    for t in range(cluster.num_types):
        if t not in types and cluster.count[t] > 0:
            types.append(t)
            devices.append(int(cluster.count[t]))
            names.append("")
    return NodeLayout(np.asarray(types, np.int64), np.asarray(devices, np.int64), tuple(names))


SIA_MAX_PROFILED_NODES: Mapping[str, int] = {
    "aws": 16,
    "dgx-ext": 2,
    "rtx": 3,
    "azure": 5,
    "quad": 1,
}
"""Sia's `cluster_max_physical_nnodes` (A5.2, docs/policies/sia.md): the largest node count profiled
per GPU type in Sia's per-type profiles (T2.3, docs/datasets.md), by Sia's type names. Multi-node
configurations beyond it are dropped (nodes)."""


def node_caps(type_names: Sequence[str], caps: Mapping[str, int]) -> tuple[int, ...]:
    """Per type index, the node cap `caps[name]` (0 = no cap for names not in `caps`)."""
    return tuple(max(int(caps.get(name, 0)), 0) for name in type_names)


def configuration_set(
    layout: NodeLayout,
    num_types: int,
    max_gpus: int = 64,
    max_nodes: int = 0,
    max_nodes_per_type: Sequence[int] = (),
) -> tuple[Configuration, ...]:
    """Per type: powers of two up to G_t on one node, then whole nodes (k, k*G_t) for
    k = 2..full nodes, every shape capped at `max_gpus` GPUs, `max_nodes` nodes and, per type t,
    `max_nodes_per_type[t]` nodes (A5.2: n_c <= min(nodes of t, cap of t); 0 or a missing
    entry = no cap; a cap never removes single-node shapes). Ordered by type, then GPUs.

    With Sia's caps (`SIA_MAX_PROFILED_NODES`) on Sia's clusters this gives Sia's counts:
    19 configurations at 64 GPUs and 29 at 2,048 GPUs (64-GPU cap)."""
    out: list[Configuration] = []
    for t in range(num_types):
        g = layout.gpus_per_node(t)
        size = 1
        while 0 < size <= min(g, max_gpus):
            out.append(Configuration(t, 1, size))
            size *= 2
        cap = int(max_nodes_per_type[t]) if t < len(max_nodes_per_type) else 0
        k = 2
        while (
            k <= layout.full_nodes(t)
            and k * g <= max_gpus
            and (max_nodes <= 0 or k <= max_nodes)
            and (cap <= 0 or k <= cap)
        ):
            out.append(Configuration(t, k, k * g))
            k += 1
    return tuple(out)


@dataclass(frozen=True)
class PlacementResult:
    """Where each chosen configuration landed."""

    nodes: tuple[tuple[tuple[int, int], ...], ...]
    """Per job, (node index, GPUs on it) pairs; empty for unallocated or failed jobs."""
    failed: tuple[int, ...]
    """Jobs whose chosen configuration could not be placed."""
    fell_back: bool = False
    """True when preferring previous nodes made placement fail, so that jobs keeping their
    configuration were placed again without that preference (they may move nodes)."""


class _TypeNodes:
    """Free GPUs of one type's nodes, kept sorted by (free GPUs, node index) as well, so that
    the best fit is a bisection instead of a scan of every node."""

    # Not `node_pool.NodePool`, whose rule differs (A5.6 here): a multi-node shape takes whole
    # free nodes of its per-node size (NodePool spreads a gang over the largest nodes), and a
    # previous node is preferred among those that fit (NodePool keeps a gang on its previous
    # nodes only when they hold all of it).

    def __init__(self, nodes: list[int], free: list[int], size: list[int]) -> None:
        self.free = dict(zip(nodes, free, strict=True))
        self.size = dict(zip(nodes, size, strict=True))
        self.by_free = sorted(zip(free, nodes, strict=True))

    def use(self, node: int, devices: int) -> None:
        old = self.free[node]
        del self.by_free[bisect_left(self.by_free, (old, node))]
        self.free[node] = old - devices
        insort(self.by_free, (old - devices, node))

    def best_fit(self, devices: int, previous: list[int]) -> int | None:
        """The node with the fewest free GPUs (then the lowest index) holding `devices`, among
        the `previous` nodes first."""
        held = [(self.free[v], v) for v in previous if self.free[v] >= devices]
        if held:
            return min(held)[1]
        at = bisect_left(self.by_free, (devices, -1))
        return self.by_free[at][1] if at < len(self.by_free) else None

    def fill(self, devices: int, count: int) -> list[int]:
        """Nodes for up to `count` jobs of `devices` GPUs each, placed one after another by
        best fit without previous nodes (fewer when they do not all fit). The node a job
        takes keeps fewer free GPUs than every other node holding one, so the next takes it
        too until it is full: the nodes that hold one are filled in (free GPUs, index) order."""
        at = bisect_left(self.by_free, (devices, -1))
        taken: list[tuple[int, int]] = []  # (node, jobs)
        left = count
        while left and at < len(self.by_free):
            free, node = self.by_free[at]
            jobs = min(free // devices, left)
            taken.append((node, jobs))
            left -= jobs
            at += 1
        nodes: list[int] = []
        for node, jobs in taken:
            self.use(node, jobs * devices)
            nodes.extend([node] * jobs)
        return nodes

    def whole(self, count: int, per: int, previous: list[int]) -> list[int] | None:
        """`count` whole free nodes of `per` GPUs: the `previous` ones, then by index."""
        mine = sorted(v for v in set(previous) if self.free[v] == self.size[v] == per)
        picked = mine[:count]
        at = bisect_left(self.by_free, (per, -1))
        chosen = set(picked)
        while len(picked) < count and at < len(self.by_free) and self.by_free[at][0] == per:
            v = self.by_free[at][1]
            if self.size[v] == per and v not in chosen:
                picked.append(v)
            at += 1
        return picked if len(picked) == count else None


def _place(
    layout: NodeLayout,
    configs: tuple[Configuration, ...],
    choice: IntArray,
    previous: tuple[tuple[int, ...], ...],
    keep: np.ndarray,
    free_devices: IntArray | None = None,
) -> PlacementResult:
    free = (layout.node_devices if free_devices is None else free_devices).astype(np.int64)
    result: list[tuple[tuple[int, int], ...]] = [()] * len(choice)
    failed: list[int] = []
    chosen = np.flatnonzero(np.asarray(choice) >= 0)
    c_nodes = np.array([c.nodes for c in configs] or [0], np.int64)
    c_devices = np.array([c.devices for c in configs] or [0], np.int64)
    c_type = np.array([c.type_index for c in configs] or [0], np.int64)
    picked = np.asarray(choice)[chosen]
    # largest configurations first, then the most nodes, jobs keeping theirs, the job's index
    order = chosen[np.lexsort((chosen, ~np.asarray(keep, bool)[chosen], -c_nodes[picked],
                               -c_devices[picked]))]
    rank = np.empty(len(choice), np.int64)
    rank[order] = np.arange(order.size)  # to report failures in that order
    # each type's nodes are their own pool: type by type, so that the jobs of one
    # single-node configuration without previous nodes to prefer come in one run
    order = order[np.argsort(c_type[np.asarray(choice)[order]], kind="stable")]
    pools: dict[int, _TypeNodes] = {}
    node_type, free_list, size_list = layout.node_type, free.tolist(), layout.node_devices.tolist()
    choice_list, keep_list = np.asarray(choice).tolist(), np.asarray(keep, bool).tolist()
    type_list, nodes_list = c_type.tolist(), c_nodes.tolist()
    devices_list, jobs = c_devices.tolist(), order.tolist()
    at = 0
    while at < len(jobs):
        i = jobs[at]
        c = choice_list[i]
        t, nodes, devices = type_list[c], nodes_list[c], devices_list[c]
        pool = pools.get(t)
        if pool is None:
            of_type = np.flatnonzero(node_type == t).tolist()
            pool = pools[t] = _TypeNodes(of_type, [free_list[v] for v in of_type],
                                         [size_list[v] for v in of_type])
        if nodes == 1 and not keep_list[i]:
            end = at + 1
            while end < len(jobs) and choice_list[jobs[end]] == c and not keep_list[jobs[end]]:
                end += 1
            run = jobs[at:end]
            spots = pool.fill(devices, len(run))
            for job, node in zip(run, spots, strict=False):
                result[job] = ((node, devices),)
            failed.extend(run[len(spots):])
            at = end
            continue
        at += 1
        prev = [v for v in previous[i] if v in pool.free] if keep_list[i] else []
        if nodes > 1:
            per = devices // nodes
            whole = pool.whole(nodes, per, prev)
            if whole is None:
                failed.append(i)
                continue
            for v in whole:
                pool.use(v, pool.free[v])
            result[i] = tuple((v, per) for v in whole)
        else:
            best = pool.best_fit(devices, prev)
            if best is None:
                failed.append(i)
                continue
            pool.use(best, devices)
            result[i] = ((best, devices),)
    failed.sort(key=rank.__getitem__)
    return PlacementResult(tuple(result), tuple(failed))


def place(
    layout: NodeLayout,
    configs: tuple[Configuration, ...],
    choice: IntArray,
    previous: tuple[tuple[int, ...], ...] = (),
    current: IntArray | None = None,
    free_devices: IntArray | None = None,
) -> PlacementResult:
    """Best-fit decreasing (A5.6): largest configurations first; multi-node ones take whole
    free nodes, single-node ones the node with the fewest free GPUs that fits. Jobs keeping
    their current configuration prefer their previous nodes; if that preference makes any
    placement fail, everything is placed again without it (which always succeeds when the
    per-type totals fit and node sizes are equal powers of two). `free_devices`: (nodes,) free
    GPUs to start from (default every GPU of every node)."""
    m = len(choice)
    prev = previous if len(previous) == m else ((),) * m
    cur = np.full(m, -1, np.int64) if current is None or len(current) != m else current
    keep = (
        (np.asarray(choice) >= 0)
        & (np.asarray(choice) == cur)
        & np.asarray([len(p) > 0 for p in prev], dtype=bool)
    )
    first = _place(layout, configs, np.asarray(choice), prev, keep, free_devices)
    if not first.failed or not keep.any():
        return first
    second = _place(layout, configs, np.asarray(choice), prev, np.zeros(m, dtype=bool),
                    free_devices)
    return PlacementResult(second.nodes, second.failed, fell_back=True)
