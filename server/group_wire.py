"""The co-location groups of a plan, serialized with array operations.

Building one `ColocationGroup` message per group (and setting the group fields of its members'
`JobAllocation`s) costs 10-30 µs in Python; the 30,000-55,000 groups of a 100,000-job plan cost
0.5-1.6 s. `GroupWire` gathers the groups' fields in one pass over them; `records` writes the
`Plan.groups` records directly and `member_fields` the group fields of every `JobAllocation`
(cpus, memory_gib, slowdown, group) as bytes that `plan_wire.job_allocations` appends to each
job's record. Each field's items are sized for all groups at once, laid out group after group
in field-number order as the runtime writes them (map entries with key and value), and
written field by field with array operations.
Parsing the bytes gives the messages the message-by-message builder makes (tested on random
group plans).
"""

from __future__ import annotations

import itertools
import operator
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
    collection_paused,
    copy_ranges,
    put_varints,
    utf8,
    varint_sizes,
)
from apportion.solver.groups import GroupSection
from apportion.v1 import allocation_service_pb2 as service_pb

_GROUP = service_pb.ColocationGroup
_ALLOCATION = service_pb.JobAllocation
_GROUPS_NUMBER = service_pb.Plan.GROUPS_FIELD_NUMBER
_MAP_KEY, _MAP_VALUE = 1, 2


def _tag(number: int, wire_type: int) -> bytes:
    return _varint_bytes(number << 3 | wire_type)


def _varint_bytes(value: int) -> bytes:
    out = np.zeros(10, np.uint8)
    size = int(put_varints(out, np.zeros(1, np.int64), np.array([value]))[0])
    return out[:size].tobytes()


Writer = Callable[[Bytes, Ints], None]
"""Writes a field's items at the given offsets of the output."""


class _Fields:
    """The fields of many records (each record a message), added in field-number order: per
    field, its items (each owned by one record, in record order) with their sizes and a
    writer. `records` and `bodies` lay them out record after record, each record's fields in
    the order added."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._fields: list[tuple[Ints, Ints, Writer]] = []

    def add(self, owner: Ints, size: Ints, write: Writer) -> None:
        """A field's items: their records (ascending), sizes in bytes and writer."""
        if owner.size:
            self._fields.append((owner, size, write))

    def fixed(self, owner: Ints, head: bytes, values: NDArray[np.float64]) -> None:
        """Items of `head` then a double each (8 bytes, the bits as they are)."""
        bits = np.ascontiguousarray(values, np.float64).view(np.uint64)

        def write(out: Bytes, at: Ints) -> None:
            _put(out, at, head)
            np.ndarray((out.size - 7,), "<u8", out, 0, (1,))[at + len(head)] = bits

        self.add(owner, np.full(owner.size, len(head) + 8, np.int64), write)

    def varints(self, owner: Ints, head: bytes, values: Ints) -> None:
        """Items of `head` then a varint each (two's complement of negative values)."""
        words = np.asarray(values, np.int64).view(np.uint64)

        def write(out: Bytes, at: Ints) -> None:
            _put(out, at, head)
            put_varints(out, at + len(head), words)

        self.add(owner, len(head) + varint_sizes(words), write)

    def strings(self, owner: Ints, head: bytes, data: Bytes, start: Ints, length: Ints
                ) -> None:
        """Length-delimited records: `head` (the tag), the length, then the bytes
        data[start:start + length]."""
        size = len(head) + varint_sizes(length)

        def write(out: Bytes, at: Ints) -> None:
            _put(out, at, head)
            put_varints(out, at + len(head), length)
            copy_ranges(out, at + size, data, start, length)

        self.add(owner, size + length, write)

    def _sizes(self) -> Ints:
        size = np.zeros(self.count, np.int64)
        for owner, item, _ in self._fields:
            size += np.bincount(owner, weights=item, minlength=self.count).astype(np.int64)
        return size

    def _write(self, out: Bytes, start: Ints) -> None:
        """Write every field's items, each record's from its offset `start`."""
        here = start.copy()
        for owner, size, write in self._fields:
            before = np.cumsum(size) - size
            first = np.searchsorted(owner, owner)  # the first item of each item's record
            write(out, here[owner] + before - before[first])
            here += np.bincount(owner, weights=size, minlength=self.count).astype(np.int64)

    def bodies(self) -> tuple[Bytes, Ints]:
        """The records' fields without tags and lengths, one record after another, and each
        record's length."""
        size = self._sizes()
        out = np.zeros(int(size.sum()) + 8, np.uint8)  # 8 spare bytes for the word views
        self._write(out, np.cumsum(size) - size)
        return out[:-8], size

    def records(self, tag: bytes) -> bytes:
        """Every record (empty ones too), each behind `tag` and its length."""
        body = self._sizes()
        head = len(tag) + varint_sizes(body)
        start = np.cumsum(head + body) - body
        out = np.zeros(int((head + body).sum()) + 8, np.uint8)
        self._write(out, start)
        _put(out, start - head, tag)
        put_varints(out, start - head + len(tag), body)
        return out[:-8].tobytes()


