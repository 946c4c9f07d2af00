"""Inputs of the co-location and resource-shape policies (synergy, muri, antman, lucid,
iadeep): validated per-job profiles, shared devices and measured group interference.

Arrays have the job axis first, in snapshot order (like `apportion.solver.model.Jobs`).
Objects are created by `apportion.server.sharing_inputs` (which validates) or by tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from apportion.solver.arrays import FloatArray, IntArray

BoolArray = NDArray[np.bool_]

STAGE_COUNT = 4
"""Stages of one training iteration (storage, CPU, GPU, network), Muri's R."""

MAX_GROUP_SIZE = 4
"""Largest group of jobs sharing the same devices."""


@dataclass(frozen=True)
class ResourceGrid:
    """A job's throughput over CPU cores and host memory per GPU (Synergy's profile, B5).

    `throughput[a, b]` is the job's throughput with `cpus_per_gpu[a]` cores and
    `memory_gib_per_gpu[b]` GiB per GPU, normalized so that 1 = its throughput at the cluster's
    GPU-proportional share (any common unit works: only ratios matter)."""

    cpus_per_gpu: FloatArray
    """(a,) strictly increasing, > 0 (cores per GPU)."""
    memory_gib_per_gpu: FloatArray
    """(b,) strictly increasing, > 0 (GiB per GPU)."""
    throughput: FloatArray
    """(a, b) finite, >= 0."""


@dataclass(frozen=True)
class JobConfiguration:
    """One training configuration of a job that shares devices (iadeep), e.g. a batch size."""

    name: str
    throughput: float
    """Throughput running alone with this configuration, relative to the job's first
    configuration (dimensionless, > 0)."""
    gpu_memory_gib: float
    """Device memory it needs (GiB, >= 0)."""


@dataclass(frozen=True)
class SharedDevices:
    """Devices that jobs may share, with their measured state (antman, lucid, iadeep)."""

    ids: tuple[str, ...]
    type_index: IntArray
    """(d,) accelerator type of each device."""
    node: tuple[str, ...]
    """Node of each device ("" = not given)."""
    memory_gib: FloatArray
    """(d,) device memory (GiB, > 0)."""
    used_memory_gib: FloatArray
    """(d,) memory in use by jobs outside this decision (GiB, in [0, memory])."""
    utilization: FloatArray
    """(d,) compute utilization by jobs outside this decision, in [0, 1]."""
    guaranteed_job: IntArray
    """(d,) index of the guaranteed job holding the device, -1 = none."""
    slowdown_budget: FloatArray
    """(d,) extra slowdown the guaranteed job accepts from opportunistic jobs (>= 0,
    0 = none accepted; inf = no limit)."""

    @property
    def count(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class GroupInterference:
    """A measured (or predicted) slowdown of each member of a group of jobs sharing devices."""

    jobs: tuple[int, ...]
    """Member job indices (2 to MAX_GROUP_SIZE, distinct)."""
    slowdown: tuple[float, ...]
    """Per member: its time per step in the group over its time per step alone (>= 1 means
    slower; finite, > 0)."""
    configurations: tuple[int, ...] = ()
    """Per member, the index of its configuration (`SharingInputs.configurations`); empty =
    every member's first configuration."""


@dataclass(frozen=True)
class SharingInputs:
    """Everything the co-location policies read beyond `Problem`. Empty arrays = not given."""

    resource_grid: tuple[ResourceGrid | None, ...] = ()
    """Per job, its CPU/memory profile (synergy); None = none."""
    stage_s: FloatArray = field(default_factory=lambda: np.zeros((0, STAGE_COUNT)))
    """(m, 4) per-iteration time in storage, CPU, GPU and network (s, >= 0, sum > 0) (muri);
    a NaN row = not given."""
    gpu_memory_gib: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(m,) device memory the job needs per device (GiB, >= 0; 0 = unknown)."""
    gpu_utilization: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(m,) compute utilization of a device running the job alone, in [0, 1]."""
    opportunistic: BoolArray = field(default_factory=lambda: np.zeros(0, bool))
    """(m,) antman's service class: True = opportunistic, False = resource-guaranteed."""
    sharing_score: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(m,) lucid's packing label in {0, 1, 2} (0 = shares well), -1 = none."""
    configurations: tuple[tuple[JobConfiguration, ...], ...] = ()
    """Per job, its configurations (iadeep); empty tuple = a single default one."""
    devices: SharedDevices | None = None
    interference: tuple[GroupInterference, ...] = ()
    node_cpus: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(nodes,) CPU cores of each node of `Cluster.node_names` (synergy)."""
    node_memory_gib: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(nodes,) host memory of each node (GiB) (synergy)."""

    def gpu_memory(self, m: int) -> FloatArray:
        return self.gpu_memory_gib if self.gpu_memory_gib.size == m else np.zeros(m)

    def utilization(self, m: int) -> FloatArray:
        return self.gpu_utilization if self.gpu_utilization.size == m else np.zeros(m)

    def scores(self, m: int) -> IntArray:
        return self.sharing_score if self.sharing_score.size == m else np.full(m, -1, np.int64)

    def opportunistic_jobs(self, m: int) -> BoolArray:
        return self.opportunistic if self.opportunistic.size == m else np.zeros(m, bool)
