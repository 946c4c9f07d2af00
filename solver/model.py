"""The validated problem model: frozen dataclasses holding numpy arrays.

Index conventions follow A1.1, docs/policies/common.md: ``i`` jobs (rows, in snapshot order), ``j``
accelerator types (columns, in cluster order). Units are stated per field. Objects of these
classes are only created by `apportion.server.convert` (which validates) or by tests; the
formulations may assume every invariant documented here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from apportion.solver.arrays import FloatArray as FloatArray  # re-exported: the model's types
from apportion.solver.arrays import IntArray as IntArray

if TYPE_CHECKING:
    from apportion.solver.elastic_model import ElasticInputs
    from apportion.solver.fairness_model import FairnessInputs
    from apportion.solver.sharing import SharingInputs
    from apportion.solver.stages import AdmissionParameters, PlacementParameters
    from apportion.solver.topology import PlacementInputs, Topology


class Compat(StrEnum):
    """Reproduce an upstream system's quirks (C1, docs/policies/common.md); NONE = corrected
    behaviour."""

    NONE = "none"
    GAVEL = "gavel"
    SHOCKWAVE = "shockwave"
    SIA = "sia"
    TIRESIAS = "tiresias"
    SYNERGY = "synergy"
    """Synergy's TUNE heuristic instead of the exact OPT (B5)."""
    MURI = "muri"
    """Muri's measured interleaving overheads and merge order (B6)."""
    ANTMAN = "antman"
    """AntMan's least-utilized first fit for opportunistic jobs (D7)."""
    LUCID = "lucid"
    """Lucid's indolent first-fit pairing (D8)."""
    IADEEP = "iadeep"
    """IADeep's per-arrival least-interference greedy (D9)."""


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
    topology: Topology | None = None
    """Domains, devices and links (`apportion.solver.topology`); None = not given (placement
    then uses `topology.default_topology`)."""

    @property
    def num_types(self) -> int:
        return len(self.type_names)


@dataclass(frozen=True)
class GivenGoodput:
    """One `ConfigurationGoodput` entry (sia): goodput of a (type, nodes, devices) shape."""

    type_index: int
    nodes: int
    """Nodes spanned (>= 1)."""
    devices: int
    """Total devices (>= nodes)."""
    goodput: float
    """Useful samples/s (> 0)."""


@dataclass(frozen=True)
class PolluxJobModel:
    """A job's Pollux goodput-model inputs (A5.1, docs/policies/sia.md)."""

    perf_params: FloatArray
    """(n, 7) per type (alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r, gamma) in s, s/sample
    and the dimensionless gamma; a row of NaN = no model on that type."""
    grad_sqr: float
    """|E g|^2 at the baseline batch (> 0)."""
    grad_var: float
    """tr(Sigma) at the baseline batch (>= 0)."""
    init_batch_size: int
    """M0 (samples, > 0)."""
    max_batch_size: int
    """M_max (samples, >= M0)."""
    min_local_batch_size: int
    """Smallest atomic batch (samples, >= 1)."""
    max_local_batch_size: int
    """Largest atomic batch (samples, >= min)."""
    seed_throughput: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(n,) 1-GPU throughput (samples/s) at the largest profiled local batch per type, 0 = none
    (empty = none anywhere): the seeds of cross-type bootstrapping (A5.3)."""


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
    epochs_done: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(m,) epochs completed (shockwave), 0 <= e_i <= E_i. Empty = not given."""
    total_epochs: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(m,) total epochs E_i (shockwave). Empty = not given."""
    epoch_duration_s: tuple[FloatArray, ...] = ()
    """Per job, profiled duration of each epoch on the full gang (s, > 0). Empty = not given."""
    epoch_batch_size: tuple[IntArray, ...] = ()
    """Per job, batch size of each epoch (samples, > 0), same lengths. Empty = not given."""
    given_goodput: tuple[tuple[GivenGoodput, ...], ...] = ()
    """Per job, `Job.configurations` (sia): goodput per (type, nodes, devices). Empty = none."""
    min_devices: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(m,) elasticity: fewest devices (>= 1) (sia). Empty = 1 for every job."""
    max_devices: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(m,) elasticity: most devices (0 = no limit) (sia). Empty = no limit."""
    scale_unit: IntArray = field(default_factory=lambda: np.zeros((0, 0), np.int64))
    """(m, n) devices per replica per type (>= 1) (sia). Empty = 1 everywhere."""
    pollux: tuple[PolluxJobModel | None, ...] = ()
    """Per job, Pollux goodput-model inputs (sia), None = not given. Empty = none."""
    restart_penalty_s: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(m,) restart penalty delta_i (s, >= 0; default 30) (sia). Empty = 30 for every job."""
    job_type: tuple[str, ...] = ()
    """Per job, its job type for type-pair co-location throughputs ("" = none). Empty = none."""
    measured_run_time_s: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(m,) shockwave recalibration: time the job has run on its full gang (s, >= 0; 0 = no
    measurement). Empty = none."""
    measured_epochs: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(m,) epochs completed in `measured_run_time_s` (fractional, >= 0). Empty = none."""

    @property
    def num_jobs(self) -> int:
        return len(self.ids)

    @property
    def remaining_steps(self) -> FloatArray:
        """(m,) R_i = total_steps - steps_done (steps)."""
        return np.asarray(self.total_steps - self.steps_done, dtype=np.float64)


