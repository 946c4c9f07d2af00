"""The gRPC server end to end: a real server subprocess on 127.0.0.1 (ephemeral port), real
sockets, no mocks. Timeouts below only prevent hangs; nothing asserts how fast a call is."""

from __future__ import annotations

import math
import random
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from apportion.server.pipeline import solve_request
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import allocation_service_pb2_grpc as service_grpc

SERVICE = "apportion.v1.AllocationService"
START_TIMEOUT_S = 120.0
CALL_TIMEOUT_S = 60.0
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
]
SLOW_JOBS = 100_000
"""Jobs in the slow instance (distinct random throughputs on 3 types: no aggregation). Sized
so that parsing, validating and solving it takes seconds; measured in-process at ~2-4 s."""


def server_command(*args: str) -> list[str]:
    """The command that starts a server: the CLI's ``apportion serve``."""
    return [sys.executable, "-m", "apportion.server.cli", "serve", *args]


@dataclass
class Server:
    process: subprocess.Popen[str]
    address: str
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def _read_listening_line(process: subprocess.Popen[str], timeout_s: float) -> str:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if selector.select(timeout=0.5):
                return process.stdout.readline()
            if process.poll() is not None:
                return ""
        return ""
    finally:
        selector.close()


def _start(*args: str) -> Iterator[Server]:
    with tempfile.TemporaryDirectory() as tmp:
        stderr_path = Path(tmp) / "stderr.txt"
        with stderr_path.open("w") as stderr:
            process = subprocess.Popen(
                server_command("--host", "127.0.0.1", "--port", "0", *args),
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        try:
            line = _read_listening_line(process, START_TIMEOUT_S)
            prefix = "apportion listening on "
            assert line.startswith(prefix), (
                f"no listening line: {line!r}\n{stderr_path.read_text()}"
            )
            server = Server(process, line[len(prefix) :].strip(), stderr_path)
            yield server
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=60)
            assert code == 0, f"exit code {code}\n{server.stderr()}"
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            assert process.stdout is not None
            process.stdout.close()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    yield from _start("--workers", "2", "--max-pending", "6")


@pytest.fixture(scope="module")
def small_limit_server() -> Iterator[Server]:
    yield from _start("--workers", "1", "--max-message-bytes", "2000")


@pytest.fixture(scope="module")
def saturated_server() -> Iterator[Server]:
    yield from _start("--workers", "1", "--max-pending", "0")


@pytest.fixture(scope="module")
def channel(server: Server) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.address, options=CHANNEL_OPTIONS) as ch:
        yield ch


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> service_grpc.AllocationServiceStub:
    return service_grpc.AllocationServiceStub(channel)


def small_request() -> service_pb.SolveRequest:
    request = service_pb.SolveRequest()
    cluster = request.snapshot.cluster
    cluster.accelerator_types.add(name="v100", count=4)
    cluster.accelerator_types.add(name="p100", count=2)
    for job_id, v100, p100, scale, weight in (
        ("a", 4.0, 2.0, 1, 1.0),
        ("b", 3.0, 2.5, 2, 2.0),
        ("c", 1.0, 0.0, 1, 1.0),
    ):
        job = request.snapshot.jobs.add(id=job_id, scale_factor=scale, priority_weight=weight)
        job.throughput["v100"] = v100
        job.throughput["p100"] = p100
    request.policy.name = "weighted_max_min_fairness"
    return request


