"""POP (B10): solve a partitionable policy as k smaller problems in parallel.

`options.partitions = k` (k > 1) assigns every job to one of k sub-problems (POP's client
partitioning: uniform at random with the request's seed, or job position mod k), gives each
sub-problem floor(W[j]/k) devices of every type, solves every sub-problem with the policy's
own formulation in worker processes (at most one per core, and at most `options.threads`
when set; one worker = in this process; none outliving the deadline), and
concatenates their time shares. The concatenation is feasible for the whole problem (disjoint
jobs, sum_k floor(W/k) <= W), and is reported with the whole problem's normalizers through the
policy's `score` entry point: a max-min value can only be below the exact one, a makespan
only above (B10 consequences). Its termination is `heuristic`; with
`options.partition_exact_gap` the whole problem is also solved and its proven bound becomes
the plan's bound.

This is a mechanism of `solve()`: a policy opts in by declaring `partitionable` and a score.
Sub-problems drop the node layout (floor(W/k) devices no longer match the nodes) and space
sharing is not partitioned.
"""

from __future__ import annotations

import os
import pickle
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from typing import IO

import numpy as np

from apportion.solver.deadline import Deadline
from apportion.solver.model import (
    Cluster,
    Colocations,
    IntArray,
    PartitionMode,
    PolicyRequest,
    Problem,
    SolveOptions,
)
from apportion.solver.registry import PolicySpec, load_entry
from apportion.solver.result import (
    Certificate,
    JobStatus,
    PartitionReport,
    Plan,
    ShareSection,
    Termination,
)

WORKER_MODULE = "apportion.solver.partition_worker"
GRACE_S = 1.0
"""How long (s) after the deadline a worker may take to report before it is killed."""
PLAN_TERMINATIONS = (Termination.OPTIMAL, Termination.OPTIMAL_INACCURATE, Termination.FEASIBLE,
                     Termination.HEURISTIC)


def assign(problem: Problem, k: int, mode: PartitionMode, seed: int) -> IntArray:
    """(m,) the sub-problem of every job (B10 client partitioning)."""
    m = problem.jobs.num_jobs
    if mode is PartitionMode.MODULO:
        return np.arange(m, dtype=np.int64) % k
    return np.random.default_rng(seed).integers(0, k, size=m).astype(np.int64)


def _reindex(index: IntArray, members: IntArray, m: int) -> IntArray:
    """Job indices (-1 = none) into the sub-problem's numbering; -1 for jobs outside it."""
    new = np.full(m, -1, np.int64)
    new[members] = np.arange(members.size)
    return np.asarray(np.where(index >= 0, new[np.maximum(index, 0)], -1), np.int64)


def sub_problem(problem: Problem, members: IntArray, k: int) -> Problem:
    """The jobs `members` (ascending) with floor(W/k) devices of every type (no node layout)."""
    m = problem.jobs.num_jobs
    jobs = problem.jobs.take(members)
    hist = problem.history
    history = replace(
        hist.take(members),
        current_nodes=((),) * members.size,  # the sub-problem has no node layout
        colocated_with=_reindex(hist.colocated_with[members], members, m),
    )
    cluster = Cluster(problem.cluster.type_names, problem.cluster.count // k,
                      problem.cluster.cost_per_hour)
    pairs = problem.colocations
    if pairs is not None:
        a, b = _reindex(pairs.job_a, members, m), _reindex(pairs.job_b, members, m)
        keep = (a >= 0) & (b >= 0)  # a pair is kept only inside one sub-problem (B10)
        pairs = Colocations(a[keep], b[keep], pairs.throughput_a[keep], pairs.throughput_b[keep],
                            pairs.type_a, pairs.type_b, pairs.type_throughput_a,
                            pairs.type_throughput_b)
    return replace(problem, cluster=cluster, jobs=jobs, history=history, colocations=pairs,
                   elastic=None)


@dataclass(frozen=True)
class SubResult:
    index: int
    plan: Plan | None
    seconds: float
    error: str = ""


