"""`Snapshot.jobs` read at the wire level: the main fields of every `Job` as numpy columns.

Reading a `Job` message field by field costs about 5 µs in Python; 100,000 jobs cost half a
second. Their serialized bytes hold the same values, read where they are in the request's
bytes (`job_spans`: the runtime is asked only for each job's length, and the run of job
records those lengths make is checked record by record; jobs written otherwise are joined into
a new buffer). `WireJobs.decode_spans` walks the records of all jobs in lockstep
(`apportion.server.wire_records`), then gathers each field's values with array operations:
doubles through 8-byte views, varints decoded as int32 fields are (low 32 bits), strings
through a message type of repeated string fields (the runtime makes the Python strings),
throughput map entries matched to the cluster's type names by a perfect hash of their bytes
before the value, compared word for word.

Records are read as the runtime reads them: a field given twice keeps its last value, a
main field's number with another wire type is an unknown field (ignored), unknown fields are
ignored. A job the decoder does not read is listed in `unread`, for the caller to read from
its message (where the runtime has applied protobuf's rules, and violations get their field
paths): a `progress` given in parts or with a field given twice (the runtime merges them), a
throughput entry not written as serializers write it (key, then value, nothing else) or not
naming a type of the cluster (a violation), a type twice, a record the walk cannot follow or
more than MAX_JOB_RECORDS records. The records of other fields are not read here, only noted
(`WireJobs.others`), so that the modules reading them visit only the jobs that carry them
(`JobFields`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf import descriptor_pb2
from google.protobuf.message import Message
from numpy.typing import NDArray

from apportion.server.packed_fields import encode_varints, message_classes
from apportion.server.wire_peek import records as message_records
from apportion.server.wire_records import (
    I64,
    LEN,
    PADDING,
    VARINT,
    Ints,
    Records,
    WireBuffer,
    doubles_at,
    int32_of,
    put_varints,
    records,
    varint_sizes,
    walk,
)
from apportion.solver.deadline import NO_DEADLINE, Deadline
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


@functools.cache
def _shadow_types() -> tuple[type[Message], type[Message], type[Message]]:
    """Message types reading the same bytes more cheaply: a `SolveRequest` and a `Snapshot`
    with every job as bytes (other fields unknown), and a list of strings (`_strings`)."""
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
    strings.field.add(name="filler", number=_FILLER_NUMBER,
                      type=descriptor_pb2.FieldDescriptorProto.TYPE_FIXED64)
    return message_classes(file, ("SolveRequest", "Snapshot", "Strings"))  # type: ignore[return-value]


def job_bytes(snapshot: snapshot_pb.Snapshot, serialized: bytes | None) -> list[bytes]:
    """The serialized `Job` of each entry of `snapshot.jobs`: from `serialized` (the
    `SolveRequest` bytes the snapshot was parsed from) when given, else by serializing
    `snapshot`."""
    return list(_shadow_jobs(snapshot, serialized)[0])


def _shadow_jobs(snapshot: snapshot_pb.Snapshot, serialized: bytes | None
                 ) -> tuple[Sequence[bytes], bytes, tuple[int, ...]]:
    """The jobs' bytes as the shadow types read them, the bytes they were read from and the
    path of field numbers from those bytes to the jobs' parent (`_jobs_in_place`)."""
    request_type, snapshot_type, _ = _shadow_types()
    if serialized is not None:
        jobs = request_type.FromString(serialized).snapshot.jobs  # type: ignore[attr-defined]
        return jobs, serialized, (service_pb.SolveRequest.SNAPSHOT_FIELD_NUMBER,)
    data = snapshot.SerializeToString()
    return snapshot_type.FromString(data).jobs, data, ()  # type: ignore[attr-defined]


@dataclass(frozen=True)
class JobSpans:
    """Where the serialized `Job` of each entry of `Snapshot.jobs` is: `buf[start[k]:end[k]]`."""

    buf: WireBuffer
    start: Ints
    end: Ints

    @property
    def count(self) -> int:
        return int(self.start.size)


