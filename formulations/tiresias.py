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
  constraints, one check per job (a greedy check suffices when it places them all). After
  `PLACEMENT_CHECKS_MAX` checks, or once the checks' share of the time is used, the rest of
  the order is admitted by counts; the plan is then `optimal` only if that admitted nobody.

Time limit: the Gittins indices leave time for the walk, the walk for the plan; both read
the deadline between array operations (and between placement checks). Jobs left without an
index come after the others of their queue; jobs the walk did not reach are not admitted
("stopped at the time limit"); the plan is then `feasible` with the bound of `admit`.

The plan gives time share 1 on its type to every admitted job; running jobs not admitted
are preempted. `Plan.admission` carries, per job, its queue, rank, index and the executed and
waiting times to send back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from apportion.formulations.placement.demands import Grant, demand_for, placement_jobs
from apportion.formulations.placement.exact import place_exact
from apportion.formulations.placement.instance import PlacementInstance
from apportion.solver.arrays import BoolArray
from apportion.solver.cluster_topology import topology_of
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import Compat, FloatArray, IntArray, Problem, SolveOptions
from apportion.solver.parameters import (
    TIRESIAS_GITTINS_QUANTUM,
    TiresiasAdmission,
    TiresiasMode,
    TiresiasParameters,
    TiresiasService,
)
from apportion.solver.placement_plan import AdmissionSection
from apportion.solver.result import Certificate, JobStatus, Plan, Termination
from apportion.solver.stages import PlacementParameters

PLACEMENT_CHECKS_MAX = 512
"""Jobs admitted by placement checks at most; beyond, jobs are admitted by counts (noted)."""
PLAN_S_PER_JOB = 1e-6
"""Time (s) the admission leaves per job for building the plan (measured: about 0.05 s for
100,000 jobs)."""
COUNT_S_PER_JOB = 1e-6
"""Time (s) placement admission's checks leave per job for the admission by counts after them
(measured: about 0.03 s for 100,000 jobs)."""
SKIP_FIT_WINDOW = 256
"""Fewest jobs in a window of `skip_fit` after a misfit (module docstring of `skip_fit`)."""
GITTINS_CHUNK = 2**18
"""Attained values x service samples per array operation of `gittins_indices`."""


def queue_of(service: FloatArray, thresholds: tuple[float, ...]) -> IntArray:
    """Queue per job: how many thresholds its attained service has reached."""
    return np.searchsorted(np.asarray(thresholds, np.float64), service, side="right").astype(
        np.int64)


def gittins_index(
    attained: float, samples: FloatArray, quantum: float = 0.0, quirk: bool = False
) -> float:
    """G(a) of the module docstring (sup over Delta when `quantum` is 0)."""
    return float(gittins_indices(np.array([attained], np.float64), samples, quantum, quirk)[0])


