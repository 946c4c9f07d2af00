"""Many messages of one type serialized field by field from columns (numpy arrays).

`Fields` lays out k messages: each `add`-style call appends a field (in increasing field
numbers, as the runtime writes them) with every message's size for it, and `write` places
the fields of all messages at once at their offsets of one output buffer. A field is written
as the runtime writes it: a proto3 scalar unless it is zero (a double unless its bits are
all zero: -0.0 is written), a string unless empty, a repeated string as one record per item,
a repeated number packed (omitted when empty), a message field where present (also when
empty). `records` writes each message as a record of a repeated message field.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from apportion.server.packed_fields import encode_varints
from apportion.server.wire_records import (
    I64,
    LEN,
    VARINT,
    Bytes,
    Ints,
    collection_paused,
    copy_ranges,
    put_varints,
    utf8,
    varint_sizes,
)

T = TypeVar("T")
Writer = Callable[[Bytes, Ints], None]
"""Writes a field of every message at the given offsets (one per message) of a buffer."""

SPARE = 8
"""Bytes a buffer `Fields.write` writes into needs after the messages (8-byte writes)."""

_MAP_KEY, _MAP_VALUE = 1, 2
"""The field numbers of a map entry's key and value."""


def _tag(number: int, wire_type: int) -> bytes:
    return encode_varints(np.array([number << 3 | wire_type]))


def _put_tag(out: Bytes, at: Ints, tag: bytes) -> Ints:
    """Write the tag bytes at every offset; the offsets after them."""
    for k, byte in enumerate(tag):
        out[at + k] = byte
    return at + len(tag)


def _doubles(out: Bytes) -> NDArray[np.float64]:
    """`out` read as little-endian doubles at every byte offset (the last SPARE - 1 bytes
    cannot start one)."""
    return np.ndarray((out.size - 7,), "<f8", out, 0, (1,))


