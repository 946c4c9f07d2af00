"""`Snapshot.jobs` read at the wire level: the main fields of every `Job` as numpy columns.

Reading a `Job` message field by field costs about 5 µs in Python; 100,000 jobs cost half a
second. Their serialized bytes hold the same values: `WireJobs.decode` walks the records of
all jobs in lockstep (`apportion.server.wire_records`), then gathers each field's values with
array operations: doubles as 8-byte views, varints decoded as int32 fields are (low 32 bits),
strings through a message type of one repeated string field (the runtime makes the Python
strings), throughput map entries matched to the cluster's type names by a hash checked
byte for byte.

A job is decoded only when every record of its main fields is plain: the declared wire type,
a scalar given once, a `progress` given once with known fields each given once, map entries
of exactly one key and one value naming a type of the cluster, each type once. Any other job
(unknown map keys, repeated scalars, which the runtime resolves as last-wins, unknown fields
inside the main fields, malformed records) is listed in `unread`, for the caller to read
from its message, where the runtime has applied protobuf's rules and the violations get
their field paths; records of the job's other fields (and unknown fields) are not read here,
only noted (`may_set`), so that the modules reading them visit only the jobs that carry them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message
from numpy.typing import NDArray

from apportion.server.wire_records import (
    I64,
    LEN,
    VARINT,
    Ints,
    Records,
    WireBuffer,
    copy_ranges,
    doubles_at,
    int32_of,
    put_varints,
    records,
    varint_sizes,
    walk,
)
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

_JOB = snapshot_pb.Job
_PROGRESS = snapshot_pb.Progress
TEXT_FIELDS = ("id", "tenant", "job_type")
DOUBLE_FIELDS = ("priority_weight", "arrival_time_s", "deadline_s", "restart_penalty_s")
INT32_FIELDS = ("scale_factor",)
PROGRESS_DOUBLES = ("steps_done", "total_steps")
PROGRESS_INT32S = ("epochs_done", "total_epochs")
_WIRE_TYPE = {
    **{name: LEN for name in (*TEXT_FIELDS, "throughput", "progress")},
    **{name: I64 for name in DOUBLE_FIELDS},
    **{name: VARINT for name in INT32_FIELDS},
}
_NUMBER = {name: _JOB.DESCRIPTOR.fields_by_name[name].number for name in _WIRE_TYPE}
_PROGRESS_WIRE_TYPE = {**{name: I64 for name in PROGRESS_DOUBLES},
                       **{name: VARINT for name in PROGRESS_INT32S}}
MAX_JOB_RECORDS = 64
"""A job with more records is read from its message (the lockstep walk takes one numpy step
per record of the longest job)."""
_STRING_RECORD_TAG = _NUMBER["id"] << 3 | LEN
"""The tag of `Strings.id`, under which `_strings` writes any string field's values."""
_HASH_STEP = np.uint64(0x100000001B3)
_HASH_LENGTH = np.uint64(0x9E3779B97F4A7C15)


@functools.cache
def _shadow_types() -> tuple[type[Message], type[Message], type[Message]]:
    """Message types reading the same bytes more cheaply: a `SolveRequest` and a `Snapshot`
    with every job as bytes (other fields unknown), and a `Job` with only its string fields,
    repeated (every job's value in order when the bytes of all jobs are parsed as one)."""
    file = descriptor_pb2.FileDescriptorProto(
        name="apportion_job_wire/shadow.proto", package="apportion_job_wire", syntax="proto3")
    repeated = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
    snapshot = file.message_type.add(name="Snapshot")
    snapshot.field.add(name="jobs", number=snapshot_pb.Snapshot.JOBS_FIELD_NUMBER,
                       type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES, label=repeated)
    request = file.message_type.add(name="SolveRequest")
    request.field.add(name="snapshot", number=service_pb.SolveRequest.SNAPSHOT_FIELD_NUMBER,
                      type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                      type_name=".apportion_job_wire.Snapshot")
    strings = file.message_type.add(name="Strings")
    for name in TEXT_FIELDS:
        strings.field.add(name=name, number=_NUMBER[name], label=repeated,
                          type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return tuple(  # type: ignore[return-value]
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"apportion_job_wire.{n}"))
        for n in ("SolveRequest", "Snapshot", "Strings"))


def job_bytes(snapshot: snapshot_pb.Snapshot, request: bytes | None) -> list[bytes]:
    """The serialized `Job` of each entry of `snapshot.jobs`: from `request` (the bytes
    the request was parsed from) when given, else by serializing `snapshot`."""
    request_type, snapshot_type, _ = _shadow_types()
    if request is not None:
        jobs: Sequence[bytes] = request_type.FromString(request).snapshot.jobs  # type: ignore[attr-defined]
    else:
        jobs = snapshot_type.FromString(snapshot.SerializeToString()).jobs  # type: ignore[attr-defined]
    return list(jobs)


