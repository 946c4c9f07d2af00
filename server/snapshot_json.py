"""Snapshot files (the proto3 canonical JSON of `SolveRequest`) read fast.

`json_format.Parse` walks every value in Python; for a file of 100,000 jobs that is most of
what `apportion solve` spends. `parse_request` decodes with orjson, gathers each job field
as a column and writes the jobs' serialized records from the columns (`wire_fields.Fields`), so
no `Job` message is built one by one (the rest of the request, small, still goes through
`json_format`; the runtime parses the whole request from the bytes), for
jobs that use the plain fields only (id, scale factor, weight, tenant, arrival, throughput,
progress, deadline, restart penalty, job type) with JSON values of exactly their types. Any
other file (other job fields, a value `json_format` would convert or reject, duplicate keys,
invalid JSON) goes through `json_format.Parse`, so errors and messages are `json_format`'s by
construction; the fast route gives a message equal to `json_format`'s (tested).
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np
import orjson
from google.protobuf import json_format
from numpy.typing import NDArray

from apportion.server.packed_fields import encode_varints
from apportion.server.wire_fields import Fields, Texts, records
from apportion.server.wire_records import LEN, collection_paused
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

_STR, _INT32, _DOUBLE, _THROUGHPUT, _PROGRESS = range(5)
_JOB_FIELDS: dict[str, tuple[str, int]] = {}
for _name, _kind in (
    ("id", _STR), ("scale_factor", _INT32), ("priority_weight", _DOUBLE), ("tenant", _STR),
    ("arrival_time_s", _DOUBLE), ("throughput", _THROUGHPUT), ("progress", _PROGRESS),
    ("deadline_s", _DOUBLE), ("restart_penalty_s", _DOUBLE), ("job_type", _STR),
):
    _camel = _name.split("_")[0] + "".join(p.title() for p in _name.split("_")[1:])
    _JOB_FIELDS[_name] = _JOB_FIELDS[_camel] = (_name, _kind)
_PROGRESS_FIELDS: dict[str, tuple[str, int]] = {}
for _name, _kind in (("steps_done", _DOUBLE), ("total_steps", _DOUBLE),
                     ("epochs_done", _INT32), ("total_epochs", _INT32)):
    _camel = _name.split("_")[0] + "".join(p.title() for p in _name.split("_")[1:])
    _PROGRESS_FIELDS[_name] = _PROGRESS_FIELDS[_camel] = (_name, _kind)
_INT32_RANGE = range(-(2**31), 2**31)


class _Slow(Exception):
    """The file needs `json_format` (a field or value the fast route does not take)."""


def parse_request(text: str | bytes) -> service_pb.SolveRequest:
    """The request in a snapshot file's text; `json_format.ParseError` as `json_format.Parse`
    raises it (unknown fields included)."""
    return parse_request_serialized(text)[0]


def parse_request_serialized(text: str | bytes) -> tuple[service_pb.SolveRequest, bytes | None]:
    """`parse_request`, with the serialized bytes the request was parsed from when the fast
    route read it (None otherwise): the pipeline decodes the jobs from them."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        with collection_paused():  # the decoded tree is acyclic: tracing it again buys nothing
            return _fast_serialized(data)
    except _Slow:
        pass
    request = json_format.Parse(data.decode("utf-8"), service_pb.SolveRequest(),
                                ignore_unknown_fields=False)
    return request, None


def _fast(data: bytes) -> service_pb.SolveRequest:
    return _fast_serialized(data)[0]


def _fast_serialized(data: bytes) -> tuple[service_pb.SolveRequest, bytes]:
    """The request, and serialized bytes it parses from (the jobs written from columns by
    `Fields`, never as one message each)."""
    try:
        tree = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise _Slow from exc
    if not isinstance(tree, dict) or not isinstance(tree.get("snapshot"), dict):
        raise _Slow
    snapshot = tree["snapshot"]
    jobs = snapshot.get("jobs", [])
    if not isinstance(jobs, list) or "jobs" not in snapshot:
        raise _Slow
    keys = [1, 0]  # keys of the tree ("jobs" itself), colons inside its strings
    job_records = _job_records(jobs, keys)
    rest = {**tree, "snapshot": {k: v for k, v in snapshot.items() if k != "jobs"}}
    _count_keys(rest, keys)
    # orjson keeps the last of duplicate keys where json_format rejects the file: every key
    # in the text must be a key of the tree. A colon is a key's or inside a string (written
    # as itself: a file escaping one as \u003a takes the other route).
    if b"\\u003" in data or keys[0] != data.count(b":") - keys[1]:
        raise _Slow
    try:
        request = json_format.ParseDict(rest, service_pb.SolveRequest())
    except json_format.ParseError as exc:
        raise _Slow from exc
    # a second `snapshot` record merges into the first: its jobs are appended
    tag = service_pb.SolveRequest.SNAPSHOT_FIELD_NUMBER << 3 | LEN
    serialized = b"".join([request.SerializeToString(), encode_varints(np.array([tag])),
                           encode_varints(np.array([len(job_records)])), job_records])
    return service_pb.SolveRequest.FromString(serialized), serialized


