"""Typed parameters of the stages around a policy (Blox-style composition): admission before
it, placement after it. Mirrors of `apportion.v1.PlacementStage` and `AdmissionStage` without
protobuf; `apportion.server.topology_inputs` builds them and `solve()` applies them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from apportion.solver.topology import DomainLevel


class Placer(StrEnum):
    """Who decides the devices: the exact stage or a compat placer reproducing a published
    heuristic (with its quirks) on the same grants."""

    EXACT = "exact"
    BLOX_CONSOLIDATED = "blox_consolidated"
    BLOX_SCATTERED = "blox_scattered"
    TIRESIAS_YARN = "tiresias_yarn"
    HIVED_BUDDY = "hived_buddy"
    MAPA_BASELINE = "mapa_baseline"
    MAPA_TOPO_AWARE = "mapa_topo_aware"
    MAPA_GREEDY = "mapa_greedy"
    MAPA_PRESERVE = "mapa_preserve"
    MAPA_MIN_SCORE = "mapa_min_score"
    LUCID_CONSOLIDATE = "lucid_consolidate"
    SIA_BFD = "sia_bfd"
    GAVEL_SERVERS = "gavel_servers"


class PlacementLevel(StrEnum):
    NODE = "node"
    """Node-level MILP, then an exact device choice inside each node."""
    DEVICE = "device"
    """One device-level MILP (small clusters)."""


class PatternScore(StrEnum):
    BANDWIDTH = "bandwidth"
    """Link bandwidth over the pattern's edges / the best possible for its size."""
    PREDICTED = "predicted"
    """MAPA's fitted bandwidth model over double-NVLink, single-NVLink and PCIe edge counts."""


DEFAULT_CROSSING: dict[DomainLevel, float] = {
    DomainLevel.DEVICE_GROUP: 0.1,
    DomainLevel.PCIE_SWITCH: 0.1,
    DomainLevel.SOCKET: 0.1,
    DomainLevel.NODE: 1.0,
    DomainLevel.RACK: 2.0,
    DomainLevel.POD: 4.0,
    DomainLevel.CLUSTER: 8.0,
}
"""Cost per ring crossing of each level (a_l of D0.2) when the request sets none."""

DEFAULT_FREE_DOMAIN: dict[DomainLevel, float] = {DomainLevel.NODE: 0.01}
"""Reward per entirely free domain (omega_l) when the request sets none."""

DEVICE_LEVEL_MAX_DEVICES = 4096
"""Largest cluster (devices) the device-level MILP accepts."""
DEFAULT_MAX_CANDIDATE_PAIRS = 20_000
"""(job, node) pairs of the node-level MILP above which candidates are restricted."""
MAX_CANDIDATE_PAIRS_LIMIT = 10_000_000
"""Largest accepted `max_candidate_pairs`."""


@dataclass(frozen=True)
class PlacementWeights:
    """Weights of the placement cost (all >= 0); see `apportion.v1.PlacementStage`."""

    crossing: dict[DomainLevel, float] = field(default_factory=lambda: dict(DEFAULT_CROSSING))
    bottleneck: dict[DomainLevel, float] = field(default_factory=dict)
    free_domain: dict[DomainLevel, float] = field(
        default_factory=lambda: dict(DEFAULT_FREE_DOMAIN)
    )
    move: float = 2.0
    """Cost of a running job not kept on its devices."""
    move_per_s: float = 0.0
    """Cost per second of checkpoint + restore of a moved job."""
    link_score: float = 0.5
    """Reward weight of the intra-node link score (0..1 per multi-device job)."""
    throughput_by_span: float = 1.0
    """Reward weight of throughput at the job's span / its best (0..1 per job)."""


@dataclass(frozen=True)
class TimeShiftParameters:
    """CASSINI time shifts on shared uplinks."""

    slot_s: float
    """Slot length (s, > 0)."""
    max_period_s: float = 60.0
    """Longest common period (s)."""


@dataclass(frozen=True)
class PlacementParameters:
    """The placement stage of a request (`policy.placement`)."""

    placer: Placer = Placer.EXACT
    compare: tuple[Placer, ...] = ()
    weights: PlacementWeights = field(default_factory=PlacementWeights)
    level: PlacementLevel = PlacementLevel.NODE
    max_candidate_pairs: int = DEFAULT_MAX_CANDIDATE_PAIRS
    consolidate_skew_above: float = 0.0
    """Jobs with tensor_skew above this must fit in one node; 0 = off."""
    time_shifts: TimeShiftParameters | None = None
    enforce_cell_quotas: bool = False
    min_link_score: float = 0.0
    pattern_score: PatternScore = PatternScore.BANDWIDTH


class AdmissionMode(StrEnum):
    ACCEPT_ALL = "accept_all"
    LOAD_BASED = "load_based"


@dataclass(frozen=True)
class AdmissionParameters:
    """The admission stage of a request (`policy.admission`)."""

    mode: AdmissionMode = AdmissionMode.ACCEPT_ALL
    load_threshold: float = 1.0
    """LOAD_BASED: accepted devices <= threshold x the cluster's devices (> 0)."""
