"""Plans written as bytes (`apportion.server.plan_wire`, `response.WireResponse`) parse to the
messages the runtime builds: the core of every `JobAllocation` as a message-by-message builder
writes it, on random plans (unicode ids and type names, long strings, every status, shares
that are zero, negative, NaN or infinite, doubles of any bit pattern, -0.0); and for every
policy's plan, the serialized response parses to the response message."""

from __future__ import annotations

import math
import struct
from typing import Any
from unittest import mock

import numpy as np
import pytest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st

from apportion.server import response
from apportion.server.pipeline import solve_request_typed
from apportion.server.plan_wire import job_allocations
from apportion.server.response import WireResponse
from apportion.solver.errors import ValidationError
from apportion.solver.result import JobStatus
from apportion.v1 import allocation_service_pb2 as service_pb
from tests.server.fuzz_requests import every_base

CORE = ("job_id", "status", "reason", "time_share", "effective_throughput",
        "normalized_throughput", "objective_value", "dual", "cumulative_isolated_time_s",
        "isolated_throughput", "remaining_steps", "slo_shortfall")
"""The `JobAllocation` fields `job_allocations` writes."""


STATE = ("cumulative_isolated_time_s", "isolated_throughput", "remaining_steps",
         "slo_shortfall")
"""The optional doubles `job_allocations` writes (NaN = unset)."""


def built(ids: list[str], status: list[int], reasons: list[str], time_share: np.ndarray,
          names: list[str], doubles: list[np.ndarray],
          state: dict[str, np.ndarray] | None = None) -> service_pb.Plan:
    """The allocations built message by message (the runtime's serialization is the
    reference)."""
    plan = service_pb.Plan()
    for i, job_id in enumerate(ids):
        entry = plan.jobs.add(job_id=job_id, status=status[i], reason=reasons[i],
                              effective_throughput=doubles[0][i],
                              normalized_throughput=doubles[1][i],
                              objective_value=doubles[2][i], dual=doubles[3][i])
        for j, name in enumerate(names):
            if time_share[i, j] > 0:
                entry.time_share[name] = float(time_share[i, j])
        for name, values in (state or {}).items():
            if not math.isnan(values[i]):
                setattr(entry, name, float(values[i]))
    return plan


def numbered(state: dict[str, np.ndarray]) -> list[tuple[int, np.ndarray]]:
    return [(service_pb.JobAllocation.DESCRIPTOR.fields_by_name[name].number, values)
            for name, values in state.items()]


def same(a: Any, b: Any) -> bool:
    """Equal messages: the same deterministic serialization (floats bit for bit)."""
    return bool(a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True))


BITS = st.integers(0, (1 << 64) - 1).map(
    lambda bits: struct.unpack("<d", bits.to_bytes(8, "little"))[0])
DOUBLES = st.one_of(st.floats(), st.sampled_from([0.0, -0.0, math.nan, math.inf, 5e-324]), BITS)
SHARES = st.one_of(st.floats(0, 1), st.sampled_from([0.0, -0.0, -1.0, math.nan, math.inf]))
TEXT = st.one_of(st.text(max_size=8), st.just(""), st.text(min_size=130, max_size=140),
                 st.sampled_from(["job-1", "ü", "日本"]))


@st.composite
def plans(draw: st.DrawFn) -> tuple[Any, ...]:
    m = draw(st.integers(0, 12))
    names = draw(st.lists(st.one_of(st.sampled_from(["v100", "k80", "é", "t" * 130]),
                                    st.text(max_size=6)), max_size=4, unique=True))
    ids = draw(st.lists(TEXT, min_size=m, max_size=m))
    status = draw(st.lists(st.integers(0, 4), min_size=m, max_size=m))
    reasons = draw(st.lists(st.one_of(st.just(""), TEXT), min_size=m, max_size=m))
    share = np.array(draw(st.lists(SHARES, min_size=m * len(names), max_size=m * len(names))),
                     np.float64).reshape(m, len(names))
    doubles = [np.array(draw(st.lists(DOUBLES, min_size=m, max_size=m)), np.float64)
               for _ in range(4)]
    kept = draw(st.lists(st.sampled_from(STATE), unique=True).map(
        lambda names: [name for name in STATE if name in names]))  # in field order
    state = {name: np.array(draw(st.lists(st.one_of(DOUBLES, st.just(math.nan)), min_size=m,
                                          max_size=m)), np.float64) for name in kept}
    return ids, status, reasons, share, names, doubles, state


@given(plans())
def test_allocations_are_the_messages(plan: tuple[Any, ...]) -> None:
    ids, status, reasons, share, names, doubles, state = plan
    data = job_allocations(ids, np.array(status, np.int32), reasons, share, names, doubles,
                           numbered(state))
    expected = built(ids, status, reasons, share, names, doubles, state)
    assert same(service_pb.Plan.FromString(data), expected)
    assert len(data) == expected.ByteSize()


