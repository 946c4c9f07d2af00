"""Parameters and input checks of the Gavel LP family (A2.5-A2.8, docs/policies/gavel.md).

`max_sum_parameters`, `cost_parameters`, `makespan_parameters` and `ftf_parameters` convert
their `Policy.parameters` messages; `check_gavel_lp` is the family's input check (declared on
its registry entries): the reference type and the SLO rows. Both append
`Violation(field_path, description)` like the rest of `apportion.server`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from apportion.server.request_context import RequestContext
from apportion.solver.errors import Violation, echo, listing
from apportion.solver.parameters import (
    CostThroughputParameters,
    FinishTimeFairnessParameters,
    MaxSumThroughputParameters,
    MinMakespanParameters,
    ThroughputNormalization,
)
from apportion.v1 import policy_pb2 as policy_pb

_NORMALIZATION = {
    policy_pb.THROUGHPUT_NORMALIZATION_UNSPECIFIED: ThroughputNormalization.NONE,
    policy_pb.THROUGHPUT_NORMALIZATION_NONE: ThroughputNormalization.NONE,
    policy_pb.THROUGHPUT_NORMALIZATION_PROPORTIONAL: ThroughputNormalization.PROPORTIONAL,
}


def max_sum_parameters(msg: Any, violations: list[Violation]) -> object:
    """`MaxSumThroughputParameters` from its message."""
    if msg.normalize not in _NORMALIZATION:
        violations.append(
            Violation("policy.max_sum_throughput.normalize", f"unknown value {msg.normalize}")
        )
    return MaxSumThroughputParameters(
        normalize=_NORMALIZATION.get(msg.normalize, ThroughputNormalization.NONE),
        reference_type=msg.reference_type,
        space_sharing=msg.space_sharing,
    )


def cost_parameters(msg: Any, violations: list[Violation]) -> object:
    """`CostThroughputParameters` from its message."""
    return CostThroughputParameters(
        use_slos=msg.use_slos,
        allow_missed_slos=msg.allow_missed_slos,
        reference_type=msg.reference_type,
    )


def makespan_parameters(msg: Any, violations: list[Violation]) -> object:
    """`MinMakespanParameters` from its message."""
    return MinMakespanParameters(reference_type=msg.reference_type,
                                 space_sharing=msg.space_sharing)


def ftf_parameters(msg: Any, violations: list[Violation]) -> object:
    """`FinishTimeFairnessParameters` from its message."""
    return FinishTimeFairnessParameters(reference_type=msg.reference_type,
                                        space_sharing=msg.space_sharing)


def check_gavel_lp(context: RequestContext) -> list[Violation]:
    """What a Gavel LP needs beyond the general rules: a known reference type with throughput
    for every job that fits, and (cost policy with SLOs) the remaining work of every job with
    a deadline and a deadline after time_s."""
    problem, policy = context.problem, context.policy
    out: list[Violation] = []
    jobs = problem.jobs
    reference = str(getattr(policy.parameters, "reference_type", ""))
    if reference:
        if reference not in problem.cluster.type_names:
            out.append(
                Violation(
                    f"policy.{context.spec.parameters_field}.reference_type",
                    f"unknown accelerator type {echo(reference)}; the cluster has "
                    f"{listing(problem.cluster.type_names)}",
                )
            )
        else:
            j = problem.cluster.type_names.index(reference)
            fits = problem.cluster.count.max() >= jobs.scale_factor
            for bad in np.flatnonzero((jobs.throughput[:, j] <= 0) & fits):
                out.append(
                    Violation(
                        context.paths.field(int(bad), "throughput"),
                        f"no throughput on the reference type {echo(reference)} "
                        "(the heterogeneity-agnostic variant copies that column)",
                    )
                )
    params = policy.parameters
    if isinstance(params, CostThroughputParameters) and params.use_slos:
        unknown = jobs.total_steps <= 0
        for i in np.flatnonzero(~np.isnan(jobs.deadline_s)):
            deadline = float(jobs.deadline_s[i])
            if unknown[i]:
                out.append(
                    Violation(
                        context.paths.field(int(i), "progress.total_steps"),
                        "must be > 0 for a job with a deadline: the SLO row needs the "
                        "remaining work",
                    )
                )
            elif (
                jobs.remaining_steps[i] > 0
                and deadline <= problem.time_s
                and not params.allow_missed_slos
            ):
                out.append(
                    Violation(
                        context.paths.field(int(i), "deadline_s"),
                        f"SLO = deadline_s - time_s = {deadline - problem.time_s} s <= 0 with "
                        f"{jobs.remaining_steps[i]} steps left (set allow_missed_slos to "
                        "report it as missed instead)",
                    )
                )
    return out
