"""The placement stage `solve()` runs after a policy (`policy.placement`), and `place_grants`,
the same stage for any caller with grants in hand (the round schedule, the simulator).

For time-share and market plans the stage places the grants of every scheduled round (one
round is computed when the request asks for none), each round starting from the devices of the
round before (round 0 from the snapshot's history), so moves are priced round to round; the
plan's rounds get their devices, nodes and lease flags from it, and a grant that cannot be
placed leaves its round (the job does not run then). Queue, configuration and window plans
place their grants once. The section reports round 0: per job its devices (or why none), the
certificate, the other placers of `compare` on the same grants, time shifts and quota slack.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from apportion.formulations.placement.cassini import ShiftResult, shift_problem, solve_shifts
from apportion.formulations.placement.compat import COMPAT_PLACERS
from apportion.formulations.placement.demands import (
    Grant,
    demand_for,
    held_before,
    placement_jobs,
    plan_grants,
    round_grants,
)
from apportion.formulations.placement.exact import PlacementResult, place_exact
from apportion.formulations.placement.hived import quota_slack
from apportion.formulations.placement.instance import PlacementInstance
from apportion.formulations.placement.objective import evaluate
from apportion.formulations.rounds import round_schedule
from apportion.solver.capabilities import (
    DEFAULT_RELATIVE_GAP,
    Capabilities,
    PlanKind,
    ProblemClass,
)
from apportion.solver.cluster_topology import topology_of
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import Problem, SolveOptions
from apportion.solver.placement_plan import (
    JobPlacement,
    PlacementSection,
    PlacerComparison,
    QuotaSlack,
)
from apportion.solver.result import ConfigurationChoice, Plan, ScheduledRound, Termination
from apportion.solver.stages import PlacementParameters, Placer
from apportion.solver.topology import BoolArray, Topology

PLACEMENT_GAP = DEFAULT_RELATIVE_GAP[ProblemClass.MILP]
"""Relative gap within which the exact placer calls its answer optimal."""
DEFAULT_PLACEMENT_LIMIT_S = 10.0
"""Time the placement stage may take per set of grants when the request sets no limit (s):
the MILP stops there with its best answer and the gap to the bound (node symmetry can keep
branch and bound from closing a fragmentation gap for a long time)."""


@dataclass(frozen=True)
class GrantPlacement:
    """The stage's answer for one set of grants."""

    instance: PlacementInstance
    result: PlacementResult
    jobs: dict[int, JobPlacement]
    """Per job of a grant (and per running job left without one), its placement."""
    compared: tuple[PlacerComparison, ...]
    shifts: ShiftResult | None = None
    shift_period_s: float = 0.0

    def devices_of(self) -> dict[int, tuple[int, ...]]:
        """Per placed job, its devices (the `previous` of the next round)."""
        return {i: p.devices for i, p in self.jobs.items() if p.placed}


def _instance(
    problem: Problem, topology: Topology, parameters: PlacementParameters,
    grants: Sequence[Grant], previous: Mapping[int, tuple[int, ...]] | None,
) -> PlacementInstance:
    inputs = placement_jobs(problem)
    demands = [demand_for(problem, inputs, parameters, g, previous) for g in grants]
    share = problem.jobs.priority_weight
    order = sorted(range(len(demands)), key=lambda r: (-share[grants[r].jobs[0]],
                                                       grants[r].jobs[0]))
    return PlacementInstance(
        topology=topology,
        demands=tuple(demands[r] for r in order),
        weights=parameters.weights,
        pattern_score=parameters.pattern_score,
        min_link_score=parameters.min_link_score,
        quotas=problem.placement.cell_quotas if problem.placement is not None else (),
        enforce_quotas=parameters.enforce_cell_quotas,
    )


