"""Valid requests for every registered policy and mutations of them, for the fuzz tests.

A request is handled as its proto3 canonical JSON (a dict), the form a snapshot file has:
`base_requests` gives small valid ones per policy (and the examples), `mutate` changes one
place of one of them in a way a careless or hostile client might (wrong types, NaN, inf,
huge or negative numbers, empty or long lists, unicode and control characters, deleted
fields).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from hypothesis import strategies as st

from apportion.solver.capabilities import PlanKind
from apportion.solver.registry import PolicySpec, policies
from apportion.testing import to_job_columns
from apportion.v1 import allocation_service_pb2 as service_pb

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
Json = Any


def _general(policy: str) -> dict[str, Json]:
    """Three types on four nodes, four jobs using most snapshot fields."""
    return {
        "snapshot": {
            "timeS": 1000.0,
            "roundDurationS": 60.0,
            "cluster": {
                "acceleratorTypes": [
                    {"name": "v100", "count": 4, "costPerHour": 3.0},
                    {"name": "p100", "count": 4, "costPerHour": 1.5},
                    {"name": "k80", "count": 4},
                ],
                "nodes": [
                    {"name": "n0", "acceleratorType": "v100", "devices": 4},
                    {"name": "n1", "acceleratorType": "p100", "devices": 4},
                    {"name": "n2", "acceleratorType": "k80", "devices": 2},
                    {"name": "n3", "acceleratorType": "k80", "devices": 2},
                ],
            },
            "jobs": [
                {
                    "id": "j0", "tenant": "a", "arrivalTimeS": 10.0, "jobType": "resnet",
                    "throughput": {"v100": 4.0, "p100": 2.0, "k80": 1.0},
                    "progress": {"stepsDone": 100.0, "totalSteps": 5000.0},
                    "restartPenaltyS": 20.0,
                },
                {
                    "id": "j1", "tenant": "a", "arrivalTimeS": 20.0, "scaleFactor": 2,
                    "priorityWeight": 2.0, "jobType": "lm",
                    "throughput": {"v100": 6.0, "p100": 5.0, "k80": 2.0},
                    "progress": {"totalSteps": 8000.0},
                    "deadlineS": 50000.0,
                    "elasticity": {"minDevices": 1, "maxDevices": 4, "scaleUnit": {"v100": 1}},
                },
                {
                    "id": "j2", "tenant": "b", "arrivalTimeS": 30.0, "jobType": "resnet",
                    "throughput": {"v100": 1.5, "k80": 1.2},
                    "progress": {"stepsDone": 10.0, "totalSteps": 900.0},
                    "configurations": [
                        {"acceleratorType": "v100", "nodes": 1, "devices": 1, "goodput": 10.0},
                        {"acceleratorType": "v100", "nodes": 1, "devices": 2, "goodput": 18.0},
                        {"acceleratorType": "k80", "nodes": 1, "devices": 1, "goodput": 4.0},
                    ],
                },
                {
                    "id": "j3", "arrivalTimeS": 40.0,
                    "throughput": {"v100": 2.0, "p100": 1.0, "k80": 0.5},
                    "progress": {"totalSteps": 3000.0},
                    "pollux": {
                        "perfParams": {"v100": {
                            "alphaC": 0.01, "betaC": 0.001, "alphaN": 0.05, "betaN": 0.01,
                            "alphaR": 0.02, "betaR": 0.005, "gamma": 1.5,
                        }},
                        "gradSqr": 1.0, "gradVar": 5.0, "initBatchSize": 32,
                        "maxBatchSize": 256, "minLocalBatchSize": 8, "maxLocalBatchSize": 64,
                        "seedThroughput": {"v100": 300.0, "p100": 150.0},
                    },
                },
            ],
            "tenants": [
                {"name": "a", "weight": 2.0},
                {"name": "b", "sharing": "TENANT_SHARING_FIFO"},
            ],
            "colocations": [
                {"jobA": "j0", "jobB": "j2", "throughputA": {"v100": 3.0, "k80": 0.8},
                 "throughputB": {"v100": 1.0, "k80": 0.9}},
            ],
            "typeColocations": [
                {"typeA": "resnet", "typeB": "lm", "throughputA": {"v100": 3.0, "p100": 1.5},
                 "throughputB": {"v100": 4.0, "p100": 3.0}},
            ],
            "history": {
                "elapsedSinceResetS": 600.0,
                "jobs": [
                    {
                        "jobId": "j0", "receivedTimeS": {"v100": 300.0},
                        "cumulativeIsolatedTimeS": 200.0, "restarts": 1,
                        "current": {"acceleratorType": "v100", "devices": 1, "nodes": ["n0"],
                                    "busyUntilS": 1200.0},
                        "previousTimeShare": {"v100": 0.5},
                    },
                    {"jobId": "j2", "restarts": 2, "colocatedWith": ""},
                ],
            },
        },
        "policy": {"name": policy},
        "options": {"timeLimitS": 20.0},
    }


def _window(policy: str) -> dict[str, Json]:
    """One accelerator type and epoch profiles (planning-window policies)."""
    jobs = []
    for k in range(3):
        jobs.append({
            "id": f"w{k}", "scaleFactor": 1 + k % 2, "arrivalTimeS": 100.0 * k,
            "throughput": {"a100": 1.0},
            "progress": {"epochsDone": k, "totalEpochs": 4},
            "epochProfile": {"epochDurationS": [60.0, 60.0, 90.0, 90.0],
                             "batchSize": [32, 32, 64, 64]},
        })
    return {
        "snapshot": {
            "timeS": 600.0,
            "cluster": {"acceleratorTypes": [{"name": "a100", "count": 4}]},
            "jobs": jobs,
            "history": {"jobs": [{"jobId": "w0", "referenceFinishTimeS": 900.0}]},
        },
        "policy": {"name": policy, "shockwave": {"planningRounds": 5}},
        "options": {"timeLimitS": 20.0},
    }


def _sharing(policy: str) -> dict[str, Json]:
    """Two 4-GPU nodes with CPUs and memory, jobs with stage times, CPU/memory profiles and
    device sharing data (the co-location and resource-shape policies)."""
    from google.protobuf import json_format

    from tests.server.test_sharing_inputs import base_request as sharing_request

    tree: dict[str, Json] = json_format.MessageToDict(sharing_request(policy))
    return tree


def base_request(spec: PolicySpec) -> dict[str, Json]:
    """A small valid request for `spec`."""
    caps = spec.capabilities
    if caps.plan_kind is PlanKind.WINDOW:
        return _window(spec.name)
    if caps.reads_resource_profiles or caps.reads_stage_times or caps.reads_device_sharing:
        return _sharing(spec.name)
    request = _general(spec.name)
    if spec.capabilities.reads_tenants:
        request["snapshot"]["jobs"][3]["tenant"] = "b"
    return request


def example_requests() -> Iterator[tuple[str, dict[str, Json]]]:
    """(file name, request) of every example snapshot file (valid or not)."""
    for path in sorted(EXAMPLES.glob("*.json")):
        yield path.name, json.loads(path.read_text())


def every_base() -> list[tuple[str, dict[str, Json]]]:
    """(label, request): one base per registered policy, the examples, and an example with
    most of its jobs in columnar form."""
    out = [(spec.name, base_request(spec)) for spec in policies()]
    examples = list(example_requests())
    columnar = to_columns(dict(examples)["cluster_32_jobs.json"], keep_rows=2)
    columnar["options"] = {"columnarPlan": True}
    return [*out, *examples, ("columnar", columnar)]


def to_columns(data: dict[str, Any], keep_rows: int = 0) -> dict[str, Any]:
    """The same (valid) request with its jobs after the first `keep_rows` moved into
    job_columns, throughput types in the reverse of the cluster's order (the columns name
    their own order)."""
    request = json_format.ParseDict(data, service_pb.SolveRequest())
    types = [t.name for t in request.snapshot.cluster.accelerator_types][::-1]
    return json_format.MessageToDict(to_job_columns(request, keep_rows, types))


# --------------------------------------------------------------------------------------------
# mutations

_NUMBERS: tuple[Json, ...] = (
    "NaN", "Infinity", "-Infinity", 1e308, -1e308, 1.7976931348623157e308, 5e-324, -1, -1.5,
    0, 0.0, 1, 2147483647, -2147483648, 2147483648, 9223372036854775807,
    -9223372036854775808, 18446744073709551615, 1e15, -1e-9, 3.5,
)
_EXTREME_BUT_VALID: tuple[Json, ...] = (
    1e-9, 1e12, 1e-6, 0.5, 1e9, 1e15, 2, 7, 64, 1000, 100000, 131072, 262144, 1048576, -1e12,
    1e-3, 0.999999, 1.0000001, 20, -20, 10,
)
_STRINGS: tuple[str, ...] = (
    "", " ", "v100", "j0", "\u00e9t\u00e9-\u4e2d\u6587", "\x00", "a\nb", "\t\r\x1b[31m",
    "\ud7ff\ue000", "x" * 5000, "snapshot.jobs[0].id", '"', "\\", "j0\n", "\U0001f680",
)
_WRONG_TYPES: tuple[Json, ...] = (None, True, [], {}, "text", [1, 2], {"x": 1}, "1e3", "12")


def _paths(value: Json, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path (keys and list indices) in a JSON tree, containers included."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*prefix, index))


def _get(tree: Json, path: tuple[Any, ...]) -> Json:
    for key in path:
        tree = tree[key]
    return tree


def _set(tree: Json, path: tuple[Any, ...], value: Json) -> None:
    _get(tree, path[:-1])[path[-1]] = value


def _delete(tree: Json, path: tuple[Any, ...]) -> None:
    parent = _get(tree, path[:-1])
    del parent[path[-1]]


Mutation = Callable[[st.DrawFn, Json, tuple[Any, ...]], None]


def _replace_number(draw: st.DrawFn, tree: Json, path: tuple[Any, ...]) -> None:
    _set(tree, path, draw(st.sampled_from(_NUMBERS + _EXTREME_BUT_VALID)))


def _replace_string(draw: st.DrawFn, tree: Json, path: tuple[Any, ...]) -> None:
    _set(tree, path, draw(st.sampled_from(_STRINGS) | st.text(max_size=12)))


def _wrong_type(draw: st.DrawFn, tree: Json, path: tuple[Any, ...]) -> None:
    _set(tree, path, copy.deepcopy(draw(st.sampled_from(_WRONG_TYPES))))


def _remove(draw: st.DrawFn, tree: Json, path: tuple[Any, ...]) -> None:
    _delete(tree, path)


def _empty(draw: st.DrawFn, tree: Json, path: tuple[Any, ...]) -> None:
    value = _get(tree, path)
    _set(tree, path, type(value)() if isinstance(value, list | dict) else [])


def _repeat(draw: st.DrawFn, tree: Json, path: tuple[Any, ...]) -> None:
    """A list made long by repeating its elements (duplicate ids included), or a map key
    copied under new names."""
    value = _get(tree, path)
    times = draw(st.sampled_from((2, 3, 60, 400)))
    if isinstance(value, list) and value:
        _set(tree, path, [copy.deepcopy(value[k % len(value)]) for k in range(len(value) * times)])
    elif isinstance(value, dict) and value:
        key = draw(st.sampled_from(sorted(value)))
        for k in range(min(times, 60)):
            value[f"{key}{k}"] = copy.deepcopy(value[key])


def _new_field(draw: st.DrawFn, tree: Json, path: tuple[Any, ...]) -> None:
    value = _get(tree, path)
    if isinstance(value, dict):
        name = draw(st.sampled_from(("unknownField", "scale_factor", "count", "id")))
        value[name] = copy.deepcopy(draw(st.sampled_from(_NUMBERS + _WRONG_TYPES)))


_BY_KIND: dict[str, tuple[Mutation, ...]] = {
    "number": (_replace_number,) * 8 + (_replace_string, _wrong_type, _remove, _remove),
    "string": (_replace_string,) * 4 + (_replace_number, _wrong_type, _remove),
    "list": (_empty, _repeat, _repeat, _repeat, _remove, _wrong_type),
    "object": (_remove, _remove, _empty, _repeat, _new_field, _wrong_type),
}


def _kind(value: Json) -> str:
    if isinstance(value, bool | None):
        return "number"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "list" if isinstance(value, list) else "object"


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Json], max_changes: int = 3) -> dict[str, Json]:
    """`base` with 1 to `max_changes` mutations at drawn places, each suited to the value
    it changes (numbers mostly become other numbers, lists longer or empty, ...)."""
    tree = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, max_changes))):
        paths = [p for p in _paths(tree) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        kind = _kind(_get(tree, path))
        draw(st.sampled_from(_BY_KIND[kind]))(draw, tree, path)
    return tree
