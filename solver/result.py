"""What a formulation returns: the plan and its certificate."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from apportion.solver.model import FloatArray


class Termination(StrEnum):
    """How a solve ended (formulations.md A1.4)."""

    OPTIMAL = "optimal"
    OPTIMAL_INACCURATE = "optimal_inaccurate"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    UNBOUNDED = "unbounded"
    HEURISTIC = "heuristic"
    NO_SOLUTION = "no_solution"
    ERROR = "error"


class JobStatus(StrEnum):
    ALLOCATED = "allocated"
    UNSERVABLE = "unservable"
    FINISHED = "finished"
    DEFERRED = "deferred"
    """Servable but left for a later round by the policy (allox's alpha filter)."""


@dataclass(frozen=True)
class ModelSize:
    variables: int = 0
    constraints: int = 0
    nonzeros: int = 0
    integer_variables: int = 0


@dataclass(frozen=True)
class Certificate:
    """Proof of quality: objective of the returned plan (recomputed from it), a proven bound
    on the optimum, and how the solve went. Times in seconds."""

    termination: Termination
    maximize: bool
    objective: float | None = None
    bound: float | None = None
    solver: str = ""
    solver_version: str = ""
    formulation: str = ""
    build_time_s: float = 0.0
    solve_time_s: float = 0.0
    model_size: ModelSize = field(default_factory=ModelSize)
    max_violation: float = 0.0
    detail: str = ""

    @property
    def gap(self) -> float | None:
        """|objective - bound| / max(|objective|, |bound|, 1e-12) (A1.4)."""
        if self.objective is None or self.bound is None:
            return None
        scale = max(abs(self.objective), abs(self.bound), 1e-12)
        return abs(self.objective - self.bound) / scale


@dataclass(frozen=True)
class QueueAssignment:
    """Where a job sits in a non-preemptive per-device queue (allox). Times absolute (s)."""

    type_index: int
    """Accelerator type (column index)."""
    devices: tuple[int, ...]
    """Device indices within the type (0-based; node order when nodes are given)."""
    nodes: tuple[str, ...]
    """Nodes holding those devices ("" entries / empty when no nodes are given)."""
    position: int
    """0 = running now (kept, not preempted); 1 = the first pending job of the device; ..."""
    start_time_s: float
    """Planned start (the snapshot time for a running job)."""
    completion_time_s: float
    """Predicted completion."""
    start_now: bool
    """A pending job that should be started now (head of the queue of a device free now)."""
    running: bool
    """Already running (from the history); keeps its devices."""


@dataclass(frozen=True)
class DeviceQueue:
    """One device's queue (allox): the job holding it, then pending jobs in run order."""

    type_index: int
    device: int
    """Index within the type (0-based; node order when nodes are given)."""
    node: str
    """Node holding the device ("" when no nodes are given)."""
    free_at_s: float
    """When the device can take its first pending job (snapshot time if free now)."""
    running_job: int
    """Job index holding the device now, -1 = free."""
    jobs: tuple[int, ...]
    """Pending job indices in run order (first runs first)."""
    position_duals: tuple[float, ...] = ()
    """Dual v[k-1] <= 0 of slot "k-th from last on this device" (certificate); 0 beyond."""


@dataclass(frozen=True)
class Plan:
    """A policy's answer for m jobs and n types.

    `time_share[i, j]` is the fraction of wall-clock time job i runs on type j (holding
    scale_factor devices while it runs). Per-job arrays are aligned with the problem's jobs.
    """

    time_share: FloatArray
    """(m, n) in [0, 1], rows sum to <= 1."""
    effective_throughput: FloatArray
    """(m,) steps/s under the plan."""
    normalized_throughput: FloatArray
    """(m,) effective throughput / the policy's normalizer."""
    objective_value: FloatArray
    """(m,) the job's term in the objective (max-min fairness: its level)."""
    job_dual: FloatArray
    """(m,) dual multiplier of the job's objective row (0 if not applicable)."""
    accelerator_prices: FloatArray
    """(n,) dual multipliers of the capacity rows (0 if not applicable)."""
    certificate: Certificate
    job_status: tuple[JobStatus, ...] = ()
    job_reason: tuple[str, ...] = ()
    job_queue: tuple[QueueAssignment | None, ...] = ()
    """Per job, its queue placement (queue policies such as allox); empty = not applicable."""
    device_queues: tuple[DeviceQueue, ...] = ()
    """Per-device queues (queue policies); empty = not applicable."""

    @staticmethod
    def empty(m: int, n: int, certificate: Certificate) -> Plan:
        return Plan(
            time_share=np.zeros((m, n)),
            effective_throughput=np.zeros(m),
            normalized_throughput=np.zeros(m),
            objective_value=np.zeros(m),
            job_dual=np.zeros(m),
            accelerator_prices=np.zeros(n),
            certificate=certificate,
            job_status=(JobStatus.ALLOCATED,) * m,
            job_reason=("",) * m,
        )
