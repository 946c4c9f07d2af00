"""Hostile requests through a real server: huge strings, control characters, absurd numbers,
malformed bytes. Each must be answered with INVALID_ARGUMENT or a normal response (never
INTERNAL, never a lost worker), and the server must stay healthy. The in-process fuzz test
over every policy lives with the conversion tests; this one is the wire side: message size,
trailers, escaping, the worker boundary."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import grpc
import pytest
from grpc_harness import (
    CALL_TIMEOUT_S,
    CHANNEL_OPTIONS,
    SERVICE,
    Server,
    bad_request,
    health_status,
    running_server,
    small_request,
    worker_pids,
)
from grpc_health.v1 import health_pb2

from apportion.v1 import allocation_service_pb2 as service_pb

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
HOSTILE_TEXT = "\x00\x1b[31m\n\r\t\u202e\u2028\ufeff😀"
"""NUL, a terminal escape, line breaks, a bidi override, a line separator, a BOM, an emoji."""

Build = Callable[[], bytes]
"""Builds the serialized request bytes of a case."""


def _message(change: Callable[[service_pb.SolveRequest], None]) -> Build:
    def build() -> bytes:
        request = small_request()
        change(request)
        return request.SerializeToString()

    return build


def _set(path: str, value: object) -> Callable[[service_pb.SolveRequest], None]:
    """Set ``a.b.c`` = value on the request (a number selects a list entry)."""

    def change(request: service_pb.SolveRequest) -> None:
        *parents, leaf = path.split(".")
        target: object = request
        for name in parents:
            target = target[int(name)] if name.isdigit() else getattr(target, name)  # type: ignore[index]
        setattr(target, leaf, value)

    return change


def _throughput(key: str, value: float) -> Callable[[service_pb.SolveRequest], None]:
    def change(request: service_pb.SolveRequest) -> None:
        request.snapshot.jobs[0].throughput[key] = value

    return change


def _job_ids(value: str) -> Callable[[service_pb.SolveRequest], None]:
    def change(request: service_pb.SolveRequest) -> None:
        for job in request.snapshot.jobs:
            job.id = value

    return change


def _type_name(value: str) -> Callable[[service_pb.SolveRequest], None]:
    def change(request: service_pb.SolveRequest) -> None:
        request.snapshot.cluster.accelerator_types[0].name = value
        for job in request.snapshot.jobs:
            job.throughput[value] = job.throughput.pop("v100")

    return change


def _many_types(count: int) -> Callable[[service_pb.SolveRequest], None]:
    def change(request: service_pb.SolveRequest) -> None:
        for k in range(count):
            request.snapshot.cluster.accelerator_types.add(name=f"t{k}", count=1)

    return change


def _many_jobs(count: int) -> Callable[[service_pb.SolveRequest], None]:
    def change(request: service_pb.SolveRequest) -> None:
        for k in range(count):
            job = request.snapshot.jobs.add(id="dup" if k % 2 else f"x{k}")
            job.throughput["v100"] = math.nan if k % 3 == 0 else 1.0

    return change


def _no_jobs(request: service_pb.SolveRequest) -> None:
    request.snapshot.ClearField("jobs")


def _tenant(value: str) -> Callable[[service_pb.SolveRequest], None]:
    def change(request: service_pb.SolveRequest) -> None:
        request.policy.name = "hierarchical_max_min_fairness"
        request.snapshot.tenants.add(name="a", weight=1.0)
        for job in request.snapshot.jobs:
            job.tenant = value

    return change


def _raw(data: bytes) -> Build:
    return lambda: data


CASES: dict[str, Build] = {
    # strings: long, and full of control characters
    "policy name 1 MiB": _message(_set("policy.name", "x" * 2**20)),
    "policy name with control characters": _message(_set("policy.name", HOSTILE_TEXT)),
    "policy name 4,000 emoji": _message(_set("policy.name", "😀" * 4000)),
    "job ids 100 KB, duplicated": _message(_job_ids("j" * 100_000)),
    "job ids with control characters": _message(_job_ids(HOSTILE_TEXT)),
    "throughput key 100 KB": _message(_throughput("k" * 100_000, 1.0)),
    "throughput key with control characters": _message(_throughput(HOSTILE_TEXT, 1.0)),
    "type name with control characters": _message(_type_name(HOSTILE_TEXT)),
    "type name 100 KB": _message(_type_name("t" * 100_000)),
    "tenant with control characters": _message(_tenant(HOSTILE_TEXT)),
    "tenant name 100 KB": _message(_tenant("q" * 100_000)),
    # numbers
    "throughput 1e308": _message(_throughput("v100", 1e308)),
    "throughput max float": _message(_throughput("v100", 1.7976931348623157e308)),
    "throughput subnormal": _message(_throughput("v100", 5e-324)),
    "throughput -0.0": _message(_throughput("v100", -0.0)),
    "throughput NaN": _message(_throughput("v100", math.nan)),
    "throughput -inf": _message(_throughput("v100", -math.inf)),
    "count int32 max": _message(_set("snapshot.cluster.accelerator_types.0.count", INT32_MAX)),
    "count int32 min": _message(_set("snapshot.cluster.accelerator_types.0.count", -(2**31))),
    "scale factor int32 max": _message(_set("snapshot.jobs.0.scale_factor", INT32_MAX)),
    "scale factor negative": _message(_set("snapshot.jobs.0.scale_factor", -5)),
    "weight 1e-308": _message(_set("snapshot.jobs.0.priority_weight", 1e-308)),
    "weight 1e308": _message(_set("snapshot.jobs.0.priority_weight", 1e308)),
    "weight NaN": _message(_set("snapshot.jobs.0.priority_weight", math.nan)),
    "time limit 1e308": _message(_set("options.time_limit_s", 1e308)),
    "time limit NaN": _message(_set("options.time_limit_s", math.nan)),
    "time limit -inf": _message(_set("options.time_limit_s", -math.inf)),
    "time limit 1e-300": _message(_set("options.time_limit_s", 1e-300)),
    "relative gap NaN": _message(_set("options.relative_gap", math.nan)),
    "relative gap 1": _message(_set("options.relative_gap", 1.0)),
    "seed int64 max": _message(_set("options.seed", INT64_MAX)),
    "seed int64 min": _message(_set("options.seed", -(2**63))),
    "threads negative": _message(_set("options.threads", -1)),
    "snapshot time 1e308": _message(_set("snapshot.time_s", 1e308)),
    "snapshot time NaN": _message(_set("snapshot.time_s", math.nan)),
    "unknown solver enum": _message(_set("options.solver", 12345)),
    "unknown compat enum": _message(_set("policy.compat", -7)),
    # sizes
    "2,000 accelerator types": _message(_many_types(2000)),
    "2,000 jobs, half duplicates, a third NaN": _message(_many_jobs(2000)),
    "no jobs": _message(_no_jobs),
    # bytes that are not a SolveRequest
    "empty message": _raw(b""),
    "garbage": _raw(b"\xff" * 64),
    "truncated": _raw(small_request().SerializeToString()[:-3]),
    "invalid UTF-8 in a string": _raw(b"\x12\x04\x0a\x02\xc3\x28"),
    "field number 0": _raw(b"\x00\x01"),
    "deep unknown groups": _raw(b"\xa3\x06" * 200),
}
"""Every case: the request bytes. (Policy-specific numbers, such as thread or round counts
and the inputs of the market and Sia families, are fuzzed in process per policy.)"""


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--workers", "2", "--max-pending", "4", "--max-worker-memory", "2G"
                        ) as started:
        yield started


@pytest.fixture(scope="module")
def channel(server: Server) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.address, options=CHANNEL_OPTIONS) as ch:
        yield ch


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_request_gets_a_clear_answer(channel: grpc.Channel, case: str) -> None:
    solve = channel.unary_unary(f"/{SERVICE}/Solve")  # bytes in, bytes out
    try:
        reply = service_pb.SolveResponse.FromString(solve(CASES[case](), timeout=CALL_TIMEOUT_S))
    except grpc.RpcError as error:
        violations = bad_request(error).field_violations  # INVALID_ARGUMENT, or this fails
        assert violations
        for violation in violations:
            assert (violation.field + violation.description).isprintable()
    else:
        assert reply.stats.termination != service_pb.TERMINATION_REASON_UNSPECIFIED


def test_the_server_is_healthy_after_the_hostile_requests(
    server: Server, channel: grpc.Channel
) -> None:
    assert health_status(channel) == health_pb2.HealthCheckResponse.SERVING
    assert len(worker_pids(server)) == 2
    assert "Traceback" not in server.stderr()
