"""The device-level model of a cluster: a tree of domains, the devices under it, the links
between devices, and the per-job inputs that placement reads.

Shared by every stage that decides *which devices* a job gets (the placement stage, the
co-location and device-sharing policies, the simulator). Validated objects come from
`apportion.server.topology_inputs` (or `default_topology` for a cluster that lists only
nodes); the formulations may assume every invariant documented here.

Domains form a forest whose levels strictly increase toward the roots (device group < PCIe
switch < socket < node < rack < pod < cluster). Every node of `Cluster.node_names` is one
NODE-level domain; every device belongs to exactly one node and sits under that node's domain
(directly or through domains below the node level). Links join two devices of one node
(NVLink, PCIe peer-to-peer, ...); traffic between nodes uses the domains' uplinks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from apportion.solver.arrays import FloatArray, IntArray

BoolArray = NDArray[np.bool_]


class DomainLevel(IntEnum):
    """Levels of the domain tree, innermost first. A job "crosses" a level when it uses two or
    more domains of that level (e.g. NODE: it spans several nodes)."""

    DEVICE_GROUP = 1
    PCIE_SWITCH = 2
    SOCKET = 3
    NODE = 4
    RACK = 5
    POD = 6
    CLUSTER = 7


LEVELS: tuple[DomainLevel, ...] = tuple(DomainLevel)
"""Every level, innermost first."""


class LinkKind(StrEnum):
    NVLINK = "nvlink"
    PCIE = "pcie"
    SOCKET_INTERCONNECT = "socket_interconnect"
    NVSWITCH = "nvswitch"
    NETWORK = "network"


class CommunicationPattern(StrEnum):
    """How a job's devices talk to each other (decides which device pairs a score counts)."""

    NONE = "none"
    RING_ALLREDUCE = "ring_allreduce"
    ALL_TO_ALL = "all_to_all"
    PARAMETER_SERVER = "parameter_server"
    PIPELINE = "pipeline"


class ServiceClass(StrEnum):
    GUARANTEED = "guaranteed"
    OPPORTUNISTIC = "opportunistic"
    BEST_EFFORT = "best_effort"


@dataclass(frozen=True)
class Topology:
    """Domains, devices and links of a cluster. Indices: domains d, devices k, links e; node
    indices refer to `Cluster.node_names`, type indices to `Cluster.type_names`."""

    domain_names: tuple[str, ...]
    domain_level: IntArray
    """(D,) `DomainLevel` value of each domain."""
    domain_parent: IntArray
    """(D,) parent domain index, -1 for a root; a parent's level is above its child's."""
    domain_uplink_gbps: FloatArray
    """(D,) bandwidth of the link to the parent, per direction (Gb/s); 0 = non-blocking."""
    node_domain: IntArray
    """(nodes,) the NODE-level domain of each cluster node."""
    device_ids: tuple[str, ...]
    """Unique device ids (default "<node>/<index>")."""
    device_node: IntArray
    """(K,) node index of each device."""
    device_index: IntArray
    """(K,) index of the device within its node (0-based, unique per node)."""
    device_domain: IntArray
    """(K,) innermost domain holding the device (its node's domain or one below it)."""
    device_type: IntArray
    """(K,) accelerator type index (the node's type)."""
    device_healthy: BoolArray
    """(K,) False = never placed on."""
    device_memory_gib: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(K,) device memory (GiB, 0 = unknown). Empty = unknown everywhere."""
    link_a: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(E,) first device of each link (a device of the same node as `link_b`)."""
    link_b: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    link_kind: tuple[LinkKind, ...] = ()
    link_gbps: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(E,) bandwidth of the link (Gb/s, > 0), both directions."""

    @property
    def num_devices(self) -> int:
        return len(self.device_ids)

    @property
    def num_domains(self) -> int:
        return len(self.domain_names)

    @cached_property
    def ancestors(self) -> IntArray:
        """(K, 8) domain of each device at each level (column = level value). Where a device has
        no domain of that level (a node without sockets among nodes with them), its nearest
        domain above stands in, so that devices of different nodes are never in one domain
        of a level below NODE; -1 where it has none at or above the level. Column NODE is the
        node's domain."""
        return fill_ancestors(self, self.device_domain)

    @cached_property
    def domain_devices(self) -> IntArray:
        """(D,) devices under each domain (healthy or not)."""
        counts = np.zeros(self.num_domains, np.int64)
        for level in self.levels_present:
            column = self.ancestors[:, level.value]
            own = column[column >= 0]
            own = own[self.domain_level[own] == level.value]
            np.add.at(counts, own, 1)
        return counts

    @cached_property
    def levels_present(self) -> tuple[DomainLevel, ...]:
        """Levels that have at least one domain, innermost first."""
        present = set(np.unique(self.domain_level).tolist())
        return tuple(level for level in LEVELS if level.value in present)

    @cached_property
    def node_devices(self) -> tuple[IntArray, ...]:
        """Per node, its device indices in ascending `device_index`."""
        order = np.lexsort((self.device_index, self.device_node))
        nodes = self.device_node[order]
        count = len(self.node_domain)
        bounds = np.searchsorted(nodes, np.arange(count + 1))
        return tuple(order[bounds[v] : bounds[v + 1]] for v in range(count))

    def domain_of_level(self, level: DomainLevel) -> IntArray:
        """Indices of the domains at `level`."""
        return np.flatnonzero(self.domain_level == level.value)


