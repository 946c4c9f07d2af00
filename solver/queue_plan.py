"""The queue section of a plan (matching policies such as allox), as arrays: per job its place
in a device queue, per device its queue. A 100,000-job plan is a few dozen arrays, not
145,000 Python objects; `assignment` and `device_queue` give one entry as an object for
readers that want one."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apportion.solver.arrays import BoolArray, FloatArray, IntArray


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


def take_rows(offsets: IntArray, rows: IntArray) -> tuple[IntArray, IntArray]:
    """The rows `rows` (in that order) of a CSR list (row r's items are offsets[r]:offsets[r +
    1]): their CSR offsets, and the index of each of their items in the list."""
    count = offsets[rows + 1] - offsets[rows]
    before = np.cumsum(count) - count
    item = np.arange(int(count.sum()), dtype=np.int64) + np.repeat(offsets[rows] - before, count)
    return np.r_[0, np.cumsum(count)].astype(np.int64), item


@dataclass(frozen=True)
class QueueSection:
    """Queue plans (allox): m jobs and D devices. A job's devices and a device's queue are
    CSR lists (row r's items are `items[offsets[r]:offsets[r + 1]]`). Times absolute (s)."""

    type_index: IntArray
    """(m,) accelerator type of the job's place, -1 = not queued (finished, deferred, ...)."""
    position: IntArray
    """(m,) 0 = running now (kept); 1 = first pending job of its device; ..."""
    start_time_s: FloatArray
    """(m,) planned start (the snapshot time for a running job)."""
    completion_time_s: FloatArray
    """(m,) predicted completion."""
    start_now: BoolArray
    """(m,) a pending job to start now (head of the queue of a device free now)."""
    running: BoolArray
    """(m,) already running (from the history); keeps its devices."""
    job_device_offsets: IntArray
    """(m + 1,) CSR offsets of each job's devices in `job_devices`."""
    job_devices: IntArray
    """The devices of each job (numbers into the per-device arrays): one for a pending job,
    those it holds for a running job."""
    device_type: IntArray
    """(D,) accelerator type of each device; devices in type order."""
    device_local: IntArray
    """(D,) index within its type (0-based; node order when nodes are given)."""
    device_node: IntArray
    """(D,) node holding the device (index into `node_names`), -1 = none given."""
    node_names: tuple[str, ...]
    free_at_s: FloatArray
    """(D,) when the device can take its first pending job (snapshot time if free now)."""
    running_job: IntArray
    """(D,) job holding the device now, -1 = free."""
    queue_offsets: IntArray
    """(D + 1,) CSR offsets of each device's pending jobs in `queued_jobs`."""
    queued_jobs: IntArray
    """Pending jobs of each device in run order (first runs first)."""
    dual_group: IntArray
    """(D,) the device's group of position duals (devices of one type free at the same time
    share them)."""
    dual_offsets: IntArray
    """(groups + 1,) CSR offsets of each group's duals in `position_duals`."""
    position_duals: FloatArray
    """Per group, dual v[k-1] <= 0 of slot "k-th from last on a device of the group"
    (certificate); 0 beyond."""

    @property
    def num_jobs(self) -> int:
        return int(self.type_index.size)

    @property
    def num_devices(self) -> int:
        return int(self.device_type.size)

    def queued(self) -> IntArray:
        """The jobs with a place (running or pending), in job order."""
        return np.flatnonzero(self.type_index >= 0).astype(np.int64)

    def device_counts(self) -> IntArray:
        """(m,) devices of each job's place (0 = not queued)."""
        return np.diff(self.job_device_offsets)

    def job_nodes(self) -> tuple[IntArray, IntArray]:
        """The nodes of each job's devices, once each in device order, as CSR (offsets
        (m + 1,), node indices); none for devices without a node."""
        m = self.num_jobs
        job = np.repeat(np.arange(m, dtype=np.int64), self.device_counts())
        node = self.device_node[self.job_devices]
        given = node >= 0
        job, node = job[given], node[given]
        _, first = np.unique(job * (len(self.node_names) + 1) + node, return_index=True)
        first.sort()
        job, node = job[first], node[first]
        offsets = np.r_[0, np.cumsum(np.bincount(job, minlength=m))].astype(np.int64)
        return offsets, node

    def assignment(self, i: int) -> QueueAssignment | None:
        """Job i's place as an object (None = not queued)."""
        if self.type_index[i] < 0:
            return None
        devices = self.job_devices[self.job_device_offsets[i]:self.job_device_offsets[i + 1]]
        nodes = self.device_node[devices]
        return QueueAssignment(
            int(self.type_index[i]), tuple(self.device_local[devices].tolist()),
            tuple(dict.fromkeys(self.node_names[k] for k in nodes.tolist() if k >= 0)),
            int(self.position[i]), float(self.start_time_s[i]),
            float(self.completion_time_s[i]), bool(self.start_now[i]), bool(self.running[i]))

    def assignments(self) -> tuple[QueueAssignment | None, ...]:
        """Every job's place as an object (small plans, tests)."""
        return tuple(self.assignment(i) for i in range(self.num_jobs))

    def device_queue(self, g: int) -> DeviceQueue:
        """Device g's queue as an object."""
        node = int(self.device_node[g])
        group = int(self.dual_group[g])
        return DeviceQueue(
            int(self.device_type[g]), int(self.device_local[g]),
            self.node_names[node] if node >= 0 else "", float(self.free_at_s[g]),
            int(self.running_job[g]),
            tuple(self.queued_jobs[self.queue_offsets[g]:self.queue_offsets[g + 1]].tolist()),
            tuple(self.position_duals[
                self.dual_offsets[group]:self.dual_offsets[group + 1]].tolist()))

    def device_queues(self) -> tuple[DeviceQueue, ...]:
        """Every device's queue as an object (small plans, tests)."""
        return tuple(self.device_queue(g) for g in range(self.num_devices))

    def expanded(self, back: IntArray, m: int) -> QueueSection:
        """The section of a plan over the jobs `back` (its job k is job back[k]) laid out over
        m jobs; the others not queued."""

        def rows(values: np.ndarray, fill: object) -> np.ndarray:
            out = np.full(m, fill, dtype=values.dtype)
            out[back] = values
            return out

        count = np.zeros(m, np.int64)
        count[back] = self.device_counts()
        offsets = np.r_[0, np.cumsum(count)].astype(np.int64)
        order = np.argsort(back, kind="stable")  # the devices of the jobs in their new order
        _, item = take_rows(self.job_device_offsets, order.astype(np.int64))
        holder = self.running_job.copy()
        held = holder >= 0
        holder[held] = back[holder[held]]
        return QueueSection(
            rows(self.type_index, -1), rows(self.position, 0), rows(self.start_time_s, 0.0),
            rows(self.completion_time_s, 0.0), rows(self.start_now, False),
            rows(self.running, False), offsets, self.job_devices[item], self.device_type,
            self.device_local, self.device_node, self.node_names, self.free_at_s, holder,
            self.queue_offsets, back[self.queued_jobs], self.dual_group, self.dual_offsets,
            self.position_duals)
