"""Compat placers: the published greedy placers, quirks included, on the stage's demands.

Demands are visited in the instance's order (the policy's priority order). Running demands
that can keep their devices hold them from the start (every system here leaves a running job
where it is unless it preempts it). Each placer returns an `Assignment` judged on the exact
placer's objective (`objective.evaluate`); the exact placer takes their answers as starts, so
it is never worse on that objective.

* `blox_consolidated`, `blox_scattered` (D10, code: msr-fiddle/blox@c8851b2): pending jobs in
  order; consolidated uses only a node whose free count equals the request exactly (quirk 1:
  the best-fit fallback writes a misspelled variable), scattered takes up to s devices from
  each node in order without counting what it has and fails when it overshoots (quirk 2);
  when a job cannot be placed, running lower-priority jobs are terminated from the bottom of
  the order one at a time until it fits, and stay terminated if it never does (quirk 3); the
  first job that cannot be placed stops the walk (quirk 4, head-of-line blocking).
* `tiresias_yarn` (D1, code: SymbioticLab/Tiresias@959f9b0): all of a job inside one rack
  (switch), racks in order; a job no larger than a node takes the first node that fits, a
  larger one floor(s/G) idle nodes and one node for the remainder; a job that does not fit
  is skipped (skip-fit).
* `lucid_consolidate` (D8, read only): a job no larger than a node takes the fullest node
  that fits; a larger one whole free nodes in order and one node (fullest that fits) for the
  remainder.
* `sia_bfd` (A5.6): Sia's best-fit decreasing (`sia_configs.place`).
* `gavel_servers` (A2.11): Gavel's round placement (`rounds.place_on_nodes`).
* `hived_buddy` (D2): buddy cells on the domain tree: the lowest level with a domain holding
  the job, the domain with the fewest free devices there (keeping larger free cells whole),
  recursively down to devices (the lowest common ancestor pick), FIFO without blocking.
* `mapa_*` (D3, code: socal-ucr/MAPA@15e58ab): FIFO with head-of-line blocking; the first node
  with enough free devices (larger jobs: whole nodes in order and the first node holding the
  remainder); inside a node the policy picks the pattern: `baseline` the lowest free devices,
  `topo_aware` the lowest inside one socket (or innermost domain) when possible, `greedy` the
  best bandwidth score, `preserve` the best predicted bandwidth for bandwidth-sensitive jobs
  and otherwise the most NVLink bandwidth left among the remaining free devices (ties: best
  bandwidth score), `min_score` as preserve but a sensitive job waits unless it gets an ideal
  score.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from apportion.formulations.placement.hived import lca_pick
from apportion.formulations.placement.instance import Assignment, PlacementInstance
from apportion.formulations.placement.patterns import (
    NO_LINK,
    PCIE_CLASS,
    PatternScorer,
    mapa_predicted_bandwidth,
)
from apportion.formulations.placement.seed import can_keep
from apportion.formulations.placement.state import FreeState
from apportion.formulations.rounds import place_on_nodes
from apportion.formulations.sia_configs import Configuration, NodeLayout
from apportion.formulations.sia_configs import place as sia_place
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import IntArray
from apportion.solver.stages import PatternScore, Placer
from apportion.solver.topology import CommunicationPattern, DomainLevel

NOT_REACHED = "not reached: an earlier job could not be placed (head-of-line blocking)"


def _keep_running(instance: PlacementInstance, state: FreeState) -> list[tuple[int, ...]]:
    """Running demands that can keep exactly their devices take them first."""
    devices: list[tuple[int, ...]] = [()] * instance.num_demands
    for r, demand in enumerate(instance.demands):
        if demand.previous and len(demand.previous) == demand.devices and \
                can_keep(instance, state, r):
            devices[r] = state.take_devices(r, demand.previous)
    return devices


def _take_pairs(state: FreeState, r: int, pairs: list[tuple[int, int]],
                prefer: tuple[int, ...] = ()) -> tuple[int, ...]:
    out: list[int] = []
    for node, count in pairs:
        out.extend(state.take(r, node, count, prefer))
    return tuple(out)


def _span_ok(instance: PlacementInstance, r: int, pairs: list[tuple[int, int]]) -> bool:
    """The nodes respect the demand's span limit and exact node count."""
    demand = instance.demands[r]
    nodes = [v for v, _ in pairs]
    if demand.nodes and len(nodes) != demand.nodes:
        return False
    if demand.max_span_level:
        if demand.max_span_level <= DomainLevel.NODE and len(nodes) > 1:
            return False
        for level in instance.node_levels:
            if level.value >= demand.max_span_level:
                anc = instance.node_ancestor[nodes, level.value]
                if np.unique(anc[anc >= 0]).size > 1:
                    return False
    return True