@dataclass(frozen=True)
class ReferenceFinishState:
    """Shockwave's reference-finish-time bookkeeping (A4.6, docs/policies/market.md), one entry per
    job.

    The job's equal-share finish-time estimates form a series; the latest one is kept as is,
    the earlier ones only as their time-weighted mean and total weight. NaN in `estimate_s`
    = no state for that job."""

    estimate_s: FloatArray
    """(m,) latest equal-share estimate F^_i (absolute s on the snapshot clock); NaN = none."""
    estimate_time_s: FloatArray
    """(m,) when the latest estimate was made (snapshot clock, s)."""
    earlier_average_s: FloatArray
    """(m,) time-weighted mean of the earlier estimates (absolute s; 0 when no weight)."""
    earlier_weight_s: FloatArray
    """(m,) total time the earlier estimates were in force (s, >= 0)."""
    job_count: IntArray
    """(m,) active jobs n when the latest estimate was made (0 = unknown)."""

    @staticmethod
    def empty(m: int) -> ReferenceFinishState:
        """No state for any of m jobs."""
        return ReferenceFinishState(
            estimate_s=np.full(m, np.nan),
            estimate_time_s=np.zeros(m),
            earlier_average_s=np.zeros(m),
            earlier_weight_s=np.zeros(m),
            job_count=np.zeros(m, np.int64),
        )

    def take(self, index: IntArray) -> ReferenceFinishState:
        """The entries of the jobs `index`, in that order."""
        return ReferenceFinishState(
            estimate_s=self.estimate_s[index],
            estimate_time_s=self.estimate_time_s[index],
            earlier_average_s=self.earlier_average_s[index],
            earlier_weight_s=self.earlier_weight_s[index],
            job_count=self.job_count[index],
        )


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
    previous_isolated_throughput: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(m,) FTF state iso_i from the previous call (steps/s); NaN = not given. Empty = none."""
    previous_remaining_steps: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(m,) FTF state R_i at the previous call (steps); NaN = not given. Empty = none."""
    reference_finish_time_s: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(m,) shockwave reference finish time F*_i (absolute s; 0 = not yet estimated).
    Empty = none."""
    reference_state: ReferenceFinishState | None = None
    """Shockwave's F* state per job (A4.6); None = no job has any."""
    colocated_with: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(m,) gandiva: index of the job each job was paired with in the previous plan, -1 =
    none. Empty = no pairs."""

    def running(self, m: int) -> NDArray[np.bool_]:
        """(m,) True for jobs with a current placement."""
        if self.current_type.size == 0:
            return np.zeros(m, dtype=bool)
        return np.asarray(self.current_type >= 0)


@dataclass(frozen=True)
class Colocations:
    """Throughputs of two jobs sharing the same devices (A1.1, docs/policies/common.md), steps/s.

    Explicit job pairs: rows of `job_a`, `job_b` (job indices, a != b, equal scale factors)
    with `throughput_a[p, j]` (job_a's throughput on type j while sharing with job_b) and
    `throughput_b[p, j]`. Type pairs: `type_a[q]`, `type_b[q]` (Jobs.job_type values) with
    `type_throughput_a[q, j]`, `type_throughput_b[q, j]`. 0 = cannot share on that type."""

    job_a: IntArray
    job_b: IntArray
    throughput_a: FloatArray
    throughput_b: FloatArray
    type_a: tuple[str, ...] = ()
    type_b: tuple[str, ...] = ()
    type_throughput_a: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    type_throughput_b: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))


class TenantSharing(StrEnum):
    """How a tenant's share is divided among its jobs."""

    FAIRNESS = "fairness"
    FIFO = "fifo"


@dataclass(frozen=True)
class Tenant:
    """A tenant (entity) of hierarchical policies; jobs name it in `Jobs.tenant`."""

    name: str
    weight: float = 1.0
    """Tenant weight E_e > 0."""
    sharing: TenantSharing = TenantSharing.FAIRNESS


@dataclass(frozen=True)
class Problem:
    """One validated snapshot."""

    cluster: Cluster
    jobs: Jobs
    history: History
    time_s: float = 0.0
    round_duration_s: float = 0.0
    tenants: tuple[Tenant, ...] = ()
    """Tenants listed in the snapshot (others have weight 1 and fairness sharing)."""
    colocations: Colocations | None = None
    """Co-location (space-sharing) throughputs; None = none given."""
    fairness: FairnessInputs | None = None
    """Bids, leases, stride passes and GPU-time of the fairness policies (B1-B3,
    `apportion.solver.fairness_model`); None = none given."""
    placement: PlacementInputs | None = None
    """Per-job placement inputs and cell quotas (`apportion.solver.topology`); None = none
    given (every job with the defaults of `PlacementJobs.defaults`)."""
    elastic: ElasticInputs | None = None
    """Loss histories, speed models, per-node holdings and loaned servers of the elastic
    policies (optimus, slaq, lyra); None = none given."""
    sharing: SharingInputs | None = None
    """Inputs of the co-location and resource-shape policies (`apportion.solver.sharing`);
    None = none given."""

    @property
    def usable(self) -> NDArray[np.bool_]:
        """(m, n) cells a job can run on: throughput > 0 and enough devices of the type (B4)."""
        fits = self.jobs.scale_factor[:, None] <= self.cluster.count[None, :]
        return (self.jobs.throughput > 0) & fits


class SolverPreference(StrEnum):
    AUTO = "auto"
    CLARABEL = "clarabel"
    HIGHS = "highs"


class PartitionMode(StrEnum):
    """How POP assigns jobs to sub-problems (B10)."""

    RANDOM = "random"
    """Each job independently uniform at random (seeded by `SolveOptions.seed`), POP's client
    partitioning."""
    MODULO = "modulo"
    """Job position in the snapshot modulo k (POP's Figure 2 script, with jobs in id order)."""


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
    partitions: int = 0
    """POP (B10): solve k sub-problems, each with a share of the jobs and floor(W/k) devices of
    every type, in parallel worker processes; 0 or 1 = the policy's exact solve."""
    partition_mode: PartitionMode = PartitionMode.RANDOM
    partition_exact_gap: bool = False
    """With partitions > 1, also solve the whole problem and report the partitioned plan's gap
    to its proven bound."""


@dataclass(frozen=True)
class PolicyRequest:
    """A resolved policy: canonical name, typed parameters and compat mode."""

    name: str
    parameters: object
    compat: Compat = Compat.NONE
    requested_name: str = ""
    """The name the client used (an alias or the canonical name)."""
    extra: dict[str, object] = field(default_factory=dict)
    placement: PlacementParameters | None = None
    """The placement stage after the policy (`apportion.solver.stages`); None = none."""
    admission: AdmissionParameters | None = None
    """The admission stage before the policy; None = accept every job."""


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
