"""Typed policy parameters (mirrors of the proto parameter messages, without protobuf)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Canonicalization(StrEnum):
    NONE = "none"
    SUM = "sum"


@dataclass(frozen=True)
class NoParameters:
    """For policies that take no parameters."""


@dataclass(frozen=True)
class MaxMinFairnessParameters:
    """Max-min fairness (A2.1, docs/policies/gavel.md)."""

    heterogeneity_agnostic: bool = False
    """Treat every usable throughput as 1 (Gavel's `max_min_fairness`)."""
    canonicalize: Canonicalization = Canonicalization.NONE
    """Which optimal allocation to return (A2.1 numerical notes)."""
    space_sharing: bool = False
    """Let pairs of jobs share devices (A2.2/A2.3) using the snapshot's co-location data."""


@dataclass(frozen=True)
class AlloxParameters:
    """AlloX min-cost matching (A3, docs/policies/allox.md)."""

    alpha: float = 1.0
    """Fairness knob in (0, 1]: match only the ceil(alpha * |pending|) longest-waiting servable
    pending jobs (at least as many as devices free now); 1 = pure total-JCT optimization."""


class ThroughputNormalization(StrEnum):
    NONE = "none"
    PROPORTIONAL = "prop"


@dataclass(frozen=True)
class MaxSumThroughputParameters:
    """Max-sum-throughput (A2.6, docs/policies/gavel.md)."""

    normalize: ThroughputNormalization = ThroughputNormalization.NONE
    """NONE: raw steps/s summed; PROPORTIONAL: each job's thr_i / prop_i (dimensionless)."""
    reference_type: str = ""
    """Heterogeneity-agnostic variant: copy this type's throughput column into every type."""
    space_sharing: bool = False
    """Let pairs of jobs share devices (A2.2/A2.3) using the snapshot's co-location data."""


@dataclass(frozen=True)
class CostThroughputParameters:
    """Cost-normalized throughput with soft lexicographic SLO rows (A2.7,
    docs/policies/gavel.md)."""

    use_slos: bool = False
    """Add rows thr_i(X) >= R_i / SLO_i for jobs with a deadline (SLO_i = deadline - time, s)."""
    allow_missed_slos: bool = False
    """Accept jobs whose SLO_i <= 0 (reported as missed) instead of rejecting the request."""
    reference_type: str = ""


@dataclass(frozen=True)
class MinMakespanParameters:
    """Minimum makespan as one LP in z = 1/makespan (A2.8, docs/policies/gavel.md)."""

    reference_type: str = ""
    space_sharing: bool = False
    """Let pairs of jobs share devices (A2.2) using the snapshot's co-location data."""


@dataclass(frozen=True)
class FinishTimeFairnessParameters:
    """Finish-time fairness, Themis rho (A2.5, docs/policies/gavel.md)."""

    reference_type: str = ""
    space_sharing: bool = False
    """Let pairs of jobs share devices (A2.2) using the snapshot's co-location data."""


@dataclass(frozen=True)
class WaterFillingParameters:
    """Lexicographic max-min fairness with hierarchical tenants (A2.4, docs/policies/gavel.md)."""

    heterogeneity_agnostic: bool = False
    """Treat every usable throughput as 1 (Gavel's `max_min_fairness_water_filling`)."""
    space_sharing: bool = False
    """Let pairs of jobs share devices (A2.2) using the snapshot's co-location data."""


class BudgetSource(StrEnum):
    """Where the Fisher market's budgets B_i come from."""

    EQUAL = "equal"
    """B_i = 1 for every job."""
    PRIORITY_WEIGHT = "priority_weight"
    """B_i = the job's priority weight w_i (> 0)."""


@dataclass(frozen=True)
class FisherMarketParameters:
    """Heterogeneity-aware Fisher market / Eisenberg–Gale program (A4.1,
    docs/policies/market.md)."""

    budgets: BudgetSource = BudgetSource.EQUAL
    uncapped: bool = False
    """False (Gavel's market): each job buys at most one gang's worth of time, sum_j X[i,j]
    <= 1. True: the plain Fisher market with devices as goods: a job may hold several gangs at
    once, its time shares then summing above 1."""


class RemainingTimePredictor(StrEnum):
    """How Shockwave predicts a job's remaining runtime P_i (A4.6, docs/policies/market.md)."""

    DIRICHLET = "dirichlet"
    """Dirichlet posterior over the job's batch-size regimes (Shockwave's default)."""
    ORACLE = "oracle"
    """Sum of the remaining profiled epoch durations."""


@dataclass(frozen=True)
class ShockwaveParameters:
    """Shockwave's planning-window program (A4.2-A4.5, docs/policies/market.md); Shockwave's
    defaults."""

    planning_rounds: int = 20
    """T, rounds in the planning window (>= 1)."""
    makespan_weight: float = 1e-3
    """kappa (the config's `k`, >= 0): weight of the makespan regularizer, per second."""
    fairness_exponent: float = 12.0
    """lambda_f (the config's `lambda`): fallback priority pi_i = rho_i ** lambda_f."""
    rho_max: float = 1.0
    """Finish-time-fairness guard level (> 0)."""
    predictor: RemainingTimePredictor = RemainingTimePredictor.DIRICHLET
    work_conserving_fill: bool = True
    """Give leftover GPUs of each round to unscheduled jobs, longest predicted remaining first."""


@dataclass(frozen=True)
class SiaParameters:
    """Sia's goodput ILP (A5, docs/policies/sia.md). Dimensionless knobs; `max_gpus` in GPUs."""

    fairness_power: float = -0.5
    """p != 0: minimize sum goodput^p for p < 0 (fairness), maximize for p > 0."""
    no_allocation_penalty: float = 1.1
    """lambda_n: objective term per unallocated job; > 0 for p < 0 and < 0 for p > 0."""
    max_gpus: int = 64
    """Largest configuration (GPUs)."""
    round_coefficients: bool = False
    """Round G'^p to 2 decimals as Sia does (compat only; forced on by compat = sia)."""
    coefficient_clip: float = 3000.0
    """Upper clip of the coefficients A (Sia: 3000)."""
    pin_running: bool = False
    """Jobs currently running must keep their configuration (Sia's "checkpointing now" flag
    applied to every running job)."""
    max_nodes_per_type: tuple[tuple[str, int], ...] | None = None
    """Per-type node caps of multi-node configurations, (type name, nodes) pairs (A5.2); types
    not listed are uncapped. None = Sia's `cluster_max_physical_nnodes` (aws 16, dgx-ext 2,
    rtx 3, azure 5, quad 1: the largest profiled node counts), () = no caps."""


@dataclass(frozen=True)
class PolluxParameters:
    """Pollux's cluster objective as an exact ILP over Sia's configurations (B4,
    docs/policies/sia.md; OSDI'21 artifact version without the GA)."""

    fairness_power: float = -1.0
    """p of the p-mean of speedups (p != 0)."""
    max_gpus: int = 64
    """Largest configuration (GPUs)."""


@dataclass(frozen=True)
class ThemisAuctionParameters:
    """Themis's partial-allocation auction (B1)."""

    fairness_knob: float = 0.8
    """f in [0, 1): the free devices are offered to the ceil((1 - f) * N) jobs with the worst
    finish-time ratio rho among the N jobs without a lease (at least one). 0 = every job
    bids (most efficient); close to 1 = only the worst job (closest to max-min on rho)."""
    lease_s: float = 600.0
    """Length of the leases granted (s, > 0); derived bids value a bundle over this horizon."""
    divisible_shares: bool = False
    """Auction divisible device-time instead of bundles: bidder i values time shares X_i
    linearly, V_i = thr_i(X_i) / iso_i (its throughput in units of its 1/N isolated share);
    the proportional-fair allocation is then an Eisenberg-Gale program (conic, exact) and the
    mechanism has Cole et al.'s guarantees (truthful, c_i >= 1/e). No bid tables, no leases."""


class TradingMode(StrEnum):
    """How Gandiva_fair's heterogeneity trading is done (B2)."""

    GREEDY = "greedy"
    """Gandiva_fair's trades: highest- with lowest-speedup user, repeated (a heuristic)."""
    EXACT = "exact"
    """The LP: maximize total throughput with every user at least its pre-trade throughput."""
    NONE = "none"
    """No trading: every user keeps its ticket share of every type."""


@dataclass(frozen=True)
class GandivaFairParameters:
    """Gandiva_fair: tickets, split gang-aware stride scheduling, heterogeneity trading
    (B2); or Shockwave's static equal split (`static_equal_split`)."""

    quanta: int = 20
    """Quanta planned by the stride scheduler (1..MAX_QUANTA); the time shares are the
    fractions of these quanta each job runs, the passes returned are those after them."""
    trading: TradingMode = TradingMode.GREEDY
    trade_price: float = 0.5
    """theta in (0, 1): a trade between speedups s_low < s_high is priced
    P = s_low + theta * (s_high - s_low) slow-device units per fast-device unit."""
    static_equal_split: bool = False
    """Shockwave's "gandiva_fair" baseline instead: X[i, j] = W[j] / m on every type, rows
    capped at 1 (no tickets, stride or trading; alias `gandiva_fair_equal_split`)."""


MAX_QUANTA = 1000
"""Largest `GandivaFairParameters.quanta`."""


@dataclass(frozen=True)
class AstraeaParameters:
    """Astraea's long-term GPU-time fairness with leases (B3)."""

    lease_s: float = 600.0
    """Length of the leases granted (s, > 0): the accumulated and entitled GPU-time returned
    are projected to the end of this lease."""
class TiresiasMode(StrEnum):
    LAS = "las"
    """Discretized 2D-LAS: queues by attained service, first come first served inside."""
    GITTINS = "gittins"
    """Discretized 2D-Gittins: inside a queue, the highest Gittins index first."""


class TiresiasService(StrEnum):
    GPU_TIME = "gpu_time"
    """Attained service = executed time x devices (GPU s)."""
    TIME = "time"
    """Attained service = executed time (s) (Tiresias's `dlas` variant)."""


class TiresiasAdmission(StrEnum):
    COUNT = "count"
    """Skip-fit on device counts per type: the lexicographically best admitted set."""
    PLACEMENT = "placement"
    """Lexicographic admission under placement constraints (a placement check per job)."""


TIRESIAS_THRESHOLDS: tuple[float, ...] = (3250.0, 7200.0)
"""Tiresias simulator's queue thresholds (GPU s): 3 queues."""
TIRESIAS_GITTINS_QUANTUM = 3250.0
"""Tiresias simulator's fixed Gittins quantum (GPU s), used with compat = tiresias."""


@dataclass(frozen=True)
class TiresiasParameters:
    """Tiresias: discretized 2D-LAS / 2D-Gittins with admission in priority order (D1)."""

    mode: TiresiasMode = TiresiasMode.LAS
    service: TiresiasService = TiresiasService.GPU_TIME
    thresholds: tuple[float, ...] = TIRESIAS_THRESHOLDS
    """Queue thresholds on attained service (GPU s or s), increasing."""
    promote_knob: float = 0.0
    """rho >= 0: a waiting job with waiting >= rho x executed time returns to queue 0; 0 =
    never."""
    service_samples: tuple[float, ...] = ()
    """2D-Gittins: samples of the total service of jobs (same unit as the service)."""
    gittins_quantum: float = 0.0
    """2D-Gittins quantum Delta (> 0 = fixed, as Tiresias); 0 = the supremum over Delta."""
    admission: TiresiasAdmission = TiresiasAdmission.COUNT
    consolidate_skew_above: float = 0.0
    """Jobs with tensor skew above this run inside one node (0 = off)."""
class ElasticMethod(StrEnum):
    """How an elastic policy distributes devices beyond every job's base allocation."""

    GREEDY = "greedy"
    """The policy's own marginal-gain rule (Optimus, SLAQ)."""
    EXACT = "exact"
    """The optimum of the same objective (dynamic program, or MILP)."""


@dataclass(frozen=True)
class OptimusParameters:
    """Optimus's marginal-gain allocation (B8)."""

    method: ElasticMethod = ElasticMethod.GREEDY
    convergence_fraction: float = 0.01
    """A job whose remaining work comes from its loss curve converges when the loss's excess
    over the fitted asymptote has fallen to this fraction of its excess at the first reported
    step (in (0, 1))."""
    max_devices: int = 64
    """Most devices per job when its elasticity sets no maximum (>= 1)."""
    exact_gap: bool = True
    """With the greedy, also solve exactly to report the greedy's gap (the bound)."""


@dataclass(frozen=True)
class SlaqParameters:
    """SLAQ's quality-driven allocation (B9)."""

    method: ElasticMethod = ElasticMethod.GREEDY
    horizon_s: float = 0.0
    """Prediction horizon (s); 0 = the snapshot's round duration, or 60 s without one."""
    recency_decay: float = 0.9
    """Weight of a loss point = decay^(points after it), in (0, 1] (1 = equal weights)."""
    max_devices: int = 64
    exact_gap: bool = True


class ReclaimMethod(StrEnum):
    """How Lyra chooses the loaned nodes to give back (B7)."""

    GREEDY = "greedy"
    """Lyra's rule: the node with the lowest added preemption cost, one at a time."""
    EXACT = "exact"
    """The fewest preempted jobs (MILP)."""


@dataclass(frozen=True)
class LyraParameters:
    """Lyra's capacity loaning and elastic allocation (B7)."""

    reclaim_method: ReclaimMethod = ReclaimMethod.GREEDY
    reclaim_exact_gap: bool = True
    """With the greedy reclaiming, also solve the MILP (when at most `RECLAIM_EXACT_NODES`
    loaned nodes) to report its gap."""
    max_devices: int = 64
    """Most devices per job when its elasticity sets no maximum (>= 1)."""




class BaseOrder(StrEnum):
    """Order in which a policy serves jobs (its base scheduling policy)."""

    ARRIVAL = "arrival"
    """Earliest arrival first (FIFO)."""
    REMAINING_SERVICE = "remaining_service"
    """Least remaining GPU-time first (remaining steps x time per step x GPUs; SRSF)."""
    ATTAINED_SERVICE = "attained_service"
    """Least attained GPU-time first (time run since the reset x GPUs; LAS)."""


@dataclass(frozen=True)
class SynergyParameters:
    """Synergy's CPU- and memory-aware allocation (B5): OPT exactly, TUNE with compat."""

    order: BaseOrder = BaseOrder.ARRIVAL
    """Which jobs get GPUs this round: in this order, every job that still fits."""


@dataclass(frozen=True)
class MuriParameters:
    """Muri's multi-resource interleaving (B6). Muri-S: remaining service; Muri-L: attained."""

    order: BaseOrder = BaseOrder.REMAINING_SERVICE
    max_group_size: int = 4
    """Largest group (1..4)."""
    weight_threshold: float = 0.0
    """lambda >= 0: two groups may merge only when their used ratio exceeds lambda * size / 4."""
    exact_groups: bool = False
    """Choose the groups by the exact set packing instead of Muri's matching rounds."""
    interleave_overhead: tuple[float, ...] = ()
    """Period factors for groups of 1, 2, 3, 4 jobs (>= 1); empty = none (Muri's measured
    factors with compat muri)."""
    autopack: bool = True
    """Split a group whose period exceeds its members' iteration times run in turn."""


@dataclass(frozen=True)
class LucidParameters:
    """Lucid's pairing of waiting jobs with running ones (D8)."""

    sharing: bool = True
    """False: no pairs, waiting jobs start alone in priority order."""
    device_memory_gib: float = 24.0
    """Memory of one device (GiB): a pair must need strictly less (Lucid: RTX 3090)."""
    max_score_sum: int = 2
    """Largest sum of the two sharing scores."""
    pair_pending: bool = False
    """Two waiting jobs may also start together (general matching instead of bipartite)."""


@dataclass(frozen=True)
class AntmanParameters:
    """AntMan's opportunistic jobs on guaranteed jobs' devices (D7)."""

    max_utilization: float = 1.0
    """U_max in (0, 1]: a device's utilization with its opportunistic jobs stays below it."""
    slowdown_weight: float = 0.0
    """lambda >= 0: objective cost per unit of slowdown inflicted on a guaranteed job."""
    busy_utilization: float = 0.8
    """Compat antman: devices at or above this utilization take no opportunistic job."""
    busy_memory_gib: float = 16.0
    """Compat antman: devices with at least this much memory in use take none."""
    device_memory_gib: float = 0.0
    """Memory of a device whose topology entry gives none (GiB); 0 = required there."""


@dataclass(frozen=True)
class IadeepParameters:
    """IADeep's co-location groups with a configuration per member (D9)."""

    max_slowdown: float = 0.0
    """Largest slowdown any member may suffer (> 1); 0 = no cap."""
    device_memory_gib: float = 24.0
    """Memory of a device whose topology entry gives none (GiB)."""
