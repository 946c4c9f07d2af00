"""`Snapshot.jobs` decoded from the wire (`apportion.server.job_wire`) gives what reading every
`Job` message gives: the same main columns and the same violations, in the same order, for
jobs written any way protobuf allows (fields in any order, scalars given twice (last wins),
messages given in parts (merged), unknown fields and groups, wrong wire types, overlong
varints, map entries out of order or incomplete, empty messages, huge varints); and the same
model or the same errors through `request_to_model`. `JobFields.setting` never misses a job
that sets a field."""

from __future__ import annotations

import math
import struct
from dataclasses import fields
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.server import job_inputs, wire_records
from apportion.server.convert import request_to_model
from apportion.server.job_inputs import MainColumns, read_rows
from apportion.server.job_wire import JobFields, WireJobs, all_jobs, job_bytes, job_spans
from apportion.server.snapshot_inputs import snapshot_to_problem
from apportion.solver.deadline import DeadlineExpiredError
from apportion.solver.errors import ValidationError, Violation
from apportion.solver.model import Cluster
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb
from tests.countdown import CountdownDeadline
from tests.solver.test_model import assert_same_model

VARINT, I64, LEN, START_GROUP, END_GROUP, I32 = 0, 1, 2, 3, 4, 5
TYPES = ["v100", "p100", "k80", "a100-sxm4-80gb-long-name"]
"""The cluster's types: short names sharing a length, and one over 16 bytes."""
NAMES = st.sampled_from([*TYPES, "", "h100", "v10", "v1000", "é100", "a100-sxm4-80gb-long-nam"])