def _put(out: Bytes, at: Ints, head: bytes) -> None:
    for k, byte in enumerate(head):
        out[at + k] = byte


def _flat(nested: Sequence[Sequence[Any]], dtype: Any = None) -> tuple[Any, Ints]:
    """The items of every sequence one after another (an array of `dtype`, or a list), and
    each item's owner."""
    count = np.fromiter(map(len, nested), np.int64, len(nested))
    owner = np.repeat(np.arange(len(nested)), count)
    items = itertools.chain.from_iterable(nested)
    if dtype is None:
        return list(items), owner
    return np.fromiter(items, dtype, int(count.sum())), owner


_COLUMNS = operator.attrgetter("members", "slowdown", "type_index", "devices", "node_devices",
                               "device_ids", "period_s", "configurations")


class GroupWire:
    """The groups of a plan gathered once (one pass over the group objects), for
    `records` and `member_fields`."""

    def __init__(self, section: GroupSection) -> None:
        self.section = section
        self.count = count = len(section.groups)
        with collection_paused():
            columns = list(zip(*map(_COLUMNS, section.groups), strict=True)) or [()] * 8
            members, slowdown, type_index, devices, node_devices, device_ids, period, names = (
                columns)
            self.member, self.owner = _flat(members, np.int64)
            self.slowdown, self.slowed = _flat(slowdown, np.float64)
            self.type_index = np.fromiter(type_index, np.int64, count)
            self.devices = np.fromiter(devices, np.int64, count)
            self.node_devices: Sequence[Sequence[tuple[str, int]]] = node_devices
            self.device_ids, self.device_owner = _flat(device_ids)
            self.period_s = np.fromiter(period, np.float64, count)
            self.configurations, self.configuration_owner = _flat(names)

    def records(self, ids: Sequence[str], type_names: Sequence[str]) -> bytes:
        """The serialized `Plan.groups` records (`ids`: the jobs' ids, `type_names`: the
        cluster's types)."""
        count = self.count
        if not count:
            return b""
        fields = _Fields(count)
        member = self.member
        id_data, id_length = utf8(ids)
        id_start = np.cumsum(id_length) - id_length
        fields.strings(self.owner, _tag(_GROUP.JOB_IDS_FIELD_NUMBER, LEN), id_data,
                       id_start[member], id_length[member])
        if self.slowed.size:  # packed: one record per group with members
            per_group = np.bincount(self.slowed, minlength=count)
            has = np.flatnonzero(per_group)
            fields.strings(has, _tag(_GROUP.SLOWDOWN_FIELD_NUMBER, LEN),
                           self.slowdown.view(np.uint8),
                           8 * (np.cumsum(per_group) - per_group)[has], 8 * per_group[has])
        type_index = self.type_index
        type_data, type_length = utf8(type_names)
        type_start = np.cumsum(type_length) - type_length
        named = np.concatenate([type_length > 0, [False]])  # index -1: none
        typed = np.flatnonzero((type_index >= 0) & named[type_index])
        fields.strings(typed, _tag(_GROUP.ACCELERATOR_TYPE_FIELD_NUMBER, LEN), type_data,
                       type_start[type_index[typed]], type_length[type_index[typed]])
        held = np.flatnonzero(self.devices)
        fields.varints(held, _tag(_GROUP.DEVICES_FIELD_NUMBER, VARINT), self.devices[held])
        _node_devices(fields, self.node_devices)
        _texts(fields, self.device_owner, _GROUP.DEVICE_IDS_FIELD_NUMBER, self.device_ids)
        timed = np.flatnonzero(self.period_s.view(np.uint64))  # +0.0 only is left out
        fields.fixed(timed, _tag(_GROUP.PERIOD_S_FIELD_NUMBER, I64), self.period_s[timed])
        _texts(fields, self.configuration_owner, _GROUP.CONFIGURATIONS_FIELD_NUMBER,
               self.configurations)
        return fields.records(_tag(_GROUPS_NUMBER, LEN))

    def member_fields(self, m: int) -> tuple[Bytes, Ints]:
        """Per job, the serialized `JobAllocation` fields of its group: cpus and memory_gib
        where finite, and, for a member of a group, its slowdown and group index (a job in
        two groups: the later one's). The bytes, and each job's length in them (jobs in
        order)."""
        member = self.member
        kept = np.flatnonzero(member < m)[::-1]
        _, back = np.unique(member[kept], return_index=True)
        chosen = kept[back]  # each job's last place among the members
        placed = member[chosen]  # ascending
        fields = _Fields(m)
        for number, values in ((_ALLOCATION.CPUS_FIELD_NUMBER, self.section.cpus),
                               (_ALLOCATION.MEMORY_GIB_FIELD_NUMBER, self.section.memory_gib)):
            if values is not None:
                column = np.asarray(values, np.float64)[:m]
                finite = np.flatnonzero(np.isfinite(column))
                fields.fixed(finite, _tag(number, I64), column[finite])
        fields.fixed(placed, _tag(_ALLOCATION.SLOWDOWN_FIELD_NUMBER, I64),
                     self.slowdown[chosen])
        fields.varints(placed, _tag(_ALLOCATION.GROUP_FIELD_NUMBER, VARINT),
                       self.owner[chosen])
        return fields.bodies()


