"""Free devices while a greedy placer works through its demands (shared by the seed of the
exact placer and the compat placers)."""

from __future__ import annotations

import numpy as np

from apportion.formulations.placement.instance import PlacementInstance
from apportion.solver.model import IntArray


class FreeState:
    """Which devices are still free, and which nodes an exclusive demand holds."""

    def __init__(self, instance: PlacementInstance) -> None:
        self.instance = instance
        self.topology = instance.topology
        self.avail = instance.free.copy()
        nodes = len(self.topology.node_domain)
        self.node_users = np.zeros(nodes, np.int64)
        """Demands holding devices on each node."""
        self.exclusive_node = np.zeros(nodes, dtype=bool)
        """Nodes held by an exclusive demand."""
        self.class_free = instance.eligible_node_free[
            [int(np.flatnonzero(instance.signature == c)[0])
             for c in range(len(instance.class_eligible))]
        ].copy() if instance.num_demands else np.zeros((0, nodes), np.int64)
        """(classes, nodes) free devices each eligibility class may use per node."""

    def _count(self, devices: list[int] | np.ndarray, sign: int) -> None:
        """Update the per-class node counts for devices taken (-1) or released (+1)."""
        index = np.asarray(devices, np.int64)
        nodes = self.topology.device_node[index]
        for c, ok in enumerate(self.instance.class_eligible):
            mine = ok[index]
            if mine.any():
                np.add.at(self.class_free[c], nodes[mine], sign)

    def node_avail(self, r: int) -> IntArray:
        """(nodes,) free devices demand r may use on each node (0 on nodes it may not share)."""
        c = int(self.instance.signature[r])
        out: IntArray = self.class_free[c].copy()
        out[self.exclusive_node] = 0
        if self.instance.demands[r].exclusive:
            out[self.node_users > 0] = 0
        return out

    def take(self, r: int, node: int, count: int, prefer: tuple[int, ...] = ()) -> tuple[int, ...]:
        """`count` free eligible devices of demand r on `node`: the preferred ones first, then
        the lowest indices. Marks them taken."""
        on_node = self.topology.node_devices[node]
        usable = on_node[self.avail[on_node] & self.instance.eligible[r][on_node]].tolist()
        preferred = set(prefer) & set(usable)
        first = [d for d in prefer if d in preferred]
        rest = [d for d in usable if d not in preferred]
        chosen = (first + rest)[:count]
        if len(chosen) < count:
            raise ValueError(f"node {node} has {len(chosen)} free devices for demand {r}")
        self.avail[chosen] = False
        self._count(chosen, -1)
        self.node_users[node] += 1
        if self.instance.demands[r].exclusive:
            self.exclusive_node[node] = True
        return tuple(chosen)

    def take_devices(self, r: int, devices: tuple[int, ...]) -> tuple[int, ...]:
        """Take exactly these devices (they must be free and eligible)."""
        index = np.asarray(devices, np.int64)
        if not (self.avail[index] & self.instance.eligible[r][index]).all():
            raise ValueError(f"devices of demand {r} are not all free")
        self.avail[index] = False
        self._count(index, -1)
        for v in np.unique(self.topology.device_node[index]).tolist():
            self.node_users[v] += 1
            if self.instance.demands[r].exclusive:
                self.exclusive_node[v] = True
        return tuple(int(d) for d in devices)

    def release(self, devices: tuple[int, ...]) -> None:
        index = np.asarray(devices, np.int64)
        self.avail[index] = True
        self._count(index, +1)
        for v in np.unique(self.topology.device_node[index]).tolist():
            self.node_users[v] -= 1
            self.exclusive_node[v] = False
