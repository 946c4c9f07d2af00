"""Every job's chosen configuration (`JobAllocation.configuration`: Sia, Pollux, and the
elastic policies' workers) written column by column (`wire_fields.Fields`), as the runtime
writes the message: a job without a choice has no field, a job with one has it (also when
every value is the default); node names repeated in a choice are summed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from apportion.server.wire_fields import Fields, Texts
from apportion.server.wire_records import Ints
from apportion.solver.result import ConfigurationChoice
from apportion.v1 import allocation_service_pb2 as service_pb

_CHOICE = service_pb.ConfigurationChoice


def configuration_fields(choices: Sequence[ConfigurationChoice | None], m: int,
                         type_names: Sequence[str]) -> Fields:
    """The `JobAllocation.configuration` field of each of the m jobs (none for a job without
    a choice)."""
    chosen = [c for c in choices[:m] if c is not None]
    present = np.zeros(m, bool)
    present[[k for k, c in enumerate(choices[:m]) if c is not None]] = True
    inner = Fields(len(chosen))

    def ints(name: str) -> Ints:
        return np.fromiter((getattr(c, name) for c in chosen), np.int64, len(chosen))

    def doubles(name: str) -> np.ndarray:
        return np.fromiter((getattr(c, name) for c in chosen), np.float64, len(chosen))

    inner.string(_CHOICE.ACCELERATOR_TYPE_FIELD_NUMBER, Texts(type_names), ints("type_index"))
    inner.varint(_CHOICE.NODES_FIELD_NUMBER, ints("nodes"))
    inner.varint(_CHOICE.DEVICES_FIELD_NUMBER, ints("devices"))
    inner.double(_CHOICE.GOODPUT_FIELD_NUMBER, doubles("goodput"))
    inner.double(_CHOICE.NORMALIZED_GOODPUT_FIELD_NUMBER, doubles("normalized_goodput"))
    inner.double(_CHOICE.RESTART_FACTOR_FIELD_NUMBER, doubles("restart_factor"))
    inner.varint(_CHOICE.UNCHANGED_FIELD_NUMBER, ints("unchanged"))
    inner.name_counts(_CHOICE.NODE_DEVICES_FIELD_NUMBER, [c.node_devices for c in chosen])
    inner.varint(_CHOICE.PLACED_FIELD_NUMBER, ints("placed"))
    details = [c.placement_detail for c in chosen]
    inner.string(_CHOICE.PLACEMENT_DETAIL_FIELD_NUMBER, Texts(details),
                 np.arange(len(chosen)))
    inner.varint(_CHOICE.ATOMIC_BATCH_SIZE_FIELD_NUMBER, ints("atomic_batch_size"))
    inner.varint(_CHOICE.ACCUMULATION_STEPS_FIELD_NUMBER, ints("accumulation_steps"))
    outer = Fields(m)
    outer.message(service_pb.JobAllocation.CONFIGURATION_FIELD_NUMBER, present, inner)
    return outer