def _texts(fields: _Fields, owner: Ints, number: int, texts: Sequence[str]) -> None:
    """A repeated string field's records."""
    if texts:
        data, length = utf8(texts)
        fields.strings(owner, _tag(number, LEN), data, np.cumsum(length) - length, length)


def _node_devices(fields: _Fields, node_devices: Sequence[Sequence[tuple[str, int]]]) -> None:
    """`ColocationGroup.node_devices` map entries (key and value, as the runtime writes them):
    a node named twice in a group adds up, at the place of its first naming (as the
    builder's `map[node] += devices`)."""
    pairs, owner = _flat(node_devices)
    if not pairs:
        return
    names = [node for node, _ in pairs]  # type: ignore[misc]
    devices = np.fromiter((d for _, d in pairs), np.int64, len(pairs))  # type: ignore[misc]
    unique, code = np.unique(np.array(names, object), return_inverse=True)
    _, first, where = np.unique(owner * unique.size + code, return_index=True,
                                return_inverse=True)
    total = np.bincount(where, weights=devices, minlength=first.size).astype(np.int64)
    total = (total + 2**31) % 2**32 - 2**31  # int32, as the map's values
    order = np.argsort(first, kind="stable")
    entry_owner, entry_code = owner[first[order]], code[first[order]]
    key_data, key_length = utf8([str(n) for n in unique.tolist()])
    key_start = (np.cumsum(key_length) - key_length)[entry_code]
    key_length = key_length[entry_code]
    value = total[order].view(np.uint64)
    body = 1 + varint_sizes(key_length) + key_length + 1 + varint_sizes(value)
    head = _tag(_GROUP.NODE_DEVICES_FIELD_NUMBER, LEN)

    def write(out: Bytes, at: Ints) -> None:
        _put(out, at, head)
        at = at + len(head) + put_varints(out, at + len(head), body)
        out[at] = _MAP_KEY << 3 | LEN
        at = at + 1 + put_varints(out, at + 1, key_length)
        copy_ranges(out, at, key_data, key_start, key_length)
        at = at + key_length
        out[at] = _MAP_VALUE << 3 | VARINT
        put_varints(out, at + 1, value)

    fields.add(entry_owner, len(head) + varint_sizes(body) + body, write)
