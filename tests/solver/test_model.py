"""The model: complete (every per-job field filled), validated the same way by `make_problem`
and by conversion, derived arrays computed once."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format

from apportion.server.convert import request_to_model
from apportion.solver import limits
from apportion.solver.errors import ValidationError
from apportion.solver.model import History, Jobs, Problem
from apportion.solver.validation import make_problem, problem_violations
from apportion.v1 import allocation_service_pb2 as service_pb

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def per_job_lengths(problem: Problem) -> dict[str, int]:
    """The job-axis length of every field of Jobs and History."""
    out: dict[str, int] = {}
    for part in (problem.jobs, problem.history):
        for item in fields(part):
            value = getattr(part, item.name)
            if isinstance(value, np.ndarray | tuple):
                out[item.name] = len(value)
            elif item.name == "reference_state":
                out[item.name] = value.estimate_s.size
    return out


@pytest.mark.parametrize("name", ["four_jobs.json", "cluster_32_jobs.json",
                                  "tenants_and_sharing.json"])
def test_conversion_fills_every_per_job_field(name: str) -> None:
    request = json_format.Parse((EXAMPLES / name).read_text(), service_pb.SolveRequest())
    problem, _, _ = request_to_model(request)
    m = problem.jobs.num_jobs
    assert m > 0 and set(per_job_lengths(problem).values()) == {m}


def test_make_problem_gives_the_same_complete_model_as_conversion() -> None:
    data = json.loads((EXAMPLES / "four_jobs.json").read_text())
    converted, _, _ = request_to_model(json_format.ParseDict(data, service_pb.SolveRequest()))
    jobs = data["snapshot"]["jobs"]
    types = [t["name"] for t in data["snapshot"]["cluster"]["acceleratorTypes"]]
    made = make_problem(
        types,
        [t["count"] for t in data["snapshot"]["cluster"]["acceleratorTypes"]],
        [[job["throughput"].get(t, 0.0) for t in types] for job in jobs],
        [job.get("scaleFactor", 1) for job in jobs],
        [job.get("priorityWeight", 1.0) for job in jobs],
        [job["id"] for job in jobs],
    )
    assert_same_model(converted, made)


def assert_same_model(a: Problem, b: Problem) -> None:
    """Every field of the jobs and the history equal (arrays elementwise, NaN = NaN)."""
    for part in ("jobs", "history"):
        x, y = getattr(a, part), getattr(b, part)
        for item in fields(x):
            u, v = getattr(x, item.name), getattr(y, item.name)
            if isinstance(u, np.ndarray):
                np.testing.assert_array_equal(u, v, err_msg=item.name)
            elif item.name == "reference_state":
                np.testing.assert_array_equal(u.estimate_s, v.estimate_s)
            elif item.name in ("epoch_duration_s", "epoch_batch_size"):
                assert [list(e) for e in u] == [list(e) for e in v], item.name
            else:
                assert u == v, item.name


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"throughput": [[np.nan, 1.0]]}, 'snapshot.jobs[0].throughput["a"]'),
        ({"throughput": [[-1.0, 1.0]]}, 'snapshot.jobs[0].throughput["a"]'),
        ({"throughput": [[1e300, 1.0]]}, 'snapshot.jobs[0].throughput["a"]'),
        ({"scale_factor": [0]}, "snapshot.jobs[0].scale_factor"),
        ({"scale_factor": [5]}, "snapshot.jobs[0].scale_factor"),
        ({"priority_weight": [0.0]}, "snapshot.jobs[0].priority_weight"),
        ({"priority_weight": [np.inf]}, "snapshot.jobs[0].priority_weight"),
        ({"count": [-1, 2]}, "snapshot.cluster.accelerator_types[0].count"),
        ({"count": [limits.MAX_DEVICES_PER_TYPE + 1, 2]},
         "snapshot.cluster.accelerator_types[0].count"),
        ({"count": [0, 0]}, "snapshot.cluster"),
        ({"ids": [""]}, "snapshot.jobs[0].id"),
    ],
)
def test_make_problem_rejects_what_conversion_rejects(change: dict[str, object], path: str
                                                      ) -> None:
    args: dict[str, object] = {"type_names": ["a", "b"], "count": [2, 2],
                               "throughput": [[1.0, 1.0]]}
    args.update(change)
    with pytest.raises(ValidationError) as info:
        make_problem(**args)  # type: ignore[arg-type]
    assert path in {v.field for v in info.value.violations}
    # the wire gives the same path for the same value
    names = args["type_names"]
    assert isinstance(names, list)
    request = service_pb.SolveRequest()
    request.policy.name = "isolated"
    for name, count in zip(names, args["count"], strict=True):  # type: ignore[call-overload]
        request.snapshot.cluster.accelerator_types.add(name=name, count=count)
    job = request.snapshot.jobs.add(id=(args.get("ids") or ["j"])[0])  # type: ignore[index]
    for name, value in zip(names, args["throughput"][0], strict=True):  # type: ignore[index]
        job.throughput[name] = value
    if "scale_factor" in args:
        job.scale_factor = args["scale_factor"][0]  # type: ignore[index]
    if "priority_weight" in args:
        job.priority_weight = args["priority_weight"][0]  # type: ignore[index]
    with pytest.raises(ValidationError) as wire:
        request_to_model(request)
    assert path in {v.field for v in wire.value.violations}


def test_a_valid_problem_has_no_violations() -> None:
    problem = make_problem(["a", "b"], [4, 2], [[1.0, 0.0], [0.0, 2.0]], [2, 1], [1.0, 3.0])
    assert problem_violations(problem) == []


def test_derived_arrays_are_computed_once_and_right() -> None:
    problem = make_problem(["a", "b"], [4, 1], [[1.0, 3.0], [0.0, 2.0]], [2, 1])
    usable = problem.usable
    assert usable is problem.usable  # cached
    assert usable.tolist() == [[True, False], [False, True]]
    prop = problem.proportional_throughput
    np.testing.assert_allclose(prop, [(1.0 * 4 + 3.0 * 1) / 5, (2.0 * 1) / 5])
    assert problem.jobs.scale_factor_float.dtype == np.float64
    assert problem.cluster.count_float.tolist() == [4.0, 1.0]
    assert problem.history.running().tolist() == [False, False]
    changed = replace(problem, jobs=replace(problem.jobs, scale_factor=np.array([1, 1])))
    assert changed.usable.tolist() == [[True, True], [False, True]]  # a new model, recomputed


def test_inconsistent_shapes_are_a_programming_error() -> None:
    jobs = Jobs.default(2, 3)
    with pytest.raises(ValueError, match="priority_weight"):
        replace(jobs, priority_weight=np.ones(3))
    with pytest.raises(ValueError, match="current_type"):
        replace(History.default(2, 3), current_type=np.zeros(1, np.int64))


def test_append_keeps_every_field_aligned() -> None:
    problem = make_problem(["a"], [2], [[1.0], [2.0]])
    jobs = problem.jobs.append(replace(Jobs.default(1, 1), ids=("extra",)))
    history = problem.history.append(History.default(1, 1))
    bigger = replace(problem, jobs=jobs, history=history)
    assert set(per_job_lengths(bigger).values()) == {3}
    assert jobs.ids == ("job0", "job1", "extra")


def test_take_keeps_every_field_aligned() -> None:
    problem = make_problem(["a"], [2], [[1.0], [2.0]], priority_weight=[1.0, 3.0])
    index = np.array([1, 1, 0])
    taken = replace(problem, jobs=replace(problem.jobs.take(index), ids=("x", "y", "z")),
                    history=problem.history.take(index))
    assert set(per_job_lengths(taken).values()) == {3}
    assert taken.jobs.priority_weight.tolist() == [3.0, 3.0, 1.0]
