"""The co-location inputs of every job, and the measured group interference, read at the wire
level as numpy columns.

Reading a job's `sharing` or `stage_times` message field by field costs 3-5 µs in Python, an
`interference` entry 6-20 µs: 100,000 jobs and 47,000 pairs cost 1-1.5 s. Their serialized
bytes hold the same values: `read_sharing_wire` parses the request into a message type whose
jobs declare only these three fields (the runtime drops the others), serializes that again
and keeps each job and each interference entry as bytes, walks the jobs' few records in
lockstep (`apportion.server.wire_records`), then the records inside their `stage_times` and
`sharing` fields and inside the entries, and gathers the doubles and varints with array
operations.

Records are read as the runtime reads them, or not at all: a job or entry whose records the
walk cannot follow, or that gives one of these fields twice (the runtime merges messages, and
keeps the last scalar), a field number of these messages with another wire type, an unknown
field inside them, `sharing.configurations` or `interference[].configurations` (read with the
configurations' names), or more records than expected is listed as unread, for the caller to
read from its message where violations get their field paths.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf import descriptor_pb2
from google.protobuf.message import Message
from numpy.typing import NDArray

from apportion.server.packed_fields import message_classes
from apportion.server.wire_records import (
    I64,
    LEN,
    PADDING,
    VARINT,
    Ints,
    Records,
    WireBuffer,
    collection_paused,
    copy_ranges,
    doubles_at,
    int32_of,
    records,
)
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

Floats = NDArray[np.float64]
Mask = NDArray[np.bool_]

_JOB = snapshot_pb.Job
_SHARING = snapshot_pb.DeviceSharing
_STAGES = snapshot_pb.StageTimes
_ENTRY = snapshot_pb.GroupInterference
STAGE_FIELDS = ("storage_s", "cpu_s", "gpu_s", "network_s")
_JOB_FIELDS = (_JOB.STAGE_TIMES_FIELD_NUMBER, _JOB.RESOURCE_PROFILE_FIELD_NUMBER,
               _JOB.SHARING_FIELD_NUMBER)
MAX_JOB_RECORDS = 64
"""A job with more records is read from its message."""
MAX_ENTRY_RECORDS = 12
"""An interference entry with more records (4 ids, 4 unpacked slowdowns, 4 names) is read
from its message."""


@functools.cache
def _shadow_types() -> tuple[type[Message], type[Message]]:
    """Message types reading the request more cheaply: a `SolveRequest` whose jobs declare
    only their `stage_times`, `resource_profile` and `sharing` fields, as repeated bytes (the
    others are unknown fields, dropped before it is serialized again), and a `Snapshot` with
    every job and every interference entry as bytes."""
    file = descriptor_pb2.FileDescriptorProto(
        name="apportion_sharing_wire/shadow.proto", package="apportion_sharing_wire",
        syntax="proto3")
    kind = descriptor_pb2.FieldDescriptorProto
    job = file.message_type.add(name="Job")
    for number in _JOB_FIELDS:
        job.field.add(name=f"field_{number}", number=number, label=kind.LABEL_REPEATED,
                      type=kind.TYPE_BYTES)
    for name, typed in (("CompactSnapshot", True), ("Snapshot", False)):
        snapshot = file.message_type.add(name=name)
        snapshot.field.add(name="jobs", number=snapshot_pb.Snapshot.JOBS_FIELD_NUMBER,
                           label=kind.LABEL_REPEATED,
                           **({"type": kind.TYPE_MESSAGE,
                               "type_name": ".apportion_sharing_wire.Job"} if typed
                              else {"type": kind.TYPE_BYTES}))
        snapshot.field.add(name="interference",
                           number=snapshot_pb.Snapshot.INTERFERENCE_FIELD_NUMBER,
                           label=kind.LABEL_REPEATED, type=kind.TYPE_BYTES)
    request = file.message_type.add(name="SolveRequest")
    request.field.add(name="snapshot", number=service_pb.SolveRequest.SNAPSHOT_FIELD_NUMBER,
                      type=kind.TYPE_MESSAGE,
                      type_name=".apportion_sharing_wire.CompactSnapshot")
    return message_classes(file, ("SolveRequest", "Snapshot"))  # type: ignore[return-value]


@dataclass(frozen=True)
class JobSharingWire:
    """Per job (of `Snapshot.jobs`), what its `stage_times`, `resource_profile` and `sharing`
    fields hold; values of unread jobs (`unread`) and absent fields are 0."""

    unread: Mask
    stage_given: Mask
    stage_s: Floats
    """(m, 4) in `STAGE_FIELDS` order."""
    profile_given: Mask
    """The job gives its own `resource_profile`."""
    gpu_memory_gib: Floats
    gpu_utilization: Floats
    budget_given: Mask
    slowdown_budget: Floats
    score_given: Mask
    sharing_score: Ints
    """As int32 fields read varints."""


@dataclass(frozen=True)
class InterferenceWire:
    """Per `Snapshot.interference` entry (read ones: not `unread`): its job ids and
    slowdowns, in order."""

    unread: Mask
    id_count: Ints
    ids: list[str]
    """Every read entry's job ids, entry after entry."""
    slowdown_count: Ints
    slowdown: Floats
    """Every read entry's slowdowns, entry after entry."""