def _layouts(trees: list[Any], fields: dict[str, tuple[str, int]]
             ) -> dict[str, tuple[NDArray[np.int64], list[Any]]]:
    """Per field name: the indices of the objects `trees` (each a dict with keys of `fields`,
    each field at most once) that have it, and its values there, in order."""
    if any(type(tree) is not dict for tree in trees):
        raise _Slow
    layout_of: dict[tuple[str, ...], int] = {}
    which = np.fromiter((layout_of.setdefault(tuple(t), len(layout_of)) for t in trees),
                        np.int64, len(trees))
    found: dict[str, list[tuple[NDArray[np.int64], list[Any]]]] = {}
    for layout, number in layout_of.items():
        names = [fields.get(key, ("", -1))[0] for key in layout]
        if "" in names or len(set(names)) != len(names):
            raise _Slow
        members = np.flatnonzero(which == number)
        index = members.tolist()
        for key, name in zip(layout, names, strict=True):
            found.setdefault(name, []).append((members, [trees[i][key] for i in index]))
    out = {}
    for name, parts in found.items():
        if len(parts) == 1:
            out[name] = parts[0]
            continue
        members = np.concatenate([p[0] for p in parts])
        values = [v for p in parts for v in p[1]]
        order = np.argsort(members, kind="stable")
        out[name] = (members[order], [values[k] for k in order.tolist()])
    return out


def _checked(kind: int, values: list[Any]) -> NDArray[Any] | list[str]:
    """`values` if each is exactly of the JSON type `json_format` stores unchanged: strings
    as given, numbers as float64 (doubles) or int64 (int32)."""
    kinds = set(map(type, values))
    if kind == _STR:
        if kinds <= {str}:
            return values
    elif kind == _DOUBLE:
        if kinds <= {float, int}:
            try:
                return np.array(values, np.float64) if values else np.zeros(0)
            except OverflowError:
                pass
    elif kind == _INT32 and kinds <= {int} and all(value in _INT32_RANGE for value in values):
        return np.array(values, np.int64)
    raise _Slow


def _job_records(jobs: list[Any], keys: list[int]) -> bytes:
    """The jobs as `Snapshot.jobs` records; keys and colons counted into `keys`."""
    columns = _message_columns(jobs, _JOB_FIELDS, snapshot_pb.Job.DESCRIPTOR, keys)
    return records(snapshot_pb.Snapshot.JOBS_FIELD_NUMBER, columns)


def _message_columns(trees: list[Any], fields: dict[str, tuple[str, int]],
                     descriptor: Any, keys: list[int]) -> Fields:
    """The messages (of `descriptor`) of the JSON objects `trees`, whose keys are those of
    `fields`; keys and colons counted into `keys`."""
    m = len(trees)
    by_field = _layouts(trees, fields)
    keys[0] += sum(map(len, trees))
    columns = Fields(m)
    for field in sorted(descriptor.fields, key=lambda f: f.number):
        if field.name not in by_field:
            continue
        at, values = by_field[field.name]
        kind = fields[field.name][1]
        present = np.zeros(m, bool)
        present[at] = True
        if kind == _STR:
            texts = [""] * m
            for i, text in zip(at.tolist(), _checked(_STR, values), strict=True):
                texts[i] = text
            keys[1] += "".join(texts).count(":")
            columns.string(field.number, Texts(texts), np.arange(m))
        elif kind == _THROUGHPUT:
            _throughput(columns, field.number, at, values, keys)
        elif kind == _PROGRESS:
            progress = _message_columns(values, _PROGRESS_FIELDS,
                                        snapshot_pb.Progress.DESCRIPTOR, keys)
            columns.message(field.number, present, progress)
        else:
            column: NDArray[Any] = np.zeros(m, np.float64 if kind == _DOUBLE else np.int64)
            column[at] = _checked(kind, values)
            explicit = present if field.has_presence else None  # else zeros are not written
            if kind == _DOUBLE:
                columns.double(field.number, column, explicit)
            else:
                columns.varint(field.number, column, explicit)
    return columns


def _throughput(columns: Fields, number: int, at: NDArray[np.int64],
                maps: list[Any], keys: list[int]) -> None:
    """The throughput maps of the jobs `at`."""
    if any(type(value) is not dict for value in maps):
        raise _Slow
    names = list(chain.from_iterable(maps))
    keys[0] += len(names)
    keys[1] += "".join(names).count(":")
    value = _checked(_DOUBLE, list(chain.from_iterable(map(dict.values, maps))))
    index = {name: k for k, name in enumerate(dict.fromkeys(names))}
    key = np.fromiter(map(index.__getitem__, names), np.int64, len(names))
    count = np.zeros(columns.count, np.int64)
    count[at] = np.fromiter(map(len, maps), np.int64, len(maps))
    entries = Fields(len(names))
    entries.string(1, Texts(list(index)), key)  # map entries: the key, then the value
    entries.double(2, np.asarray(value), np.ones(len(names), bool))
    columns.messages(number, np.concatenate([[0], np.cumsum(count)]), entries)


def _count_keys(tree: Any, keys: list[int]) -> None:
    """Add the keys of `tree` to keys[0] and the colons in its strings to keys[1]."""
    if isinstance(tree, dict):
        keys[0] += len(tree)
        for name, value in tree.items():
            keys[1] += name.count(":")
            _count_keys(value, keys)
    elif isinstance(tree, list):
        for value in tree:
            _count_keys(value, keys)
    elif isinstance(tree, str):
        keys[1] += tree.count(":")
