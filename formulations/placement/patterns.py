"""Intra-node link scores of device subsets (D3 MAPA, D4 topology-aware placement).

A node's links (NVLink, PCIe peer-to-peer, ...) give a bandwidth between every pair of its
devices (0 = no direct link). A job's *pattern* says which pairs it uses: a ring all-reduce
uses consecutive devices of a cyclic order (the best order is chosen), all-to-all and
parameter-server jobs every pair, a pipeline consecutive devices of a path. The raw score of a
device subset is the bandwidth summed over the pattern's edges (MAPA's bandwidth score); the
score placement uses is the raw score divided by the best raw score of any subset of the same
size on that node, so 1 = the best pattern for the size (MAPA's normalized score). A node
without links, a job without communication and a single device score 1.

`PATTERN_SCORE_PREDICTED` replaces the bandwidth sum by MAPA's fitted model of achieved
bandwidth from the numbers of double-NVLink, single-NVLink and PCIe edges (pairs without a
link count as PCIe, as MAPA's complete hardware graphs do).

Exact for subsets of up to `EXACT_ORDER_MAX` devices (every cyclic order is tried); larger
rings and pipelines take a nearest-neighbour order (a heuristic score), except on nodes whose
pairs all have the same bandwidth, where every order is equal.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cache

import numpy as np

from apportion.solver.model import FloatArray, IntArray
from apportion.solver.stages import PatternScore
from apportion.solver.topology import CommunicationPattern, LinkKind, Topology

EXACT_ORDER_MAX = 8
"""Largest subset whose ring / pipeline order is found by trying every order."""

MAPA_PREDICTED_COEFFICIENTS: tuple[float, ...] = (
    16.39670455, 4.536821878, 1.55623404,
    -20.69484581, -9.467461958, 7.615106783,
    -7.973335727, 12.73323772, -4.195655221,
    -8.413419363, 62.85125807, 27.41832588,
    -5.114108079, -46.97390071,
)
"""MAPA's fitted achieved-bandwidth model (socal-ucr/MAPA, BSD-3-Clause, SC'21), in the order:
linear (double, single, PCIe), inverse linear, pairwise (double x single, single x PCIe,
double x PCIe), inverse pairwise (same pairs), triple, inverse triple."""

NO_LINK, PCIE_CLASS, SINGLE_NVLINK, DOUBLE_NVLINK = 0, 1, 2, 3
"""Edge classes of the predicted model."""


def mapa_predicted_bandwidth(
    double: FloatArray | float, single: FloatArray | float, pcie: FloatArray | float
) -> FloatArray:
    """MAPA's predicted bandwidth (GB/s as fitted) for patterns with these numbers of
    double-NVLink, single-NVLink and PCIe edges (arrays broadcast)."""
    c = MAPA_PREDICTED_COEFFICIENTS
    x1, x2, x3 = (np.asarray(x, np.float64) for x in (double, single, pcie))
    return np.asarray(
        c[0] * x1 + c[1] * x2 + c[2] * x3
        + c[3] / (x1 + 1) + c[4] / (x2 + 1) + c[5] / (x3 + 1)
        + c[6] * x1 * x2 + c[7] * x2 * x3 + c[8] * x1 * x3
        + c[9] / (x1 * x2 + 1) + c[10] / (x2 * x3 + 1) + c[11] / (x1 * x3 + 1)
        + c[12] * x1 * x2 * x3 + c[13] / (x1 * x2 * x3 + 1)
    )


@dataclass(frozen=True)
class NodeLinks:
    """One node's links as dense matrices over its local device indices."""

    bandwidth: FloatArray
    """(n, n) symmetric Gb/s between local devices (0 = no direct link)."""
    edge_class: IntArray
    """(n, n) NO_LINK, PCIE_CLASS, SINGLE_NVLINK or DOUBLE_NVLINK."""

    @property
    def size(self) -> int:
        return int(self.bandwidth.shape[0])

    @property
    def uniform(self) -> bool:
        """Every pair has the same bandwidth (or the node has no links)."""
        n = self.size
        if n < 2:
            return True
        upper = self.bandwidth[np.triu_indices(n, 1)]
        return bool(np.all(upper == upper[0]))


