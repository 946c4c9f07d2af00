"""Bounds on size-like inputs and the inputs that used to crash a solve (issue: a small request
must not take a worker down): each is a field-path error or a valid answer, the same in
`validate` (`request_to_model`) and `solve`."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import pytest
from google.protobuf import json_format

from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.errors import ValidationError
from apportion.solver.registry import policies
from apportion.v1 import allocation_service_pb2 as service_pb
from tests.server.fuzz_requests import EXAMPLES, base_request

FOUR_JOBS = json.loads((EXAMPLES / "four_jobs.json").read_text())
PLAN_TERMINATIONS = (
    service_pb.TERMINATION_REASON_OPTIMAL,
    service_pb.TERMINATION_REASON_HEURISTIC,
)


def request(data: dict[str, Any]) -> service_pb.SolveRequest:
    return json_format.ParseDict(data, service_pb.SolveRequest())


def four_jobs(policy: str, **changes: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(FOUR_JOBS))
    data["policy"] = {"name": policy}
    for job in data["snapshot"]["jobs"]:
        job["progress"] = {"totalSteps": 1000.0}
    data.update(changes)
    return data


def fields(data: dict[str, Any]) -> set[str]:
    """The field paths of the violations (the request must be rejected)."""
    with pytest.raises(ValidationError) as info:
        request_to_model(request(data))
    with pytest.raises(ValidationError) as again:  # the solve path rejects the same
        solve_request(request(data))
    assert again.value.violations == info.value.violations
    return {v.field for v in info.value.violations}


# --------------------------------------------------------------------------------------------
# bounds


def test_threads_at_most_the_cores() -> None:
    cores = os.cpu_count() or 1
    for threads in (cores + 1, 2147483647, -1):
        assert fields(four_jobs("allox", options={"threads": threads})) == {"options.threads"}
    ok = solve_request(request(four_jobs("allox", options={"threads": cores})))
    assert ok.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL


def test_allox_with_the_largest_count_is_an_error_not_a_memory_error() -> None:
    data = four_jobs("allox")
    for acc in data["snapshot"]["cluster"]["acceleratorTypes"]:
        acc["count"] = 2147483647
    assert fields(data) == {
        f"snapshot.cluster.accelerator_types[{j}].count" for j in range(3)
    }


def test_devices_over_all_types_are_bounded() -> None:
    from apportion.solver.limits import MAX_DEVICES, MAX_DEVICES_PER_TYPE

    data = four_jobs("allox")
    types = [{"name": f"t{j}", "count": MAX_DEVICES_PER_TYPE} for j in range(3)]
    data["snapshot"]["cluster"]["acceleratorTypes"] = types
    for job in data["snapshot"]["jobs"]:
        job["throughput"] = {"t0": 1.0}
    assert 3 * MAX_DEVICES_PER_TYPE > MAX_DEVICES
    assert fields(data) == {"snapshot.cluster.accelerator_types"}


def test_node_devices_are_bounded() -> None:
    data = four_jobs("sia")
    data["snapshot"]["cluster"]["nodes"] = [
        {"name": "n0", "acceleratorType": "v100", "devices": 2147483647}
    ]
    assert "snapshot.cluster.nodes[0].devices" in fields(data)


def test_each_wrong_node_field_is_named() -> None:
    """The nodes' types, CPUs and memory are checked as columns; each offender has its path
    and value, the good nodes none."""
    data = four_jobs("allox")
    data["snapshot"]["cluster"]["acceleratorTypes"] = [{"name": "v100", "count": 4}]
    data["snapshot"]["cluster"]["nodes"] = [
        {"name": "n0", "acceleratorType": "v100", "devices": 1, "cpus": 8},
        {"name": "n1", "acceleratorType": "tpu", "devices": 1, "cpus": -1},
        {"name": "n2", "acceleratorType": "v100", "devices": 1, "memoryGib": "NaN"},
        {"name": "n3", "acceleratorType": "v100", "devices": 1, "cpus": 1e308},
    ]
    with pytest.raises(ValidationError) as info:
        request_to_model(request(data))
    found = {v.field: v.description for v in info.value.violations}
    assert set(found) >= {"snapshot.cluster.nodes[1].accelerator_type",
                          "snapshot.cluster.nodes[1].cpus", "snapshot.cluster.nodes[2].memory_gib",
                          "snapshot.cluster.nodes[3].cpus"}
    assert not any(path.startswith("snapshot.cluster.nodes[0]") for path in found)
    assert "unknown accelerator type" in found["snapshot.cluster.nodes[1].accelerator_type"]
    assert found["snapshot.cluster.nodes[1].cpus"].endswith("got -1.0")
    assert found["snapshot.cluster.nodes[2].memory_gib"].endswith("got nan")


def test_schedule_rounds_are_bounded() -> None:
    data = four_jobs("weighted_max_min_fairness", options={"scheduleRounds": 2147483647})
    assert fields(data) == {"options.schedule_rounds"}
    ok = solve_request(request(four_jobs("weighted_max_min_fairness",
                                         options={"scheduleRounds": 1000})))
    assert len(ok.plan.rounds) == 1000


def test_shockwave_planning_rounds_are_bounded() -> None:
    data = base_request(next(s for s in policies() if s.name == "shockwave"))
    data["policy"]["shockwave"]["planningRounds"] = 2147483647
    assert fields(data) == {"policy.shockwave.planning_rounds"}
    data["policy"]["shockwave"]["planningRounds"] = 1000
    # 300 jobs x 1000 rounds: more cells than a planning window may have
    jobs = [json.loads(json.dumps(job)) for job in data["snapshot"]["jobs"] * 100]
    for k, job in enumerate(jobs):
        job["id"] = f"w{k}"
    data["snapshot"]["jobs"] = jobs
    assert fields(data) == {"policy.shockwave.planning_rounds"}


def test_epochs_are_bounded() -> None:
    data = base_request(next(s for s in policies() if s.name == "shockwave"))
    data["snapshot"]["jobs"][0]["progress"]["totalEpochs"] = 2147483647
    data["snapshot"]["jobs"][1]["epochProfile"]["epochDurationS"] = [1.0] * 100_001
    got = fields(data)
    assert "snapshot.jobs[0].progress.total_epochs" in got
    assert "snapshot.jobs[1].epoch_profile.epoch_duration_s" in got


@pytest.mark.parametrize("policy", ["sia", "pollux"])
def test_max_gpus_is_bounded(policy: str) -> None:
    data = four_jobs(policy)
    data["policy"][policy] = {"maxGpus": 2147483647}
    assert fields(data) == {f"policy.{policy}.max_gpus"}


# --------------------------------------------------------------------------------------------
# inputs that crashed


@pytest.mark.parametrize("policy", ["fifo", "fifo_packed", "gandiva", "weighted_max_min_fairness"])
@pytest.mark.parametrize("seed", [-1, -(2**63)])
def test_negative_seeds_are_valid_seeds(policy: str, seed: int) -> None:
    data = base_request(next(s for s in policies() if s.name == "gandiva"))
    data["policy"]["name"] = policy
    data["options"]["seed"] = str(seed)
    request_to_model(request(data))  # valid
    first, second = solve_request(request(data)), solve_request(request(data))
    assert first.stats.termination in PLAN_TERMINATIONS
    assert first.plan == second.plan  # reproducible


@pytest.mark.parametrize("policy", ["fifo_packed", "gandiva", "max_min_fairness_packed"])
def test_no_accelerator_types_with_colocations(policy: str) -> None:
    data = four_jobs(policy)
    data["snapshot"]["cluster"]["acceleratorTypes"] = []
    data["snapshot"]["colocations"] = [
        {"jobA": "resnet50", "jobB": "a3c", "throughputA": {"v100": 1.0}}
    ]
    got = fields(data)
    assert "snapshot.cluster.accelerator_types" in got
    assert 'snapshot.colocations[0].throughput_a["v100"]' in got


def test_fisher_market_with_a_huge_throughput() -> None:
    data = four_jobs("fisher_market")
    data["snapshot"]["jobs"][0]["throughput"]["v100"] = 1e308
    assert fields(data) == {'snapshot.jobs[0].throughput["v100"]'}


def test_pollux_with_a_huge_fairness_power() -> None:
    data = four_jobs("pollux")
    data["policy"]["pollux"] = {"fairnessPower": -1e308}
    assert fields(data) == {"policy.pollux.fairness_power"}


@pytest.mark.parametrize("field", ["timeS", "arrivalTimeS"])
def test_allox_with_huge_times(field: str) -> None:
    data = four_jobs("allox")
    if field == "timeS":
        data["snapshot"]["timeS"] = 1e308
        assert fields(data) == {"snapshot.time_s"}
    else:
        data["snapshot"]["jobs"][2]["arrivalTimeS"] = -1e308
        assert fields(data) == {"snapshot.jobs[2].arrival_time_s"}


@pytest.mark.parametrize("spec", policies(), ids=lambda spec: spec.name)
def test_no_jobs_is_a_trivial_plan(spec: Any) -> None:
    data = base_request(spec)
    snapshot = data["snapshot"]
    snapshot["jobs"] = []
    job_keyed = ("colocations", "typeColocations", "history", "interference", "resourceProfiles")
    for name in job_keyed:
        snapshot.pop(name, None)
    if not spec.capabilities.reads_resource_profiles:  # those policies need CPUs and memory
        snapshot["cluster"].pop("nodes", None)
    data.pop("options", None)  # no time limit
    response = solve_request(request(data))
    stats = response.stats
    assert stats.termination in PLAN_TERMINATIONS, stats.detail
    assert not response.plan.jobs
    for value in (stats.objective, stats.best_bound):
        assert math.isfinite(value) and abs(value) <= 1e-9


def test_denormal_step_counts_are_rejected() -> None:
    """A total_steps of 5e-324 made finish-time fairness answer an infinite objective."""
    data = four_jobs("themis_finish_time_fairness")
    data["snapshot"]["jobs"][3]["progress"] = {"totalSteps": 5e-324}
    assert fields(data) == {"snapshot.jobs[3].progress.total_steps"}


def test_echoed_values_are_escaped() -> None:
    data = four_jobs("weighted_max_min_fairness")
    data["snapshot"]["jobs"][0]["throughput"]["h100\nsnapshot.fake: x" + "y" * 5000] = 1.0
    with pytest.raises(ValidationError) as info:
        request_to_model(request(data))
    (violation,) = info.value.violations
    assert "\n" not in str(violation)
    assert violation.field.startswith('snapshot.jobs[0].throughput["h100\\nsnapshot.fake')
