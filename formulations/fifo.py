"""Gavel's FIFO baselines (A2.10, docs/policies/gavel.md): `fifo`, `fifo_perf` and `fifo_packed`.

Jobs are queued by arrival (arrival_time_s, then snapshot order). Each job needs s_i devices
of one type for all of its time (row 1.0 on that type). The queue head takes a type with at
least s_i free devices; the first job that fits nowhere stops the queue (no skipping, no
backfilling).

* `fifo_perf`: recomputed from scratch every call; the head takes the type with the highest
  throughput T[i,j] among the types with enough free devices (ties: lower type index).
* `fifo`: stateful through the snapshot history: running jobs (`history.jobs[].current`)
  keep their type first; then the queue head takes a uniformly random type among those with
  enough free devices (numpy generator seeded with `SolveOptions.seed`).

* `fifo_packed`: `fifo_perf`, then every job still queued (in queue order, the no-skipping
  rule of the first pass does not apply here) is packed onto the job, among those scheduled
  alone, with its scale factor whose pair has the largest combined normalized throughput
  `Tpair_a/T_a + Tpair_b/T_b` on that job's type, if it exceeds `PACK_THRESHOLD` (1.5); the
  two then share the partner's devices for all of their time (`Plan.colocated`, share 1).

Status HEURISTIC; objective = total throughput of the plan (steps/s, pairs at their pair
rates), no bound. Every pass checks the deadline: a pass cut short leaves the jobs it did not
reach queued, and `stats.detail` says so.
"""

from __future__ import annotations

import time

import numpy as np

from apportion.formulations.space_sharing import PairRates
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, FloatArray, IntArray, Problem, SolveOptions
from apportion.solver.parameters import NoParameters
from apportion.solver.result import (
    Certificate,
    JobStatus,
    Plan,
    ShareSection,
    Termination,
)

PACK_THRESHOLD = 1.5
"""`fifo_packed` pairs a queued job only when the pair's combined normalized throughput on the
partner's type exceeds this (Gavel's value)."""


CUT_SHORT = "stopped at the time limit"
"""Reason of the jobs a pass did not reach before the deadline."""


def _cut_detail(cut: bool) -> str:
    return f"{CUT_SHORT}: the jobs not reached stay queued" if cut else ""


def _queue(problem: Problem) -> IntArray:
    """Job indices by arrival time, then snapshot order."""
    jobs = problem.jobs
    return np.lexsort((np.arange(jobs.num_jobs), jobs.arrival_time_s)).astype(np.int64)


def _fifo(problem: Problem, aware: bool, seed: int, deadline: Deadline) -> Plan:
    started = time.perf_counter()
    jobs, cluster = problem.jobs, problem.cluster
    m, n = jobs.num_jobs, cluster.num_types
    X = np.zeros((m, n))
    free = cluster.count.astype(np.int64).copy()
    status = [JobStatus.DEFERRED] * m
    reason = [""] * m
    usable = problem.usable
    placed = np.zeros(m, bool)
    queue = _queue(problem)
    cut = False
    if not aware:
        running = problem.history.running(m)
        for i in queue[running[queue]]:
            if deadline.expired():
                cut = True
                break
            j = int(problem.history.current_type[i])
            if usable[i, j] and free[j] >= jobs.scale_factor[i]:
                X[i, j] = 1.0
                free[j] -= jobs.scale_factor[i]
                placed[i] = True
                status[i] = JobStatus.ALLOCATED
    rng = np.random.default_rng(seed)
    waiting = queue[~placed[queue]]
    head = waiting.size  # position in `waiting` of the first job not placed by the pass
    for position, i in enumerate(waiting):
        if cut or deadline.expired():
            cut, head = True, position
            break
        fits = np.flatnonzero(usable[i] & (free >= jobs.scale_factor[i]))
        if fits.size == 0:
            head = position
            reason[i] = "no type has enough free devices (FIFO head)"
            break
        j = int(fits[np.argmax(jobs.throughput[i, fits])]) if aware else int(rng.choice(fits))
        X[i, j] = 1.0
        free[j] -= jobs.scale_factor[i]
        status[i] = JobStatus.ALLOCATED
    if head < waiting.size:
        behind = CUT_SHORT if cut else (
            f"queued behind {jobs.ids[int(waiting[head])]!r} (FIFO, no skipping)")
        for i in waiting[head + (0 if cut else 1):]:
            reason[i] = behind
    thr = np.einsum("ij,ij->i", jobs.throughput, X)
    formulation = "fifo_perf (fastest fitting type)" if aware else "fifo (random fitting type)"
    return greedy_plan(X, thr, status, reason, formulation, started, detail=_cut_detail(cut))


