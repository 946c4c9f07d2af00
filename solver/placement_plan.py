"""The placement section of a plan: which devices each job got, and the placement stage's
certificate (`apportion.v1.PlacementSummary`). Device and node indices are the topology's
(`apportion.solver.topology.topology_of(cluster)`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
from numpy.typing import NDArray

from apportion.solver.arrays import BoolArray, FloatArray, IntArray
from apportion.solver.outcome import ModelSize, Termination


@dataclass(frozen=True)
class JobPlacement:
    """One job's devices for the next round."""

    placed: bool
    reason: str = ""
    """Why it got no devices ("" when placed)."""
    devices: tuple[int, ...] = ()
    """Device indices, in ring order for ring jobs."""
    node_devices: tuple[tuple[int, int], ...] = ()
    """(node index, devices) pairs."""
    kept: bool = False
    migrated: bool = False
    resized: bool = False
    preempted: bool = False
    time_shift_s: float = 0.0
    """CASSINI: delay of its iteration start (s)."""
    cost: float = 0.0
    """Its share of the placement cost."""
    widest_level: int = 0
    """Widest domain level crossed (a `DomainLevel` value; 0 = none)."""
    link_score: float = 1.0


@dataclass(frozen=True)
class PlacerComparison:
    """Another placer on the same grants, judged on the exact placer's objective."""

    placer: str
    placed_value: float
    jobs_placed: int
    objective: float
    objective_difference: float
    """Its cost minus the returned answer's cost."""
    detail: str = ""


@dataclass(frozen=True)
class QuotaSlack:
    """HiveD safety slack of one (type, level): devices in entirely free domains of the level
    minus the devices of the unused quota cells of that level or above."""

    type_index: int
    level: int
    slack_devices: float


@dataclass(frozen=True)
class PlacementSection:
    """What the placement stage adds to a plan."""

    placer: str
    termination: Termination
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    placed_value: float = 0.0
    placed_value_bound: float = 0.0
    jobs_placed: int = 0
    jobs_not_placed: int = 0
    objective_terms: dict[str, float] = field(default_factory=dict)
    free_domains: dict[int, int] = field(default_factory=dict)
    """Domains left entirely free, by `DomainLevel` value."""
    compared: tuple[PlacerComparison, ...] = ()
    detail: str = ""
    solve_time_s: float = 0.0
    model_size: ModelSize = field(default_factory=ModelSize)
    jobs: tuple[JobPlacement | None, ...] = ()
    """Per job (problem order): its placement for the next round; None = not granted devices
    (or the policy gives no per-round grants)."""
    shift_overflow: float | None = None
    """CASSINI: total bandwidth overflow on shared uplinks over the common period (Gb/s x s)."""
    shift_overflow_bound: float | None = None
    shift_period_s: float = 0.0
    quota_slack: tuple[QuotaSlack, ...] = ()


@dataclass(frozen=True)
class AdmissionInfo:
    """An admission-ordering policy's word on one job (tiresias): its queue, rank, index and
    the state to send back (`apportion.v1.AdmissionResult`)."""

    admitted: bool
    queue: int
    rank: int
    """Position in the admission order (0 = first)."""
    priority_index: float
    """2D-Gittins index (0 for LAS)."""
    attained_service: float
    promoted: bool
    executed_time_s: float
    waiting_time_s: float


@dataclass(frozen=True)
class AdmissionSection:
    """Admission-ordering plans (tiresias): per job (problem order), one column per field of
    `AdmissionInfo`, and `offered` (False = the job was not offered to the policy: an
    admission stage deferred it, its other entries are 0)."""

    offered: BoolArray
    admitted: BoolArray
    queue: IntArray
    rank: IntArray
    """Position in the admission order (0 = first)."""
    priority_index: FloatArray
    """2D-Gittins index (0 for LAS)."""
    attained_service: FloatArray
    promoted: BoolArray
    executed_time_s: FloatArray
    waiting_time_s: FloatArray

    @property
    def jobs(self) -> tuple[AdmissionInfo | None, ...]:
        """The section as one `AdmissionInfo` per job (None = not offered); built on each read."""
        columns = (getattr(self, f.name).tolist() for f in fields(AdmissionInfo))
        return tuple(
            AdmissionInfo(*row) if offered else None
            for offered, row in zip(self.offered.tolist(), zip(*columns, strict=True),
                                    strict=True)
        )

    def expanded(self, index: IntArray, m: int) -> AdmissionSection:
        """The section of the jobs `index` laid out over m jobs (the others not offered)."""

        def rows(column: NDArray[Any]) -> NDArray[Any]:
            out = np.zeros(m, dtype=column.dtype)
            out[index] = column
            return out

        return AdmissionSection(*(rows(getattr(self, f.name)) for f in fields(self)))
