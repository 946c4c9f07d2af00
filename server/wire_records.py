"""Protobuf wire records of many messages at once, as numpy arrays.

A serialized message is a sequence of records: a varint tag (field number << 3 | wire type),
then the value: a varint (wire type 0), 8 bytes (1), a varint length and that many bytes (2),
or 4 bytes (5). Reading one message is a walk from record to record; reading many (the jobs of
a snapshot, the map entries of all of them) walks them in lockstep, one record of every
unfinished message per numpy step, so the Python work grows with the records of the longest
message, not with the number of messages.

Writing goes the other way: `varint_sizes` and `put_varints` place the varints of many values
at given offsets of one output buffer, `put_spans` copies byte ranges into it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from apportion.solver.deadline import NO_DEADLINE, Deadline

VARINT, I64, LEN, I32 = 0, 1, 2, 5
"""The wire types apportion.v1 uses (3 and 4, groups, are never declared in it)."""
MAX_VARINT_BYTES = 10
MAX_FIELD_NUMBER = (1 << 29) - 1

Bytes = NDArray[np.uint8]
Ints = NDArray[np.int64]


PADDING = bytes(MAX_VARINT_BYTES)
"""What a `WireBuffer` needs after the bytes it reads."""


class WireBuffer:
    """Serialized bytes as read-only numpy arrays: the bytes, and views reading 2 or 8
    little-endian bytes at any offset (`u16[k]` = bytes k, k + 1). `padded` ends with
    PADDING (zeros: a varint read near the end never indexes past them and ends there), not
    counted in `size`."""

    def __init__(self, padded: bytes) -> None:
        if not padded.endswith(PADDING):
            raise ValueError("the bytes must end with PADDING")
        self.size = len(padded) - len(PADDING)
        self.bytes: Bytes = np.frombuffer(padded, np.uint8)
        starts = self.bytes.size - 7
        self.u16: NDArray[np.uint16] = np.ndarray((starts,), "<u2", padded, 0, (1,))
        self.u64: NDArray[np.uint64] = np.ndarray((starts,), "<u8", padded, 0, (1,))
        self.f64: NDArray[np.float64] = np.ndarray((starts,), "<f8", padded, 0, (1,))


def varints_at(buf: WireBuffer, at: Ints) -> tuple[NDArray[np.uint64], Ints]:
    """The varints starting at offsets `at`: (values as uint64, sizes in bytes). A size of 0
    marks a varint longer than MAX_VARINT_BYTES. Bits beyond 64 are dropped, as the protobuf
    runtime drops them."""
    value = np.zeros(at.size, np.uint64)
    size = np.zeros(at.size, np.int64)
    going = np.arange(at.size)
    for k in range(MAX_VARINT_BYTES):
        byte = buf.bytes[at[going] + k]
        value[going] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        last = byte < 0x80
        size[going[last]] = k + 1
        going = going[~last]
        if not going.size:
            break
    return value, size


@dataclass(frozen=True)
class Records:
    """Records of many messages (each a span of one buffer); `owner` is the message's index
    among the spans. In `walk`'s chunks every owner appears at most once; in `records`'
    output an owner's records are in order."""

    owner: Ints
    tag: Ints
    """Field number << 3 | wire type."""
    start: Ints
    """Offset of the value (for LEN records: of its bytes, after the length)."""
    end: Ints
    varint: Ints
    """The value of VARINT records as int64 (the 64-bit two's complement); meaningless for
    other records."""

    def select(self, keep: NDArray[Any]) -> Records:
        """The records `keep` (a mask or indices)."""
        return Records(self.owner[keep], self.tag[keep], self.start[keep], self.end[keep],
                       self.varint[keep])


WALK_BLOCK = 8192
"""`walk` takes this many messages at a time: each block is walked to its end before the next
starts, so its arrays stay in the processor's caches (whole 100,000-job snapshots in one
lockstep walk ran 1.5-3x slower, and their time varied more) and the deadline is read between
blocks."""


def walk(buf: WireBuffer, start: Ints, end: Ints, max_records: int,
         malformed: NDArray[np.bool_], deadline: Deadline = NO_DEADLINE) -> Iterator[Records]:
    """The records of the messages `buf[start[k]:end[k]]`, walked in lockstep, `WALK_BLOCK`
    messages at a time: within a block, the r-th chunk holds the r-th record of every message
    that has one. Messages with a record that cannot be walked (a group, a varint over 10
    bytes, a length past the message's end, field number 0) or more than `max_records`
    records are marked in `malformed`; their records up to there are kept (the caller reads
    such messages another way). Raises `DeadlineExpiredError` once `deadline` passes
    (read between blocks)."""
    for first in range(0, start.size, WALK_BLOCK):
        if first:
            deadline.check()
        block = slice(first, first + WALK_BLOCK)
        live = first + np.flatnonzero(start[block] < end[block])
        yield from _walk_block(buf, live, start[live].astype(np.int64),
                               end[live].astype(np.int64), max_records, malformed)