@dataclass(frozen=True)
class SubsetTable:
    """Every k-subset of a node's local devices with its scores."""

    members: IntArray
    """(S, k) local device indices of each subset, ascending."""
    masks: IntArray
    """(S,) bitmask of each subset."""
    raw: FloatArray
    """(S,) raw score (bandwidth sum or predicted bandwidth)."""
    score: FloatArray
    """(S,) raw / the best raw of the table (1 when the best is 0)."""
    order: IntArray
    """(S, k) the subset's devices in the best order (ring or pipeline)."""


@cache
def cyclic_orders(k: int) -> IntArray:
    """(O, k) every cyclic order of range(k) once: 0 first, and each reflection once."""
    if k <= 2:
        return np.arange(k, dtype=np.int64)[None, :]
    rows = [
        (0, *rest)
        for rest in itertools.permutations(range(1, k))
        if rest[0] < rest[-1]
    ]
    return np.asarray(rows, np.int64)


@cache
def path_orders(k: int) -> IntArray:
    """(O, k) every path order of range(k) once (each reversal once)."""
    if k <= 1:
        return np.arange(k, dtype=np.int64)[None, :]
    rows = [p for p in itertools.permutations(range(k)) if p[0] < p[-1]]
    return np.asarray(rows, np.int64)


@cache
def subsets(n: int, k: int) -> IntArray:
    """(C(n, k), k) every k-subset of range(n), lexicographic."""
    if k > n or k < 0:
        return np.zeros((0, max(k, 0)), np.int64)
    if k == 0:
        return np.zeros((1, 0), np.int64)
    return np.asarray(list(itertools.combinations(range(n), k)), np.int64).reshape(-1, k)


def _edges(pattern: CommunicationPattern, k: int) -> tuple[IntArray, IntArray, IntArray]:
    """Orders to try and the (O, E) position pairs of the pattern's edges in each order."""
    if pattern is CommunicationPattern.RING_ALLREDUCE:
        orders = cyclic_orders(k)
        a = np.arange(k)
        b = (a + 1) % k
        if k == 2:  # a two-device ring runs both ways over the one pair
            a, b = np.array([0, 1]), np.array([1, 0])
        return orders, a, b
    if pattern is CommunicationPattern.PIPELINE:
        orders = path_orders(k)
        return orders, np.arange(k - 1), np.arange(1, k)
    pairs = np.array(list(itertools.combinations(range(k), 2)), np.int64).reshape(-1, 2)
    return np.arange(k, dtype=np.int64)[None, :], pairs[:, 0], pairs[:, 1]


def _nearest_neighbour(members: IntArray, weight: FloatArray) -> IntArray:
    """A heuristic order of each subset: start at its first device, go to the unvisited device
    with the largest bandwidth from the current one."""
    out = np.empty_like(members)
    for s, row in enumerate(members):
        left = list(row[1:])
        current = int(row[0])
        order = [current]
        while left:
            best = max(left, key=lambda d: (weight[current, d], -d))
            left.remove(best)
            order.append(best)
            current = best
        out[s] = order
    return out


