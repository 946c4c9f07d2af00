"""A pool of solver worker processes (multiprocessing "spawn" context).

Each worker imports the heavy modules once at start-up, then serves requests one at a time
over a Pipe: it receives ``(request bytes, time-limit cap in s)``, runs
`apportion.server.pipeline.solve_request` and replies ``("ok", response bytes)``,
``("invalid", [(field, description), ...])`` or ``("error", traceback text)``.

The pool admits at most ``workers + max_pending`` requests at once; beyond that `submit`
raises `PoolExhaustedError` instead of queueing. A call that is cancelled or times out
terminates the worker running it and starts a replacement, so a long solve does not outlive
its caller.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib
import logging
import multiprocessing
import os
import signal
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from apportion.solver.errors import ValidationError, Violation

HEAVY_MODULES = ("apportion.formulations.max_min_fairness", "cvxpy", "clarabel", "highspy")
"""Imported by every worker before it reports ready."""
STOP_TIMEOUT_S = 5.0
"""How long (s) to wait for a terminated worker to exit before killing it."""

_log = logging.getLogger(__name__)

Reply = tuple[str, Any]
"""What a worker sends back: ("ok", bytes) | ("invalid", [(field, description)]) |
("error", str)."""


class PoolExhaustedError(Exception):
    """Every worker is busy and the pending allowance is used up."""


class PoolClosedError(Exception):
    """The pool is shutting down."""


class WorkerFailedError(Exception):
    """The worker raised an unexpected exception or died."""


def _handle(request_bytes: bytes, time_limit_cap_s: float) -> Reply:
    """Worker side: one request, never raises."""
    from google.protobuf.message import DecodeError

    from apportion.server.pipeline import solve_request
    from apportion.v1 import allocation_service_pb2 as service_pb

    try:
        request = service_pb.SolveRequest.FromString(request_bytes)
    except DecodeError as exc:
        return ("invalid", [("request", f"not a valid apportion.v1.SolveRequest: {exc}")])
    try:
        response = solve_request(request, time_limit_cap_s)
    except ValidationError as exc:
        return ("invalid", [(v.field, v.description) for v in exc.violations])
    except Exception:
        return ("error", traceback.format_exc())
    return ("ok", response.SerializeToString())


def _worker_main(conn: Connection) -> None:
    """Entry point of a worker process: pre-import, report ready, serve until EOF or None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    for name in HEAVY_MODULES:
        importlib.import_module(name)
    importlib.import_module("apportion.server.pipeline")
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        request_bytes, time_limit_cap_s = message
        conn.send(_handle(request_bytes, time_limit_cap_s))


def _roundtrip(conn: Connection, message: tuple[bytes, float]) -> Reply:
    """Parent side, in a thread: send one request and wait for the reply."""
    conn.send(message)
    reply: Reply = conn.recv()
    return reply


@dataclass(eq=False)
class _Worker:
    process: BaseProcess
    conn: Connection
    io: concurrent.futures.Future[Any] | None = field(default=None)
    """The thread currently reading from `conn`, if any."""


