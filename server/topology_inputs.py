"""Conversion and validation of the topology, the jobs' placement fields, the admission and
placement stages of a request, and the placement part of the response.

`with_topology` adds `Cluster.topology` and `Problem.placement` to a converted problem;
`with_stages` adds `PolicyRequest.placement` / `.admission`; `fill_placement_response` writes
the plan's placement section. Every problem found becomes `Violation(field_path, what)`.

Size bounds (each a field-path error when exceeded): `MAX_DOMAINS` domains, `MAX_DEVICES`
devices, `MAX_LINKS` links, `MAX_PHASES` communication phases per job.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from apportion.server.job_wire import JobFields, all_jobs
from apportion.solver.cluster_topology import build_topology, default_topology, topology_of
from apportion.solver.errors import Violation
from apportion.solver.model import Cluster, PolicyRequest, Problem
from apportion.solver.parameters import (
    TIRESIAS_THRESHOLDS,
    TiresiasAdmission,
    TiresiasMode,
    TiresiasParameters,
    TiresiasService,
)
from apportion.solver.placement_plan import PlacementSection
from apportion.solver.registry import PolicySpec
from apportion.solver.result import Plan
from apportion.solver.stages import (
    DEVICE_LEVEL_MAX_DEVICES,
    MAX_CANDIDATE_PAIRS_LIMIT,
    AdmissionMode,
    AdmissionParameters,
    PatternScore,
    PlacementLevel,
    PlacementParameters,
    PlacementWeights,
    Placer,
    TimeShiftParameters,
)
from apportion.solver.topology import (
    LEVELS,
    CellQuota,
    CommunicationPattern,
    CommunicationPhase,
    DomainLevel,
    LinkKind,
    PlacementInputs,
    PlacementJobs,
    ServiceClass,
    Topology,
)
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import policy_pb2 as policy_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

MAX_DOMAINS = 1_048_576
MAX_DEVICES = 1_048_576
MAX_LINKS = 4_194_304
MAX_PHASES = 64

_TOPO = "snapshot.cluster.topology"
_LEVEL = {
    snapshot_pb.DOMAIN_LEVEL_DEVICE_GROUP: DomainLevel.DEVICE_GROUP,
    snapshot_pb.DOMAIN_LEVEL_PCIE_SWITCH: DomainLevel.PCIE_SWITCH,
    snapshot_pb.DOMAIN_LEVEL_SOCKET: DomainLevel.SOCKET,
    snapshot_pb.DOMAIN_LEVEL_NODE: DomainLevel.NODE,
    snapshot_pb.DOMAIN_LEVEL_RACK: DomainLevel.RACK,
    snapshot_pb.DOMAIN_LEVEL_POD: DomainLevel.POD,
    snapshot_pb.DOMAIN_LEVEL_CLUSTER: DomainLevel.CLUSTER,
}
_LEVEL_TO_WIRE = {level: wire for wire, level in _LEVEL.items()}
_LINK = {
    snapshot_pb.LINK_KIND_UNSPECIFIED: LinkKind.NVLINK,
    snapshot_pb.LINK_KIND_NVLINK: LinkKind.NVLINK,
    snapshot_pb.LINK_KIND_PCIE: LinkKind.PCIE,
    snapshot_pb.LINK_KIND_SOCKET_INTERCONNECT: LinkKind.SOCKET_INTERCONNECT,
    snapshot_pb.LINK_KIND_NVSWITCH: LinkKind.NVSWITCH,
    snapshot_pb.LINK_KIND_NETWORK: LinkKind.NETWORK,
}
_PATTERN = {
    snapshot_pb.COMMUNICATION_PATTERN_UNSPECIFIED: CommunicationPattern.NONE,
    snapshot_pb.COMMUNICATION_PATTERN_NONE: CommunicationPattern.NONE,
    snapshot_pb.COMMUNICATION_PATTERN_RING_ALLREDUCE: CommunicationPattern.RING_ALLREDUCE,
    snapshot_pb.COMMUNICATION_PATTERN_ALL_TO_ALL: CommunicationPattern.ALL_TO_ALL,
    snapshot_pb.COMMUNICATION_PATTERN_PARAMETER_SERVER: CommunicationPattern.PARAMETER_SERVER,
    snapshot_pb.COMMUNICATION_PATTERN_PIPELINE: CommunicationPattern.PIPELINE,
}
_SERVICE = {
    snapshot_pb.SERVICE_CLASS_UNSPECIFIED: ServiceClass.GUARANTEED,
    snapshot_pb.SERVICE_CLASS_GUARANTEED: ServiceClass.GUARANTEED,
    snapshot_pb.SERVICE_CLASS_OPPORTUNISTIC: ServiceClass.OPPORTUNISTIC,
    snapshot_pb.SERVICE_CLASS_BEST_EFFORT: ServiceClass.BEST_EFFORT,
}
_PLACER = {
    policy_pb.PLACER_UNSPECIFIED: Placer.EXACT,
    policy_pb.PLACER_EXACT: Placer.EXACT,
    policy_pb.PLACER_BLOX_CONSOLIDATED: Placer.BLOX_CONSOLIDATED,
    policy_pb.PLACER_BLOX_SCATTERED: Placer.BLOX_SCATTERED,
    policy_pb.PLACER_TIRESIAS_YARN: Placer.TIRESIAS_YARN,
    policy_pb.PLACER_HIVED_BUDDY: Placer.HIVED_BUDDY,
    policy_pb.PLACER_MAPA_BASELINE: Placer.MAPA_BASELINE,
    policy_pb.PLACER_MAPA_TOPO_AWARE: Placer.MAPA_TOPO_AWARE,
    policy_pb.PLACER_MAPA_GREEDY: Placer.MAPA_GREEDY,
    policy_pb.PLACER_MAPA_PRESERVE: Placer.MAPA_PRESERVE,
    policy_pb.PLACER_MAPA_MIN_SCORE: Placer.MAPA_MIN_SCORE,
    policy_pb.PLACER_LUCID_CONSOLIDATE: Placer.LUCID_CONSOLIDATE,
    policy_pb.PLACER_SIA_BFD: Placer.SIA_BFD,
    policy_pb.PLACER_GAVEL_SERVERS: Placer.GAVEL_SERVERS,
}
_PLACEMENT_LEVEL = {
    policy_pb.PLACEMENT_LEVEL_UNSPECIFIED: PlacementLevel.NODE,
    policy_pb.PLACEMENT_LEVEL_NODE: PlacementLevel.NODE,
    policy_pb.PLACEMENT_LEVEL_DEVICE: PlacementLevel.DEVICE,
}
_PATTERN_SCORE = {
    policy_pb.PATTERN_SCORE_UNSPECIFIED: PatternScore.BANDWIDTH,
    policy_pb.PATTERN_SCORE_BANDWIDTH: PatternScore.BANDWIDTH,
    policy_pb.PATTERN_SCORE_PREDICTED: PatternScore.PREDICTED,
}
_ADMISSION = {
    policy_pb.ADMISSION_MODE_UNSPECIFIED: AdmissionMode.ACCEPT_ALL,
    policy_pb.ADMISSION_MODE_ACCEPT_ALL: AdmissionMode.ACCEPT_ALL,
    policy_pb.ADMISSION_MODE_LOAD_BASED: AdmissionMode.LOAD_BASED,
}
LEVEL_NAMES: dict[str, DomainLevel] = {level.name.lower(): level for level in LEVELS}
"""Lower-case level names used as map keys ("node", "rack", ...)."""


def _finite(x: float) -> bool:
    return math.isfinite(x)


def _nonnegative(value: float, path: str, violations: list[Violation]) -> bool:
    if not (_finite(value) and value >= 0):
        violations.append(Violation(path, f"must be finite and >= 0, got {value}"))
        return False
    return True


def _unique(name: str, k: int, path: str, first: dict[str, int], what: str,
            violations: list[Violation]) -> bool:
    """`name` is non-empty and not seen before (recorded in `first` at index k)."""
    if not name:
        violations.append(Violation(path, "must be non-empty"))
        return False
    if name in first:
        violations.append(Violation(path, f"duplicate {what} {name!r} (first at [{first[name]}])"))
        return False
    first[name] = k
    return True


def _enum(value: Any, table: Mapping[Any, Any], path: str, violations: list[Violation]) -> Any:
    if value not in table:
        violations.append(Violation(path, f"unknown value {value}"))
        return next(iter(table.values()))
    return table[value]


# topology -----------------------------------------------------------------------------------

def _domains(
    msg: snapshot_pb.Topology, cluster: Cluster, violations: list[Violation]
) -> list[tuple[str, DomainLevel, str]] | None:
    """(name, level, parent) of every domain, or None after a violation."""
    ok = True
    if len(msg.domains) > MAX_DOMAINS:
        violations.append(Violation(f"{_TOPO}.domains", f"at most {MAX_DOMAINS} domains"))
        return None
    first: dict[str, int] = {}
    out: list[tuple[str, DomainLevel, str]] = []
    for k, domain in enumerate(msg.domains):
        p = f"{_TOPO}.domains[{k}]"
        ok &= _unique(domain.name, k, f"{p}.name", first, "domain", violations)
        level = _LEVEL.get(domain.level)
        if level is None:
            violations.append(Violation(f"{p}.level", "must be a domain level (1-7)"))
            ok = False
        _nonnegative(domain.uplink_gbps, f"{p}.uplink_gbps", violations)
        over = domain.oversubscription
        if not (_finite(over) and (over == 0 or over >= 1)):
            violations.append(Violation(f"{p}.oversubscription", f"must be 0 or >= 1, got {over}"))
        out.append((domain.name, level or DomainLevel.CLUSTER, domain.parent))
    for k, (name, level, parent) in enumerate(out):
        p = f"{_TOPO}.domains[{k}].parent"
        if not parent:
            continue
        if parent not in first:
            violations.append(Violation(p, f"unknown domain {parent!r}"))
            ok = False
        elif out[first[parent]][1] <= level:
            violations.append(Violation(
                p, f"{parent!r} ({out[first[parent]][1].name.lower()}) must be above "
                f"{name!r} ({level.name.lower()}): levels increase toward the root"))
            ok = False
    if ok:
        ok = _no_cycles(out, first, violations)
    nodes = set(cluster.node_names)
    node_domains = {name for name, level, _ in out if level is DomainLevel.NODE}
    for v, name in enumerate(cluster.node_names):
        if name not in node_domains:
            violations.append(Violation(
                f"snapshot.cluster.nodes[{v}].name",
                f"node {name!r} is missing from the topology (no DOMAIN_LEVEL_NODE domain of "
                f"that name)"))
            ok = False
    for k, (name, level, _) in enumerate(out):
        if level is DomainLevel.NODE and name not in nodes:
            violations.append(Violation(f"{_TOPO}.domains[{k}].name",
                                        f"NODE domain {name!r} is not a node of the cluster"))
            ok = False
    if ok:
        for k, (name, level, _) in enumerate(out):
            if level < DomainLevel.NODE and _node_above(out, first, k) is None:
                violations.append(Violation(f"{_TOPO}.domains[{k}].parent",
                                            f"{name!r} is below NODE level but under no node"))
                ok = False
    return out if ok else None


def _no_cycles(out: list[tuple[str, DomainLevel, str]], first: dict[str, int],
               violations: list[Violation]) -> bool:
    for k in range(len(out)):
        seen = {k}
        current = out[k][2]
        while current:
            index = first[current]
            if index in seen:
                violations.append(Violation(f"{_TOPO}.domains[{k}].parent",
                                            "the parent chain forms a cycle"))
                return False
            seen.add(index)
            current = out[index][2]
    return True


def _node_above(out: list[tuple[str, DomainLevel, str]], first: dict[str, int],
                k: int) -> str | None:
    current = out[k][2]
    while current:
        name, level, parent = out[first[current]]
        if level is DomainLevel.NODE:
            return name
        current = parent
    return None


def topology_from_message(
    msg: snapshot_pb.Cluster, cluster: Cluster, violations: list[Violation]
) -> Topology | None:
    """The validated topology of the cluster message (None when absent or invalid)."""
    if not msg.HasField("topology"):
        return None
    topo = msg.topology
    if not cluster.node_names:
        violations.append(Violation(_TOPO, "needs snapshot.cluster.nodes (its NODE domains)"))
        return None
    domains = _domains(topo, cluster, violations)
    if domains is None:
        return None
    index = {name: k for k, (name, _, _) in enumerate(domains)}
    node_index = {name: v for v, name in enumerate(cluster.node_names)}
    device_ids, device_domain, unhealthy, ok = _devices(
        topo, cluster, domains, index, node_index, violations)
    links, links_ok = _links(topo, cluster, device_ids, violations)
    if not (ok and links_ok):
        return None
    uplinks = {name: float(topo.domains[k].uplink_gbps) for k, (name, _, _) in enumerate(domains)
               if topo.domains[k].uplink_gbps > 0}
    memory = np.array([max(d.memory_gib, 0.0) for d in topo.devices]) if topo.devices else None
    built = build_topology(cluster, domains, device_domain, links, unhealthy, uplinks,
                           device_ids if topo.devices else None)
    return replace(built, device_memory_gib=memory) if memory is not None else built


def _devices(
    topo: snapshot_pb.Topology, cluster: Cluster, domains: list[tuple[str, DomainLevel, str]],
    index: dict[str, int], node_index: dict[str, int], violations: list[Violation],
) -> tuple[list[tuple[str, str, int]], dict[str, str], list[str], bool]:
    """(id, node, index) per device, device -> inner domain, unhealthy ids, valid."""
    if not topo.devices:
        base = default_topology(cluster)
        anonymous = [(d, cluster.node_names[int(v)], int(k)) for d, v, k in zip(
            base.device_ids, base.device_node.tolist(), base.device_index.tolist(), strict=True)]
        return anonymous, {}, [], True
    ok = True
    if len(topo.devices) > MAX_DEVICES:
        violations.append(Violation(f"{_TOPO}.devices", f"at most {MAX_DEVICES} devices"))
        return [], {}, [], False
    first: dict[str, int] = {}
    slots: dict[tuple[str, int], int] = {}
    per_node = dict.fromkeys(cluster.node_names, 0)
    ids: list[tuple[str, str, int]] = []
    inner: dict[str, str] = {}
    unhealthy: list[str] = []
    for k, device in enumerate(topo.devices):
        p = f"{_TOPO}.devices[{k}]"
        ok &= _unique(device.id, k, f"{p}.id", first, "device", violations)
        v = node_index.get(device.node)
        if v is None:
            violations.append(Violation(f"{p}.node", f"unknown node {device.node!r}"))
            ok = False
            continue
        size = int(cluster.node_devices[v])
        if not 0 <= device.index < size:
            violations.append(Violation(
                f"{p}.index", f"must be in [0, {size}) (node {device.node!r} has {size} devices)"))
            ok = False
        elif (device.node, device.index) in slots:
            violations.append(Violation(
                f"{p}.index", f"index {device.index} of node {device.node!r} already used by "
                f"devices[{slots[(device.node, device.index)]}]"))
            ok = False
        else:
            slots[(device.node, device.index)] = k
        per_node[device.node] += 1
        if device.domain:
            d = index.get(device.domain)
            if d is None:
                violations.append(Violation(f"{p}.domain", f"unknown domain {device.domain!r}"))
                ok = False
            elif device.domain != device.node and \
                    _node_above(domains, index, d) != device.node:
                violations.append(Violation(
                    f"{p}.domain", f"{device.domain!r} is not inside node {device.node!r}"))
                ok = False
            elif device.domain != device.node:
                inner[device.id] = device.domain
        _nonnegative(device.memory_gib, f"{p}.memory_gib", violations)
        if device.unhealthy:
            unhealthy.append(device.id)
        ids.append((device.id, device.node, int(device.index)))
    for v, name in enumerate(cluster.node_names):
        listed = per_node[name]
        if listed != int(cluster.node_devices[v]):
            violations.append(Violation(
                f"{_TOPO}.devices", f"node {name!r} has {int(cluster.node_devices[v])} devices "
                f"but {listed} are listed"))
            ok = False
    return ids, inner, unhealthy, ok


def _links(
    topo: snapshot_pb.Topology, cluster: Cluster, device_ids: list[tuple[str, str, int]],
    violations: list[Violation],
) -> tuple[list[tuple[str, str, LinkKind, float]], bool]:
    if len(topo.links) > MAX_LINKS:
        violations.append(Violation(f"{_TOPO}.links", f"at most {MAX_LINKS} links"))
        return [], False
    node_of = {d: node for d, node, _ in device_ids}
    out: list[tuple[str, str, LinkKind, float]] = []
    ok = True
    for k, link in enumerate(topo.links):
        p = f"{_TOPO}.links[{k}]"
        good = True
        for side in ("device_a", "device_b"):
            name = getattr(link, side)
            if name not in node_of:
                violations.append(Violation(f"{p}.{side}", f"unknown device {name!r}"))
                good = False
        if good and link.device_a == link.device_b:
            violations.append(Violation(f"{p}.device_b", "must differ from device_a"))
            good = False
        if good and node_of[link.device_a] != node_of[link.device_b]:
            violations.append(Violation(
                p, f"joins devices of nodes {node_of[link.device_a]!r} and "
                f"{node_of[link.device_b]!r}; links join devices of one node (traffic between "
                f"nodes uses the domains' uplinks)"))
            good = False
        if not (_finite(link.gbps) and link.gbps > 0):
            violations.append(Violation(f"{p}.gbps", f"must be finite and > 0, got {link.gbps}"))
            good = False
        kind = _enum(link.kind, _LINK, f"{p}.kind", violations)
        if good:
            out.append((link.device_a, link.device_b, kind, float(link.gbps)))
        ok &= good
    del cluster
    return out, ok


# jobs ---------------------------------------------------------------------------------------

def _span_table(comm: snapshot_pb.Communication, p: str,
                violations: list[Violation]) -> np.ndarray:
    row = np.full(len(LEVELS) + 1, np.nan)
    for key, value in comm.throughput_by_span.items():
        path = f'{p}.throughput_by_span["{key}"]'
        column = 0 if key == "none" else (LEVEL_NAMES[key].value if key in LEVEL_NAMES else -1)
        if column < 0:
            violations.append(Violation(path, f"unknown level {key!r}; use \"none\" or one of "
                                        f"{', '.join(LEVEL_NAMES)}"))
        elif _nonnegative(value, path, violations):
            row[column] = value
    given = row[~np.isnan(row)]
    if given.size > 1 and np.any(np.diff(given) > 0):
        violations.append(Violation(f"{p}.throughput_by_span",
                                    "must not increase with the level crossed"))
    return row


def placement_inputs(
    msg: snapshot_pb.Snapshot, problem: Problem, topology: Topology,
    violations: list[Violation], present: JobFields | None = None,
) -> PlacementInputs | None:
    """The jobs' placement fields and the cell quotas (None when no job sets any).
    `present`: which `msg.jobs` may set the placement fields (None: any)."""
    m = problem.jobs.num_jobs
    jobs = PlacementJobs.defaults(m)
    domain_index = {name: k for k, name in enumerate(topology.domain_names)}
    node_index = {name: v for v, name in enumerate(problem.cluster.node_names)}
    pattern = list(jobs.pattern)
    phases: list[tuple[CommunicationPhase, ...]] = [()] * m
    service = list(jobs.service_class)
    avoid: list[tuple[int, ...]] = [()] * m
    any_given = False
    setting = (present or all_jobs(msg.jobs)).setting(*_PLACEMENT_FIELDS)
    for i, job in setting:
        p = f"snapshot.jobs[{i}]"
        if job.HasField("communication"):
            any_given = True
            comm = job.communication
            c = f"{p}.communication"
            pattern[i] = _enum(comm.pattern, _PATTERN, f"{c}.pattern", violations)
            if _nonnegative(comm.iteration_time_s, f"{c}.iteration_time_s", violations):
                jobs.iteration_time_s[i] = comm.iteration_time_s
            phases[i] = _phases(comm, c, violations)
            jobs.bandwidth_sensitive[i] = comm.bandwidth_sensitive
            skew = comm.tensor_skew
            if not (_finite(skew) and (skew == 0 or skew >= 1)):
                violations.append(Violation(f"{c}.tensor_skew", f"must be 0 or >= 1, got {skew}"))
            else:
                jobs.tensor_skew[i] = skew
            jobs.throughput_by_span[i] = _span_table(comm, c, violations)
        if job.service_class:
            any_given = True
            service[i] = _enum(job.service_class, _SERVICE, f"{p}.service_class", violations)
        if job.HasField("placement"):
            any_given = True
            c = f"{p}.placement"
            place = job.placement
            if place.max_span_level:
                level = _LEVEL.get(place.max_span_level)
                if level is None:
                    violations.append(Violation(f"{c}.max_span_level", "unknown level"))
                else:
                    jobs.max_span_level[i] = level.value
            if place.pinned_domain:
                d = domain_index.get(place.pinned_domain)
                if d is None:
                    violations.append(Violation(f"{c}.pinned_domain",
                                                f"unknown domain {place.pinned_domain!r}"))
                else:
                    jobs.pinned_domain[i] = d
            chosen = []
            for k, name in enumerate(place.avoid_nodes):
                v = node_index.get(name)
                if v is None:
                    violations.append(Violation(f"{c}.avoid_nodes[{k}]", f"unknown node {name!r}"))
                else:
                    chosen.append(v)
            avoid[i] = tuple(chosen)
            jobs.exclusive[i] = place.exclusive
        if job.HasField("migration"):
            any_given = True
            c = f"{p}.migration"
            for name in ("checkpoint_s", "restore_s", "resize_s"):
                value = getattr(job.migration, name)
                if _nonnegative(value, f"{c}.{name}", violations):
                    getattr(jobs, name)[i] = value
            if job.migration.HasField("preemptible"):
                jobs.preemptible[i] = job.migration.preemptible
    current, running_since, times, devices_given = _history_devices(
        msg, problem, topology, violations)
    quotas = _quotas(msg, problem, topology, violations)
    if not (any_given or devices_given or quotas or times.any()):
        return None
    jobs = replace(jobs, pattern=tuple(pattern), phases=tuple(phases),
                   service_class=tuple(service), avoid_nodes=tuple(avoid),
                   current_devices=current, running_since_s=running_since,
                   executed_time_s=times[:, 0].copy(), waiting_time_s=times[:, 1].copy())
    return PlacementInputs(jobs, quotas)


def _phases(comm: snapshot_pb.Communication, c: str,
            violations: list[Violation]) -> tuple[CommunicationPhase, ...]:
    if len(comm.phases) > MAX_PHASES:
        violations.append(Violation(f"{c}.phases", f"at most {MAX_PHASES} phases"))
        return ()
    out = []
    end = 0.0
    for k, phase in enumerate(comm.phases):
        q = f"{c}.phases[{k}]"
        if not (_finite(phase.start_fraction) and _finite(phase.end_fraction)
                and 0 <= phase.start_fraction < phase.end_fraction <= 1):
            violations.append(Violation(q, "needs 0 <= start_fraction < end_fraction <= 1"))
            continue
        if phase.start_fraction < end - 1e-12:
            violations.append(Violation(f"{q}.start_fraction",
                                        "phases must be in order and not overlap"))
            continue
        if not (_finite(phase.gbps) and phase.gbps > 0):
            violations.append(Violation(f"{q}.gbps", f"must be finite and > 0, got {phase.gbps}"))
            continue
        end = phase.end_fraction
        out.append(CommunicationPhase(phase.start_fraction, phase.end_fraction, phase.gbps))
    return tuple(out)


def _history_devices(
    msg: snapshot_pb.Snapshot, problem: Problem, topology: Topology,
    violations: list[Violation],
) -> tuple[tuple[tuple[int, ...], ...], np.ndarray, np.ndarray, bool]:
    """Per job, the devices its history lists (validated), running-since times, (m, 2)
    executed and waiting times (Tiresias), and whether any device list was given."""
    m = problem.jobs.num_jobs
    job_index = problem.jobs.row
    device_index = {d: k for k, d in enumerate(topology.device_ids)}
    owner: dict[int, str] = {}
    current: list[tuple[int, ...]] = [()] * m
    since = np.full(m, np.nan)
    times = np.zeros((m, 2))
    given = False
    for k, entry in enumerate(msg.history.jobs):
        i = job_index.get(entry.job_id)
        p = f"snapshot.history.jobs[{k}]"
        if i is None:
            continue
        if entry.HasField("running_since_s"):
            if _finite(entry.running_since_s):
                since[i] = entry.running_since_s
            else:
                violations.append(Violation(f"{p}.running_since_s", "must be finite"))
        for column, name in enumerate(("executed_time_s", "waiting_time_s")):
            if _nonnegative(getattr(entry, name), f"{p}.{name}", violations):
                times[i, column] = getattr(entry, name)
        if not entry.devices:
            continue
        given = True
        j = int(problem.history.current_type[i]) if problem.history.current_type.size else -1
        if j < 0:
            violations.append(Violation(f"{p}.devices",
                                        "needs current.accelerator_type (the job's type)"))
            continue
        expected = int(problem.history.current_devices[i])
        if len(entry.devices) != expected:
            violations.append(Violation(
                f"{p}.devices", f"lists {len(entry.devices)} devices, current holds {expected}"))
        chosen: list[int] = []
        for n, name in enumerate(entry.devices):
            d = device_index.get(name)
            q = f"{p}.devices[{n}]"
            if d is None:
                violations.append(Violation(q, f"unknown device {name!r}"))
            elif int(topology.device_type[d]) != j:
                violations.append(Violation(q, f"device {name!r} is not of the job's type"))
            elif d in owner:
                violations.append(Violation(q, f"device {name!r} is also held by job "
                                            f"{owner[d]!r}"))
            else:
                owner[d] = entry.job_id
                chosen.append(d)
        nodes = set(problem.history.current_nodes[i]) if problem.history.current_nodes else set()
        if nodes and any(int(topology.device_node[d]) not in nodes for d in chosen):
            violations.append(Violation(f"{p}.devices", "devices outside current.nodes"))
        current[i] = tuple(chosen)
    return tuple(current), since, times, given


def _quotas(msg: snapshot_pb.Snapshot, problem: Problem, topology: Topology,
            violations: list[Violation]) -> tuple[CellQuota, ...]:
    types = {name: j for j, name in enumerate(problem.cluster.type_names)}
    out = []
    for k, quota in enumerate(msg.cell_quotas):
        p = f"snapshot.cell_quotas[{k}]"
        ok = True
        if not quota.tenant:
            violations.append(Violation(f"{p}.tenant", "must be non-empty"))
            ok = False
        j = types.get(quota.accelerator_type)
        if j is None:
            violations.append(Violation(f"{p}.accelerator_type",
                                        f"unknown accelerator type {quota.accelerator_type!r}"))
            ok = False
        level = _LEVEL.get(quota.level)
        if level is None or level not in topology.levels_present:
            violations.append(Violation(f"{p}.level", "must be a level of the topology"))
            ok = False
        if quota.count < 1:
            violations.append(Violation(f"{p}.count", f"must be >= 1, got {quota.count}"))
            ok = False
        if ok and j is not None and level is not None:
            ok = _regular(topology, j, level, p, violations)
            out.append(CellQuota(quota.tenant, j, level, int(quota.count)))
    return tuple(out)


def _regular(topology: Topology, j: int, level: DomainLevel, p: str,
             violations: list[Violation]) -> bool:
    """Every domain of `level` holding type-j devices holds the same number of them."""
    column = topology.ancestors[:, level.value]
    mine = (topology.device_type == j) & (column >= 0)
    domains, counts = np.unique(column[mine], return_counts=True)
    real = topology.domain_level[domains] == level.value
    if not real.all() or np.unique(counts).size > 1:
        bad = int(domains[~real][0]) if not real.all() else int(
            domains[counts != counts[0]][0])
        violations.append(Violation(
            f"{_TOPO}.domains[{bad}]" if topology.domain_level[bad] == level.value else p,
            f"{level.name.lower()} cells of the type must all hold the same number of devices "
            f"(a regular cell chain)"))
        return False
    return True


_PLACEMENT_FIELDS = (
    snapshot_pb.Job.COMMUNICATION_FIELD_NUMBER, snapshot_pb.Job.PLACEMENT_FIELD_NUMBER,
    snapshot_pb.Job.MIGRATION_FIELD_NUMBER, snapshot_pb.Job.SERVICE_CLASS_FIELD_NUMBER)
"""The `Job` fields only placement reads."""


def _placement_fields_given(msg: snapshot_pb.Snapshot, present: JobFields) -> bool:
    """Any job or history entry sets a field only placement reads, or the snapshot lists cell
    quotas (otherwise no per-device view of the cluster is built: a request that never places
    does not pay for one, whatever the device counts)."""
    if msg.cell_quotas:
        return True
    if any(job.HasField("communication") or job.HasField("placement")
           or job.HasField("migration") or job.service_class
           for _, job in present.setting(*_PLACEMENT_FIELDS)):
        return True
    return any(entry.devices or entry.HasField("running_since_s") or entry.executed_time_s
               or entry.waiting_time_s for entry in msg.history.jobs)


def with_topology(msg: snapshot_pb.Snapshot, problem: Problem,
                  violations: list[Violation], present: JobFields) -> Problem:
    """`problem` with its validated topology and placement inputs. `present`: which
    `msg.jobs` may set the placement fields."""
    topology = topology_from_message(msg.cluster, problem.cluster, violations)
    cluster = replace(problem.cluster, topology=topology) if topology is not None \
        else problem.cluster
    inputs = (placement_inputs(msg, problem, topology_of(cluster), violations, present)
              if topology is not None or _placement_fields_given(msg, present) else None)
    return replace(problem, cluster=cluster, placement=inputs)


# stages -------------------------------------------------------------------------------------

def _weights(msg: policy_pb.PlacementWeights, p: str,
             violations: list[Violation]) -> PlacementWeights:
    base = PlacementWeights()

    def levels(field: str, default: dict[DomainLevel, float]) -> dict[DomainLevel, float]:
        out = dict(default)
        for key, value in getattr(msg, field).items():
            path = f'{p}.{field}["{key}"]'
            if key not in LEVEL_NAMES:
                violations.append(Violation(path, f"unknown level {key!r}; use one of "
                                            f"{', '.join(LEVEL_NAMES)}"))
            elif _nonnegative(value, path, violations):
                out[LEVEL_NAMES[key]] = float(value)
        return out

    move = msg.move if msg.HasField("move") else base.move
    link = msg.link_score if msg.HasField("link_score") else base.link_score
    span = msg.throughput_by_span if msg.HasField("throughput_by_span") \
        else base.throughput_by_span
    for name, value in (("move", move), ("move_per_s", msg.move_per_s),
                        ("link_score", link), ("throughput_by_span", span)):
        _nonnegative(value, f"{p}.{name}", violations)
    return PlacementWeights(
        crossing=levels("crossing", base.crossing),
        bottleneck=levels("bottleneck", base.bottleneck),
        free_domain=levels("free_domain", base.free_domain),
        move=max(move, 0.0) if _finite(move) else base.move,
        move_per_s=max(msg.move_per_s, 0.0) if _finite(msg.move_per_s) else 0.0,
        link_score=max(link, 0.0) if _finite(link) else base.link_score,
        throughput_by_span=max(span, 0.0) if _finite(span) else base.throughput_by_span,
    )


def placement_parameters(
    msg: policy_pb.PlacementStage, problem: Problem, violations: list[Violation]
) -> PlacementParameters:
    p = "policy.placement"
    placer = _enum(msg.placer, _PLACER, f"{p}.placer", violations)
    compare: list[Placer] = []
    for k, value in enumerate(msg.compare):
        other = _enum(value, _PLACER, f"{p}.compare[{k}]", violations)
        if other in compare:
            violations.append(Violation(f"{p}.compare[{k}]", f"{other.value} listed twice"))
        compare.append(other)
    level = _enum(msg.level, _PLACEMENT_LEVEL, f"{p}.level", violations)
    devices = topology_of(problem.cluster).num_devices
    if level is PlacementLevel.DEVICE and devices > DEVICE_LEVEL_MAX_DEVICES:
        violations.append(Violation(f"{p}.level", f"the device-level MILP takes at most "
                                    f"{DEVICE_LEVEL_MAX_DEVICES} devices, the cluster has "
                                    f"{devices}"))
    pairs = msg.max_candidate_pairs
    if not 0 <= pairs <= MAX_CANDIDATE_PAIRS_LIMIT:
        violations.append(Violation(f"{p}.max_candidate_pairs",
                                    f"must be in [0, {MAX_CANDIDATE_PAIRS_LIMIT}], got {pairs}"))
    skew = msg.consolidate_skew_above
    _nonnegative(skew, f"{p}.consolidate_skew_above", violations)
    score = msg.min_link_score
    if not (_finite(score) and 0 <= score <= 1):
        violations.append(Violation(f"{p}.min_link_score", f"must be in [0, 1], got {score}"))
    shifts = None
    if msg.HasField("time_shifts"):
        t = msg.time_shifts
        period = t.max_period_s if t.HasField("max_period_s") else 60.0
        if not (_finite(t.slot_s) and t.slot_s > 0):
            violations.append(Violation(f"{p}.time_shifts.slot_s",
                                        f"must be finite and > 0, got {t.slot_s}"))
        elif not (_finite(period) and period >= t.slot_s):
            violations.append(Violation(f"{p}.time_shifts.max_period_s",
                                        f"must be finite and >= slot_s, got {period}"))
        elif period / t.slot_s > 100_000:
            violations.append(Violation(f"{p}.time_shifts.max_period_s",
                                        "at most 100,000 slots per period"))
        else:
            shifts = TimeShiftParameters(float(t.slot_s), float(period))
    return PlacementParameters(
        placer=placer,
        compare=tuple(compare),
        weights=_weights(msg.weights, f"{p}.weights", violations),
        level=level,
        max_candidate_pairs=int(pairs) if pairs > 0 else PlacementParameters().max_candidate_pairs,
        consolidate_skew_above=float(skew) if _finite(skew) and skew > 0 else 0.0,
        time_shifts=shifts,
        enforce_cell_quotas=msg.enforce_cell_quotas,
        min_link_score=float(score) if _finite(score) and 0 <= score <= 1 else 0.0,
        pattern_score=_enum(msg.pattern_score, _PATTERN_SCORE, f"{p}.pattern_score", violations),
    )


def admission_parameters(msg: policy_pb.AdmissionStage,
                         violations: list[Violation]) -> AdmissionParameters:
    p = "policy.admission"
    mode = _enum(msg.mode, _ADMISSION, f"{p}.mode", violations)
    threshold = msg.load_threshold if msg.HasField("load_threshold") else 1.0
    if not (_finite(threshold) and threshold > 0):
        violations.append(Violation(f"{p}.load_threshold",
                                    f"must be finite and > 0, got {threshold}"))
        threshold = 1.0
    return AdmissionParameters(mode, float(threshold))


def with_stages(msg: policy_pb.Policy, policy: PolicyRequest, spec: PolicySpec,
                problem: Problem, violations: list[Violation]) -> PolicyRequest:
    """`policy` with the request's placement and admission stages (validated)."""
    placement = admission = None
    if msg.HasField("placement"):
        if not spec.capabilities.placement_stage:
            violations.append(Violation("policy.placement",
                                        f"{spec.name!r} does not combine with the placement "
                                        f"stage"))
        else:
            placement = placement_parameters(msg.placement, problem, violations)
    if msg.HasField("admission"):
        if not spec.capabilities.admission_stage:
            violations.append(Violation("policy.admission",
                                        f"{spec.name!r} does not combine with the admission "
                                        f"stage"))
        else:
            admission = admission_parameters(msg.admission, violations)
    return replace(policy, placement=placement, admission=admission)


