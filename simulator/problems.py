"""The snapshot of the simulated cluster at a round, as the solver's model (`Problem`).

The model is filled the way `apportion.server.convert` fills it from a `SolveRequest` (every
per-job array present, defaults applied), so that a snapshot sent to `apportion serve`
(`simulator.wire`) converts back to the same model: the in-process and the service paths see
one problem. What is filled beyond the common fields follows the policy's capabilities:
epoch profiles always when the workload has them, co-location rates when the policy reads
them, configurations (goodput per (type, nodes, devices), elasticity, restart penalty) when
it reads configurations, per-iteration stage times (Muri) when it reads them and the workload
has them, CPU/memory profiles and the nodes' cores and memory (Synergy) likewise.

The policy sees estimated throughputs (`ProblemContext.estimated`, the true ones unless
`Fidelity.estimate_error` is set) and the true remaining work (Gavel's simulator does the
same: remaining steps are known exactly).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from apportion.datasets.cluster import ClusterSpec
from apportion.formulations.synergy import fair_share
from apportion.simulator.state import JobState
from apportion.simulator.workload import Workload, epochs_done
from apportion.solver.capabilities import Capabilities
from apportion.solver.fairness_model import FairnessInputs, TenantUsage
from apportion.solver.model import (
    Cluster,
    Colocations,
    FloatArray,
    GivenGoodput,
    GivenGoodputs,
    History,
    IntArray,
    Jobs,
    Problem,
    ReferenceFinishState,
)
from apportion.solver.sharing import GroupInterference, SharingInputs

DEFAULT_RESTART_PENALTY_S = 30.0
"""The restart penalty configuration policies assume when the snapshot gives none (s)."""


def model_cluster(spec: ClusterSpec) -> Cluster:
    """The model of a cluster description."""
    index = {t: j for j, t in enumerate(spec.types)}
    return Cluster(
        type_names=tuple(spec.types),
        count=np.array(spec.counts, np.int64),
        cost_per_hour=np.array([spec.cost_per_hour.get(t, 1.0) for t in spec.types]),
        node_names=tuple(node.name for node in spec.nodes),
        node_type=np.array([index[node.accelerator_type] for node in spec.nodes], np.int64),
        node_devices=np.array([node.devices for node in spec.nodes], np.int64),
    )


@dataclass(frozen=True)
class ProblemContext:
    """What stays the same for every snapshot of one simulation."""

    workload: Workload
    cluster: Cluster
    capabilities: Capabilities
    round_s: float
    estimated: FloatArray
    """(m, n) throughputs the policy sees."""
    estimate_factor: FloatArray
    """(m, n) estimated / true (applied to goodputs too)."""
    restart_penalty_s: float = 0.0
    """Sent as every job's restart penalty to configuration policies; 0 = their default."""
    recalibrate: bool = False
    node_cpus: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(nodes,) cores of each node, sent to resource-shape policies (synergy); empty = none."""
    node_memory_gib: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(nodes,) host memory of each node (GiB)."""

    @cached_property
    def fair_shape(self) -> tuple[float, float]:
        """Cores and GiB per GPU of the GPU-proportional share (0 without node cores)."""
        return fair_share(self.cluster.node_devices, self.node_cpus, self.node_memory_gib)