def varint(value: int, overlong: int = 0) -> bytes:
    """The varint of `value` (negative: its 64-bit two's complement), with `overlong`
    needless continuation bytes (at most 10 bytes in all)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append(value & 0x7F)
        value >>= 7
        if not value:
            break
        out[-1] |= 0x80
    for _ in range(min(overlong, 10 - len(out))):
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


def record(number: int, wire_type: int, payload: bytes, overlong: int = 0) -> bytes:
    """One field record; LEN payloads get their length (overlong when asked)."""
    head = varint(number << 3 | wire_type, overlong)
    if wire_type == LEN:
        return head + varint(len(payload), overlong) + payload
    return head + payload


DOUBLES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, 1e-9, 1e12, math.nan]),
    st.integers(0, (1 << 64) - 1).map(
        lambda bits: struct.unpack("<d", bits.to_bytes(8, "little"))[0]),
)
VARINTS = st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**64 - 1),
                    st.sampled_from([0, 1, 2, 127, 128, 2**31, 2**32 + 3, -1]))
TEXT = st.one_of(st.text(max_size=12), st.sampled_from(["", "j", "job-7", "ñ", "\x00x"]))
OVERLONG = st.sampled_from([0, 0, 0, 0, 1, 3])


@st.composite
def double_record(draw: st.DrawFn, number: int) -> bytes:
    return record(number, I64, struct.pack("<d", draw(DOUBLES)), draw(OVERLONG))


@st.composite
def varint_record(draw: st.DrawFn, number: int) -> bytes:
    return record(number, VARINT, varint(draw(VARINTS), draw(OVERLONG)), draw(OVERLONG))


@st.composite
def text_record(draw: st.DrawFn, number: int) -> bytes:
    return record(number, LEN, draw(TEXT).encode(), draw(OVERLONG))


@st.composite
def entry_record(draw: st.DrawFn) -> bytes:
    """A throughput map entry: mostly as serializers write it, else out of order, a part
    missing, a key twice, an unknown field inside, overlong lengths."""
    key = record(1, LEN, draw(NAMES).encode(), draw(OVERLONG))
    value = record(2, I64, struct.pack("<d", draw(DOUBLES)))
    shape = draw(st.sampled_from(["plain"] * 6 + ["swapped", "key", "value", "empty",
                                                   "twice", "unknown", "overlong"]))
    body = {"plain": key + value, "swapped": value + key, "key": key, "value": value,
            "empty": b"", "twice": record(1, LEN, b"k80") + key + value,
            "unknown": key + value + record(3, VARINT, b"\x05"),
            "overlong": key + value}[shape]
    return record(6, LEN, body, 1 if shape == "overlong" else 0)


@st.composite
def progress_record(draw: st.DrawFn) -> bytes:
    parts = draw(st.lists(st.one_of(
        double_record(1), double_record(2), varint_record(3), varint_record(4),
        st.just(record(9, VARINT, b"\x01")),  # unknown inside
        st.just(record(1, VARINT, b"\x01")),  # a double field as a varint
    ), max_size=5))
    return record(7, LEN, b"".join(parts))


OTHER_FIELDS = st.sampled_from([
    record(10, LEN, b""),  # epoch_profile, empty
    record(11, LEN, record(1, VARINT, b"\x01")),  # elasticity.min_devices
    record(61, VARINT, b"\x01"),  # service_class
    record(61, VARINT, b"\x00"),  # service_class, the default given explicitly
    record(80, LEN, b""),  # themis_bids, empty
    record(9, LEN, b""),  # configurations: one empty entry
    record(999, VARINT, b"\x07"),  # unknown
    record(1000, LEN, b"abc"),  # unknown
    record(1001, I32, b"\x01\x02\x03\x04"),  # unknown
    record(1002, START_GROUP, b"") + record(1002, END_GROUP, b""),  # an unknown group
])
WRONG_WIRE_TYPES = st.sampled_from([
    record(1, VARINT, b"\x01"),  # id as a varint
    record(2, I64, b"\x01" * 8),  # scale_factor as a double
    record(2, LEN, b"\x05"),  # scale_factor packed
    record(3, VARINT, b"\x01"),  # priority_weight as a varint
    record(6, VARINT, b"\x01"),  # throughput as a varint
    record(7, I32, b"\x00" * 4),  # progress as fixed32
    record(50, I64, b"\x00" * 8),  # job_type as a double
])


@st.composite
def clean_job(draw: st.DrawFn) -> bytes:
    """A `Job` as serializers write it (fields in number order, each once, map entries key
    then value, distinct known keys), with any values."""
    records = [draw(text_record(1)), draw(varint_record(2)), draw(double_record(3)),
               draw(text_record(4)), draw(double_record(5))]
    records = [r for r in records if draw(st.booleans())]
    for name in draw(st.lists(st.sampled_from(TYPES), unique=True)):
        entry = record(1, LEN, name.encode()) + record(2, I64, struct.pack("<d", draw(DOUBLES)))
        records.append(record(6, LEN, entry))
    if draw(st.booleans()):
        parts = [draw(double_record(1)), draw(double_record(2)), draw(varint_record(3)),
                 draw(varint_record(4))]
        records.append(record(7, LEN, b"".join(p for p in parts if draw(st.booleans()))))
    records += [draw(r) for r in (double_record(8), double_record(13), text_record(50))
                if draw(st.booleans())]
    return b"".join(records)


@st.composite
def job_bytes_of(draw: st.DrawFn) -> bytes:
    """A `Job` as some client might write it: half of them plain, the others with any of
    the oddities protobuf allows."""
    if draw(st.booleans()):
        return draw(clean_job())
    canonical = [
        text_record(1), varint_record(2), double_record(3), text_record(4), double_record(5),
        double_record(8), double_record(13), text_record(50),
    ]
    records = [draw(r) for r in canonical if draw(st.booleans())]
    records += draw(st.lists(entry_record(), max_size=5))
    if draw(st.booleans()):
        records.append(draw(progress_record()))
    if draw(st.integers(0, 5)) == 0:
        records.append(draw(WRONG_WIRE_TYPES))
    if draw(st.integers(0, 3)) == 0:
        records.append(draw(OTHER_FIELDS))
    if draw(st.integers(0, 4)) == 0:  # a field given again: last wins, messages merge
        records.append(draw(st.one_of(*canonical, progress_record())))
    if draw(st.booleans()):
        records = draw(st.permutations(records))
    return b"".join(records)


def cluster_bytes(names: list[str]) -> bytes:
    cluster = snapshot_pb.Cluster()
    for name in names:
        cluster.accelerator_types.add(name=name, count=4)
    return cluster.SerializeToString()


@st.composite
def requests(draw: st.DrawFn) -> tuple[bytes, service_pb.SolveRequest]:
    """Serialized requests with hand-written jobs, the snapshot sometimes in two parts (which
    protobuf merges), and the request parsed."""
    names = draw(st.sampled_from([TYPES, TYPES[:3], [*TYPES[:3], "v100"], []]))
    jobs = [record(3, LEN, draw(job_bytes_of())) for _ in range(draw(st.integers(0, 12)))]
    cut = draw(st.integers(0, len(jobs)))
    parts = [record(2, LEN, cluster_bytes(names)) + b"".join(jobs[:cut]), b"".join(jobs[cut:])]
    data = b"".join(record(1, LEN, part) for part in parts if part)
    data += record(2, LEN, record(1, LEN, b"weighted_max_min_fairness"))
    return data, service_pb.SolveRequest.FromString(data)


def span_bytes(request: service_pb.SolveRequest, data: bytes | None) -> list[bytes]:
    """The bytes of every span `job_spans` gives."""
    spans = job_spans(request.snapshot, data)
    return [spans.buf.bytes[a:b].tobytes()
            for a, b in zip(spans.start.tolist(), spans.end.tolist(), strict=True)]


@given(requests())
def test_job_spans_are_the_jobs_bytes(case: tuple[bytes, service_pb.SolveRequest]) -> None:
    """Found in place or joined, the spans hold each job's bytes, in order, from the
    client's bytes and from a fresh serialization."""
    data, request = case
    assert span_bytes(request, data) == job_bytes(request.snapshot, data)
    assert span_bytes(request, None) == job_bytes(request.snapshot, None)