def run_placer(
    instance: PlacementInstance, parameters: PlacementParameters, options: SolveOptions,
    deadline: Deadline,
) -> tuple[PlacementResult, tuple[PlacerComparison, ...]]:
    """The requested placer's answer and the comparisons with the placers of `compare`."""
    if not deadline.bounded:
        deadline = Deadline.after(DEFAULT_PLACEMENT_LIMIT_S)
    others = {p: COMPAT_PLACERS[p](instance, deadline) for p in parameters.compare
              if p is not Placer.EXACT}
    if parameters.placer is Placer.EXACT:
        result = place_exact(
            instance, deadline, PLACEMENT_GAP, parameters.max_candidate_pairs,
            tuple(others.values()), options.threads, options.seed, parameters.level,
        )
    else:
        started = time.perf_counter()
        assignment = COMPAT_PLACERS[parameters.placer](instance, deadline)
        result = PlacementResult(
            placer=parameters.placer.value,
            assignment=assignment,
            score=evaluate(instance, assignment),
            termination=Termination.HEURISTIC,
            solve_time_s=time.perf_counter() - started,
        )
    compared = []
    for placer in parameters.compare:
        if placer is parameters.placer:
            continue
        if placer is Placer.EXACT:
            other = place_exact(instance, deadline, PLACEMENT_GAP, parameters.max_candidate_pairs,
                                threads=options.threads, seed=options.seed,
                                level=parameters.level)
            score, detail = other.score, other.detail
        else:
            score, detail = evaluate(instance, others[placer]), ""
        compared.append(PlacerComparison(
            placer=placer.value,
            placed_value=score.placed_value,
            jobs_placed=score.placed,
            objective=score.cost,
            objective_difference=score.cost - result.score.cost,
            detail=detail,
        ))
    return result, tuple(compared)


def place_grants(
    problem: Problem,
    grants: Sequence[Grant],
    parameters: PlacementParameters,
    previous: Mapping[int, tuple[int, ...]] | None = None,
    options: SolveOptions | None = None,
    deadline: Deadline = NO_DEADLINE,
    occupied: BoolArray | None = None,
) -> GrantPlacement:
    """Devices for `grants` (jobs, type, devices[, nodes]) on the problem's topology.
    `previous`: devices each job held before (None = the snapshot's history); `occupied`:
    (devices,) held by work outside these grants (None = none). Jobs that held devices but
    have no grant are reported preempted."""
    topology = topology_of(problem.cluster)
    instance = replace(_instance(problem, topology, parameters, grants, previous),
                       occupied=occupied)
    result, compared = run_placer(instance, parameters, options or SolveOptions(), deadline)
    score = result.score
    jobs: dict[int, JobPlacement] = {}
    for r, demand in enumerate(instance.demands):
        devices = score.ordered[r] if result.assignment.devices[r] else ()
        nodes = _node_pairs(topology, devices)
        share = float(score.demand_cost[r]) / len(demand.jobs)
        for i in demand.jobs:
            jobs[i] = JobPlacement(
                placed=bool(devices),
                reason=result.assignment.reason(r),
                devices=devices,
                node_devices=nodes,
                kept=bool(score.kept[r] and not score.resized[r]),
                migrated=bool(score.moved[r]),
                resized=bool(score.resized[r]),
                preempted=bool(score.preempted[r]),
                cost=share,
                widest_level=max(int(score.widest[r]), 0),
                link_score=float(score.link_score[r]),
            )
    inputs = placement_jobs(problem)
    for i in range(problem.jobs.num_jobs):
        if i in jobs:
            continue
        held = previous.get(i, ()) if previous is not None else any(
            held_before(problem, inputs, i))
        if held:
            jobs[i] = JobPlacement(placed=False, preempted=True,
                                   reason="no devices granted in this round (preempted)")
    if parameters.time_shifts is None:
        return GrantPlacement(instance, result, jobs, compared)
    shift = parameters.time_shifts
    placed_devices = {i: p.devices for i, p in jobs.items() if p.placed}
    shifts = shift_problem(topology, placed_devices, inputs.phases, inputs.iteration_time_s,
                           shift.slot_s, shift.max_period_s)
    answer = solve_shifts(shifts, deadline)
    for job, k in zip(shifts.jobs, answer.shifts, strict=True):
        jobs[job.job] = replace(jobs[job.job], time_shift_s=k * shift.slot_s)
    return GrantPlacement(instance, result, jobs, compared, answer,
                          shifts.period * shift.slot_s)


