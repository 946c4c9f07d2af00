"""The configuration and elastic sections of every job's allocation, written column by column
with the allocations' records (`choice_wire.configuration_fields`,
`elastic_inputs.elastic_job_fields`), are what the message builder writes field by field (the
reference, below), on random sections: jobs without a choice, default values, presence of the
predictions (NaN and inf are left unset), repeated node names summed, Lyra's preempted
jobs."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations.elastic_plan import to_plan
from apportion.formulations.optimus import optimus
from apportion.server.response import plan_response
from apportion.solver.deadline import Deadline
from apportion.solver.model import PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import OptimusParameters
from apportion.solver.result import (
    ConfigurationChoice,
    ConfigurationSection,
    ElasticSection,
    Plan,
)
from apportion.v1 import allocation_service_pb2 as service_pb
from tests.formulations.elastic_cases import elastic_problem, sync_model

POLICY = PolicyRequest("optimus", OptimusParameters())


def reference(plan: Plan, problem: Problem, policy: PolicyRequest = POLICY
              ) -> service_pb.SolveResponse:
    """The response with the elastic section written a message field at a time, as the
    service wrote it before (the plan's other sections as `plan_response` writes them)."""
    assert plan.configurations is not None
    section = plan.configurations.elastic
    bare = replace(plan, configurations=None)
    response = plan_response(bare, problem, policy, 0.0, 0.0).message()
    names = problem.cluster.type_names
    for entry, choice in zip(response.plan.jobs, plan.configurations.choices, strict=False):
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
    if section is None:
        return response
    for i, entry in enumerate(response.plan.jobs):
        out = entry.elastic
        out.workers = int(section.workers[i])
        out.parameter_servers = int(section.parameter_servers[i])
        out.base_devices = int(section.base_devices[i])
        if section.parameter_server_nodes:
            for node, devices in section.parameter_server_nodes[i]:
                out.parameter_server_nodes[node] = out.parameter_server_nodes[node] + devices
        for name in ("remaining_steps", "remaining_time_s", "loss_reduction"):
            values = getattr(section, name)
            if values is not None and math.isfinite(float(values[i])):
                setattr(out, name, float(values[i]))
        if section.preempted is not None:
            out.preempted = bool(section.preempted[i])
    return response


NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64),
                    st.sampled_from([0.0, -0.0, 1.5]))


@st.composite
def sections(draw: st.DrawFn) -> tuple[int, ElasticSection]:
    m = draw(st.integers(1, 5))
    counts = st.lists(st.integers(0, 300), min_size=m, max_size=m)
    column = st.none() | st.lists(NUMBERS, min_size=m, max_size=m)
    nodes = st.lists(st.lists(st.tuples(st.sampled_from(["n0", "n1", "é"]),
                                        st.integers(1, 200)), max_size=3).map(tuple),
                     min_size=m, max_size=m).map(tuple)
    preempted = draw(st.none() | st.lists(st.booleans(), min_size=m, max_size=m))

    def floats(values: list[float] | None) -> np.ndarray | None:
        return None if values is None else np.array(values, np.float64)

    return m, ElasticSection(
        workers=np.array(draw(counts), np.int64),
        parameter_servers=np.array(draw(counts), np.int64),
        base_devices=np.array(draw(counts), np.int64),
        parameter_server_nodes=draw(st.just(()) | nodes),
        remaining_steps=floats(draw(column)),
        remaining_time_s=floats(draw(column)),
        loss_reduction=floats(draw(column)),
        preempted=None if preempted is None else np.array(preempted, bool),
    )


NODES = st.lists(st.tuples(st.sampled_from(["n0", "n1", "é", ""]), st.integers(0, 200)),
                 max_size=3).map(tuple)
CHOICES = st.builds(
    ConfigurationChoice,
    type_index=st.integers(0, 1), nodes=st.integers(0, 3), devices=st.integers(0, 600),
    goodput=NUMBERS, normalized_goodput=NUMBERS, restart_factor=NUMBERS,
    unchanged=st.booleans(), node_devices=NODES, placed=st.booleans(),
    placement_detail=st.sampled_from(["", "no room", "ü" * 3]),
    atomic_batch_size=st.integers(0, 4096), accumulation_steps=st.integers(0, 3),
)


@given(sections(), st.data())
def test_the_sections_are_written_as_the_message_builder_writes_them(
        case: tuple[int, ElasticSection], data: st.DataObject) -> None:
    m, section = case
    problem = elastic_problem([4, 4], [100.0] * m, models=[sync_model(0.01, 0.1, 0.0)] * m)
    plan = to_plan(problem, optimus(problem, OptimusParameters(), SolveOptions(),
                                    Deadline.never()))
    choices = tuple(data.draw(st.lists(st.none() | CHOICES, min_size=m, max_size=m)))
    elastic = data.draw(st.sampled_from([section, None]))
    plan = replace(plan, configurations=ConfigurationSection(choices, elastic=elastic))
    expected = reference(plan, problem)
    raw = plan_response(plan, problem, POLICY, 0.0, 0.0).serialize()  # the kept records
    assert service_pb.SolveResponse.FromString(raw) == expected
    maps = [c.node_devices for c in choices if c is not None]
    if elastic is not None:
        maps += list(elastic.parameter_server_nodes)
    if all(len({node for node, _ in pairs}) <= 1 for pairs in maps):
        assert raw == expected.SerializeToString()  # (map entries: in any order)
    assert plan_response(plan, problem, POLICY, 0.0, 0.0).message() == expected