# response -----------------------------------------------------------------------------------

def fill_placement_response(plan: Plan, problem: Problem, out: service_pb.Plan) -> None:
    """The plan's placement section and the devices of its rounds' grants (and the admission
    results of an admission-ordering policy)."""
    fill_admission_response(plan, out)
    placed = plan.placement
    if placed is None:
        return
    topology = topology_of(problem.cluster)
    ids = topology.device_ids
    node_names = problem.cluster.node_names or tuple(
        topology.domain_names[d] for d in topology.node_domain)
    _summary(placed, problem, out.placement)
    for i, entry in enumerate(out.jobs):
        job = placed.jobs[i] if i < len(placed.jobs) else None
        if job is None:
            continue
        msg = entry.placement
        msg.placed = job.placed
        msg.reason = job.reason
        msg.devices.extend(ids[d] for d in job.devices)
        msg.node_devices.update({node_names[v]: k for v, k in job.node_devices})
        msg.kept, msg.migrated, msg.resized = job.kept, job.migrated, job.resized
        msg.preempted = job.preempted
        msg.time_shift_s = job.time_shift_s
        msg.cost = job.cost
        msg.widest_level = DomainLevel(job.widest_level).name.lower() if job.widest_level else ""
        msg.link_score = job.link_score
    grants = [g for r in plan.shares.rounds for g in r.grants]
    wire = [g for r in out.rounds for g in r.grants]
    for grant, msg_grant in zip(grants, wire, strict=True):
        msg_grant.device_ids.extend(ids[d] for d in grant.devices_placed)