def _idle_then_rest(
    nodes: list[int], avail: IntArray, size: IntArray, s: int, fullest: bool
) -> list[tuple[int, int]] | None:
    """Idle nodes (all devices free) in order while the rest needs at least a whole node,
    then one node for the remainder: the first that holds it, or the fullest (`fullest`)."""
    pairs: list[tuple[int, int]] = []
    left = s
    for v in nodes:
        if avail[v] == size[v] > 0 and size[v] <= left:
            pairs.append((v, int(size[v])))
            left -= int(size[v])
    if left:
        used = {v for v, _ in pairs}
        rest = [v for v in nodes if v not in used and avail[v] >= left]
        if not rest:
            return None
        last = min(rest, key=lambda v: (avail[v], v)) if fullest else rest[0]
        pairs.append((last, left))
    return pairs


def _result(devices: list[tuple[int, ...]], reasons: list[str]) -> Assignment:
    return Assignment(tuple(devices), tuple(
        "" if d else (why or "no placement found by this placer")
        for d, why in zip(devices, reasons, strict=True)
    ))


# Blox ---------------------------------------------------------------------------------------

def _blox(instance: PlacementInstance, consolidated: bool, deadline: Deadline) -> Assignment:
    state = FreeState(instance)
    devices = _keep_running(instance, state)
    reasons = [""] * instance.num_demands
    order = list(range(instance.num_demands))
    blocked = False
    for idx, r in enumerate(order):
        if blocked or deadline.expired():
            reasons[r] = reasons[r] or NOT_REACHED
            continue
        if devices[r]:
            continue  # running: keeps its devices
        found = _blox_find(instance, state, r, consolidated)
        if found is None:  # terminate running lower-priority jobs from the bottom (quirk 3)
            for victim in reversed(order[idx + 1 :]):
                if devices[victim]:
                    state.release(devices[victim])
                    devices[victim] = ()
                    reasons[victim] = "terminated by Blox to make room for a higher-priority job"
                    found = _blox_find(instance, state, r, consolidated)
                    if found is not None:
                        break
        if found is None:
            reasons[r] = ("no node with exactly the requested free devices" if consolidated
                          else "first nodes in order overshoot the request")
            blocked = True  # quirk 4
            continue
        devices[r] = _take_pairs(state, r, found)
    return _result(devices, reasons)


def _blox_find(
    instance: PlacementInstance, state: FreeState, r: int, consolidated: bool
) -> list[tuple[int, int]] | None:
    s = instance.demands[r].devices
    avail = state.node_avail(r)
    nodes = np.flatnonzero(avail > 0).tolist()
    if consolidated:
        for v in nodes:  # only an exact match is ever used (quirk 1)
            if avail[v] == s and _span_ok(instance, r, [(v, s)]):
                return [(v, s)]
        return None
    taken: list[tuple[int, int]] = []
    total = 0
    for v in nodes:  # up to s from every node, without subtracting (quirk 2)
        k = min(int(avail[v]), s)
        taken.append((v, k))
        total += k
        if total == s:
            return taken if _span_ok(instance, r, taken) else None
    return None


def blox_consolidated(instance: PlacementInstance, deadline: Deadline = NO_DEADLINE
                      ) -> Assignment:
    return _blox(instance, True, deadline)


def blox_scattered(instance: PlacementInstance, deadline: Deadline = NO_DEADLINE) -> Assignment:
    return _blox(instance, False, deadline)


# Tiresias -----------------------------------------------------------------------------------

def tiresias_yarn(instance: PlacementInstance, deadline: Deadline = NO_DEADLINE) -> Assignment:
    state = FreeState(instance)
    devices = _keep_running(instance, state)
    reasons = [""] * instance.num_demands
    upper = [lv for lv in instance.node_levels if lv > DomainLevel.NODE]
    switch = instance.node_ancestor[:, upper[0].value] if upper else \
        np.zeros(len(instance.topology.node_domain), np.int64)
    size = np.bincount(instance.topology.device_node, minlength=switch.size)
    for r in range(instance.num_demands):
        if devices[r]:
            continue
        if deadline.expired():
            reasons[r] = "time limit reached"
            continue
        s = instance.demands[r].devices
        avail = state.node_avail(r)
        found = None
        groups = np.unique(switch[avail >= min(s, int(size.max(initial=1)))])
        for group in groups.tolist():  # switches with a node that could start it
            members = np.flatnonzero(switch == group)
            found = _yarn_in_switch(members, avail, size, s)
            if found is not None and _span_ok(instance, r, found):
                break
            found = None
        if found is None:
            reasons[r] = "no rack with a node (or idle nodes and one more) holding it"
            continue  # skip-fit
        devices[r] = _take_pairs(state, r, found)
    return _result(devices, reasons)


