"""Snapshot files (the proto3 canonical JSON of `SolveRequest`) read fast.

`json_format.Parse` walks every value in Python; for a file of 100,000 jobs that is most of
what `apportion solve` spends. `parse_request` decodes with orjson and builds the `Job`
messages directly (the rest of the request, small, still goes through `json_format`), for
jobs that use the plain fields only (id, scale factor, weight, tenant, arrival, throughput,
progress, deadline, restart penalty, job type) with JSON values of exactly their types. Any
other file (other job fields, a value `json_format` would convert or reject, duplicate keys,
invalid JSON) goes through `json_format.Parse`, so errors and messages are `json_format`'s by
construction; the fast route gives a message equal to `json_format`'s (tested).
"""

from __future__ import annotations

import gc
from typing import Any

import orjson
from google.protobuf import json_format

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
    data = text.encode("utf-8") if isinstance(text, str) else text
    collecting = gc.isenabled()
    gc.disable()  # the decoded tree is acyclic: tracing it again and again buys nothing
    try:
        return _fast(data)
    except _Slow:
        pass
    finally:
        if collecting:
            gc.enable()
    return json_format.Parse(data.decode("utf-8"), service_pb.SolveRequest(),
                             ignore_unknown_fields=False)


def _fast(data: bytes) -> service_pb.SolveRequest:
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
    built = [_job(job, keys) for job in jobs]
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
    request.snapshot.jobs.extend(built)
    return request


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


def _scalar(kind: int, value: Any) -> Any:
    """`value` if it is exactly of the JSON type `json_format` stores unchanged."""
    kind_of = type(value)
    if (
        (kind == _STR and kind_of is str)
        or (kind == _DOUBLE and (kind_of is float or kind_of is int))
        or (kind == _INT32 and kind_of is int and value in _INT32_RANGE)
    ):
        return value
    raise _Slow


def _job(job: Any, keys: list[int]) -> snapshot_pb.Job:
    if type(job) is not dict:
        raise _Slow
    keys[0] += len(job)
    fields: dict[str, Any] = {}
    for key, value in job.items():
        name, kind = _JOB_FIELDS.get(key, ("", -1))
        if not name or name in fields:
            raise _Slow
        if kind == _STR:
            keys[1] += _scalar(kind, value).count(":")
            fields[name] = value
        elif kind == _THROUGHPUT:
            if type(value) is not dict:
                raise _Slow
            keys[0] += len(value)
            keys[1] += sum(k.count(":") for k in value)
            fields[name] = {k: _scalar(_DOUBLE, v) for k, v in value.items()}
        elif kind == _PROGRESS:
            if type(value) is not dict:
                raise _Slow
            keys[0] += len(value)
            progress: dict[str, Any] = {}
            for k, v in value.items():
                field, field_kind = _PROGRESS_FIELDS.get(k, ("", -1))
                if not field or field in progress:
                    raise _Slow
                progress[field] = _scalar(field_kind, v)
            fields[name] = snapshot_pb.Progress(**progress)
        else:
            fields[name] = _scalar(kind, value)
    return snapshot_pb.Job(**fields)
