"""A pool of solver worker processes.

Workers are forked from a multiprocessing *fork server* that imported, once, every module a
solve needs (`solve_modules`: the modules behind every registry entry point, the solver
libraries they load lazily, the request pipeline). A worker therefore starts in a few tens of
milliseconds, and no solve pays for a first-use import. The fork server is a separate
single-threaded process started from a clean interpreter, so gRPC's threads are never forked.

Protocol, over one Pipe per worker: the pool sends ``(deadline, arrival)`` (both
``time.monotonic()`` instants, which every process of the machine shares; inf = no deadline)
and then the request bytes as they are (`Connection.send_bytes`: megabytes are never pickled,
which would copy them once more on each side), the worker answers ``("accepted",)`` at once,
then one of ``("ok", None)`` followed by the response bytes as they are,
``("invalid", [(field, description), ...])``, ``("memory", None)`` or
``("error", (summary, traceback))``. A worker that dies before accepting a request (killed
while idle) costs that request nothing: it is sent to another worker. One that dies after
accepting it fails that request only.

Every worker runs under a memory ceiling (``RLIMIT_DATA``: the bytes of private writable
memory, i.e. heap, arrays and thread stacks; not the address space, of which HiGHS's and
OR-Tools' threads reserve far more than they use). An allocation over it raises MemoryError,
which fails that request with `WorkerMemoryError`; some native code crashes instead, so a
worker that dies mid-request with its last sampled memory near the ceiling is reported the
same way. Either way the worker is replaced.

The pool admits at most ``workers + max_pending`` requests at once; beyond that `submit`
raises `PoolExhaustedError` instead of queueing. A call that is cancelled or times out
terminates the worker running it. Replacements are started in the background (a thread talks
to the fork server), so no request waits for a respawn unless no worker is left.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import faulthandler
import importlib
import logging
import math
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import os
import resource
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from apportion.solver.errors import ValidationError, Violation

SOLVER_LIBRARIES = ("highspy", "clarabel", "ortools.sat.python.cp_model", "scipy.optimize")
"""Solver libraries the formulations import inside functions; loaded before any solve."""
STOP_TIMEOUT_S = 5.0
"""How long (s) to wait for a terminated worker to exit before killing it."""
RESPAWN_BACKOFF_S = 1.0
"""Wait (s) before trying again when a replacement worker could not be started."""
MIN_HEADROOM_BYTES = 64 * 2**20
"""A memory ceiling must leave a worker at least this much above its memory after start-up."""
MEMORY_SAMPLE_S = 0.02
"""How often (s) the memory of a busy worker is sampled (to explain a crash at the ceiling)."""
NEAR_CEILING = 0.75
"""A worker that dies mid-request after its sampled memory reached this share of the ceiling
is reported as out of memory."""
PROCESS_NAME = b"apportion-solve"
"""Worker process name (``ps -o comm``, ``/proc/PID/comm``; at most 15 bytes)."""
TEST_HOOKS_ENV = "APPORTION_TEST_HOOKS"
"""When set to 1 in the server's environment, workers obey the ``test:*`` policy names of
`_test_hook` (the tests use them to make a worker fail on purpose). Off unless set."""

_log = logging.getLogger(__name__)

Reply = tuple[str, Any]


class PoolExhaustedError(Exception):
    """Every worker is busy and the pending allowance is used up."""


class PoolClosedError(Exception):
    """The pool is shutting down."""


class WorkerFailedError(Exception):
    """The request raised an unexpected exception in a worker, the worker died while running
    it, or workers could not be started. `summary` is one line for the caller; `detail` (a
    traceback, an exit status) is for the server's log."""

    def __init__(self, summary: str, detail: str = "") -> None:
        super().__init__(summary)
        self.summary = summary
        self.detail = detail


class WorkerMemoryError(Exception):
    """The request needed more memory than the worker ceiling allows."""


# ----------------------------------------------------------------------------- worker side


def solve_modules() -> list[str]:
    """Every module a solve may import: those of the registry's entry points (every policy's,
    its space-sharing form's, the round schedule's: a newly registered policy is covered
    without a list kept here), the solver libraries and the request pipeline."""
    from apportion.solver.registry import ROUND_SCHEDULE_ENTRY, policies

    entry_points = [ROUND_SCHEDULE_ENTRY]
    for spec in policies():
        entry_points += [spec.entry_point, spec.packed_entry_point]
    entry_modules = [entry.partition(":")[0] for entry in entry_points if entry]
    return [
        *dict.fromkeys(entry_modules),
        *SOLVER_LIBRARIES,
        "apportion.server.pipeline",
        "google.protobuf.message",
    ]


