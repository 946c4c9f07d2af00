"""`Policy` into a `PolicyRequest`: the registry entry (looked up once per request), the typed
parameters from the `parameters` oneof, the compat mode.

`PARAMETERS` maps each field of the `Policy.parameters` oneof to the converter of its
message; the converters of a family live in that family's input module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from apportion.server.gavel_inputs import (
    cost_parameters,
    ftf_parameters,
    makespan_parameters,
    max_sum_parameters,
)
from apportion.server.market_inputs import fisher_parameters, shockwave_parameters
from apportion.server.sia_inputs import pollux_parameters, sia_parameters
from apportion.solver.errors import ValidationError, Violation
from apportion.solver.model import Compat, PolicyRequest
from apportion.solver.parameters import (
    AlloxParameters,
    Canonicalization,
    MaxMinFairnessParameters,
    WaterFillingParameters,
)
from apportion.solver.registry import PolicySpec, lookup, resolve_parameters
from apportion.solver.validation import within
from apportion.v1 import policy_pb2 as policy_pb

_COMPAT = {
    policy_pb.COMPAT_UNSPECIFIED: Compat.NONE,
    policy_pb.COMPAT_GAVEL: Compat.GAVEL,
    policy_pb.COMPAT_SHOCKWAVE: Compat.SHOCKWAVE,
    policy_pb.COMPAT_SIA: Compat.SIA,
}
_CANONICALIZATION = {
    policy_pb.CANONICALIZATION_UNSPECIFIED: Canonicalization.NONE,
    policy_pb.CANONICALIZATION_NONE: Canonicalization.NONE,
    policy_pb.CANONICALIZATION_SUM: Canonicalization.SUM,
}

ParameterConverter = Callable[[Any, list[Violation]], object]
"""(parameter message, violations) -> parameter dataclass."""


def max_min_parameters(msg: Any, violations: list[Violation]) -> object:
    """`MaxMinFairnessParameters` from its message."""
    if msg.canonicalize not in _CANONICALIZATION:
        violations.append(Violation("policy.max_min_fairness.canonicalize",
                                    f"unknown value {msg.canonicalize}"))
    return MaxMinFairnessParameters(
        heterogeneity_agnostic=msg.heterogeneity_agnostic,
        canonicalize=_CANONICALIZATION.get(msg.canonicalize, Canonicalization.NONE),
        space_sharing=msg.space_sharing,
    )


def water_filling_parameters(msg: Any, violations: list[Violation]) -> object:
    """`WaterFillingParameters` from its message."""
    return WaterFillingParameters(
        heterogeneity_agnostic=msg.heterogeneity_agnostic, space_sharing=msg.space_sharing
    )


def allox_parameters(msg: Any, violations: list[Violation]) -> object:
    """`AlloxParameters` from its message: alpha in (0, 1], unset = 1."""
    alpha = msg.alpha if msg.HasField("alpha") else 1.0
    if not (alpha > 0 and within(alpha, 0.0, 1.0)):
        violations.append(Violation("policy.allox.alpha", f"must be in (0, 1], got {alpha}"))
        alpha = 1.0
    return AlloxParameters(alpha=alpha)


PARAMETERS: dict[str, ParameterConverter] = {
    "max_min_fairness": max_min_parameters,
    "water_filling": water_filling_parameters,
    "allox": allox_parameters,
    "max_sum_throughput": max_sum_parameters,
    "cost_throughput": cost_parameters,
    "min_makespan": makespan_parameters,
    "finish_time_fairness": ftf_parameters,
    "fisher_market": fisher_parameters,
    "shockwave": shockwave_parameters,
    "sia": sia_parameters,
    "pollux": pollux_parameters,
}
"""Field of the `Policy.parameters` oneof -> converter of its message."""


def policy_to_model(
    msg: policy_pb.Policy, violations: list[Violation]
) -> tuple[PolicySpec, PolicyRequest] | None:
    """The registry entry and the resolved policy, or None for an unknown name (its
    violation appended)."""
    try:
        spec = lookup(msg.name)
    except ValidationError as exc:
        violations.extend(exc.violations)
        return None
    given = msg.WhichOneof("parameters")
    parameters: object | None = None
    if given is not None and given != spec.parameters_field:
        expected = (
            f"takes {spec.parameters_field!r} parameters"
            if spec.parameters_field
            else "takes no parameters"
        )
        violations.append(
            Violation(f"policy.{given}",
                      f"parameters of another policy: {spec.name!r} {expected}")
        )
    elif given is not None:
        parameters = PARAMETERS[given](getattr(msg, given), violations)
    if msg.compat not in _COMPAT:
        violations.append(Violation("policy.compat", f"unknown value {msg.compat}"))
    policy = PolicyRequest(
        name=spec.name,
        parameters=resolve_parameters(spec, msg.name, parameters),
        compat=_COMPAT.get(msg.compat, Compat.NONE),
        requested_name=msg.name,
    )
    return spec, policy
