"""Faults in the solver workers, through a real server: a solve over the memory ceiling, an
unexpected exception, a worker killed while busy or idle, no worker left alive, time spent
waiting for a worker. The workers are made to fail on purpose with the ``test:*`` policy
names, which only a server started with the test-hooks environment variable obeys (a normal
server answers them with an unknown policy)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_harness import (
    CALL_TIMEOUT_S,
    CHANNEL_OPTIONS,
    Server,
    bad_request,
    call_error,
    detail,
    health_status,
    hook_request,
    kill,
    large_request,
    parent_pid,
    running_server,
    small_request,
    wait_until,
    worker_pids,
)
from grpc_health.v1 import health_pb2

from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import allocation_service_pb2_grpc as service_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
CEILING = "1G"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server(
        "--workers", "2", "--max-pending", "2", "--max-worker-memory", CEILING, hooks=True
    ) as started:
        yield started


@pytest.fixture(scope="module")
def channel(server: Server) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.address) as ch:
        yield ch


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> service_grpc.AllocationServiceStub:
    return service_grpc.AllocationServiceStub(channel)


def solve(stub: service_grpc.AllocationServiceStub, request: service_pb.SolveRequest,
          timeout: float = CALL_TIMEOUT_S) -> service_pb.SolveResponse:
    reply: service_pb.SolveResponse = stub.Solve(request, timeout=timeout)
    return reply


def assert_optimal(reply: service_pb.SolveResponse) -> None:
    assert reply.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL, reply.stats


def settled(server: Server) -> set[int]:
    """The worker pids once both workers are up (after a replacement)."""
    assert wait_until(lambda: len(worker_pids(server)) == 2)
    return worker_pids(server)


def test_hooks_are_off_without_the_environment_variable() -> None:
    with running_server("--workers", "1") as plain, grpc.insecure_channel(plain.address) as ch:
        stub = service_grpc.AllocationServiceStub(ch)
        error = call_error(lambda: solve(stub, hook_request("raise")))
    assert [v.field for v in bad_request(error).field_violations] == ["policy.name"]


def test_unexpected_exception_is_one_line_with_a_request_id(
    server: Server, stub: service_grpc.AllocationServiceStub
) -> None:
    error = call_error(lambda: solve(stub, hook_request("raise")))
    assert error.code() == grpc.StatusCode.INTERNAL
    message = error.details() or ""
    assert "\n" not in message
    info = detail(error, error_details_pb2.RequestInfo)
    assert isinstance(info, error_details_pb2.RequestInfo) and info.request_id
    assert f"request id {info.request_id}" in message
    for leak in ("Traceback", "hunter2", ".py", "/"):
        assert leak not in message, message
    log = server.stderr()
    assert info.request_id in log
    assert "Traceback" in log and "hunter2" in log  # the details stay on the server
    assert_optimal(solve(stub, small_request()))


WORKER_FAILURES = {
    "allocate": (grpc.StatusCode.RESOURCE_EXHAUSTED, "the solve needed more memory"),
    "kill": (grpc.StatusCode.INTERNAL, "the solver worker died while running this request"),
}
"""Hook -> (status, start of the message): a solve over the memory ceiling, a worker killed
in the middle of a solve."""


@pytest.mark.parametrize("hook", list(WORKER_FAILURES))
def test_a_failing_worker_fails_its_request_only(
    server: Server, stub: service_grpc.AllocationServiceStub, hook: str
) -> None:
    code, message = WORKER_FAILURES[hook]
    before = settled(server)
    neighbour = stub.Solve.future(hook_request("sleep:1"), timeout=CALL_TIMEOUT_S)
    error = call_error(lambda: solve(stub, hook_request(hook)))
    assert error.code() == code, error
    assert (error.details() or "").startswith(message)
    assert detail(error, error_details_pb2.RetryInfo) is None, "retrying cannot help"
    assert_optimal(neighbour.result(timeout=CALL_TIMEOUT_S))  # the other request is unaffected
    assert len(before - settled(server)) == 1, "the failed worker is replaced"
    assert_optimal(solve(stub, small_request()))


def test_a_worker_still_busy_at_the_deadline_is_replaced(
    server: Server, stub: service_grpc.AllocationServiceStub
) -> None:
    """The sleep hook ignores deadlines: the worker running the abandoned call is terminated
    and replaced, and the next call is answered."""
    before = settled(server)
    error = call_error(lambda: solve(stub, hook_request("sleep:30"), timeout=0.5))
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED, error
    assert wait_until(lambda: not before <= worker_pids(server)), "no worker was replaced"
    assert_optimal(solve(stub, small_request()))


def test_a_killed_idle_worker_does_not_fail_the_next_request(
    server: Server, stub: service_grpc.AllocationServiceStub
) -> None:
    victim, *_ = sorted(settled(server))
    kill(victim)
    with ThreadPoolExecutor(max_workers=2) as pool:  # sent at once: one may meet the dead one
        replies = list(pool.map(lambda _: solve(stub, small_request()), range(2)))
    for reply in replies:
        assert_optimal(reply)
    for pid in settled(server):  # every worker gone: the request waits for a replacement
        kill(pid)
    assert_optimal(solve(stub, small_request()))


def test_time_spent_waiting_for_a_worker_counts(
    server: Server, stub: service_grpc.AllocationServiceStub
) -> None:
    """The request's own time limit counts from its arrival: a request that waited longer
    than its limit for a worker is not solved."""
    settled(server)
    busy = [stub.Solve.future(hook_request("sleep:1.5"), timeout=CALL_TIMEOUT_S)
            for _ in range(2)]
    waiting = small_request()
    waiting.options.time_limit_s = 1.0
    reply = solve(stub, waiting)
    assert reply.stats.termination == service_pb.TERMINATION_REASON_NO_SOLUTION, reply.stats
    assert "ran out before the solve started" in reply.stats.detail
    assert reply.stats.time_limit_s == 1.0
    assert reply.stats.wall_time_s >= 1.0
    for call in busy:
        assert_optimal(call.result(timeout=CALL_TIMEOUT_S))


def test_health_is_not_serving_while_no_worker_is_alive() -> None:
    """The only worker is killed while its replacement cannot start (the fork server is
    stopped): health says NOT_SERVING, a request waits instead of failing, and both recover
    once the replacement is up."""
    with running_server("--workers", "1") as one, grpc.insecure_channel(one.address) as ch:
        stub = service_grpc.AllocationServiceStub(ch)
        assert health_status(ch) == SERVING
        (worker,) = worker_pids(one)
        fork_server = parent_pid(worker)
        assert fork_server != one.process.pid
        kill(fork_server, signal.SIGSTOP)
        try:
            kill(worker)
            assert wait_until(lambda: health_status(ch) == NOT_SERVING)
            waiting = stub.Solve.future(small_request(), timeout=CALL_TIMEOUT_S)
        finally:
            kill(fork_server, signal.SIGCONT)
        assert wait_until(lambda: health_status(ch) == SERVING)
        assert_optimal(waiting.result(timeout=CALL_TIMEOUT_S))


def test_a_real_solve_over_the_memory_ceiling_fails_cleanly() -> None:
    """100,000 distinct jobs need about 150-250 MB above a worker's start-up memory (about
    270 MB here): under a 400 MB ceiling the request fails with RESOURCE_EXHAUSTED, and a
    small one is served by the replacement."""
    big = large_request(100_000)
    with (
        running_server("--workers", "1", "--max-worker-memory", "400M") as tight,
        grpc.insecure_channel(tight.address, options=CHANNEL_OPTIONS) as ch,
    ):
        stub = service_grpc.AllocationServiceStub(ch)
        error = call_error(lambda: solve(stub, big))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (error, tight.stderr())
        assert "memory" in (error.details() or "")
        assert_optimal(solve(stub, small_request()))
        assert health_status(ch) == SERVING