def _yarn_in_switch(
    members: IntArray, avail: IntArray, size: IntArray, s: int
) -> list[tuple[int, int]] | None:
    per_node = int(size[members].max()) if members.size else 0
    if per_node == 0:
        return None
    if s <= per_node:
        for v in members.tolist():
            if avail[v] >= s:
                return [(v, s)]
        return None
    return _idle_then_rest(members.tolist(), avail, size, s, fullest=False)


# Lucid --------------------------------------------------------------------------------------

def lucid_consolidate(instance: PlacementInstance, deadline: Deadline = NO_DEADLINE
                      ) -> Assignment:
    state = FreeState(instance)
    devices = _keep_running(instance, state)
    reasons = [""] * instance.num_demands
    size = np.bincount(instance.topology.device_node,
                       minlength=len(instance.topology.node_domain))
    for r in range(instance.num_demands):
        if devices[r] or deadline.expired():
            continue
        s = instance.demands[r].devices
        avail = state.node_avail(r)
        found: list[tuple[int, int]] | None = None
        fits = np.flatnonzero(avail >= s)
        if fits.size:
            v = int(fits[np.lexsort((fits, avail[fits]))][0])
            found = [(v, s)]
        elif s > int(size.max(initial=0)):
            found = _idle_then_rest(list(range(size.size)), avail, size, s, fullest=True)
        if found is None or not _span_ok(instance, r, found):
            reasons[r] = "no node (or whole nodes) holding it"
            continue
        devices[r] = _take_pairs(state, r, found)
    return _result(devices, reasons)


# Sia and Gavel ------------------------------------------------------------------------------

def sia_bfd(instance: PlacementInstance, deadline: Deadline = NO_DEADLINE) -> Assignment:
    """Sia's best-fit decreasing on the nodes' free devices (demands' exact node counts are
    their configurations; 0 = one node)."""
    del deadline
    topo = instance.topology
    state = FreeState(instance)
    devices = _keep_running(instance, state)
    nodes = len(topo.node_domain)
    node_type = np.zeros(nodes, np.int64)
    node_type[topo.device_node] = topo.device_type
    size = np.bincount(topo.device_node, minlength=nodes).astype(np.int64)
    layout = NodeLayout(node_type, size, tuple(str(v) for v in range(nodes)))
    pending = [r for r in range(instance.num_demands) if not devices[r]]
    configs = tuple(Configuration(instance.demands[r].type_index,
                                  max(1, instance.demands[r].nodes),
                                  instance.demands[r].devices) for r in pending)
    free = np.bincount(topo.device_node[state.avail], minlength=nodes).astype(np.int64)
    result = sia_place(layout, configs, np.arange(len(pending)), free_devices=free)
    reasons = [""] * instance.num_demands
    for k, r in enumerate(pending):
        pairs = [] if k in result.failed else list(result.nodes[k])
        devices[r], reasons[r] = _take_checked(
            instance, state, r, pairs, "best-fit decreasing found no nodes for its configuration")
    return _result(devices, reasons)


def _take_checked(
    instance: PlacementInstance, state: FreeState, r: int, pairs: list[tuple[int, int]],
    failure: str,
) -> tuple[tuple[int, ...], str]:
    """(devices, "") when the (node, devices) pairs hold demand r within its limits and its
    eligible free devices, else ((), why)."""
    if sum(c for _, c in pairs) != instance.demands[r].devices or \
            not _span_ok(instance, r, pairs):
        return (), failure
    avail = state.node_avail(r)
    if any(avail[v] < c for v, c in pairs):
        return (), "its nodes' free devices are not eligible for it"
    return _take_pairs(state, r, pairs, instance.demands[r].previous), ""