def _set_process_name() -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(15, PROCESS_NAME, 0, 0, 0)  # PR_SET_NAME


def data_bytes(pid: int | str = "self") -> int | None:
    """Private writable memory (bytes) of a process, what ``RLIMIT_DATA`` limits (the data
    column of ``/proc/PID/statm``); None where unavailable."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            fields = statm.read().split()
    except OSError:
        return None
    return int(fields[5]) * resource.getpagesize()


def _apply_memory_ceiling(ceiling_bytes: int | None) -> None:
    if ceiling_bytes is not None:
        resource.setrlimit(resource.RLIMIT_DATA, (ceiling_bytes, ceiling_bytes))


def _test_hook(request: Any) -> None:
    """Failures on purpose, for the tests, when `TEST_HOOKS_ENV` is set, chosen by the
    request's policy name: ``test:allocate`` allocates until the memory ceiling stops it,
    ``test:raise`` raises an unexpected exception, ``test:kill`` kills the worker,
    ``test:sleep:S`` sleeps S seconds and then solves the request as max-min fairness."""
    name = request.policy.name
    if name == "test:allocate":
        import numpy as np

        blocks = [np.empty(256 * 2**20, dtype=np.uint8) for _ in range(256)]  # 64 GiB, untouched
        raise RuntimeError(f"no memory ceiling stopped {len(blocks)} blocks of 256 MiB")
    if name == "test:raise":
        raise RuntimeError(f"test failure in {__file__} with a secret value 'hunter2'")
    if name == "test:kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if name.startswith("test:sleep:"):
        time.sleep(float(name.rpartition(":")[2]))
        request.policy.name = "weighted_max_min_fairness"


def _handle(request_bytes: bytes, deadline_at: float, arrived_at: float, hooks: bool) -> Reply:
    """Worker side: one request, never raises."""
    from google.protobuf.message import DecodeError

    from apportion.server.pipeline import solve_serialized
    from apportion.solver.deadline import Deadline
    from apportion.v1 import allocation_service_pb2 as service_pb

    try:
        request = service_pb.SolveRequest.FromString(request_bytes)
        if hooks and request.policy.name.startswith("test:"):
            _test_hook(request)  # changes the policy only: the jobs are still those bytes'
        return ("ok", solve_serialized(request, request_bytes, Deadline(deadline_at),
                                       arrived_at))
    except DecodeError as exc:
        return ("invalid", [("request", f"not a valid apportion.v1.SolveRequest: {exc}")])
    except ValidationError as exc:
        return ("invalid", [(v.field, v.description) for v in exc.violations])
    except MemoryError:
        return ("memory", None)
    except Exception as exc:
        return ("error", (type(exc).__name__, traceback.format_exc()))


def _worker_main(conn: Connection, memory_ceiling: int | None) -> None:
    """Entry point of a worker process: import, set the ceiling, report ready, then serve
    until EOF or None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    faulthandler.enable()  # a crash in native code leaves its Python traceback in the log
    _set_process_name()
    for name in solve_modules():  # already loaded by the fork server: this only checks
        importlib.import_module(name)
    hooks = os.environ.get(TEST_HOOKS_ENV) == "1"
    _apply_memory_ceiling(memory_ceiling)
    conn.send(("ready", os.getpid(), data_bytes()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        try:
            request_bytes = conn.recv_bytes()
        except (EOFError, OSError):
            return
        conn.send(("accepted",))
        deadline_at, arrived_at = message
        kind, payload = _handle(request_bytes, deadline_at, arrived_at, hooks)
        if kind == "ok":
            conn.send((kind, None))
            conn.send_bytes(payload)
        else:
            conn.send((kind, payload))


# ----------------------------------------------------------------------------- pool side


class _LostError(Exception):
    """The worker went away during a round trip; `accepted`: after taking the request."""

    def __init__(self, accepted: bool) -> None:
        super().__init__("accepted" if accepted else "not accepted")
        self.accepted = accepted


def _roundtrip(conn: Connection, message: tuple[bytes, float, float]) -> Reply:
    """Parent side, in a thread: send one request and wait for the reply."""
    accepted = False
    request_bytes, deadline_at, arrived_at = message
    try:
        conn.send((deadline_at, arrived_at))
        conn.send_bytes(request_bytes)
        conn.recv()  # ("accepted",)
        accepted = True
        reply: Reply = conn.recv()
        if reply[0] == "ok":
            reply = ("ok", conn.recv_bytes())
    except (EOFError, OSError) as exc:
        raise _LostError(accepted) from exc
    return reply


@dataclass(eq=False)
class _Worker:
    process: BaseProcess
    conn: Connection
    io: concurrent.futures.Future[Any] | None = None
    """The thread currently reading from `conn`, if any."""
    retired: bool = False
    """Terminated or found dead; never handed a request again."""
    peak_data_bytes: int = 0
    """Largest memory (bytes) sampled while running the current request."""
    parked: bool = False
    """Idle, its pipe watched by the event loop (`WorkerPool._park`)."""
    counted: bool = False
    """Counted in `WorkerPool.alive`."""
    pid: int = field(default=0)


def _context() -> multiprocessing.context.ForkServerContext | multiprocessing.context.SpawnContext:
    """The fork server where available (fast worker starts), else spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("forkserver")
    return multiprocessing.get_context("spawn")


def start_fork_server() -> None:
    """Launch the fork server (it imports `solve_modules` in its own process) unless it runs
    already; returns without waiting for its imports. Calling it early lets those imports
    overlap with the caller's own start-up."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        multiprocessing.set_forkserver_preload(solve_modules())
        multiprocessing.forkserver.ensure_running()


class WorkerPool:
    """`workers` solver processes (default: os.cpu_count()) admitting at most
    `workers + max_pending` requests in flight, each under `memory_ceiling` bytes (None = no
    ceiling). `on_alive(n)` is called whenever the number of live, ready workers changes.
    Use from one event loop."""

    def __init__(
        self,
        workers: int | None = None,
        max_pending: int = 0,
        memory_ceiling: int | None = None,
        on_alive: Callable[[int], None] | None = None,
    ) -> None:
        self.size = workers if workers is not None else (os.cpu_count() or 1)
        if self.size < 1:
            raise ValueError(f"workers must be >= 1, got {self.size}")
        if max_pending < 0:
            raise ValueError(f"max_pending must be >= 0, got {max_pending}")
        self.max_pending = max_pending
        self.memory_ceiling = memory_ceiling
        self._on_alive = on_alive
        self._ctx = _context()
        self._idle: asyncio.Queue[_Worker] = asyncio.Queue()
        self._workers: set[_Worker] = set()
        self._alive = 0
        self._in_flight = 0
        self._busy = 0
        self.restarts = 0
        """Replacement workers started since the pool started."""
        self._closed = False
        self._reaps: set[asyncio.Task[None]] = set()
        self._replacements: set[asyncio.Task[None]] = set()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=3 * self.size + 4, thread_name_prefix="apportion-worker-io"
        )
        self.baseline_bytes: int | None = None
        """Memory of a freshly started worker (bytes), once known."""

    @property
    def capacity(self) -> int:
        """Requests admitted at once (running + waiting for a worker)."""
        return self.size + self.max_pending

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def busy(self) -> int:
        """Workers running a request now (the rest of `in_flight` waits for one)."""
        return self._busy

    @property
    def alive(self) -> int:
        """Workers started, ready and not found dead."""
        return self._alive

    async def start(self) -> None:
        """Start every worker and wait until all are ready. Raises `WorkerFailedError` when
        a worker cannot start (or the memory ceiling leaves it no room)."""
        if self._ctx.get_start_method() == "forkserver":
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, start_fork_server)
        started = await asyncio.gather(*(self._start_worker() for _ in range(self.size)))
        for worker in started:
            self._ready(worker)

    async def submit(
        self,
        request_bytes: bytes,
        deadline_at: float = math.inf,
        arrived_at: float | None = None,
        timeout_s: float | None = None,
    ) -> bytes:
        """Solve a serialized SolveRequest; returns the serialized SolveResponse.

        `deadline_at` (``time.monotonic()`` s, inf = none) is the request's deadline,
        `arrived_at` (same clock, None = now) when it arrived. `timeout_s` (s, None = none)
        bounds the whole call, waiting for a worker included. Raises `PoolExhaustedError`
        when full, `ValidationError` for a malformed request, `TimeoutError` past
        `timeout_s`, `WorkerMemoryError`, `WorkerFailedError`, `PoolClosedError`.
        """
        if self._closed:
            raise PoolClosedError("the solver pool is shutting down")
        if self._in_flight >= self.capacity:
            raise PoolExhaustedError(
                f"all {self.size} solver workers are busy and {self.max_pending} requests "
                "are already waiting; retry later"
            )
        arrived = time.monotonic() if arrived_at is None else arrived_at
        self._in_flight += 1
        try:
            async with asyncio.timeout(timeout_s):
                return await self._run((request_bytes, deadline_at, arrived))
        finally:
            self._in_flight -= 1

    async def _run(self, message: tuple[bytes, float, float]) -> bytes:
        while True:
            worker = await self._idle.get()
            if self._closed:
                raise PoolClosedError("the solver pool is shutting down")
            if worker.retired:
                continue
            self._unpark(worker)
            io = self._executor.submit(_roundtrip, worker.conn, message)
            worker.io = io
            sampler = self._sample_memory(worker) if self.memory_ceiling else None
            self._busy += 1
            try:
                reply = await asyncio.wrap_future(io)
            except _LostError as lost:
                self._retire(worker)
                if not lost.accepted:  # died while idle: the request goes to another worker
                    _log.warning("solver worker %d was found dead; request sent to another",
                                 worker.pid)
                    continue
                raise self._death_error(worker) from lost
            except BaseException:  # cancelled or timed out: the solve must not survive
                self._retire(worker)
                raise
            finally:
                self._busy -= 1
                if sampler is not None:
                    sampler.cancel()
            worker.io = None
            return self._reply(worker, reply)

    def _reply(self, worker: _Worker, reply: Reply) -> bytes:
        kind, payload = reply
        if kind == "memory":
            self._retire(worker)  # a worker that hit its ceiling starts afresh
            raise WorkerMemoryError(self._memory_message())
        self._park(worker)
        if kind == "ok":
            result: bytes = payload
            return result
        if kind == "invalid":
            raise ValidationError([Violation(f, d) for f, d in payload])
        summary, detail = payload
        raise WorkerFailedError(f"unexpected {summary} while solving", detail)

    def _memory_message(self) -> str:
        return (
            f"the solve needed more memory than a solver worker may use "
            f"({self.memory_ceiling} bytes, --max-worker-memory)"
        )

    def _death_error(self, worker: _Worker) -> Exception:
        """The error for a request whose worker died while running it."""
        worker.process.join(0)
        code = worker.process.exitcode
        how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else (
            f"exit code {code}")
        ceiling = self.memory_ceiling
        if ceiling and worker.peak_data_bytes >= NEAR_CEILING * ceiling:
            _log.warning("solver worker %d died (%s) at %d of %d bytes", worker.pid, how,
                         worker.peak_data_bytes, ceiling)
            return WorkerMemoryError(self._memory_message())
        return WorkerFailedError(
            "the solver worker died while running this request",
            f"solver worker {worker.pid} died ({how}); its memory reached at least "
            f"{worker.peak_data_bytes} bytes (ceiling {ceiling})",
        )

    def _sample_memory(self, worker: _Worker) -> asyncio.Task[None]:
        async def sample() -> None:
            while True:  # (a dead, unreaped worker reads as 0)
                worker.peak_data_bytes = max(worker.peak_data_bytes, data_bytes(worker.pid) or 0)
                await asyncio.sleep(MEMORY_SAMPLE_S)

        worker.peak_data_bytes = 0
        return asyncio.get_running_loop().create_task(sample())

    # ------------------------------------------------------------------ worker lifecycle

    async def _start_worker(self) -> _Worker:
        """Start one worker (in a thread: the fork server may be slow) and wait until it is
        ready."""
        loop = asyncio.get_running_loop()
        worker = await loop.run_in_executor(self._executor, self._spawn)
        self._workers.add(worker)
        try:
            await self._wait_ready(worker)
        except BaseException:
            self._retire(worker, replace=False)
            raise
        return worker

    def _spawn(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_main,
            args=(child, self.memory_ceiling),
            name="apportion-solver",
            daemon=True,
        )
        process.start()
        child.close()  # keep only the worker's end open, so its death reads as EOF here
        return _Worker(process=process, conn=parent, pid=process.pid or 0)

    async def _wait_ready(self, worker: _Worker) -> None:
        worker.io = self._executor.submit(worker.conn.recv)
        try:
            message = await asyncio.wrap_future(worker.io)
        except (EOFError, OSError) as exc:
            worker.process.join(STOP_TIMEOUT_S)
            raise WorkerFailedError(
                "a solver worker exited during start-up "
                f"(exit code {worker.process.exitcode})"
            ) from exc
        worker.io = None
        if not (isinstance(message, tuple) and message[:1] == ("ready",)):
            raise WorkerFailedError(f"unexpected start-up message from a worker: {message!r}")
        baseline: int | None = message[2]
        if baseline is not None:
            self.baseline_bytes = baseline
            ceiling = self.memory_ceiling
            if ceiling is not None and baseline + MIN_HEADROOM_BYTES > ceiling:
                raise WorkerFailedError(
                    f"the worker memory ceiling of {ceiling} bytes leaves no room: a worker "
                    f"uses {baseline} bytes after start-up (raise --max-worker-memory to at "
                    f"least {baseline + MIN_HEADROOM_BYTES})"
                )

    def _ready(self, worker: _Worker) -> None:
        """A started worker is counted alive and joins the idle queue."""
        if self._closed or worker.retired:
            self._retire(worker)
            return
        worker.counted = True
        self._set_alive(self._alive + 1)
        self._park(worker)

    def _park(self, worker: _Worker) -> None:
        """`worker` waits in the idle queue. An idle worker sends nothing, so its pipe turning
        readable means it exited (killed while idle, say): it is retired at once."""
        asyncio.get_running_loop().add_reader(worker.conn.fileno(), self._on_exit, worker)
        worker.parked = True
        self._idle.put_nowait(worker)

    def _unpark(self, worker: _Worker) -> None:
        if worker.parked:
            asyncio.get_running_loop().remove_reader(worker.conn.fileno())
            worker.parked = False

    def _on_exit(self, worker: _Worker) -> None:
        if not worker.retired:
            _log.warning("solver worker %d exited unexpectedly", worker.pid)
        self._retire(worker)

    def _set_alive(self, alive: int) -> None:
        self._alive = alive
        if self._on_alive is not None and not self._closed:
            self._on_alive(alive)

    def _retire(self, worker: _Worker, replace: bool = True) -> None:
        """Take `worker` out of service (terminate it if running), then reap it and (with
        `replace`) start a replacement, both in the background. Idempotent."""
        if worker.retired:
            return
        worker.retired = True
        self._unpark(worker)
        if worker.counted:
            worker.counted = False
            self._set_alive(self._alive - 1)
        if worker.process.exitcode is None:
            with contextlib.suppress(OSError, ValueError):
                worker.process.terminate()
        self._background(self._reap(worker), self._reaps)
        if replace and not self._closed:
            self._background(self._replace(), self._replacements)

    @staticmethod
    def _background(coroutine: Any, tasks: set[asyncio.Task[None]]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _replace(self) -> None:
        """Start one worker to replace a retired one; keep trying while the pool is open."""
        while not self._closed:
            try:
                worker = await self._start_worker()
            except Exception:
                _log.exception("could not start a replacement solver worker")
                await asyncio.sleep(RESPAWN_BACKOFF_S)
                continue
            self.restarts += 1
            self._ready(worker)
            return

    async def _reap(self, worker: _Worker) -> None:
        """Wait for a terminated worker to exit (kill it if it lingers), then close its pipe."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, worker.process.join, STOP_TIMEOUT_S)
        if worker.process.exitcode is None:
            worker.process.kill()
            await loop.run_in_executor(self._executor, worker.process.join, STOP_TIMEOUT_S)
        if worker.io is not None:  # the reader thread sees EOF once the worker is gone
            with contextlib.suppress(BaseException):
                await asyncio.wrap_future(worker.io)
        worker.conn.close()
        self._workers.discard(worker)

    async def close(self) -> None:
        """Stop every worker (running solves are abandoned) and release the threads."""
        self._closed = True
        for task in list(self._replacements):
            task.cancel()
        await asyncio.gather(*self._replacements, return_exceptions=True)
        for worker in list(self._workers):
            self._retire(worker)
        while self._reaps:
            await asyncio.gather(*list(self._reaps), return_exceptions=True)
        self._executor.shutdown(wait=False, cancel_futures=True)