def job_spans(snapshot: snapshot_pb.Snapshot, serialized: bytes | None) -> JobSpans:
    """`job_bytes` as spans. The jobs are found where they are in `serialized` (or in the
    snapshot's serialization) when they form one run of records there, as serializers write
    them; otherwise (a snapshot given in parts, jobs between other fields, lengths written
    with needless bytes) their bytes are joined into a new buffer."""
    jobs, data, path = _shadow_jobs(snapshot, serialized)
    length = np.fromiter(map(len, jobs), np.int64, len(jobs))
    found = _jobs_in_place(data, path, length)
    if found is not None:
        return found
    buf = WireBuffer(b"".join([*jobs, PADDING]))
    end = np.cumsum(length)
    return JobSpans(buf, end - length, end)


MAX_RECORDS_BEFORE_JOBS = 64
"""`_jobs_in_place` walks at most this many records (one by one) looking for the jobs."""
_JOBS_TAG = snapshot_pb.Snapshot.JOBS_FIELD_NUMBER << 3 | LEN


def _jobs_in_place(data: bytes, path: tuple[int, ...], length: Ints) -> JobSpans | None:
    """The spans of jobs of lengths `length` in `data`, when their parent (the message
    reached from `data` by the length-delimited fields `path`, each given once) holds them
    as one run of records (a one-byte tag, a length of as few bytes as it needs), starting
    at its first `jobs` record; None otherwise."""
    if not length.size:
        return None
    start, end = 0, len(data)
    for number in path:
        span = _only_record(data, start, end, number)
        if span is None:
            return None
        start, end = span
    first = _first_record(data, start, end, _JOBS_TAG)
    if first is None:
        return None
    buf = WireBuffer(data + PADDING)
    head = 1 + varint_sizes(length)
    record_end = first + np.cumsum(head + length)
    at = record_end - head - length
    if int(record_end[-1]) > end:
        return None
    if not (buf.bytes[at] == _JOBS_TAG).all():
        return None
    for k in range(int(head.max()) - 1):  # the length's varint, byte by byte
        more = np.flatnonzero(head > k + 1) if k else np.arange(at.size)
        byte = (length[more] >> 7 * k) & 0x7F | np.where(head[more] > k + 2, 0x80, 0)
        if not (buf.bytes[at[more] + 1 + k] == byte).all():
            return None
    return JobSpans(buf, at + head, record_end)


def _only_record(data: bytes, start: int, end: int, number: int) -> tuple[int, int] | None:
    """The value span of the one length-delimited record of field `number` among the records
    of `data[start:end]`; None when there is none, more than one (a message given in parts),
    one of another wire type, more than MAX_RECORDS_BEFORE_JOBS records or a record that
    cannot be followed."""
    found: list[tuple[int, int]] = []
    try:
        for k, (tag, value_start, value_end) in enumerate(message_records(data, start, end)):
            if k == MAX_RECORDS_BEFORE_JOBS or (tag >> 3 == number and tag & 7 != LEN):
                return None
            if tag >> 3 == number:
                found.append((value_start, value_end))
    except ValueError:
        return None
    return found[0] if len(found) == 1 else None