def _node_pairs(topology: Topology, devices: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    if not devices:
        return ()
    nodes = topology.device_node[list(devices)]
    order = list(dict.fromkeys(nodes.tolist()))
    return tuple((v, int(np.count_nonzero(nodes == v))) for v in order)


def section(problem: Problem, placed: GrantPlacement, detail: str = "") -> PlacementSection:
    """The plan's placement section for one placed round."""
    result = placed.result
    score = result.score
    m = problem.jobs.num_jobs
    shifts = placed.shifts
    notes = "; ".join(x for x in (result.detail, detail, shifts.detail if shifts else "") if x)
    return PlacementSection(
        placer=result.placer,
        termination=result.termination,
        objective=score.cost,
        bound=result.bound,
        gap=result.gap,
        placed_value=score.placed_value,
        placed_value_bound=result.placed_value_bound if result.bound is not None
        else score.placed_value,
        jobs_placed=sum(len(d.jobs) for r, d in enumerate(placed.instance.demands)
                        if result.assignment.devices[r]),
        jobs_not_placed=sum(len(d.jobs) for r, d in enumerate(placed.instance.demands)
                            if not result.assignment.devices[r]),
        objective_terms=dict(score.terms),
        free_domains={int(level): k for level, k in score.free_domains.items()},
        compared=placed.compared,
        detail=notes,
        solve_time_s=result.solve_time_s,
        model_size=result.model_size,
        jobs=tuple(placed.jobs.get(i) for i in range(m)),
        quota_slack=_quota_slack(placed),
        shift_overflow=shifts.overflow if shifts else None,
        shift_overflow_bound=shifts.bound if shifts else None,
        shift_period_s=placed.shift_period_s,
    )


def _quota_slack(placed: GrantPlacement) -> tuple[QuotaSlack, ...]:
    """HiveD's safety slack after placement (when the snapshot gives cell quotas)."""
    instance = placed.instance
    assignment = placed.result.assignment
    used = np.zeros(instance.topology.num_devices, dtype=bool)
    for devices in assignment.devices:
        used[list(devices)] = True
    done = np.array([bool(d) for d in assignment.devices], dtype=bool)
    return tuple(QuotaSlack(j, level.value, slack)
                 for j, level, slack in quota_slack(instance, used, done))


def apply_placement(
    problem: Problem,
    plan: Plan,
    capabilities: Capabilities,
    parameters: PlacementParameters,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """The plan with its grants placed on devices (module docstring)."""
    kind = capabilities.plan_kind
    if kind in (PlanKind.TIME_SHARE, PlanKind.MARKET):
        return _place_rounds(problem, plan, parameters, options, deadline)
    grants = plan_grants(problem, plan, kind)
    placed = place_grants(problem, grants, parameters, None, options, deadline)
    plan = replace(plan, placement=section(problem, placed))
    if kind is PlanKind.CONFIGURATION and plan.configurations is not None:
        plan = replace(plan, configurations=replace(
            plan.configurations, choices=_configurations(problem, plan.configurations.choices,
                                                         placed)))
    return plan


def _place_rounds(
    problem: Problem, plan: Plan, parameters: PlacementParameters, options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    shares = plan.shares
    rounds = shares.rounds or round_schedule(problem, plan.time_share, 1, shares.colocated,
                                             deadline)
    names = problem.cluster.node_names
    previous: dict[int, tuple[int, ...]] | None = None
    placed_rounds: list[ScheduledRound] = []
    first: GrantPlacement | None = None
    dropped = 0
    for r, scheduled in enumerate(rounds):
        if r > 0 and deadline.expired():
            placed_rounds.extend(rounds[r:])
            break
        placed = place_grants(problem, round_grants(scheduled.grants), parameters, previous,
                              options, deadline)
        first = first or placed
        grants = []
        for grant in scheduled.grants:
            where = placed.jobs.get(grant.job)
            if where is None or not where.placed:
                dropped += 1
                continue
            grants.append(replace(
                grant,
                nodes=tuple(names[v] for v, _ in where.node_devices) if names else (),
                lease_extended=where.kept or where.resized,
                devices_placed=where.devices,
            ))
        placed_rounds.append(ScheduledRound(scheduled.index, tuple(grants)))
        previous = placed.devices_of()
    assert first is not None or not rounds
    if first is None:
        return plan
    note = f"{dropped} grants could not be placed and were left out of their rounds" \
        if dropped else ""
    placed_shares = replace(shares, rounds=tuple(placed_rounds)) if shares.rounds else shares
    return replace(plan, shares=placed_shares, placement=section(problem, first, note))


def _configurations(
    problem: Problem, choices: tuple[ConfigurationChoice | None, ...], placed: GrantPlacement
) -> tuple[ConfigurationChoice | None, ...]:
    """Configurations with the stage's nodes."""
    names = problem.cluster.node_names
    out: list[ConfigurationChoice | None] = []
    for i, choice in enumerate(choices):
        where = placed.jobs.get(i)
        if choice is None or where is None:
            out.append(choice)
            continue
        out.append(replace(
            choice,
            node_devices=tuple((names[v], k) for v, k in where.node_devices) if names else (),
            placed=where.placed,
            placement_detail=where.reason,
        ))
    return tuple(out)