def snapshot_record(*parts: bytes) -> bytes:
    return record(1, LEN, b"".join(parts))


JOB_A, JOB_B = record(1, LEN, b"a") + record(2, VARINT, b"\x1a"), record(1, LEN, b"b" * 200)
"""Two jobs: the first ends with the byte of a `jobs` tag, the second's length takes two
bytes."""
POLICY = record(2, LEN, record(1, LEN, b"weighted_max_min_fairness"))
JOBS_IN_ODD_PLACES = {
    "as serializers write them": snapshot_record(record(3, LEN, JOB_A), record(3, LEN, JOB_B)),
    "a tenant between the jobs": snapshot_record(record(3, LEN, JOB_A), record(4, LEN, b""),
                                                 record(3, LEN, JOB_B)),
    "a tenant as long as a job between the jobs": snapshot_record(
        record(3, LEN, JOB_A), record(4, LEN, record(1, LEN, b"t" * (len(JOB_B) - 3))),
        record(3, LEN, JOB_B)),
    "the snapshot in two parts": snapshot_record(record(3, LEN, JOB_A))
    + snapshot_record(record(3, LEN, JOB_B)),
    "a job's length with a needless byte": snapshot_record(
        varint(3 << 3 | LEN) + varint(len(JOB_A), overlong=1) + JOB_A, record(3, LEN, JOB_B)),
    "a job's tag with a needless byte": snapshot_record(
        record(3, LEN, JOB_A), varint(3 << 3 | LEN, overlong=1) + varint(len(JOB_B)) + JOB_B),
    "jobs' number with another wire type first": snapshot_record(
        record(3, VARINT, b"\x01"), record(3, LEN, JOB_A), record(3, LEN, JOB_B)),
    "many fields before the jobs": snapshot_record(record(1, I64, b"\x00" * 8) * 70,
                                                   record(3, LEN, JOB_A), record(3, LEN, JOB_B)),
    "the request's snapshot number with another wire type": record(1, VARINT, b"\x01")
    + snapshot_record(record(3, LEN, JOB_A), record(3, LEN, JOB_B)),
    "unknown request fields, a group among them": record(9, START_GROUP, b"")
    + record(9, END_GROUP, b"") + snapshot_record(record(3, LEN, JOB_A), record(3, LEN, JOB_B)),
    "a job of one tag byte too short": snapshot_record(record(3, LEN, JOB_A), b"\x1a\x00"),
}