def _first_record(data: bytes, start: int, end: int, tag: int) -> int | None:
    """The offset of the first record of `data[start:end]` with tag `tag` (a one-byte tag),
    if it is among the first MAX_RECORDS_BEFORE_JOBS records and those can be followed."""
    at = start
    try:
        for k, (found, _, value_end) in enumerate(message_records(data, start, end)):
            if k == MAX_RECORDS_BEFORE_JOBS:
                return None
            if found == tag:
                return at
            at = value_end
    except ValueError:
        return None
    return None


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
    """Field number -> the jobs with records of that field, for the fields other than the
    main ones (complete for the jobs read)."""
    other_records: dict[int, tuple[Ints, Ints, Ints]]
    """Tag -> (job, value start, value end) of its records, for the fields other than the
    main ones (complete for the jobs read), a block of `WALK_BLOCK` jobs after another."""

    @staticmethod
    def decode(jobs: list[bytes], type_names: Sequence[str],
               deadline: Deadline = NO_DEADLINE) -> WireJobs:
        """Decode the serialized jobs `jobs` (type names: the cluster's, in order)."""
        length = np.fromiter(map(len, jobs), np.int64, len(jobs))
        end = np.cumsum(length)
        spans = JobSpans(WireBuffer(b"".join([*jobs, PADDING])), end - length, end)
        return WireJobs.decode_spans(spans, type_names, deadline)

    @staticmethod
    def decode_spans(spans: JobSpans, type_names: Sequence[str],
                     deadline: Deadline = NO_DEADLINE) -> WireJobs:
        """`decode` for jobs given as spans of one buffer. Raises `DeadlineExpiredError` once
        `deadline` passes (read between blocks of jobs)."""
        m, buf = spans.count, spans.buf
        unread = np.zeros(m, bool)
        seen = _MainRecords(m, buf.size)
        for chunk in walk(buf, spans.start, spans.end, MAX_JOB_RECORDS, unread, deadline):
            seen.add(chunk, unread)
        present = seen.start > 0
        cells = _throughput(buf, *seen.entries(), type_names, unread)
        progress_jobs = np.flatnonzero(present[_SLOT["progress"]])
        progress = _progress(
            buf, progress_jobs, seen.start[_SLOT["progress"], progress_jobs].astype(np.int64),
            seen.end[_SLOT["progress"], progress_jobs].astype(np.int64), m, unread)
        read = ~unread
        text = _text(buf, seen, read)
        numbers: dict[str, NDArray[Any]] = {}
        given: dict[str, NDArray[np.bool_]] = {}
        for name in DOUBLE_FIELDS:
            given[name] = present[_SLOT[name]]
            numbers[name] = np.where(given[name], doubles_at(buf, seen.start[_SLOT[name]]), 0.0)
        for name in INT32_FIELDS:
            given[name] = present[_SLOT[name]]
            numbers[name] = np.where(given[name], seen.end[_SLOT[name]].astype(np.int64), 0)
        numbers.update(progress)
        job, column, value = cells
        keep = read[job]
        return WireJobs(m, np.flatnonzero(unread), text, numbers, given,
                        (job[keep], column[keep], value[keep]), seen.others(),
                        seen.other_records())


_SLOT = {name: k for k, name in enumerate(_NUMBER)}
"""Index of each main field in `_MainRecords`' tables."""
_UNKNOWN, _OTHER = -2, -1


def _slot_of_tag() -> Ints:
    """By tag (field number << 3 | wire type, numbers below 64; larger tags are clipped to the
    last entry, "other"): the main field's slot; _UNKNOWN for a main field's number with
    another wire type (an unknown field to the runtime too); _OTHER for other fields."""
    table = np.full(64 << 3, _OTHER, np.int64)
    for name, number in _NUMBER.items():
        table[number << 3 : (number + 1) << 3] = _UNKNOWN
        table[number << 3 | _WIRE_TYPE[name]] = _SLOT[name]
    return table


_SLOT_OF_TAG = _slot_of_tag()


