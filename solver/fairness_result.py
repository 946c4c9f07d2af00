"""What the long-run fairness policies (B1-B3) return beside their time shares:
one section per policy family on `Plan` (`auction`, `stride`, `usage`), None when another
policy produced the plan. Per-job tuples and arrays are aligned with the problem's jobs."""

from __future__ import annotations

from dataclasses import dataclass

from apportion.solver.fairness_model import TenantUsage
from apportion.solver.model import FloatArray


@dataclass(frozen=True)
class Lease:
    """Devices a job holds until `expires_s` (absolute s) for `time_share` of the time."""

    type_index: int
    devices: int
    nodes: tuple[str, ...]
    """Nodes holding the devices (empty without a node layout)."""
    expires_s: float
    time_share: float
    """Fraction of the lease the job runs on them (Themis: its kept fraction c_i)."""
    kept: bool
    """An unexpired lease from the snapshot's history (not granted by this call)."""


@dataclass(frozen=True)
class AuctionOutcome:
    """One job's part in a Themis auction epoch (B1)."""

    offered: bool
    """Among the worst (1 - f) fraction by rho: the free devices were offered to it."""
    rho_without: float
    """Its finish-time ratio without a new grant (reported or derived)."""
    rho_won: float
    """Its finish-time ratio with the bundle it won; NaN = it won none."""
    kept_fraction: float
    """c_i in (0, 1]: the fraction of the won bundle's lease it keeps (1 - c_i is the hidden
    payment, given to leftover allocation); NaN = it won none."""
    bundle: int = -1
    """Index of the won bundle in its bid table (derived tables: in type order); -1 = none."""


@dataclass(frozen=True)
class AuctionSection:
    """Themis: the leases (kept and granted) and every job's auction outcome."""

    leases: tuple[Lease | None, ...]
    outcomes: tuple[AuctionOutcome, ...]
    pf_objective: float
    """sum over bidders of log(1 / rho) at the proportional-fair allocation."""
    leftover_device_time: FloatArray
    """(n,) device-time per unit time given out by leftover allocation, per type."""


@dataclass(frozen=True)
class UserShare:
    """A Gandiva_fair user's share of every type (devices, time-averaged)."""

    user: str
    tickets: float
    fair_share: FloatArray
    """(n,) ticket share after redistribution, before trading."""
    traded_share: FloatArray
    """(n,) after trading."""
    throughput_before: float
    """sum_j rate[u, j] * fair_share[j], in the user's own units (B2)."""
    throughput_after: float


@dataclass(frozen=True)
class Trade:
    """One Gandiva_fair trade: `buyer` gets `fast_devices` of `fast_type` from `seller` and
    pays `price` * `fast_devices` devices of `slow_type`."""

    buyer: int
    """Index into `StrideSection.users`."""
    seller: int
    fast_type: int
    slow_type: int
    fast_devices: float
    price: float


@dataclass(frozen=True)
class StrideSection:
    """Gandiva_fair: users' shares, trades, and the stride state after the planned quanta."""

    users: tuple[UserShare, ...]
    trades: tuple[Trade, ...]
    stride_pass: FloatArray
    """(m,) each job's pass after the planned quanta (send back in the next history)."""
    home_type: tuple[int, ...]
    """Per job, the type whose stride scheduler it belongs to (-1 = none)."""
    migrations: int
    """Jobs that changed nodes between consecutive quanta (or from their current nodes)."""
    exact_throughput: float
    """The trading LP's optimum (sum over users of their throughput), the bound."""


@dataclass(frozen=True)
class UsageSection:
    """Astraea: leases and the long-term GPU-time bookkeeping projected to the lease end."""

    leases: tuple[Lease | None, ...]
    job_gpu_time_s: FloatArray
    """(m,) each job's consumed device-time at the end of the lease (device-s)."""
    tenants: tuple[TenantUsage, ...]
    """Every tenant's consumed and entitled device-time at the end of the lease."""
    entitled_devices: FloatArray
    """(tenants,) devices each tenant is entitled to during the lease (weighted water-filling
    of the cluster among tenants with jobs), in `tenants` order."""
