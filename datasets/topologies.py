"""Cluster topologies for examples, tests and benchmarks: racks of identical nodes, optionally
DGX-1-like 8-GPU nodes (two sockets, two PCIe switches per socket, the hybrid cube-mesh NVLink
graph) or NVSwitch nodes (every pair at the same bandwidth).

The DGX-1 (V100) NVLink graph is the published one (`DGX1_NVLINK`): each GPU has six NVLink
lanes to four other GPUs, two lanes to two of them and one to the other two; GPUs without an
NVLink between them talk over PCIe.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from apportion.solver.cluster_topology import build_topology
from apportion.solver.model import Cluster
from apportion.solver.topology import DomainLevel, LinkKind, Topology
from apportion.v1 import snapshot_pb2 as snapshot_pb

NVLINK_LANE_GBPS = 200.0
"""One NVLink 2 lane, per direction (25 GB/s)."""
PCIE_GBPS = 128.0
"""PCIe 3.0 x16, per direction (16 GB/s)."""

DGX1_NVLINK: tuple[tuple[int, int, int], ...] = (
    (0, 1, 1), (0, 2, 1), (0, 3, 2), (0, 4, 2),
    (1, 2, 2), (1, 3, 1), (1, 5, 2),
    (2, 3, 2), (2, 6, 1),
    (3, 7, 1),
    (4, 5, 1), (4, 6, 1), (4, 7, 2),
    (5, 6, 2), (5, 7, 1),
    (6, 7, 2),
)
"""(GPU a, GPU b, NVLink lanes) of a DGX-1 with V100s (hybrid cube-mesh)."""


class NodeKind:
    PLAIN = "plain"
    """Devices directly under the node, no links."""
    DGX1 = "dgx1"
    """8 GPUs: 2 sockets x 2 PCIe switches x 2 GPUs, DGX-1 NVLink graph, PCIe elsewhere."""
    NVSWITCH = "nvswitch"
    """Every pair of GPUs at the same NVSwitch bandwidth."""


@dataclass(frozen=True)
class RackCluster:
    """A generated cluster and its topology."""

    cluster: Cluster
    topology: Topology
    domains: tuple[tuple[str, DomainLevel, str], ...]
    device_domain: dict[str, str]
    links: tuple[tuple[str, str, LinkKind, float], ...]
    uplink_gbps: dict[str, float]


def rack_cluster(
    racks: int,
    nodes_per_rack: int,
    devices_per_node: int,
    type_name: str = "gpu",
    kind: str = NodeKind.PLAIN,
    racks_per_pod: int = 0,
    node_uplink_gbps: float = 0.0,
    rack_uplink_gbps: float = 0.0,
) -> RackCluster:
    """`racks` racks of `nodes_per_rack` nodes named "r<k>n<v>" under one cluster root (and
    pods of `racks_per_pod` racks when > 0). DGX1 and NVSWITCH nodes have 8 devices."""
    if kind != NodeKind.PLAIN and devices_per_node != 8:
        raise ValueError(f"{kind} nodes have 8 devices, not {devices_per_node}")
    domains: list[tuple[str, DomainLevel, str]] = [("cluster", DomainLevel.CLUSTER, "")]
    uplinks: dict[str, float] = {}
    node_names: list[str] = []
    device_domain: dict[str, str] = {}
    links: list[tuple[str, str, LinkKind, float]] = []
    for p in range(racks // racks_per_pod if racks_per_pod else 0):
        domains.append((f"p{p}", DomainLevel.POD, "cluster"))
    for r in range(racks):
        parent = f"p{r // racks_per_pod}" if racks_per_pod else "cluster"
        rack = f"r{r}"
        domains.append((rack, DomainLevel.RACK, parent))
        if rack_uplink_gbps:
            uplinks[rack] = rack_uplink_gbps
        for v in range(nodes_per_rack):
            node = f"{rack}n{v}"
            node_names.append(node)
            domains.append((node, DomainLevel.NODE, rack))
            if node_uplink_gbps:
                uplinks[node] = node_uplink_gbps
            if kind == NodeKind.DGX1:
                _dgx1(node, domains, device_domain, links)
            elif kind == NodeKind.NVSWITCH:
                for a in range(8):
                    for b in range(a + 1, 8):
                        links.append((f"{node}/{a}", f"{node}/{b}", LinkKind.NVSWITCH,
                                      6 * NVLINK_LANE_GBPS))
    count = len(node_names)
    cluster = Cluster(
        type_names=(type_name,),
        count=np.array([count * devices_per_node], np.int64),
        cost_per_hour=np.ones(1),
        node_names=tuple(node_names),
        node_type=np.zeros(count, np.int64),
        node_devices=np.full(count, devices_per_node, np.int64),
    )
    topology = build_topology(cluster, domains, device_domain, links, uplink_gbps=uplinks)
    cluster = replace(cluster, topology=topology)
    return RackCluster(cluster, topology, tuple(domains), device_domain, tuple(links), uplinks)


def _dgx1(
    node: str,
    domains: list[tuple[str, DomainLevel, str]],
    device_domain: dict[str, str],
    links: list[tuple[str, str, LinkKind, float]],
) -> None:
    """The inner domains and links of one DGX-1 node."""
    for s in range(2):
        socket = f"{node}/s{s}"
        domains.append((socket, DomainLevel.SOCKET, node))
        for w in range(2):
            switch = f"{socket}/x{w}"
            domains.append((switch, DomainLevel.PCIE_SWITCH, socket))
            for k in range(2):
                device_domain[f"{node}/{4 * s + 2 * w + k}"] = switch
    linked = set()
    for a, b, lanes in DGX1_NVLINK:
        links.append((f"{node}/{a}", f"{node}/{b}", LinkKind.NVLINK, lanes * NVLINK_LANE_GBPS))
        linked.add((a, b))
    for a in range(8):
        for b in range(a + 1, 8):
            if (a, b) not in linked:
                links.append((f"{node}/{a}", f"{node}/{b}", LinkKind.PCIE, PCIE_GBPS))


def fill_cluster_message(generated: RackCluster, msg: snapshot_pb.Cluster) -> None:
    """Write a generated cluster (types, nodes, topology with devices and links) into a
    `apportion.v1.Cluster` message."""
    cluster = generated.cluster
    for j, name in enumerate(cluster.type_names):
        msg.accelerator_types.add(name=name, count=int(cluster.count[j]))
    for v, name in enumerate(cluster.node_names):
        msg.nodes.add(name=name, accelerator_type=cluster.type_names[int(cluster.node_type[v])],
                      devices=int(cluster.node_devices[v]))
    topology = msg.topology
    for name, level, parent in generated.domains:
        topology.domains.add(name=name, level=int(level), parent=parent,
                             uplink_gbps=generated.uplink_gbps.get(name, 0.0))
    if generated.device_domain:
        topo = generated.topology
        for k, device in enumerate(topo.device_ids):
            node = cluster.node_names[int(topo.device_node[k])]
            topology.devices.add(id=device, node=node, index=int(topo.device_index[k]),
                                 domain=generated.device_domain.get(device, ""))
    kinds = {
        LinkKind.NVLINK: snapshot_pb.LINK_KIND_NVLINK,
        LinkKind.PCIE: snapshot_pb.LINK_KIND_PCIE,
        LinkKind.NVSWITCH: snapshot_pb.LINK_KIND_NVSWITCH,
    }
    for a, b, kind, gbps in generated.links:
        topology.links.add(device_a=a, device_b=b, kind=kinds[kind], gbps=gbps)