def cores() -> int:
    """CPU cores this process may run on."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return max(os.cpu_count() or 1, 1)


def _balanced(sizes: list[int], workers: int) -> list[list[int]]:
    """Sub-problem indices per worker, largest first onto the least loaded worker."""
    load = [0] * workers
    out: list[list[int]] = [[] for _ in range(workers)]
    for index in sorted(range(len(sizes)), key=lambda q: -sizes[q]):
        w = min(range(workers), key=lambda v: load[v])
        out[w].append(index)
        load[w] += sizes[index]
    return out


def _reader(stream: IO[bytes], sink: queue.Queue[SubResult | None]) -> None:
    """Forward every result a worker writes, then None at its end of stream."""
    try:
        while True:
            kind, index, payload, seconds = pickle.load(stream)
            if kind == "ok":
                sink.put(SubResult(index, payload, seconds))
            else:
                sink.put(SubResult(index, None, seconds, str(payload)))
    except (EOFError, pickle.UnpicklingError, OSError, ValueError):
        pass
    sink.put(None)


def solve_in_workers(
    spec: PolicySpec,
    policy: PolicyRequest,
    options: SolveOptions,
    deadline: Deadline,
    tasks: list[tuple[int, Problem]],
    workers: int,
) -> dict[int, SubResult]:
    """Solve `tasks` ((index, sub-problem)) in `workers` worker processes; results by index.
    Workers still running GRACE_S after the deadline are killed (their tasks are missing)."""
    if workers <= 1:
        solve = spec.load()
        out: dict[int, SubResult] = {}
        for index, sub in tasks:
            started = time.perf_counter()
            plan = solve(sub, policy.parameters, policy.compat, options, deadline)
            out[index] = SubResult(index, plan, time.perf_counter() - started)
        return out
    groups = _balanced([sub.jobs.num_jobs for _, sub in tasks], workers)
    sink: queue.Queue[SubResult | None] = queue.Queue()
    processes: list[subprocess.Popen[bytes]] = []
    readers: list[threading.Thread] = []
    try:
        for group in groups:
            if not group:
                continue
            process = subprocess.Popen(
                [sys.executable, "-m", WORKER_MODULE],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            )
            processes.append(process)
            reader = threading.Thread(target=_reader, args=(process.stdout, sink), daemon=True)
            reader.start()
            readers.append(reader)
            payload = {
                "policy": spec.name,
                "parameters": policy.parameters,
                "compat": policy.compat,
                "options": options,
                "deadline_at": deadline.at,
                "tasks": [tasks[q] for q in group],
            }
            assert process.stdin is not None
            pickle.dump(payload, process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            process.stdin.close()
        results: dict[int, SubResult] = {}
        open_streams = len(processes)
        while open_streams:
            wait = deadline.remaining() + GRACE_S if deadline.bounded else None
            try:
                item = sink.get(timeout=wait)
            except queue.Empty:
                break
            if item is None:
                open_streams -= 1
            else:
                results[item.index] = item
        return results
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()


def solve_partitioned(
    problem: Problem,
    spec: PolicySpec,
    policy: PolicyRequest,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """POP's plan for `options.partitions` = k > 1 sub-problems (module docstring)."""
    started = time.perf_counter()
    k = options.partitions
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    part = assign(problem, k, options.partition_mode, options.seed)
    members = [np.flatnonzero(part == q) for q in range(k)]
    tasks = [(q, sub_problem(problem, members[q], k)) for q in range(k) if members[q].size]
    budget = min(options.threads, cores()) if options.threads > 0 else cores()
    workers = min(len(tasks), budget)
    threads = max(1, budget // max(workers, 1))
    sub_options = replace(options, partitions=0, partition_exact_gap=False, schedule_rounds=0,
                          threads=threads)
    setup = time.perf_counter() - started
    results = solve_in_workers(spec, policy, sub_options, deadline, tasks, workers)
    X = np.zeros((m, n))
    status = [JobStatus.ALLOCATED] * m
    reason = [""] * m
    extras: dict[str, np.ndarray] = {}
    terminations: list[Termination] = []
    seconds: list[float] = []
    failed = 0
    first: Certificate | None = None
    for q in range(k):
        jobs_q = members[q]
        result = results.get(q)
        plan = result.plan if result is not None else None
        seconds.append(result.seconds if result is not None else 0.0)
        if jobs_q.size == 0:
            terminations.append(Termination.OPTIMAL)
            continue
        if plan is None or plan.certificate.termination not in PLAN_TERMINATIONS:
            failed += 1
            ended = plan.certificate.termination if plan is not None else (
                Termination.ERROR if result is not None else Termination.NO_SOLUTION)
            terminations.append(ended)
            why = result.error.strip().splitlines()[-1] if result and result.error else ended
            for i in jobs_q.tolist():
                status[i] = JobStatus.DEFERRED
                reason[i] = f"sub-problem {q} gave no plan ({why})"
            continue
        terminations.append(plan.certificate.termination)
        first = first or plan.certificate
        X[jobs_q] = plan.time_share
        for i, s, r in zip(jobs_q.tolist(), plan.job_status, plan.job_reason, strict=False):
            status[i], reason[i] = s, r
        for name in ("cumulative_isolated_time_s", "isolated_throughput", "remaining_steps",
                     "slo_shortfall"):
            value = getattr(plan.shares, name)
            if value is not None:
                extras.setdefault(name, np.full(m, np.nan))[jobs_q] = value
    score = load_entry(spec.score_entry_point)(problem, policy.parameters, policy.compat, X)
    report = PartitionReport(k, options.partition_mode.value, workers, setup, tuple(seconds),
                             tuple(terminations))
    bound = None
    if options.partition_exact_gap and not deadline.expired():
        exact_started = time.perf_counter()
        exact = spec.load()(problem, policy.parameters, policy.compat,
                            replace(options, partitions=0), deadline)
        cert = exact.certificate
        bound = cert.bound
        report = replace(report, exact_objective=cert.objective,
                         exact_termination=cert.termination,
                         exact_time_s=time.perf_counter() - exact_started)
    if failed == len(tasks):
        ended = Termination.NO_SOLUTION if all(
            t is Termination.NO_SOLUTION for t in terminations) else Termination.ERROR
    elif failed:
        ended = Termination.FEASIBLE
    else:
        ended = Termination.HEURISTIC
    sub_formulation = first.formulation if first is not None else spec.name
    detail = (f"{k} sub-problems on {workers} worker(s); POP time (setup + slowest) "
              f"{report.pop_time_s:.3g} s")
    if failed:
        detail += f"; {failed} sub-problem(s) gave no plan: their jobs get nothing"
    if report.exact_objective is not None:
        detail += f"; exact objective {report.exact_objective:.9g} ({report.exact_termination})"
    certificate = Certificate(
        termination=ended,
        maximize=spec.maximize,
        objective=score.objective if ended is not Termination.ERROR else None,
        bound=bound,
        solver=first.solver if first is not None else "",
        solver_version=first.solver_version if first is not None else "",
        formulation=f"POP ({options.partition_mode.value} partition, k = {k}) of {sub_formulation}",
        build_time_s=setup,
        solve_time_s=max(seconds, default=0.0),
        detail=detail,
    )
    thr = np.einsum("ij,ij->i", problem.jobs.throughput, X) if m else np.zeros(0)
    return Plan(
        time_share=X,
        effective_throughput=thr,
        normalized_throughput=score.normalized,
        objective_value=score.job_value,
        job_dual=np.zeros(m),
        accelerator_prices=np.zeros(n),
        certificate=certificate,
        job_status=tuple(status),
        job_reason=tuple(reason),
        shares=ShareSection(partition=report, **extras),  # type: ignore[arg-type]
    )