def _summary(placed: PlacementSection, problem: Problem, msg: service_pb.PlacementSummary
             ) -> None:
    msg.placer = placed.placer
    msg.termination = service_pb.TerminationReason.Value(
        f"TERMINATION_REASON_{placed.termination.name}")
    if placed.objective is not None:
        msg.objective = placed.objective
    if placed.bound is not None:
        msg.best_bound = placed.bound
    if placed.gap is not None and math.isfinite(placed.gap):
        msg.relative_gap = placed.gap
    msg.placed_value = placed.placed_value
    msg.placed_value_bound = placed.placed_value_bound
    msg.jobs_placed = placed.jobs_placed
    msg.jobs_not_placed = placed.jobs_not_placed
    msg.objective_terms.update(placed.objective_terms)
    msg.free_domains.update({DomainLevel(k).name.lower(): v
                             for k, v in placed.free_domains.items()})
    for c in placed.compared:
        msg.compared.add(placer=c.placer, placed_value=c.placed_value, jobs_placed=c.jobs_placed,
                         objective=c.objective, objective_difference=c.objective_difference,
                         detail=c.detail)
    msg.detail = placed.detail
    msg.solve_time_s = placed.solve_time_s
    size = placed.model_size
    msg.model_size.variables = size.variables
    msg.model_size.constraints = size.constraints
    msg.model_size.nonzeros = size.nonzeros
    msg.model_size.integer_variables = size.integer_variables
    if placed.shift_overflow is not None:
        msg.shift_overflow = placed.shift_overflow
    if placed.shift_overflow_bound is not None:
        msg.shift_overflow_bound = placed.shift_overflow_bound
    msg.shift_period_s = placed.shift_period_s
    for slack in placed.quota_slack:
        msg.quota_slack.add(accelerator_type=problem.cluster.type_names[slack.type_index],
                            level=_LEVEL_TO_WIRE[DomainLevel(slack.level)],
                            slack_devices=slack.slack_devices)


