"""Gavel's FIFO baselines (formulations.md A2.10): `fifo`, `fifo_perf` and `fifo_packed`.

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
rates), no bound.
"""

from __future__ import annotations

import time

import numpy as np

from apportion.formulations.space_sharing import PairRates
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, FloatArray, Problem, SolveOptions
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


def _queue(problem: Problem) -> list[int]:
    jobs = problem.jobs
    return sorted(range(jobs.num_jobs), key=lambda i: (float(jobs.arrival_time_s[i]), i))


def _fifo(problem: Problem, aware: bool, seed: int) -> Plan:
    started = time.perf_counter()
    jobs, cluster = problem.jobs, problem.cluster
    m, n = jobs.num_jobs, cluster.num_types
    X = np.zeros((m, n))
    free = cluster.count.astype(np.int64).copy()
    status = [JobStatus.DEFERRED] * m
    reason = [""] * m
    usable = problem.usable
    placed = np.zeros(m, bool)
    if not aware:
        running = problem.history.running(m)
        for i in _queue(problem):
            j = int(problem.history.current_type[i]) if running[i] else -1
            if j >= 0 and usable[i, j] and free[j] >= jobs.scale_factor[i]:
                X[i, j] = 1.0
                free[j] -= jobs.scale_factor[i]
                placed[i] = True
                status[i] = JobStatus.ALLOCATED
    rng = np.random.default_rng(seed)
    blocked_by = -1
    for i in _queue(problem):
        if placed[i]:
            continue
        if blocked_by >= 0:
            reason[i] = f"queued behind {jobs.ids[blocked_by]!r} (FIFO, no skipping)"
            continue
        fits = np.flatnonzero(usable[i] & (free >= jobs.scale_factor[i]))
        if fits.size == 0:
            blocked_by = i
            reason[i] = "no type has enough free devices (FIFO head)"
            continue
        j = int(fits[np.argmax(jobs.throughput[i, fits])]) if aware else int(rng.choice(fits))
        X[i, j] = 1.0
        free[j] -= jobs.scale_factor[i]
        status[i] = JobStatus.ALLOCATED
    thr = np.einsum("ij,ij->i", jobs.throughput, X)
    formulation = "fifo_perf (fastest fitting type)" if aware else "fifo (random fitting type)"
    return greedy_plan(X, thr, status, reason, formulation, started)


def greedy_plan(X: FloatArray, thr: FloatArray, status: list[JobStatus], reason: list[str],
                 formulation: str, started: float,
                 colocated: tuple[tuple[int, int, int, float], ...] = ()) -> Plan:
    """A heuristic plan: objective = total throughput `thr` (steps/s), no bound."""
    m, n = X.shape
    cert = Certificate(
        termination=Termination.HEURISTIC,
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
    return _fifo(problem, aware=False, seed=options.seed)


def solve_fifo_perf(
    problem: Problem,
    parameters: NoParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Gavel's `fifo_perf`: the queue head takes the fastest type with enough free devices."""
    return _fifo(problem, aware=True, seed=options.seed)


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
    plan = _fifo(problem, aware=True, seed=options.seed)
    jobs = problem.jobs
    T = jobs.throughput
    X = plan.time_share.copy()
    thr = plan.effective_throughput.copy()
    status, reason = list(plan.job_status), list(plan.job_reason)
    rates = PairRates(problem)
    alone = {i: int(np.argmax(X[i])) for i in range(jobs.num_jobs) if X[i].sum() > 0}
    colocated: list[tuple[int, int, int, float]] = []
    for i in _queue(problem):
        if status[i] is not JobStatus.DEFERRED:
            continue
        best, best_value = -1, PACK_THRESHOLD
        for k, j in alone.items():
            pair = rates(i, k)
            if pair is None or T[i, j] <= 0 or T[k, j] <= 0 or not problem.usable[i, j]:
                continue
            combined = pair[0][j] / T[i, j] + pair[1][j] / T[k, j]
            if combined > best_value:
                best, best_value = k, combined
        if best < 0:
            continue
        j = alone.pop(best)
        pair = rates(i, best)
        assert pair is not None
        X[i, j] = 1.0
        thr[i], thr[best] = pair[0][j], pair[1][j]
        colocated.append((i, best, j, 1.0))
        status[i] = JobStatus.ALLOCATED
        reason[i] = f"shares {jobs.ids[best]!r}'s devices (combined {best_value:.3g})"
    formulation = f"fifo_packed (fifo_perf, then {len(colocated)} queued jobs packed)"
    return greedy_plan(X, thr, status, reason, formulation, started, tuple(colocated))
