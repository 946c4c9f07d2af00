"""The co-location inputs read at the wire level (`apportion.server.sharing_wire`) give the
model and the violations the message-by-message reading gives: on random requests of every
co-location policy (bad memory, utilization, scores, budgets, stage times, interference
entries with unknown, repeated or too many jobs, wrong slowdown counts, named
configurations, groups listed twice, unequal scale factors), and on bytes no serializer
writes (a field given twice, in parts, unpacked slowdowns, unknown fields); and the reading
stops at the deadline."""

from __future__ import annotations

import math
import pickle
import struct
from collections.abc import Callable
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apportion.server import sharing_inputs
from apportion.server.convert import request_to_model
from apportion.solver.deadline import DeadlineExpiredError
from apportion.solver.errors import ValidationError
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb
from tests.countdown import CountdownDeadline
from tests.server.test_sharing_inputs import base_request

POLICIES = ["synergy", "muri", "lucid", "antman", "iadeep"]
NUMBERS = st.one_of(st.sampled_from([0.0, -0.0, -1.0, 0.5, 1.0, 2.0, 30.0, math.nan, math.inf]),
                    st.floats(-1, 40))


def outcome(request: service_pb.SolveRequest, serialized: bytes, wire: bool) -> object:
    """The model (pickled) or the violations, read at the wire level or from the messages."""
    with mock.patch.object(sharing_inputs, "WIRE_FROM", 0 if wire else 10**9):
        try:
            return pickle.dumps(request_to_model(request, serialized=serialized)[0])
        except ValidationError as error:
            return [(v.field, v.description) for v in error.violations]


def assert_same(request: service_pb.SolveRequest, serialized: bytes | None = None) -> None:
    data = request.SerializeToString() if serialized is None else serialized
    assert outcome(request, data, True) == outcome(request, data, False)


@st.composite
def requests(draw: st.DrawFn) -> service_pb.SolveRequest:
    request = base_request(draw(st.sampled_from(POLICIES)), jobs=draw(st.integers(2, 6)))
    snap = request.snapshot
    ids = [job.id for job in snap.jobs] + ["nobody"]
    for job in snap.jobs:
        share = job.sharing
        share.gpu_memory_gib, share.gpu_utilization = draw(NUMBERS), draw(NUMBERS)
        if draw(st.booleans()):
            share.sharing_score = draw(st.integers(-3, 4))
        if draw(st.booleans()):
            share.slowdown_budget = draw(NUMBERS)
        if draw(st.integers(0, 4)) == 0:
            share.configurations.add(name=draw(st.sampled_from(["a", "b", ""])),
                                     relative_throughput=draw(NUMBERS))
        if draw(st.integers(0, 4)) == 0:
            job.ClearField("stage_times")
        elif draw(st.booleans()):
            job.stage_times.cpu_s = draw(NUMBERS)
        if draw(st.integers(0, 5)) == 0:
            job.job_type = "unlisted"
        if draw(st.integers(0, 5)) == 0:
            job.scale_factor = 2
    for _ in range(draw(st.integers(0, 5))):
        members = draw(st.lists(st.sampled_from(ids), min_size=0, max_size=5))
        entry = snap.interference.add(job_ids=members)
        count = len(members) if draw(st.integers(0, 4)) else draw(st.integers(0, 5))
        entry.slowdown.extend(draw(st.lists(NUMBERS, min_size=count, max_size=count)))
        if draw(st.integers(0, 5)) == 0:
            entry.configurations.extend(["a"] * len(members))
    if draw(st.integers(0, 3)) == 0:  # a group listed twice
        snap.interference.append(snap.interference[0])
    return request


@settings(max_examples=150, deadline=None)
@given(requests())
def test_wire_and_messages_agree(request: service_pb.SolveRequest) -> None:
    assert_same(request)


def _set(field: str, value: object) -> Callable[[snapshot_pb.Job], None]:
    def edit(job: snapshot_pb.Job) -> None:
        message, name = (job.sharing, field) if "." not in field else (
            getattr(job, field.split(".")[0]), field.split(".")[1])
        setattr(message, name, value)
    return edit