def build_problem(ctx: ProblemContext, state: JobState, active: IntArray, now_s: float) -> Problem:
    """The snapshot of the jobs `active` (global indices, ascending) at `now_s`; history
    received time zero (time-share rounds set their own, `with_round_history`)."""
    w = ctx.workload
    caps = ctx.capabilities
    k, n = active.size, ctx.cluster.num_types
    pick = active.tolist()
    total = w.total_steps[active]
    done = np.minimum(state.work_done[active], total)
    profiled = bool(w.epoch_duration_s)
    durations = tuple(w.epoch_duration_s[i] for i in pick) if profiled else (np.zeros(0),) * k
    batches = (
        tuple(w.epoch_batch_size[i] for i in pick) if profiled else (np.zeros(0, np.int64),) * k
    )
    epochs = (
        np.array([epochs_done(d, x) for d, x in zip(durations, done, strict=True)], np.int64)
        if profiled
        else np.zeros(k, np.int64)
    )
    measured_time = np.zeros(k)
    measured_epochs = np.zeros(k)
    if ctx.recalibrate and profiled:
        measured_time = state.run_s[active].copy()
        measured_epochs = np.array(
            [_fractional_epochs(d, x) for d, x in zip(durations, done, strict=True)]
        )
    jobs = replace(
        Jobs.default(k, n),
        ids=tuple(w.ids[i] for i in pick),
        throughput=ctx.estimated[active],
        scale_factor=w.scale_factor[active],
        priority_weight=w.priority_weight[active],
        tenant=tuple(w.tenant[i] for i in pick),
        arrival_time_s=w.arrival_s[active],
        steps_done=done,
        total_steps=total,
        deadline_s=w.deadline_s[active],
        epochs_done=epochs,
        total_epochs=np.array([d.size for d in durations], np.int64),
        epoch_duration_s=durations,
        epoch_batch_size=batches,
        measured_run_time_s=measured_time,
        measured_epochs=measured_epochs,
    )
    colocations = None
    if caps.uses_colocations and w.pairs is not None and w.pairs.type_a:
        jobs = replace(jobs, job_type=tuple(w.job_type[i] for i in pick))
        colocations = Colocations(
            job_a=np.zeros(0, np.int64),
            job_b=np.zeros(0, np.int64),
            throughput_a=np.zeros((0, n)),
            throughput_b=np.zeros((0, n)),
            type_a=w.pairs.type_a,
            type_b=w.pairs.type_b,
            type_throughput_a=w.pairs.rows_a,
            type_throughput_b=w.pairs.rows_b,
        )
    if caps.reads_configurations:
        jobs = _with_configurations(ctx, jobs, pick)
    sharing = None
    if caps.reads_stage_times and w.stage_s.size:
        sharing = SharingInputs(stage_s=w.stage_s[active])
    if caps.reads_resource_profiles and w.resource_grid:
        sharing = replace(
            sharing or SharingInputs(),
            resource_grid=tuple(w.resource_grid[i] for i in pick),
            node_cpus=ctx.node_cpus,
            node_memory_gib=ctx.node_memory_gib,
        )
    if caps.reads_device_sharing and w.pairs is not None and w.pairs.rates:
        sharing = replace(sharing or SharingInputs(), interference=pair_interference(w, active))
    return Problem(
        cluster=ctx.cluster,
        jobs=jobs,
        history=_history(state, active, n, now_s),
        time_s=float(now_s),
        round_duration_s=float(ctx.round_s),
        colocations=colocations,
        fairness=_fairness(w, state, active, float(now_s)),
        sharing=sharing,
    )


def pair_interference(w: Workload, active: IntArray) -> tuple[GroupInterference, ...]:
    """Every two snapshot jobs of equal gangs whose job types have pair speeds, as a measured
    group: each member's slowdown = its speed alone over its speed in the pair, the largest
    over the types where both run (the co-location policies' interference has no type).
    Quadratic in the active jobs."""
    rates, thr = w.pairs.rates if w.pairs is not None else {}, w.throughput
    out: list[GroupInterference] = []
    pick = active.tolist()
    for x, a in enumerate(pick):
        for y in range(x + 1, len(pick)):
            b = pick[y]
            if w.scale_factor[a] != w.scale_factor[b]:
                continue
            ra = rates.get((w.job_type[a], w.job_type[b]))
            rb = rates.get((w.job_type[b], w.job_type[a]))
            if ra is None or rb is None:
                continue
            both = (ra > 0) & (rb > 0) & (thr[a] > 0) & (thr[b] > 0)
            if not both.any():
                continue
            slow_a = float((thr[a][both] / ra[both]).max())
            slow_b = float((thr[b][both] / rb[both]).max())
            out.append(GroupInterference((x, y), (slow_a, slow_b)))
    return tuple(out)


def _fairness(
    w: Workload, state: JobState, active: IntArray, now_s: float
) -> FairnessInputs | None:
    """The fairness state carried from the previous plans (None when there is none, as the
    service reads a snapshot that names none): Gandiva_fair's stride passes; the leases of
    Themis's auction and Astraea, for jobs that still hold the devices (they ran in the
    previous round; the service takes no lease without a current placement); Astraea's
    device-time used per job (GPU-seconds held so far) and per tenant (its jobs', finished ones
    included), with the tenant's entitled device-time accrued so far."""
    k = active.size
    passes = state.stride_pass[active]
    holds = (state.current_type[active] >= 0) & (state.lease_expires_s[active] > now_s)
    leases = np.where(holds, state.lease_expires_s[active], 0.0)
    shares = np.where(holds, state.lease_time_share[active], 1.0)
    usage: tuple[TenantUsage, ...] = ()
    gpu_time = np.zeros(k)
    if state.tracks_usage:
        gpu_time = state.device_s[active].copy()
        used: dict[str, float] = {}
        for i in np.flatnonzero(state.device_s > 0).tolist():
            key = w.tenant[i] or w.ids[i]
            used[key] = used.get(key, 0.0) + float(state.device_s[i])
        names = sorted(set(used) | set(state.tenant_entitled_s))
        usage = tuple(
            TenantUsage(name, used.get(name, 0.0), state.tenant_entitled_s.get(name, 0.0))
            for name in names
        )
    if not (np.isfinite(passes).any() or leases.any() or gpu_time.any() or usage):
        return None
    return replace(
        FairnessInputs.empty(k),
        stride_pass=passes,
        lease_expires_s=leases,
        lease_time_share=shares,
        gpu_time_s=gpu_time,
        tenant_usage=usage,
    )