def large_request(jobs: int, seed: int = 7) -> service_pb.SolveRequest:
    """`jobs` jobs with distinct random throughputs over three types."""
    request = service_pb.SolveRequest()
    names = ("v100", "p100", "k80")
    for name in names:
        request.snapshot.cluster.accelerator_types.add(name=name, count=jobs // 100 + 1)
    rng = random.Random(seed)
    for i in range(jobs):
        job = request.snapshot.jobs.add(id=f"job-{i}")
        for name in names:
            job.throughput[name] = rng.uniform(0.1, 10.0)
    request.policy.name = "weighted_max_min_fairness"
    return request


@pytest.fixture(scope="module")
def slow_request() -> service_pb.SolveRequest:
    return large_request(SLOW_JOBS)


def bad_request(error: grpc.RpcError) -> error_details_pb2.BadRequest:
    """The BadRequest detail of an INVALID_ARGUMENT error."""
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    status = rpc_status.from_call(error)
    assert status is not None, "no google.rpc.Status in the trailers"
    details = error_details_pb2.BadRequest()
    assert len(status.details) == 1
    assert status.details[0].Unpack(details)
    lines = [f"{v.field}: {v.description}" for v in details.field_violations]
    assert error.details() == "\n".join(lines)
    return details


def rejected_fields(stub: service_grpc.AllocationServiceStub, request: object) -> list[str]:
    with pytest.raises(grpc.RpcError) as info:
        stub.Solve(request, timeout=CALL_TIMEOUT_S)
    return [v.field for v in bad_request(info.value).field_violations]


def solver_pids(server: Server) -> set[int]:
    """Child processes of the server (workers and multiprocessing's resource tracker)."""
    children: set[int] = set()
    if not Path("/proc").is_dir():
        return children
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == server.process.pid:
                children.add(int(entry.name))
    return children


# ----------------------------------------------------------------------------- service


def test_health_is_serving(channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for name in ("", SERVICE):
        reply = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=CALL_TIMEOUT_S)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_service(channel: grpc.Channel) -> None:
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    replies = list(reflection.ServerReflectionInfo(iter([request]), timeout=CALL_TIMEOUT_S))
    names = {s.name for s in replies[0].list_services_response.service}
    assert SERVICE in names
    assert "grpc.health.v1.Health" in names


def test_list_policies(stub: service_grpc.AllocationServiceStub) -> None:
    reply = stub.ListPolicies(service_pb.ListPoliciesRequest(), timeout=CALL_TIMEOUT_S)
    by_name = {p.name: p for p in reply.policies}
    mmf = by_name["weighted_max_min_fairness"]
    assert "max_min_fairness_perf" in mmf.aliases
    assert mmf.maximize
    assert mmf.parameters_message == "apportion.v1.MaxMinFairnessParameters"
    assert "jobs[].throughput" in mmf.required_inputs
    assert mmf.description
    assert mmf.parameters_field == "max_min_fairness"
    assert mmf.capabilities.plan_kind == service_pb.PLAN_KIND_TIME_SHARE
    assert mmf.capabilities.problem_class == service_pb.PROBLEM_CLASS_LP
    assert mmf.capabilities.space_sharing and mmf.capabilities.round_schedule
    assert mmf.capabilities.default_relative_gap == 1e-6
    # the oneof field name differs from the policy name: clients read it here
    assert by_name["cost_normalized_throughput"].parameters_field == "cost_throughput"
    assert by_name["sia"].capabilities.plan_kind == service_pb.PLAN_KIND_CONFIGURATION
    assert by_name["hierarchical_max_min_fairness"].capabilities.reads_tenants
    assert by_name["fifo"].capabilities.problem_class == service_pb.PROBLEM_CLASS_HEURISTIC


def test_list_policies_says_which_stages_combine(
    stub: service_grpc.AllocationServiceStub,
) -> None:
    reply = stub.ListPolicies(service_pb.ListPoliciesRequest(), timeout=CALL_TIMEOUT_S)
    by_name = {p.name: p for p in reply.policies}
    assert set(by_name["weighted_max_min_fairness"].combines_with) == {
        "admission", "placement", "round_schedule"}
    assert "round_schedule" not in by_name["sia"].combines_with
    assert "exact" in by_name["sia"].placers and "blox_consolidated" in by_name["sia"].placers


def test_placement_through_the_server(stub: service_grpc.AllocationServiceStub) -> None:
    from google.protobuf import json_format

    request = service_pb.SolveRequest()
    example = Path(__file__).resolve().parents[2] / "examples" / "dgx_racks.json"
    json_format.Parse(example.read_text(), request)
    reply = stub.Solve(request, timeout=CALL_TIMEOUT_S)
    assert reply.plan.placement.placer == "exact"
    devices = [d for job in reply.plan.jobs for d in job.placement.devices]
    assert len(devices) == len(set(devices)) == sum(
        max(job.scale_factor, 1) for job in request.snapshot.jobs)
    request.snapshot.cluster.topology.links[0].device_b = "ghost"
    assert "snapshot.cluster.topology.links[0].device_b" in rejected_fields(stub, request)


def test_solve_matches_in_process(stub: service_grpc.AllocationServiceStub) -> None:
    request = small_request()
    reply = stub.Solve(request, timeout=CALL_TIMEOUT_S)
    expected = solve_request(request)
    assert reply.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    assert reply.stats.HasField("objective")
    assert math.isclose(reply.stats.objective, expected.stats.objective, rel_tol=1e-9)
    assert [j.job_id for j in reply.plan.jobs] == ["a", "b", "c"]
    assert 0 < reply.stats.time_limit_s <= CALL_TIMEOUT_S


def test_time_limit_is_the_smaller_of_request_and_deadline(
    stub: service_grpc.AllocationServiceStub,
) -> None:
    request = small_request()
    request.options.time_limit_s = 5.0
    assert stub.Solve(request, timeout=CALL_TIMEOUT_S).stats.time_limit_s == 5.0
    request.options.time_limit_s = 10 * CALL_TIMEOUT_S
    assert stub.Solve(request, timeout=CALL_TIMEOUT_S).stats.time_limit_s < CALL_TIMEOUT_S


def test_solve_without_deadline(stub: service_grpc.AllocationServiceStub) -> None:
    reply = stub.Solve(small_request())
    assert reply.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    assert reply.stats.time_limit_s == 0


# ----------------------------------------------------------------------------- bad input

Mutation = Callable[[service_pb.SolveRequest], None]


def _throughput(value: float) -> Mutation:
    def mutate(r: service_pb.SolveRequest) -> None:
        r.snapshot.jobs[0].throughput["v100"] = value

    return mutate


def _no_usable_type(r: service_pb.SolveRequest) -> None:
    r.snapshot.jobs[2].throughput["v100"] = 0.0


def _no_throughput(r: service_pb.SolveRequest) -> None:
    r.snapshot.jobs[2].ClearField("throughput")


def _unknown_type(r: service_pb.SolveRequest) -> None:
    r.snapshot.jobs[1].throughput["a100"] = 1.0


def _duplicate_job(r: service_pb.SolveRequest) -> None:
    r.snapshot.jobs[1].id = "a"


def _duplicate_type(r: service_pb.SolveRequest) -> None:
    r.snapshot.cluster.accelerator_types[1].name = "v100"


def _scale(value: int) -> Mutation:
    def mutate(r: service_pb.SolveRequest) -> None:
        r.snapshot.jobs[1].scale_factor = value

    return mutate


def _weight(value: float) -> Mutation:
    def mutate(r: service_pb.SolveRequest) -> None:
        r.snapshot.jobs[2].priority_weight = value

    return mutate


def _negative_count(r: service_pb.SolveRequest) -> None:
    r.snapshot.cluster.accelerator_types[0].count = -1


def _no_types(r: service_pb.SolveRequest) -> None:
    r.snapshot.cluster.ClearField("accelerator_types")


def _zero_counts(r: service_pb.SolveRequest) -> None:
    for acc in r.snapshot.cluster.accelerator_types:
        acc.count = 0


def _unknown_policy(r: service_pb.SolveRequest) -> None:
    r.policy.name = "fastest_first"


def _wrong_parameters(r: service_pb.SolveRequest) -> None:
    r.policy.name = "isolated"
    r.policy.max_min_fairness.heterogeneity_agnostic = True


BAD_INPUTS: dict[str, tuple[Mutation, str]] = {
    "nan throughput": (_throughput(math.nan), 'snapshot.jobs[0].throughput["v100"]'),
    "inf throughput": (_throughput(math.inf), 'snapshot.jobs[0].throughput["v100"]'),
    "negative throughput": (_throughput(-1.0), 'snapshot.jobs[0].throughput["v100"]'),
    "unknown type": (_unknown_type, 'snapshot.jobs[1].throughput["a100"]'),
    "no usable type": (_no_usable_type, "snapshot.jobs[2].throughput"),
    "no throughput": (_no_throughput, "snapshot.jobs[2].throughput"),
    "duplicate job id": (_duplicate_job, "snapshot.jobs[1].id"),
    "duplicate type": (_duplicate_type, "snapshot.cluster.accelerator_types[1].name"),
    "scale factor 0": (_scale(0), "snapshot.jobs[1].scale_factor"),
    "scale factor too large": (_scale(5), "snapshot.jobs[1].scale_factor"),
    "weight 0": (_weight(0.0), "snapshot.jobs[2].priority_weight"),
    "negative weight": (_weight(-2.0), "snapshot.jobs[2].priority_weight"),
    "negative count": (_negative_count, "snapshot.cluster.accelerator_types[0].count"),
    "no types": (_no_types, "snapshot.cluster.accelerator_types"),
    "all counts 0": (_zero_counts, "snapshot.cluster"),
    "unknown policy": (_unknown_policy, "policy.name"),
    "parameters of another policy": (_wrong_parameters, "policy.max_min_fairness"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_invalid_argument(
    stub: service_grpc.AllocationServiceStub, case: str
) -> None:
    mutate, field = BAD_INPUTS[case]
    request = small_request()
    mutate(request)
    assert field in rejected_fields(stub, request)


def test_unknown_policy_lists_known_names(stub: service_grpc.AllocationServiceStub) -> None:
    request = small_request()
    _unknown_policy(request)
    with pytest.raises(grpc.RpcError) as info:
        stub.Solve(request, timeout=CALL_TIMEOUT_S)
    (violation,) = bad_request(info.value).field_violations
    assert violation.field == "policy.name"
    assert "weighted_max_min_fairness" in violation.description
    assert "isolated" in violation.description


def test_every_violation_is_listed(stub: service_grpc.AllocationServiceStub) -> None:
    request = small_request()
    for mutate in (_throughput(math.nan), _duplicate_job, _weight(0.0), _unknown_policy):
        mutate(request)
    fields = rejected_fields(stub, request)
    for expected in (
        'snapshot.jobs[0].throughput["v100"]',
        "snapshot.jobs[1].id",
        "snapshot.jobs[2].priority_weight",
        "policy.name",
    ):
        assert expected in fields


def test_thousands_of_violations_are_summarized(stub: service_grpc.AllocationServiceStub) -> None:
    request = large_request(3000)
    for job in request.snapshot.jobs:
        job.throughput["v100"] = math.nan
    fields = rejected_fields(stub, request)
    assert fields[0] == 'snapshot.jobs[0].throughput["v100"]'
    assert 1 < len(fields) < 3000
    assert fields[-1] == "request"


def test_unparsable_request(channel: grpc.Channel) -> None:
    raw = channel.unary_unary(f"/{SERVICE}/Solve")  # no serializers: bytes in, bytes out
    with pytest.raises(grpc.RpcError) as info:
        raw(b"\xff\xff\xff", timeout=CALL_TIMEOUT_S)
    fields = [v.field for v in bad_request(info.value).field_violations]
    assert fields == ["request"]


def test_request_over_the_size_limit(small_limit_server: Server) -> None:
    request = large_request(40)
    size = request.ByteSize()
    assert 2000 < size < 8000  # over --max-message-bytes, under gRPC's own hard cap (4x)
    with grpc.insecure_channel(small_limit_server.address) as ch:
        stub = service_grpc.AllocationServiceStub(ch)
        with pytest.raises(grpc.RpcError) as info:
            stub.Solve(request, timeout=CALL_TIMEOUT_S)
        (violation,) = bad_request(info.value).field_violations
        assert violation.field == "request"
        assert violation.description == f"{size} bytes exceeds the limit of 2000 bytes"
        # a request under the limit is still served
        reply = stub.Solve(small_request(), timeout=CALL_TIMEOUT_S)
        assert reply.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL


# ----------------------------------------------------------------------------- load


def test_concurrent_calls(stub: service_grpc.AllocationServiceStub) -> None:
    def call(k: int) -> service_pb.SolveResponse:
        request = small_request()
        request.snapshot.jobs[0].throughput["v100"] = 1.0 + k
        reply: service_pb.SolveResponse = stub.Solve(request, timeout=CALL_TIMEOUT_S)
        return reply

    with ThreadPoolExecutor(max_workers=8) as pool:
        replies = list(pool.map(call, range(8)))
    for k, reply in enumerate(replies):
        assert reply.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
        assert reply.plan.jobs[0].job_id == "a"
        assert reply.plan.jobs[0].effective_throughput > 0, k


def test_deadline_shorter_than_the_solve(
    server: Server,
    stub: service_grpc.AllocationServiceStub,
    slow_request: service_pb.SolveRequest,
) -> None:
    before = solver_pids(server)
    deadline_s = 0.5
    try:
        reply = stub.Solve(slow_request, timeout=deadline_s)
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED, error
    else:  # finished in time: then the limit it ran under was within the deadline
        assert 0 < reply.stats.time_limit_s <= deadline_s
    # the worker running the abandoned solve is terminated and replaced
    if before:
        give_up = time.monotonic() + CALL_TIMEOUT_S
        while before <= solver_pids(server) and time.monotonic() < give_up:
            time.sleep(0.1)
        assert not before <= solver_pids(server), "no worker was replaced"
    reply = stub.Solve(small_request(), timeout=CALL_TIMEOUT_S)
    assert reply.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL


def test_saturation_is_resource_exhausted(
    saturated_server: Server, slow_request: service_pb.SolveRequest
) -> None:
    with grpc.insecure_channel(saturated_server.address, options=CHANNEL_OPTIONS) as ch:
        stub = service_grpc.AllocationServiceStub(ch)
        calls = [stub.Solve.future(slow_request, timeout=4.0) for _ in range(2)]
        codes = []
        for call in calls:
            error = call.exception(timeout=CALL_TIMEOUT_S)
            codes.append(grpc.StatusCode.OK if error is None else error.code())
    assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == 1, codes
    (other,) = (c for c in codes if c != grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert other in (grpc.StatusCode.OK, grpc.StatusCode.DEADLINE_EXCEEDED), codes
