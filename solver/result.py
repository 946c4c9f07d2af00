"""What a formulation returns: the plan and its certificate."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, overload

import numpy as np
from numpy.typing import NDArray

from apportion.solver.model import FloatArray, ReferenceFinishState
from apportion.solver.outcome import ModelSize as ModelSize  # re-exported
from apportion.solver.outcome import Termination as Termination  # re-exported
from apportion.solver.queue_plan import DeviceQueue as DeviceQueue  # re-exported
from apportion.solver.queue_plan import QueueAssignment as QueueAssignment  # re-exported
from apportion.solver.queue_plan import QueueSection as QueueSection  # re-exported

if TYPE_CHECKING:
    from apportion.solver.fairness_result import AuctionSection, StrideSection, UsageSection
    from apportion.solver.groups import GroupSection
    from apportion.solver.placement_plan import AdmissionSection, PlacementSection


class JobStatus(StrEnum):
    ALLOCATED = "allocated"
    UNSERVABLE = "unservable"
    FINISHED = "finished"
    DEFERRED = "deferred"
    """Servable but left for a later round by the policy (allox's alpha filter)."""


GAP_FLOOR = 1e-12
"""Denominator floor of `relative_gap` (objective and bound both near 0 count as equal)."""


@overload
def relative_gap(objective: float, bound: float, scale: float = GAP_FLOOR) -> float: ...
@overload
def relative_gap(
    objective: float | None, bound: float | None, scale: float = GAP_FLOOR
) -> float | None: ...
def relative_gap(
    objective: float | None, bound: float | None, scale: float = GAP_FLOOR
) -> float | None:
    """The one gap definition (A1.4): |objective - bound| / max(|objective|, |bound|, scale);
    None when either is missing, inf when either is not finite. `scale` is the objective's
    natural magnitude for objectives that can be near 0 whatever the instance (a sum of
    logarithms); 1e-12 otherwise."""
    if objective is None or bound is None:
        return None
    if not (math.isfinite(objective) and math.isfinite(bound)):
        return math.inf
    return abs(objective - bound) / max(abs(objective), abs(bound), scale, GAP_FLOOR)


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
    gap_scale: float = GAP_FLOOR
    """The objective's natural magnitude, the floor of the gap's denominator (`relative_gap`)."""

    @property
    def gap(self) -> float | None:
        """`relative_gap(objective, bound, gap_scale)`."""
        return relative_gap(self.objective, self.bound, self.gap_scale)


@dataclass(frozen=True, slots=True)  # slots: one is made per allocated job (100,000s)
class ConfigurationChoice:
    """A configuration chosen for a job (sia, pollux) and its placement on nodes."""

    type_index: int
    nodes: int
    devices: int
    goodput: float
    """Useful samples/s at this configuration."""
    normalized_goodput: float
    """Goodput / the job's smallest valid goodput (dimensionless)."""
    restart_factor: float
    """r_i applied to configurations other than the current one."""
    unchanged: bool
    """Same configuration as the job's current placement."""
    node_devices: tuple[tuple[str, int], ...] = ()
    """(node name, devices) pairs; empty without a node layout or when placement failed."""
    placed: bool = True
    placement_detail: str = ""
    atomic_batch_size: int = 0
    """Pollux model: per-device batch (samples); 0 = n/a."""
    accumulation_steps: int = 0


@dataclass(frozen=True)
class RoundGrant:
    """One job's grant in a round of the round mechanism (A2.11, docs/policies/gavel.md)."""

    job: int
    """Job index."""
    type_index: int
    devices: int
    """Devices of the type the job holds during the round (its scale factor)."""
    nodes: tuple[str, ...] = ()
    """Nodes holding them (empty when the snapshot lists no nodes)."""
    colocated_with: int = -1
    """Space sharing: index of the job sharing these devices (its grant has the same type,
    devices and nodes); -1 = the job runs alone."""
    lease_extended: bool = False
    """The job keeps the nodes it held in the previous round (Gavel's lease extension)."""
    devices_placed: tuple[int, ...] = ()
    """The placement stage's devices (topology device indices); empty = no placement stage."""


@dataclass(frozen=True)
class ScheduledRound:
    index: int
    """0 = the next round."""
    grants: tuple[RoundGrant, ...] = ()


Colocated = tuple[tuple[int, int, int, float], ...]
"""Pairs sharing devices: (job a index, job b index, type index, time share) each."""


@dataclass(frozen=True)
class PartitionReport:
    """How a POP solve went (`SolveOptions.partitions`, B10)."""

    partitions: int
    mode: str
    workers: int
    """Worker processes used (bounded by the machine's cores)."""
    setup_time_s: float
    """Partitioning and sending the sub-problems (s)."""
    sub_solve_time_s: tuple[float, ...]
    """Per sub-problem, its solve time in its worker (s; 0 for empty or unsolved ones)."""
    sub_termination: tuple[Termination, ...]
    """Per sub-problem, how its solve ended (NO_SOLUTION when it never reported)."""
    exact_objective: float | None = None
    """The unpartitioned solve's objective (`partition_exact_gap`), None = not run."""
    exact_termination: Termination | None = None
    exact_time_s: float = 0.0

    @property
    def pop_time_s(self) -> float:
        """POP's own accounting: setup plus the slowest sub-problem (k-way parallelism)."""
        return self.setup_time_s + max(self.sub_solve_time_s, default=0.0)


@dataclass(frozen=True)
class ShareSection:
    """What time-share plans carry beside the time shares (every plan has one, empty unless
    the policy fills it)."""

    colocated: Colocated = ()
    """Space sharing: the pairs that share devices; empty = none."""
    rounds: tuple[ScheduledRound, ...] = ()
    """The next rounds of the round mechanism (`SolveOptions.schedule_rounds`); empty = none."""
    cumulative_isolated_time_s: FloatArray | None = None
    """(m,) finish-time fairness state C_i after this call's update (s); None = n/a."""
    isolated_throughput: FloatArray | None = None
    """(m,) iso_i used by this call (steps/s; 0 for finished jobs); None = n/a."""
    remaining_steps: FloatArray | None = None
    """(m,) R_i at this call (steps), returned with the finish-time state; None = n/a."""
    slo_shortfall: FloatArray | None = None
    """(m,) normalized SLO shortfall e_i in [0, 1] (NaN = the job has no SLO); None = n/a."""
    partition: PartitionReport | None = None
    """POP: how the partitioned solve went (`SolveOptions.partitions`); None = not
    partitioned."""


@dataclass(frozen=True)
class ElasticSection:
    """What the elastic policies (optimus, slaq, lyra) add to their configuration plans; every
    per-job array is aligned with the problem's jobs."""

    workers: NDArray[np.int64]
    """(m,) workers allocated (each `Elasticity.scale_unit` devices), 0 = none."""
    parameter_servers: NDArray[np.int64]
    """(m,) parameter servers allocated (Optimus's parameter-server form), 0 = none."""
    base_devices: NDArray[np.int64]
    """(m,) devices of the job's smallest allocation on its type (its base demand), 0 = not
    admitted."""
    parameter_server_nodes: tuple[tuple[tuple[str, int], ...], ...] = ()
    """Per job, (node name, devices) of its parameter servers."""
    remaining_steps: FloatArray | None = None
    """(m,) predicted remaining steps (optimus, lyra); None = n/a."""
    remaining_time_s: FloatArray | None = None
    """(m,) predicted remaining time at the allocated speed (s; inf = not allocated)."""
    loss_reduction: FloatArray | None = None
    """(m,) predicted normalized loss reduction over the horizon (slaq)."""
    exact_objective: float | None = None
    """The objective of the exact allocation of the same problem, when it was computed."""
    reclaimed_nodes: tuple[str, ...] = ()
    """lyra: loaned nodes given back to the inference cluster."""
    preempted: NDArray[np.bool_] | None = None
    """(m,) lyra: running jobs preempted by the reclaiming."""
    reclaim: Certificate | None = None
    """lyra: the reclaiming's preemption cost (objective), its proven bound and method."""

    def expanded(self, index: NDArray[np.int64], m: int) -> ElasticSection:
        """The section of the jobs `index` laid out over m jobs (the others get nothing)."""

        def rows(array: NDArray[Any], fill: Any) -> NDArray[Any]:
            out = np.full(m, fill, dtype=array.dtype)
            out[index] = array
            return out

        def maybe(array: NDArray[Any] | None, fill: Any) -> NDArray[Any] | None:
            return None if array is None else rows(array, fill)

        nodes: list[tuple[tuple[str, int], ...]] = [()] * m
        for k, i in enumerate(index.tolist()):
            nodes[i] = self.parameter_server_nodes[k] if self.parameter_server_nodes else ()
        return replace(
            self,
            workers=rows(self.workers, 0),
            parameter_servers=rows(self.parameter_servers, 0),
            base_devices=rows(self.base_devices, 0),
            parameter_server_nodes=tuple(nodes),
            remaining_steps=maybe(self.remaining_steps, np.nan),
            remaining_time_s=maybe(self.remaining_time_s, np.inf),
            loss_reduction=maybe(self.loss_reduction, 0.0),
            preempted=maybe(self.preempted, False),
        )


@dataclass(frozen=True)
class ConfigurationSection:
    """Configuration plans (sia, pollux, and the elastic policies optimus, slaq, lyra)."""

    choices: tuple[ConfigurationChoice | None, ...]
    """Per job, the chosen configuration; None = none."""
    elastic: ElasticSection | None = None
    """The elastic policies' workers, parameter servers and predictions; None = n/a."""


@dataclass(frozen=True)
class MarketSection:
    """Market plans (fisher_market): the time shares are bought at `Plan.accelerator_prices`."""

    spending: FloatArray
    """(m,) money spent, sum_j price_j s_i X[i,j] (budget units)."""
    throughput_objective: float | None = None
    """The objective with every buyer's utility in steps/s instead of proportional shares:
    sum_i B_i log thr_i(X) over the buyers (budget units x log(steps/s)). It is the
    certificate's objective plus the constant sum_i B_i log prop_i (A4.1), so the plan and the
    gap are the same in both units; None when the objective is."""
    throughput_bound: float | None = None
    """The certificate's bound shifted by the same constant (None when the bound is)."""


@dataclass(frozen=True)
class WindowSection:
    """Planning-window plans (shockwave)."""

    schedule: NDArray[np.bool_]
    """(T, m) job i runs on its s_i devices in round t (t = 0 is the next round, after the
    work-conserving fill)."""
    reference_finish_time_s: FloatArray
    """(m,) F*_i after this call (absolute s), to send back in the next snapshot's history."""
    reference_state: ReferenceFinishState
    """The F* bookkeeping after this call (A4.6), to send back with F*."""


@dataclass(frozen=True)
class Plan:
    """A policy's answer for m jobs and n types: a common core that every policy fills, and one
    section per plan kind (`apportion.solver.capabilities.PlanKind`).

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
    shares: ShareSection = field(default_factory=ShareSection)
    """Pairs, the round schedule and per-job state of time-share policies."""
    queues: QueueSection | None = None
    """Queue plans; None = not a queue plan."""
    configurations: ConfigurationSection | None = None
    """Configuration plans; None = not a configuration plan."""
    market: MarketSection | None = None
    """Market plans; None = not a market plan."""
    window: WindowSection | None = None
    """Planning-window plans; None = not a window plan."""
    auction: AuctionSection | None = None
    """Themis auction plans (B1): leases and auction outcomes; None = n/a."""
    stride: StrideSection | None = None
    """Gandiva_fair plans (B2): user shares, trades, stride passes; None = n/a."""
    usage: UsageSection | None = None
    """Astraea plans (B3): leases and GPU-time bookkeeping; None = n/a."""
    placement: PlacementSection | None = None
    """The placement stage's devices and certificate (`policy.placement`); None = no stage."""
    admission: AdmissionSection | None = None
    """Admission-ordering plans (tiresias): each job's queue, rank and state; None = n/a."""
    groups: GroupSection | None = None
    """Co-location and resource-shape plans: groups sharing devices, slowdowns, CPU and
    memory per job (`apportion.solver.groups`); None = n/a."""

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

    @staticmethod
    def not_started(m: int, n: int, certificate: Certificate, left_s: float, needed_s: float,
                    work: str) -> Plan:
        """No plan, said at once: the `left_s` seconds left cannot cover the `needed_s` of
        `work` (for the m jobs) that no deadline cuts. `certificate` gives the rest (its
        termination becomes NO_SOLUTION)."""
        detail = (f"not started: {left_s:.3g} s left, and the work for {m} jobs that the time "
                  f"limit cannot cut ({work}) takes about {needed_s:.3g} s")
        return Plan.empty(m, n, replace(certificate, termination=Termination.NO_SOLUTION,
                                        detail=detail))
