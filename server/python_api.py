"""The Python API behind `apportion.solve` and `apportion.validate` (docs/python-api.md).

A request can be given as an `apportion.v1.SolveRequest` or `Snapshot` message, as a dict in
the proto3 canonical JSON form of either (a dict with a ``snapshot``, ``policy`` or ``options``
key is a request, any other a snapshot), or as the path of a snapshot file (what
``apportion solve FILE`` reads). It goes through `apportion.server.convert.request_to_model`,
the validation the command line and the gRPC service use, so a malformed request raises one
`ValidationError` listing every violation with its field path, and through the same pipeline
(`apportion.server.pipeline`): the answer is the `SolveResponse` the service would send, with
the validated model and the typed plan beside it.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np
from google.protobuf import json_format

from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request_typed
from apportion.solver.deadline import Deadline
from apportion.solver.errors import ValidationError, Violation
from apportion.solver.model import PolicyRequest, Problem, SolveOptions
from apportion.solver.registry import PolicySpec, lookup
from apportion.solver.registry import policies as _registered
from apportion.solver.result import Certificate, Plan, Termination
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import policy_pb2 as policy_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

RequestLike = Union[
    service_pb.SolveRequest, snapshot_pb.Snapshot, Mapping[str, Any], str, "os.PathLike[str]"
]
"""What `solve` and `validate` accept (module docstring)."""

_REQUEST_KEYS = frozenset({"snapshot", "policy", "options"})
_OPTION_FIELDS = tuple(f.name for f in policy_pb.SolveOptions.DESCRIPTOR.fields)
_TERMINATION = {
    service_pb.TERMINATION_REASON_OPTIMAL: Termination.OPTIMAL,
    service_pb.TERMINATION_REASON_OPTIMAL_INACCURATE: Termination.OPTIMAL_INACCURATE,
    service_pb.TERMINATION_REASON_FEASIBLE: Termination.FEASIBLE,
    service_pb.TERMINATION_REASON_INFEASIBLE: Termination.INFEASIBLE,
    service_pb.TERMINATION_REASON_UNBOUNDED: Termination.UNBOUNDED,
    service_pb.TERMINATION_REASON_HEURISTIC: Termination.HEURISTIC,
    service_pb.TERMINATION_REASON_NO_SOLUTION: Termination.NO_SOLUTION,
    service_pb.TERMINATION_REASON_ERROR: Termination.ERROR,
}
WITH_PLAN = frozenset(
    {Termination.OPTIMAL, Termination.OPTIMAL_INACCURATE, Termination.FEASIBLE,
     Termination.HEURISTIC}
)
"""Terminations whose response carries a plan."""


@dataclass(frozen=True)
class ValidatedRequest:
    """A request that passed validation: the message as it will be solved and its model."""

    request: service_pb.SolveRequest
    problem: Problem
    """The validated snapshot (`apportion.solver.model.Problem`: numpy arrays, jobs x types)."""
    policy: PolicyRequest
    """Canonical policy name, typed parameters (aliases applied) and compat mode."""
    options: SolveOptions


@dataclass(frozen=True)
class Solution:
    """What `solve` returns: the wire response and, beside it, the typed plan.

    `response` is exactly the `apportion.v1.SolveResponse` the gRPC service sends for the
    same request (`response.stats` holds the certificate: termination, objective, best bound,
    gap). `plan` is the typed plan (`apportion.solver.result.Plan`, arrays aligned with
    `job_ids` x `type_names`), None only when the time limit ran out before the solve.
    """

    request: service_pb.SolveRequest
    response: service_pb.SolveResponse
    problem: Problem
    policy: PolicyRequest
    plan: Plan | None

    @property
    def termination(self) -> Termination:
        """How the solve ended (`optimal` only when the certificate proves it)."""
        return _TERMINATION.get(self.response.stats.termination, Termination.ERROR)

    @property
    def has_plan(self) -> bool:
        """The response carries a plan (optimal, optimal_inaccurate, feasible, heuristic)."""
        return self.termination in WITH_PLAN

    @property
    def optimal(self) -> bool:
        return self.termination is Termination.OPTIMAL

    @property
    def objective(self) -> float | None:
        """The objective recomputed from the returned plan (policy units), None = none."""
        stats = self.response.stats
        return stats.objective if stats.HasField("objective") else None

    @property
    def bound(self) -> float | None:
        """The proven bound on the optimum (above it when maximizing), None = none."""
        stats = self.response.stats
        return stats.best_bound if stats.HasField("best_bound") else None

    @property
    def gap(self) -> float | None:
        """The certificate's relative gap between objective and bound, None = no bound."""
        stats = self.response.stats
        return stats.relative_gap if stats.HasField("relative_gap") else None

    @property
    def certificate(self) -> Certificate | None:
        """The typed certificate (None when the solve did not run)."""
        return self.plan.certificate if self.plan is not None else None

    @property
    def job_ids(self) -> tuple[str, ...]:
        return self.problem.jobs.ids

    @property
    def type_names(self) -> tuple[str, ...]:
        return self.problem.cluster.type_names

    @property
    def time_share(self) -> np.ndarray:
        """(jobs, types) fraction of time each job runs on each type (zeros without a plan)."""
        if self.plan is None or not self.has_plan:
            return np.zeros((len(self.job_ids), len(self.type_names)))
        return np.asarray(self.plan.time_share, dtype=np.float64)

    def time_share_of(self, job_id: str) -> dict[str, float]:
        """Job `job_id`'s time share per type (types with share 0 omitted)."""
        return dict(self.job(job_id).time_share)

    def job(self, job_id: str) -> service_pb.JobAllocation:
        """The response's `JobAllocation` of job `job_id` (KeyError when absent)."""
        for entry in self.response.plan.jobs:
            if entry.job_id == job_id:
                return entry
        raise KeyError(job_id)

    def to_json(self) -> str:
        """The response as proto3 canonical JSON (what ``apportion solve --json`` prints)."""
        return json_format.MessageToJson(self.response)