@dataclass(frozen=True)
class WireJobs:
    """The main fields of the jobs `decode` read (those not in `unread`). Absent fields are
    "" and 0 here; `given` says which optional ones were set."""

    count: int
    unread: Ints
    """Jobs to read from their messages (sorted)."""
    text: dict[str, list[str]]
    numbers: dict[str, NDArray[Any]]
    """The doubles as float64, the int32 fields (and progress's) as int64."""
    given: dict[str, NDArray[np.bool_]]
    """Per optional field (`DOUBLE_FIELDS`, `INT32_FIELDS`): set on the job."""
    cells: tuple[Ints, Ints, NDArray[np.float64]]
    """Throughput entries as (job, type index, value)."""
    others: dict[int, Ints]
    """Field number -> the read jobs with records of that field (other than the main ones)."""

    @staticmethod
    def decode(jobs: list[bytes], type_names: Sequence[str]) -> WireJobs:
        """Decode the serialized jobs `jobs` (type names: the cluster's, in order)."""
        m = len(jobs)
        length = np.fromiter(map(len, jobs), np.int64, m)
        data = b"".join(jobs)
        buf = WireBuffer(data)
        end = np.cumsum(length)
        unread = np.zeros(m, bool)
        seen = _MainRecords(m)
        for chunk in walk(buf, end - length, end, MAX_JOB_RECORDS, unread):
            seen.add(chunk, unread)
        unread |= (seen.count > 1).any(axis=0)
        present = seen.count == 1
        cells = _throughput(buf, *seen.entries(), type_names, unread)
        progress_jobs = np.flatnonzero(present[_SLOT["progress"]])
        progress = _progress(buf, progress_jobs, seen.start[_SLOT["progress"], progress_jobs],
                             seen.end[_SLOT["progress"], progress_jobs], m, unread)
        read = ~unread
        text = _text(buf, data, seen, read)
        numbers: dict[str, NDArray[Any]] = {}
        given: dict[str, NDArray[np.bool_]] = {}
        for name in DOUBLE_FIELDS:
            given[name] = present[_SLOT[name]]
            numbers[name] = np.where(given[name], doubles_at(buf, seen.start[_SLOT[name]]), 0.0)
        for name in INT32_FIELDS:
            given[name] = present[_SLOT[name]]
            numbers[name] = np.where(given[name], int32_of(seen.varint[_SLOT[name]]), 0)
        numbers.update(progress)
        job, column, value = cells
        keep = read[job]
        return WireJobs(m, np.flatnonzero(unread), text, numbers, given,
                        (job[keep], column[keep], value[keep]), seen.others())


_SLOT = {name: k for k, name in enumerate(_NUMBER)}
"""Index of each main field in `_MainRecords`' tables."""
_SLOT_OF_NUMBER = np.full(max(_NUMBER.values()) + 1, -1, np.int64)
_WIRE_TYPE_OF_SLOT = np.zeros(len(_NUMBER), np.int64)
for _name, _number in _NUMBER.items():
    _SLOT_OF_NUMBER[_number] = _SLOT[_name]
    _WIRE_TYPE_OF_SLOT[_SLOT[_name]] = _WIRE_TYPE[_name]