def read_sharing_wire(request: service_pb.SolveRequest, serialized: bytes | None,
                      deadline: Deadline = NO_DEADLINE
                      ) -> tuple[JobSharingWire, InterferenceWire]:
    """The jobs' co-location fields and the interference entries of `request` (from
    `serialized`, the bytes it was parsed from, when given; else from its serialization).
    Raises `DeadlineExpiredError` once `deadline` passes (checked between the parts)."""
    data = serialized if serialized is not None else request.SerializeToString()
    request_type, snapshot_type = _shadow_types()
    compact = request_type.FromString(data).snapshot  # type: ignore[attr-defined]
    compact.DiscardUnknownFields()  # each job: only its records of _JOB_FIELDS
    snapshot = snapshot_type.FromString(compact.SerializeToString())
    with collection_paused():
        jobs = list(snapshot.jobs)  # type: ignore[attr-defined]
        entries = list(snapshot.interference)  # type: ignore[attr-defined]
    if len(jobs) != len(request.snapshot.jobs) or len(entries) != len(
            request.snapshot.interference):  # bytes of another request
        jobs = [job.SerializeToString() for job in request.snapshot.jobs]
        entries = [entry.SerializeToString() for entry in request.snapshot.interference]
    deadline.check()
    read_jobs = _jobs(jobs)
    deadline.check()
    return read_jobs, _entries(entries)


def _spans(messages: list[bytes]) -> tuple[WireBuffer, Ints, Ints]:
    length = np.fromiter(map(len, messages), np.int64, len(messages))
    end = np.cumsum(length)
    return WireBuffer(b"".join([*messages, PADDING])), end - length, end


def _last(fields: Records, tag: int, count: int, unread: Mask) -> tuple[Mask, Ints, Ints]:
    """Per message, whether it has a record `tag`, and its value's start and end (a message
    with two: marked in `unread`)."""
    pick = fields.tag == tag
    owner = fields.owner[pick]
    seen = np.bincount(owner, minlength=count)
    unread[seen > 1] = True
    start = np.zeros(count, np.int64)
    end = np.zeros(count, np.int64)
    start[owner], end[owner] = fields.start[pick], fields.end[pick]
    return seen > 0, start, end


def _jobs(messages: list[bytes]) -> JobSharingWire:
    m = len(messages)
    buf, start, end = _spans(messages)
    unread = np.zeros(m, bool)
    fields = records(buf, start, end, MAX_JOB_RECORDS, unread)
    number = fields.tag >> 3
    other_type = np.isin(number, _JOB_FIELDS) & (fields.tag & 7 != LEN)
    unread[fields.owner[other_type]] = True
    stage_given, stage_start, stage_end = _last(
        fields, _JOB.STAGE_TIMES_FIELD_NUMBER << 3 | LEN, m, unread)
    profile_given, _, _ = _last(fields, _JOB.RESOURCE_PROFILE_FIELD_NUMBER << 3 | LEN, m,
                                unread)
    shared, share_start, share_end = _last(fields, _JOB.SHARING_FIELD_NUMBER << 3 | LEN, m,
                                           unread)
    stage_tags = [_STAGES.DESCRIPTOR.fields_by_name[name].number << 3 | I64
                  for name in STAGE_FIELDS]
    stages = _scalars(buf, np.flatnonzero(stage_given), stage_start, stage_end,
                      stage_tags, m, unread)
    sharing_tags = [
        _SHARING.GPU_MEMORY_GIB_FIELD_NUMBER << 3 | I64,
        _SHARING.GPU_UTILIZATION_FIELD_NUMBER << 3 | I64,
        _SHARING.SLOWDOWN_BUDGET_FIELD_NUMBER << 3 | I64,
        _SHARING.SHARING_SCORE_FIELD_NUMBER << 3 | VARINT,
    ]
    share = _scalars(buf, np.flatnonzero(shared), share_start, share_end, sharing_tags, m,
                     unread)
    (memory, _), (utilization, _), (budget, budget_given), (score, score_given) = share
    return JobSharingWire(
        unread=unread,
        stage_given=stage_given,
        stage_s=np.column_stack([values for values, _ in stages]),
        profile_given=profile_given,
        gpu_memory_gib=memory,
        gpu_utilization=utilization,
        budget_given=budget_given,
        slowdown_budget=budget,
        score_given=score_given,
        sharing_score=int32_of(score),
    )