class Texts:
    """A table of strings as UTF-8 bytes (`data`), each one's start and length in bytes."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.data, self.length = utf8(texts)
        self.start = np.cumsum(self.length) - self.length


def attribute_columns(items: Sequence[Any], names: Sequence[str]) -> list[tuple[Any, ...]]:
    """The attributes `names` of every item, one tuple per name (in one pass over the items,
    with the garbage collector paused while the tuples are made)."""
    with collection_paused():
        columns = list(zip(*map(operator.attrgetter(*names), items), strict=True))
    return columns or [()] * len(names)


def present_items(items: Sequence[T | None], m: int) -> tuple[NDArray[np.bool_], list[T]]:
    """Which of m messages have an item (none beyond `items`), and those items in order."""
    listed = min(len(items), m)
    present = np.zeros(m, bool)
    present[:listed] = np.fromiter((item is not None for item in items[:listed]), bool, listed)
    return present, [item for item in items[:listed] if item is not None]


def offsets_of(counts: Ints) -> Ints:
    """CSR offsets (message r's items are offsets[r]:offsets[r + 1]) from each message's
    count of items."""
    offsets = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


def item_offsets(offsets: Ints, size: Ints) -> Ints:
    """Where each CSR item (message r's items are offsets[r]:offsets[r + 1]) starts from its
    message's first item, given every item's size."""
    before = np.cumsum(size) - size
    count = np.diff(offsets)
    return before - np.repeat(before[offsets[:-1][count > 0]], count[count > 0])


class Fields:
    """The fields of `count` messages of one type, added in increasing field numbers."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.size: Ints = np.zeros(count, np.int64)
        """Each message's size so far (bytes)."""
        self._fields: list[tuple[Ints, Writer]] = []

    def _add(self, size: Ints, writer: Writer) -> None:
        self._fields.append((self.size.copy(), writer))
        self.size += size

    def then(self, other: Fields) -> None:
        """Append `other`'s fields (of as many messages) after these."""
        self._fields += [(self.size + before, writer) for before, writer in other._fields]
        self.size = self.size + other.size

    def bodies(self) -> tuple[Bytes, Ints]:
        """The messages' bytes one after another (no tags or lengths), and each one's length
        in them."""
        out = np.zeros(int(self.size.sum()) + SPARE, np.uint8)
        self.write(out, np.cumsum(self.size) - self.size)
        return out[:-SPARE], self.size

    def write(self, out: Bytes, at: Ints) -> None:
        """Write every message's fields, message k from offset at[k] on (`out` holds SPARE
        bytes after the last message)."""
        for before, writer in self._fields:
            writer(out, at + before)

    def varint(self, number: int, values: NDArray[np.integer] | NDArray[np.bool_],
               present: NDArray[np.bool_] | None = None) -> None:
        """An integer, enum or bool field (negative values as 10-byte varints); written
        unless zero, or where `present` for a field with explicit presence."""
        values = np.asarray(values).astype(np.int64)
        tag = _tag(number, VARINT)
        write = values != 0 if present is None else present
        size = np.where(write, len(tag) + varint_sizes(values), 0)

        def put(out: Bytes, at: Ints) -> None:
            put_varints(out, _put_tag(out, at[write], tag), values[write])

        self._add(size, put)

    def double(self, number: int, values: NDArray[np.float64],
               present: NDArray[np.bool_] | None = None) -> None:
        """A double field, written unless all its bits are zero, or where `present` for a
        field with explicit presence."""
        values = np.asarray(values, np.float64)
        tag = _tag(number, I64)
        write = values.view(np.uint64) != 0 if present is None else present

        def put(out: Bytes, at: Ints) -> None:
            _doubles(out)[_put_tag(out, at[write], tag)] = values[write]

        self._add((len(tag) + 8) * write, put)

    def string(self, number: int, table: Texts, which: Ints, always: bool = False) -> None:
        """A string field: message k's string is table's `which[k]` (-1 = none); written
        unless empty, or for every message with `always` (a map entry's key)."""
        tag = _tag(number, LEN)
        length = np.zeros(self.count, np.int64)
        length[which >= 0] = table.length[which[which >= 0]]
        write = np.ones(self.count, bool) if always else length > 0
        size = np.where(write, len(tag) + varint_sizes(length) + length, 0)

        def put(out: Bytes, at: Ints) -> None:
            _put_strings(out, _put_tag(out, at[write], tag), table, which[write])

        self._add(size, put)

    def string_lists(self, number: int, lists: Sequence[Sequence[str]]) -> None:
        """A repeated string field: message k's strings are `lists[k]`."""
        flat = list(itertools.chain.from_iterable(lists))
        self.strings(number, Texts(flat), offsets_of(np.fromiter(map(len, lists), np.int64,
                                                                 len(lists))),
                     np.arange(len(flat)))

    def strings(self, number: int, table: Texts, offsets: Ints, which: Ints) -> None:
        """A repeated string field: message k's strings are table's `which[offsets[k]:
        offsets[k + 1]]`, a record each."""
        tag = _tag(number, LEN)
        length = table.length[which]
        item_size = len(tag) + varint_sizes(length) + length
        owner = np.repeat(np.arange(self.count), np.diff(offsets))
        within = item_offsets(offsets, item_size)

        def put(out: Bytes, at: Ints) -> None:
            _put_strings(out, _put_tag(out, at[owner] + within, tag), table, which)

        self._add(np.bincount(owner, item_size, self.count).astype(np.int64), put)

    def packed_varints(self, number: int, offsets: Ints, values: NDArray[np.integer]) -> None:
        """A repeated integer field, packed: message k's values[offsets[k]:offsets[k + 1]]."""
        values = np.asarray(values).astype(np.int64)
        item_size = varint_sizes(values)

        def put(out: Bytes, at: Ints) -> None:
            put_varints(out, at, values)

        self._packed(number, offsets, item_size, put)

    def packed_doubles(self, number: int, offsets: Ints, values: NDArray[np.float64]) -> None:
        """A repeated double field, packed: message k's values[offsets[k]:offsets[k + 1]]."""

        def put(out: Bytes, at: Ints) -> None:
            _doubles(out)[at] = values

        self._packed(number, offsets, np.full(values.size, 8, np.int64), put)

    def _packed(self, number: int, offsets: Ints, item_size: Ints, put_items: Writer) -> None:
        tag = _tag(number, LEN)
        owner = np.repeat(np.arange(self.count), np.diff(offsets))
        payload = np.bincount(owner, item_size, self.count).astype(np.int64)
        write = payload > 0
        head = len(tag) + varint_sizes(payload)
        within = item_offsets(offsets, item_size)

        def put(out: Bytes, at: Ints) -> None:
            put_varints(out, _put_tag(out, at[write], tag), payload[write])
            put_items(out, (at + head)[owner] + within)

        self._add(np.where(write, head + payload, 0), put)

    def message(self, number: int, present: NDArray[np.bool_], inner: Fields) -> None:
        """A message field, set for the messages `present`; `inner` holds their values (its
        message k is the k-th present one)."""
        tag = _tag(number, LEN)
        size = np.zeros(self.count, np.int64)
        size[present] = len(tag) + varint_sizes(inner.size) + inner.size

        def put(out: Bytes, at: Ints) -> None:
            here = _put_tag(out, at[present], tag)
            inner.write(out, here + put_varints(out, here, inner.size))

        self._add(size, put)

    def messages(self, number: int, offsets: Ints, inner: Fields) -> None:
        """A repeated message field (a map is one: its entries are messages of a key and a
        value): message k's items are inner's messages offsets[k]:offsets[k + 1]."""
        tag = _tag(number, LEN)
        item_size = len(tag) + varint_sizes(inner.size) + inner.size
        owner = np.repeat(np.arange(self.count), np.diff(offsets))
        within = item_offsets(offsets, item_size)

        def put(out: Bytes, at: Ints) -> None:
            here = _put_tag(out, at[owner] + within, tag)
            inner.write(out, here + put_varints(out, here, inner.size))

        self._add(np.bincount(owner, item_size, self.count).astype(np.int64), put)


    def name_counts(self, number: int, pairs: Sequence[Sequence[tuple[str, int]]]) -> None:
        """A map<string, int32> field from (name, count) pairs per message: a name given
        twice in a message adds up, at the place of its first naming (as a builder's
        `map[name] += count`, whose entries keep their first insertion's order); counts wrap
        to int32."""
        count = np.fromiter(map(len, pairs), np.int64, len(pairs))
        if not count.any():
            return
        owner = np.repeat(np.arange(len(pairs)), count)
        flat = list(itertools.chain.from_iterable(pairs))
        names = [name for name, _ in flat]
        values = np.fromiter((value for _, value in flat), np.int64, len(flat))
        unique, code = np.unique(np.array(names, object), return_inverse=True)
        _, first, where = np.unique(owner * unique.size + code, return_index=True,
                                    return_inverse=True)
        total = np.bincount(where, weights=values, minlength=first.size).astype(np.int64)
        total = (total + 2**31) % 2**32 - 2**31  # int32, as the map's values
        order = np.argsort(first, kind="stable")
        entries = Fields(order.size)  # key and value also at their defaults, as the runtime
        entries.string(_MAP_KEY, Texts([str(n) for n in unique.tolist()]), code[first[order]],
                       always=True)
        entries.varint(_MAP_VALUE, total[order], np.ones(order.size, bool))
        self.messages(number, offsets_of(np.bincount(owner[first[order]], minlength=self.count)),
                      entries)


FEW_STRINGS = 16
"""A table of at most this many strings (type names) is written string by string."""


def _put_strings(out: Bytes, at: Ints, table: Texts, which: Ints) -> None:
    """Write the length and bytes of table's strings `which` at offsets `at`."""
    if table.length.size > FEW_STRINGS:
        length = table.length[which]
        copy_ranges(out, at + put_varints(out, at, length), table.data, table.start[which],
                    length)
        return
    for j in range(table.length.size):  # each string's record bytes, a byte at a time
        mine = at[which == j]
        start, size = int(table.start[j]), int(table.length[j])
        record = encode_varints(np.array([size])) + table.data[start:start + size].tobytes()
        for k, byte in enumerate(record):
            out[mine + k] = byte


def records(number: int, fields: Fields) -> bytes:
    """The messages as records of a repeated message field `number`, one after another."""
    if not fields.count:
        return b""
    tag = _tag(number, LEN)
    head = len(tag) + varint_sizes(fields.size)
    total = head + fields.size
    at = np.cumsum(total) - total
    out = np.zeros(int(total.sum()) + SPARE, np.uint8)
    here = _put_tag(out, at, tag)
    fields.write(out, here + put_varints(out, here, fields.size))
    return out[:-SPARE].tobytes()
