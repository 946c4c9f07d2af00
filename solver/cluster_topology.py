"""The topology of a cluster as a `Topology`: the snapshot's, or one built from its nodes when
it lists none (functions of `Cluster`, apart from the topology types so that the model can hold
a topology without importing this module)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from apportion.solver.model import Cluster
from apportion.solver.topology import DomainLevel, LinkKind, Topology


def default_topology(cluster: Cluster) -> Topology:
    """The topology of a cluster that lists nodes but no topology: one CLUSTER root with every
    node under it, anonymous healthy devices "<node>/<k>", no links. A cluster without nodes
    gets one virtual node per type named after the type (holding all its devices)."""
    if cluster.node_names:
        names = list(cluster.node_names)
        node_type = cluster.node_type
        sizes = cluster.node_devices
    else:
        kept = [j for j in range(cluster.num_types) if cluster.count[j] > 0]
        names = [cluster.type_names[j] for j in kept]
        node_type = np.asarray(kept, np.int64)
        sizes = cluster.count[kept].astype(np.int64)
    nodes = len(names)
    domain_names = ("cluster", *names) if "cluster" not in names else ("", *names)
    level = np.array([DomainLevel.CLUSTER] + [DomainLevel.NODE] * nodes, np.int64)
    parent = np.array([-1] + [0] * nodes, np.int64)
    device_node = np.repeat(np.arange(nodes), sizes).astype(np.int64)
    starts = np.cumsum(sizes) - sizes
    index = (np.arange(device_node.size) - np.repeat(starts, sizes)).astype(np.int64)
    pairs = zip(device_node.tolist(), index.tolist(), strict=True)
    ids = tuple(f"{names[v]}/{k}" for v, k in pairs)
    return Topology(
        domain_names=domain_names,
        domain_level=level,
        domain_parent=parent,
        domain_uplink_gbps=np.zeros(nodes + 1),
        node_domain=np.arange(1, nodes + 1, dtype=np.int64),
        device_ids=ids,
        device_node=device_node,
        device_index=index,
        device_domain=device_node + 1,
        device_type=node_type[device_node].astype(np.int64),
        device_healthy=np.ones(device_node.size, dtype=bool),
    )


def topology_of(cluster: Cluster) -> Topology:
    """The cluster's topology: the snapshot's, or `default_topology`."""
    return cluster.topology if cluster.topology is not None else default_topology(cluster)


def build_topology(
    cluster: Cluster,
    domains: Sequence[tuple[str, DomainLevel, str]],
    device_domain: Mapping[str, str] | None = None,
    links: Sequence[tuple[str, str, LinkKind, float]] = (),
    unhealthy: Sequence[str] = (),
    uplink_gbps: Mapping[str, float] | None = None,
    device_ids: Sequence[tuple[str, str, int]] | None = None,
) -> Topology:
    """The topology of `cluster` from (name, level, parent name or "") domains, where every
    node of the cluster is a NODE domain. Devices are "<node>/<k>" unless `device_ids` lists
    (id, node, index) for every device; `device_domain` maps a device id to its innermost
    domain (default its node), `links` are (device a, device b, kind, Gb/s). The input must
    already be valid (see `apportion.server.topology_inputs`)."""
    names = [name for name, _, _ in domains]
    index = {name: k for k, name in enumerate(names)}
    node_index = {name: v for v, name in enumerate(cluster.node_names)}
    base = default_topology(cluster)
    if device_ids is None:
        ids = list(base.device_ids)
        device_node = base.device_node
        device_index = base.device_index
    else:
        ids = [d for d, _, _ in device_ids]
        device_node = np.array([node_index[n] for _, n, _ in device_ids], np.int64)
        device_index = np.array([k for _, _, k in device_ids], np.int64)
    by_id = {d: k for k, d in enumerate(ids)}
    node_domain = np.array([index[name] for name in cluster.node_names], np.int64)
    inner = device_domain or {}
    domain_of_device = np.array(
        [index[inner[d]] if d in inner else int(node_domain[device_node[k]])
         for k, d in enumerate(ids)], np.int64)
    healthy = np.ones(len(ids), dtype=bool)
    healthy[[by_id[d] for d in unhealthy]] = False
    uplinks = uplink_gbps or {}
    return Topology(
        domain_names=tuple(names),
        domain_level=np.array([int(level) for _, level, _ in domains], np.int64),
        domain_parent=np.array([index[p] if p else -1 for _, _, p in domains], np.int64),
        domain_uplink_gbps=np.array([float(uplinks.get(name, 0.0)) for name in names]),
        node_domain=node_domain,
        device_ids=tuple(ids),
        device_node=device_node,
        device_index=device_index,
        device_domain=domain_of_device,
        device_type=cluster.node_type[device_node].astype(np.int64),
        device_healthy=healthy,
        link_a=np.array([by_id[a] for a, _, _, _ in links], np.int64),
        link_b=np.array([by_id[b] for _, b, _, _ in links], np.int64),
        link_kind=tuple(kind for _, _, kind, _ in links),
        link_gbps=np.array([float(g) for _, _, _, g in links]),
    )
