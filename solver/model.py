"""The validated problem model: frozen dataclasses holding numpy arrays.

Index conventions follow formulations.md A1.1: ``i`` jobs (rows, in snapshot order), ``j``
accelerator types (columns, in cluster order). Units are stated per field. Objects of these
classes are only created by `apportion.server.convert` (which validates) or by tests; the
formulations may assume every invariant documented here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


class Compat(StrEnum):
    """Reproduce an upstream system's quirks (formulations.md C1); NONE = corrected behaviour."""

    NONE = "none"
    GAVEL = "gavel"
    SHOCKWAVE = "shockwave"
    SIA = "sia"


@dataclass(frozen=True)
class Cluster:
    """Accelerator types and their device counts."""

    type_names: tuple[str, ...]
    """Unique type names, column order of every (m, n) array."""
    count: IntArray
    """(n,) devices per type, >= 0, not all zero."""
    cost_per_hour: FloatArray
    """(n,) $ per device-hour, finite and >= 0 (default 1)."""
    node_names: tuple[str, ...] = ()
    """Unique node names (empty = no node layout given)."""
    node_type: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(nodes,) type index of each node's devices."""
    node_devices: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(nodes,) devices on each node (>= 0); per type they sum to `count` (validated)."""

    @property
    def num_types(self) -> int:
        return len(self.type_names)


@dataclass(frozen=True)
class Jobs:
    """The active jobs. Every array has the job axis first, in snapshot order."""

    ids: tuple[str, ...]
    """Unique, non-empty job ids."""
    throughput: FloatArray
    """(m, n) steps/s of the whole job on `scale_factor` devices of type j; 0 = cannot run."""
    scale_factor: IntArray
    """(m,) devices needed at once, 1 <= s_i <= max(count)."""
    priority_weight: FloatArray
    """(m,) priority weight w_i > 0."""
    tenant: tuple[str, ...]
    """Tenant name per job ("" = the job is its own tenant)."""
    arrival_time_s: FloatArray
    """(m,) submission time on the snapshot clock (s)."""
    steps_done: FloatArray
    """(m,) steps completed (>= 0)."""
    total_steps: FloatArray
    """(m,) total steps (>= steps_done; 0 = unknown)."""
    deadline_s: FloatArray
    """(m,) absolute deadline (s); NaN = none."""

    @property
    def num_jobs(self) -> int:
        return len(self.ids)

    @property
    def remaining_steps(self) -> FloatArray:
        """(m,) R_i = total_steps - steps_done (steps)."""
        return np.asarray(self.total_steps - self.steps_done, dtype=np.float64)


@dataclass(frozen=True)
class History:
    """Bookkeeping carried between calls (all arrays aligned with the jobs)."""

    received_time_s: FloatArray
    """(m, n) seconds run on each type since the last reset."""
    cumulative_isolated_time_s: FloatArray
    """(m,) finish-time-fairness state C_i (s)."""
    restarts: IntArray
    """(m,) restarts so far."""
    elapsed_since_reset_s: float = 0.0
    current_type: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(m,) type index of the job's current placement (`JobHistory.current`), -1 = not running.
    Empty = no job is running."""
    current_devices: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(m,) devices the running job holds (>= 1 when running; 0 otherwise). Empty = none."""
    busy_until_s: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(m,) `Placement.busy_until_s` as given (absolute s; 0 = not given). Empty = none."""
    current_nodes: tuple[tuple[int, ...], ...] = ()
    """Per job, indices into `Cluster.node_names` of the nodes it occupies. Empty = none."""

    def running(self, m: int) -> NDArray[np.bool_]:
        """(m,) True for jobs with a current placement."""
        if self.current_type.size == 0:
            return np.zeros(m, dtype=bool)
        return np.asarray(self.current_type >= 0)


@dataclass(frozen=True)
class Problem:
    """One validated snapshot."""

    cluster: Cluster
    jobs: Jobs
    history: History
    time_s: float = 0.0
    round_duration_s: float = 0.0

    @property
    def usable(self) -> NDArray[np.bool_]:
        """(m, n) cells a job can run on: throughput > 0 and enough devices of the type (B4)."""
        fits = self.jobs.scale_factor[:, None] <= self.cluster.count[None, :]
        return (self.jobs.throughput > 0) & fits


class SolverPreference(StrEnum):
    AUTO = "auto"
    CLARABEL = "clarabel"
    HIGHS = "highs"


@dataclass(frozen=True)
class SolveOptions:
    """How to solve (all optional)."""

    time_limit_s: float = 0.0
    """Wall-clock limit (s); 0 = none."""
    relative_gap: float = 0.0
    """Accepted relative gap; 0 = the policy default."""
    threads: int = 0
    seed: int = 0
    solver: SolverPreference = SolverPreference.AUTO
    schedule_rounds: int = 0


@dataclass(frozen=True)
class PolicyRequest:
    """A resolved policy: canonical name, typed parameters and compat mode."""

    name: str
    parameters: object
    compat: Compat = Compat.NONE
    requested_name: str = ""
    """The name the client used (an alias or the canonical name)."""
    extra: dict[str, object] = field(default_factory=dict)


def make_problem(
    type_names: list[str] | tuple[str, ...],
    count: list[int] | IntArray,
    throughput: list[list[float]] | FloatArray,
    scale_factor: list[int] | IntArray | None = None,
    priority_weight: list[float] | FloatArray | None = None,
    ids: list[str] | None = None,
) -> Problem:
    """Convenience constructor for tests and benchmarks (no validation beyond shapes)."""
    thr = np.asarray(throughput, dtype=np.float64)
    m, n = thr.shape
    assert n == len(type_names)
    sf = np.ones(m, np.int64) if scale_factor is None else np.asarray(scale_factor, np.int64)
    w = np.ones(m) if priority_weight is None else np.asarray(priority_weight, np.float64)
    job_ids = tuple(ids) if ids is not None else tuple(f"job{i}" for i in range(m))
    zeros = np.zeros(m)
    return Problem(
        cluster=Cluster(
            type_names=tuple(type_names),
            count=np.asarray(count, np.int64),
            cost_per_hour=np.ones(n),
        ),
        jobs=Jobs(
            ids=job_ids,
            throughput=thr,
            scale_factor=sf,
            priority_weight=w,
            tenant=("",) * m,
            arrival_time_s=zeros.copy(),
            steps_done=zeros.copy(),
            total_steps=zeros.copy(),
            deadline_s=np.full(m, np.nan),
        ),
        history=History(
            received_time_s=np.zeros((m, n)),
            cumulative_isolated_time_s=zeros.copy(),
            restarts=np.zeros(m, np.int64),
        ),
    )