def policies() -> tuple[PolicySpec, ...]:
    """Every registered policy (name, aliases, parameters, inputs, capabilities)."""
    return _registered()


def solve(
    request: RequestLike,
    policy: str | None = None,
    *,
    parameters: Mapping[str, Any] | None = None,
    compat: str | None = None,
    **options: Any,
) -> Solution:
    """Validate and solve `request` (module docstring for the accepted forms).

    `policy` (a registered name or alias) replaces the request's policy name; `parameters`
    (the policy's parameter message as a JSON dict, e.g. ``{"canonicalize":
    "CANONICALIZATION_SUM"}``) and `compat` (``"gavel"``, ``"shockwave"``, ``"sia"`` or
    ``"none"``) its parameters and compat switch; `options` are `apportion.v1.SolveOptions`
    fields by name (``time_limit_s``, ``relative_gap``, ``threads``, ``seed``, ``solver``:
    ``"auto"``, ``"highs"`` or ``"clarabel"``, ``schedule_rounds``). ``time_limit_s`` counts
    from this call, reading the file included.

    Raises `ValidationError` (every violation, with field paths) for a malformed request,
    `TypeError` for an unknown option name, `OSError` for an unreadable file. Infeasible,
    timed-out or failed solves are not errors: read `Solution.termination`.
    """
    arrived = time.monotonic()
    message = as_request(request, policy, parameters=parameters, compat=compat, **options)
    limit = message.options.time_limit_s
    deadline = Deadline(arrived + limit) if math.isfinite(limit) and limit > 0 else None
    solved = solve_request_typed(message, deadline, arrived)
    problem, typed = solved.problem, solved.policy
    if problem is None or typed is None:  # the limit ran out while it was validated
        problem, typed, _ = request_to_model(message)
    return Solution(message, solved.response, problem, typed, solved.plan)


def validate(
    request: RequestLike,
    policy: str | None = None,
    *,
    parameters: Mapping[str, Any] | None = None,
    compat: str | None = None,
    **options: Any,
) -> ValidatedRequest:
    """Validate `request` without solving (arguments as `solve`); raises `ValidationError`."""
    message = as_request(request, policy, parameters=parameters, compat=compat, **options)
    problem, policy_request, solve_options = request_to_model(message)
    return ValidatedRequest(message, problem, policy_request, solve_options)


