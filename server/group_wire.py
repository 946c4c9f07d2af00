"""The co-location groups of a plan, serialized with array operations.

Building one `ColocationGroup` message per group (and setting the group fields of its members'
`JobAllocation`s) costs 10-30 µs in Python; the 30,000-55,000 groups of a 100,000-job plan cost
0.5-1.6 s. `GroupWire` gathers the groups' fields in one pass over them; `records` writes the
`Plan.groups` records directly and `member_fields` the group fields of every `JobAllocation`
(cpus, memory_gib, slowdown, group) as bytes that `plan_wire.job_allocations` appends to each
job's record, both written field by field from columns by `wire_fields.Fields`.
Parsing the bytes gives the messages the message-by-message builder makes (tested on random
group plans).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from apportion.server.wire_fields import Fields, Texts, attribute_columns, offsets_of, records
from apportion.server.wire_records import Ints, collection_paused
from apportion.solver.groups import GroupSection
from apportion.v1 import allocation_service_pb2 as service_pb

_GROUP = service_pb.ColocationGroup
_ALLOCATION = service_pb.JobAllocation
_GROUPS_NUMBER = service_pb.Plan.GROUPS_FIELD_NUMBER


def _flat(nested: Sequence[Sequence[Any]], dtype: Any = None) -> tuple[Any, Ints]:
    """The items of every sequence one after another (an array of `dtype`, or a list), and
    each item's owner."""
    count = np.fromiter(map(len, nested), np.int64, len(nested))
    owner = np.repeat(np.arange(len(nested)), count)
    items = itertools.chain.from_iterable(nested)
    if dtype is None:
        return list(items), owner
    return np.fromiter(items, dtype, int(count.sum())), owner


_COLUMNS = ("members", "slowdown", "type_index", "devices", "node_devices", "device_ids",
            "period_s", "configurations")


class GroupWire:
    """The groups of a plan gathered once (one pass over the group objects), for
    `records` and `member_fields`."""

    def __init__(self, section: GroupSection) -> None:
        self.section = section
        self.count = count = len(section.groups)
        with collection_paused():
            members, slowdown, type_index, devices, node_devices, device_ids, period, names = (
                attribute_columns(section.groups, _COLUMNS))
            self.member, self.owner = _flat(members, np.int64)
            self.slowdown, self.slowed = _flat(slowdown, np.float64)
            self.type_index = np.fromiter(type_index, np.int64, count)
            self.devices = np.fromiter(devices, np.int64, count)
            self.node_devices: Sequence[Sequence[tuple[str, int]]] = node_devices
            self.device_ids: Sequence[Sequence[str]] = device_ids
            self.period_s = np.fromiter(period, np.float64, count)
            self.configurations: Sequence[Sequence[str]] = names

    def records(self, ids: Sequence[str], type_names: Sequence[str]) -> bytes:
        """The serialized `Plan.groups` records (`ids`: the jobs' ids, `type_names`: the
        cluster's types)."""
        count = self.count
        if not count:
            return b""
        fields = Fields(count)
        fields.strings(_GROUP.JOB_IDS_FIELD_NUMBER, Texts(ids),
                       offsets_of(np.bincount(self.owner, minlength=count)),
                       self.member)
        fields.packed_doubles(_GROUP.SLOWDOWN_FIELD_NUMBER,
                              offsets_of(np.bincount(self.slowed, minlength=count)),
                              self.slowdown)
        fields.string(_GROUP.ACCELERATOR_TYPE_FIELD_NUMBER, Texts(type_names), self.type_index)
        fields.varint(_GROUP.DEVICES_FIELD_NUMBER, self.devices)
        fields.name_counts(_GROUP.NODE_DEVICES_FIELD_NUMBER, self.node_devices)
        fields.string_lists(_GROUP.DEVICE_IDS_FIELD_NUMBER, self.device_ids)
        fields.double(_GROUP.PERIOD_S_FIELD_NUMBER, self.period_s)
        fields.string_lists(_GROUP.CONFIGURATIONS_FIELD_NUMBER, self.configurations)
        return records(_GROUPS_NUMBER, fields)

    def member_fields(self, m: int) -> Fields:
        """Per job, the `JobAllocation` fields of its group: cpus and memory_gib
        where finite, and, for a member of a group, its slowdown and group index (a job in
        two groups: the later one's)."""
        member = self.member
        kept = np.flatnonzero(member < m)[::-1]
        _, back = np.unique(member[kept], return_index=True)
        chosen = kept[back]  # each job's last place among the members
        placed = np.zeros(m, bool)
        placed[member[chosen]] = True
        fields = Fields(m)
        for number, values in ((_ALLOCATION.CPUS_FIELD_NUMBER, self.section.cpus),
                               (_ALLOCATION.MEMORY_GIB_FIELD_NUMBER, self.section.memory_gib)):
            if values is not None:
                column = np.full(m, np.nan)
                given = np.asarray(values, np.float64)[:m]
                column[:given.size] = given
                fields.double(number, column, np.isfinite(column))
        slowdown, group = np.zeros(m), np.zeros(m, np.int64)
        slowdown[member[chosen]] = self.slowdown[chosen]
        group[member[chosen]] = self.owner[chosen]
        fields.double(_ALLOCATION.SLOWDOWN_FIELD_NUMBER, slowdown, placed)
        fields.varint(_ALLOCATION.GROUP_FIELD_NUMBER, group, placed)
        return fields
