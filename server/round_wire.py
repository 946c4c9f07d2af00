"""A time-share plan's round schedule (`Plan.rounds`) written from columns.

Adding a `RoundGrant` message per grant costs about 1.4 µs in Python: Gandiva_fair's stride
schedule at 100,000 jobs has 157,000 grants (0.36 s of its response). `round_records` gathers
the grants' fields in one pass and writes the records with `wire_fields.Fields`; parsing them
gives the messages the builder makes (tested on random schedules).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from apportion.server.wire_fields import Fields, Texts, attribute_columns, offsets_of, records
from apportion.solver.result import ScheduledRound
from apportion.v1 import allocation_service_pb2 as service_pb

_ROUND = service_pb.Round
_GRANT = service_pb.RoundGrant
_COLUMNS = ("job", "type_index", "devices", "nodes", "colocated_with", "lease_extended")


def round_records(rounds: Sequence[ScheduledRound], ids: Sequence[str],
                  type_names: Sequence[str]) -> bytes:
    """The serialized `Plan.rounds` records (`ids`: the jobs', `type_names`: the cluster's);
    the placement stage's devices are not written (a plan with them goes through messages)."""
    if not rounds:
        return b""
    counts = np.fromiter((len(r.grants) for r in rounds), np.int64, len(rounds))
    grants = list(itertools.chain.from_iterable(r.grants for r in rounds))
    count = len(grants)
    job, type_index, devices, nodes, colocated_with, lease_extended = attribute_columns(
        grants, _COLUMNS)
    ids_table = Texts(ids)
    inner = Fields(count)
    inner.string(_GRANT.JOB_ID_FIELD_NUMBER, ids_table, np.fromiter(job, np.int64, count))
    inner.string(_GRANT.ACCELERATOR_TYPE_FIELD_NUMBER, Texts(type_names),
                 np.fromiter(type_index, np.int64, count))
    inner.varint(_GRANT.DEVICES_FIELD_NUMBER, np.fromiter(devices, np.int64, count))
    inner.string_lists(_GRANT.NODES_FIELD_NUMBER, nodes)
    inner.string(_GRANT.COLOCATED_WITH_FIELD_NUMBER, ids_table,
                 np.fromiter(colocated_with, np.int64, count))
    inner.varint(_GRANT.LEASE_EXTENDED_FIELD_NUMBER, np.fromiter(lease_extended, bool, count))
    outer = Fields(len(rounds))
    outer.varint(_ROUND.INDEX_FIELD_NUMBER, np.fromiter((r.index for r in rounds), np.int64,
                                                        len(rounds)))
    outer.messages(_ROUND.GRANTS_FIELD_NUMBER, offsets_of(counts), inner)
    return records(service_pb.Plan.ROUNDS_FIELD_NUMBER, outer)