def _scalars(buf: WireBuffer, jobs: Ints, start: Ints, end: Ints, tags: list[int], m: int,
             unread: Mask) -> list[tuple[NDArray[Any], Mask]]:
    """Per tag (a double: float64 values; a varint: its 64 bits as int64), each job's value
    and whether it is given, from the messages buf[start[j]:end[j]] of `jobs`. Jobs with
    another record, or a tag twice, are marked in `unread`."""
    malformed = np.zeros(jobs.size, bool)
    fields = records(buf, start[jobs], end[jobs], len(tags), malformed)
    unread[jobs[malformed]] = True
    known = np.isin(fields.tag, tags)
    unread[jobs[fields.owner[~known]]] = True
    out = []
    for tag in tags:
        pick = fields.tag == tag
        owner = fields.owner[pick]
        unread[jobs[owner[np.bincount(owner, minlength=jobs.size)[owner] > 1]]] = True
        given = np.zeros(m, bool)
        values: NDArray[Any]
        if tag & 7 == I64:
            values = np.zeros(m)
            values[jobs[owner]] = doubles_at(buf, fields.start[pick])
        else:
            values = np.zeros(m, np.int64)
            values[jobs[owner]] = fields.varint[pick]
        given[jobs[owner]] = True
        out.append((values, given))
    return out


def _entries(messages: list[bytes]) -> InterferenceWire:
    count = len(messages)
    buf, start, end = _spans(messages)
    unread = np.zeros(count, bool)
    fields = records(buf, start, end, MAX_ENTRY_RECORDS, unread)
    id_tag = _ENTRY.JOB_IDS_FIELD_NUMBER << 3 | LEN
    packed = _ENTRY.SLOWDOWN_FIELD_NUMBER << 3 | LEN
    unpacked = _ENTRY.SLOWDOWN_FIELD_NUMBER << 3 | I64
    known = np.isin(fields.tag, [id_tag, packed, unpacked])
    unread[fields.owner[~known]] = True  # configurations, unknown fields
    is_packed = fields.tag == packed
    packs = np.bincount(fields.owner[is_packed], minlength=count)
    mixed = (packs > 1) | ((packs == 1) & (np.bincount(fields.owner[fields.tag == unpacked],
                                                          minlength=count) > 0))
    ragged = np.zeros(count, bool)
    ragged[fields.owner[is_packed & ((fields.end - fields.start) % 8 != 0)]] = True
    unread |= mixed | ragged
    keep = np.flatnonzero(~unread[fields.owner])
    fields = fields.select(keep[np.argsort(fields.owner[keep], kind="stable")])  # by entry
    is_id = fields.tag == id_tag
    id_count = np.bincount(fields.owner[is_id], minlength=count)
    ids = _texts(buf, fields.start[is_id], fields.end[is_id] - fields.start[is_id])
    value = fields.tag != id_tag
    size = np.where(fields.tag == packed, (fields.end - fields.start) // 8, 1)[value]
    first = np.repeat(fields.start[value], size)
    offset = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)
    slowdown = doubles_at(buf, first + 8 * offset)
    slowdown_count = np.bincount(fields.owner[value], weights=size, minlength=count)
    return InterferenceWire(unread, id_count, ids, slowdown_count.astype(np.int64), slowdown)


def _texts(buf: WireBuffer, start: Ints, length: Ints) -> list[str]:
    """The strings buf[start[k]:start[k] + length[k]] (UTF-8, as the runtime checked when it
    parsed the request): decoded at once, joined by NUL characters, when none holds one."""
    joined = np.zeros(int(length.sum()) + max(length.size - 1, 0), np.uint8)
    at = np.cumsum(length + 1) - (length + 1)
    copy_ranges(joined, at, buf.bytes, start, length)
    texts = joined.tobytes().decode().split("\0") if length.size else []
    if len(texts) == length.size:
        return texts
    data = buf.bytes
    return [data[a:a + n].tobytes().decode() for a, n in zip(start.tolist(), length.tolist(),
                                                           strict=True)]
