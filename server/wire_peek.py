"""Read one small field of a serialized message without parsing the rest.

The service hands Solve's request bytes to a worker untouched and gets response bytes back;
for its metrics and log it needs only the policy name (request field 2) and the statistics
(response field 2), which sit next to a snapshot or plan that may be megabytes long. The
top-level fields are walked by their tags and lengths, so a large field costs one skip.
"""

from __future__ import annotations

from collections.abc import Iterator

from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import policy_pb2

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


def varint_at(data: bytes, at: int) -> tuple[int, int]:
    """The varint at `at` and the position after it; ValueError when malformed."""
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def records(message: bytes, start: int = 0, end: int | None = None
            ) -> Iterator[tuple[int, int, int]]:
    """(tag, value start, value end) of each record of `message[start:end]` (a message's
    top-level fields), one by one; ValueError at a record that cannot be followed (truncated,
    a group: not in apportion.v1)."""
    end = len(message) if end is None else end
    at = start
    while at < end:
        tag, at = varint_at(message, at)
        wire_type = tag & 7
        value_start = at
        if wire_type == _VARINT:
            _, at = varint_at(message, at)
        elif wire_type == _FIXED64:
            at += 8
        elif wire_type == _FIXED32:
            at += 4
        elif wire_type == _LENGTH:
            length, value_start = varint_at(message, at)
            at = value_start + length
        else:
            raise ValueError("a group")
        if at > end:
            raise ValueError("truncated record")
        yield tag, value_start, at


def field_bytes(message: bytes, number: int) -> bytes | None:
    """The bytes of the length-delimited top-level field `number` of `message` (occurrences
    concatenated, which protobuf reads as one merged message); None when absent or when the
    bytes are not a well-formed message."""
    found: list[bytes] = []
    try:
        for tag, value_start, value_end in records(message):
            if tag == number << 3 | _LENGTH:
                found.append(message[value_start:value_end])
    except ValueError:
        return None
    return b"".join(found) if found else None


def requested_policy(request: bytes) -> str | None:
    """`policy.name` of a serialized SolveRequest; None when unreadable."""
    policy = field_bytes(request, service_pb.SolveRequest.POLICY_FIELD_NUMBER)
    if policy is None:
        return ""
    try:
        name: str = policy_pb2.Policy.FromString(policy).name
    except Exception:  # DecodeError and friends: a malformed request
        return None
    return name


def response_stats(response: bytes) -> service_pb.SolveStats | None:
    """`stats` of a serialized SolveResponse; None when absent or unreadable."""
    stats = field_bytes(response, service_pb.SolveResponse.STATS_FIELD_NUMBER)
    if stats is None:
        return None
    try:
        return service_pb.SolveStats.FromString(stats)
    except Exception:
        return None
