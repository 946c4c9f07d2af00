"""The simulated cluster: accelerator types, device counts and (optionally) nodes.

Three ways to describe it:

* a spec string `TYPE:COUNT[:GPUS_PER_NODE],...`, e.g. `v100:36,p100:36,k80:36` (Gavel's
  cluster) or `v100:32:8` (four 8-GPU nodes); `gpus_per_node` applies to the types that do not
  name their own node size; without any node size the types have no node layout (every
  device of a type is interchangeable, as in Gavel's simulator);
* a cluster file: the proto3 JSON of `apportion.v1.Cluster` (`acceleratorTypes[]` with
  `name` and `count`, optional `nodes[]` with `name`, `acceleratorType`, `devices`), or of a
  whole snapshot / SolveRequest, whose cluster is used; nodes may give their `cpus` and
  `memoryGib` (read by resource-shape policies such as synergy; see
  `simulator.host_resources` for the defaults);
* an openb node list (`.csv`, Alibaba 2023), through `apportion.datasets.openb`.

Bounds: at most `MAX_TYPES` types and `MAX_DEVICES` devices in all (a simulation keeps a
per-round row per type and checks every node every round).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from apportion.datasets.cluster import ClusterSpec, NodeSpec
from apportion.datasets.generators import make_cluster
from apportion.simulator.errors import SimulationInputError

MAX_TYPES = 64
"""Accelerator types a simulated cluster may have."""
MAX_DEVICES = 1_000_000
"""Devices a simulated cluster may have in all."""


def parse_cluster(text: str, gpus_per_node: int = 0) -> ClusterSpec:
    """`TYPE:COUNT[:GPUS_PER_NODE],...` (see the module docstring); `gpus_per_node` (0 = no
    node layout) for the types without their own node size."""
    counts: dict[str, int] = {}
    per_node: dict[str, int] = {}
    for k, part in enumerate(text.split(",")):
        fields = [f.strip() for f in part.strip().split(":")]
        where = f"--cluster entry {k + 1} ({part.strip()!r})"
        if len(fields) not in (2, 3) or not fields[0]:
            raise SimulationInputError(f"{where}: expected TYPE:COUNT or TYPE:COUNT:GPUS_PER_NODE")
        name = fields[0]
        if name in counts:
            raise SimulationInputError(f"{where}: type {name!r} given twice")
        counts[name] = _count(fields[1], f"{where}: COUNT", minimum=0)
        if len(fields) == 3:
            per_node[name] = _count(fields[2], f"{where}: GPUS_PER_NODE", minimum=1)
        elif gpus_per_node > 0:
            per_node[name] = gpus_per_node
    return _checked(_with_nodes(counts, per_node), "--cluster")


def _count(text: str, where: str, minimum: int) -> int:
    if not text.isdigit() or int(text) < minimum:
        raise SimulationInputError(f"{where} must be an integer >= {minimum}, got {text!r}")
    return int(text)


def _with_nodes(counts: dict[str, int], per_node: dict[str, int]) -> ClusterSpec:
    """Counts per type, laid out on nodes of `per_node[type]` devices (last node partial) for
    the types that have a node size; a type without one gets no nodes."""
    if not per_node:
        return ClusterSpec.from_counts(counts)
    if set(per_node) != set(counts):
        missing = sorted(set(counts) - set(per_node))
        raise SimulationInputError(
            f"--cluster: node sizes given for some types but not for {', '.join(missing)} "
            "(give every type a node size, or none)"
        )
    laid = make_cluster(counts, gpus_per_node=per_node)
    # cores and memory are not part of the spec: 0 = not given (`simulator.host_resources`)
    return replace(laid, nodes=tuple(replace(n, cpus=0.0, memory_gib=0.0) for n in laid.nodes))


def read_cluster_file(path: str | Path) -> ClusterSpec:
    """A cluster file (see the module docstring). Errors name the file and the field."""
    spath = str(path)
    if spath.endswith(".csv") or spath.endswith(".csv.gz"):
        from apportion.datasets.openb import read_openb_nodes

        try:
            return _checked(read_openb_nodes(path), spath)
        except (OSError, ValueError) as exc:
            raise SimulationInputError(str(exc)) from exc
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise SimulationInputError(
            f"{spath}: cannot read the cluster file: {exc.strerror}"
        ) from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SimulationInputError(f"{spath}: not a JSON cluster file: {exc}") from exc
    if isinstance(data, dict) and "snapshot" in data:
        data = data["snapshot"]
    if isinstance(data, dict) and "cluster" in data:
        data = data["cluster"]
    if not isinstance(data, dict):
        raise SimulationInputError(f"{spath}: expected a JSON object (apportion.v1.Cluster)")
    return _checked(_cluster_from_json(data, spath), spath)


def _cluster_from_json(data: dict[str, Any], path: str) -> ClusterSpec:
    types = data.get("acceleratorTypes", data.get("accelerator_types", []))
    if not isinstance(types, list) or not types:
        raise SimulationInputError(f"{path}: acceleratorTypes: must list at least one type")
    counts: dict[str, int] = {}
    for k, entry in enumerate(types):
        where = f"{path}: acceleratorTypes[{k}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise SimulationInputError(f"{where}.name: must be a non-empty string")
        name = entry["name"]
        count = entry.get("count", 0)
        if name in counts or not name:
            raise SimulationInputError(f"{where}.name: empty or duplicate type {name!r}")
        if not isinstance(count, int) or count < 0:
            raise SimulationInputError(f"{where}.count: must be an integer >= 0, got {count!r}")
        counts[name] = count
    nodes: list[NodeSpec] = []
    for k, entry in enumerate(data.get("nodes", [])):
        where = f"{path}: nodes[{k}]"
        if not isinstance(entry, dict):
            raise SimulationInputError(f"{where}: must be an object")
        acc = entry.get("acceleratorType", entry.get("accelerator_type"))
        devices = entry.get("devices", 0)
        if acc not in counts:
            raise SimulationInputError(f"{where}.acceleratorType: unknown type {acc!r}")
        if not isinstance(devices, int) or devices < 0:
            raise SimulationInputError(f"{where}.devices: must be an integer >= 0")
        host = [_host_amount(entry, key, f"{where}.{key}") for key in ("cpus", "memoryGib")]
        nodes.append(NodeSpec(str(entry.get("name", f"{acc}-{k}")), str(acc), devices, *host))
    if nodes:
        held = {t: 0 for t in counts}
        for node in nodes:
            held[node.accelerator_type] += node.devices
        for k, (name, count) in enumerate(counts.items()):
            if held[name] != count:
                raise SimulationInputError(
                    f"{path}: acceleratorTypes[{k}].count: is {count} but the nodes of type "
                    f"{name!r} hold {held[name]} devices"
                )
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            raise SimulationInputError(f"{path}: nodes: node names must be unique")
    return ClusterSpec(tuple(counts), tuple(counts.values()), tuple(nodes))


def _host_amount(entry: dict[str, Any], key: str, where: str) -> float:
    """A node's `cpus` or `memoryGib` (also `memory_gib`); 0 = not given."""
    value = entry.get(key, entry.get("memory_gib" if key == "memoryGib" else key, 0))
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
        math.isfinite(value) and value >= 0
    ):
        raise SimulationInputError(f"{where}: must be a finite number >= 0, got {value!r}")
    return float(value)


def _checked(cluster: ClusterSpec, where: str) -> ClusterSpec:
    if not cluster.types:
        raise SimulationInputError(f"{where}: the cluster has no accelerator type")
    if len(cluster.types) > MAX_TYPES:
        raise SimulationInputError(f"{where}: {len(cluster.types)} types, at most {MAX_TYPES}")
    if cluster.total <= 0:
        raise SimulationInputError(f"{where}: the cluster has no devices")
    if cluster.total > MAX_DEVICES:
        raise SimulationInputError(
            f"{where}: {cluster.total} devices, at most {MAX_DEVICES:,} can be simulated"
        )
    return cluster


def single_type(devices: int, name: str = "gpu") -> ClusterSpec:
    """`devices` identical devices of one type (the homogeneous cluster of Shockwave's runs)."""
    if devices < 1:
        raise SimulationInputError(f"--gpus must be >= 1, got {devices}")
    return _checked(ClusterSpec.from_counts({name: devices}), "--gpus")
