"""The gRPC server end to end: a real server subprocess on 127.0.0.1 (ephemeral port), real
sockets, no mocks. Timeouts below only prevent hangs; nothing asserts how fast a call is."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2
from google.rpc import error_details_pb2
from grpc_harness import (
    CALL_TIMEOUT_S,
    CHANNEL_OPTIONS,
    SERVICE,
    Server,
    bad_request,
    call_error,
    detail,
    large_request,
    running_server,
    small_request,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from apportion.server.pipeline import solve_request
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import allocation_service_pb2_grpc as service_grpc

SLOW_JOBS = 100_000
"""Jobs in the slow instance (distinct random throughputs on 3 types: no aggregation). Sized
so that parsing, validating and solving it takes seconds; measured in-process at ~2-4 s."""


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--workers", "2", "--max-pending", "6") as started:
        yield started


@pytest.fixture(scope="module")
def small_limit_server() -> Iterator[Server]:
    with running_server("--workers", "1", "--max-message-bytes", "2000") as started:
        yield started


@pytest.fixture(scope="module")
def saturated_server() -> Iterator[Server]:
    with running_server("--workers", "1", "--max-pending", "0") as started:
        yield started


@pytest.fixture(scope="module")
def channel(server: Server) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.address, options=CHANNEL_OPTIONS) as ch:
        yield ch


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> service_grpc.AllocationServiceStub:
    return service_grpc.AllocationServiceStub(channel)


@pytest.fixture(scope="module")
def slow_request() -> service_pb.SolveRequest:
    return large_request(SLOW_JOBS)


def rejected_fields(stub: service_grpc.AllocationServiceStub, request: object) -> list[str]:
    with pytest.raises(grpc.RpcError) as info:
        stub.Solve(request, timeout=CALL_TIMEOUT_S)
    return [v.field for v in bad_request(info.value).field_violations]


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


@pytest.mark.parametrize("package", ["grpc.reflection.v1alpha", "grpc.reflection.v1"])
def test_reflection_both_protocols(channel: grpc.Channel, package: str) -> None:
    """v1 and v1alpha answer the same questions (same messages, different package): the list
    of services, and the file that defines a service (also the v1 reflection service itself)."""
    call = channel.stream_stream(
        f"/{package}.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE),
        reflection_pb2.ServerReflectionRequest(
            file_containing_symbol="grpc.reflection.v1.ServerReflection"
        ),
    ]
    listing, service_file, v1_file = list(call(iter(requests), timeout=CALL_TIMEOUT_S))
    names = {s.name for s in listing.list_services_response.service}
    assert {SERVICE, "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"} <= names
    files = [descriptor_pb2.FileDescriptorProto.FromString(raw)
             for raw in service_file.file_descriptor_response.file_descriptor_proto]
    assert any(f.package == "apportion.v1" and f.service for f in files)
    (v1,) = [descriptor_pb2.FileDescriptorProto.FromString(raw)
             for raw in v1_file.file_descriptor_response.file_descriptor_proto]
    assert v1.package == "grpc.reflection.v1"
    method = v1.service[0].method[0]
    assert method.input_type == ".grpc.reflection.v1.ServerReflectionRequest"
    assert {m.name for m in v1.message_type} >= {"ServerReflectionRequest", "ErrorResponse"}


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
    assert (mmf.objective_name, mmf.objective_unit) == ("smallest level", "")
    assert (mmf.job_value_name, mmf.job_value_unit) == ("level", "")
    allox = by_name["allox"]
    assert (allox.job_value_name, allox.job_value_unit) == ("completion time", "s")
    assert by_name["fifo"].job_value_name == ""  # its value is the job's throughput
    # the oneof field name differs from the policy name: clients read it here
    assert by_name["cost_normalized_throughput"].parameters_field == "cost_throughput"
    assert by_name["sia"].capabilities.plan_kind == service_pb.PLAN_KIND_CONFIGURATION
    assert by_name["hierarchical_max_min_fairness"].capabilities.reads_tenants
    assert by_name["fifo"].capabilities.problem_class == service_pb.PROBLEM_CLASS_HEURISTIC
    assert by_name["optimus"].capabilities.reads_loss_history
    assert by_name["lyra"].capabilities.reads_inference
    assert mmf.capabilities.partitionable and mmf.capabilities.placement_stage


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


def test_rows_over_the_service_are_solved_as_in_process(
    stub: service_grpc.AllocationServiceStub,
) -> None:
    """Enough jobs for the worker to decode them from the client's bytes (found in place,
    handed over the pipe as they are), with tenants, job types and unicode ids: the same plan,
    bit for bit, as in process (`tests/server/test_job_wire.py` holds the decoder to the
    `Job` messages)."""
    request = large_request(400)
    request.snapshot.tenants.add(name="t")
    for i, job in enumerate(request.snapshot.jobs):
        job.id += "é" * (i % 3)
        job.tenant = "t" if i % 2 else ""
        job.job_type = "resnet" * (i % 4)
        job.scale_factor = 1 + i % 2
    reply = stub.Solve(request, timeout=CALL_TIMEOUT_S)
    expected = solve_request(request)
    assert reply.stats.termination == expected.stats.termination
    assert reply.plan == expected.plan


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


HUGE_NAMES = {"4,000 characters": "x" * 4000, "4,000 emoji": "\U0001f600" * 4000,
              "1 MiB": "y" * 2**20}


@pytest.mark.parametrize("case", list(HUGE_NAMES))
def test_a_huge_policy_name_is_invalid_argument_with_the_name_cut(
    stub: service_grpc.AllocationServiceStub, case: str
) -> None:
    """The echoed name is cut (a whole one overflows gRPC's 8 KiB trailers: the client would
    see RESOURCE_EXHAUSTED); the list of known names at the end of the message is kept."""
    request = small_request()
    request.policy.name = HUGE_NAMES[case]
    error = call_error(lambda: stub.Solve(request, timeout=CALL_TIMEOUT_S))
    (violation,) = bad_request(error).field_violations
    assert violation.field == "policy.name"
    assert "characters omitted]" in violation.description
    assert len(violation.description.encode()) <= 1300, case
    assert violation.description.endswith("weighted_max_min_fairness")


def test_control_characters_cannot_fake_violation_lines(
    stub: service_grpc.AllocationServiceStub,
) -> None:
    """A newline in an echoed key is escaped: one message line per violation."""
    request = small_request()
    request.snapshot.jobs[0].throughput["v100\nsnapshot.jobs[9].id: fake"] = 1.0
    error = call_error(lambda: stub.Solve(request, timeout=CALL_TIMEOUT_S))
    violations = bad_request(error).field_violations
    assert len(error.details().splitlines()) == len(violations)
    assert any("\\n" in v.field for v in violations)
    assert all("\n" not in v.field + v.description for v in violations)


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


def test_request_over_grpc_receive_limit_is_not_retryable(small_limit_server: Server) -> None:
    """Over 4 x --max-message-bytes gRPC itself refuses the message with RESOURCE_EXHAUSTED:
    unlike the busy reply, it carries no RetryInfo, and its message says what happened."""
    request = large_request(200)
    assert request.ByteSize() > 4 * 2000
    with grpc.insecure_channel(small_limit_server.address) as ch:
        stub = service_grpc.AllocationServiceStub(ch)
        error = call_error(lambda: stub.Solve(request, timeout=CALL_TIMEOUT_S))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
    assert "larger than max" in (error.details() or "")
    assert detail(error, error_details_pb2.RetryInfo) is None


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
    """Validation and the solve spend the call's deadline: the slow request answers within
    it or the call ends with DEADLINE_EXCEEDED, and the service answers the next call.
    (A worker still busy at the deadline is replaced: test_service_faults.)"""
    deadline_s = 0.5
    try:
        reply = stub.Solve(slow_request, timeout=deadline_s)
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED, error
    else:  # finished in time: then the limit it ran under was within the deadline
        assert 0 < reply.stats.time_limit_s <= deadline_s
    reply = stub.Solve(small_request(), timeout=CALL_TIMEOUT_S)
    assert reply.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL


def test_saturation_is_resource_exhausted(
    saturated_server: Server, slow_request: service_pb.SolveRequest
) -> None:
    with grpc.insecure_channel(saturated_server.address, options=CHANNEL_OPTIONS) as ch:
        stub = service_grpc.AllocationServiceStub(ch)
        calls = [stub.Solve.future(slow_request, timeout=4.0) for _ in range(2)]
        errors = [call.exception(timeout=CALL_TIMEOUT_S) for call in calls]
    codes = [grpc.StatusCode.OK if e is None else e.code() for e in errors]
    assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == 1, codes
    (other,) = (c for c in codes if c != grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert other in (grpc.StatusCode.OK, grpc.StatusCode.DEADLINE_EXCEEDED), codes
    exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
    (busy,) = (e for e in errors if e is not None and e.code() == exhausted)
    retry = detail(busy, error_details_pb2.RetryInfo)
    assert isinstance(retry, error_details_pb2.RetryInfo), "a busy reply says when to retry"
    assert retry.retry_delay.ToNanoseconds() > 0
