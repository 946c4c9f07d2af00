"""Run the gRPC server: AllocationService, grpc.health.v1 and server reflection (v1 and v1alpha).

`add_serve_arguments` and `run_from_args` back both ``apportion serve`` and
``python -m apportion.server.app``. Once the workers are ready and health says SERVING, one
line ``apportion listening on HOST:PORT`` (the bound port, also for ``--port 0``) is printed
to stdout; the log (warnings, failed requests with their request id and traceback) goes to
stderr. Health says NOT_SERVING whenever no worker is alive (until a replacement is ready).
SIGTERM or SIGINT: health goes NOT_SERVING, the server stops gracefully (running calls get
`GRACE_S` seconds), the workers are stopped, and the exit code is 0.

Transport security: ``--tls-cert``/``--tls-key`` serve TLS, ``--tls-client-ca`` additionally
requires every client to present a certificate signed by that CA (mutual TLS). Serving a
non-loopback address without TLS prints a warning on stderr.

Importing this module is cheap (no grpc, numpy or solver imports) so that a command line can
build its parser from `add_serve_arguments`.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import re
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from apportion.server.logs import LOG_FORMATS
from apportion.server.logs import configure as configure_logging

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
DEFAULT_MEMORY_SHARE = 0.5
"""Default worker memory ceiling: this share of the machine's physical memory, divided among
the workers."""
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


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


def byte_size(text: str) -> int:
    """A size in bytes: an integer or a decimal with a K, M, G or T suffix (powers of 1024;
    "KiB"/"KB" spellings accepted), e.g. ``512M``, ``1.5G``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([KMGT]?)(?:I?B)?\s*", text.upper())
    if match is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 4096, 512M, 2G)")
    value = int(float(match.group(1)) * _UNITS[match.group(2)])
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return value


def physical_memory_bytes() -> int | None:
    """The machine's physical memory (bytes), None when unknown."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def default_worker_memory(workers: int) -> int | None:
    """`DEFAULT_MEMORY_SHARE` of the physical memory divided by `workers` (None = unknown)."""
    total = physical_memory_bytes()
    return None if total is None else int(DEFAULT_MEMORY_SHARE * total / workers)


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    name = host.strip("[]")
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


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
        help="largest accepted request in bytes (default %(default)s); a request over it "
        "gets INVALID_ARGUMENT, one over 4 times it is refused by gRPC (RESOURCE_EXHAUSTED "
        "without RetryInfo)",
    )
    parser.add_argument(
        "--max-worker-memory",
        type=byte_size,
        default=None,
        metavar="SIZE",
        help="memory ceiling of each solver worker (heap, arrays and thread stacks; bytes or "
        "K/M/G/T suffix); a solve over it fails with RESOURCE_EXHAUSTED and the worker is "
        f"replaced (default: {DEFAULT_MEMORY_SHARE * 100:.0f}%% of the machine's memory divided by "
        "the workers)",
    )
    parser.add_argument(
        "--metrics-port",
        type=_port,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (0 = any free port, logged "
        "at start-up; needs prometheus-client: apportion[metrics]); default: no metrics",
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="log on stderr as text lines or as JSON objects, one per line (default "
        "%(default)s); every call is logged with its request id",
    )
    parser.add_argument(
        "--tls-cert", metavar="FILE", help="serve TLS with this PEM certificate (chain)"
    )
    parser.add_argument("--tls-key", metavar="FILE", help="PEM private key of --tls-cert")
    parser.add_argument(
        "--tls-client-ca",
        metavar="FILE",
        help="PEM CA certificate(s): require clients to present a certificate signed by them "
        "(mutual TLS; needs --tls-cert)",
    )


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


@dataclass(frozen=True)
class TlsFiles:
    """PEM files for TLS: the server's certificate chain and key, and (mutual TLS) the CA
    that client certificates must be signed by."""

    cert: bytes
    key: bytes
    client_ca: bytes | None = None


def read_tls(cert: str | None, key: str | None, client_ca: str | None) -> TlsFiles | None:
    """The TLS files named on the command line, None without TLS. Raises ValueError for an
    incomplete set or an unreadable file."""
    if cert is None and key is None:
        if client_ca is not None:
            raise ValueError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if cert is None or key is None:
        raise ValueError("--tls-cert and --tls-key go together")
    try:
        return TlsFiles(
            Path(cert).read_bytes(),
            Path(key).read_bytes(),
            None if client_ca is None else Path(client_ca).read_bytes(),
        )
    except OSError as exc:
        raise ValueError(f"cannot read {exc.filename}: {exc.strerror}") from exc


@dataclass(frozen=True)
class ServeOptions:
    """Everything `serve` needs (see `add_serve_arguments` for the meaning of each)."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    workers: int | None = None
    max_pending: int = 0
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_worker_memory: int | None = None
    tls: TlsFiles | None = None
    metrics_port: int | None = None
    log_format: str = "text"


