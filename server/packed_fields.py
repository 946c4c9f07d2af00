"""Repeated numeric fields of a message to and from numpy arrays through the wire format.

Reading a repeated field (`np.fromiter`) or filling it (`extend(tolist())`) makes a Python
number per element, 40-60 ns each: 12 ms for the 300,000 throughputs of a 100,000-job columnar
snapshot. The wire form of such a field is one packed block (a tag, a length, then the values:
little-endian doubles or floats, varints for integers and enums), which numpy reads and writes
as a whole array:

* `write_packed` merges blocks into the message; the runtime appends them to the fields as
  `extend` would;
* `read_packed` serializes the message, parses it into a message type that declares only its
  repeated numeric fields (the others become unknown fields and are dropped), serializes that
  and decodes the blocks: all but the decoding is the runtime's C code. The runtime writes
  proto3 repeated scalars packed, whichever form the client sent.

Integers are encoded as the runtime encodes them (a negative value as the 10-byte varint of its
64-bit two's complement) and decoded back to int32.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from numpy.typing import NDArray

from apportion.server.wire_peek import field_bytes

_FIXED: dict[int, np.dtype[np.floating]] = {
    FieldDescriptor.TYPE_DOUBLE: np.dtype("<f8"),
    FieldDescriptor.TYPE_FLOAT: np.dtype("<f4"),
}
_VARINT = (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_ENUM)
_LENGTH_DELIMITED = 2
_MAX_VARINT_BYTES = 10


def _varint(value: int) -> bytes:
    """The varint of one non-negative int (tags and lengths)."""
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        if not value:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def encode_varints(values: NDArray[np.integer]) -> bytes:
    """The varints of all `values`, one after another."""
    v = np.asarray(values).astype(np.int64).view(np.uint64)
    if not v.size:
        return b""
    top = int(v.max())
    if top < 0x80:  # one byte each (statuses, type indices)
        return v.astype(np.uint8).tobytes()
    size = np.ones(v.size, np.int64)
    for k in range(1, _MAX_VARINT_BYTES):
        if top < 1 << (7 * k):
            break
        size += v >= np.uint64(1 << (7 * k))
    start = np.cumsum(size) - size
    out = np.empty(int(size.sum()), np.uint8)
    for k in range(int(size.max())):
        has = size > k
        group = (v[has] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = np.where(size[has] > k + 1, 0x80, 0).astype(np.uint64)
        out[start[has] + k] = group | more
    return out.tobytes()


def decode_varints(data: bytes) -> NDArray[np.int64]:
    """The values of a block of varints, as int64 (the 64-bit two's complement)."""
    raw = np.frombuffer(data, np.uint8)
    if not raw.size:
        return np.zeros(0, np.int64)
    if raw[-1] >= 0x80:
        raise ValueError("truncated varint block")
    end = np.flatnonzero(raw < 0x80)
    start = np.concatenate([[0], end[:-1] + 1])
    size = end - start + 1
    value = np.zeros(end.size, np.uint64)
    for k in range(min(int(size.max()), _MAX_VARINT_BYTES)):
        has = size > k
        value[has] |= (raw[start[has] + k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
    return value.view(np.int64)


def _check(descriptor: Any, name: str) -> FieldDescriptor:
    """The field `name` of a message descriptor, if a repeated double, float, int32 or enum."""
    field: FieldDescriptor = descriptor.fields_by_name[name]
    if not field.is_repeated or (field.type not in _FIXED and field.type not in _VARINT):
        raise TypeError(f"{descriptor.full_name}.{name} is not a repeated double, float, int32 "
                        f"or enum field")
    return field


@functools.cache
def _numeric_only(descriptor: Descriptor) -> type[Message]:
    """A message type with the repeated numeric fields of `descriptor` (same numbers; enums as
    int32, the same on the wire) and no others."""
    shape = descriptor_pb2.DescriptorProto()
    descriptor.CopyToProto(shape)
    file = descriptor_pb2.FileDescriptorProto(
        name=f"apportion_packed/{descriptor.full_name}.proto", package="apportion_packed",
        syntax="proto3",
    )
    numeric = file.message_type.add(name=descriptor.name)
    for field in shape.field:
        if (field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
                and field.type in (*_FIXED, *_VARINT)):
            copy = numeric.field.add()
            copy.CopyFrom(field)
            if copy.type == FieldDescriptor.TYPE_ENUM:
                copy.type = descriptor_pb2.FieldDescriptorProto.TYPE_INT32
                copy.ClearField("type_name")
    return message_classes(file, (descriptor.name,))[0]


def message_classes(file: descriptor_pb2.FileDescriptorProto, names: Iterable[str]
                    ) -> tuple[type[Message], ...]:
    """The message types `names` of `file`, made in a pool of their own (stand-in types that
    read the same bytes as apportion.v1's messages with fewer fields declared)."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return tuple(message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"{file.package}.{name}")) for name in names)


def read_packed(message: Message, names: Iterable[str]) -> dict[str, NDArray[np.generic]]:
    """The repeated double, float, int32 or enum fields `names` of `message` as float64,
    float32 or int32 arrays (what iterating the field gives)."""
    descriptor = message.DESCRIPTOR
    wanted = {name: _check(descriptor, name) for name in names}
    numeric = _numeric_only(descriptor).FromString(message.SerializeToString())
    numeric.DiscardUnknownFields()
    data = numeric.SerializeToString()  # only packed numeric blocks now
    out: dict[str, NDArray[np.generic]] = {}
    for name, field in wanted.items():
        block = field_bytes(data, field.number) or b""
        if field.type in _FIXED:
            out[name] = np.frombuffer(block, _FIXED[field.type]).astype(
                _FIXED[field.type].newbyteorder("="))
        else:
            out[name] = decode_varints(block).astype(np.int32)
    return out


def write_packed(message: Message, columns: Mapping[str, NDArray[np.generic]]) -> None:
    """Append each array to the repeated double, float, int32 or enum field of its name, as
    `extend` would (float fields take the values rounded to single precision; integers must
    fit int32)."""
    parts: list[bytes] = []
    for name, values in columns.items():
        field = _check(message.DESCRIPTOR, name)
        if not np.size(values):
            continue
        if field.type in _FIXED:
            with np.errstate(over="ignore"):  # beyond single precision: inf, as the runtime
                block = np.ascontiguousarray(values, _FIXED[field.type]).tobytes()
        else:
            block = encode_varints(np.asarray(values))
        parts += [_varint(field.number << 3 | _LENGTH_DELIMITED), _varint(len(block)), block]
    if parts:
        message.MergeFromString(b"".join(parts))