def gittins_indices(
    attained: FloatArray, samples: FloatArray, quantum: float = 0.0, quirk: bool = False,
    deadline: Deadline = NO_DEADLINE,
) -> FloatArray:
    """G(a) of the module docstring for each value of `attained` (sup over Delta when
    `quantum` is 0); nan for the values not reached before the deadline.

    Each distinct value once, in increasing order (queue order), `GITTINS_CHUNK` values x
    samples per array operation, one deadline look each. Over the sorted samples d, with
    rest_k = d_k - a for the samples above a: a quantum Delta finishes those with rest <=
    Delta and spends min(rest, Delta) on each (the quirk: d_k on a finished one). The supremum
    is attained at a breakpoint Delta = rest_t: t - p + 1 samples finished (p samples at or
    below a) over the cumulative spend up to t plus rest_t for each sample after t (among
    equal rests the last counts them all, the others give less)."""
    d = np.sort(np.asarray(samples, np.float64))
    values, inverse = np.unique(np.asarray(attained, np.float64), return_inverse=True)
    found = np.full(values.size, np.nan)
    if d.size == 0:
        return np.zeros(inverse.size)
    # at or past the largest sample: the index of the largest sample below it (0 when none)
    below = d[d < d[-1]]
    past = values >= d[-1]
    found[past] = 0.0 if below.size == 0 else np.nan
    probe = values[~past]
    if past.any() and below.size:
        probe = np.append(probe, below[-1])
    k = d.size
    after = (k - 1 - np.arange(k))[None, :]  # samples after each position
    computed = np.full(probe.size, np.nan)
    rows = max(1, GITTINS_CHUNK // k)
    for start in range(0, probe.size, rows):
        if deadline.expired():
            break
        a = probe[start:start + rows, None]
        rest = d[None, :] - a
        later = rest > 0
        each = np.broadcast_to(d, rest.shape) if quirk else rest
        if quantum > 0:
            done = later & (rest <= quantum)
            spent = np.where(later, np.where(done, each, quantum), 0.0).sum(axis=1)
            ratio = done.sum(axis=1) / spent
        else:
            cumulative = np.cumsum(np.where(later, each, 0.0), axis=1)
            finished = np.arange(1, k + 1)[None, :] - (k - later.sum(axis=1))[:, None]
            ratio = np.divide(finished, cumulative + rest * after, where=later,
                              out=np.full(rest.shape, -np.inf)).max(axis=1)
        computed[start:start + rows] = ratio
    found[~past] = computed[:int(np.count_nonzero(~past))]
    if past.any() and below.size:
        found[past] = computed[-1]
    return found[inverse]


def _attained(problem: Problem, executed: FloatArray, service: TiresiasService) -> FloatArray:
    if service is TiresiasService.TIME:
        return executed.copy()
    return executed * problem.jobs.scale_factor


@dataclass(frozen=True)
class Ranking:
    """The admission order and each job's state after promotions (per job, problem order)."""

    order: IntArray
    queue: IntArray
    index: FloatArray
    """2D-Gittins index (0 for LAS; nan when not computed before the deadline)."""
    attained: FloatArray
    executed: FloatArray
    waiting: FloatArray
    promoted: BoolArray
    unindexed: int
    """Jobs whose Gittins index was not computed before the deadline: ranked after the others
    of their queue, by arrival."""
    exact: int
    """Leading jobs of `order` in the policy's order: all, or those in queues before the first
    job without its index."""


def admission_order(
    problem: Problem, parameters: TiresiasParameters, compat: Compat,
    deadline: Deadline = NO_DEADLINE,
) -> Ranking:
    """The order of the module docstring, after promotions; the Gittins indices are computed
    until `deadline`."""
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
    unindexed = 0
    if parameters.mode is TiresiasMode.GITTINS:
        quantum = parameters.gittins_quantum
        quirk = compat is Compat.TIRESIAS
        if quirk and quantum <= 0:
            quantum = TIRESIAS_GITTINS_QUANTUM
        samples = np.asarray(parameters.service_samples, np.float64)
        index = gittins_indices(attained, samples, quantum, quirk, deadline)
        missing = np.isnan(index)
        unindexed = int(np.count_nonzero(missing))
        order = np.lexsort((id_rank, arrival, np.where(missing, np.inf, -index), queue))
    else:
        order = np.lexsort((id_rank, arrival, ~running, queue))
    exact = m
    if unindexed:
        first = int(np.argmax(np.isnan(index[order])))
        exact = int(np.count_nonzero(queue < queue[order[first]]))
    return Ranking(order, queue, index, attained, executed, waiting, promoted, unindexed, exact)


def _types_by_speed(problem: Problem, i: int) -> list[int]:
    """Usable types of job i, fastest first."""
    usable = problem.usable[i]
    thr = problem.jobs.throughput[i]
    return [int(j) for j in np.argsort(-thr, kind="stable") if usable[j]]


@dataclass(frozen=True)
class CountAdmission:
    """Skip-fit's answer on a walk of the admission order."""

    chosen: IntArray
    """(m,) per job, the type it is admitted on (-1 = not admitted)."""
    decided: int
    """Leading jobs of the walked order decided; those after it were not reached before the
    deadline (not admitted)."""
    free: IntArray
    """(n,) devices per type left free by the admitted jobs."""


def skip_fit(
    problem: Problem, order: IntArray, deadline: Deadline = NO_DEADLINE,
    free: IntArray | None = None, chosen: IntArray | None = None,
    min_window: int = SKIP_FIT_WINDOW,
) -> CountAdmission:
    """Each job of `order` in turn is admitted on its fastest usable type with enough free
    devices left (`free`: per type, default the cluster's), else skipped.

    In array operations over windows of the order: with the devices free at a window's start,
    every job of it picks a type; picks are kept up to the first one that no longer fits after
    the window's earlier picks (cumulative devices per type); that job is decided alone with
    the devices then free, and the next window starts after it. Free devices only fall, so
    every kept pick is the one-job-at-a-time walk's, and a misfit means a type's free devices
    fell below a scale factor during the window: at most types x distinct scale factors
    misfits. The deadline is read once per window; past it, the rest is not admitted.
    `chosen` (default: none admitted) receives the picks; `min_window` >= 1 is the fewest jobs
    in a window after a misfit."""
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    left = (problem.cluster.count if free is None else free).astype(np.int64).copy()
    chosen = np.full(m, -1, np.int64) if chosen is None else chosen
    scale = problem.jobs.scale_factor.astype(np.int64)
    ranked = np.argsort(-problem.jobs.throughput, axis=1, kind="stable")  # fastest first
    ranked_usable = np.take_along_axis(problem.usable, ranked, axis=1)
    smallest = int(scale[order].min()) if order.size else 1  # fewest devices a job takes
    start, window = 0, order.size
    while start < order.size:
        if left.max(initial=0) < smallest:
            break  # nothing fits any more: the rest is decided (skipped)
        if deadline.expired():
            return CountAdmission(chosen, start, left)
        jobs = order[start:start + window]
        size = scale[jobs]
        fits = ranked_usable[jobs] & (left[ranked[jobs]] >= size[:, None])
        slot = fits.argmax(axis=1)
        pick = np.where(fits[np.arange(jobs.size), slot], ranked[jobs, slot], -1)
        kept = jobs.size  # first position whose pick no longer fits
        for j in range(n):
            on_j = pick == j
            over = np.flatnonzero(on_j & (np.cumsum(np.where(on_j, size, 0)) > left[j]))
            if over.size:
                kept = min(kept, int(over[0]))
        took = pick[:kept] >= 0
        chosen[jobs[:kept][took]] = pick[:kept][took]
        np.subtract.at(left, pick[:kept][took], size[:kept][took])
        if kept == jobs.size:
            start += kept
            window *= 2
            continue
        i = int(jobs[kept])  # its pick no longer fits: decide it with the devices now free
        for j, usable in zip(ranked[i].tolist(), ranked_usable[i].tolist(), strict=True):
            if usable and left[j] >= scale[i]:
                left[j] -= scale[i]
                chosen[i] = j
                break
        start += kept + 1
        window = max(min_window, 2 * (kept + 1))
    return CountAdmission(chosen, order.size, left)


@dataclass(frozen=True)
class PlacementAdmission:
    """Placement admission's answer (`placement_admission`)."""

    chosen: IntArray
    decided: int
    """As `CountAdmission.decided`."""
    proven: bool
    """Every admitted job passed a proven placement check, and every skipped one was proven
    not to fit."""
    note: str


def placement_admission(
    problem: Problem, order: IntArray, parameters: TiresiasParameters, deadline: Deadline
) -> PlacementAdmission:
    """Per job its admitted type by placement checks in `order` (module docstring); the jobs
    after `PLACEMENT_CHECKS_MAX` checks, or once the checks' share of the time is used, by
    counts (`skip_fit`), which keeps time for itself."""
    topology = topology_of(problem.cluster)
    inputs = placement_jobs(problem)
    stage = PlacementParameters(consolidate_skew_above=parameters.consolidate_skew_above)
    chosen = np.full(problem.jobs.num_jobs, -1, np.int64)
    admitted: list[Grant] = []
    proven = True
    free = problem.cluster.count.astype(np.int64).copy()
    checks = deadline.leaving(COUNT_S_PER_JOB * order.size)
    step = 0
    for step, i in enumerate(order.tolist()):
        if step >= PLACEMENT_CHECKS_MAX or checks.expired():
            break
        s = int(problem.jobs.scale_factor[i])
        for j in _types_by_speed(problem, i):
            if free[j] < s:
                continue
            trial = [*admitted, Grant((i,), j, s)]
            demands = tuple(demand_for(problem, inputs, stage, g) for g in trial)
            instance = PlacementInstance(topology, demands, stage.weights)
            result = place_exact(instance, checks, value_only=True)
            if result.score.placed == len(trial):
                admitted = trial
                free[j] -= s
                chosen[i] = j
                break
            if result.placed_value_bound >= len(trial) - 1e-9:
                proven = False  # not placed, but not proven impossible either
    else:
        return PlacementAdmission(chosen, order.size, proven, "")
    rest = skip_fit(problem, order[step:], deadline, free, chosen)
    counted = int(np.count_nonzero(chosen[order[step:]] >= 0))
    # jobs skipped by counts would fail the placement check too: only admitted ones are unproven
    note = f"jobs from rank {step} on decided by counts only ({counted} admitted)" \
        if rest.decided else ""
    return PlacementAdmission(chosen, step + rest.decided, proven and counted == 0, note)


def solve_policy(
    problem: Problem,
    parameters: TiresiasParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Tiresias's admission (module docstring): the walk leaves `PLAN_S_PER_JOB` per job of
    the time to the plan, the Gittins indices `COUNT_S_PER_JOB` more to the walk."""
    del options
    walk = deadline.leaving(PLAN_S_PER_JOB * problem.jobs.num_jobs)
    return admit(problem, parameters, compat,
                 walk.leaving(COUNT_S_PER_JOB * problem.jobs.num_jobs), walk)


def admit(
    problem: Problem,
    parameters: TiresiasParameters,
    compat: Compat,
    index_deadline: Deadline,
    walk_deadline: Deadline,
) -> Plan:
    """The plan of Tiresias's admission, the Gittins indices computed until `index_deadline`
    and the walk until `walk_deadline`. Cut short, the jobs the walk did not reach are not
    admitted and the plan is `feasible`, with the bound: the admitted jobs of the leading
    ones decided as the policy's order would (`Ranking.exact`) plus every job after them."""
    started = time.perf_counter()
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    ranking = admission_order(problem, parameters, compat, index_deadline)
    order, queue = ranking.order, ranking.queue
    proven, note = True, ""
    if parameters.admission is TiresiasAdmission.PLACEMENT:
        placed = placement_admission(problem, order, parameters, walk_deadline)
        chosen, decided, proven, note = placed.chosen, placed.decided, placed.proven, placed.note
    else:
        counted = skip_fit(problem, order, walk_deadline)
        chosen, decided = counted.chosen, counted.decided
    admitted = chosen >= 0
    count = float(np.count_nonzero(admitted))
    complete = decided >= m
    share = np.zeros((m, n))
    share[np.flatnonzero(admitted), chosen[admitted]] = 1.0
    thr = problem.jobs.throughput[np.arange(m), np.maximum(chosen, 0)] * admitted
    rank = np.empty(m, np.int64)
    rank[order] = np.arange(m)
    reasons = _reasons(problem, admitted, queue, rank, order[decided:])
    notes = ["lexicographic admission in priority order"]
    if ranking.unindexed:
        notes.append(f"time limit reached: {ranking.unindexed} jobs ranked without their "
                     f"Gittins index (after the others of their queue, by arrival)")
    if note:
        notes.append(note)
    if not proven:
        notes.append("some placement checks were not proven")
    if not complete:
        notes.append(f"time limit reached: jobs from rank {decided} on not decided "
                     f"(not admitted)")
    known = min(decided, ranking.exact)  # leading jobs decided as the policy's order would
    exact = proven and known >= m
    certificate = Certificate(
        termination=Termination.OPTIMAL if exact else Termination.FEASIBLE,
        maximize=True,
        objective=count,
        # the known prefix is exact: at most every later job more (all jobs when a placement
        # check was not proven)
        bound=float(np.count_nonzero(admitted[order[:known]]) + m - known) if proven
        else float(m),
        solver="placement MILP" if parameters.admission is TiresiasAdmission.PLACEMENT
        else "skip-fit",
        formulation=f"tiresias 2D-{parameters.mode.value.upper()} (D1), "
                    f"{parameters.admission.value} admission",
        solve_time_s=time.perf_counter() - started,
        detail="; ".join(notes),
    )
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
        admission=AdmissionSection(
            offered=np.ones(m, dtype=bool), admitted=admitted, queue=queue, rank=rank,
            priority_index=ranking.index, attained_service=ranking.attained,
            promoted=ranking.promoted, executed_time_s=ranking.executed,
            waiting_time_s=ranking.waiting,
        ),
    )


def _reasons(
    problem: Problem, admitted: BoolArray, queue: IntArray, rank: IntArray, undecided: IntArray
) -> tuple[str, ...]:
    """Per job, why it is not admitted ("" when admitted): waiting, preempted (running now),
    or not reached before the time limit; formatted for those jobs only."""
    m = problem.jobs.num_jobs
    reasons = [""] * m
    waiting = ~admitted
    waiting[undecided] = False
    running = problem.history.running(m)
    for label, jobs in (("preempted", waiting & running), ("waiting", waiting & ~running),
                        ("stopped at the time limit", undecided)):
        index = np.flatnonzero(jobs) if jobs.dtype == np.bool_ else jobs
        for i, q, r in zip(index.tolist(), queue[index].tolist(), rank[index].tolist(),
                           strict=True):
            reasons[i] = f"{label}: queue {q}, rank {r}"
    return tuple(reasons)
