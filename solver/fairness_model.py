"""The snapshot inputs of the long-run fairness policies (B1-B3): Themis bid
tables, leases, stride passes and accumulated GPU-time. Created by the wire conversion (which
validates them) or by tests; `Problem.fairness` holds them, None = none given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from apportion.solver.arrays import FloatArray

MAX_BUNDLES_PER_JOB = 64
"""Most bundles one job's bid table may list."""


@dataclass(frozen=True)
class BundleBid:
    """One bundle of a Themis bid table: the job's scale factor of devices of one type,
    optionally on named nodes, and the finish-time ratio rho the job reports for it."""

    type_index: int
    node_devices: tuple[tuple[int, int], ...]
    """(node index, devices) pairs summing to the job's scale factor; empty = any devices of
    the type."""
    rho: float
    """Reported finish-time ratio with this bundle for the lease (> 0)."""


@dataclass(frozen=True)
class BidTable:
    """A job's Themis bid: rho without a new grant, and rho per bundle."""

    rho_without: float
    """Reported finish-time ratio if the job gets nothing this epoch (> 0)."""
    bundles: tuple[BundleBid, ...]
    """At least one, at most MAX_BUNDLES_PER_JOB."""


@dataclass(frozen=True)
class TenantUsage:
    """Astraea's long-term bookkeeping of one tenant (device-seconds)."""

    tenant: str
    gpu_time_s: float
    """Device-time consumed so far (device-s, >= 0)."""
    entitled_gpu_time_s: float
    """Device-time the tenant was entitled to so far (device-s, >= 0)."""


def _nan(m: int) -> FloatArray:
    return np.full(m, math.nan)


@dataclass(frozen=True)
class FairnessInputs:
    """Per-job state of B1-B3 (arrays aligned with the jobs) and per-tenant usage."""

    bids: tuple[BidTable | None, ...]
    """Per job, its Themis bid table; None = derive it from throughput and remaining work."""
    lease_expires_s: FloatArray
    """(m,) absolute end of the lease on the job's current placement; 0 = no lease."""
    lease_time_share: FloatArray
    """(m,) fraction of the time the job runs on its leased devices (Themis keeps c_i of a
    bundle), in (0, 1]; 1 = all of it."""
    stride_pass: FloatArray
    """(m,) Gandiva_fair stride pass from the previous plan; NaN = none (a new client)."""
    gpu_time_s: FloatArray
    """(m,) Astraea: device-time the job has consumed (device-s, >= 0)."""
    tenant_usage: tuple[TenantUsage, ...] = field(default_factory=tuple)

    @staticmethod
    def empty(m: int) -> FairnessInputs:
        """No bids, leases, passes or usage for m jobs."""
        return FairnessInputs(
            bids=(None,) * m,
            lease_expires_s=np.zeros(m),
            lease_time_share=np.ones(m),
            stride_pass=_nan(m),
            gpu_time_s=np.zeros(m),
        )

    def take(self, index: np.ndarray) -> FairnessInputs:
        """The entries of the jobs `index`, in that order."""
        return FairnessInputs(
            bids=tuple(self.bids[int(i)] for i in index),
            lease_expires_s=self.lease_expires_s[index],
            lease_time_share=self.lease_time_share[index],
            stride_pass=self.stride_pass[index],
            gpu_time_s=self.gpu_time_s[index],
            tenant_usage=self.tenant_usage,
        )
