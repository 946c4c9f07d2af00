"""Run the gRPC server: AllocationService, grpc.health.v1 and server reflection.

`add_serve_arguments` and `run_from_args` back both ``apportion serve`` and
``python -m apportion.server.app``. Once the workers are ready and health says SERVING, one
line ``apportion listening on HOST:PORT`` (the bound port, also for ``--port 0``) is printed
to stdout. SIGTERM or SIGINT: health goes NOT_SERVING, the server stops gracefully (running
calls get `GRACE_S` seconds), the workers are stopped, and the exit code is 0.

Importing this module is cheap (no grpc, numpy or solver imports) so that a command line can
build its parser from `add_serve_arguments`.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 50051
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest accepted SolveRequest (bytes)."""
GRACE_S = 5.0
"""Seconds running calls get to finish after SIGTERM."""
HARD_CAP_FACTOR = 4
"""gRPC's own receive limit is this multiple of --max-message-bytes, so that a request
somewhat over the limit still arrives and is rejected with a field violation."""
_INT32_MAX = 2**31 - 1


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be in 0..65535, got {value}")
    return value


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The server's command-line options."""
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help="address to bind (default %(default)s)"
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help="TCP port, 0 = any free port (default %(default)s)",
    )
    parser.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        help="solver worker processes (default: the number of CPUs)",
    )
    parser.add_argument(
        "--max-pending",
        type=_non_negative_int,
        default=0,
        help="requests that may wait for a busy worker; more get RESOURCE_EXHAUSTED "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--max-message-bytes",
        type=_positive_int,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        help="largest accepted request in bytes (default %(default)s)",
    )


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


async def serve(
    host: str, port: int, workers: int | None, max_pending: int, max_message_bytes: int
) -> int:
    """Serve until SIGTERM/SIGINT; returns the process exit code."""
    import grpc.aio  # imported here so that building the command line stays cheap
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection

    from apportion.server.service import SERVICE_NAME, AllocationServiceServicer, generic_handler
    from apportion.server.workers import WorkerFailedError, WorkerPool

    hard_cap = min(HARD_CAP_FACTOR * max_message_bytes, _INT32_MAX)
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", hard_cap),
            ("grpc.max_send_message_length", hard_cap),
            ("grpc.so_reuseport", 0),
        ]
    )
    pool = WorkerPool(workers, max_pending)
    health_servicer = health.aio.HealthServicer()
    server.add_generic_rpc_handlers(
        (generic_handler(AllocationServiceServicer(pool, max_message_bytes)),)
    )
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    try:
        bound = server.add_insecure_port(_address(host, port))
    except RuntimeError as exc:
        print(f"apportion: cannot listen on {_address(host, port)}: {exc}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await server.start()
        try:
            await pool.start()
        except WorkerFailedError as exc:
            print(f"apportion: {exc}", file=sys.stderr)
            await server.stop(None)
            await pool.close()
            return 1
        for name in ("", SERVICE_NAME):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        print(f"apportion listening on {_address(host, bound)}", flush=True)
        await stop.wait()
        await health_servicer.enter_graceful_shutdown()
        await server.stop(GRACE_S)
        await pool.close()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    return 0


def run_from_args(args: argparse.Namespace) -> int:
    """Run the server with options parsed by a parser set up by `add_serve_arguments`."""
    return asyncio.run(
        serve(args.host, args.port, args.workers, args.max_pending, args.max_message_bytes)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m apportion.server.app", description="Run the apportion gRPC server."
    )
    add_serve_arguments(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