async def serve(options: ServeOptions) -> int:
    """Serve until SIGTERM/SIGINT; returns the process exit code."""
    from apportion.server.workers import start_fork_server

    start_fork_server()  # the workers' imports run in it while this process loads gRPC
    import grpc
    import grpc.aio  # imported here so that building the command line stays cheap
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    from apportion.server.reflection import enable_reflection
    from apportion.server.service import SERVICE_NAME, AllocationServiceServicer, generic_handler
    from apportion.server.workers import WorkerFailedError, WorkerPool

    configure_logging(options.log_format)
    log = logging.getLogger(__name__)
    address = _address(options.host, options.port)
    if options.tls is None and not is_loopback(options.host):
        print(
            f"apportion: warning: serving {address} without TLS: anyone who can reach it can "
            "read and send requests (use --tls-cert/--tls-key, or a loopback address)",
            file=sys.stderr,
        )
    hard_cap = min(HARD_CAP_FACTOR * options.max_message_bytes, _INT32_MAX)
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", hard_cap),
            ("grpc.max_send_message_length", hard_cap),
            ("grpc.so_reuseport", 0),
        ]
    )
    workers = options.workers if options.workers is not None else (os.cpu_count() or 1)
    ceiling = options.max_worker_memory or default_worker_memory(workers)
    health_servicer = health.aio.HealthServicer()
    serving = False  # health says SERVING: started, and at least one worker alive
    started = False
    health_updates: set[asyncio.Task[None]] = set()

    async def set_health(ok: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if ok else (
            health_pb2.HealthCheckResponse.NOT_SERVING)
        for name in ("", SERVICE_NAME):
            await health_servicer.set(name, status)

    def on_alive(alive: int) -> None:
        nonlocal serving
        if serving == (alive > 0) or not started:
            return
        serving = alive > 0
        if not serving:
            log.warning("no solver worker is alive: NOT_SERVING")
        task = asyncio.get_running_loop().create_task(set_health(serving))
        health_updates.add(task)
        task.add_done_callback(health_updates.discard)

    pool = WorkerPool(workers, options.max_pending, ceiling, on_alive)
    metrics = None
    if options.metrics_port is not None:
        from apportion.server.metrics import Metrics

        try:
            metrics = Metrics(pool)
            metrics_port = metrics.start_http(options.host, options.metrics_port)
        except (RuntimeError, OSError) as exc:
            print(f"apportion: cannot serve metrics: {exc}", file=sys.stderr)
            return 1
        log.info("metrics on http://%s/metrics", _address(options.host, metrics_port),
                 extra={"metrics_port": metrics_port})
    server.add_generic_rpc_handlers(
        (generic_handler(AllocationServiceServicer(pool, options.max_message_bytes, metrics)),)
    )
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    enable_reflection((SERVICE_NAME, health.SERVICE_NAME), server)
    await set_health(False)
    try:
        if options.tls is None:
            bound = server.add_insecure_port(address)
        else:
            credentials = grpc.ssl_server_credentials(
                [(options.tls.key, options.tls.cert)],
                root_certificates=options.tls.client_ca,
                require_client_auth=options.tls.client_ca is not None,
            )
            bound = server.add_secure_port(address, credentials)
    except RuntimeError as exc:
        print(f"apportion: cannot listen on {address}: {exc}", file=sys.stderr)
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
        started = True
        on_alive(pool.alive)
        await asyncio.gather(*health_updates)
        log.info(
            "%d solver workers ready, %s bytes each after start-up, ceiling %s bytes",
            pool.alive, pool.baseline_bytes, ceiling,
        )
        print(f"apportion listening on {_address(options.host, bound)}", flush=True)
        await stop.wait()
        await health_servicer.enter_graceful_shutdown()
        await server.stop(GRACE_S)
        await pool.close()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        if metrics is not None:
            metrics.stop_http()
    return 0


def run_from_args(args: argparse.Namespace) -> int:
    """Run the server with options parsed by a parser set up by `add_serve_arguments`."""
    try:
        tls = read_tls(args.tls_cert, args.tls_key, args.tls_client_ca)
    except ValueError as exc:
        print(f"apportion: error: {exc}", file=sys.stderr)
        return 2
    options = ServeOptions(
        host=args.host,
        port=args.port,
        workers=args.workers,
        max_pending=args.max_pending,
        max_message_bytes=args.max_message_bytes,
        max_worker_memory=args.max_worker_memory,
        tls=tls,
        metrics_port=args.metrics_port,
        log_format=args.log_format,
    )
    return asyncio.run(serve(options))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m apportion.server.app", description="Run the apportion gRPC server."
    )
    add_serve_arguments(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
