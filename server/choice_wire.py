"""Every job's chosen configuration (`JobAllocation.configuration`: Sia, Pollux, and the
elastic policies' workers) written column by column (`wire_fields.Fields`), as the runtime
writes the message: a job without a choice has no field, a job with one has it (also when
every value is the default); node names repeated in a choice are summed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from apportion.server.wire_fields import Fields, Texts, attribute_columns, present_items
from apportion.server.wire_records import Ints
from apportion.solver.result import ConfigurationChoice
from apportion.v1 import allocation_service_pb2 as service_pb

_CHOICE = service_pb.ConfigurationChoice
_COLUMNS = ("type_index", "nodes", "devices", "goodput", "normalized_goodput",
            "restart_factor", "unchanged", "node_devices", "placed", "placement_detail",
            "atomic_batch_size", "accumulation_steps")


def configuration_fields(choices: Sequence[ConfigurationChoice | None], m: int,
                         type_names: Sequence[str]) -> Fields:
    """The `JobAllocation.configuration` field of each of the m jobs (none for a job without
    a choice)."""
    present, chosen = present_items(choices, m)
    count = len(chosen)
    (type_index, nodes, devices, goodput, normalized, restart, unchanged, node_devices, placed,
     details, batch, steps) = attribute_columns(chosen, _COLUMNS)

    def ints(values: tuple[int, ...]) -> Ints:
        return np.fromiter(values, np.int64, count)

    inner = Fields(count)
    inner.string(_CHOICE.ACCELERATOR_TYPE_FIELD_NUMBER, Texts(type_names), ints(type_index))
    inner.varint(_CHOICE.NODES_FIELD_NUMBER, ints(nodes))
    inner.varint(_CHOICE.DEVICES_FIELD_NUMBER, ints(devices))
    for number, values in ((_CHOICE.GOODPUT_FIELD_NUMBER, goodput),
                           (_CHOICE.NORMALIZED_GOODPUT_FIELD_NUMBER, normalized),
                           (_CHOICE.RESTART_FACTOR_FIELD_NUMBER, restart)):
        inner.double(number, np.fromiter(values, np.float64, count))
    inner.varint(_CHOICE.UNCHANGED_FIELD_NUMBER, ints(unchanged))
    inner.name_counts(_CHOICE.NODE_DEVICES_FIELD_NUMBER, node_devices)
    inner.varint(_CHOICE.PLACED_FIELD_NUMBER, ints(placed))
    inner.string(_CHOICE.PLACEMENT_DETAIL_FIELD_NUMBER, Texts(details), np.arange(count))
    inner.varint(_CHOICE.ATOMIC_BATCH_SIZE_FIELD_NUMBER, ints(batch))
    inner.varint(_CHOICE.ACCUMULATION_STEPS_FIELD_NUMBER, ints(steps))
    outer = Fields(m)
    outer.message(service_pb.JobAllocation.CONFIGURATION_FIELD_NUMBER, present, inner)
    return outer