class _MainRecords:
    """Where each job's main fields are, gathered chunk by chunk from `walk`: per field and
    job, the last record's value start (0 = no record: a value follows its tag) and its end
    (for a varint: its value as int32 fields read it), both as int32 for a buffer under
    2 GiB (8 bytes a job and main field); the throughput entries; the jobs with records of
    other fields."""

    def __init__(self, m: int, size: int) -> None:
        self.m = m
        fields = len(_NUMBER)
        offset = np.int32 if size < 2**31 else np.int64
        self.start = np.zeros((fields, m), offset)
        self.end = np.zeros((fields, m), offset)
        """The value's end; for a varint, the value (`int32_of`)."""
        self.records = np.zeros(fields, np.int64)
        """Per main field, its records (all jobs)."""
        self._entries: list[tuple[Ints, Ints, Ints]] = []
        self._others: dict[int, list[tuple[Ints, Ints, Ints]]] = {}
        """Per tag of another field, its records' (job, value start, value end), chunk by
        chunk."""

    def add(self, chunk: Records, unread: NDArray[np.bool_]) -> None:
        """Take one chunk (every job at most once; chunks in order, so a later record of a
        field replaces an earlier one, as the runtime's last one wins). Jobs with `progress`
        given twice (the runtime merges the parts) are marked in `unread`."""
        slot = _SLOT_OF_TAG.take(chunk.tag, mode="clip")
        main = slot >= 0
        if not main.all():
            other = slot == _OTHER
            if other.any():
                tag = chunk.tag[other]
                low, high = int(tag.min()), int(tag.max())
                for t in (low,) if low == high else np.unique(tag).tolist():  # a chunk's few
                    pick = other if low == high else np.flatnonzero(other)[tag == t]
                    self._others.setdefault(t, []).append(
                        (chunk.owner[pick], chunk.start[pick], chunk.end[pick]))
        entry = slot == _SLOT["throughput"]
        if entry.any():
            self._entries.append((chunk.owner[entry], chunk.start[entry], chunk.end[entry]))
            main &= ~entry
        if not main.all():
            chunk, slot = chunk.select(main), slot[main]
        self.records += np.bincount(slot, minlength=self.records.size)
        at = slot * self.m + chunk.owner  # each (field, job) once per chunk
        start = self.start.reshape(-1)
        merged = (slot == _SLOT["progress"]) & (start.take(at) > 0)
        if merged.any():
            unread[chunk.owner[merged]] = True
        start[at] = chunk.start
        self.end.reshape(-1)[at] = np.where(chunk.tag & 7 == VARINT, int32_of(chunk.varint),
                                            chunk.end)

    def entries(self) -> tuple[Ints, Ints, Ints]:
        """(job, value start, value end) of every throughput map entry."""
        if not self._entries:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        job, start, end = (np.concatenate(column) for column in zip(*self._entries, strict=True))
        return job, start, end

    def others(self) -> dict[int, Ints]:
        """Field number -> the jobs with records of it, for the fields other than the main
        ones."""
        seen: dict[int, NDArray[np.bool_]] = {}
        for tag, parts in self._others.items():  # a mask, not a sort (1.5M records are usual)
            jobs = seen.setdefault(tag >> 3, np.zeros(self.m, bool))
            for owner, _, _ in parts:
                jobs[owner] = True
        return {number: np.flatnonzero(jobs) for number, jobs in seen.items()}

    def other_records(self) -> dict[int, tuple[Ints, Ints, Ints]]:
        """Tag -> (job, value start, value end) of its records, for the fields other than
        the main ones, in `walk`'s order."""
        return {tag: tuple(np.concatenate(column) if len(parts) > 1 else column[0]
                           for column in zip(*parts, strict=True))  # type: ignore[misc]
                for tag, parts in self._others.items()}




def _text(buf: WireBuffer, seen: _MainRecords, read: NDArray[np.bool_]
          ) -> dict[str, list[str]]:
    """The string fields of every job ("" where unset or not read)."""
    return {name: _strings(buf, seen, name, read) if seen.records[_SLOT[name]] else
            [""] * seen.m for name in TEXT_FIELDS}


