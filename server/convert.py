"""Conversion between the apportion.v1 wire messages and the solver model.

`request_to_model` is where validation happens, in one function that produces the model and
every violation: the snapshot (`snapshot_inputs`), the policy (`policy_inputs`, the registry
entry looked up once), the options (`options_inputs`), then what the policy's declared
capabilities require of the snapshot and the policy's own input check
(`PolicySpec.input_check`). It raises one `ValidationError` listing every violation with its
field path. The CLI (`apportion validate` and `apportion solve`) and the server all call it,
so a snapshot file and a gRPC request are judged identically, and `validate` rejects exactly
what `solve` would. The response side is `apportion.server.response`.
"""

from __future__ import annotations

import re

import numpy as np

from apportion.server.elastic_inputs import elastic_problem, partition_options
from apportion.server.fairness_inputs import fairness_input_violations
from apportion.server.options_inputs import options_to_model
from apportion.server.policy_inputs import policy_to_model
from apportion.server.request_context import RequestContext
from apportion.server.response import plan_to_response
from apportion.server.sharing_inputs import sharing_problem
from apportion.server.snapshot_inputs import snapshot_to_problem
from apportion.server.topology_inputs import with_stages
from apportion.solver import limits
from apportion.solver.capabilities import PlanKind
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.errors import ValidationError, Violation, echo, listing
from apportion.solver.model import PolicyRequest, Problem, SolveOptions
from apportion.solver.validation import JobPaths, flagged
from apportion.v1 import allocation_service_pb2 as service_pb

__all__ = ["plan_to_response", "request_to_model"]

_ROOTS = {"snapshot": 0, "policy": 1, "options": 2}
_PART = re.compile(r"\[(\d+)\]|[^.\[]+|\[[^\]]*\]")


def _path_order(violation: Violation) -> tuple[tuple[int, int | str], ...]:
    """Sort key: snapshot, policy, options; within them list indices numerically and field
    names alphabetically."""
    root = violation.field.split(".", 1)[0].split("[", 1)[0]
    parts: list[tuple[int, int | str]] = [(0, _ROOTS.get(root, len(_ROOTS)))]
    for match in _PART.finditer(violation.field):
        index = match.group(1)
        parts.append((0, int(index)) if index is not None else (1, match.group(0)))
    return tuple(parts)


def _jobs_with_violations(violations: list[Violation], paths: JobPaths) -> set[int]:
    """Indices of the jobs some violation already names."""
    return {i for v in violations if (i := paths.job_of(v.field)) is not None}


def capability_violations(context: RequestContext, known: list[Violation]) -> list[Violation]:
    """What the policy's declared capabilities require of every snapshot: a usable type per
    job (or, for configuration policies, per-configuration goodput or a Pollux model), the
    remaining work when it needs it, listed tenants when it reads them, and a round schedule
    of at most MAX_SCHEDULED_GRANTS grants. Jobs `known` already names are not judged
    again."""
    problem, caps, name = context.problem, context.spec.capabilities, context.policy.name
    jobs = problem.jobs
    skip = np.zeros(jobs.num_jobs, bool)
    skip[list(_jobs_with_violations(known, context.paths))] = True
    if caps.reads_configurations:
        skip |= (jobs.given_goodput.counts > 0) | np.array([p is not None for p in jobs.pollux],
                                                            bool)
    elastic = problem.elastic
    if elastic is not None and elastic.speed_model:  # a speed model stands for throughput
        skip |= np.array([any(row) for row in elastic.speed_model], bool)
    out = flagged(
        ~problem.usable.any(axis=1) & ~skip,
        lambda i: context.paths.field(i, "throughput"),
        lambda i: f"no usable accelerator type: needs a positive throughput on a type with at "
                  f"least {jobs.scale_factor[i]} devices",
    )
    if caps.needs_remaining_work:
        out += flagged(
            (jobs.total_steps <= 0) & ~skip,
            lambda i: context.paths.field(i, "progress.total_steps"),
            lambda i: f"must be > 0: {name} needs the remaining work",
        )
    if caps.reads_tenants and problem.tenants:
        listed = {tenant.name for tenant in problem.tenants}
        names = listing(sorted(listed))
        out += [
            Violation(context.paths.field(i, "tenant"),
                      f"unknown tenant {echo(tenant)}; snapshot.tenants lists {names}")
            for i, tenant in enumerate(jobs.tenant) if tenant and tenant not in listed
        ]
    if context.request.options.columnar_plan and caps.plan_kind is not PlanKind.TIME_SHARE:
        out.append(Violation(
            "options.columnar_plan",
            f"{name}'s plan ({caps.plan_kind.value}) has no columnar form; leave it unset",
        ))
    rounds = context.options.schedule_rounds
    if caps.round_schedule and rounds:
        grants = rounds * min(jobs.num_jobs, int(problem.cluster.count.sum()))
        if grants > limits.MAX_SCHEDULED_GRANTS:
            out.append(Violation(
                "options.schedule_rounds",
                f"{rounds} rounds of up to {grants // rounds} grants is more than "
                f"{limits.MAX_SCHEDULED_GRANTS} grants",
            ))
    return out


def request_to_model(
    request: service_pb.SolveRequest,
    deadline: Deadline = NO_DEADLINE,
    serialized: bytes | None = None,
) -> tuple[Problem, PolicyRequest, SolveOptions]:
    """Validate and convert a request; raises ValidationError listing every violation.
    `serialized`: the bytes `request` was parsed from, when at hand (its jobs are decoded from
    them rather than from a fresh serialization).

    A request that passes can be solved: `solve` raises no ValueError on the model returned
    (the fuzz tests hold every registered policy to this). Raises `DeadlineExpiredError` when
    `deadline` passes before the conversion is done (checked between stages and every few
    thousand jobs in the long per-job loops)."""
    violations: list[Violation] = []
    problem, paths, present = snapshot_to_problem(request.snapshot, violations, deadline,
                                                  serialized)
    deadline.check()
    resolved = policy_to_model(request.policy, violations)
    options = options_to_model(request.options, violations)
    if resolved is None:
        raise ValidationError(sorted(violations, key=_path_order))
    spec, policy = resolved
    policy = with_stages(request.policy, policy, spec, problem, violations)
    problem = elastic_problem(request, problem, policy, violations, present)
    problem = sharing_problem(request, problem, policy, violations, serialized, deadline)
    options = partition_options(request.options, problem, policy, options, violations)
    deadline.check()
    context = RequestContext(problem, policy, spec, options, request, paths)
    policy_level = capability_violations(context, violations)
    policy_level += fairness_input_violations(problem, policy)
    check = spec.load_input_check()
    if check is not None:
        policy_level += check(context)
    known = {v.field for v in violations}
    violations += [v for v in policy_level if v.field not in known]
    if violations:
        raise ValidationError(sorted(violations, key=_path_order))
    return problem, policy, options