def _clear_stages(job: snapshot_pb.Job) -> None:
    job.ClearField("stage_times")


def _zero_stages(job: snapshot_pb.Job) -> None:
    job.stage_times.SetInParent()
    for name in ("storage_s", "cpu_s", "gpu_s", "network_s"):
        setattr(job.stage_times, name, 0.0)


JOB_EDITS = [
    *(_set("gpu_memory_gib", v) for v in (30.0, 24.0, -1.0, math.nan, math.inf, 0.0, -0.0)),
    *(_set("gpu_utilization", v) for v in (1.5, -0.1, math.nan, 1.0, 0.0)),
    *(_set("sharing_score", v) for v in (-1, 3, 0, 2)),
    *(_set("slowdown_budget", v) for v in (-1.0, math.nan, math.inf, 0.0)),
    *(_set("stage_times.cpu_s", v) for v in (-1.0, math.nan, math.inf, 0.0)),
    _clear_stages, _zero_stages,
    lambda job: setattr(job, "job_type", "unlisted"),
    lambda job: setattr(job, "scale_factor", 2),
]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("edit", range(len(JOB_EDITS)))
@pytest.mark.parametrize("job", [0, 2])
def test_each_job_rule(policy: str, edit: int, job: int) -> None:
    """One job's field changed (on a guaranteed and an opportunistic job): the same model or
    the same violations either way."""
    request = base_request(policy)
    JOB_EDITS[edit](request.snapshot.jobs[job])
    assert_same(request)


ENTRIES = [
    (["j0", "j0"], [1.1, 1.2]), (["j0", "nobody"], [1.1, 1.2]), (["j0"], [1.1]),
    (["j0", "j1", "j2", "j3", "j0"], [1.0] * 5), (["j0", "j1"], [1.1]),
    (["j0", "j1"], [0.0, 1.0]), (["j0", "j1"], [math.nan, 1.0]), (["j0", "j1"], [1.0, math.inf]),
    (["j2", "j0"], [1.5, 1.5]),  # the first entry's group again
    (["j1", "j2", "j3"], [1.1, 1.2, 1.3]), (["j3", "j1"], [1.1, 1.3]),
]


@pytest.mark.parametrize("policy", ["antman", "lucid", "iadeep"])
@pytest.mark.parametrize("entry", range(len(ENTRIES)))
@pytest.mark.parametrize("scale", [1, 2])
def test_each_entry_rule(policy: str, entry: int, scale: int) -> None:
    """One more interference entry (and job j1 of another scale factor): the same model or
    the same violations either way."""
    request = base_request(policy)
    ids, slowdown = ENTRIES[entry]
    request.snapshot.interference.add(job_ids=ids, slowdown=slowdown)
    request.snapshot.jobs[1].scale_factor = scale
    assert_same(request)


def _record(number: int, payload: bytes) -> bytes:
    """A length-delimited record of field `number`."""
    out = bytearray()
    for value in (number << 3 | 2, len(payload)):
        while value >= 0x80:
            out.append(value & 0x7F | 0x80)
            value >>= 7
        out.append(value)
    return bytes(out) + payload


def _with_job(request: service_pb.SolveRequest, job: bytes) -> bytes:
    """The request's bytes with one more job written as `job` (a second snapshot record: the
    runtime merges it, appending the job)."""
    return request.SerializeToString() + _record(1, _record(3, job))


def _with_entry(request: service_pb.SolveRequest, entry: bytes) -> bytes:
    return request.SerializeToString() + _record(1, _record(71, entry))


SHARING = 72
STAGES = 70


def _double(number: int, value: float) -> bytes:
    return bytes([number << 3 | 1]) + struct.pack("<d", value)