@pytest.mark.parametrize("name", JOBS_IN_ODD_PLACES)
@pytest.mark.parametrize("policy_first", [False, True])
def test_job_spans_of_jobs_in_odd_places(name: str, policy_first: bool) -> None:
    body = JOBS_IN_ODD_PLACES[name]
    data = POLICY + body if policy_first else body + POLICY
    request = service_pb.SolveRequest.FromString(data)
    assert span_bytes(request, data) == job_bytes(request.snapshot, data)
    assert len(request.snapshot.jobs) >= 2
    if name == "as serializers write them":  # read in place: no copy of the jobs is made
        assert job_spans(request.snapshot, data).buf.size == len(data)


def cluster_of(request: service_pb.SolveRequest) -> Cluster:
    names = tuple(t.name for t in request.snapshot.cluster.accelerator_types)
    return Cluster(type_names=names, count=np.full(len(names), 4, np.int64),
                   cost_per_hour=np.ones(len(names)))


def assert_same_columns(a: MainColumns, b: MainColumns) -> None:
    """Every column equal; floats bit for bit (NaN payloads, -0.0)."""
    for item in fields(a):
        x, y = getattr(a, item.name), getattr(b, item.name)
        if isinstance(x, list):
            assert x == y, item.name
        else:
            assert x.dtype == y.dtype and x.shape == y.shape, item.name
            assert np.array_equal(x.view(np.uint8), y.view(np.uint8)), (item.name, x, y)


def slow_and_fast(data: bytes, request: service_pb.SolveRequest
                  ) -> tuple[tuple[MainColumns, list[Violation]],
                             tuple[MainColumns, list[Violation]], WireJobs]:
    cluster = cluster_of(request)
    jobs = request.snapshot.jobs
    slow: list[Violation] = []
    fast: list[Violation] = []
    wire = WireJobs.decode(job_bytes(request.snapshot, data), cluster.type_names)
    return ((read_rows(jobs, cluster, slow), slow), (read_rows(jobs, cluster, fast, wire), fast),
            wire)


@given(requests())
def test_decoded_jobs_are_read_jobs(case: tuple[bytes, service_pb.SolveRequest]) -> None:
    data, request = case
    (slow, slow_violations), (fast, fast_violations), _ = slow_and_fast(data, request)
    assert_same_columns(slow, fast)
    assert fast_violations == slow_violations


@given(requests())
def test_serializing_again_decodes_the_same(case: tuple[bytes, service_pb.SolveRequest]) -> None:
    """The runtime's own serialization of the parsed jobs (the route without the request's
    bytes) decodes to the same columns as the bytes the client wrote."""
    data, request = case
    cluster = cluster_of(request)
    jobs = request.snapshot.jobs
    from_request = read_rows(jobs, cluster, [], WireJobs.decode(job_bytes(request.snapshot, data),
                                                                cluster.type_names))
    again = read_rows(jobs, cluster, [], WireJobs.decode(job_bytes(request.snapshot, None),
                                                         cluster.type_names))
    assert_same_columns(from_request, again)


JOB_FIELDS = list(snapshot_pb.Job.DESCRIPTOR.fields)
MAIN = ("id", "scale_factor", "priority_weight", "tenant", "arrival_time_s", "throughput",
        "progress", "deadline_s", "restart_penalty_s", "job_type")
