"""Tiresias (D1): discretized 2D-LAS and 2D-Gittins with admission in priority order.

Attained service a_i = executed time x devices (GPU time, default) or executed time alone;
the executed time since the job last entered queue 0 comes from the history
(`executed_time_s`). Queue of a job = the number of thresholds its attained service has
reached (a job exactly at a threshold is demoted). Starvation knob rho > 0: a waiting job in
a lower queue whose waiting time (`waiting_time_s`) reaches rho x its executed time returns
to queue 0 with its executed and waiting times reset.

Order: queues ascending; inside a queue, 2D-LAS keeps running jobs ahead of waiting ones and
then first come first served (arrival time, id) -- no preemption inside a queue; 2D-Gittins
sorts by descending Gittins index of the attained service (ties: earlier arrival, id).

Gittins index with samples d_k of total service and quantum Delta:
    G(a, Delta) = #{k: a < d_k <= a + Delta} / sum_{k: d_k > a} min(d_k - a, Delta)
(the conditional probability of finishing within the quantum over the expected service in
it). Default: the supremum over Delta, attained at a breakpoint Delta = d_k - a; with
`gittins_quantum` > 0, Tiresias's fixed quantum; compat = tiresias also reproduces its
denominator quirk (the durations d_k themselves summed for samples finishing in the quantum).
A job past every sample keeps the index of the last sample point below the largest sample.

Admission, in priority order:
* COUNT (default): a job is admitted on its fastest usable type that still has enough free
  devices, else skipped (not blocking). With counts only, this skip-fit is exactly the
  lexicographically best admitted set: each job is admitted iff it fits given every
  better-ranked decision [derived].
* PLACEMENT: the same walk, but "fits" is a placement feasibility check of the admitted jobs
  plus this one on the topology (span limits, skew consolidation, pins, exclusivity), by the
  exact placer's placed-value stage: exact lexicographic admission under placement
  constraints, one check per job (a greedy check suffices when it places them all).

The plan gives time share 1 on its type to every admitted job; running jobs not admitted
are preempted. `Plan.admission.jobs` carries each job's queue, rank, index and the executed and
waiting times to send back.
"""

from __future__ import annotations

import time

import numpy as np

from apportion.formulations.placement.demands import Grant, demand_for, placement_jobs
from apportion.formulations.placement.exact import place_exact
from apportion.formulations.placement.instance import PlacementInstance
from apportion.solver.cluster_topology import topology_of
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, FloatArray, IntArray, Problem, SolveOptions
from apportion.solver.parameters import (
    TIRESIAS_GITTINS_QUANTUM,
    TiresiasAdmission,
    TiresiasMode,
    TiresiasParameters,
    TiresiasService,
)
from apportion.solver.placement_plan import AdmissionInfo, AdmissionSection
from apportion.solver.result import Certificate, JobStatus, Plan, Termination
from apportion.solver.stages import PlacementParameters

PLACEMENT_CHECKS_MAX = 512
"""Jobs admitted by placement checks at most; beyond, jobs are admitted by counts (noted)."""


def queue_of(service: FloatArray, thresholds: tuple[float, ...]) -> IntArray:
    """Queue per job: how many thresholds its attained service has reached."""
    return np.searchsorted(np.asarray(thresholds, np.float64), service, side="right").astype(
        np.int64)


def gittins_index(
    attained: float, samples: FloatArray, quantum: float = 0.0, quirk: bool = False
) -> float:
    """G(a) of the module docstring (sup over Delta when `quantum` is 0)."""
    d = np.sort(np.asarray(samples, np.float64))
    if d.size == 0:
        return 0.0
    later = d[d > attained]
    if later.size == 0:
        below = d[d < d[-1]]
        if below.size == 0 or below[-1] >= attained:
            return 0.0
        return gittins_index(float(below[-1]), d, quantum, quirk)
    rest = later - attained
    deltas = np.array([quantum]) if quantum > 0 else np.unique(rest)
    done = (rest[None, :] <= deltas[:, None])
    if quirk:
        spent = np.where(done, later[None, :], deltas[:, None])
    else:
        spent = np.minimum(rest[None, :], deltas[:, None])
    ratio = done.sum(axis=1) / spent.sum(axis=1)
    return float(ratio.max())