class WorkerPool:
    """`workers` solver processes (default: os.cpu_count()) admitting at most
    `workers + max_pending` requests in flight. Use from one event loop."""

    def __init__(self, workers: int | None = None, max_pending: int = 0) -> None:
        self.size = workers if workers is not None else (os.cpu_count() or 1)
        if self.size < 1:
            raise ValueError(f"workers must be >= 1, got {self.size}")
        if max_pending < 0:
            raise ValueError(f"max_pending must be >= 0, got {max_pending}")
        self.max_pending = max_pending
        self._ctx = multiprocessing.get_context("spawn")
        self._idle: asyncio.Queue[_Worker] = asyncio.Queue()
        self._workers: set[_Worker] = set()
        self._in_flight = 0
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=2 * self.size + 2, thread_name_prefix="apportion-worker-io"
        )

    @property
    def capacity(self) -> int:
        """Requests admitted at once (running + waiting for a worker)."""
        return self.size + self.max_pending

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def start(self) -> None:
        """Start every worker and wait until all have imported their modules."""
        started = [self._spawn() for _ in range(self.size)]
        await asyncio.gather(*(self._wait_ready(w) for w in started))
        for worker in started:
            self._idle.put_nowait(worker)

    async def submit(
        self, request_bytes: bytes, time_limit_cap_s: float, timeout_s: float | None = None
    ) -> bytes:
        """Solve a serialized SolveRequest; returns the serialized SolveResponse.

        `time_limit_cap_s` (s, 0 = none) caps the request's own time limit. `timeout_s` (s,
        None = none) bounds the whole call, waiting for a worker included.
        Raises `PoolExhaustedError` when full, `ValidationError` for a malformed request,
        `TimeoutError` past `timeout_s`, `WorkerFailedError`, `PoolClosedError`.
        """
        if self._closed:
            raise PoolClosedError("the solver pool is shutting down")
        if self._in_flight >= self.capacity:
            raise PoolExhaustedError(
                f"all {self.size} solver workers are busy and {self.max_pending} requests "
                "are already waiting; retry later"
            )
        self._in_flight += 1
        try:
            async with asyncio.timeout(timeout_s):
                return await self._run(request_bytes, time_limit_cap_s)
        finally:
            self._in_flight -= 1

    async def _run(self, request_bytes: bytes, time_limit_cap_s: float) -> bytes:
        worker = await self._idle.get()
        if self._closed:
            raise PoolClosedError("the solver pool is shutting down")
        io = self._executor.submit(_roundtrip, worker.conn, (request_bytes, time_limit_cap_s))
        worker.io = io
        try:
            reply = await asyncio.wrap_future(io)
        except (EOFError, OSError) as exc:
            self._replace(worker)
            raise WorkerFailedError(
                f"solver worker {worker.process.pid} died: {exc!r}"
            ) from exc
        except BaseException:  # cancelled or timed out: the solve must not survive
            self._replace(worker)
            raise
        worker.io = None
        self._idle.put_nowait(worker)
        kind, payload = reply
        if kind == "ok":
            result: bytes = payload
            return result
        if kind == "invalid":
            raise ValidationError([Violation(f, d) for f, d in payload])
        raise WorkerFailedError(str(payload))

    def _spawn(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_main, args=(child,), name="apportion-solver", daemon=True
        )
        process.start()
        child.close()  # keep only the worker's end open, so its death reads as EOF here
        worker = _Worker(process=process, conn=parent)
        self._workers.add(worker)
        return worker

    async def _wait_ready(self, worker: _Worker) -> None:
        worker.io = self._executor.submit(worker.conn.recv)
        try:
            message = await asyncio.wrap_future(worker.io)
        except (EOFError, OSError) as exc:
            await self._reap(worker)
            raise WorkerFailedError(
                f"solver worker exited during start-up (exit code {worker.process.exitcode})"
            ) from exc
        worker.io = None
        if not (isinstance(message, tuple) and message[:1] == ("ready",)):
            raise WorkerFailedError(f"unexpected start-up message from a worker: {message!r}")

    def _replace(self, worker: _Worker) -> None:
        """Terminate `worker` now; reap it and start a replacement in the background."""
        if worker.process.is_alive():
            worker.process.terminate()
        task = asyncio.get_running_loop().create_task(self._reap_and_respawn(worker))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reap_and_respawn(self, worker: _Worker) -> None:
        await self._reap(worker)
        if self._closed:
            return
        try:
            replacement = self._spawn()
            await self._wait_ready(replacement)
        except Exception:
            _log.exception("could not start a replacement solver worker")
            return
        if self._closed:
            await self._reap(replacement)
            return
        self._idle.put_nowait(replacement)

    async def _reap(self, worker: _Worker) -> None:
        """Wait for a terminated worker to exit (kill it if it lingers), then close its pipe."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, worker.process.join, STOP_TIMEOUT_S)
        if worker.process.is_alive():
            worker.process.kill()
            await loop.run_in_executor(None, worker.process.join, STOP_TIMEOUT_S)
        if worker.io is not None:  # the reader thread sees EOF once the worker is gone
            with contextlib.suppress(BaseException):
                await asyncio.wrap_future(worker.io)
        worker.conn.close()
        self._workers.discard(worker)

    async def close(self) -> None:
        """Stop every worker (running solves are abandoned) and release the threads."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        workers = list(self._workers)
        for worker in workers:
            if worker.process.is_alive():
                worker.process.terminate()
        await asyncio.gather(*(self._reap(w) for w in workers), return_exceptions=True)
        self._executor.shutdown(wait=False, cancel_futures=True)
