"""What the simulation knows about every job while it runs: progress, placement, restarts, and
the state a client sends back to the service with each snapshot (`plans.Carry`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from apportion.simulator.plans import Carry, NodeDevices
from apportion.simulator.workload import Workload
from apportion.solver.model import FloatArray, IntArray


@dataclass(frozen=True)
class Placement:
    """Where a job runs during a round."""

    type_index: int
    devices: int
    nodes: NodeDevices
    """(node index, devices) pairs; empty without a node layout."""
    shared: int = -1
    """The smallest job index of the pair or group sharing these devices (space sharing,
    co-location groups); -1 = alone."""
    device_ids: tuple[int, ...] = ()
    """The devices (topology indices) when the placement stage chose them."""


@dataclass
class JobState:
    """Per-job arrays of one simulation (job axis = the workload's)."""

    work_done: FloatArray
    """(m,) work completed (the workload's units)."""
    finish_s: FloatArray
    """(m,) finish time (s); NaN = not finished."""
    start_s: FloatArray
    """(m,) first time the job ran (s); NaN = never."""
    run_s: FloatArray
    """(m,) time spent holding devices, restarts included (s)."""
    device_s: FloatArray
    """(m,) devices x seconds held (GPU-seconds)."""
    restarts: IntArray
    """(m,) times the job started on other devices than in the previous round after its first
    start (a preemption, migration or reconfiguration)."""
    placement: list[Placement | None]
    """The job's placement in the previous round (None = it did not run)."""
    isolated_time_s: FloatArray
    """(m,) finish-time fairness C_i of the last response that included the job (s)."""
    previous_iso: FloatArray
    """(m,) iso_i of that response (NaN = none)."""
    previous_remaining: FloatArray
    """(m,) R_i of that response (NaN = none)."""
    reference_finish_s: FloatArray
    """(m,) Shockwave's F*_i (0 = none)."""
    reference_state: FloatArray
    """(m, 5) Shockwave's F* bookkeeping (estimate NaN = none)."""
    partner: IntArray
    """(m,) the job each job shared devices with in the last plan (-1 = none)."""
    stride_pass: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(m,) Gandiva_fair's stride pass of the last plan that included the job (NaN = none)."""
    current_type: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(m,) the type of the placement a snapshot reports for the job (-1 = none): its
    placement in the previous round, except the later jobs of a co-located pair or group (the
    shared devices are reported once, by its first unfinished job: the service refuses
    current placements above a type's devices)."""
    current_devices: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    current_nodes: list[tuple[int, ...]] = field(default_factory=list)
    lease_expires_s: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(m,) end of the job's lease in the last plan that included it (absolute s; 0 = none)."""
    lease_time_share: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(m,) the fraction of its lease the job runs on the leased devices (1 = all)."""
    tracks_usage: bool = False
    """A plan returned Astraea's bookkeeping: snapshots then carry each job's device-time
    used (`device_s`) and each tenant's used and entitled device-time."""
    tenant_rate: dict[str, float] = field(default_factory=dict)
    """Devices each tenant is entitled to under the last plan (Astraea)."""
    tenant_entitled_s: dict[str, float] = field(default_factory=dict)
    """Entitled device-time accrued so far per tenant (device-s): the entitled devices of the
    plan in force times each simulated round's length."""
    contention_sum: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(m,) sum over the rounds the job was active of the number of active jobs."""
    active_rounds: FloatArray = field(default_factory=lambda: np.zeros(0))

    @staticmethod
    def start(workload: Workload) -> JobState:
        m = workload.num_jobs
        return JobState(
            work_done=np.zeros(m),
            finish_s=np.full(m, math.nan),
            start_s=np.full(m, math.nan),
            run_s=np.zeros(m),
            device_s=np.zeros(m),
            restarts=np.zeros(m, np.int64),
            placement=[None] * m,
            isolated_time_s=np.zeros(m),
            previous_iso=np.full(m, math.nan),
            previous_remaining=np.full(m, math.nan),
            reference_finish_s=np.zeros(m),
            reference_state=np.full((m, 5), math.nan),
            partner=np.full(m, -1, np.int64),
            stride_pass=np.full(m, math.nan),
            current_type=np.full(m, -1, np.int64),
            current_devices=np.zeros(m, np.int64),
            current_nodes=[()] * m,
            lease_expires_s=np.zeros(m),
            lease_time_share=np.ones(m),
            contention_sum=np.zeros(m),
            active_rounds=np.zeros(m),
        )

    def place(self, placements: dict[int, Placement]) -> None:
        """The placements of the round just simulated (jobs not in it did not run)."""
        m = len(self.placement)
        self.placement = [None] * m
        self.current_type[:] = -1
        self.current_devices[:] = 0
        self.current_nodes = [()] * m
        reported: set[int] = set()
        for i in sorted(placements):
            placed = placements[i]
            self.placement[i] = placed
            if placed.shared >= 0:
                if placed.shared in reported:
                    continue  # shared devices are reported once, by the first job still there
                reported.add(placed.shared)
            self.current_type[i] = placed.type_index
            self.current_devices[i] = placed.devices
            self.current_nodes[i] = tuple(node for node, _ in placed.nodes)

    def apply(self, active: IntArray, carry: Carry) -> None:
        """Keep what a response returned for the snapshot jobs `active` (global indices)."""
        if carry.isolated_time_s is not None:
            self.isolated_time_s[active] = np.nan_to_num(carry.isolated_time_s)
        if carry.isolated_throughput is not None and carry.remaining_steps is not None:
            iso, rem = carry.isolated_throughput, carry.remaining_steps
            ok = np.isfinite(iso) & (iso > 0) & np.isfinite(rem) & (rem >= 0)
            self.previous_iso[active] = np.where(ok, iso, math.nan)
            self.previous_remaining[active] = np.where(ok, rem, math.nan)
        if carry.reference_finish_s is not None:
            self.reference_finish_s[active] = np.nan_to_num(carry.reference_finish_s)
        if carry.reference_state is not None:
            has = np.isfinite(carry.reference_state[:, 0])
            self.reference_state[active[has]] = carry.reference_state[has]
        if carry.stride_pass is not None:
            given = np.isfinite(carry.stride_pass)
            self.stride_pass[active[given]] = carry.stride_pass[given]
        if carry.lease_expires_s is not None and carry.lease_time_share is not None:
            self.lease_expires_s[active] = carry.lease_expires_s
            self.lease_time_share[active] = carry.lease_time_share
        if carry.entitled_devices is not None:
            self.tracks_usage = True
            self.tenant_rate = dict(carry.entitled_devices)
        if carry.partner:
            partner = np.asarray(carry.partner, np.int64)
            self.partner[active] = np.where(partner >= 0, active[np.maximum(partner, 0)], -1)
        else:
            self.partner[active] = -1

    def accrue_entitlement(self, seconds: float) -> None:
        """A round of `seconds` under the plan in force: each tenant's entitled device-time
        grows by its entitled devices times the round."""
        for tenant, devices in self.tenant_rate.items():
            self.tenant_entitled_s[tenant] = self.tenant_entitled_s.get(tenant, 0.0) + (
                devices * seconds
            )
