"""Devices for groups of jobs (co-location policies): which accelerator type and nodes a group
runs on, given what running jobs already hold. A simple consolidated placer: the exact
placement stage, when present, can replace it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apportion.solver.model import IntArray, Problem


@dataclass
class FreeDevices:
    """Free devices per type and per node (mutable while groups are placed)."""

    per_type: IntArray
    """(n,) free devices of each type."""
    per_node: IntArray
    """(nodes,) free devices of each node (empty without a node layout)."""


def free_devices(problem: Problem, holding: np.ndarray | None = None) -> FreeDevices:
    """The devices not held by running jobs (`history.current`), or by the jobs `holding` (bool
    mask) only when given. A running job's devices are spread evenly over the nodes it names
    (the first nodes take the remainder)."""
    cluster, hist = problem.cluster, problem.history
    m = problem.jobs.num_jobs
    per_type = cluster.count.astype(np.int64).copy()
    per_node = cluster.node_devices.astype(np.int64).copy()
    running = hist.running(m)
    if holding is not None:
        running = running & holding
    for i in np.nonzero(running)[0]:
        j = int(hist.current_type[i])
        devices = int(hist.current_devices[i]) or int(problem.jobs.scale_factor[i])
        per_type[j] -= devices
        nodes = hist.current_nodes[i] if hist.current_nodes else ()
        if nodes:
            base, extra = divmod(devices, len(nodes))
            for k, node in enumerate(nodes):
                per_node[node] -= base + (1 if k < extra else 0)
    return FreeDevices(np.maximum(per_type, 0), np.maximum(per_node, 0))


def place_group(
    problem: Problem, free: FreeDevices, devices: int, types: IntArray | None = None
) -> tuple[int, tuple[tuple[str, int], ...]] | None:
    """Take `devices` devices of one type for a group (the first type in `types`, default
    cluster order, with enough free devices), on the fewest nodes: the fullest node that fits
    them all, else the emptiest nodes first. None = no type has them free."""
    cluster = problem.cluster
    order = np.arange(cluster.num_types) if types is None else types
    for j in order.tolist():
        if free.per_type[j] < devices:
            continue
        nodes: list[tuple[str, int]] = []
        if cluster.node_names:
            of_type = np.nonzero(cluster.node_type == j)[0]
            room = free.per_node[of_type]
            if room.sum() < devices:
                continue
            fits = of_type[room >= devices]
            if fits.size:
                node = int(fits[np.argmin(free.per_node[fits])])
                nodes.append((cluster.node_names[node], devices))
                free.per_node[node] -= devices
            else:
                left = devices
                for node in of_type[np.argsort(-room, kind="stable")].tolist():
                    take = int(min(left, free.per_node[node]))
                    if take <= 0:
                        continue
                    nodes.append((cluster.node_names[node], take))
                    free.per_node[node] -= take
                    left -= take
                    if left == 0:
                        break
        free.per_type[j] -= devices
        return j, tuple(nodes)
    return None


def current_nodes(problem: Problem, job: int) -> tuple[tuple[str, int], ...]:
    """(node, devices) of a running job's current placement (devices spread evenly)."""
    hist = problem.history
    if not hist.current_nodes or not hist.current_nodes[job]:
        return ()
    nodes = hist.current_nodes[job]
    devices = int(hist.current_devices[job]) or int(problem.jobs.scale_factor[job])
    base, extra = divmod(devices, len(nodes))
    names = problem.cluster.node_names
    return tuple((names[n], base + (1 if k < extra else 0)) for k, n in enumerate(nodes))
