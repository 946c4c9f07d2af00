"""Lucid's pairing step (D8) as a maximum-weight matching.

A waiting job may share the devices of a running job that runs alone when Lucid's four rules
hold and it can use the running job's accelerator type (throughput > 0 there): the same GPU
count, their device memory fits one device (strictly), their sharing scores
sum to at most 2, and the waiting job's priority value (estimated duration x GPUs, smaller =
sooner) is at most twice the running job's. With `pair_pending`, two waiting jobs may also
start together (same rules, the larger priority value at most twice the smaller, both with
the same type of most devices among those each can use).

Edge weight: the pair's predicted benefit, speed(a with b) + speed(b with a) - 1 (the total
relative throughput gained over the running job alone); only positive benefits are edges.
The exact pairing maximizes the total benefit (`apportion.formulations.matching`, bipartite
without pending pairs); Lucid's indolent first fit (compat) pairs each waiting job, in
priority order, with the first running job that obeys the rules. Waiting jobs left unpaired
then start alone in priority order while devices are free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from apportion.formulations.group_placement import (
    current_nodes,
    free_devices,
    place_group,
)
from apportion.formulations.group_plans import NO_USABLE_TYPE, ExactRun, compared_plan, solo
from apportion.formulations.matching import max_weight_matching
from apportion.formulations.pair_speeds import pair_speeds
from apportion.solver.deadline import Deadline
from apportion.solver.groups import ColocationGroup, GroupSection
from apportion.solver.model import Compat, FloatArray, IntArray, Problem, SolveOptions
from apportion.solver.parameters import LucidParameters
from apportion.solver.result import JobStatus, Plan
from apportion.solver.sharing import SharingInputs

BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class LucidInstance:
    """The pairing problem on arrays (m jobs)."""

    gpus: IntArray
    running: BoolArray
    """(m,) running alone: may take one partner."""
    pending: BoolArray
    """(m,) waiting."""
    memory_gib: FloatArray
    """(m,) device memory per device (GiB)."""
    scores: IntArray
    """(m,) sharing scores (-1 = none: the score rule does not apply)."""
    priority: FloatArray
    """(m,) priority value, smaller = sooner (NaN = unknown: the priority rule does not
    apply)."""
    speed: FloatArray
    """(m, m) speed of a while sharing with b (NaN = unknown: no pair)."""
    on_type: BoolArray
    """(m, m) the pair has a type to share that both can use (throughput > 0, enough
    devices): the running member's, or for two waiting jobs their common one."""
    device_memory_gib: float
    max_score_sum: int = 2
    pair_pending: bool = False


def allowed_pairs(inst: LucidInstance) -> BoolArray:
    """(m, m) symmetric: the pair obeys Lucid's rules (module docstring)."""
    same = inst.gpus[:, None] == inst.gpus[None, :]
    memory = inst.memory_gib[:, None] + inst.memory_gib[None, :] < inst.device_memory_gib
    s = inst.scores
    no_score = (s[:, None] < 0) | (s[None, :] < 0)
    score = no_score | (s[:, None] + s[None, :] <= inst.max_score_sum)
    p = inst.priority
    unknown = np.isnan(p)[:, None] | np.isnan(p)[None, :]
    with np.errstate(invalid="ignore"):
        hi = np.fmax(p[:, None], p[None, :])
        lo = np.fmin(p[:, None], p[None, :])
        pending_first = inst.pending[:, None] & inst.running[None, :]
        running_first = inst.running[:, None] & inst.pending[None, :]
        rule_pr = np.where(pending_first, p[:, None] <= 2 * p[None, :], False)
        rule_rp = np.where(running_first, p[None, :] <= 2 * p[:, None], False)
        rule_pp = hi <= 2 * lo
    pp = inst.pending[:, None] & inst.pending[None, :] if inst.pair_pending else False
    kind = pending_first | running_first | pp
    prio = unknown | rule_pr | rule_rp | (pp & rule_pp)
    ok = kind & same & memory & score & prio & inst.on_type
    np.fill_diagonal(ok, False)
    return np.asarray(ok & ok.T)


def pair_benefit(inst: LucidInstance, allowed: BoolArray) -> FloatArray:
    """(m, m) speed[a, b] + speed[b, a] - 1 on allowed pairs with known speeds, 0 elsewhere."""
    total = inst.speed + inst.speed.T - 1.0
    return np.where(allowed & np.isfinite(total), total, 0.0)