"""The fields `WireJobs` decodes (`JobFields` covers the others)."""


def sets(job: snapshot_pb.Job, field: Any) -> bool:
    if field.is_repeated:
        return len(getattr(job, field.name)) > 0
    if field.has_presence:
        return job.HasField(field.name)
    return bool(getattr(job, field.name))


@given(requests())
def test_job_fields_never_miss_a_job(case: tuple[bytes, service_pb.SolveRequest]) -> None:
    data, request = case
    _, _, wire = slow_and_fast(data, request)
    jobs = request.snapshot.jobs
    present = JobFields(jobs, wire.others, wire.unread)
    for field in JOB_FIELDS:
        setting = {i for i, job in enumerate(jobs) if sets(job, field)}
        visited = [i for i, _ in present.setting(field.number)]
        assert visited == sorted(set(visited)), field.name
        if field.name not in MAIN:
            assert setting <= set(visited), field.name
        assert [i for i, _ in all_jobs(jobs).setting(field.number)] == list(range(len(jobs)))


def outcome(request: service_pb.SolveRequest, data: bytes | None) -> Any:
    """The model's snapshot (or the violations) `request_to_model` gives."""
    try:
        return request_to_model(request, serialized=data)[0]
    except ValidationError as error:
        return [(v.field, v.description) for v in error.violations]


@given(requests())
def test_request_to_model_is_the_same_on_every_route(
    case: tuple[bytes, service_pb.SolveRequest]
) -> None:
    """From the client's bytes, from a fresh serialization, and reading every message (the
    route for few jobs): the same model, or the same violations."""
    data, request = case
    with mock.patch.object(job_inputs, "DECODE_FROM_JOBS", 1):
        routes = [outcome(request, data), outcome(request, None)]
    routes.append(outcome(request, data))  # few jobs: the messages are read
    for other in routes[1:]:
        if isinstance(routes[0], list) or isinstance(other, list):
            assert routes[0] == other
        else:
            assert_same_model(routes[0], other)


def request_with(jobs: list[bytes], names: list[str] = TYPES
                 ) -> tuple[bytes, service_pb.SolveRequest]:
    data = record(1, LEN, record(2, LEN, cluster_bytes(names))
                  + b"".join(record(3, LEN, job) for job in jobs))
    return data, service_pb.SolveRequest.FromString(data)


def entry(key: str, value: float, tail: bytes = b"") -> bytes:
    return record(6, LEN, record(1, LEN, key.encode()) + record(2, I64, struct.pack("<d", value))
                  + tail)


def progress(*parts: bytes) -> bytes:
    return record(7, LEN, b"".join(parts))


def double(number: int, value: float) -> bytes:
    return record(number, I64, struct.pack("<d", value))


ODD_JOBS = {
    "progress in two parts": [progress(double(1, 5.0)) + progress(double(2, 9.0))],
    "progress field twice": [progress(double(2, 5.0), double(2, 7.0))],
    "an entry with an unknown field": [entry("v100", 2.0, record(3, VARINT, b"\x05"))],
    "an entry with a 2-byte length": [record(6, LEN, record(1, LEN, b"k80")
                                             + double(2, 1.0), overlong=1)],
    "a type twice": [entry("v100", 1.0) + entry("p100", 3.0) + entry("v100", 2.0)],
    "ids missing and twice": [record(1, LEN, b"a"), b"", record(1, LEN, b"b") * 2,
                              record(1, LEN, b"c")],
    "tenants missing and twice": [record(4, LEN, b"t") * 2, b"", record(4, LEN, b"u")],
    "id as a varint": [record(1, VARINT, b"\x01"), record(1, LEN, b"b")],
    "more records than walked": [record(999, VARINT, b"\x01") * 70 + record(10, LEN, b"")
                                 + record(1, LEN, b"late"), record(1, LEN, b"x")],
    "a second id past the records walked": [record(1, LEN, b"a") + record(999, VARINT, b"\x01")
                                            * 70 + record(1, LEN, b"b"), record(1, LEN, b"c")],
    "progress of five records": [progress(double(1, 1.0), double(2, 2.0),
                                          record(3, VARINT, b"\x01"),
                                          record(4, VARINT, b"\x02"), double(1, 3.0))],
    "a group holding an id": [record(1002, START_GROUP, b"") + record(1, LEN, b"inner")
                              + record(1002, END_GROUP, b""), record(1, LEN, b"x")],
    "scale factor of 10 bytes and overlong": [record(2, VARINT, varint(-7)),
                                              record(2, VARINT, varint(5, overlong=4)),
                                              record(2, VARINT, varint(2**40 + 3))],
    "long tags": [record(50, LEN, b"type") + record(13, I64, b"\x00" * 8),
                  record(13, I64, b"\x00" * 7 + b"\x80")],
}