def _attained(problem: Problem, executed: FloatArray, service: TiresiasService) -> FloatArray:
    if service is TiresiasService.TIME:
        return executed.copy()
    return executed * problem.jobs.scale_factor


def admission_order(
    problem: Problem, parameters: TiresiasParameters, compat: Compat
) -> tuple[IntArray, IntArray, FloatArray, FloatArray, FloatArray, FloatArray, np.ndarray]:
    """(order, queue, index, attained, executed, waiting, promoted) after promotions."""
    m = problem.jobs.num_jobs
    inputs = placement_jobs(problem)
    executed = inputs.executed_time_s.copy() if inputs.executed_time_s.size == m else np.zeros(m)
    waiting = inputs.waiting_time_s.copy() if inputs.waiting_time_s.size == m else np.zeros(m)
    running = problem.history.running(m)
    attained = _attained(problem, executed, parameters.service)
    queue = queue_of(attained, parameters.thresholds)
    promoted = np.zeros(m, dtype=bool)
    if parameters.promote_knob > 0:
        promoted = (~running) & (queue > 0) & (waiting >= parameters.promote_knob * executed)
        executed[promoted] = 0.0
        waiting[promoted] = 0.0
        attained[promoted] = 0.0
        queue[promoted] = 0
    index = np.zeros(m)
    arrival = problem.jobs.arrival_time_s
    ids = np.array(problem.jobs.ids, dtype=object)
    id_rank = np.argsort(np.argsort(ids, kind="stable"), kind="stable")
    if parameters.mode is TiresiasMode.GITTINS:
        quantum = parameters.gittins_quantum
        quirk = compat is Compat.TIRESIAS
        if quirk and quantum <= 0:
            quantum = TIRESIAS_GITTINS_QUANTUM
        samples = np.asarray(parameters.service_samples, np.float64)
        index = np.array([gittins_index(float(a), samples, quantum, quirk) for a in attained])
        order = np.lexsort((id_rank, arrival, -index, queue))
    else:
        order = np.lexsort((id_rank, arrival, ~running, queue))
    return order, queue, index, attained, executed, waiting, promoted


def _types_by_speed(problem: Problem, i: int) -> list[int]:
    """Usable types of job i, fastest first."""
    usable = problem.usable[i]
    thr = problem.jobs.throughput[i]
    return [int(j) for j in np.argsort(-thr, kind="stable") if usable[j]]


def skip_fit(problem: Problem, order: IntArray) -> IntArray:
    """Per job, the type it is admitted on by counts (-1 = skipped): the fastest usable type
    with enough free devices left, in `order`."""
    free = problem.cluster.count.astype(np.int64).tolist()
    chosen = np.full(problem.jobs.num_jobs, -1, np.int64)
    # every job's types fastest first (as `_types_by_speed`), as plain lists once
    ranked = np.argsort(-problem.jobs.throughput, axis=1, kind="stable")
    ranked_usable = np.take_along_axis(problem.usable, ranked, axis=1).tolist()
    ranked_types = ranked.tolist()
    scale = problem.jobs.scale_factor.tolist()
    for i in order.tolist():
        if max(free, default=0) < 1:
            break  # nothing fits any more (every gang holds at least one device)
        s = scale[i]
        for j, usable in zip(ranked_types[i], ranked_usable[i], strict=True):
            if usable and free[j] >= s:
                free[j] -= s
                chosen[i] = j
                break
    return chosen


