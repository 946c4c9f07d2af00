"""`Job.configurations` of many jobs read at the wire level, as numpy columns.

A snapshot for sia or pollux lists a dozen configurations per job; reading them message by
message costs about 3 µs each in Python (100,000 jobs: 4-5 s). Their serialized bytes hold
the same values: `read_entries` takes the `configurations` records (found by the job
decoder's walk, `apportion.server.job_wire`), and gathers type names (matched to the
cluster's by their bytes), nodes, devices and goodputs with array operations, a block of
jobs at a time.

Only what is written the plain way is read here: a configuration of at most its four
fields, each once, with their declared wire types, and a type name of the cluster. A job
with anything else in a configuration is left `unread`, for the caller to read from its
message (where the runtime has applied protobuf's rules and violations get their field
paths).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from apportion.server.wire_records import (
    I64,
    LEN,
    VARINT,
    WALK_BLOCK,
    Ints,
    WireBuffer,
    doubles_at,
    int32_of,
    records,
)
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.v1 import snapshot_pb2 as snapshot_pb

_CONFIGURATION = snapshot_pb.ConfigurationGoodput.DESCRIPTOR.fields_by_name
CONFIGURATIONS_TAG = snapshot_pb.Job.CONFIGURATIONS_FIELD_NUMBER << 3 | LEN
_TYPE_TAG = _CONFIGURATION["accelerator_type"].number << 3 | LEN
_NODES_TAG = _CONFIGURATION["nodes"].number << 3 | VARINT
_DEVICES_TAG = _CONFIGURATION["devices"].number << 3 | VARINT
_GOODPUT_TAG = _CONFIGURATION["goodput"].number << 3 | I64
_FIELDS = (_TYPE_TAG, _NODES_TAG, _DEVICES_TAG, _GOODPUT_TAG)


@dataclass(frozen=True)
class WireConfigurations:
    """The configurations of the jobs read (those not in `unread`), job by job in order;
    absent fields are 0 (a type name not of the cluster makes its job unread)."""

    unread: NDArray[np.bool_]
    """Per given job: to be read from its message."""
    job: Ints
    """Each entry's job (index among the given jobs)."""
    type_index: Ints
    """The cluster's index of the entry's type name (the last of equal names)."""
    nodes: Ints
    devices: Ints
    goodput: NDArray[np.float64]


