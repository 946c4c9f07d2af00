"""Many messages of one type serialized at once, field by field, with array operations.

`MessageColumns` collects the fields of m messages as columns (a value per message, and which
messages have the field), then writes every message's records in one output buffer: the
size of each message is the sum of its fields' record sizes, every record's offset is a
prefix sum, and each field is written for all messages at once. Fields are written in the
order they are added; add them in increasing field numbers to get the bytes the protobuf
runtime writes (parsing does not depend on the order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from apportion.server.wire_records import (
    I64,
    LEN,
    VARINT,
    Bytes,
    Ints,
    copy_ranges,
    put_varints,
    varint_sizes,
)

Mask = NDArray[np.bool_]
Writer = Callable[[Bytes, Ints], None]
"""Writes a field's records of the messages that have it, given their offsets."""


def utf8(texts: Sequence[str]) -> tuple[Bytes, Ints]:
    """The UTF-8 bytes of `texts` one after another, and each one's length in bytes."""
    joined = "".join(texts)
    data = joined.encode()
    if len(data) == len(joined):  # ASCII: a byte per character
        length = np.fromiter(map(len, texts), np.int64, len(texts))
    else:
        length = np.fromiter(map(len, map(str.encode, texts)), np.int64, len(texts))
    return np.frombuffer(data, np.uint8), length


def _tag(number: int, wire_type: int) -> Bytes:
    value = np.array([number << 3 | wire_type], np.int64)
    out = np.zeros(int(varint_sizes(value)[0]), np.uint8)
    put_varints(out, np.zeros(1, np.int64), value)
    return out


def _put_tag(out: Bytes, at: Ints, tag: Bytes) -> None:
    for k, byte in enumerate(tag.tolist()):
        out[at + k] = byte


class MessageColumns:
    """The fields of `count` messages, added column by column; `serialize` writes them."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._fields: list[tuple[Ints, Writer]] = []
        """Per field: each message's record bytes (0 = none), and its writer."""

    def _add(self, size: Ints, write: Writer) -> None:
        self._fields.append((size, write))

    def string(self, number: int, texts: Sequence[str]) -> None:
        """A string field (proto3 implicit presence: "" is not written)."""
        data, length = utf8(texts)
        self.bytes_field(number, data, np.cumsum(length) - length, length, length > 0)

    def bytes_field(self, number: int, data: Bytes, start: Ints, length: Ints,
                    present: Mask) -> None:
        """A length-delimited field: message k's value is data[start[k]:start[k] + length[k]],
        written where `present` (an embedded message's serialized body, a string's bytes)."""
        tag = _tag(number, LEN)
        size = np.where(present, tag.size + varint_sizes(length) + length, 0)

        def write(out: Bytes, at: Ints) -> None:
            where = at[present]
            _put_tag(out, where, tag)
            where = where + tag.size
            where += put_varints(out, where, length[present])
            copy_ranges(out, where, data, start[present], length[present])

        self._add(size, write)

    def varint(self, number: int, values: NDArray[Any], present: Mask) -> None:
        """An int32/int64/enum/bool field written where `present` (negative values as their
        64-bit two's complement, 10 bytes, as the runtime writes int32)."""
        raw = np.asarray(values, np.int64).view(np.uint64)
        tag = _tag(number, VARINT)
        size = np.where(present, tag.size + varint_sizes(raw), 0)

        def write(out: Bytes, at: Ints) -> None:
            where = at[present]
            _put_tag(out, where, tag)
            put_varints(out, where + tag.size, raw[present])

        self._add(size, write)

    def double(self, number: int, values: NDArray[Any], present: Mask) -> None:
        """A double field written where `present`."""
        value = np.asarray(values, np.float64)
        tag = _tag(number, I64)
        size = np.where(present, tag.size + 8, 0)

        def write(out: Bytes, at: Ints) -> None:
            where = at[present]
            _put_tag(out, where, tag)
            spots = (where + tag.size)[:, None] + np.arange(8)
            out[spots] = value[present].astype("<f8").view(np.uint8).reshape(-1, 8)

        self._add(size, write)

    def string_double_map(self, number: int, owner: Ints, key: Ints, key_names: Sequence[str],
                          value: NDArray[Any]) -> None:
        """A map<string, double> field: entry e of message owner[e] (entries grouped by
        message, in order) has key key_names[key[e]] and value value[e]."""
        entries = MessageColumns(owner.size)
        names = [key_names[k] for k in key.tolist()]
        entries.string(1, names)
        entries.double(2, value, np.ones(owner.size, bool))
        data, length = entries.serialize()
        tag = _tag(number, LEN)
        record = tag.size + varint_sizes(length) + length
        size = np.bincount(owner, weights=record, minlength=self.count).astype(np.int64)
        first = np.cumsum(record) - record  # each entry's place among all entries
        start = np.cumsum(length) - length

        def write(out: Bytes, at: Ints) -> None:
            if not owner.size:
                return
            counts = np.bincount(owner, minlength=self.count)
            begins = (np.cumsum(counts) - counts)[owner]  # the owner's first entry
            where = at[owner] + first - first[begins]
            _put_tag(out, where, tag)
            where = where + tag.size
            where += put_varints(out, where, length)
            copy_ranges(out, where, data, start, length)

        self._add(size, write)

    def serialize(self) -> tuple[Bytes, Ints]:
        """Every message's serialized bytes, one after another, and each one's length."""
        size = np.zeros(self.count, np.int64)
        for field_size, _ in self._fields:
            size += field_size
        out = np.zeros(int(size.sum()), np.uint8)
        at = np.cumsum(size) - size
        for field_size, write in self._fields:
            write(out, at)
            at = at + field_size
        return out, size

    def repeated(self, number: int) -> bytes:
        """The messages as the records of a repeated message field `number`."""
        data, length = self.serialize()
        outer = MessageColumns(self.count)
        outer.bytes_field(number, data, np.cumsum(length) - length, length,
                          np.ones(self.count, bool))
        return outer.serialize()[0].tobytes()
