"""`Policy` into a `PolicyRequest`: the registry entry (looked up once per request), the typed
parameters from the `parameters` oneof, the compat mode.

`PARAMETERS` maps each message of the `Policy.parameters` oneof to its converter; the
converters of a family live in that family's input module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from apportion.server.elastic_inputs import elastic_parameters
from apportion.server.fairness_inputs import fairness_parameters
from apportion.server.gavel_inputs import (
    cost_parameters,
    ftf_parameters,
    makespan_parameters,
    max_sum_parameters,
)
from apportion.server.market_inputs import fisher_parameters, shockwave_parameters
from apportion.server.sharing_inputs import SHARING_COMPAT, sharing_parameters
from apportion.server.sia_inputs import pollux_parameters, sia_parameters
from apportion.server.topology_inputs import tiresias_parameters
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

COMPAT_OF_WIRE = {
    policy_pb.COMPAT_UNSPECIFIED: Compat.NONE,
    policy_pb.COMPAT_GAVEL: Compat.GAVEL,
    policy_pb.COMPAT_SHOCKWAVE: Compat.SHOCKWAVE,
    policy_pb.COMPAT_SIA: Compat.SIA,
    policy_pb.COMPAT_TIRESIAS: Compat.TIRESIAS,
    **SHARING_COMPAT,
}
"""`Policy.compat` on the wire -> the model's `Compat` (every value the service accepts)."""
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
    policy_pb.MaxMinFairnessParameters.DESCRIPTOR.full_name: max_min_parameters,
    policy_pb.WaterFillingParameters.DESCRIPTOR.full_name: water_filling_parameters,
    policy_pb.AlloxParameters.DESCRIPTOR.full_name: allox_parameters,
    policy_pb.MaxSumThroughputParameters.DESCRIPTOR.full_name: max_sum_parameters,
    policy_pb.CostThroughputParameters.DESCRIPTOR.full_name: cost_parameters,
    policy_pb.MinMakespanParameters.DESCRIPTOR.full_name: makespan_parameters,
    policy_pb.FinishTimeFairnessParameters.DESCRIPTOR.full_name: ftf_parameters,
    policy_pb.FisherMarketParameters.DESCRIPTOR.full_name: fisher_parameters,
    policy_pb.ShockwaveParameters.DESCRIPTOR.full_name: shockwave_parameters,
    policy_pb.SiaParameters.DESCRIPTOR.full_name: sia_parameters,
    policy_pb.PolluxParameters.DESCRIPTOR.full_name: pollux_parameters,
    **fairness_parameters,
    **tiresias_parameters,
    **elastic_parameters,
    **sharing_parameters,
}
"""Full name of a parameter message (`PolicySpec.parameters_message`) -> its converter."""


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
        message = getattr(msg, given)
        parameters = PARAMETERS[message.DESCRIPTOR.full_name](message, violations)
    if msg.compat not in COMPAT_OF_WIRE:
        violations.append(Violation("policy.compat", f"unknown value {msg.compat}"))
    policy = PolicyRequest(
        name=spec.name,
        parameters=resolve_parameters(spec, msg.name, parameters),
        compat=COMPAT_OF_WIRE.get(msg.compat, Compat.NONE),
        requested_name=msg.name,
    )
    return spec, policy
