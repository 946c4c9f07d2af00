"""Free devices per accelerator type and node during one round.

Plans that name devices per node (configurations, queues with nodes) reserve exactly those;
plans that name only the nodes of a grant (time-share rounds) spread the grant's devices over
its nodes in order; plans that name no nodes (planning windows, queues on a cluster the
policy saw without nodes) are placed here with the round mechanism's rule: the nodes the job
held in the previous round when they still have room (a lease extension), else the node with
the fewest free devices that holds it whole (best fit), else whole nodes in decreasing free
devices (as few as possible). Without a node layout only the per-type counts are kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from apportion.simulator.plans import NodeDevices
from apportion.solver.model import Cluster


class DevicePool:
    """What is still free in a round."""

    def __init__(self, cluster: Cluster) -> None:
        self.free_type = cluster.count.astype(np.int64).copy()
        self.node_type = cluster.node_type
        self.free_node = cluster.node_devices.astype(np.int64).copy()
        self.has_nodes = bool(cluster.node_names)

    def nodes_of(self, type_index: int) -> list[int]:
        return [int(k) for k in np.flatnonzero(self.node_type == type_index)]

    def reserve(self, type_index: int, devices: int, nodes: NodeDevices) -> str:
        """Take `devices` of the type on `nodes` ((node, devices) pairs; empty = the type's
        count only). Returns "" or why it does not fit (nothing is taken then)."""
        if devices > self.free_type[type_index]:
            return f"{devices} devices of type {type_index}, {self.free_type[type_index]} free"
        if self.has_nodes:
            if sum(d for _, d in nodes) != devices:
                return f"nodes {nodes} do not hold {devices} devices"
            for node, d in nodes:
                if self.node_type[node] != type_index:
                    return f"node {node} is of another type"
                if d > self.free_node[node]:
                    return f"{d} devices on node {node}, {self.free_node[node]} free"
            for node, d in nodes:
                self.free_node[node] -= d
        self.free_type[type_index] -= devices
        return ""

    def spread(self, type_index: int, devices: int, nodes: Sequence[int]) -> NodeDevices | None:
        """`devices` over the listed nodes in order (as many as each has free); None when
        they cannot hold them (no node layout: () when the type has room)."""
        if not self.has_nodes:
            return () if devices <= self.free_type[type_index] else None
        out: list[tuple[int, int]] = []
        left = devices
        for node in nodes:
            use = min(int(self.free_node[node]), left)
            if use > 0:
                out.append((node, use))
                left -= use
        return tuple(out) if left == 0 else None

    def choose(
        self, type_index: int, devices: int, previous: NodeDevices = ()
    ) -> NodeDevices | None:
        """Nodes for `devices` of the type (module docstring); None when they do not fit."""
        if devices > self.free_type[type_index]:
            return None
        if not self.has_nodes:
            return ()
        fits = previous and all(self.free_node[k] >= d for k, d in previous)
        if fits and sum(d for _, d in previous) == devices:
            return previous
        candidates = self.nodes_of(type_index)
        whole = [k for k in candidates if self.free_node[k] >= devices]
        if whole:
            best = min(whole, key=lambda k: (int(self.free_node[k]), k))
            return ((best, devices),)
        out: list[tuple[int, int]] = []
        left = devices
        for k in sorted(candidates, key=lambda k: (-int(self.free_node[k]), k)):
            if left == 0:
                break
            use = min(int(self.free_node[k]), left)
            if use:
                out.append((k, use))
                left -= use
        return tuple(sorted(out)) if left == 0 else None