UNUSUAL_JOBS = [
    # sharing given twice: the runtime merges the two messages
    _record(SHARING, _double(1, 1.0)) + _record(SHARING, _double(2, 0.5)),
    # a scalar given twice inside sharing: the last one counts
    _record(SHARING, _double(1, 50.0) + _double(1, 2.0)),
    # stage times in two parts
    _record(STAGES, _double(2, 0.1)) + _record(STAGES, _double(3, 0.2)),
    # an unknown field inside sharing, and sharing_score as a varint
    _record(SHARING, _double(9, 1.0) + bytes([4 << 3, 2])),
    # a field number of sharing with another wire type
    _record(SHARING, bytes([1 << 3, 5])),
]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("extra", range(len(UNUSUAL_JOBS)))
def test_unusual_job_bytes(policy: str, extra: int) -> None:
    request = base_request(policy)
    job = (_record(1, b"jx") + bytes([2 << 3, 1]) + _record(6, _record(1, b"gpu") + _double(2, 1.0))
           + UNUSUAL_JOBS[extra])
    data = _with_job(request, job)
    assert_same(service_pb.SolveRequest.FromString(data), data)


UNUSUAL_ENTRIES = [
    _record(1, b"j0") + _record(1, b"j3") + _double(2, 1.5) + _double(2, 1.25),  # unpacked
    _record(1, b"j0") + _record(1, b"j3") + _record(2, _double(0, 1.5)[1:]) + _double(2, 2.0),
    _record(1, b"j0") + _record(1, b"j2") + _record(2, b"\x00" * 16) + _double(9, 1.0),
    _record(1, b"j1") + _record(1, b"j2") + _record(2, _double(0, 1.5)[1:] * 2)
    + _record(3, b"a") + _record(3, b"a"),  # named configurations
]


@pytest.mark.parametrize("policy", ["antman", "lucid", "iadeep"])
@pytest.mark.parametrize("extra", range(len(UNUSUAL_ENTRIES)))
def test_unusual_entry_bytes(policy: str, extra: int) -> None:
    data = _with_entry(base_request(policy), UNUSUAL_ENTRIES[extra])
    assert_same(service_pb.SolveRequest.FromString(data), data)


@pytest.mark.parametrize("policy", POLICIES)
def test_reading_stops_at_the_deadline(policy: str) -> None:
    """Between the inputs it reads, the conversion looks at the deadline: each look can end
    it (`DeadlineExpiredError`), and a deadline that does not pass changes nothing."""
    request = base_request(policy)
    data = request.SerializeToString()
    with mock.patch.object(sharing_inputs, "WIRE_FROM", 0):
        problem, resolved, _ = request_to_model(request)
        never = CountdownDeadline(checks=10**6)
        assert pickle.dumps(sharing_inputs.sharing_problem(
            request, problem, resolved, [], data, never)) == pickle.dumps(
            sharing_inputs.sharing_problem(request, problem, resolved, [], data))
        looks = never.looks[0]
        assert looks >= 2
        for checks in range(looks):
            with pytest.raises(DeadlineExpiredError):
                sharing_inputs.sharing_problem(request, problem, resolved, [], data,
                                               CountdownDeadline(checks=checks))


@pytest.mark.parametrize("wire", [True, False])
def test_a_group_twice_and_unequal_scale_factors_are_named(wire: bool) -> None:
    request = base_request("antman")
    request.snapshot.interference.add(job_ids=["j2", "j0"], slowdown=[1.5, 1.5])
    request.snapshot.jobs[1].scale_factor = 2
    found = outcome(request, request.SerializeToString(), wire)
    assert isinstance(found, list)
    assert ("snapshot.interference[2]", "group listed twice (first at [0])") in found
    assert ("snapshot.interference[1].job_ids",
            "jobs sharing devices need equal scale factors") in found
    del request.snapshot.interference[2]
    request.snapshot.jobs[1].scale_factor = 1
    problem = pickle.loads(outcome(request, request.SerializeToString(), wire))  # type: ignore[arg-type]
    assert [entry.jobs for entry in problem.sharing.interference] == [(0, 2), (1, 3)]