class _MainRecords:
    """Where each job's main fields are, gathered chunk by chunk from `walk`: per field and
    job, the number of records of the declared wire type, the last one's value offsets and
    varint; the throughput entries; the jobs with records of other fields."""

    def __init__(self, m: int) -> None:
        self.m = m
        fields = len(_NUMBER)
        self.count = np.zeros((fields, m), np.int64)
        self.start = np.zeros((fields, m), np.int64)
        self.end = np.zeros((fields, m), np.int64)
        self.varint = np.zeros((fields, m), np.int64)
        self.wrong_wire_type = np.zeros(fields, np.int64)
        self._entries: list[tuple[Ints, Ints, Ints]] = []
        self._others: list[tuple[Ints, Ints]] = []

    def add(self, chunk: Records, unread: NDArray[np.bool_]) -> None:
        """Take one chunk (every job at most once); jobs with a main field of another wire
        type are marked in `unread`."""
        number, owner = chunk.number, chunk.owner
        top = _SLOT_OF_NUMBER.size
        slot = np.where(number < top, _SLOT_OF_NUMBER.take(np.minimum(number, top - 1)), -1)
        main = slot >= 0
        if not main.all():
            other = ~main
            self._others.append((number[other], owner[other]))
        wrong = main & (chunk.wire_type != _WIRE_TYPE_OF_SLOT.take(slot))
        if wrong.any():
            unread[owner[wrong]] = True
            self.wrong_wire_type += np.bincount(slot[wrong], minlength=len(_NUMBER))
            main &= ~wrong
        entry = slot == _SLOT["throughput"]
        if entry.any():
            self._entries.append((owner[entry], chunk.start[entry], chunk.end[entry]))
            main &= ~entry
        if not main.all():
            owner, slot = owner[main], slot[main]
            chunk = Records(*(getattr(chunk, name)[main] for name in _COLUMNS))
        at = slot * self.m + owner  # each (field, job) once per chunk
        self.count.reshape(-1)[at] += 1
        self.start.reshape(-1)[at] = chunk.start
        self.end.reshape(-1)[at] = chunk.end
        self.varint.reshape(-1)[at] = chunk.varint

    def entries(self) -> tuple[Ints, Ints, Ints]:
        """(job, value start, value end) of every throughput map entry."""
        if not self._entries:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        job, start, end = (np.concatenate(column) for column in zip(*self._entries, strict=True))
        return job, start, end

    def others(self) -> dict[int, Ints]:
        """Field number -> the jobs with records of it, for the fields other than the main
        ones."""
        if not self._others:
            return {}
        number, owner = (np.concatenate(column) for column in zip(*self._others, strict=True))
        return {int(n): np.unique(owner[number == n]) for n in np.unique(number)}


_COLUMNS = ("owner", "number", "wire_type", "start", "end", "varint")


def _text(buf: WireBuffer, data: bytes, seen: _MainRecords, read: NDArray[np.bool_]
          ) -> dict[str, list[str]]:
    """The string fields of every job ("" where unset or not read). When every job has one
    record of a field, or none has any, the jobs' bytes parsed as a message of repeated
    string fields of the same numbers list them in job order; otherwise the values are
    gathered first (`_strings`)."""
    out: dict[str, list[str]] = {}
    aligned: list[str] = []
    for name in TEXT_FIELDS:
        count = seen.count[_SLOT[name]]
        if seen.wrong_wire_type[_SLOT[name]]:
            out[name] = _strings(buf, seen, name, read)
        elif not count.any():
            out[name] = [""] * seen.m
        elif (count == 1).all():
            aligned.append(name)
        else:
            out[name] = _strings(buf, seen, name, read)
    if aligned:
        listed = _shadow_types()[2].FromString(data)
        for name in aligned:
            values = list(getattr(listed, name))
            for i in np.flatnonzero(~read).tolist():
                values[i] = ""
            out[name] = values
    return out


