"""The single solve entry point used by the command line and the server."""

from __future__ import annotations

import time
from dataclasses import replace

from apportion.solver.model import PolicyRequest, Problem, SolveOptions
from apportion.solver.registry import lookup
from apportion.solver.result import Plan, Termination


def solve(problem: Problem, policy: PolicyRequest, options: SolveOptions | None = None) -> Plan:
    """Solve `problem` under `policy`. `problem` must be validated (see apportion.server.convert).

    Never raises for infeasible, unbounded or timed-out solves: those come back as a plan whose
    certificate says so.
    """
    opts = options or SolveOptions()
    spec = lookup(policy.name)
    started = time.perf_counter()
    plan = spec.load()(problem, policy.parameters, policy.compat, opts)
    wall = time.perf_counter() - started
    cert = plan.certificate
    if cert.build_time_s + cert.solve_time_s > wall:  # keep the reported split consistent
        cert = replace(cert, build_time_s=max(0.0, wall - cert.solve_time_s))
    plan = replace(plan, certificate=cert)
    if opts.schedule_rounds > 0 and _has_time_share(plan):
        from apportion.formulations.rounds import round_schedule

        if spec.capabilities.round_schedule:
            rounds = round_schedule(
                problem, plan.time_share, opts.schedule_rounds, plan.colocated
            )
            plan = replace(plan, rounds=rounds)
    return plan


def _has_time_share(plan: Plan) -> bool:
    """A plan with an allocation to schedule (the termination carries a plan)."""
    return plan.certificate.termination in (
        Termination.OPTIMAL,
        Termination.OPTIMAL_INACCURATE,
        Termination.FEASIBLE,
        Termination.HEURISTIC,
    )