def _walk_block(buf: WireBuffer, live: Ints, here: Ints, limit: Ints, max_records: int,
                malformed: NDArray[np.bool_]) -> Iterator[Records]:
    """`walk` for the messages `live`, from `here` to `limit`."""
    for _ in range(max_records):
        if not live.size:
            return
        chunk, ok = _step(buf, live, here, limit)
        if not ok.all():
            malformed[live[~ok]] = True
            chunk, limit = chunk.select(ok), limit[ok]
        yield chunk
        live, here = chunk.owner, chunk.end
        going = here < limit
        if not going.all():
            live, here, limit = live[going], here[going], limit[going]
    malformed[live] = True  # more than max_records records


def records(buf: WireBuffer, start: Ints, end: Ints, max_records: int,
            malformed: NDArray[np.bool_], deadline: Deadline = NO_DEADLINE) -> Records:
    """`walk`'s records in one table."""
    chunks = list(walk(buf, start, end, max_records, malformed, deadline))
    if not chunks:
        empty = np.zeros(0, np.int64)
        return Records(empty, empty, empty, empty, empty)
    return Records(*(np.concatenate([getattr(chunk, name) for chunk in chunks])
                     for name in ("owner", "tag", "start", "end", "varint")))


def _step_tables() -> tuple[NDArray[np.int32], ...]:
    """Lookup tables by the two bytes at a record's start (tag byte | next byte << 8): offset
    of the value, length of the record, and 1 when the record needs `_long_step` (a tag of
    more bytes, a length or varint of more bytes, a wire type apportion.v1 does not use,
    field number 0)."""
    pair = np.arange(1 << 16)
    tag, after = pair & 0xFF, pair >> 8
    wire_type, number = tag & 7, tag >> 3
    is_len = wire_type == LEN
    value_size = np.select([wire_type == VARINT, wire_type == I64, wire_type == I32, is_len],
                           [1, 8, 4, after], 0)
    long = ((tag >= 0x80) | (number == 0) | ~np.isin(wire_type, (VARINT, I64, LEN, I32))
            | ((after >= 0x80) & ((wire_type == VARINT) | is_len)))
    return tuple(column.astype(np.int32) for column in
                 (1 + is_len, 1 + is_len + value_size, long))


_VALUE_OFFSET, _RECORD_LENGTH, _LONG = _step_tables()


def _step(buf: WireBuffer, owner: Ints, here: Ints, limit: Ints
          ) -> tuple[Records, NDArray[np.bool_]]:
    """The record at each offset `here` (of message `owner`, ending at `limit`), and whether
    it is well formed. Records whose tag and length or varint are one byte each (nearly all)
    are read by table lookups; the others go through `varints_at`."""
    pair = buf.u16[here].astype(np.int64)
    tag = pair & 0xFF
    value_start = here + _VALUE_OFFSET.take(pair)
    value_end = here + _RECORD_LENGTH.take(pair)
    value = pair >> 8
    long = np.flatnonzero(_LONG.take(pair))
    if long.size:
        (tag[long], value_start[long], value_end[long], value[long]), fine = _long_step(
            buf, here[long], limit[long])
        value_end[long[~fine]] = limit[long[~fine]] + 1  # fails the check below
    return Records(owner, tag, value_start, value_end, value), value_end <= limit


def _long_step(buf: WireBuffer, here: Ints, limit: Ints
               ) -> tuple[tuple[NDArray[Any], ...], NDArray[np.bool_]]:
    """`_step` for records with a tag, length or varint of more than one byte."""
    tag, tag_size = varints_at(buf, here)
    wire_type = (tag & np.uint64(7)).astype(np.int64)
    number = (tag >> np.uint64(3)).astype(np.int64)  # a tag over 2^32 fails below
    value_start = here + tag_size
    value_end = value_start.copy()
    value = np.zeros(here.size, np.uint64)
    ok = (tag_size > 0) & (number > 0) & (number <= MAX_FIELD_NUMBER)
    is_varint = wire_type == VARINT
    got, size = varints_at(buf, value_start[is_varint])
    value[is_varint] = got
    value_end[is_varint] += size
    ok[is_varint] &= size > 0
    value_end += np.where(wire_type == I64, 8, np.where(wire_type == I32, 4, 0))
    is_len = np.flatnonzero(wire_type == LEN)
    length, size = varints_at(buf, value_start[is_len])
    room = np.maximum(limit[is_len] - value_start[is_len] - size, 0).astype(np.uint64)
    fits = (size > 0) & (length <= room)
    value_start[is_len] += size
    value_end[is_len] = value_start[is_len] + np.where(fits, length, 0).astype(np.int64)
    ok[is_len] &= fits
    ok &= np.isin(wire_type, (VARINT, I64, LEN, I32)) & (value_end <= limit)
    return (number << 3 | wire_type, value_start, value_end, value.view(np.int64)), ok


