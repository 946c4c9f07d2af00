"""The exact placer's first incumbent: keep what can be kept, then best-fit decreasing with
domain awareness. Not a published heuristic; it only has to be good and fast, since the MILP
and the bound decide optimality.

Order: running demands that can keep their devices keep them; then the others by decreasing
devices (ties: higher value, lower index). A demand that
fits in one node takes the node with the fewest free eligible devices that holds it (best
fit); a larger one takes, at the lowest level above NODE where one domain can hold it, the
domain with the least free capacity that can (best fit), and inside it whole nodes in
decreasing free devices (fewest nodes). Span limits, exact node counts and exclusive demands
are respected; a demand that fits nowhere is left unplaced with the reason.
"""

from __future__ import annotations

import numpy as np

from apportion.formulations.placement.instance import Assignment, PlacementInstance
from apportion.formulations.placement.state import FreeState
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import IntArray
from apportion.solver.topology import DomainLevel


def seed_assignment(
    instance: PlacementInstance,
    deadline: Deadline = NO_DEADLINE,
    skip: frozenset[int] = frozenset(),
    first_fit: bool = False,
) -> Assignment:
    """A feasible assignment (module docstring); demands in `skip` are left unplaced.
    `first_fit`: the first node (domain) in index order that holds a demand instead of the
    best-fitting one, and for a multi-node demand idle nodes in order with one node for the
    remainder (packs fragments left by earlier demands differently; the exact placer tries
    both)."""
    state = FreeState(instance)
    count = instance.num_demands
    devices: list[tuple[int, ...]] = [()] * count
    reasons = [""] * count
    pending: list[int] = []
    for r, demand in enumerate(instance.demands):
        if r in skip:
            reasons[r] = "not placed"
            continue
        previous = demand.previous
        if previous and len(previous) == demand.devices and can_keep(instance, state, r):
            devices[r] = state.take_devices(r, previous)
            continue
        pending.append(r)
    pending.sort(key=lambda r: (-instance.demands[r].devices, -instance.demands[r].value, r))
    for r in pending:
        if deadline.expired():
            reasons[r] = "time limit reached before it was placed"
            continue
        placed = place_one(instance, state, r, first_fit)
        if placed:
            devices[r] = placed
        else:
            reasons[r] = "no nodes with enough free eligible devices within its limits"
    return Assignment(tuple(devices), tuple(reasons))


def can_keep(instance: PlacementInstance, state: FreeState, r: int) -> bool:
    """Demand r may take exactly its previous devices now: free, eligible, within its node
    count and span limit, and no exclusive conflict."""
    demand = instance.demands[r]
    topo = instance.topology
    index = np.asarray(demand.previous, np.int64)
    if not (state.avail[index] & instance.eligible[r][index]).all():
        return False
    nodes = np.unique(topo.device_node[index])
    if demand.nodes and nodes.size != demand.nodes:
        return False
    if state.exclusive_node[nodes].any() or (demand.exclusive and state.node_users[nodes].any()):
        return False
    for level in topo.levels_present:
        if demand.max_span_level and level.value >= demand.max_span_level:
            anc = topo.ancestors[index, level.value]
            if np.unique(anc[anc >= 0]).size > 1:
                return False
    return True


def place_one(
    instance: PlacementInstance, state: FreeState, r: int, first_fit: bool = False
) -> tuple[int, ...]:
    """Place demand r in `state` (best fit, or first fit; see `seed_assignment`); () when it
    cannot."""
    demand = instance.demands[r]
    s = demand.devices
    avail = state.node_avail(r)
    prefer = demand.previous
    if demand.nodes <= 1:
        fits = np.flatnonzero(avail >= s)
        if fits.size:
            previous_nodes = instance.topology.device_node[list(prefer)] if prefer \
                else np.asarray(demand.previous_nodes, np.int64)
            elsewhere = ~np.isin(fits, previous_nodes)
            fit = np.zeros(fits.size) if first_fit else avail[fits]
            node = fits[np.lexsort((fits, fit, elsewhere))[0]]
            return state.take(r, int(node), s, prefer)
        if demand.nodes == 1:
            return ()
    if demand.max_span_level and demand.max_span_level <= DomainLevel.NODE:
        return ()
    nodes = _multi_node(instance, avail, r, first_fit)
    if nodes is None:
        return ()
    out: list[int] = []
    left = s
    for v, k in nodes:
        out.extend(state.take(r, v, k, prefer))
        left -= k
    return tuple(out)


def _multi_node(
    instance: PlacementInstance, avail: IntArray, r: int, first_fit: bool = False
) -> list[tuple[int, int]] | None:
    """(node, devices) pairs for a demand spanning nodes: the best-fitting (or first) domain
    at the lowest level that holds it, whole nodes in decreasing free devices (or idle nodes
    in order and one node for the remainder)."""
    demand = instance.demands[r]
    s = demand.devices
    limit = demand.max_span_level or (DomainLevel.CLUSTER.value + 1)
    anc = instance.node_ancestor
    for level in instance.node_levels:
        if level is DomainLevel.NODE:
            continue
        column = anc[:, level.value]
        has = (column >= 0) & (avail > 0)
        caps = np.bincount(column[has], weights=avail[has], minlength=instance.topology.num_domains)
        domains = np.flatnonzero(caps >= s)
        if level.value >= limit and domains.size == 0:
            return None
        if domains.size:
            ordered = sorted(domains.tolist(), key=lambda u: (0 if first_fit else caps[u], u))
            for u in ordered:
                members = np.flatnonzero((column == u) & (avail > 0))
                picked = _idle_first(avail, members, s, instance) if first_fit and \
                    not demand.nodes else None
                picked = picked or _fill(avail, members, s, demand.nodes)
                if picked is not None:
                    return picked
        if level.value >= limit:
            return None
    if demand.max_span_level:
        return None
    return _fill(avail, np.flatnonzero(avail > 0), s, demand.nodes)


def _idle_first(avail: IntArray, nodes: IntArray, need: int,
                instance: PlacementInstance) -> list[tuple[int, int]] | None:
    """Idle nodes in order while the rest needs a whole node, then the first node holding the
    remainder."""
    size = instance.node_free
    pairs: list[tuple[int, int]] = []
    left = need
    for v in nodes.tolist():
        if avail[v] == size[v] > 0 and size[v] <= left:
            pairs.append((v, int(size[v])))
            left -= int(size[v])
    if left:
        used = {v for v, _ in pairs}
        rest = next((v for v in nodes.tolist() if v not in used and avail[v] >= left), None)
        if rest is None:
            return None
        pairs.append((rest, left))
    return pairs


def _fill(avail: IntArray, nodes: IntArray, need: int, exact: int) -> list[tuple[int, int]] | None:
    """Fewest nodes (most free first) holding `need` devices; with `exact` > 0, exactly that
    many nodes, each with at least one device."""
    order = nodes[np.lexsort((nodes, -avail[nodes]))]
    if exact:
        chosen = order[:exact]
        if chosen.size < exact or int(avail[chosen].sum()) < need or need < exact:
            return None
        out = [[int(v), 1] for v in chosen]
        left = need - exact
        for pair in out:
            extra = min(left, int(avail[pair[0]]) - 1)
            pair[1] += extra
            left -= extra
        return [(v, k) for v, k in out]
    out2: list[tuple[int, int]] = []
    left = need
    for v in order.tolist():
        k = min(left, int(avail[v]))
        out2.append((v, k))
        left -= k
        if left == 0:
            return out2
    return None
