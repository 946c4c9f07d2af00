"""Small fields read from serialized messages without parsing them (`apportion.server.wire_peek`)
give what the runtime reads: a message given in parts is merged, a record of the same number
with another wire type is an unknown field, malformed bytes give None."""

from __future__ import annotations

import pytest

from apportion.server.wire_peek import field_bytes, records, requested_policy
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import policy_pb2

VARINT, I64, LEN, START_GROUP, I32 = 0, 1, 2, 3, 5


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def record(number: int, wire_type: int, payload: bytes) -> bytes:
    head = varint(number << 3 | wire_type)
    return head + (varint(len(payload)) + payload if wire_type == LEN else payload)


POLICY = service_pb.SolveRequest.POLICY_FIELD_NUMBER
SNAPSHOT = record(1, LEN, record(1, I64, b"\x00" * 8))
CASES = {
    "plain": SNAPSHOT + record(POLICY, LEN, record(1, LEN, b"max_min")),
    "in two parts": record(POLICY, LEN, record(1, LEN, b"first")) + SNAPSHOT
    + record(POLICY, LEN, record(1, LEN, b"second")),
    "the number as a varint, then as a message": record(POLICY, VARINT, b"\x05")
    + record(POLICY, LEN, record(1, LEN, b"kept")),
    "the number as fixed64 and fixed32 only": record(POLICY, I64, b"\x01" * 8)
    + record(POLICY, I32, b"\x01" * 4),
    "absent": SNAPSHOT + record(999, LEN, b"x"),
}


@pytest.mark.parametrize("name", CASES)
def test_the_field_is_what_the_runtime_reads(name: str) -> None:
    data = CASES[name]
    parsed = service_pb.SolveRequest.FromString(data)
    found = field_bytes(data, POLICY)
    assert (found is not None) == parsed.HasField("policy")
    assert policy_pb2.Policy.FromString(found or b"") == parsed.policy
    assert requested_policy(data) == parsed.policy.name


def test_records_cover_the_message() -> None:
    data = CASES["in two parts"]
    spans = list(records(data))
    assert [tag >> 3 for tag, _, _ in spans] == [POLICY, 1, POLICY]
    assert spans[-1][2] == len(data)
    _, first_start, first_end = spans[0]
    assert data[first_start:first_end] == record(1, LEN, b"first")


@pytest.mark.parametrize("data", [record(POLICY, LEN, b"ab")[:-1], b"\x80",
                                  record(7, START_GROUP, b"")])
def test_malformed_bytes_give_none(data: bytes) -> None:
    assert field_bytes(data, POLICY) is None
    assert requested_policy(data) is None or requested_policy(data) == ""
    with pytest.raises(ValueError):
        list(records(data))