# tiresias -----------------------------------------------------------------------------------

_TIRESIAS_MODE = {
    policy_pb.TIRESIAS_MODE_UNSPECIFIED: TiresiasMode.LAS,
    policy_pb.TIRESIAS_MODE_LAS: TiresiasMode.LAS,
    policy_pb.TIRESIAS_MODE_GITTINS: TiresiasMode.GITTINS,
}
_TIRESIAS_SERVICE = {
    policy_pb.TIRESIAS_SERVICE_UNSPECIFIED: TiresiasService.GPU_TIME,
    policy_pb.TIRESIAS_SERVICE_GPU_TIME: TiresiasService.GPU_TIME,
    policy_pb.TIRESIAS_SERVICE_TIME: TiresiasService.TIME,
}
_TIRESIAS_ADMISSION = {
    policy_pb.TIRESIAS_ADMISSION_UNSPECIFIED: TiresiasAdmission.COUNT,
    policy_pb.TIRESIAS_ADMISSION_COUNT: TiresiasAdmission.COUNT,
    policy_pb.TIRESIAS_ADMISSION_PLACEMENT: TiresiasAdmission.PLACEMENT,
}
MAX_SERVICE_SAMPLES = 100_000


def _tiresias(msg: policy_pb.TiresiasParameters, violations: list[Violation]) -> object:
    p = "policy.tiresias"
    thresholds = tuple(float(t) for t in msg.thresholds) or TIRESIAS_THRESHOLDS
    if any(not (_finite(t) and t > 0) for t in thresholds) or any(
        b <= a for a, b in itertools.pairwise(thresholds)
    ):
        violations.append(Violation(f"{p}.thresholds", "must be finite, > 0 and increasing"))
        thresholds = TIRESIAS_THRESHOLDS
    knob = msg.promote_knob
    _nonnegative(knob, f"{p}.promote_knob", violations)
    samples = tuple(float(x) for x in msg.service_samples)
    if len(samples) > MAX_SERVICE_SAMPLES:
        violations.append(Violation(f"{p}.service_samples",
                                    f"at most {MAX_SERVICE_SAMPLES} samples"))
        samples = ()
    for k, x in enumerate(samples):
        if not (_finite(x) and x > 0):
            violations.append(Violation(f"{p}.service_samples[{k}]",
                                        f"must be finite and > 0, got {x}"))
            break
    mode = _enum(msg.mode, _TIRESIAS_MODE, f"{p}.mode", violations)
    if mode is TiresiasMode.GITTINS and not samples:
        violations.append(Violation(f"{p}.service_samples", "2D-Gittins needs service samples"))
    quantum = msg.gittins_quantum if msg.HasField("gittins_quantum") else 0.0
    if msg.HasField("gittins_quantum") and not (_finite(quantum) and quantum > 0):
        violations.append(Violation(f"{p}.gittins_quantum", f"must be finite and > 0, got "
                                    f"{quantum}"))
        quantum = 0.0
    skew = msg.consolidate_skew_above
    _nonnegative(skew, f"{p}.consolidate_skew_above", violations)
    return TiresiasParameters(
        mode=mode,
        service=_enum(msg.service, _TIRESIAS_SERVICE, f"{p}.service", violations),
        thresholds=thresholds,
        promote_knob=float(knob) if _finite(knob) and knob > 0 else 0.0,
        service_samples=samples,
        gittins_quantum=float(quantum),
        admission=_enum(msg.admission, _TIRESIAS_ADMISSION, f"{p}.admission", violations),
        consolidate_skew_above=float(skew) if _finite(skew) and skew > 0 else 0.0,
    )


tiresias_parameters: dict[str, Callable[[Any, list[Violation]], object]] = {
    policy_pb.TiresiasParameters.DESCRIPTOR.full_name: _tiresias,
}
"""`Policy.parameters` message (full name) -> its converter."""


def fill_admission_response(plan: Plan, out: service_pb.Plan) -> None:
    """Per job, the admission-ordering policy's queue, rank, index and state (the section's
    columns read as Python lists once)."""
    section = plan.admission
    if section is None:
        return
    rows = zip(out.jobs, section.offered.tolist(), section.admitted.tolist(),
               section.queue.tolist(), section.rank.tolist(), section.priority_index.tolist(),
               section.attained_service.tolist(), section.promoted.tolist(),
               section.executed_time_s.tolist(), section.waiting_time_s.tolist(), strict=True)
    for entry, offered, admitted, queue, rank, index, service, promoted, ran, waited in rows:
        if not offered:
            continue
        msg = entry.admission
        msg.admitted = admitted
        msg.queue = queue
        msg.rank = rank
        msg.priority_index = index
        msg.attained_service = service
        msg.promoted = promoted
        msg.executed_time_s = ran
        msg.waiting_time_s = waited
