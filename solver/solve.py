"""The single solve entry point used by the command line, the server and the Python API."""

from __future__ import annotations

import time
from dataclasses import replace

from apportion.solver.certificate import enforce
from apportion.solver.deadline import Deadline
from apportion.solver.model import PolicyRequest, Problem, SolveOptions
from apportion.solver.registry import (
    ADMISSION_STAGE_ENTRY,
    PLACEMENT_STAGE_ENTRY,
    ROUND_SCHEDULE_ENTRY,
    load_entry,
    lookup,
)
from apportion.solver.result import Plan, Termination


def solve(
    problem: Problem,
    policy: PolicyRequest,
    options: SolveOptions | None = None,
    deadline: Deadline | None = None,
) -> Plan:
    """Solve `problem` under `policy`. `problem` must be validated (see apportion.server.convert).

    `deadline`: when the answer is due (created when the request arrived); the request's own
    `options.time_limit_s`, counted from now, applies too when it is earlier. The formulation
    receives `options` with `relative_gap` resolved (the request's, or the policy's default).
    Never raises for infeasible, unbounded or timed-out solves: those come back as a plan whose
    certificate says so; and a plan says `optimal` only when its certificate proves it
    (`apportion.solver.certificate.enforce`). `options.partitions` > 1 solves a partitionable
    policy by POP (`apportion.solver.partition`); other policies raise ValueError then.

    Stages around the policy (Blox-style composition): `policy.admission` decides which jobs
    the policy sees (the others come back deferred); `options.schedule_rounds` turns time
    shares into rounds; `policy.placement` maps the plan's grants to devices (its own
    certificate is in `plan.placement`). Each is loaded from its registry entry point.
    """
    opts = options or SolveOptions()
    spec = lookup(policy.name)
    if policy.admission is not None and spec.capabilities.admission_stage:
        admit = load_entry(ADMISSION_STAGE_ENTRY)
        admitted: Plan = admit(problem, policy, opts, deadline or Deadline.never(), solve)
        return admitted
    if not isinstance(policy.parameters, spec.parameters_type):
        raise TypeError(
            f"policy {spec.name!r} takes {spec.parameters_type.__name__}, "
            f"got {type(policy.parameters).__name__}"
        )
    due = (deadline or Deadline.never()).within(opts.time_limit_s)
    tolerance = opts.relative_gap or spec.capabilities.default_relative_gap
    opts = replace(opts, relative_gap=tolerance)
    started = time.perf_counter()
    if opts.partitions > 1:
        if not spec.capabilities.partitionable or getattr(policy.parameters, "space_sharing",
                                                          False):
            raise ValueError(f"policy {spec.name!r} cannot be partitioned (POP takes the LP "
                             "time-share policies, without space sharing)")
        from apportion.solver.partition import solve_partitioned

        plan = solve_partitioned(problem, spec, policy, opts, due)
    else:
        formulation = spec.load(problem, policy.parameters)
        plan = formulation(problem, policy.parameters, policy.compat, opts, due)
    wall = time.perf_counter() - started
    cert = plan.certificate
    if cert.build_time_s + cert.solve_time_s > wall:  # keep the reported split consistent
        cert = replace(cert, build_time_s=max(0.0, wall - cert.solve_time_s))
    plan = enforce(replace(plan, certificate=cert), tolerance)
    own_rounds = bool(plan.shares.rounds)  # a policy that plans its own rounds keeps them
    if (opts.schedule_rounds > 0 and spec.capabilities.round_schedule and _has_plan(plan)
            and not own_rounds):
        round_schedule = load_entry(ROUND_SCHEDULE_ENTRY)
        rounds = round_schedule(
            problem, plan.time_share, opts.schedule_rounds, plan.shares.colocated, due
        )
        plan = replace(plan, shares=replace(plan.shares, rounds=rounds))
        if len(rounds) < opts.schedule_rounds:
            note = f"round schedule cut at {len(rounds)} rounds by the time limit"
            detail = f"{plan.certificate.detail}; {note}" if plan.certificate.detail else note
            plan = replace(plan, certificate=replace(plan.certificate, detail=detail))
    if policy.placement is not None and spec.capabilities.placement_stage and _has_plan(plan):
        place = load_entry(PLACEMENT_STAGE_ENTRY)
        plan = place(problem, plan, spec.capabilities, policy.placement, opts, due)
    return plan


def _has_plan(plan: Plan) -> bool:
    """A plan with an allocation to schedule (the termination carries a plan)."""
    return plan.certificate.termination in (
        Termination.OPTIMAL,
        Termination.OPTIMAL_INACCURATE,
        Termination.FEASIBLE,
        Termination.HEURISTIC,
    )