def gavel_servers(instance: PlacementInstance, deadline: Deadline = NO_DEADLINE) -> Assignment:
    """Gavel's round placement per type: leases (running demands' previous nodes) first,
    then best fit, else fewest nodes."""
    del deadline
    topo = instance.topology
    state = FreeState(instance)
    devices: list[tuple[int, ...]] = [()] * instance.num_demands
    reasons = [""] * instance.num_demands
    for j in sorted({d.type_index for d in instance.demands}):
        mine = [r for r, d in enumerate(instance.demands) if d.type_index == j]
        free_all = np.bincount(topo.device_node[state.avail & (topo.device_type == j)],
                               minlength=len(topo.node_domain))
        free = {int(v): int(free_all[v]) for v in np.flatnonzero(free_all > 0)}
        previous = {}
        for r in mine:
            demand = instance.demands[r]
            nodes = demand.previous_nodes or tuple(
                dict.fromkeys(topo.device_node[list(demand.previous)].tolist()))
            if nodes:
                previous[r] = tuple(int(v) for v in nodes)
        placed, _ = place_on_nodes(free, [(r, instance.demands[r].devices) for r in mine],
                                   previous)
        for r in mine:
            pairs = [(v, c) for v, c in placed.get(r, ()) if c > 0]
            devices[r], reasons[r] = _take_checked(instance, state, r, pairs,
                                                   "not enough free devices of its type")
    return _result(devices, reasons)


# HiveD --------------------------------------------------------------------------------------

def hived_buddy(instance: PlacementInstance, deadline: Deadline = NO_DEADLINE) -> Assignment:
    state = FreeState(instance)
    devices = _keep_running(instance, state)
    reasons = [""] * instance.num_demands
    for r in range(instance.num_demands):
        if devices[r] or deadline.expired():
            continue
        picked = _buddy(instance, state, r)
        if picked is None:
            reasons[r] = "no cell holds it"
            continue
        devices[r] = state.take_devices(r, picked)
    return _result(devices, reasons)


def _buddy(instance: PlacementInstance, state: FreeState, r: int) -> tuple[int, ...] | None:
    """HiveD's pick for demand r: the lowest common ancestor by best fit (`hived.lca_pick`)
    within its span limit and exact node count."""
    topo = instance.topology
    demand = instance.demands[r]
    ok = state.avail & instance.eligible[r]
    ok &= ~state.exclusive_node[topo.device_node]
    if demand.exclusive:
        ok &= state.node_users[topo.device_node] == 0
    limit = demand.max_span_level or DomainLevel.CLUSTER.value + 1
    picked = lca_pick(topo, ok, demand.devices, limit)
    if picked is None:
        return None
    if demand.nodes and np.unique(topo.device_node[list(picked)]).size != demand.nodes:
        return None
    return picked


# MAPA ---------------------------------------------------------------------------------------

def _mapa(instance: PlacementInstance, policy: str, deadline: Deadline) -> Assignment:
    topo = instance.topology
    scorer = PatternScorer(topo, instance.pattern_score)
    state = FreeState(instance)
    devices = _keep_running(instance, state)
    reasons = [""] * instance.num_demands
    blocked = False
    size = np.bincount(topo.device_node, minlength=len(topo.node_domain))
    for r in range(instance.num_demands):
        if devices[r]:
            continue
        if blocked or deadline.expired():
            reasons[r] = NOT_REACHED
            continue
        demand = instance.demands[r]
        s = demand.devices
        avail = state.node_avail(r)
        picked: tuple[int, ...] | None = None
        fits = np.flatnonzero(avail >= s).tolist() if _span_ok(instance, r, [(0, s)]) else []
        for v in fits:
            picked = _mapa_pick(instance, scorer, state, r, v, policy)
            if picked is not None:
                break
        if picked is None and not fits and s > int(size.max(initial=0)):
            pairs = _idle_then_rest(list(range(size.size)), avail, size, s, fullest=False)
            if pairs is not None and _span_ok(instance, r, pairs):
                devices[r] = _take_pairs(state, r, pairs)
                continue
        if picked is None:
            reasons[r] = "no pattern for it on the first node that fits (MAPA's queue waits)"
            blocked = True
            continue
        devices[r] = state.take_devices(r, picked)
    return _result(devices, reasons)


