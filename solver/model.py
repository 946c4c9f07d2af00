"""The validated problem model: frozen dataclasses holding numpy arrays.

Index conventions follow A1.1, docs/policies/common.md: ``i`` jobs (rows, in snapshot order), ``j``
accelerator types (columns, in cluster order). Units are stated per field. A model is complete:
every per-job array is filled for every job (defaults stated on the fields), so formulations
never test sizes. Models are created by `apportion.server.convert` (which validates) or by
`apportion.solver.validation.make_problem` (which validates the same way); the
formulations may assume every invariant documented here. Derived arrays
(`Problem.usable`, `Problem.proportional_throughput`, the float copies of counts and scale
factors) are computed once per model and cached.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

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

_Rows = TypeVar("_Rows", bound=Any)


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

    @cached_property
    def count_float(self) -> FloatArray:
        """(n,) `count` as float64 (devices), for arithmetic with shares."""
        return np.asarray(self.count, dtype=np.float64)


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


@dataclass(frozen=True, eq=False)
class GivenGoodputs:
    """Every job's `Job.configurations` (sia) as columns: the entries of all jobs, job by
    job in order; job i's are `start[i]:start[i + 1]`. Indexing by job gives its entries as
    `GivenGoodput`s (`len` = the jobs)."""

    start: IntArray
    """(m + 1,) offsets into the entry columns, non-decreasing, start[0] = 0."""
    type_index: IntArray
    nodes: IntArray
    devices: IntArray
    goodput: FloatArray

    def __post_init__(self) -> None:
        k = int(self.start[-1]) if self.start.size else -1
        sizes = {self.type_index.size, self.nodes.size, self.devices.size, self.goodput.size}
        if self.start.ndim != 1 or not self.start.size or self.start[0] != 0 or sizes != {k}:
            raise ValueError("GivenGoodputs: start must run from 0 to the entries' length")

    @staticmethod
    def none(m: int) -> GivenGoodputs:
        """m jobs without configurations."""
        empty = np.zeros(0, np.int64)
        return GivenGoodputs(np.zeros(m + 1, np.int64), empty, empty, empty, np.zeros(0))

    @staticmethod
    def of(rows: tuple[tuple[GivenGoodput, ...], ...] | list[tuple[GivenGoodput, ...]]
           ) -> GivenGoodputs:
        """From each job's entries."""
        flat = [g for row in rows for g in row]
        start = np.zeros(len(rows) + 1, np.int64)
        np.cumsum([len(row) for row in rows], out=start[1:])
        return GivenGoodputs(
            start,
            np.array([g.type_index for g in flat], np.int64),
            np.array([g.nodes for g in flat], np.int64),
            np.array([g.devices for g in flat], np.int64),
            np.array([g.goodput for g in flat], np.float64),
        )

    @staticmethod
    def from_entries(m: int, job: IntArray, type_index: IntArray, nodes: IntArray,
                     devices: IntArray, goodput: FloatArray) -> GivenGoodputs:
        """From entries of jobs `job` (each job's in order; `job` need not be sorted: the
        entries are grouped by job, keeping their order within a job)."""
        start = np.zeros(m + 1, np.int64)
        np.cumsum(np.bincount(job, minlength=m), out=start[1:])
        if job.size and not (job[1:] >= job[:-1]).all():  # else grouped already: as they are
            order = np.argsort(job, kind="stable")
            type_index, nodes, devices, goodput = (type_index[order], nodes[order],
                                                   devices[order], goodput[order])
        return GivenGoodputs(start, type_index.astype(np.int64, copy=False),
                             nodes.astype(np.int64, copy=False),
                             devices.astype(np.int64, copy=False),
                             goodput.astype(np.float64, copy=False))

    def __len__(self) -> int:
        return int(self.start.size - 1)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GivenGoodputs):
            return NotImplemented
        return all(np.array_equal(getattr(self, name), getattr(other, name))
                   for name in ("start", "type_index", "nodes", "devices", "goodput"))

    __hash__ = None  # type: ignore[assignment]

    def __getitem__(self, i: int) -> tuple[GivenGoodput, ...]:
        return tuple(GivenGoodput(*entry) for entry in self.entries(i))

    def entries(self, i: int) -> list[tuple[int, int, int, float]]:
        """Job i's entries as (type index, nodes, devices, goodput)."""
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        start, type_index, nodes, devices, goodput = self._lists
        i %= len(self)
        span = slice(start[i], start[i + 1])
        return list(zip(type_index[span], nodes[span], devices[span], goodput[span],
                        strict=True))

    @cached_property
    def _lists(self) -> tuple[list[int], list[int], list[int], list[int], list[float]]:
        """The columns as Python lists, made once (per-job reads from arrays cost a numpy
        call each)."""
        return (self.start.tolist(), self.type_index.tolist(), self.nodes.tolist(),
                self.devices.tolist(), self.goodput.tolist())

    @property
    def counts(self) -> IntArray:
        """(m,) entries per job."""
        return np.diff(self.start)

    @property
    def job(self) -> IntArray:
        """Each entry's job."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.counts)

    def take(self, index: IntArray) -> GivenGoodputs:
        """The jobs `index` (repeats allowed), in that order."""
        picked = np.asarray(index, np.int64)
        counts = self.counts[picked]
        start = np.zeros(picked.size + 1, np.int64)
        np.cumsum(counts, out=start[1:])
        rows = np.repeat(self.start[picked] - start[:-1], counts) + np.arange(int(start[-1]))
        return GivenGoodputs(start, self.type_index[rows], self.nodes[rows], self.devices[rows],
                             self.goodput[rows])

    def append(self, more: GivenGoodputs) -> GivenGoodputs:
        """These jobs followed by `more`'s."""
        return GivenGoodputs(
            np.concatenate([self.start, more.start[1:] + self.start[-1]]),
            *(np.concatenate([getattr(self, name), getattr(more, name)])
              for name in ("type_index", "nodes", "devices", "goodput")),
        )