def placement_admission(
    problem: Problem, order: IntArray, parameters: TiresiasParameters, deadline: Deadline
) -> tuple[IntArray, bool, str]:
    """Per job its admitted type (-1 = not admitted) by placement checks in `order`; whether
    every check was proven; a note."""
    topology = topology_of(problem.cluster)
    inputs = placement_jobs(problem)
    stage = PlacementParameters(consolidate_skew_above=parameters.consolidate_skew_above)
    chosen = np.full(problem.jobs.num_jobs, -1, np.int64)
    admitted: list[Grant] = []
    proven = True
    free = problem.cluster.count.astype(np.int64).copy()
    note = ""
    for step, i in enumerate(order.tolist()):
        s = int(problem.jobs.scale_factor[i])
        if step >= PLACEMENT_CHECKS_MAX or deadline.expired():
            note = f"jobs after rank {step} admitted by counts only"
            for j in _types_by_speed(problem, i):
                if free[j] >= s:
                    free[j] -= s
                    chosen[i] = j
                    admitted.append(Grant((i,), j, s))
                    break
            continue
        for j in _types_by_speed(problem, i):
            if free[j] < s:
                continue
            trial = [*admitted, Grant((i,), j, s)]
            demands = tuple(demand_for(problem, inputs, stage, g) for g in trial)
            instance = PlacementInstance(topology, demands, stage.weights)
            result = place_exact(instance, deadline, value_only=True)
            if result.score.placed == len(trial):
                admitted = trial
                free[j] -= s
                chosen[i] = j
                break
            if result.placed_value_bound >= len(trial) - 1e-9:
                proven = False  # not placed, but not proven impossible either
    return chosen, proven, note


def solve_policy(
    problem: Problem,
    parameters: TiresiasParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Tiresias's admission (module docstring)."""
    started = time.perf_counter()
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    order, queue, index, attained, executed, waiting, promoted = admission_order(
        problem, parameters, compat)
    proven, note = True, ""
    if parameters.admission is TiresiasAdmission.PLACEMENT:
        chosen, proven, note = placement_admission(problem, order, parameters, deadline)
    else:
        chosen = skip_fit(problem, order)
    admitted = chosen >= 0
    share = np.zeros((m, n))
    share[np.flatnonzero(admitted), chosen[admitted]] = 1.0
    thr = problem.jobs.throughput[np.arange(m), np.maximum(chosen, 0)] * admitted
    rank = np.empty(m, np.int64)
    rank[order] = np.arange(m)
    running = problem.history.running(m)
    queue_l, rank_l = queue.tolist(), rank.tolist()
    reasons = tuple(
        "" if ok else
        (f"preempted: queue {q}, rank {r}" if run else f"waiting: queue {q}, rank {r}")
        for ok, run, q, r in zip(admitted.tolist(), running.tolist(), queue_l, rank_l,
                                 strict=True)
    )
    count = float(admitted.sum())
    termination = Termination.OPTIMAL if proven else Termination.FEASIBLE
    detail = "lexicographic admission in priority order" + (f"; {note}" if note else "")
    if not proven:
        detail += "; some placement checks were not proven"
    mode = parameters.mode.value
    certificate = Certificate(
        termination=termination,
        maximize=True,
        objective=count,
        bound=count if proven else float(m),
        solver="placement MILP" if parameters.admission is TiresiasAdmission.PLACEMENT
        else "skip-fit",
        formulation=f"tiresias 2D-{mode.upper()} (D1), {parameters.admission.value} admission",
        solve_time_s=time.perf_counter() - started,
        detail=detail,
    )
    del options
    return Plan(
        time_share=share,
        effective_throughput=thr,
        normalized_throughput=admitted.astype(np.float64),
        objective_value=admitted.astype(np.float64),
        job_dual=np.zeros(m),
        accelerator_prices=np.zeros(n),
        certificate=certificate,
        job_status=(JobStatus.ALLOCATED,) * m,
        job_reason=reasons,
        admission=AdmissionSection(tuple(
            AdmissionInfo(
                admitted=ok, queue=q, rank=r, priority_index=pi, attained_service=service,
                promoted=up, executed_time_s=ran, waiting_time_s=waited,
            )
            for ok, q, r, pi, service, up, ran, waited in zip(
                admitted.tolist(), queue_l, rank_l, np.asarray(index, float).tolist(),
                np.asarray(attained, float).tolist(), np.asarray(promoted, bool).tolist(),
                np.asarray(executed, float).tolist(), np.asarray(waiting, float).tolist(),
                strict=True,
            )
        )),
    )