def greedy_plan(X: FloatArray, thr: FloatArray, status: list[JobStatus], reason: list[str],
                 formulation: str, started: float,
                 colocated: tuple[tuple[int, int, int, float], ...] = (),
                 detail: str = "") -> Plan:
    """A heuristic plan: objective = total throughput `thr` (steps/s), no bound; `detail` says
    e.g. that a pass stopped at the deadline."""
    m, n = X.shape
    cert = Certificate(
        termination=Termination.HEURISTIC,
        detail=detail,
        maximize=True,
        objective=float(thr.sum()),
        solver="greedy",
        formulation=formulation,
        build_time_s=time.perf_counter() - started,
    )
    return Plan(
        time_share=X,
        effective_throughput=thr,
        normalized_throughput=thr,
        objective_value=thr,
        job_dual=np.zeros(m),
        accelerator_prices=np.zeros(n),
        certificate=cert,
        job_status=tuple(status),
        job_reason=tuple(reason),
        shares=ShareSection(colocated=colocated),
    )


def solve_fifo(
    problem: Problem,
    parameters: NoParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Gavel's `fifo`: running jobs keep their type; the queue head takes a random fitting type."""
    return _fifo(problem, aware=False, seed=options.seed, deadline=deadline)


def solve_fifo_perf(
    problem: Problem,
    parameters: NoParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Gavel's `fifo_perf`: the queue head takes the fastest type with enough free devices."""
    return _fifo(problem, aware=True, seed=options.seed, deadline=deadline)


def solve_fifo_packed(
    problem: Problem,
    parameters: NoParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Gavel's `fifo_packed`: `fifo_perf`, then queued jobs packed onto scheduled single jobs
    (module docstring)."""
    started = time.perf_counter()
    plan = _fifo(problem, aware=True, seed=options.seed, deadline=deadline)
    jobs = problem.jobs
    T = jobs.throughput
    X = plan.time_share.copy()
    thr = plan.effective_throughput.copy()
    status, reason = list(plan.job_status), list(plan.job_reason)
    rates = PairRates(problem)
    # the jobs scheduled alone (job index order, the order the partners are tried in) and
    # their types; a partner leaves the list once paired
    alone = np.flatnonzero(X.sum(axis=1) > 0)
    alone_type = np.argmax(X[alone], axis=1) if alone.size else np.zeros(0, np.int64)
    free = np.ones(alone.size, dtype=bool)
    colocated: list[tuple[int, int, int, float]] = []
    cut = CUT_SHORT in plan.certificate.detail
    for i in _queue(problem):
        if status[i] is not JobStatus.DEFERRED:
            continue
        if not free.any():
            break
        if deadline.expired():
            cut = True
            break
        open_ = np.flatnonzero(free)
        ks, js = alone[open_], alone_type[open_]
        has, rate_i, rate_k = rates.on_types(int(i), ks, js)
        ok = has & (T[i, js] > 0) & (T[ks, js] > 0) & problem.usable[i, js]
        combined = np.full(ks.size, -np.inf)
        combined[ok] = rate_i[ok] / T[i, js[ok]] + rate_k[ok] / T[ks[ok], js[ok]]
        pick = int(np.argmax(combined))  # the first best, as Gavel's loop over partners
        if not combined[pick] > PACK_THRESHOLD:
            continue
        k, j = int(ks[pick]), int(js[pick])
        free[open_[pick]] = False
        X[i, j] = 1.0
        thr[i], thr[k] = rate_i[pick], rate_k[pick]
        colocated.append((int(i), k, j, 1.0))
        status[i] = JobStatus.ALLOCATED
        reason[i] = f"shares {jobs.ids[k]!r}'s devices (combined {combined[pick]:.3g})"
    formulation = f"fifo_packed (fifo_perf, then {len(colocated)} queued jobs packed)"
    return greedy_plan(X, thr, status, reason, formulation, started, tuple(colocated),
                       _cut_detail(cut))
