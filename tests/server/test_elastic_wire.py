"""The elastic section of every job's allocation, written column by column
(`elastic_inputs.elastic_job_fields` through the allocations' records), is the section the
message builder writes field by field (the reference, below), on random sections: presence of
the predictions (NaN and inf are left unset), repeated node names summed, Lyra's preempted
jobs."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations.optimus import optimus
from apportion.formulations.elastic_plan import to_plan
from apportion.server.response import plan_response
from apportion.solver.deadline import Deadline
from apportion.solver.model import PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import OptimusParameters
from apportion.solver.result import ElasticSection, Plan
from apportion.v1 import allocation_service_pb2 as service_pb
from tests.formulations.elastic_cases import elastic_problem, sync_model

POLICY = PolicyRequest("optimus", OptimusParameters())


def reference(plan: Plan, problem: Problem) -> service_pb.SolveResponse:
    """The response with the elastic section written a message field at a time, as the
    service wrote it before (the plan's other sections as `plan_response` writes them)."""
    assert plan.configurations is not None
    section = plan.configurations.elastic
    assert section is not None
    bare = replace(plan, configurations=replace(plan.configurations, elastic=None))
    response = plan_response(bare, problem, POLICY, 0.0, 0.0).message()
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


@given(sections())
def test_the_elastic_section_is_written_as_the_message_builder_writes_it(
        case: tuple[int, ElasticSection]) -> None:
    m, section = case
    problem = elastic_problem([4], [100.0] * m, models=[sync_model(0.01, 0.1, 0.0)] * m)
    plan = to_plan(problem, optimus(problem, OptimusParameters(), SolveOptions(),
                                    Deadline.never()))
    assert plan.configurations is not None
    plan = replace(plan, configurations=replace(plan.configurations, elastic=section))
    wire = plan_response(plan, problem, POLICY, 0.0, 0.0)
    expected = reference(plan, problem)
    written = service_pb.SolveResponse.FromString(wire.serialize())
    assert written == expected
    assert written.SerializeToString(deterministic=True) == expected.SerializeToString(
        deterministic=True)
    assert wire.message() == expected