def _throughput(buf: WireBuffer, job: Ints, start: Ints, end: Ints,
                type_names: Sequence[str], unread: NDArray[np.bool_]
                ) -> tuple[Ints, Ints, NDArray[np.float64]]:
    """The throughput map entries as (job, type index, value). An entry is read when it is
    written as serializers write it (key, then value, nothing else: `0A len key 11 <8 bytes>`)
    and names a type; jobs with another entry, or a type twice, are marked in `unread`."""
    head = buf.u16[start].astype(np.int64)
    key_length = head >> 8
    value_tag = buf.bytes[np.minimum(start + 2 + key_length, buf.size)]
    plain = (((head & 0xFF) == 1 << 3 | LEN) & (key_length < 0x80)
             & (end - start == key_length + 11) & (value_tag == 2 << 3 | I64))
    index = {name: j for j, name in enumerate(type_names)}  # the last of equal names
    named = _name_index(buf, start + 2, key_length, list(index), list(index.values()))
    column = np.where(plain, named, -1)
    n = max(len(type_names), 1)
    twice = np.bincount((job * n + column)[column >= 0], minlength=unread.size * n) > 1
    unread[job[column < 0]] = True
    unread[np.flatnonzero(twice) // n] = True
    ok = np.flatnonzero(column >= 0)
    return job[ok], column[ok], doubles_at(buf, start[ok] + 3 + key_length[ok])


_LOW_BYTES = np.array([(1 << 8 * k) - 1 for k in range(9)], np.uint64)
"""_LOW_BYTES[k]: the mask of the first k bytes of a little-endian 64-bit word."""


def _name_index(buf: WireBuffer, start: Ints, length: Ints, names: list[str],
                indices: list[int]) -> Ints:
    """For each byte range (`start`, `length`), the index (from `indices`) of the name it
    spells; -1 for none. Ranges are read as 64-bit words, looked up among the names' by a
    hash and compared word for word."""
    out = np.full(start.size, -1, np.int64)
    encoded = [name.encode() for name in names]
    if not encoded or not start.size:
        return out
    words = -(-max(map(len, encoded)) // 8) or 1
    known = np.zeros((len(encoded), 8 * words), np.uint8)
    for k, name in enumerate(encoded):
        known[k, : len(name)] = np.frombuffer(name, np.uint8)
    theirs = known.view(np.uint64)
    known_length = np.array([len(name) for name in encoded], np.int64)
    own = np.empty((start.size, words), np.uint64)
    last = buf.u64.size - 1
    for w in range(words):
        own[:, w] = (buf.u64[np.minimum(start + 8 * w, last)]
                     & _LOW_BYTES[np.clip(length - 8 * w, 0, 8)])
    own_hash, their_hash = _hash(own, length), _hash(theirs, known_length)
    order = np.argsort(their_hash)
    spot = order[np.minimum(np.searchsorted(their_hash[order], own_hash), len(encoded) - 1)]
    same = (known_length[spot] == length) & (own == theirs[spot]).all(axis=1)
    out[same] = np.asarray(indices, np.int64)[spot[same]]
    return out


def _hash(words: NDArray[np.uint64], length: Ints) -> NDArray[np.uint64]:
    """A 64-bit hash of each row of words and its length (wrapping arithmetic)."""
    h = length.astype(np.uint64) * _HASH_LENGTH
    with np.errstate(over="ignore"):
        for k in range(words.shape[1]):
            h = (h ^ words[:, k]) * _HASH_STEP
    return h


def _progress(buf: WireBuffer, job: Ints, start: Ints, end: Ints, m: int,
              unread: NDArray[np.bool_]) -> dict[str, NDArray[Any]]:
    """The progress fields of every job (0 where unset) from its one `progress` record; jobs
    whose progress has other or repeated fields are marked in `unread`."""
    malformed = np.zeros(job.size, bool)
    fields = records(buf, start, end, len(_PROGRESS_WIRE_TYPE), malformed)
    number = {name: _PROGRESS.DESCRIPTOR.fields_by_name[name].number
              for name in _PROGRESS_WIRE_TYPE}
    known = np.zeros(fields.number.size, bool)
    out: dict[str, NDArray[Any]] = {}
    for name, wire_type in _PROGRESS_WIRE_TYPE.items():
        pick = (fields.number == number[name]) & (fields.wire_type == wire_type)
        known |= pick
        owner = fields.owner[pick]
        unread[job[owner[np.bincount(owner, minlength=start.size)[owner] > 1]]] = True
        values = (doubles_at(buf, fields.start[pick]) if wire_type == I64
                  else int32_of(fields.varint[pick]))
        out[name] = np.zeros(m, values.dtype)
        out[name][job[owner]] = values
    unread[job[fields.owner[~known]]] = True
    unread[job[malformed]] = True
    return out


def _strings(buf: WireBuffer, seen: _MainRecords, name: str, read: NDArray[np.bool_]
             ) -> list[str]:
    """A string field of every job ("" where unset or not read): the values are written as
    the records of a repeated string field, which the runtime turns into Python strings."""
    slot = _SLOT[name]
    keep = (seen.count[slot] == 1) & read
    first = np.where(keep, seen.start[slot], 0)
    length = np.where(keep, seen.end[slot] - first, 0)
    head = 1 + varint_sizes(length)
    size = head + length
    at = np.cumsum(size) - size
    out = np.empty(int(size.sum()), np.uint8)
    out[at] = _STRING_RECORD_TAG
    put_varints(out, at + 1, length)
    copy_ranges(out, at + head, buf.bytes, first, length)
    return list(_shadow_types()[2].FromString(out.tobytes()).id)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class JobFields:
    """Which `Snapshot.jobs` entries may set which of their other fields: the modules reading
    such a field (epoch profiles, configurations, bids, placement inputs) visit only those."""

    jobs: Sequence[snapshot_pb.Job]
    others: dict[int, Ints] | None
    """From `WireJobs.others`; None = unknown (every job may)."""
    unread: Ints

    def setting(self, *numbers: int) -> Iterator[tuple[int, snapshot_pb.Job]]:
        """(index, message) of each job that may set one of the `Job` fields `numbers`
        (`Job.X_FIELD_NUMBER`), in order (a superset of those that do: callers still look at
        the message)."""
        if self.others is None:
            yield from enumerate(self.jobs)
            return
        picked = [self.others[n] for n in numbers if n in self.others]
        jobs = self.jobs
        for i in np.unique(np.concatenate([self.unread, *picked])).tolist():
            yield i, jobs[i]


def all_jobs(jobs: Sequence[snapshot_pb.Job]) -> JobFields:
    """`JobFields` without wire information: every job may set every field."""
    return JobFields(jobs, None, np.zeros(0, np.int64))