@pytest.mark.parametrize("name", ODD_JOBS)
def test_odd_jobs(name: str) -> None:
    data, request = request_with(ODD_JOBS[name])
    (slow, slow_violations), (fast, fast_violations), wire = slow_and_fast(data, request)
    assert_same_columns(slow, fast)
    assert fast_violations == slow_violations
    jobs = request.snapshot.jobs
    present = JobFields(jobs, wire.others, wire.unread)
    for field in JOB_FIELDS:
        if field.name not in MAIN:
            setting = {i for i, job in enumerate(jobs) if sets(job, field)}
            assert setting <= {i for i, _ in present.setting(field.number)}, field.name


def test_jobs_the_decoder_reads() -> None:
    """Jobs written as serializers write them are all decoded (none left to the messages);
    the adversarial ones above test the rest."""
    request = service_pb.SolveRequest()
    for name in TYPES:
        request.snapshot.cluster.accelerator_types.add(name=name, count=4)
    for k in range(300):
        job = request.snapshot.jobs.add(id=f"job-{k}", scale_factor=k % 4 + 1,
                                        tenant="t" if k % 3 else "", job_type="x" * (k % 200))
        job.throughput.update({name: float(k + j) for j, name in enumerate(TYPES) if (k + j) % 3})
        job.progress.total_steps = 1000.0 + k
        if k % 5 == 0:
            job.priority_weight = 0.0  # an explicit default, kept
            job.deadline_s = 5.0
    data = request.SerializeToString()
    wire = WireJobs.decode(job_bytes(request.snapshot, data), TYPES)
    assert wire.unread.size == 0
    (slow, _), (fast, _), _ = slow_and_fast(data, request)
    assert_same_columns(slow, fast)


def test_bytes_of_another_request_are_not_decoded() -> None:
    """Bytes holding another number of jobs than the message are not taken for its jobs."""
    _, request = request_with([record(1, LEN, f"j{k}".encode()) + entry("k80", 1.0)
                               for k in range(3)])
    _, other = request_with([record(1, LEN, b"x") + entry("k80", 1.0)] * 2)
    with mock.patch.object(job_inputs, "DECODE_FROM_JOBS", 1):
        problem, _, _ = snapshot_to_problem(request.snapshot, [],
                                         serialized=other.SerializeToString())
    assert problem.jobs.ids == ("j0", "j1", "j2")


def test_decoding_reads_the_deadline_between_blocks_of_jobs() -> None:
    """Three jobs in blocks of one: the deadline is read before the second and the third."""
    jobs = [record(1, LEN, f"j{k}".encode()) for k in range(3)]
    with mock.patch.object(wire_records, "WALK_BLOCK", 1):
        for checks in range(2):
            with pytest.raises(DeadlineExpiredError):
                WireJobs.decode(jobs, ["v100"], CountdownDeadline(checks=checks))
        assert WireJobs.decode(jobs, ["v100"], CountdownDeadline(checks=2)).text["id"] == [
            "j0", "j1", "j2"]
