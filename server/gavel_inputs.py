"""Validation of the inputs the Gavel LP family reads (A2.5-A2.8, docs/policies/gavel.md).

`gavel_parameters` maps a `Policy.parameters` oneof field to a converter of its message;
`gavel_input_violations` checks the snapshot against what the resolved policy needs. Both
append `Violation(field_path, description)` like the rest of `apportion.server.convert`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from apportion.solver.errors import Violation
from apportion.solver.model import PolicyRequest, Problem
from apportion.solver.parameters import (
    CostThroughputParameters,
    FinishTimeFairnessParameters,
    MaxSumThroughputParameters,
    MinMakespanParameters,
    ThroughputNormalization,
)
from apportion.solver.registry import lookup
from apportion.v1 import policy_pb2 as policy_pb

_NORMALIZATION = {
    policy_pb.THROUGHPUT_NORMALIZATION_UNSPECIFIED: ThroughputNormalization.NONE,
    policy_pb.THROUGHPUT_NORMALIZATION_NONE: ThroughputNormalization.NONE,
    policy_pb.THROUGHPUT_NORMALIZATION_PROPORTIONAL: ThroughputNormalization.PROPORTIONAL,
}


def _max_sum(msg: Any, violations: list[Violation]) -> object:
    if msg.normalize not in _NORMALIZATION:
        violations.append(
            Violation("policy.max_sum_throughput.normalize", f"unknown value {msg.normalize}")
        )
    return MaxSumThroughputParameters(
        normalize=_NORMALIZATION.get(msg.normalize, ThroughputNormalization.NONE),
        reference_type=msg.reference_type,
        space_sharing=msg.space_sharing,
    )


def _cost(msg: Any, violations: list[Violation]) -> object:
    return CostThroughputParameters(
        use_slos=msg.use_slos,
        allow_missed_slos=msg.allow_missed_slos,
        reference_type=msg.reference_type,
    )


def _makespan(msg: Any, violations: list[Violation]) -> object:
    return MinMakespanParameters(reference_type=msg.reference_type,
                                 space_sharing=msg.space_sharing)


def _ftf(msg: Any, violations: list[Violation]) -> object:
    return FinishTimeFairnessParameters(reference_type=msg.reference_type,
                                        space_sharing=msg.space_sharing)


gavel_parameters: dict[str, Callable[[Any, list[Violation]], object]] = {
    "max_sum_throughput": _max_sum,
    "cost_throughput": _cost,
    "min_makespan": _makespan,
    "finish_time_fairness": _ftf,
}
"""`Policy.parameters` oneof field -> converter to the parameter dataclass."""

_NEEDS_REMAINING = ("min_makespan", "themis_finish_time_fairness")


def gavel_input_violations(problem: Problem, policy: PolicyRequest) -> list[Violation]:
    """Inputs the resolved Gavel policy needs but the snapshot lacks or has wrong; [] for
    other policies."""
    spec = lookup(policy.name)
    if spec.parameters_field not in gavel_parameters:
        return []
    out: list[Violation] = []
    jobs = problem.jobs
    reference = str(getattr(policy.parameters, "reference_type", ""))
    if reference:
        if reference not in problem.cluster.type_names:
            out.append(
                Violation(
                    f"policy.{spec.parameters_field}.reference_type",
                    f"unknown accelerator type {reference!r}; the cluster has "
                    f"{', '.join(problem.cluster.type_names)}",
                )
            )
        else:
            j = problem.cluster.type_names.index(reference)
            fits = problem.cluster.count.max() >= jobs.scale_factor
            for bad in np.flatnonzero((jobs.throughput[:, j] <= 0) & fits):
                out.append(
                    Violation(
                        f"snapshot.jobs[{bad}].throughput",
                        f"no throughput on the reference type {reference!r} "
                        "(the heterogeneity-agnostic variant copies that column)",
                    )
                )
    unknown = jobs.total_steps <= 0
    if policy.name in _NEEDS_REMAINING:
        for bad in np.flatnonzero(unknown):
            out.append(
                Violation(
                    f"snapshot.jobs[{bad}].progress.total_steps",
                    f"must be > 0: {policy.name} needs the remaining work",
                )
            )
    params = policy.parameters
    if isinstance(params, CostThroughputParameters) and params.use_slos:
        for i in range(jobs.num_jobs):
            deadline = float(jobs.deadline_s[i])
            if math.isnan(deadline):
                continue
            if unknown[i]:
                out.append(
                    Violation(
                        f"snapshot.jobs[{i}].progress.total_steps",
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
                        f"snapshot.jobs[{i}].deadline_s",
                        f"SLO = deadline_s - time_s = {deadline - problem.time_s} s <= 0 with "
                        f"{jobs.remaining_steps[i]} steps left (set allow_missed_slos to "
                        "report it as missed instead)",
                    )
                )
    return out