def _mapa_pick(
    instance: PlacementInstance, scorer: PatternScorer, state: FreeState, r: int, v: int,
    policy: str,
) -> tuple[int, ...] | None:
    """The pattern MAPA's `policy` picks on node v (global device indices), None = none."""
    topo = instance.topology
    demand = instance.demands[r]
    s = demand.devices
    local = topo.node_devices[v]
    ok = state.avail[local] & instance.eligible[r][local]
    free_mask = int(np.left_shift(1, np.flatnonzero(ok)).sum())
    if s == 1 or policy == "baseline":
        pick = np.flatnonzero(ok)[:s]
        return tuple(int(local[d]) for d in pick) if pick.size == s else None
    pattern = demand.pattern if demand.pattern is not CommunicationPattern.NONE else \
        CommunicationPattern.ALL_TO_ALL
    table = scorer.table(v, s, pattern)
    allowed = np.flatnonzero((table.masks & ~free_mask) == 0)
    if allowed.size == 0:
        return None
    if policy == "topo_aware":
        inner = instance.inner_levels
        if inner:
            column = topo.ancestors[local, inner[-1].value]
            same = [k for k in allowed.tolist()
                    if np.unique(column[table.members[k]]).size == 1]
            if same:
                return tuple(int(local[d]) for d in table.order[same[0]])
        return tuple(int(local[d]) for d in table.order[allowed[0]])
    raw = _bandwidth_scores(scorer, v, s, pattern)
    if policy == "greedy":
        best = allowed[np.argmax(raw[allowed])]
        return tuple(int(local[d]) for d in table.order[best])
    sensitive = demand.bandwidth_sensitive and s > 1
    if sensitive:
        predicted = _predicted_scores(scorer, v, s, pattern)
        best = allowed[np.argmax(predicted[allowed])]
        if policy == "min_score" and raw[best] < raw.max() - 1e-9:
            return None
        return tuple(int(local[d]) for d in table.order[best])
    links = scorer.links(v)
    nvlink = np.where(links.edge_class > PCIE_CLASS, links.bandwidth, 0.0)
    keys = []
    for k in allowed.tolist():
        rest = [d for d in np.flatnonzero(ok).tolist() if not (int(table.masks[k]) >> d) & 1]
        keep = float(nvlink[np.ix_(rest, rest)].sum() / 2) if rest else 0.0
        keys.append((keep, float(raw[k])))
    best = allowed[max(range(len(keys)), key=keys.__getitem__)]
    return tuple(int(local[d]) for d in table.order[best])


def _bandwidth_scores(scorer: PatternScorer, v: int, s: int,
                      pattern: CommunicationPattern) -> np.ndarray:
    if scorer.kind is PatternScore.BANDWIDTH:
        return scorer.table(v, s, pattern).raw
    return PatternScorer(scorer.topology, PatternScore.BANDWIDTH).table(v, s, pattern).raw


def _predicted_scores(scorer: PatternScorer, v: int, s: int,
                      pattern: CommunicationPattern) -> np.ndarray:
    links = scorer.links(v)
    table = scorer.table(v, s, pattern)
    order = table.order
    if pattern is CommunicationPattern.RING_ALLREDUCE:
        a, b = order, np.roll(order, -1, axis=1)
    else:
        pairs = np.array([(i, j) for i in range(s) for j in range(i + 1, s)], np.int64)
        a, b = order[:, pairs[:, 0]], order[:, pairs[:, 1]]
    cls = links.edge_class[a, b]
    cls = np.where(cls == NO_LINK, PCIE_CLASS, cls)
    return mapa_predicted_bandwidth((cls == 3).sum(axis=1), (cls == 2).sum(axis=1),
                                    (cls == PCIE_CLASS).sum(axis=1))


COMPAT_PLACERS: dict[Placer, Callable[[PlacementInstance, Deadline], Assignment]] = {
    Placer.BLOX_CONSOLIDATED: blox_consolidated,
    Placer.BLOX_SCATTERED: blox_scattered,
    Placer.TIRESIAS_YARN: tiresias_yarn,
    Placer.LUCID_CONSOLIDATE: lucid_consolidate,
    Placer.SIA_BFD: sia_bfd,
    Placer.GAVEL_SERVERS: gavel_servers,
    Placer.HIVED_BUDDY: hived_buddy,
    Placer.MAPA_BASELINE: lambda inst, dl: _mapa(inst, "baseline", dl),
    Placer.MAPA_TOPO_AWARE: lambda inst, dl: _mapa(inst, "topo_aware", dl),
    Placer.MAPA_GREEDY: lambda inst, dl: _mapa(inst, "greedy", dl),
    Placer.MAPA_PRESERVE: lambda inst, dl: _mapa(inst, "preserve", dl),
    Placer.MAPA_MIN_SCORE: lambda inst, dl: _mapa(inst, "min_score", dl),
}
"""Every compat placer by name."""
