"""The co-location policies on the wire: field-path errors for bad inputs, and every policy's
request through the conversion, `solve()` and the response, plus muri through a real server."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
import pytest

from apportion.server.convert import plan_to_response, request_to_model
from apportion.solver.errors import ValidationError
from apportion.solver.solve import solve
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import allocation_service_pb2_grpc as service_grpc
from apportion.v1 import policy_pb2 as policy_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb
from tests.server.grpc_harness import CHANNEL_OPTIONS, Server, running_server

CPUS = [1.0, 3.0, 6.0]
MEMORY = [20.0, 62.5]
GRID = [0.4, 1.0, 0.5, 1.2, 0.6, 1.5]  # row-major by cpus_per_gpu


def base_request(policy: str, jobs: int = 4) -> service_pb.SolveRequest:
    request = service_pb.SolveRequest()
    snap = request.snapshot
    snap.cluster.accelerator_types.add(name="gpu", count=8)
    snap.cluster.nodes.add(name="n0", accelerator_type="gpu", devices=4, cpus=12, memory_gib=250)
    snap.cluster.nodes.add(name="n1", accelerator_type="gpu", devices=4, cpus=12, memory_gib=250)
    for i in range(jobs):
        job = snap.jobs.add(id=f"j{i}", scale_factor=1, arrival_time_s=float(i),
                            job_type="resnet" if i % 2 else "bert")
        job.throughput["gpu"] = 1.0 + i
        job.progress.total_steps = 1000.0 * (i + 1)
        times = job.stage_times
        times.storage_s, times.cpu_s, times.gpu_s, times.network_s = (0.0, 0.1 * (i + 1), 0.3,
                                                                      0.05)
        job.sharing.gpu_memory_gib = 4.0 + i
        job.sharing.gpu_utilization = 0.2
        job.sharing.sharing_score = i % 3
        if i >= 2:
            job.service_class = snapshot_pb.SERVICE_CLASS_OPPORTUNISTIC
        else:
            job.sharing.slowdown_budget = 0.2
            entry = snap.history.jobs.add(job_id=f"j{i}")
            entry.current.accelerator_type = "gpu"
            entry.current.devices = 1
            entry.current.nodes.append("n0")
            entry.devices.append(f"n0/{i}")
    for job_type in ("bert", "resnet"):
        profile = snap.resource_profiles.add(job_type=job_type)
        profile.cpus_per_gpu.extend(CPUS)
        profile.memory_gib_per_gpu.extend(MEMORY)
        profile.throughput.extend(GRID)
    snap.interference.add(job_ids=["j0", "j2"], slowdown=[1.05, 1.2])
    snap.interference.add(job_ids=["j1", "j3"], slowdown=[1.1, 1.3])
    request.policy.name = policy
    if policy == "antman":
        request.policy.antman.device_memory_gib = 24.0
    return request


def violations(request: service_pb.SolveRequest) -> dict[str, str]:
    with pytest.raises(ValidationError) as info:
        request_to_model(request)
    return {v.field: v.description for v in info.value.violations}


Mutation = Callable[[service_pb.SolveRequest], None]


def _hole(r: service_pb.SolveRequest) -> None:
    del r.snapshot.resource_profiles[0].throughput[-1]


def _nan(r: service_pb.SolveRequest) -> None:
    r.snapshot.resource_profiles[0].throughput[2] = float("nan")


def _non_monotone(r: service_pb.SolveRequest) -> None:
    r.snapshot.resource_profiles[1].cpus_per_gpu[2] = 2.0


def _own_profile_hole(r: service_pb.SolveRequest) -> None:
    own = r.snapshot.jobs[1].resource_profile
    own.cpus_per_gpu.extend([1.0, 3.0])
    own.memory_gib_per_gpu.extend([62.5])
    own.throughput.extend([1.0])


def _no_profile(r: service_pb.SolveRequest) -> None:
    r.snapshot.jobs[3].job_type = "gpt"


def _above_fair(r: service_pb.SolveRequest) -> None:
    r.snapshot.resource_profiles[0].cpus_per_gpu[:] = [4.0, 6.0, 9.0]


def _negative_stage(r: service_pb.SolveRequest) -> None:
    r.snapshot.jobs[2].stage_times.gpu_s = -1.0


def _missing_stage(r: service_pb.SolveRequest) -> None:
    r.snapshot.jobs[1].ClearField("stage_times")


def _group_of_five(r: service_pb.SolveRequest) -> None:
    r.policy.muri.max_group_size = 5


def _memory_above_device(r: service_pb.SolveRequest) -> None:
    r.snapshot.jobs[2].sharing.gpu_memory_gib = 30.0


def _unknown_interference_job(r: service_pb.SolveRequest) -> None:
    r.snapshot.interference[1].job_ids[1] = "nobody"


def _interference_over_four(r: service_pb.SolveRequest) -> None:
    entry = r.snapshot.interference.add(job_ids=["j0", "j1", "j2", "j3", "j0"])
    entry.slowdown.extend([1.0] * 5)


CASES: list[tuple[str, Mutation, str, str]] = [
    ("synergy", _hole, "snapshot.resource_profiles[0].throughput", "holes"),
    ("synergy", _nan, "snapshot.resource_profiles[0].throughput[2]", "no holes"),
    ("synergy", _non_monotone, "snapshot.resource_profiles[1].cpus_per_gpu[2]",
     "not strictly increasing"),
    ("synergy", _own_profile_hole, "snapshot.jobs[1].resource_profile.throughput", "holes"),
    ("synergy", _no_profile, "snapshot.jobs[3].resource_profile", "synergy needs"),
    ("synergy", _above_fair, "snapshot.resource_profiles[0]", "GPU-proportional share"),
    ("muri", _negative_stage, "snapshot.jobs[2].stage_times.gpu_s", ">= 0"),
    ("muri", _missing_stage, "snapshot.jobs[1].stage_times", "muri needs"),
    ("muri", _group_of_five, "policy.muri.max_group_size", "[1, 4]"),
    ("lucid", _memory_above_device, "snapshot.jobs[2].sharing.gpu_memory_gib",
     "more than a device holds"),
    ("antman", _memory_above_device, "snapshot.jobs[2].sharing.gpu_memory_gib",
     "more than a device holds"),
    ("iadeep", _unknown_interference_job, "snapshot.interference[1].job_ids[1]", "unknown job"),
    ("antman", _interference_over_four, "snapshot.interference[2].job_ids", "2 to 4"),
]


@pytest.mark.parametrize(("policy", "mutate", "field", "text"), CASES,
                         ids=[f"{c[0]}-{c[1].__name__}" for c in CASES])
def test_bad_inputs_name_their_field(policy: str, mutate: Mutation, field: str,
                                     text: str) -> None:
    request = base_request(policy)
    request_to_model(request)  # valid as built
    mutate(request)
    found = violations(request)
    assert field in found, found
    assert text in found[field]


def test_antman_needs_device_memory_and_one_device_per_opportunistic_job() -> None:
    request = base_request("antman")
    request.snapshot.jobs[3].scale_factor = 2
    request.policy.antman.ClearField("device_memory_gib")
    found = violations(request)
    assert "snapshot.cluster.topology.devices" in found
    assert "snapshot.jobs[3].scale_factor" in found


@pytest.mark.parametrize("policy", ["synergy", "muri", "muri_l", "lucid", "antman", "iadeep"])
def test_every_policy_answers_with_groups(policy: str) -> None:
    request = base_request(policy)
    if policy == "muri":
        request.policy.muri.exact_groups = True
    problem, resolved, options = request_to_model(request)
    plan = solve(problem, resolved, options)
    response = plan_to_response(plan, problem, resolved, 0.0, 0.0)
    out = response.plan
    assert out.groups, policy
    members = [job_id for group in out.groups for job_id in group.job_ids]
    assert len(members) == len(set(members))
    for g, group in enumerate(out.groups):
        assert len(group.slowdown) == len(group.job_ids)
        for job_id in group.job_ids:
            entry = next(e for e in out.jobs if e.job_id == job_id)
            assert entry.group == g
            assert entry.HasField("slowdown")
    if policy == "synergy":
        assert all(entry.HasField("cpus") and entry.HasField("memory_gib") for entry in out.jobs)
        assert sum(entry.cpus for entry in out.jobs) <= 24.0 + 1e-9
    if policy not in ("muri_l",):
        assert response.stats.heuristic, policy
        assert response.stats.heuristic_objective <= response.stats.objective + 1e-9
    compat = getattr(policy_pb, f"COMPAT_{policy.split('_')[0].upper()}")
    request.policy.compat = compat
    problem, resolved, options = request_to_model(request)
    plan = solve(problem, resolved, options)
    assert plan.certificate.termination.value in ("heuristic", "optimal")


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--workers", "1") as started:
        yield started


def test_muri_through_a_real_server(server: Server) -> None:
    request = base_request("muri_s")
    with grpc.insecure_channel(server.address, options=CHANNEL_OPTIONS) as channel:
        stub = service_grpc.AllocationServiceStub(channel)
        response = stub.Solve(request, timeout=60)
        assert response.stats.termination == service_pb.TERMINATION_REASON_HEURISTIC
        assert sorted(j for g in response.plan.groups for j in g.job_ids) == [
            "j0", "j1", "j2", "j3"]
        bad = base_request("muri")
        bad.snapshot.jobs[0].stage_times.cpu_s = float("inf")
        with pytest.raises(grpc.RpcError) as info:
            stub.Solve(bad, timeout=60)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "snapshot.jobs[0].stage_times.cpu_s" in (info.value.details() or "")
