"""The admission stage (D10, Blox): which jobs the policy sees.

ACCEPT_ALL offers every job. LOAD_BASED accepts jobs in order -- running jobs first, then by
arrival time and id -- while the accepted jobs' devices (`scale_factor`) stay within
`load_threshold` x the cluster's devices (Blox's load-based admission with its threshold);
the others come back `JobStatus.DEFERRED` with the reason. The policy (and any placement stage
after it) runs on the accepted jobs only; its plan is then laid out over every job of the
snapshot again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, is_dataclass, replace
from typing import Any

import numpy as np

from apportion.solver.deadline import Deadline
from apportion.solver.fairness_result import AuctionOutcome
from apportion.solver.model import Colocations, IntArray, PolicyRequest, Problem, SolveOptions
from apportion.solver.result import (
    ConfigurationSection,
    JobStatus,
    Plan,
    ScheduledRound,
    WindowSection,
)
from apportion.solver.stages import AdmissionMode, AdmissionParameters
from apportion.solver.topology import PlacementInputs

Solve = Callable[[Problem, PolicyRequest, SolveOptions, Deadline], Plan]


def accepted_jobs(problem: Problem, parameters: AdmissionParameters) -> IntArray:
    """Indices of the jobs the admission stage accepts, in snapshot order."""
    m = problem.jobs.num_jobs
    if parameters.mode is AdmissionMode.ACCEPT_ALL:
        return np.arange(m, dtype=np.int64)
    running = problem.history.running(m)
    ids = np.array(problem.jobs.ids, dtype=object)
    order = np.lexsort((np.argsort(np.argsort(ids, kind="stable"), kind="stable"),
                        problem.jobs.arrival_time_s, ~running))
    limit = parameters.load_threshold * float(problem.cluster.count.sum())
    taken = 0.0
    keep = np.zeros(m, dtype=bool)
    for i in order.tolist():
        s = float(problem.jobs.scale_factor[i])
        if taken + s <= limit + 1e-9:
            keep[i] = True
            taken += s
    return np.flatnonzero(keep).astype(np.int64)


def _take(obj: Any, index: IntArray, m: int) -> Any:
    """A per-job dataclass (Jobs, History, PlacementJobs, ...) restricted to `index`: every
    array with m rows and every tuple of m entries is taken, anything else kept."""
    changes: dict[str, Any] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, np.ndarray) and value.ndim >= 1 and value.shape[0] == m:
            changes[f.name] = value[index]
        elif isinstance(value, tuple) and len(value) == m:
            changes[f.name] = tuple(value[i] for i in index.tolist())
        elif is_dataclass(value) and hasattr(value, "take") and m:
            changes[f.name] = value.take(index)
    return replace(obj, **changes)


def restrict_jobs(problem: Problem, index: IntArray) -> Problem:
    """The problem with only the jobs `index` (per-job data taken, pairs renumbered)."""
    m = problem.jobs.num_jobs
    position = np.full(m, -1, np.int64)
    position[index] = np.arange(index.size)
    colocations = problem.colocations
    if colocations is not None:
        keep = (position[colocations.job_a] >= 0) & (position[colocations.job_b] >= 0)
        colocations = Colocations(
            job_a=position[colocations.job_a[keep]],
            job_b=position[colocations.job_b[keep]],
            throughput_a=colocations.throughput_a[keep],
            throughput_b=colocations.throughput_b[keep],
            type_a=colocations.type_a,
            type_b=colocations.type_b,
            type_throughput_a=colocations.type_throughput_a,
            type_throughput_b=colocations.type_throughput_b,
        )
    history = _take(problem.history, index, m)
    if history.colocated_with.size == index.size:
        partner = history.colocated_with
        history = replace(history, colocated_with=np.where(
            partner >= 0, position[np.maximum(partner, 0)], -1))
    placement = problem.placement
    if placement is not None:
        placement = PlacementInputs(_take(placement.jobs, index, m), placement.cell_quotas)
    elastic = problem.elastic.take(index) if problem.elastic is not None else None
    return replace(problem, jobs=_take(problem.jobs, index, m), history=history,
                   colocations=colocations, placement=placement, elastic=elastic)


def expand_plan(plan: Plan, index: IntArray, m: int, reason: str) -> Plan:
    """The plan of the accepted jobs `index` laid out over all m jobs; the others deferred."""
    back = index  # accepted position -> snapshot index

    def rows(array: Any, fill: float = 0.0) -> Any:
        if array is None:
            return None
        out = np.full((m, *array.shape[1:]), fill, dtype=array.dtype)
        out[back] = array
        return out

    def per_job(values: tuple[Any, ...], fill: Any) -> tuple[Any, ...]:
        out = [fill] * m
        for k, i in enumerate(back.tolist()):
            out[i] = values[k]
        return tuple(out)

    shares = plan.shares
    shares = replace(
        shares,
        colocated=tuple((int(back[a]), int(back[b]), j, s) for a, b, j, s in shares.colocated),
        rounds=tuple(ScheduledRound(r.index, tuple(
            replace(g, job=int(back[g.job]),
                    colocated_with=int(back[g.colocated_with]) if g.colocated_with >= 0 else -1)
            for g in r.grants)) for r in shares.rounds),
        cumulative_isolated_time_s=rows(shares.cumulative_isolated_time_s),
        isolated_throughput=rows(shares.isolated_throughput),
        remaining_steps=rows(shares.remaining_steps),
        slo_shortfall=rows(shares.slo_shortfall, np.nan),
    )
    queues = plan.queues
    if queues is not None:
        queues = queues.expanded(back, m)
    configurations = plan.configurations
    if configurations is not None:
        elastic = configurations.elastic
        configurations = ConfigurationSection(
            per_job(configurations.choices, None),
            elastic.expanded(back, m) if elastic is not None else None)
    market = plan.market
    if market is not None:
        market = replace(market, spending=rows(market.spending))
    window = plan.window
    if window is not None:
        schedule = np.zeros((window.schedule.shape[0], m), dtype=bool)
        schedule[:, back] = window.schedule
        state = window.reference_state
        window = WindowSection(schedule, rows(window.reference_finish_time_s), replace(
            state, **{f.name: rows(getattr(state, f.name),
                                   np.nan if f.name == "estimate_s" else 0)
                      for f in fields(state)}))
    placement = plan.placement
    if placement is not None:
        placement = replace(placement, jobs=per_job(placement.jobs, None))
    admission = plan.admission
    if admission is not None:
        admission = admission.expanded(back, m)
    auction, stride, usage = plan.auction, plan.stride, plan.usage
    if auction is not None:
        auction = replace(auction, leases=per_job(auction.leases, None),
                          outcomes=per_job(auction.outcomes,
                                           AuctionOutcome(False, np.nan, np.nan, np.nan)))
    if stride is not None:
        stride = replace(stride, stride_pass=rows(stride.stride_pass),
                         home_type=per_job(stride.home_type, -1))
    if usage is not None:
        usage = replace(usage, leases=per_job(usage.leases, None),
                        job_gpu_time_s=rows(usage.job_gpu_time_s))
    return replace(
        plan,
        time_share=rows(plan.time_share),
        effective_throughput=rows(plan.effective_throughput),
        normalized_throughput=rows(plan.normalized_throughput),
        objective_value=rows(plan.objective_value),
        job_dual=rows(plan.job_dual),
        job_status=per_job(plan.job_status or (JobStatus.ALLOCATED,) * index.size,
                           JobStatus.DEFERRED),
        job_reason=per_job(plan.job_reason or ("",) * index.size, reason),
        shares=shares,
        queues=queues,
        configurations=configurations,
        market=market,
        window=window,
        placement=placement,
        admission=admission,
        auction=auction,
        stride=stride,
        usage=usage,
    )


def admit_and_solve(
    problem: Problem, policy: PolicyRequest, options: SolveOptions, deadline: Deadline,
    solve: Solve,
) -> Plan:
    """Admission, then `solve` (the policy and its later stages) on the accepted jobs."""
    assert policy.admission is not None
    parameters = policy.admission
    index = accepted_jobs(problem, parameters)
    inner = replace(policy, admission=None)
    m = problem.jobs.num_jobs
    if index.size == m:
        return solve(problem, inner, options, deadline)
    plan = solve(restrict_jobs(problem, index), inner, options, deadline)
    reason = (f"not admitted: accepted jobs already hold {parameters.load_threshold:g} x the "
              f"cluster's devices (load-based admission)")
    return expand_plan(plan, index, m, reason)

