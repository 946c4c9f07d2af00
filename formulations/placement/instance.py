"""What the placement stage places (D0.1): demands on a topology with some devices taken.

A `Demand` is one unit to place: usually one job, or several jobs sharing the same devices
(a co-located pair). `PlacementInstance` holds the topology, the demands, the devices held
outside this solve and the weights, with the derived arrays every placer reads (free devices,
eligible devices per demand). Pure: no solver, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from apportion.solver.model import FloatArray, IntArray
from apportion.solver.stages import PatternScore, PlacementWeights
from apportion.solver.topology import (
    LEVELS,
    BoolArray,
    CellQuota,
    CommunicationPattern,
    DomainLevel,
    Topology,
    fill_ancestors,
)

SPAN_COLUMNS = len(LEVELS) + 1
"""Columns of a span table: 0 = crosses nothing, then one per `DomainLevel` value."""


@dataclass(frozen=True)
class Demand:
    """Devices one job (or one group of jobs sharing them) needs from the placement stage."""

    jobs: tuple[int, ...]
    """Job indices that share these devices (one job, or a co-located pair)."""
    type_index: int
    devices: int
    """Devices needed at once (>= 1)."""
    value: float = 1.0
    """Placed value V (> 0): placing more value comes before any cost."""
    nodes: int = 0
    """Exactly this many nodes (a configuration's node count); 0 = any."""
    max_span_level: int = 0
    """Must fit inside one domain of this `DomainLevel` value; 0 = no limit."""
    pinned_domain: int = -1
    """Only devices under this domain; -1 = anywhere."""
    avoid_nodes: frozenset[int] = frozenset()
    exclusive: bool = False
    """No other demand on the nodes it uses."""
    previous: tuple[int, ...] = ()
    """Devices it held before this call (its run continues if it keeps them)."""
    previous_nodes: tuple[int, ...] = ()
    """Nodes it held before, when its devices are not known (kept = same nodes)."""
    move_cost: float = 0.0
    """Cost when it ran before and does not keep its devices (mu_i of D0.2)."""
    resize_cost: float = 0.0
    """Cost when it keeps a subset or superset of its previous devices (another count)."""
    pattern: CommunicationPattern = CommunicationPattern.NONE
    bandwidth_sensitive: bool = False
    span_reward: tuple[float, ...] = ()
    """(SPAN_COLUMNS,) reward by the widest level crossed (column 0 = none), non-increasing
    in the level; empty = none."""
    guaranteed_tenant: str = ""
    """Tenant whose cell quota this demand draws on (HiveD); "" = none."""

    @property
    def running(self) -> bool:
        """It held devices (or nodes) before this call."""
        return bool(self.previous or self.previous_nodes)


@dataclass(frozen=True)
class PlacementInstance:
    """Demands on a topology. Device, node and domain indices are the topology's."""

    topology: Topology
    demands: tuple[Demand, ...]
    weights: PlacementWeights = field(default_factory=PlacementWeights)
    occupied: BoolArray | None = None
    """(K,) devices held outside this solve; None = none."""
    pattern_score: PatternScore = PatternScore.BANDWIDTH
    min_link_score: float = 0.0
    quotas: tuple[CellQuota, ...] = ()
    """Tenants' cell quotas (HiveD); enforced when `enforce_quotas` (`hived.quota_rules`)."""
    enforce_quotas: bool = False

    @property
    def num_demands(self) -> int:
        return len(self.demands)

    @cached_property
    def free(self) -> BoolArray:
        """(K,) devices this solve may use: healthy and not occupied."""
        free = self.topology.device_healthy.copy()
        if self.occupied is not None:
            free &= ~self.occupied
        return free

    @cached_property
    def node_free(self) -> IntArray:
        """(nodes,) free devices per node."""
        topo = self.topology
        return np.bincount(
            topo.device_node[self.free], minlength=len(topo.node_domain)
        ).astype(np.int64)

    @cached_property
    def signature(self) -> IntArray:
        """(R,) index of each demand's eligibility class: demands with the same type, pin and
        avoided nodes may use the same devices (the arrays below are shared per class)."""
        keys: dict[tuple[int, int, frozenset[int]], int] = {}
        return np.array([keys.setdefault((d.type_index, d.pinned_domain, d.avoid_nodes),
                                         len(keys)) for d in self.demands], np.int64)

    @cached_property
    def class_eligible(self) -> tuple[BoolArray, ...]:
        """Per eligibility class, (K,) the devices its demands may use."""
        topo = self.topology
        first = {int(c): r for r, c in reversed(list(enumerate(self.signature.tolist())))}
        out = []
        for c in range(len(first)):
            demand = self.demands[first[c]]
            ok = self.free & (topo.device_type == demand.type_index)
            if demand.pinned_domain >= 0:
                level = int(topo.domain_level[demand.pinned_domain])
                ok &= topo.ancestors[:, level] == demand.pinned_domain
            if demand.avoid_nodes:
                ok &= ~np.isin(topo.device_node, np.fromiter(demand.avoid_nodes, np.int64))
            out.append(ok)
        return tuple(out)

    @cached_property
    def eligible(self) -> tuple[BoolArray, ...]:
        """Per demand, (K,) devices it may use (free, its type, its pin, not avoided)."""
        return tuple(self.class_eligible[c] for c in self.signature.tolist())

    @cached_property
    def eligible_node_free(self) -> IntArray:
        """(demands, nodes) eligible free devices of each demand on each node."""
        topo = self.topology
        nodes = len(topo.node_domain)
        per_class = np.array([np.bincount(topo.device_node[ok], minlength=nodes)
                              for ok in self.class_eligible], np.int64).reshape(-1, nodes)
        return per_class[self.signature] if self.num_demands else np.zeros((0, nodes), np.int64)

    @cached_property
    def node_levels(self) -> tuple[DomainLevel, ...]:
        """Levels at or above NODE that have domains."""
        return tuple(lv for lv in self.topology.levels_present if lv >= DomainLevel.NODE)

    @cached_property
    def inner_levels(self) -> tuple[DomainLevel, ...]:
        """Levels below NODE that have domains."""
        return tuple(lv for lv in self.topology.levels_present if lv < DomainLevel.NODE)

    @cached_property
    def node_ancestor(self) -> IntArray:
        """(nodes, 8) domain of each node at each level (`Topology.ancestors` rules)."""
        return fill_ancestors(self.topology, self.topology.node_domain)

    def span_reward(self, r: int) -> FloatArray:
        """(SPAN_COLUMNS,) the demand's reward by widest crossed level (zeros when none)."""
        reward = self.demands[r].span_reward
        return np.asarray(reward, np.float64) if reward else np.zeros(SPAN_COLUMNS)


@dataclass(frozen=True)
class Assignment:
    """A placer's answer: per demand, its devices (empty = not placed) and why not."""

    devices: tuple[tuple[int, ...], ...]
    """Per demand, device indices (ring order for ring demands); empty = not placed."""
    reasons: tuple[str, ...] = ()
    """Per demand, why it was not placed ("" when placed); empty = no reasons given."""

    def reason(self, r: int) -> str:
        if self.devices[r]:
            return ""
        if self.reasons and self.reasons[r]:
            return self.reasons[r]
        return "not placed"

    @staticmethod
    def empty(count: int, reason: str = "not placed") -> Assignment:
        return Assignment(((),) * count, (reason,) * count)
