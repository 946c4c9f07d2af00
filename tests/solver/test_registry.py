"""The policy registry: names, entry points, capabilities, parameter types."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

from apportion.solver.capabilities import DEFAULT_RELATIVE_GAP, PlanKind
from apportion.solver.errors import ValidationError
from apportion.solver.model import Colocations, PolicyRequest
from apportion.solver.parameters import MaxMinFairnessParameters, NoParameters
from apportion.solver.registry import (
    ROUND_SCHEDULE_ENTRY,
    PolicySpec,
    known_names,
    load_entry,
    lookup,
    policies,
    resolve_parameters,
)
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem

POLICIES = policies()


def test_names_and_aliases_are_unique() -> None:
    names = [spec.name for spec in POLICIES]
    aliases = [alias for spec in POLICIES for alias in spec.aliases]
    assert len(set(names)) == len(names)
    assert len(set(names + aliases)) == len(names) + len(aliases)
    assert known_names() == sorted(names + aliases)


@pytest.mark.parametrize("spec", POLICIES, ids=[p.name for p in POLICIES])
def test_entry_points_load_and_take_the_typed_arguments(spec: PolicySpec) -> None:
    for entry in filter(None, (spec.entry_point, spec.packed_entry_point)):
        function = load_entry(entry)
        names = list(inspect.signature(function).parameters)
        assert names[0] == "problem" and names[2:] == ["compat", "options", "deadline"], entry
    assert dataclasses.is_dataclass(spec.parameters_type)
    spec.parameters_type()  # every parameter has a default
    for alias, forced in spec.aliases.items():
        params = resolve_parameters(spec, alias, None)
        for field, value in forced.items():
            assert getattr(params, field) == value


@pytest.mark.parametrize("spec", POLICIES, ids=[p.name for p in POLICIES])
def test_capabilities_are_consistent(spec: PolicySpec) -> None:
    caps = spec.capabilities
    if caps.round_schedule:
        assert caps.plan_kind is PlanKind.TIME_SHARE
    if spec.packed_entry_point:
        assert caps.uses_colocations
        assert any(f.name == "space_sharing" for f in dataclasses.fields(spec.parameters_type))
    if caps.relative_gap is None:
        assert caps.default_relative_gap == DEFAULT_RELATIVE_GAP[caps.problem_class]
    assert 0 < caps.default_relative_gap < 1
    # the parameter message and oneof field come together
    assert bool(spec.parameters_message) == bool(spec.parameters_field)


def test_round_schedule_entry_loads() -> None:
    assert callable(load_entry(ROUND_SCHEDULE_ENTRY))


def test_unknown_and_empty_names_are_field_errors() -> None:
    with pytest.raises(ValidationError) as info:
        lookup("no_such_policy")
    assert info.value.violations[0].field == "policy.name"
    with pytest.raises(ValidationError, match="is required"):
        lookup("")


def test_solve_checks_the_parameter_type_once() -> None:
    problem = make_problem(["a"], [1], [[1.0]])
    with pytest.raises(TypeError, match="MaxMinFairnessParameters"):
        solve(problem, PolicyRequest("weighted_max_min_fairness", NoParameters()))


def test_space_sharing_dispatch_follows_parameters_and_data() -> None:
    spec = lookup("weighted_max_min_fairness")
    plain = make_problem(["a"], [2], [[1.0], [2.0]])
    packed = MaxMinFairnessParameters(space_sharing=True)
    assert spec.load(plain, packed) is load_entry(spec.entry_point)  # no pair data
    pairs = Colocations(np.array([0]), np.array([1]), np.array([[0.6]]), np.array([[1.2]]))
    shared = dataclasses.replace(plain, colocations=pairs)
    assert spec.load(shared, packed) is load_entry(spec.packed_entry_point)
    assert spec.load(shared, MaxMinFairnessParameters()) is load_entry(spec.entry_point)


def test_every_policy_lists_what_its_capabilities_say_it_reads() -> None:
    """`required_inputs` (shown by `apportion policies` and `ListPolicies`) names every input
    a capability flag says the policy reads, and the throughputs every policy reads."""
    from apportion.solver.registry import policies

    for spec in policies():
        caps, listed = spec.capabilities, " ".join(spec.required_inputs)
        expected = {
            "colocations": caps.uses_colocations or bool(spec.packed_entry_point),
            "tenant": caps.reads_tenants,
            "history.": caps.needs_history,
            "epoch_profile": caps.reads_epoch_profiles,
            "configurations": caps.reads_configurations,
            "progress": caps.needs_remaining_work,
            # stage times (Muri) and device sharing data (AntMan, IADeep) replace them
            "jobs[].throughput": not (caps.reads_stage_times or caps.reads_device_sharing),
        }
        for word, reads in expected.items():
            assert not reads or word in listed, (spec.name, word)