def as_request(
    request: RequestLike,
    policy: str | None = None,
    *,
    parameters: Mapping[str, Any] | None = None,
    compat: str | None = None,
    **options: Any,
) -> service_pb.SolveRequest:
    """A new `SolveRequest` from any accepted form, with the overrides applied (the caller's
    message is never modified). Raises `ValidationError` for JSON that is not a request."""
    message = _load(request)
    if policy is not None:
        message.policy.name = policy
    if compat is not None:
        message.policy.compat = policy_pb.Compat.ValueType(
            _enum_value(policy_pb.Compat, "COMPAT_", compat, "policy.compat",
                        none_name="UNSPECIFIED")
        )
    if parameters is not None:
        _set_parameters(message, parameters)
    for name, value in options.items():
        _set_option(message, name, value)
    return message


def _load(request: RequestLike) -> service_pb.SolveRequest:
    if isinstance(request, service_pb.SolveRequest):
        copy = service_pb.SolveRequest()
        copy.CopyFrom(request)
        return copy
    if isinstance(request, snapshot_pb.Snapshot):
        message = service_pb.SolveRequest()
        message.snapshot.CopyFrom(request)
        return message
    if isinstance(request, Mapping):
        return _from_json(request, "request")
    if isinstance(request, (str, os.PathLike)):
        path = Path(request)
        text = path.read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            violation = Violation("request", f"{path}: not valid JSON: {exc}")
            raise ValidationError([violation]) from exc
        if not isinstance(data, dict):
            raise ValidationError([Violation("request", f"{path}: not a JSON object")])
        return _from_json(data, f"request ({path})")
    raise TypeError(
        "request must be a SolveRequest or Snapshot message, a dict or a file path, "
        f"got {type(request).__name__}"
    )


def _from_json(data: Mapping[str, Any], where: str) -> service_pb.SolveRequest:
    """Parse a request dict, or a snapshot dict (no request key) into a request."""
    message = service_pb.SolveRequest()
    is_request = bool(_REQUEST_KEYS & set(data)) or not data
    target = message if is_request else message.snapshot
    try:
        json_format.ParseDict(dict(data), target, ignore_unknown_fields=False)
    except json_format.ParseError as exc:
        kind = "SolveRequest" if is_request else "Snapshot"
        violation = Violation("request", f"{where}: not a valid {kind}: {exc}")
        raise ValidationError([violation]) from exc
    return message


def _set_parameters(message: service_pb.SolveRequest, parameters: Mapping[str, Any]) -> None:
    spec = lookup(message.policy.name)
    if not spec.parameters_field:
        raise ValidationError(
            [Violation("policy.parameters", f"policy {spec.name!r} takes no parameters")]
        )
    field = getattr(message.policy, spec.parameters_field)
    field.Clear()
    try:
        json_format.ParseDict(dict(parameters), field, ignore_unknown_fields=False)
    except json_format.ParseError as exc:
        path = f"policy.{spec.parameters_field}"
        raise ValidationError([Violation(path, f"not valid parameters: {exc}")]) from exc
    field.SetInParent()  # all-default parameters still select the oneof field


def _set_option(message: service_pb.SolveRequest, name: str, value: Any) -> None:
    if name not in _OPTION_FIELDS:
        raise TypeError(f"unknown option {name!r}; options are: {', '.join(_OPTION_FIELDS)}")
    if name == "solver":
        value = _enum_value(policy_pb.SolverPreference, "SOLVER_PREFERENCE_", value,
                            "options.solver", none_name="UNSPECIFIED", aliases={"auto": 0})
    setattr(message.options, name, value)


def _enum_value(
    enum: Any,
    prefix: str,
    value: Any,
    path: str,
    none_name: str,
    aliases: Mapping[str, int] | None = None,
) -> int:
    """An enum value from its number, its full name or its short lower-case name."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value)
    if aliases and text.lower() in aliases:
        return aliases[text.lower()]
    name = text.upper()
    if name == "NONE":
        name = none_name
    full = name if name.startswith(prefix) else prefix + name
    try:
        return int(enum.Value(full))
    except ValueError:
        known = ", ".join(n.removeprefix(prefix).lower() for n in enum.keys())  # noqa: SIM118
        violation = Violation(path, f"unknown value {text!r}; one of {known}")
        raise ValidationError([violation]) from None