def read_entries(buf: WireBuffer, job: Ints, start: Ints, stop: Ints, count: int,
                 type_names: Sequence[str], deadline: Deadline = NO_DEADLINE
                 ) -> WireConfigurations:
    """The configurations whose values are `buf[start[k]:stop[k]]`, of jobs `job[k]` (in
    [0, count)), each job's in record order; read a block of `WALK_BLOCK` jobs at a time (a
    block's arrays stay in the processor's caches), cheapest when the records come block by
    block, as `walk` gives them. Raises `DeadlineExpiredError` once `deadline` passes (read
    between blocks)."""
    block = job // WALK_BLOCK
    if block.size and not (block[1:] >= block[:-1]).all():
        order = np.argsort(block, kind="stable")
        job, start, stop, block = job[order], start[order], stop[order], block[order]
    bounds = np.searchsorted(block, np.arange(-(-count // WALK_BLOCK) + 1)).tolist()
    unread = np.zeros(count, bool)
    parts: list[tuple[Ints, ...]] = []
    for lo, hi in itertools.pairwise(bounds):
        deadline.check()
        if lo < hi:
            parts.append(_read_block(buf, job[lo:hi], start[lo:hi], stop[lo:hi], type_names,
                                     unread))
    if not parts:
        empty = np.zeros(0, np.int64)
        return WireConfigurations(unread, empty, empty, empty, empty, np.zeros(0))
    columns = [np.concatenate(column) if len(parts) > 1 else column[0]
               for column in zip(*parts, strict=True)]
    return WireConfigurations(unread, *columns)


_ENTRY_COLUMNS = ("job", "type_index", "nodes", "devices", "goodput")


def _read_block(buf: WireBuffer, job: Ints, start: Ints, stop: Ints,
                type_names: Sequence[str], unread: NDArray[np.bool_]) -> tuple[Ints, ...]:
    """`read_entries`' columns for the entries of one block of jobs; jobs with an entry it
    cannot read are marked in `unread` (and their entries left out)."""
    order = np.argsort(job, kind="stable")  # job by job, in record order
    job, start, stop = job[order], start[order], stop[order]
    plain, columns = _plain_layout(buf, start, stop)
    odd = ~plain
    if odd.any():  # written another way: walk their records
        other = np.flatnonzero(odd)
        odd[other], found = _fields(buf, start[other], stop[other])
        for column, values in zip(columns, found, strict=True):
            column[other] = values
    name_at, name_length, nodes, devices, goodput_at = columns
    named = np.flatnonzero(name_at > 0)
    type_index = np.full(job.size, -1, np.int64)
    type_index[named] = _match_names(buf, name_at[named], name_length[named], type_names)
    odd |= type_index < 0  # no name, or not a name of the cluster
    unread[job[odd]] = True
    goodput = np.where(goodput_at > 0, doubles_at(buf, goodput_at), 0.0)
    keep = ~unread[job]
    return job[keep], type_index[keep], nodes[keep], devices[keep], goodput[keep]


def _plain_layout(buf: WireBuffer, start: Ints, stop: Ints
                  ) -> tuple[NDArray[np.bool_], list[Ints]]:
    """Which configurations `buf[start:stop]` are written as serializers write them, every
    field once, in order, with one-byte lengths and varints (`0A len name 10 nodes 18
    devices 21 goodput`), and `_fields`' columns (meaningless for the others)."""
    name_length = buf.bytes.take(start + 1).astype(np.int64)  # the padding: never past it
    before_nodes = np.minimum(start + name_length, buf.size)  # 2 + name: the nodes' tag
    plain = (stop - start - 15 == name_length) & (name_length < 0x80)
    plain &= buf.bytes.take(start) == _TYPE_TAG
    for offset, tag in ((2, _NODES_TAG), (4, _DEVICES_TAG), (6, _GOODPUT_TAG)):
        plain &= buf.bytes.take(before_nodes + offset) == tag
    nodes = buf.bytes.take(before_nodes + 3).astype(np.int64)
    devices = buf.bytes.take(before_nodes + 5).astype(np.int64)
    plain &= (nodes < 0x80) & (devices < 0x80)
    return plain, [start + 2, name_length, nodes, devices, before_nodes + 7]


def _fields(buf: WireBuffer, start: Ints, stop: Ints
            ) -> tuple[NDArray[np.bool_], list[Ints]]:
    """Which configurations `buf[start:stop]` have another field, a field twice or a record
    the walk cannot follow; and their columns: the type name's offset (0 = absent) and
    length, nodes and devices (as int32 fields read them, 0 = absent) and the goodput's
    offset (0 = absent)."""
    odd = np.zeros(start.size, bool)
    parts = records(buf, start, stop, len(_FIELDS), odd)
    slot = np.full(parts.tag.size, -1, np.int64)
    for k, tag in enumerate(_FIELDS):
        slot[parts.tag == tag] = k
    odd[parts.owner[slot < 0]] = True  # another field, or a field with another wire type
    known = slot >= 0
    owner, slot = parts.owner[known], slot[known]
    twice = np.bincount(owner * len(_FIELDS) + slot, minlength=start.size * len(_FIELDS)) > 1
    odd[np.flatnonzero(twice) // len(_FIELDS)] = True
    at = np.zeros((len(_FIELDS), start.size), np.int64)  # value start, 0 = absent
    at[slot, owner] = parts.start[known]
    value = np.zeros((len(_FIELDS), start.size), np.int64)
    value[slot, owner] = np.where(parts.tag[known] & 7 == VARINT, int32_of(parts.varint[known]),
                                  parts.end[known] - parts.start[known])
    return odd, [at[0], value[0], value[1], value[2], at[3]]


_LOW_BYTES = np.array([(1 << 8 * k) - 1 for k in range(9)], np.uint64)
"""_LOW_BYTES[k]: the mask of the first k bytes of a little-endian 64-bit word."""
_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


def _words(buf: WireBuffer, start: Ints, length: Ints, words: int) -> NDArray[np.uint64]:
    """The bytes `buf[start:start + length]` of each span as `words` little-endian 64-bit
    words, zero after the span (spans longer than 8 x `words` bytes are cut)."""
    last = buf.u64.size - 1
    out = np.empty((start.size, words), np.uint64)
    for k in range(words):
        out[:, k] = (buf.u64[np.minimum(start + 8 * k, last)]
                     & _LOW_BYTES.take(np.clip(length - 8 * k, 0, 8)))
    return out


def _hash(words: NDArray[np.uint64], length: Ints) -> NDArray[np.uint64]:
    h = length.astype(np.uint64)
    with np.errstate(over="ignore"):
        for k in range(words.shape[1]):
            h = (h ^ words[:, k]) * _MULTIPLIER
    return h


def _match_names(buf: WireBuffer, start: Ints, length: Ints, names: Sequence[str]) -> Ints:
    """The index in `names` (the last of equal names) of each string `buf[start:start +
    length]`; -1 when it is none of them."""
    index = {name.encode(): j for j, name in enumerate(names)}
    if not index:
        return np.full(start.size, -1, np.int64)
    words = (max(map(len, index)) + 7) // 8 or 1
    known = np.zeros((len(index), words), np.uint64)
    for k, name in enumerate(index):
        padded = name.ljust(8 * words, b"\0")
        known[k] = np.frombuffer(padded, "<u8")
    known_length = np.fromiter(map(len, index), np.int64, len(index))
    known_hash = _hash(known, known_length)
    order = np.argsort(known_hash)
    given = _words(buf, start, length, words)
    given_hash = _hash(given, length)
    at = order.take(np.minimum(np.searchsorted(known_hash[order], given_hash), len(index) - 1))
    same = (known_length.take(at) == length) & (known.take(at, axis=0) == given).all(axis=1)
    return np.where(same, np.fromiter(index.values(), np.int64, len(index)).take(at), -1)