def _throughput(buf: WireBuffer, job: Ints, start: Ints, end: Ints,
                type_names: Sequence[str], unread: NDArray[np.bool_]
                ) -> tuple[Ints, Ints, NDArray[np.float64]]:
    """The throughput map entries as (job, type index, value). An entry is read when it is
    written as serializers write it, key then value and nothing else (`0A len key 11` and 8
    bytes), with a key naming a type; jobs with another entry, or a type twice, are marked in
    `unread`."""
    prefixes = _entry_prefixes(tuple(type_names))
    column = prefixes.match(buf, start, end - start)
    n = max(len(type_names), 1)
    if (column < 0).any():
        unread[job[column < 0]] = True
        ok = np.flatnonzero(column >= 0)
        job, start, column = job[ok], start[ok], column[ok]
    twice = np.flatnonzero(np.bincount(job * n + column, minlength=unread.size * n) > 1)
    unread[twice // n] = True
    value_at = start + prefixes.size.take(column)
    return job, column, doubles_at(buf, value_at)


_LOW_BYTES = np.array([(1 << 8 * k) - 1 for k in range(9)], np.uint64)
"""_LOW_BYTES[k]: the mask of the first k bytes of a little-endian 64-bit word."""
_MULTIPLIERS = tuple(np.uint64((0x9E3779B97F4A7C15 * (2 * k + 1)) % (1 << 64) | 1)
                     for k in range(64))


class _EntryPrefixes:
    """The bytes that start a throughput map entry for each type, up to its value
    (`0A len key 11`), as 64-bit words, with a perfect hash of them: an entry of length L
    is matched by reading its first L - 8 bytes as words, one table lookup, and a comparison
    of the words and length."""

    def __init__(self, type_names: Sequence[str]) -> None:
        index = {name: j for j, name in enumerate(type_names)}  # the last of equal names
        prefixes = [_entry_prefix(name) for name in index]
        self.size = np.array([len(_entry_prefix(name)) for name in type_names] or [0], np.int64)
        """Per type index, the bytes of its entry before the value."""
        self.columns = np.array(list(index.values()), np.int64)
        self.length = np.array([len(p) + 8 for p in prefixes], np.int64)
        self.words = max((len(p) + 7) // 8 for p in prefixes) if prefixes else 1
        padded = np.zeros((len(prefixes), 8 * self.words), np.uint8)
        for k, prefix in enumerate(prefixes):
            padded[k, : len(prefix)] = np.frombuffer(prefix, np.uint8)
        self.known = padded.view(np.uint64)
        self.bits, self.multiplier = max(len(prefixes) - 1, 1).bit_length() + 1, _MULTIPLIERS[0]
        while len(prefixes) and not self._perfect():
            self.bits += 1
        self.table = np.full(1 << self.bits, -1, np.int64)
        self.table[self._slots(self.known)] = np.arange(len(prefixes))

    def _slots(self, words: NDArray[np.uint64]) -> Ints:
        h = np.zeros(words.shape[0], np.uint64)
        with np.errstate(over="ignore"):
            for k in range(words.shape[1]):
                h = (h ^ words[:, k]) * self.multiplier
        return (h >> np.uint64(64 - self.bits)).astype(np.int64)

    def _perfect(self) -> bool:
        """Find a multiplier with no two prefixes in one slot at this many bits."""
        for multiplier in _MULTIPLIERS:
            self.multiplier = multiplier
            if np.unique(self._slots(self.known)).size == self.known.shape[0]:
                return True
        return False

    def match(self, buf: WireBuffer, start: Ints, length: Ints) -> Ints:
        """The type index of each entry (`start`, `length`: its bytes); -1 when it is not
        one of the prefixes followed by 8 bytes."""
        if not self.columns.size:
            return np.full(start.size, -1, np.int64)
        prefix_length = length - 8
        last = buf.u64.size - 1
        words = np.empty((start.size, self.words), np.uint64)
        for k in range(self.words):
            words[:, k] = (buf.u64[np.minimum(start + 8 * k, last)]
                           & _LOW_BYTES.take(np.clip(prefix_length - 8 * k, 0, 8)))
        known = self.table.take(self._slots(words))
        same = (known >= 0) & (self.length.take(known) == length)
        same &= (self.known.take(known, axis=0) == words).all(axis=1)
        return np.where(same, self.columns.take(known), -1)


@functools.lru_cache(maxsize=16)
def _entry_prefixes(type_names: tuple[str, ...]) -> _EntryPrefixes:
    """`_EntryPrefixes` of a cluster's types (the same clusters come again and again)."""
    return _EntryPrefixes(type_names)


def _entry_prefix(name: str) -> bytes:
    """`0A len key 11`: a map entry's key record and its value's tag."""
    key = name.encode()
    return (bytes([1 << 3 | LEN]) + encode_varints(np.array([len(key)])) + key
            + bytes([2 << 3 | I64]))


def _progress(buf: WireBuffer, job: Ints, start: Ints, end: Ints, m: int,
              unread: NDArray[np.bool_]) -> dict[str, NDArray[Any]]:
    """The progress fields of every job (0 where unset) from its one `progress` record
    (other fields ignored, as unknown ones); jobs whose progress gives a field twice, or has
    more records than its four fields, are marked in `unread`."""
    malformed = np.zeros(job.size, bool)
    fields = records(buf, start, end, len(_PROGRESS_WIRE_TYPE), malformed)
    out: dict[str, NDArray[Any]] = {}
    for name, wire_type in _PROGRESS_WIRE_TYPE.items():
        pick = fields.tag == _PROGRESS.DESCRIPTOR.fields_by_name[name].number << 3 | wire_type
        owner = fields.owner[pick]
        unread[job[owner[np.bincount(owner, minlength=start.size)[owner] > 1]]] = True
        values = (doubles_at(buf, fields.start[pick]) if wire_type == I64
                  else int32_of(fields.varint[pick]))
        out[name] = np.zeros(m, values.dtype)
        out[name][job[owner]] = values
    unread[job[malformed]] = True
    return out


def _strings(buf: WireBuffer, seen: _MainRecords, name: str, read: NDArray[np.bool_]
             ) -> list[str]:
    """A string field of every job ("" where unset or not read): the values one after
    another, each followed by a NUL byte, decoded at once and split at the NULs; when a value
    holds a NUL itself (or is not UTF-8, which the runtime rejects before this), through
    `_strings_by_runtime`."""
    slot = _SLOT[name]  # unset: start and end 0
    first = np.where(read, seen.start[slot], 0).astype(np.int64)
    length = np.where(read, seen.end[slot] - first, 0).astype(np.int64)
    end = np.cumsum(length + 1)
    at = end - length - 1
    out = np.zeros(int(end[-1]) + 8 if end.size else 0, np.uint8)  # 8 for the last overrun
    words = np.ndarray((max(out.size - 7, 0),), "<u8", out, 0, (1,))
    # 8 bytes at a time, the last words first: a word running past its value (into the
    # next values) is overwritten by theirs, written later; the NULs go in last
    for k in reversed(range(0, int(length.max(initial=0)), 8)):
        more = np.flatnonzero(length > k)
        words[at[more] + k] = buf.u64[first[more] + k]
    out[end - 1] = 0
    joined = out[: out.size - 8].tobytes()
    if joined.count(0) == length.size:
        try:
            return joined.decode().split("\0")[:-1]
        except UnicodeDecodeError:
            pass
    return _strings_by_runtime(buf, first, length)


def _strings_by_runtime(buf: WireBuffer, first: Ints, length: Ints) -> list[str]:
    """The strings `buf[first[k]:first[k] + length[k]]`. The values are written as
    the records of a repeated string field, which the runtime turns into Python strings,
    each followed by a filler record (a fixed64 field, given again and again) so that they
    can be copied 8 bytes at a time: a copy's last word runs into the filler, whose tag is
    written after it."""
    head = 1 + varint_sizes(length)
    size = head + length + _FILLER
    at = np.cumsum(size) - size
    out = np.zeros(int(size.sum()), np.uint8)
    words = np.ndarray((out.size - 7,), "<u8", out, 0, (1,))
    value_at = at + head
    for k in range(0, int(length.max(initial=0)), 8):
        more = np.flatnonzero(length > k)
        words[value_at[more] + k] = buf.u64[first[more] + k]
    out[at] = _STRING_RECORD_TAG
    put_varints(out, at + 1, length)
    out[value_at + length] = _FILLER_TAG  # its 8 bytes: whatever the copies left
    return list(_shadow_types()[2].FromString(out.tobytes()).id)  # type: ignore[attr-defined]


_FILLER_NUMBER = 15
_FILLER_TAG = _FILLER_NUMBER << 3 | I64
_FILLER = 9
"""A filler record: `Strings.filler`, a fixed64 (the tag, then 8 bytes)."""


@dataclass(frozen=True)
class JobFields:
    """Which `Snapshot.jobs` entries may set which of their other fields: the modules reading
    such a field (epoch profiles, configurations, bids, placement inputs) visit only those."""

    jobs: Sequence[snapshot_pb.Job]
    others: dict[int, Ints] | None
    """From `WireJobs.others`; None = unknown (every job may)."""
    unread: Ints
    records: dict[int, tuple[Ints, Ints, Ints]] | None = None
    """From `WireJobs.other_records`, when the jobs were decoded from their bytes."""

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