def _fractional_epochs(durations: FloatArray, work_done: float) -> float:
    """Epochs completed after `work_done` profiled seconds, counting the current one in part."""
    whole = epochs_done(durations, work_done)
    if whole >= durations.size:
        return float(durations.size)
    spent = float(durations[:whole].sum())
    return whole + max(work_done - spent, 0.0) / float(durations[whole])


def _with_configurations(ctx: ProblemContext, jobs: Jobs, pick: list[int]) -> Jobs:
    """Goodput per configuration (estimated), elasticity defaults and the restart penalty."""
    w = ctx.workload
    k, n = len(pick), ctx.cluster.num_types
    given = GivenGoodputs.none(k)
    if w.configurations:
        given = GivenGoodputs.of(tuple(
            tuple(
                GivenGoodput(t, nodes, devices, goodput * float(ctx.estimate_factor[i, t]))
                for t, nodes, devices, goodput in w.configurations[i]
            )
            for i in pick
        ))
    penalty = ctx.restart_penalty_s if ctx.restart_penalty_s > 0 else DEFAULT_RESTART_PENALTY_S
    return replace(
        jobs,
        given_goodput=given,
        pollux=(None,) * k,
        min_devices=np.ones(k, np.int64),
        max_devices=np.zeros(k, np.int64),
        scale_unit=np.ones((k, n), np.int64),
        restart_penalty_s=np.full(k, penalty),
    )


def _history(state: JobState, active: IntArray, n: int, now_s: float) -> History:
    k = active.size
    ref = state.reference_state[active]
    has_state = np.isfinite(ref[:, 0])
    reference_state = ReferenceFinishState.empty(k)
    if has_state.any():
        ref = np.where(has_state[:, None], ref, 0.0)
        reference_state = ReferenceFinishState(
            estimate_s=np.where(has_state, ref[:, 0], np.nan),
            estimate_time_s=np.minimum(ref[:, 1], now_s),
            earlier_average_s=ref[:, 2],
            earlier_weight_s=ref[:, 3],
            job_count=ref[:, 4].astype(np.int64),
        )
    partner = _partners(state.partner, active)
    return History(
        received_time_s=np.zeros((k, n)),
        cumulative_isolated_time_s=state.isolated_time_s[active],
        restarts=state.restarts[active],
        elapsed_since_reset_s=0.0,
        current_type=state.current_type[active],
        current_devices=state.current_devices[active],
        busy_until_s=np.zeros(k),
        current_nodes=tuple(state.current_nodes[i] for i in active.tolist()),
        previous_isolated_throughput=state.previous_iso[active],
        previous_remaining_steps=state.previous_remaining[active],
        reference_finish_time_s=state.reference_finish_s[active],
        reference_state=reference_state,
        colocated_with=partner,
    )


def _partners(partner: IntArray, active: IntArray) -> IntArray:
    """(k,) each snapshot job's partner as a snapshot index (-1 = none, also when the partner
    left)."""
    row_of = {int(i): row for row, i in enumerate(active.tolist())}
    out = np.array([row_of.get(int(p), -1) for p in partner[active]], np.int64)
    for a, b in enumerate(out.tolist()):
        if b >= 0 and out[b] != a:
            out[a] = -1
    return out


def with_round_history(
    problem: Problem, received_s: FloatArray, elapsed_s: float, state: JobState, active: IntArray
) -> Problem:
    """`problem` with the round mechanism's bookkeeping (time received per type since the last
    reset, time elapsed since it) and the placements of the previous round."""
    return replace(
        problem,
        history=replace(
            problem.history,
            received_time_s=received_s,
            elapsed_since_reset_s=float(elapsed_s),
            current_type=state.current_type[active],
            current_devices=state.current_devices[active],
            current_nodes=tuple(state.current_nodes[i] for i in active.tolist()),
        ),
    )