def fill_ancestors(topology: Topology, start: IntArray) -> IntArray:
    """(len(start), 8) domain at each level of the domains `start` and their ancestors, with
    the nearest domain above standing in where a level is missing (see `Topology.ancestors`)."""
    out = np.full((start.size, len(LEVELS) + 1), -1, np.int64)
    rows = np.arange(start.size)
    current = np.asarray(start, np.int64).copy()
    while np.any(current >= 0):
        live = current >= 0
        out[rows[live], topology.domain_level[current[live]]] = current[live]
        current = np.where(live, topology.domain_parent[np.maximum(current, 0)], -1)
    for level in range(len(LEVELS) - 1, 0, -1):
        out[:, level] = np.where(out[:, level] >= 0, out[:, level], out[:, level + 1])
    return out


@dataclass(frozen=True)
class CommunicationPhase:
    """A communication phase of one training iteration (CASSINI)."""

    start_fraction: float
    """Start, as a fraction of the iteration, in [0, 1)."""
    end_fraction: float
    """End, in (start_fraction, 1]."""
    gbps: float
    """Bandwidth the job sends on each link it uses during the phase (Gb/s, > 0)."""


@dataclass(frozen=True)
class CellQuota:
    """A tenant's guaranteed cells (HiveD virtual cluster): `count` cells of `level` on
    `type_index` devices."""

    tenant: str
    type_index: int
    level: DomainLevel
    count: int


@dataclass(frozen=True)
class PlacementJobs:
    """Per-job placement inputs, all aligned with `Jobs` (m entries each)."""

    pattern: tuple[CommunicationPattern, ...]
    iteration_time_s: FloatArray
    """(m,) time of one training iteration (s, 0 = unknown)."""
    phases: tuple[tuple[CommunicationPhase, ...], ...]
    """Per job, its communication phases within one iteration (CASSINI); empty = none."""
    bandwidth_sensitive: BoolArray
    """(m,) the job's speed depends on intra-node link bandwidth (MAPA)."""
    tensor_skew: FloatArray
    """(m,) max/mean parameter-server shard load (Tiresias; 0 = unknown, >= 1 otherwise)."""
    throughput_by_span: FloatArray
    """(m, 8) steps/s when the job's widest crossed level is the column's level (column 0 =
    crosses nothing); NaN = not given."""
    service_class: tuple[ServiceClass, ...]
    max_span_level: IntArray
    """(m,) the job must fit inside one domain of this level (a `DomainLevel` value, e.g. NODE
    = one node); 0 = no limit."""
    pinned_domain: IntArray
    """(m,) the job may use only devices under this domain; -1 = anywhere."""
    avoid_nodes: tuple[tuple[int, ...], ...]
    """Per job, node indices it must not use."""
    exclusive: BoolArray
    """(m,) the job's nodes hold no other job of this solve."""
    checkpoint_s: FloatArray
    """(m,) time to checkpoint before a move or preemption (s, >= 0)."""
    restore_s: FloatArray
    """(m,) time to restore after a move (s, >= 0)."""
    resize_s: FloatArray
    """(m,) time to grow or shrink in place (s, >= 0)."""
    preemptible: BoolArray
    """(m,) False = a running job must keep running (on any devices)."""
    current_devices: tuple[tuple[int, ...], ...]
    """Per job, the device indices it holds now (`history.jobs[].devices`); empty = none or not
    given (then `History.current_nodes` may still say which nodes)."""
    running_since_s: FloatArray
    """(m,) when the job started its current run (snapshot clock, s; NaN = not given)."""
    executed_time_s: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(m,) Tiresias: executed time since the job last entered queue 0 (s). Empty = 0."""
    waiting_time_s: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(m,) Tiresias: time waited since the job last ran or was promoted (s). Empty = 0."""

    @staticmethod
    def defaults(m: int) -> PlacementJobs:
        """No placement inputs for any of m jobs."""
        return PlacementJobs(
            pattern=(CommunicationPattern.NONE,) * m,
            iteration_time_s=np.zeros(m),
            phases=((),) * m,
            bandwidth_sensitive=np.zeros(m, dtype=bool),
            tensor_skew=np.zeros(m),
            throughput_by_span=np.full((m, len(LEVELS) + 1), np.nan),
            service_class=(ServiceClass.GUARANTEED,) * m,
            max_span_level=np.zeros(m, np.int64),
            pinned_domain=np.full(m, -1, np.int64),
            avoid_nodes=((),) * m,
            exclusive=np.zeros(m, dtype=bool),
            checkpoint_s=np.zeros(m),
            restore_s=np.zeros(m),
            resize_s=np.zeros(m),
            preemptible=np.ones(m, dtype=bool),
            current_devices=((),) * m,
            running_since_s=np.full(m, np.nan),
            executed_time_s=np.zeros(m),
            waiting_time_s=np.zeros(m),
        )


@dataclass(frozen=True)
class PlacementInputs:
    """What placement reads beyond `Cluster` and `Jobs`."""

    jobs: PlacementJobs
    cell_quotas: tuple[CellQuota, ...] = ()
