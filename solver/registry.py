"""The policy registry: name, aliases, parameter type, required inputs, description.

The CLI, the server and `ListPolicies` all read it. Importing this module is cheap: the
formulation behind a policy is imported only when it is solved.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

from apportion.solver.errors import ValidationError, Violation
from apportion.solver.model import Problem, SolveOptions
from apportion.solver.parameters import AlloxParameters, MaxMinFairnessParameters, NoParameters
from apportion.solver.result import Plan

SolveFunction = Callable[[Problem, Any, Any, SolveOptions], Plan]
"""(problem, parameters, compat, options) -> plan."""


@dataclass(frozen=True)
class PolicySpec:
    name: str
    """Canonical name."""
    description: str
    parameters_type: type
    """Dataclass of the parameters (NoParameters when none)."""
    parameters_message: str
    """Full proto name of the parameter message, "" when none."""
    parameters_field: str
    """Name of the `Policy.parameters` oneof field carrying them, "" when none."""
    required_inputs: tuple[str, ...]
    maximize: bool
    entry_point: str
    """"module:function" implementing SolveFunction, imported lazily."""
    aliases: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    """Alias name -> parameter values the alias forces."""

    def load(self) -> SolveFunction:
        module_name, _, function_name = self.entry_point.partition(":")
        function: SolveFunction = getattr(importlib.import_module(module_name), function_name)
        return function


_POLICIES: tuple[PolicySpec, ...] = (
    PolicySpec(
        name="weighted_max_min_fairness",
        description=(
            "Heterogeneity-aware max-min fairness of normalized throughput with priority weights "
            "and scale factors (Gavel's LAS, formulations.md A2.1): maximize the smallest level "
            "s_i/w_i * throughput_i(X)/proportional_share_i. Exact LP optimum with a dual "
            "certificate."
        ),
        parameters_type=MaxMinFairnessParameters,
        parameters_message="apportion.v1.MaxMinFairnessParameters",
        parameters_field="max_min_fairness",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "jobs[].throughput",
            "jobs[].scale_factor",
            "jobs[].priority_weight",
        ),
        maximize=True,
        entry_point="apportion.formulations.max_min_fairness:solve_policy",
        aliases={
            "max_min_fairness_perf": {"heterogeneity_agnostic": False},
            "max_min_fairness": {"heterogeneity_agnostic": True},
            "las": {"heterogeneity_agnostic": False},
        },
    ),
    PolicySpec(
        name="isolated",
        description=(
            "Gavel's isolated baseline (formulations.md A1.3): a static 1/m share of every "
            "accelerator type, cells a job cannot use left idle. No optimization."
        ),
        parameters_type=NoParameters,
        parameters_message="",
        parameters_field="",
        required_inputs=("cluster.accelerator_types[].count", "jobs[].scale_factor"),
        maximize=True,
        entry_point="apportion.formulations.isolated:solve_policy",
    ),
    PolicySpec(
        name="allox",
        description=(
            "AlloX (formulations.md A3): non-preemptive min-cost matching of pending jobs to "
            "(device, k-th-from-last position) slots, minimizing total job completion time "
            "sum (C_i - a_i); running jobs keep their devices until busy_until_s. Exact: a "
            "transportation LP over (device group, position) slots with a dual certificate. "
            "Outputs per-device queues, jobs to start now and predicted completion times."
        ),
        parameters_type=AlloxParameters,
        parameters_message="apportion.v1.AlloxParameters",
        parameters_field="allox",
        required_inputs=(
            "time_s",
            "cluster.accelerator_types[].count",
            "jobs[].throughput",
            "jobs[].arrival_time_s",
            "jobs[].progress.total_steps",
            "jobs[].progress.steps_done",
            "history.jobs[].current",
        ),
        maximize=False,
        entry_point="apportion.formulations.allox:solve_policy",
        # Gavel registers it under the same name, "allox" (alpha = 1 by default).
    ),
)

_BY_NAME: dict[str, PolicySpec] = {}
for _spec in _POLICIES:
    _BY_NAME[_spec.name] = _spec
    for _alias in _spec.aliases:
        _BY_NAME[_alias] = _spec


def policies() -> tuple[PolicySpec, ...]:
    """All registered policies, canonical order."""
    return _POLICIES


def known_names() -> list[str]:
    """Every accepted name (canonical names and aliases), sorted."""
    return sorted(_BY_NAME)


def lookup(name: str, field_path: str = "policy.name") -> PolicySpec:
    """The policy registered under `name` (canonical or alias); ValidationError otherwise."""
    spec = _BY_NAME.get(name)
    if spec is None:
        what = "is required" if not name else f"unknown policy {name!r}"
        raise ValidationError(
            [Violation(field_path, f"{what}; known policies: {', '.join(known_names())}")]
        )
    return spec


def resolve_parameters(spec: PolicySpec, requested_name: str, parameters: object | None) -> object:
    """The parameters to solve with: the given ones (or defaults), with the alias's forced
    values applied."""
    params = spec.parameters_type() if parameters is None else parameters
    forced = spec.aliases.get(requested_name)
    if forced:
        params = replace(cast(Any, params), **forced)
    return params