def test_long_and_unicode_strings() -> None:
    """Ids, reasons and type names whose lengths need two-byte varints, and characters of
    two to four bytes."""
    names = ["t" * 130, "v100", "日本" * 30]
    ids = ["j" * 200, "ü", "", "😀" * 40]
    reasons = ["", "r" * 300, "é", ""]
    share = np.array([[0.5, 0.0, 0.25], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, -1.0, 0.1]])
    doubles = [np.array([1.0, -0.0, math.nan, 2.5])] * 4
    status = [1, 2, 3, 4]
    data = job_allocations(ids, np.array(status), reasons, share, names, doubles)
    assert same(service_pb.Plan.FromString(data), built(ids, status, reasons, share, names,
                                                        doubles))


@pytest.mark.parametrize("status", [0, 1])
def test_jobs_with_little_after_the_id(status: int) -> None:
    """Jobs whose record ends at or just after the id (nothing else, or a status), next to
    jobs with more."""
    ids = ["first-job-id", "j", "a-longer-job-id-of-some-bytes", "x" * 17, "last"]
    share = np.zeros((5, 1))
    share[2, 0] = 0.5
    doubles = [np.array([0.0, 0.0, 1.0, 0.0, 0.0])] + [np.zeros(5)] * 3
    statuses = [status] * 5
    data = job_allocations(ids, np.array(statuses), [""] * 5, share, ["v100"], doubles)
    assert same(service_pb.Plan.FromString(data),
                built(ids, statuses, [""] * 5, share, ["v100"], doubles))


def core(response: service_pb.SolveResponse) -> service_pb.Plan:
    """The plan's allocations with only the fields `job_allocations` writes."""
    plan = service_pb.Plan()
    for entry in response.plan.jobs:
        kept = plan.jobs.add()
        for name in CORE:
            if name == "time_share":
                kept.time_share.update(entry.time_share)
            elif entry.HasField(name) if name in STATE else True:
                setattr(kept, name, getattr(entry, name))
    return plan


BASES = every_base()


@pytest.mark.parametrize(("label", "base"), BASES, ids=[label for label, _ in BASES])
def test_serialized_responses_are_the_messages(label: str, base: dict[str, Any]) -> None:
    """For every policy's plan: the bytes the service sends parse to the response message,
    whose allocations are those the message builder makes from the plan."""
    request = json_format.ParseDict(base, service_pb.SolveRequest())
    serialized = request.SerializeToString()
    try:
        solved = solve_request_typed(request, serialized=serialized)
    except ValidationError:
        return  # an invalid example
    data = solved.wire.serialize()
    message = solved.response
    assert same(service_pb.SolveResponse.FromString(data), message)
    assert solved.wire.serialize() == message.SerializeToString()  # once parsed in
    plan, problem, policy = solved.plan, solved.problem, solved.policy
    if plan is None or problem is None or policy is None or not message.plan.jobs:
        return
    columnar = request.options.columnar_plan
    with mock.patch.object(response, "_core_only", lambda plan: False):  # nothing kept aside
        merged = response.plan_response(plan, problem, policy, 0.0, 0.0, columnar).message()
    kept = response.plan_response(plan, problem, policy, 0.0, 0.0, columnar)
    assert same(service_pb.SolveResponse.FromString(kept.serialize()), merged)
    m = problem.jobs.num_jobs
    reference = built(
        list(problem.jobs.ids),
        [service_pb.JobStatus.Value(f"JOB_STATUS_{status.name}")
         for status in plan.job_status or (JobStatus.ALLOCATED,) * m],
        list(plan.job_reason or ("",) * m), plan.time_share, list(problem.cluster.type_names),
        [plan.effective_throughput, plan.normalized_throughput, plan.objective_value,
         plan.job_dual],
        {name: getattr(plan.shares, name) for name in STATE
         if getattr(plan.shares, name) is not None})
    assert same(core(message), reference)


def test_a_response_without_kept_allocations_is_the_message() -> None:
    message = service_pb.SolveResponse()
    message.stats.detail = "x"
    wire = WireResponse(message)
    assert wire.serialize() == message.SerializeToString()
    assert wire.message() is message


def test_kept_records_go_between_the_plans_fields() -> None:
    """Allocations and device queues kept as bytes are written in field-number order among
    the plan's own fields (before, between and after them)."""
    kept = service_pb.Plan()
    kept.jobs.add(job_id="a", dual=1.5)
    kept.jobs.add(job_id="b")
    kept.device_queues.add(accelerator_type="v100", device=1, job_ids=["a"])
    message = service_pb.SolveResponse()
    message.stats.detail = "x"
    message.plan.accelerator_prices["v100"] = 2.0
    message.plan.rounds.add(index=3)
    message.plan.placement.placer = "exact"
    jobs = b"".join(service_pb.Plan(jobs=[job]).SerializeToString() for job in kept.jobs)
    queues = service_pb.Plan(device_queues=kept.device_queues).SerializeToString()
    wire = WireResponse(message, jobs, queues)
    data = wire.serialize()
    assert data == wire.message().SerializeToString()
    assert list(wire.message().plan.jobs) == list(kept.jobs)
    assert list(wire.message().plan.device_queues) == list(kept.device_queues)
