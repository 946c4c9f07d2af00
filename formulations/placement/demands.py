"""From a policy's plan to placement demands (D0.5): what each plan kind grants, with the
job's placement inputs (pattern, limits, previous devices, move costs, span rewards).

* time shares and markets: the grants of a round of the round schedule (a co-located pair is
  one demand: both jobs get the same devices);
* queues (allox): jobs running now or starting now, on their type, `scale_factor` devices;
* configurations (sia, pollux): the chosen (type, nodes, devices), the node count exact;
* planning windows (shockwave): the jobs of round 0 on their type.

The stage orders demands by priority weight (then job index): the order the compat placers
walk.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from apportion.formulations.placement.instance import SPAN_COLUMNS, Demand
from apportion.solver.capabilities import PlanKind
from apportion.solver.model import Problem
from apportion.solver.result import Plan, RoundGrant
from apportion.solver.stages import PlacementParameters
from apportion.solver.topology import DomainLevel, PlacementJobs, ServiceClass

NOT_PREEMPTIBLE_VALUE = 1e6
"""Placed value of a running job that may not be preempted (above every other job's)."""


@dataclass(frozen=True)
class Grant:
    """Devices a plan grants to one job or one co-located group."""

    jobs: tuple[int, ...]
    type_index: int
    devices: int
    nodes: int = 0
    """Exact node count (configurations); 0 = any."""


def placement_jobs(problem: Problem) -> PlacementJobs:
    """The problem's per-job placement inputs (defaults when none were given)."""
    if problem.placement is not None:
        return problem.placement.jobs
    return PlacementJobs.defaults(problem.jobs.num_jobs)


def plan_grants(problem: Problem, plan: Plan, kind: PlanKind) -> list[Grant]:
    """The grants of a non-round plan kind (see module docstring)."""
    m = problem.jobs.num_jobs
    scale = problem.jobs.scale_factor
    out: list[Grant] = []
    if kind is PlanKind.QUEUE and plan.queues is not None:
        queues = plan.queues
        devices = np.maximum(queues.device_counts(), 1).tolist()
        for i in np.flatnonzero(queues.running | queues.start_now).tolist():
            out.append(Grant((i,), int(queues.type_index[i]), devices[i]))
    elif kind is PlanKind.CONFIGURATION and plan.configurations is not None:
        for i, choice in enumerate(plan.configurations.choices):
            if choice is not None and choice.devices > 0:
                out.append(Grant((i,), choice.type_index, choice.devices, choice.nodes))
    elif kind is PlanKind.WINDOW and plan.window is not None:
        schedule = plan.window.schedule
        running = schedule[0] if schedule.shape[0] else np.zeros(m, bool)
        for i in np.flatnonzero(running).tolist():
            out.append(Grant((i,), int(np.argmax(plan.time_share[i])), int(scale[i])))
    return out


def round_grants(grants: tuple[RoundGrant, ...]) -> list[Grant]:
    """The grants of one scheduled round (a co-located pair once)."""
    out: list[Grant] = []
    seen: set[int] = set()
    for grant in grants:
        if grant.job in seen:
            continue
        jobs = (grant.job,) if grant.colocated_with < 0 else (grant.job, grant.colocated_with)
        seen.update(jobs)
        out.append(Grant(jobs, grant.type_index, grant.devices))
    return out


def held_before(
    problem: Problem, inputs: PlacementJobs, job: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(devices, nodes) the job holds according to the snapshot's history (devices when the
    history lists them, else only its nodes)."""
    if inputs.current_devices[job]:
        return inputs.current_devices[job], ()
    history = problem.history
    if history.current_type.size and history.current_type[job] >= 0 and \
            len(history.current_nodes) == problem.jobs.num_jobs:
        return (), tuple(history.current_nodes[job])
    return (), ()


def demand_for(
    problem: Problem,
    inputs: PlacementJobs,
    parameters: PlacementParameters,
    grant: Grant,
    previous: Mapping[int, tuple[int, ...]] | None = None,
) -> Demand:
    """The demand of a grant. `previous`: the devices each job held in the previous round
    (None = the snapshot's history). A co-located group keeps devices only when all its jobs
    held the same ones."""
    i = grant.jobs[0]
    weights = parameters.weights
    held = [
        ((previous.get(k, ()), ()) if previous is not None else held_before(problem, inputs, k))
        for k in grant.jobs
    ]
    prev_devices, prev_nodes = held[0]
    if any(other != held[0] for other in held[1:]):
        prev_devices, prev_nodes = (), ()
    limit = int(inputs.max_span_level[i])
    skew = float(inputs.tensor_skew[i])
    if parameters.consolidate_skew_above > 0 and skew > parameters.consolidate_skew_above:
        limit = min(limit, DomainLevel.NODE.value) if limit else DomainLevel.NODE.value
    running = bool(prev_devices or prev_nodes)
    value = float(sum(problem.jobs.priority_weight[k] for k in grant.jobs))
    if running and not inputs.preemptible[i]:
        value = NOT_PREEMPTIBLE_VALUE
    move = weights.move + weights.move_per_s * float(inputs.checkpoint_s[i] + inputs.restore_s[i])
    tenant = problem.jobs.tenant[i]
    quota_holder = problem.placement is not None and inputs.service_class[i] is \
        ServiceClass.GUARANTEED and any(q.tenant == tenant and q.type_index == grant.type_index
                                        for q in problem.placement.cell_quotas)
    return Demand(
        jobs=grant.jobs,
        type_index=grant.type_index,
        devices=grant.devices,
        value=value,
        nodes=grant.nodes,
        max_span_level=limit,
        pinned_domain=int(inputs.pinned_domain[i]),
        avoid_nodes=frozenset(inputs.avoid_nodes[i]),
        exclusive=bool(inputs.exclusive[i]),
        previous=prev_devices,
        previous_nodes=tuple(prev_nodes),
        move_cost=move,
        resize_cost=weights.move_per_s * float(inputs.resize_s[i]),
        pattern=inputs.pattern[i],
        bandwidth_sensitive=bool(inputs.bandwidth_sensitive[i]),
        span_reward=span_reward(inputs, i),
        guaranteed_tenant=tenant if quota_holder else "",
    )


def span_reward(inputs: PlacementJobs, i: int) -> tuple[float, ...]:
    """Throughput by widest crossed level relative to the job's best (empty = not given)."""
    row = inputs.throughput_by_span[i] if inputs.throughput_by_span.shape[0] > i else None
    if row is None or np.all(np.isnan(row)):
        return ()
    best = float(np.nanmax(row))
    if best <= 0:
        return ()
    filled = np.empty(SPAN_COLUMNS)
    current = best
    for k in range(SPAN_COLUMNS):
        if not np.isnan(row[k]):
            current = float(row[k])
        filled[k] = current
    return tuple((filled / best).tolist())