def first_fit(inst: LucidInstance, allowed: BoolArray, run_order: IntArray) -> IntArray:
    """Lucid's indolent binder: each waiting job in priority order takes the first running job
    (in `run_order`) still alone that obeys the rules. (m,) partner, -1 = none."""
    m = inst.gpus.size
    mate = np.full(m, -1, np.int64)
    waiting = np.nonzero(inst.pending)[0]
    key = np.where(np.isnan(inst.priority[waiting]), np.inf, inst.priority[waiting])
    for p in waiting[np.argsort(key, kind="stable")].tolist():
        for r in run_order.tolist():
            if mate[r] < 0 and allowed[p, r]:
                mate[p], mate[r] = r, p
                break
    return mate


def _priority(problem: Problem) -> FloatArray:
    """Estimated remaining duration x GPUs (s x GPUs): remaining steps over the best
    throughput; NaN when the remaining work is unknown."""
    jobs = problem.jobs
    best = jobs.throughput.max(axis=1) if jobs.throughput.size else np.zeros(jobs.num_jobs)
    known = (jobs.total_steps > 0) & (best > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        duration = np.where(known, jobs.remaining_steps / best, np.nan)
    return np.asarray(duration * jobs.scale_factor, np.float64)


def instance(problem: Problem, params: LucidParameters) -> tuple[LucidInstance, IntArray]:
    """The pairing instance of a snapshot and the pair type matrix."""
    jobs, hist = problem.jobs, problem.history
    m = jobs.num_jobs
    sharing = problem.sharing or SharingInputs()
    running_any, partner = _running_with_partners(problem)
    partnered = partner >= 0
    running = running_any & ~partnered
    pending = ~running_any
    usable = problem.usable
    default_type = np.full(m, -1, np.int64)
    for i in range(m):
        types = np.nonzero(usable[i])[0]
        if types.size:
            default_type[i] = int(types[np.argmax(problem.cluster.count[types])])
    pair_type = np.full((m, m), -1, np.int64)
    current = hist.current_type
    for r in np.nonzero(running)[0]:
        pair_type[:, r] = current[r]
        pair_type[r, :] = current[r]
    for a in np.nonzero(partnered & (current >= 0))[0]:  # a continuing pair shares a's type
        b = int(partner[a])
        pair_type[a, b] = pair_type[b, a] = current[a]
    if params.pair_pending:
        both = pending[:, None] & pending[None, :] & (default_type[:, None] == default_type)
        pair_type = np.where(both, default_type[:, None], pair_type)
    safe = np.maximum(pair_type, 0)
    rows = np.arange(m)[:, None]
    on_type = (pair_type >= 0) & usable[rows, safe] & usable[rows.T, safe]
    scores = sharing.scores(m)
    inst = LucidInstance(
        gpus=jobs.scale_factor,
        running=running,
        pending=pending,
        memory_gib=sharing.gpu_memory(m),
        scores=scores,
        priority=_priority(problem),
        speed=pair_speeds(problem, pair_type, scores),
        on_type=np.asarray(on_type),
        device_memory_gib=params.device_memory_gib,
        max_score_sum=params.max_score_sum,
        pair_pending=params.pair_pending,
    )
    return inst, pair_type


def _running_with_partners(problem: Problem) -> tuple[BoolArray, IntArray]:
    """((m,) running, (m,) partner index or -1). A pair's shared devices may be reported on
    one member only (`history.colocated_with` names the other): its partner runs too."""
    hist = problem.history
    m = problem.jobs.num_jobs
    running = hist.running(m)
    given = hist.colocated_with
    partner = np.full(m, -1, np.int64)
    holders = np.nonzero(running & (given >= 0))[0]
    partner[holders] = given[holders]
    partner[given[holders]] = holders
    running = running.copy()
    running[given[holders]] = True
    return np.asarray(running, bool), partner


def solve_policy(
    problem: Problem,
    params: LucidParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Lucid's pairing (exact, or first fit with compat lucid), then exclusive starts."""
    m = problem.jobs.num_jobs
    inst, pair_type = instance(problem, params)
    allowed = allowed_pairs(inst) if params.sharing else np.zeros((m, m), bool)
    benefit = pair_benefit(inst, allowed)
    run_order = np.nonzero(inst.running)[0]
    heuristic = first_fit(inst, allowed, run_order)
    heuristic_value = benefit_of(inst, heuristic)
    exact: ExactRun | None = None
    mate = heuristic
    if compat is not Compat.LUCID:
        found = max_weight_matching(benefit, deadline, options.threads)
        mate = found.mate
        exact = ExactRun(
            found.objective, found.bound, found.status,
            "maximum-weight matching (degree LP + odd-set cuts, HiGHS)", found.solve_time_s,
            detail=(f"matching: {found.lp_runs} LP runs, {found.cuts} odd-set cuts, "
                    f"{found.columns} edges priced in, {found.method}"),
        )
    groups, job_status, reasons = _groups(problem, inst, mate, pair_type, params, compat)
    return compared_plan(problem, GroupSection(tuple(groups)), job_status, reasons,
                         "lucid_first_fit", heuristic_value, exact, options.relative_gap)


def benefit_of(inst: LucidInstance, mate: IntArray) -> float:
    """Total predicted benefit of a pairing (a pair outside the edge set counts its own,
    possibly negative, benefit; unknown speeds count 0)."""
    total = inst.speed + inst.speed.T - 1.0
    a = np.nonzero(mate > np.arange(mate.size))[0]
    values = np.where(np.isfinite(total[a, mate[a]]), total[a, mate[a]], 0.0)
    return float(values.sum()) if a.size else 0.0


def _groups(
    problem: Problem,
    inst: LucidInstance,
    mate: IntArray,
    pair_type: IntArray,
    params: LucidParameters,
    compat: Compat,
) -> tuple[list[ColocationGroup], list[JobStatus], list[str]]:
    jobs, hist = problem.jobs, problem.history
    m = jobs.num_jobs
    status = [JobStatus.ALLOCATED] * m
    reasons = [""] * m
    groups: list[ColocationGroup] = []
    done = np.zeros(m, bool)
    running, partner = _running_with_partners(problem)
    holding = running & (hist.current_type >= 0)
    for a in np.nonzero(holding)[0].tolist():
        if done[a]:
            continue
        b = int(mate[a]) if inst.running[a] else int(partner[a])
        j = int(hist.current_type[a])
        devices = int(hist.current_devices[a]) or int(jobs.scale_factor[a])
        nodes = current_nodes(problem, a)
        if b >= 0:
            speed_ab = _speed(inst.speed, a, b)
            speed_ba = _speed(inst.speed, b, a)
            groups.append(ColocationGroup((a, b), (1 / speed_ab, 1 / speed_ba), j, devices,
                                          nodes))
            done[[a, b]] = True
        else:
            groups.append(solo(a, j, devices, nodes))
            done[a] = True
    free = free_devices(problem)
    waiting = np.nonzero(inst.pending & ~done)[0]
    key = np.where(np.isnan(inst.priority[waiting]), np.inf, inst.priority[waiting])
    stop = compat is Compat.LUCID and not params.sharing
    blocked = False
    for p in waiting[np.argsort(key, kind="stable")].tolist():
        if done[p]:
            continue
        q = int(mate[p])
        members = (p,) if q < 0 else (p, q)
        devices = int(jobs.scale_factor[p])
        usable = np.nonzero(problem.usable[list(members)].all(axis=0))[0]
        if q >= 0 and pair_type[p, q] >= 0:
            usable = np.array([pair_type[p, q]])
        if usable.size == 0:
            for i in members:
                status[i], reasons[i] = JobStatus.UNSERVABLE, NO_USABLE_TYPE
                done[i] = True
            continue
        placed = None if blocked else place_group(problem, free, devices, usable)
        if placed is None:
            for i in members:
                status[i] = JobStatus.DEFERRED
                reasons[i] = "no free devices of a usable type this round"
                done[i] = True
            blocked = stop
            continue
        j, nodes = placed
        if q < 0:
            groups.append(solo(p, j, devices, nodes))
        else:
            groups.append(ColocationGroup(
                (p, q), (1 / _speed(inst.speed, p, q), 1 / _speed(inst.speed, q, p)), j,
                devices, nodes))
        done[list(members)] = True
    return groups, status, reasons


def _speed(speed: FloatArray, a: int, b: int) -> float:
    value = float(speed[a, b])
    return value if math.isfinite(value) and value > 0 else 1.0
