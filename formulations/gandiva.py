"""Gavel's reimplementation of Gandiva's packing (A2.10, docs/policies/gavel.md, `gandiva`; not
Gandiva_fair): a heuristic that pairs jobs at random and shares every type equally among the
resulting combinations.

* Under-subscribed (sum_i s_i <= sum_j W[j]): the isolated allocation X^iso (A1.3), no pairs.
* Otherwise, pairs persist across calls: the previous plan's pairs come back in the snapshot
  history (`history.jobs[].colocated_with`) and are kept while both jobs are present and the
  pair is *compatible*; the remaining unpaired jobs are shuffled (numpy generator seeded with
  `SolveOptions.seed`) and paired in that order with the next unpaired job of the same scale
  factor with which they are compatible. A pair is compatible when the co-location data
  lists it and its combined normalized throughput T_a^pair[j]/T[a,j] + T_b^pair[j]/T[b,j] is
  at least 1 on every type where both jobs can run (a pair that falls below 1 on any such
  type is dropped, as in Gavel).
* Every combination c (a pair or a job alone) then gets the equal share
  x[c, j] = (W[j] / C) / s_c of every usable type (C combinations), its row capped at 1
  (scaled down when the shares sum above 1). A pair holds s_c devices once, so devices per
  type are at most W[j]. A paired job's time share is its pair's; its throughput is the pair
  rate on each type.

Status HEURISTIC; objective = total throughput (steps/s), no bound.
"""

from __future__ import annotations

import time

import numpy as np

from apportion.formulations.fifo import greedy_plan
from apportion.formulations.isolated import solve_policy as solve_isolated
from apportion.formulations.space_sharing import PairRates
from apportion.solver.arrays import BoolArray
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import Compat, FloatArray, IntArray, Problem, SolveOptions
from apportion.solver.parameters import NoParameters
from apportion.solver.result import Certificate, JobStatus, Plan, Termination

PLAN_S_PER_JOB = 4e-6
"""Time (s) the pairing leaves per job for building the plan from its pairs (measured: about
0.3 s for 100,000 jobs on a loaded 2-core machine)."""


def compatible(problem: Problem, rates: PairRates, a: int, partners: IntArray) -> BoolArray:
    """For each partner b: the pair (a, b) has co-location data and combined normalized
    throughput >= 1 on every type where both jobs can run (module docstring)."""
    has, rate_a, rate_b = rates.pair_rows(a, partners)
    usable = problem.usable
    both = usable[a][None, :] & usable[partners]
    T = problem.jobs.throughput
    with np.errstate(divide="ignore", invalid="ignore"):
        combined = rate_a / T[a][None, :] + rate_b / T[partners]
    return np.asarray(has & both.any(axis=1) & np.all(~both | (combined >= 1.0), axis=1))


def form_pairs(problem: Problem, rates: PairRates, seed: int,
               deadline: Deadline = NO_DEADLINE) -> tuple[IntArray, bool]:
    """((m,) partner index per job, -1 = alone; whether the deadline cut the pairing short):
    the history's compatible pairs, then random pairs among the rest (module docstring).
    Jobs not reached before the deadline stay alone."""
    jobs = problem.jobs
    m = jobs.num_jobs
    partner = np.full(m, -1, np.int64)
    previous = problem.history.colocated_with
    for a in np.flatnonzero(previous > np.arange(m)):
        b = int(previous[a])
        if previous[b] == a and compatible(problem, rates, int(a), np.array([b]))[0]:
            partner[a], partner[b] = b, a
    rng = np.random.default_rng(seed)
    order = np.array([i for i in rng.permutation(m) if partner[i] < 0], dtype=np.int64)
    for pos, a in enumerate(order.tolist()):
        if partner[a] >= 0:
            continue
        if deadline.expired():
            return partner, True
        later = order[pos + 1:]
        later = later[partner[later] < 0]
        ok = compatible(problem, rates, a, later)
        if ok.any():
            b = int(later[int(np.argmax(ok))])  # the next compatible job in the order
            partner[a], partner[b] = b, a
    return partner, False


def solve_policy(
    problem: Problem,
    parameters: NoParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Gavel's `gandiva` (module docstring)."""
    started = time.perf_counter()
    jobs, cluster = problem.jobs, problem.cluster
    m, n = jobs.num_jobs, cluster.num_types
    s = jobs.scale_factor_float
    W = cluster.count_float
    if s.sum() <= W.sum():
        plan = solve_isolated(problem, parameters, compat, options, deadline)
        cert = plan.certificate
        return Plan(
            time_share=plan.time_share,
            effective_throughput=plan.effective_throughput,
            normalized_throughput=plan.normalized_throughput,
            objective_value=plan.effective_throughput,
            job_dual=plan.job_dual,
            accelerator_prices=plan.accelerator_prices,
            certificate=Certificate(
                termination=Termination.HEURISTIC,
                maximize=True,
                objective=float(plan.effective_throughput.sum()),
                solver="closed form",
                formulation="gandiva: under-subscribed, isolated allocation",
                build_time_s=cert.build_time_s,
            ),
            job_status=plan.job_status,
            job_reason=plan.job_reason,
        )
    rates = PairRates(problem)
    # the pairing leaves time to build the plan from its pairs (below)
    partner, cut = form_pairs(problem, rates, options.seed,
                              deadline.leaving(PLAN_S_PER_JOB * m))
    leader = np.flatnonzero((partner < 0) | (np.arange(m) < partner))  # one row per combination
    C = leader.size
    usable = problem.usable
    mate = partner[leader]
    paired = mate >= 0
    # equal shares: each combination gets W/C devices of every type both members can use
    cells = usable[leader] & np.where(paired[:, None], usable[np.maximum(mate, 0)], True)
    rows: FloatArray = np.where(cells, (W / C)[None, :] / s[leader][:, None], 0.0)
    rows = rows / np.maximum(1.0, rows.sum(axis=1))[:, None]
    X = np.zeros((m, n))
    X[leader] = rows
    X[mate[paired]] = rows[paired]
    thr = np.zeros(m)
    alone = leader[~paired]
    thr[alone] = np.einsum("ij,ij->i", jobs.throughput[alone], rows[~paired])
    colocated: list[tuple[int, int, int, float]] = []
    for a, b, row in zip(leader[paired].tolist(), mate[paired].tolist(), rows[paired],
                         strict=True):
        pair = rates(a, b)
        assert pair is not None
        thr[a], thr[b] = float(pair[0] @ row), float(pair[1] @ row)
        colocated.extend((a, b, int(j), float(row[j])) for j in np.flatnonzero(row > 0))
    formulation = (f"gandiva: {int((partner >= 0).sum()) // 2} pairs, {C} combinations, "
                   "equal shares")
    reason = [""] * m
    for i in np.flatnonzero(partner >= 0).tolist():
        reason[i] = f"paired with {jobs.ids[partner[i]]!r}"
    detail = "stopped at the time limit: the jobs not reached run alone" if cut else ""
    return greedy_plan(X, thr, [JobStatus.ALLOCATED] * m, reason, formulation, started,
                       tuple(colocated), detail)
