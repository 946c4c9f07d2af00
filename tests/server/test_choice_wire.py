"""`choice_wire`: every job's configuration written from columns parses to the messages a
builder setting each `ConfigurationChoice` field makes (the service's way before), for random
choices; and a configuration plan's response carries them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.server.choice_wire import CONFIGURATION_NUMBER, choice_fields
from apportion.server.pipeline import solve_request_typed
from apportion.server.wire_fields import Fields, records
from apportion.solver.result import ConfigurationChoice
from apportion.v1 import allocation_service_pb2 as service_pb
from tests.server.test_plan_wire import DOUBLES, TEXT, same
from tests.server.test_sia_requests import _example

INT32 = st.one_of(st.integers(0, 8), st.integers(-(2**31), 2**31 - 1))


@st.composite
def choices(draw: st.DrawFn) -> tuple[tuple[ConfigurationChoice | None, ...], int, list[str]]:
    names = draw(st.lists(st.sampled_from(["v100", "p100", "é", "t" * 130, ""]), min_size=1,
                          max_size=3, unique=True))
    m = draw(st.integers(0, 8))
    nodes = st.sampled_from(["n0", "n1", "", "ü" * 70])
    choice = st.builds(
        ConfigurationChoice,
        type_index=st.integers(0, len(names) - 1),
        nodes=INT32, devices=INT32, goodput=DOUBLES, normalized_goodput=DOUBLES,
        restart_factor=DOUBLES, unchanged=st.booleans(),
        node_devices=st.lists(st.tuples(nodes, st.integers(-3, 300)), max_size=4).map(tuple),
        placed=st.booleans(), placement_detail=TEXT, atomic_batch_size=INT32,
        accumulation_steps=INT32,
    )
    # the section may list fewer or more choices than jobs
    listed = draw(st.lists(st.none() | choice, min_size=max(m - 1, 0), max_size=m + 1))
    return tuple(listed), m, names


def built(section: tuple[Any, ...], m: int, names: list[str]) -> service_pb.Plan:
    """The reference: a message per job, field by field."""
    out = service_pb.Plan()
    for _ in range(m):
        out.jobs.add()
    for entry, choice in zip(out.jobs, section, strict=False):
        if choice is None:
            continue
        conf = entry.configuration
        conf.accelerator_type = names[choice.type_index]
        conf.nodes = choice.nodes
        conf.devices = choice.devices
        conf.goodput = choice.goodput
        conf.normalized_goodput = choice.normalized_goodput
        conf.restart_factor = choice.restart_factor
        conf.unchanged = choice.unchanged
        for node, devices in choice.node_devices:
            conf.node_devices[node] = conf.node_devices[node] + devices
        conf.placed = choice.placed
        conf.placement_detail = choice.placement_detail
        conf.atomic_batch_size = choice.atomic_batch_size
        conf.accumulation_steps = choice.accumulation_steps
    return out


def written(section: tuple[Any, ...], m: int, names: list[str]) -> service_pb.Plan:
    present, inner = choice_fields(section, m, names)
    jobs = Fields(m)
    jobs.message(CONFIGURATION_NUMBER, present, inner)
    return service_pb.Plan.FromString(records(service_pb.Plan.JOBS_FIELD_NUMBER, jobs))


@given(choices())
def test_configurations_written_from_columns_are_the_messages(
        case: tuple[tuple[Any, ...], int, list[str]]) -> None:
    section, m, names = case
    assert same(written(section, m, names), built(section, m, names))


def test_a_choice_at_every_default_is_still_a_message() -> None:
    names = ["", "v100"]
    nothing = ConfigurationChoice(0, 0, 0, 0.0, 0.0, 0.0, False, placed=False)
    section = (nothing, ConfigurationChoice(1, 1, 2, 3.0, 1.0, 1.0, True), None)
    plan = written(section, 3, names)
    assert [job.HasField("configuration") for job in plan.jobs] == [True, True, False]
    assert same(plan, built(section, 3, names))


@pytest.mark.parametrize("policy", ["sia", "pollux"])
def test_a_configuration_plans_response_carries_every_choice(policy: str) -> None:
    """Through the pipeline: each job's configuration in the response is its choice."""
    request = _example()
    request.policy.name = policy
    solved = solve_request_typed(request)
    assert solved.plan is not None and solved.plan.configurations is not None
    choices = solved.plan.configurations.choices
    assert any(choice is not None for choice in choices)
    names = list(solved.problem.cluster.type_names) if solved.problem else []
    expected = built(choices, len(choices), names)
    got = solved.response.plan
    assert len(got.jobs) == len(expected.jobs)
    for job, reference in zip(got.jobs, expected.jobs, strict=True):
        assert job.HasField("configuration") == reference.HasField("configuration")
        assert same(job.configuration, reference.configuration)