def doubles_at(buf: WireBuffer, at: Ints) -> NDArray[np.float64]:
    """The little-endian doubles at offsets `at` (bit patterns kept, NaN payloads too)."""
    values: NDArray[np.float64] = buf.f64[at].astype(np.float64)
    return values


def int32_of(value: Ints) -> Ints:
    """Varint values read as int32 fields are: the low 32 bits, signed."""
    return (value & 0xFFFFFFFF).astype(np.uint32).view(np.int32).astype(np.int64)


SLICE_FROM_BYTES = 256
"""`copy_ranges` copies ranges longer than this one slice at a time (a Python step each), and
the others word by word (a numpy step per 8 bytes of the longest)."""


def copy_ranges(out: Bytes, at: Ints, source: Bytes, start: Ints, length: Ints) -> None:
    """out[at[k]:at[k] + length[k]] = source[start[k]:start[k] + length[k]] for every k.

    Ranges of 8 bytes or more are copied a word (8 bytes) at a time: words at 0, 8, 16, ...
    and a last one ending exactly at the range's end (it may overlap the one before with the
    same bytes), so nothing outside a range is read or written. Ranges longer than
    `SLICE_FROM_BYTES` are copied one slice each (a step per word would be too many)."""
    huge = length > SLICE_FROM_BYTES
    if huge.any():
        for a, s, n in zip(at[huge].tolist(), start[huge].tolist(), length[huge].tolist(),
                           strict=True):
            out[a:a + n] = source[s:s + n]
        at, start, length = at[~huge], start[~huge], length[~huge]
    long = length >= 8
    if not long.all():
        _copy_bytes(out, at[~long], source, start[~long], length[~long])
    if not long.any():
        return
    at, start, length = at[long], start[long], length[long]
    target = np.ndarray((out.size - 7,), "<u8", out, 0, (1,))
    words = np.ndarray((source.size - 7,), "<u8", source, 0, (1,))
    target[at + length - 8] = words[start + length - 8]
    for k in range(0, int(length.max()) - 8, 8):
        more = np.flatnonzero(length > k + 8)
        target[at[more] + k] = words[start[more] + k]


def _copy_bytes(out: Bytes, at: Ints, source: Bytes, start: Ints, length: Ints) -> None:
    """`copy_ranges` byte by byte."""
    total = int(length.sum())
    if not total:
        return
    before = np.cumsum(length) - length
    step = np.arange(total, dtype=np.int64)
    out[step + np.repeat(at - before, length)] = source[step + np.repeat(start - before, length)]


def varint_sizes(values: NDArray[np.integer]) -> Ints:
    """Bytes of the varint of each non-negative value."""
    v = np.asarray(values).astype(np.uint64)
    size = np.ones(v.size, np.int64)
    top = int(v.max(initial=0))
    for k in range(1, MAX_VARINT_BYTES):
        if top < 1 << (7 * k):
            break
        size += v >= np.uint64(1 << (7 * k))
    return size


def put_varints(out: Bytes, at: Ints, values: NDArray[np.integer]) -> Ints:
    """Write the varint of each non-negative value at its offset of `out`; their sizes."""
    v = np.asarray(values).astype(np.uint64)
    size = varint_sizes(v)
    if int(size.max(initial=1)) == 1:
        out[at] = v
        return size
    for k in range(int(size.max())):
        has = size > k
        group = (v[has] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = np.where(size[has] > k + 1, 0x80, 0).astype(np.uint64)
        out[at[has] + k] = (group | more).astype(np.uint8)
    return size


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """No garbage collection inside: for code that makes many small acyclic objects (tuples,
    records) while a large request is alive, where each automatic collection would trace the
    whole heap again (a 100,000-job request: 3-5 times the work itself)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def utf8(texts: Sequence[str]) -> tuple[Bytes, Ints]:
    """The UTF-8 bytes of `texts` one after another, and each one's length in bytes."""
    joined = "".join(texts)
    data = joined.encode()
    if len(data) == len(joined):  # ASCII: a byte per character
        length = np.fromiter(map(len, texts), np.int64, len(texts))
    else:
        length = np.fromiter(map(len, map(str.encode, texts)), np.int64, len(texts))
    return np.frombuffer(data, np.uint8), length
