"""The conversion side reads what a policy needs from the registry (capabilities and its input
check), never from lists of policy names."""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path

import pytest
from google.protobuf import json_format

from apportion.server import policy_inputs
from apportion.server.convert import capability_violations, request_to_model
from apportion.server.request_context import RequestContext
from apportion.solver.registry import known_names, lookup, policies
from apportion.solver.validation import JobPaths
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import policy_pb2 as policy_pb

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def test_every_parameter_message_has_a_converter_of_the_policy_parameter_type() -> None:
    oneof = policy_pb.Policy.DESCRIPTOR.oneofs_by_name["parameters"]
    messages = {field.message_type.full_name for field in oneof.fields}
    assert set(policy_inputs.PARAMETERS) == messages
    for spec in policies():
        if spec.parameters_message:
            converter = policy_inputs.PARAMETERS[spec.parameters_message]
            message = getattr(policy_pb, spec.parameters_message.rsplit(".", 1)[1])()
            assert isinstance(converter(message, []), spec.parameters_type)


@pytest.mark.parametrize("spec", policies(), ids=lambda spec: spec.name)
def test_input_checks_load_from_the_wire_side(spec: object) -> None:
    check = lookup(spec.name).load_input_check()
    if check is not None:
        assert check.__module__.startswith("apportion.server.")


def test_no_policy_names_in_the_conversion_code() -> None:
    """No string literal of the conversion modules is a registered policy name or alias (field
    names asked of a message, `HasField("pollux")`, are not policy names)."""
    names = set(known_names())
    for path in sorted((ROOT / "server").glob("*.py")):
        if not (path.name.endswith("_inputs.py") or path.name in ("convert.py", "response.py")):
            continue
        tree = ast.parse(path.read_text())
        fields = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call)
                  and isinstance(node.func, ast.Attribute) and node.func.attr == "HasField"
                  for arg in node.args}
        literals = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                    and isinstance(node.value, str) and id(node) not in fields}
        assert not literals & names, (path.name, literals & names)


def _context(name: str, data: dict[str, object]) -> RequestContext:
    request = json_format.ParseDict(data, service_pb.SolveRequest())
    problem, policy, options = request_to_model(request)
    return RequestContext(problem, policy, lookup(name), options, request,
                          JobPaths(len(request.snapshot.jobs)))


def test_capabilities_decide_which_inputs_are_required() -> None:
    data = json.loads((EXAMPLES / "tenants_and_sharing.json").read_text())
    data["snapshot"]["jobs"][4]["tenant"] = "unlisted"
    data["policy"] = {"name": "weighted_max_min_fairness"}  # does not read tenants: valid
    context = _context("weighted_max_min_fairness", data)
    assert capability_violations(context, []) == []
    caps = context.spec.capabilities
    reading = replace(context, spec=replace(context.spec, capabilities=replace(
        caps, reads_tenants=True, needs_remaining_work=True)))
    got = {v.field for v in capability_violations(reading, [])}
    assert "snapshot.jobs[4].tenant" in got  # now the tenant must be listed
    assert {f"snapshot.jobs[{i}].progress.total_steps" for i in range(5)} <= got
