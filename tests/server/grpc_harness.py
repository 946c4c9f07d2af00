"""A real `apportion serve` subprocess on 127.0.0.1 for the service tests, and the requests
and status helpers they share. Timeouts here only prevent hangs; nothing asserts speed."""

from __future__ import annotations

import os
import random
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from apportion.server.workers import PROCESS_NAME, TEST_HOOKS_ENV
from apportion.v1 import allocation_service_pb2 as service_pb

SERVICE = "apportion.v1.AllocationService"
START_TIMEOUT_S = 120.0
CALL_TIMEOUT_S = 60.0
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
]


@dataclass
class Server:
    process: subprocess.Popen[str]
    address: str
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def server_command(*args: str) -> list[str]:
    """The command that starts a server: the CLI's ``apportion serve``."""
    return [sys.executable, "-m", "apportion.server.cli", "serve", *args]


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


@contextmanager
def running_server(*args: str, hooks: bool = False, host: str = "127.0.0.1") -> Iterator[Server]:
    """`apportion serve --host HOST --port 0 ARGS` until the block ends (then SIGTERM, which
    must exit 0). `hooks`: the workers obey the ``test:*`` policy names."""
    env = dict(os.environ)
    if hooks:
        env[TEST_HOOKS_ENV] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        stderr_path = Path(tmp) / "stderr.txt"
        with stderr_path.open("w") as stderr:
            process = subprocess.Popen(
                server_command("--host", host, "--port", "0", *args),
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=env,
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


def hook_request(hook: str) -> service_pb.SolveRequest:
    """A valid request whose policy name makes a hooks-enabled worker fail on purpose."""
    request = small_request()
    request.policy.name = f"test:{hook}"
    return request


def detail(error: grpc.RpcError, kind: type[Message]) -> Message | None:
    """The status detail of type `kind` of a failed call, None when absent."""
    status = rpc_status.from_call(error)
    if status is None:
        return None
    for packed in status.details:
        if packed.Is(kind.DESCRIPTOR):
            message = kind()
            packed.Unpack(message)
            return message
    return None


def bad_request(error: grpc.RpcError) -> error_details_pb2.BadRequest:
    """The BadRequest detail of an INVALID_ARGUMENT error (its message must list the same
    violations, one per line)."""
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    status = rpc_status.from_call(error)
    assert status is not None, "no google.rpc.Status in the trailers"
    details = error_details_pb2.BadRequest()
    assert len(status.details) == 1
    assert status.details[0].Unpack(details)
    lines = [f"{v.field}: {v.description}" for v in details.field_violations]
    assert error.details() == "\n".join(lines)
    return details


def call_error(call: Callable[[], object]) -> grpc.RpcError:
    """The error `call` raises (it must fail)."""
    try:
        call()
    except grpc.RpcError as error:
        return error
    raise AssertionError("the call succeeded")


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rpartition(")")[2].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def worker_pids(server: Server) -> set[int]:
    """The server's solver workers (processes named `PROCESS_NAME` below it)."""
    pids = set()
    for pid in _descendants(server.process.pid):
        try:
            if Path(f"/proc/{pid}/comm").read_bytes().strip() == PROCESS_NAME:
                pids.add(pid)
        except OSError:
            continue
    return pids


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def wait_until(condition: Callable[[], bool], timeout_s: float = CALL_TIMEOUT_S) -> bool:
    """Poll `condition` every 50 ms until it holds (True) or `timeout_s` passes (False)."""
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def health_status(channel: grpc.Channel) -> int:
    reply = health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=SERVICE), timeout=CALL_TIMEOUT_S
    )
    status: int = reply.status
    return status


def kill(pid: int, signum: signal.Signals = signal.SIGKILL) -> None:
    os.kill(pid, signum)