class PatternScorer:
    """Scores of device subsets on the nodes of one topology, cached per distinct link
    structure (nodes wired alike share their tables)."""

    def __init__(self, topology: Topology, kind: PatternScore = PatternScore.BANDWIDTH) -> None:
        self.topology = topology
        self.kind = kind
        self._structure: dict[int, int] = {}
        self._links: list[NodeLinks] = []
        self._keys: dict[tuple[object, ...], int] = {}
        self._tables: dict[tuple[int, int, CommunicationPattern], SubsetTable] = {}
        self._node_links = self._group_links()

    def _group_links(self) -> dict[int, list[tuple[int, int, float, LinkKind]]]:
        topo = self.topology
        out: dict[int, list[tuple[int, int, float, LinkKind]]] = {}
        for e in range(topo.link_a.size):
            a, b = int(topo.link_a[e]), int(topo.link_b[e])
            v = int(topo.device_node[a])
            local_a, local_b = int(topo.device_index[a]), int(topo.device_index[b])
            out.setdefault(v, []).append(
                (min(local_a, local_b), max(local_a, local_b), float(topo.link_gbps[e]),
                 topo.link_kind[e])
            )
        return out

    def structure(self, node: int) -> int:
        """An id shared by nodes with the same device count and links."""
        known = self._structure.get(node)
        if known is not None:
            return known
        n = len(self.topology.node_devices[node])
        links = tuple(sorted(self._node_links.get(node, [])))
        key = (n, links)
        sid = self._keys.get(key)
        if sid is None:
            sid = len(self._links)
            self._keys[key] = sid
            self._links.append(_node_links(n, links))
        self._structure[node] = sid
        return sid

    def links(self, node: int) -> NodeLinks:
        return self._links[self.structure(node)]

    def table(self, node: int, k: int, pattern: CommunicationPattern) -> SubsetTable:
        """Every k-subset of the node's local devices with its scores."""
        sid = self.structure(node)
        key = (sid, k, pattern)
        table = self._tables.get(key)
        if table is None:
            table = self._build(self._links[sid], k, pattern)
            self._tables[key] = table
        return table

    def _build(self, links: NodeLinks, k: int, pattern: CommunicationPattern) -> SubsetTable:
        members = subsets(links.size, k)
        masks = np.left_shift(1, members).sum(axis=1).astype(np.int64)
        if k <= 1 or pattern is CommunicationPattern.NONE or members.shape[0] == 0:
            ones = np.ones(members.shape[0])
            return SubsetTable(members, masks, ones, ones, members.copy())
        orders, a, b = _edges(pattern, k)
        ordered_pattern = pattern in (
            CommunicationPattern.RING_ALLREDUCE, CommunicationPattern.PIPELINE
        )
        if ordered_pattern and k > EXACT_ORDER_MAX and not links.uniform:
            chosen = _nearest_neighbour(members, links.bandwidth)
            raw = self._raw(links, chosen[:, None, :], a, b)[:, 0]
            order = chosen
        else:
            arranged = members[:, orders] if ordered_pattern else members[:, None, :]
            if ordered_pattern and links.uniform:
                arranged = members[:, None, :]
            values = self._raw(links, arranged, a, b)
            best = np.argmax(values, axis=1)
            raw = values[np.arange(values.shape[0]), best]
            order = arranged[np.arange(arranged.shape[0]), best]
        top = float(raw.max()) if raw.size else 0.0
        score = raw / top if top > 0 else np.ones_like(raw)
        return SubsetTable(members, masks, raw, np.clip(score, 0.0, 1.0), order)

    def _raw(self, links: NodeLinks, arranged: IntArray, a: IntArray, b: IntArray) -> FloatArray:
        """(S, O) raw score of each subset in each order (arranged: (S, O, k) devices)."""
        first, second = arranged[:, :, a], arranged[:, :, b]
        if self.kind is PatternScore.PREDICTED:
            cls = links.edge_class[first, second]
            cls = np.where(cls == NO_LINK, PCIE_CLASS, cls)
            double = (cls == DOUBLE_NVLINK).sum(axis=2).astype(np.float64)
            single = (cls == SINGLE_NVLINK).sum(axis=2).astype(np.float64)
            pcie = (cls == PCIE_CLASS).sum(axis=2).astype(np.float64)
            return mapa_predicted_bandwidth(double, single, pcie)
        return np.asarray(links.bandwidth[first, second].sum(axis=2))

    def score(
        self, node: int, local: tuple[int, ...], pattern: CommunicationPattern
    ) -> tuple[float, tuple[int, ...]]:
        """(score in [0, 1], best order of the local devices) of one subset on `node`."""
        k = len(local)
        if k <= 1 or pattern is CommunicationPattern.NONE:
            return 1.0, tuple(sorted(local))
        table = self.table(node, k, pattern)
        mask = sum(1 << d for d in local)
        row = int(np.flatnonzero(table.masks == mask)[0])
        return float(table.score[row]), tuple(int(d) for d in table.order[row])


def _node_links(n: int, links: tuple[tuple[int, int, float, LinkKind], ...]) -> NodeLinks:
    bandwidth = np.zeros((n, n))
    nvlink = np.zeros((n, n))
    other = np.zeros((n, n), dtype=bool)
    for a, b, gbps, kind in links:
        bandwidth[a, b] += gbps
        bandwidth[b, a] += gbps
        if kind in (LinkKind.NVLINK, LinkKind.NVSWITCH):
            nvlink[a, b] += gbps
            nvlink[b, a] += gbps
        else:
            other[a, b] = other[b, a] = True
    edge_class = np.where(other, PCIE_CLASS, NO_LINK).astype(np.int64)
    positive = nvlink[nvlink > 0]
    if positive.size:
        smallest = float(positive.min())
        double = nvlink >= 1.5 * smallest
        edge_class = np.where(nvlink > 0, np.where(double, DOUBLE_NVLINK, SINGLE_NVLINK),
                              edge_class)
    return NodeLinks(bandwidth, edge_class)
