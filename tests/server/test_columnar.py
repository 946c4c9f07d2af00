"""The columnar forms of apportion.v1: jobs as parallel arrays (`Snapshot.job_columns`) and the
plan as columns (`options.columnar_plan` -> `Plan.columns`). Either form gives the same model
and the same plan; bad columns get field paths into the columns."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format

from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.errors import ValidationError
from apportion.v1 import allocation_service_pb2 as service_pb
from tests.server.fuzz_requests import EXAMPLES, to_columns
from tests.solver.test_model import assert_same_model


def request(data: dict[str, Any]) -> service_pb.SolveRequest:
    return json_format.ParseDict(data, service_pb.SolveRequest())


@pytest.mark.parametrize("name", ["four_jobs.json", "cluster_32_jobs.json",
                                  "tenants_and_sharing.json"])
@pytest.mark.parametrize("keep_rows", [0, 2])
def test_columns_and_rows_give_the_same_model_and_plan(name: str, keep_rows: int) -> None:
    data = json.loads((EXAMPLES / name).read_text())
    rows, columns = request(data), request(to_columns(data, keep_rows))
    assert_same_model(request_to_model(rows)[0], request_to_model(columns)[0])
    a, b = solve_request(rows), solve_request(columns)
    assert a.stats.termination == b.stats.termination
    assert a.stats.objective == b.stats.objective
    assert a.plan == b.plan


def columns_fields(data: dict[str, Any]) -> set[str]:
    with pytest.raises(ValidationError) as info:
        request_to_model(request(data))
    return {v.field for v in info.value.violations}


def test_bad_columns_have_paths_into_the_columns() -> None:
    base = to_columns(json.loads((EXAMPLES / "four_jobs.json").read_text()), keep_rows=1)
    cases: list[tuple[str, Any, str]] = [
        ("priorityWeight", [1.0, -2.0, 1.0], "snapshot.job_columns.priority_weight[1]"),
        ("scaleFactor", [1, 0, 1], "snapshot.job_columns.scale_factor[1]"),
        ("ids", ["resnet50", "b", "c"], "snapshot.job_columns.ids[0]"),  # a row's id
        ("totalSteps", [1.0], "snapshot.job_columns.total_steps"),
        ("throughputTypes", ["k80", "k80", "v100"], "snapshot.job_columns.throughput_types[1]"),
        ("throughputTypes", ["k80", "h100", "v100"], "snapshot.job_columns.throughput_types[1]"),
    ]
    for column, value, path in cases:
        data = json.loads(json.dumps(base))
        data["snapshot"]["jobColumns"][column] = value
        assert path in columns_fields(data), (column, value)
    data = json.loads(json.dumps(base))
    data["snapshot"]["jobColumns"]["throughput"][4] = "NaN"  # job 1 of the columns, p100
    assert "snapshot.job_columns.throughput[4]" in columns_fields(data)
    data = json.loads(json.dumps(base))
    data["snapshot"]["jobColumns"]["throughput"] = [0.0] * 9
    got = columns_fields(data)  # no usable type for any columnar job
    assert {f"snapshot.job_columns.throughput[{3 * k}:{3 * k + 3}]" for k in range(3)} <= got
    data = json.loads(json.dumps(base))
    data["snapshot"]["jobColumns"]["throughput"].pop()
    assert "snapshot.job_columns.throughput" in columns_fields(data)


@pytest.mark.parametrize("policy", ["weighted_max_min_fairness", "themis_finish_time_fairness",
                                    "cost_normalized_throughput", "gandiva"])
def test_columnar_plan_holds_what_the_rows_hold(policy: str) -> None:
    data = json.loads((EXAMPLES / "cluster_32_jobs.json").read_text())
    data["policy"] = {"name": policy}
    for k, job in enumerate(data["snapshot"]["jobs"]):
        job["progress"] = {"totalSteps": 1000.0 + k, "stepsDone": float(k)}
    rows = solve_request(request(data))
    data["options"] = {"columnarPlan": True}
    columns = solve_request(request(data))
    assert not columns.plan.jobs and rows.plan.jobs
    plan = columns.plan.columns
    m = len(rows.plan.jobs)
    names = [t["name"] for t in data["snapshot"]["cluster"]["acceleratorTypes"]]
    shares = [dict.fromkeys(names, 0.0) for _ in range(m)]
    for i, j, x in zip(plan.job_index, plan.type_index, plan.time_share, strict=True):
        shares[i][names[j]] = x
    duals = dict(zip(plan.dual_job_index, plan.dual, strict=True))
    reasons = dict(zip(plan.reason_job_index, plan.reason, strict=True))
    for i, job in enumerate(rows.plan.jobs):
        assert {k: v for k, v in shares[i].items() if v > 0} == dict(job.time_share)
        assert plan.status[i] == job.status
        for name in ("effective_throughput", "normalized_throughput", "objective_value"):
            assert getattr(plan, name)[i] == np.float32(getattr(job, name))  # single precision
        assert duals.get(i, 0.0) == job.dual
        assert reasons.get(i, "") == job.reason
        for name in ("cumulative_isolated_time_s", "isolated_throughput", "remaining_steps"):
            if job.HasField(name):
                assert getattr(plan, name)[i] == getattr(job, name)
        if job.HasField("slo_shortfall"):
            assert plan.slo_shortfall[i] == job.slo_shortfall
        elif len(plan.slo_shortfall):
            assert math.isnan(plan.slo_shortfall[i])
    assert columns.plan.accelerator_prices == rows.plan.accelerator_prices
    assert columns.plan.ByteSize() < 0.7 * rows.plan.ByteSize()


@pytest.mark.parametrize("policy", ["allox", "sia", "fisher_market"])
def test_columnar_plan_of_other_plan_kinds_is_an_error(policy: str) -> None:
    data = json.loads((EXAMPLES / "four_jobs.json").read_text())
    data["policy"] = {"name": policy}
    data["options"] = {"columnarPlan": True}
    for job in data["snapshot"]["jobs"]:
        job["progress"] = {"totalSteps": 100.0}
    assert "options.columnar_plan" in columns_fields(data)