@dataclass(frozen=True)
class PerfParams:
    """Throughput-model parameters theta (Pollux `PerfParams`, A5.1): one row of
    `PolluxJobModel.perf_params`."""

    alpha_c: float
    """Compute time per micro-step, intercept (s)."""
    beta_c: float
    """Compute time per sample of the atomic batch (s/sample)."""
    alpha_n: float
    """Multi-node all-reduce time, intercept (s)."""
    beta_n: float
    """Multi-node all-reduce time per replica beyond 2 (s)."""
    alpha_r: float
    """Single-node all-reduce time, intercept (s)."""
    beta_r: float
    """Single-node all-reduce time per replica beyond 2 (s)."""
    gamma: float
    """Compute/network overlap exponent in [1, 10] (1 = no overlap, large = full overlap)."""


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
    (the default, also when not given at all): the seeds of cross-type bootstrapping (A5.3)."""

    def __post_init__(self) -> None:
        n = self.perf_params.shape[0]
        if self.seed_throughput.size == 0 and n:
            object.__setattr__(self, "seed_throughput", np.zeros(n))
        if self.perf_params.shape != (n, 7) or self.seed_throughput.shape != (n,):
            raise ValueError(
                f"PolluxJobModel: perf_params {self.perf_params.shape}, seed_throughput "
                f"{self.seed_throughput.shape}; expected (n, 7) and (n,)"
            )


@dataclass(frozen=True)
class Jobs:
    """The active jobs. Every array has the job axis first, in snapshot order, and every field
    is filled for every job: a value the snapshot does not give holds the default stated on
    the field (conversion and `Jobs.default` apply it, once)."""

    ids: tuple[str, ...]
    """Unique, non-empty job ids."""
    throughput: FloatArray
    """(m, n) steps/s of the whole job on `scale_factor` devices of type j; 0 = cannot run."""
    scale_factor: IntArray
    """(m,) devices needed at once, 1 <= s_i <= max(count). Default 1."""
    priority_weight: FloatArray
    """(m,) priority weight w_i > 0. Default 1."""
    tenant: tuple[str, ...]
    """Tenant name per job ("" = the job is its own tenant, the default)."""
    arrival_time_s: FloatArray
    """(m,) submission time on the snapshot clock (s). Default 0."""
    steps_done: FloatArray
    """(m,) steps completed (>= 0). Default 0."""
    total_steps: FloatArray
    """(m,) total steps (>= steps_done; 0 = unknown, the default)."""
    deadline_s: FloatArray
    """(m,) absolute deadline (s); NaN = none (the default)."""
    epochs_done: IntArray
    """(m,) epochs completed (shockwave), 0 <= e_i <= E_i. Default 0."""
    total_epochs: IntArray
    """(m,) total epochs E_i (shockwave); 0 = unknown (the default)."""
    epoch_duration_s: tuple[FloatArray, ...]
    """Per job, profiled duration of each epoch on the full gang (s, > 0); default none (a
    length-0 array)."""
    epoch_batch_size: tuple[IntArray, ...]
    """Per job, batch size of each epoch (samples, > 0), the lengths of `epoch_duration_s`."""
    given_goodput: GivenGoodputs
    """Per job, `Job.configurations` (sia): goodput per (type, nodes, devices); default
    none."""
    min_devices: IntArray
    """(m,) elasticity: fewest devices (>= 1) (sia). Default 1."""
    max_devices: IntArray
    """(m,) elasticity: most devices (0 = no limit, the default) (sia)."""
    scale_unit: IntArray
    """(m, n) devices per replica per type (>= 1) (sia). Default 1."""
    pollux: tuple[PolluxJobModel | None, ...]
    """Per job, Pollux goodput-model inputs (sia), None = not given (the default)."""
    restart_penalty_s: FloatArray
    """(m,) restart penalty delta_i (s, >= 0) (sia). Default `DEFAULT_RESTART_PENALTY_S`."""
    job_type: tuple[str, ...]
    """Per job, its job type for type-pair co-location throughputs ("" = none, the
    default)."""
    measured_run_time_s: FloatArray
    """(m,) shockwave recalibration: time the job has run on its full gang (s, >= 0; 0 = no
    measurement, the default)."""
    measured_epochs: FloatArray
    """(m,) epochs completed in `measured_run_time_s` (fractional, >= 0). Default 0."""

    def __post_init__(self) -> None:
        m, n = len(self.ids), self.throughput.shape[1] if self.throughput.ndim == 2 else -1
        _check_shapes("Jobs", m, n, {
            "throughput": (self.throughput.shape, (m, n)),
            "scale_unit": (self.scale_unit.shape, (m, n)),
            **{name: (np.shape(getattr(self, name)), (m,)) for name in _JOB_VECTORS},
            **{name: ((len(getattr(self, name)),), (m,)) for name in _JOB_TUPLES},
        })

    @staticmethod
    def default(m: int, n: int) -> Jobs:
        """m jobs ("job0", ...) with no throughput on any of n types and every other field at
        its default."""
        return Jobs(
            ids=tuple(f"job{i}" for i in range(m)),
            throughput=np.zeros((m, n)),
            scale_factor=np.ones(m, np.int64),
            priority_weight=np.ones(m),
            tenant=("",) * m,
            arrival_time_s=np.zeros(m),
            steps_done=np.zeros(m),
            total_steps=np.zeros(m),
            deadline_s=np.full(m, np.nan),
            epochs_done=np.zeros(m, np.int64),
            total_epochs=np.zeros(m, np.int64),
            epoch_duration_s=(np.zeros(0),) * m,
            epoch_batch_size=(np.zeros(0, np.int64),) * m,
            given_goodput=GivenGoodputs.none(m),
            min_devices=np.ones(m, np.int64),
            max_devices=np.zeros(m, np.int64),
            scale_unit=np.ones((m, n), np.int64),
            pollux=(None,) * m,
            restart_penalty_s=np.full(m, DEFAULT_RESTART_PENALTY_S),
            job_type=("",) * m,
            measured_run_time_s=np.zeros(m),
            measured_epochs=np.zeros(m),
        )

    def append(self, more: Jobs) -> Jobs:
        """These jobs followed by `more` (same accelerator types)."""
        return _appended(self, more)

    def take(self, index: IntArray) -> Jobs:
        """The jobs `index` (repeats allowed: then give them new ids), in that order."""
        return _taken(self, index)

    @property
    def num_jobs(self) -> int:
        return len(self.ids)

    @cached_property
    def row(self) -> dict[str, int]:
        """Job id -> its index (made once per `Jobs`)."""
        return {job_id: i for i, job_id in enumerate(self.ids)}

    @property
    def remaining_steps(self) -> FloatArray:
        """(m,) R_i = total_steps - steps_done (steps)."""
        return np.asarray(self.total_steps - self.steps_done, dtype=np.float64)

    @cached_property
    def scale_factor_float(self) -> FloatArray:
        """(m,) `scale_factor` as float64 (devices), for arithmetic with shares."""
        return np.asarray(self.scale_factor, dtype=np.float64)


DEFAULT_RESTART_PENALTY_S = 30.0
"""`Jobs.restart_penalty_s` when the snapshot gives none (sia's delta, s)."""

_JOB_VECTORS = (
    "scale_factor", "priority_weight", "arrival_time_s", "steps_done", "total_steps",
    "deadline_s", "epochs_done", "total_epochs", "min_devices", "max_devices",
    "restart_penalty_s", "measured_run_time_s", "measured_epochs",
)
_JOB_TUPLES = (
    "tenant", "epoch_duration_s", "epoch_batch_size", "given_goodput", "pollux", "job_type",
)


def _appended(first: _Rows, more: _Rows) -> _Rows:
    """Every per-job field of `first` followed by `more`'s (arrays along the job axis, tuples
    concatenated; scalars and the other fields from `first`)."""
    values: dict[str, object] = {}
    for item in fields(first):
        a, b = getattr(first, item.name), getattr(more, item.name)
        if isinstance(a, np.ndarray):
            values[item.name] = np.concatenate([a, b], axis=0)
        elif isinstance(a, tuple):
            values[item.name] = a + b
        elif isinstance(a, ReferenceFinishState):
            values[item.name] = _appended(a, b)
        elif isinstance(a, GivenGoodputs):
            values[item.name] = a.append(b)
        else:
            values[item.name] = a
    out: _Rows = type(first)(**values)
    return out


def _taken(rows: _Rows, index: IntArray) -> _Rows:
    """Every per-job field of `rows` at the job indices `index`."""
    values: dict[str, object] = {}
    picked = np.asarray(index, dtype=np.int64)
    for item in fields(rows):
        value = getattr(rows, item.name)
        if isinstance(value, np.ndarray):
            values[item.name] = value[picked]
        elif isinstance(value, tuple):
            values[item.name] = tuple(value[i] for i in picked.tolist())
        elif isinstance(value, (ReferenceFinishState, GivenGoodputs)):
            values[item.name] = value.take(picked)
        else:
            values[item.name] = value
    out: _Rows = type(rows)(**values)
    return out


def _check_shapes(owner: str, m: int, n: int,
                  shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...]]]) -> None:
    """Raise ValueError (a programming error, not bad input) when an array of a model object
    does not have its documented shape."""
    wrong = [f"{name} {got} (expected {want})" for name, (got, want) in shapes.items()
             if got != want]
    if wrong:
        raise ValueError(f"{owner} with {m} jobs and {n} types: " + ", ".join(wrong))


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
    """Bookkeeping carried between calls. Every array is aligned with the jobs and filled for
    every job (a job without a history entry holds the defaults stated on the fields)."""

    received_time_s: FloatArray
    """(m, n) seconds run on each type since the last reset. Default 0."""
    cumulative_isolated_time_s: FloatArray
    """(m,) finish-time-fairness state C_i (s). Default 0."""
    restarts: IntArray
    """(m,) restarts so far. Default 0."""
    elapsed_since_reset_s: float
    """Seconds since the time-share allocation was last recomputed (>= 0)."""
    current_type: IntArray
    """(m,) type index of the job's current placement (`JobHistory.current`), -1 = not
    running (the default)."""
    current_devices: IntArray
    """(m,) devices the running job holds (>= 1 when running; 0 otherwise)."""
    busy_until_s: FloatArray
    """(m,) `Placement.busy_until_s` as given (absolute s; 0 = not given, the default)."""
    current_nodes: tuple[tuple[int, ...], ...]
    """Per job, indices into `Cluster.node_names` of the nodes it occupies (default ())."""
    previous_isolated_throughput: FloatArray
    """(m,) FTF state iso_i from the previous call (steps/s); NaN = not given (the
    default)."""
    previous_remaining_steps: FloatArray
    """(m,) FTF state R_i at the previous call (steps); NaN = not given (the default)."""
    reference_finish_time_s: FloatArray
    """(m,) shockwave reference finish time F*_i (absolute s; 0 = not yet estimated, the
    default)."""
    reference_state: ReferenceFinishState
    """Shockwave's F* state per job (A4.6); NaN estimate = no state (the default)."""
    colocated_with: IntArray
    """(m,) gandiva: index of the job each job was paired with in the previous plan, -1 =
    none (the default)."""

    def __post_init__(self) -> None:
        m, n = self.restarts.shape[0], self.received_time_s.shape[-1]
        _check_shapes("History", m, n, {
            "received_time_s": (self.received_time_s.shape, (m, n)),
            "current_nodes": ((len(self.current_nodes),), (m,)),
            "reference_state": (self.reference_state.estimate_s.shape, (m,)),
            **{name: (np.shape(getattr(self, name)), (m,)) for name in _HISTORY_VECTORS},
        })

    @staticmethod
    def default(m: int, n: int) -> History:
        """No job has any history (every field at its default)."""
        return History(
            received_time_s=np.zeros((m, n)),
            cumulative_isolated_time_s=np.zeros(m),
            restarts=np.zeros(m, np.int64),
            elapsed_since_reset_s=0.0,
            current_type=np.full(m, -1, np.int64),
            current_devices=np.zeros(m, np.int64),
            busy_until_s=np.zeros(m),
            current_nodes=((),) * m,
            previous_isolated_throughput=np.full(m, np.nan),
            previous_remaining_steps=np.full(m, np.nan),
            reference_finish_time_s=np.zeros(m),
            reference_state=ReferenceFinishState.empty(m),
            colocated_with=np.full(m, -1, np.int64),
        )

    def append(self, more: History) -> History:
        """This history followed by `more`'s entries (this one's elapsed_since_reset_s)."""
        return _appended(self, more)

    def take(self, index: IntArray) -> History:
        """The entries of the jobs `index`, in that order (`colocated_with` still holds the
        old job indices)."""
        return _taken(self, index)

    def running(self, m: int | None = None) -> NDArray[np.bool_]:
        """(m,) True for jobs with a current placement. (`m`, the number of jobs, is not
        needed: the history is complete; callers passing it still work.)"""
        return self._running

    @cached_property
    def _running(self) -> NDArray[np.bool_]:
        return np.asarray(self.current_type >= 0)


_HISTORY_VECTORS = (
    "cumulative_isolated_time_s", "current_type", "current_devices", "busy_until_s",
    "previous_isolated_throughput", "previous_remaining_steps", "reference_finish_time_s",
    "colocated_with",
)


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

    @cached_property
    def usable(self) -> NDArray[np.bool_]:
        """(m, n) cells a job can run on: throughput > 0 and enough devices of the type (B4)."""
        fits = self.jobs.scale_factor[:, None] <= self.cluster.count[None, :]
        return np.asarray((self.jobs.throughput > 0) & fits)

    @cached_property
    def proportional_throughput(self) -> FloatArray:
        """(m,) prop_i = sum_j T[i,j] W[j] / sum_k W[k] (steps/s, A1.3): job i's throughput on
        a device mix identical to the cluster's (0 for every job of a cluster without
        devices)."""
        total = float(self.cluster.count.sum())
        if total <= 0:
            return np.zeros(self.jobs.num_jobs)
        return np.asarray(self.jobs.throughput @ self.cluster.count_float / total, np.float64)


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
