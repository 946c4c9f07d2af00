"""Prometheus metrics of ``apportion serve --metrics-port PORT`` (``GET /metrics``).

* ``apportion_requests_total{method, policy, code}``: finished calls by gRPC status code;
* ``apportion_request_duration_seconds{method, policy}``: call latency, arrival to reply
  (waiting for a worker included);
* ``apportion_solve_duration_seconds{policy}``: the solver's own time (``stats.solve_time_s``)
  of the solves that returned a plan;
* ``apportion_terminations_total{policy, termination}``: how those solves ended;
* ``apportion_queue_depth``: admitted requests waiting for a worker;
* ``apportion_busy_workers``, ``apportion_alive_workers``: solver workers running a request,
  and started and not found dead;
* ``apportion_worker_restarts_total``: replacement workers started (after a crash, a memory
  ceiling, a cancelled or timed-out solve).

`policy` is the canonical name of a registered policy (an alias counts as its policy),
``unknown`` for any other name and ``none`` for no name or an unreadable request, so a client
cannot grow the label set. prometheus-client is an optional dependency (the ``metrics``
extra), imported only when metrics are asked for.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from apportion.server.wire_peek import requested_policy
from apportion.solver.errors import ValidationError
from apportion.solver.registry import lookup

if TYPE_CHECKING:
    from apportion.server.workers import WorkerPool
    from apportion.v1 import allocation_service_pb2 as service_pb

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                     120.0, 300.0, 600.0)
"""Histogram buckets (s) of call latency and solve time."""
UNKNOWN_POLICY = "unknown"
NO_POLICY = "none"


def policy_label(request: bytes) -> str:
    """The `policy` label of a serialized SolveRequest (see the module docstring)."""
    name = requested_policy(request)
    if not name:
        return NO_POLICY
    try:
        return lookup(name).name
    except ValidationError:
        return UNKNOWN_POLICY


class _PoolCollector:
    """Reads the pool's counters at scrape time."""

    def __init__(self, pool: WorkerPool) -> None:
        self._pool = pool

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        pool = self._pool
        yield GaugeMetricFamily("apportion_queue_depth",
                                "Admitted requests waiting for a solver worker",
                                value=max(pool.in_flight - pool.busy, 0))
        yield GaugeMetricFamily("apportion_busy_workers", "Solver workers running a request",
                                value=pool.busy)
        yield GaugeMetricFamily("apportion_alive_workers",
                                "Solver workers started and not found dead", value=pool.alive)
        yield CounterMetricFamily("apportion_worker_restarts",
                                  "Replacement solver workers started", value=pool.restarts)


class Metrics:
    """The service's metrics in a registry of their own, served over HTTP by `serve`."""

    def __init__(self, pool: WorkerPool) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Histogram
        except ImportError as exc:
            raise RuntimeError(
                "--metrics-port needs prometheus-client: pip install 'apportion[metrics]'"
            ) from exc
        self.registry = CollectorRegistry()
        self._requests = Counter("apportion_requests", "Finished calls by gRPC status code",
                                 ("method", "policy", "code"), registry=self.registry)
        self._latency = Histogram("apportion_request_duration_seconds",
                                  "Call latency from arrival to reply (s)", ("method", "policy"),
                                  buckets=LATENCY_BUCKETS_S, registry=self.registry)
        self._solve_time = Histogram("apportion_solve_duration_seconds",
                                     "Solver time of the solves that returned (s)", ("policy",),
                                     buckets=LATENCY_BUCKETS_S, registry=self.registry)
        self._terminations = Counter("apportion_terminations", "How the solves ended",
                                     ("policy", "termination"), registry=self.registry)
        self.registry.register(_PoolCollector(pool))  # type: ignore[arg-type]
        self._http: Any = None

    def record(
        self,
        method: str,
        policy: str,
        code: str,
        latency_s: float,
        stats: service_pb.SolveStats | None = None,
    ) -> None:
        """One finished call: its status code name (``OK``, ``INVALID_ARGUMENT``, ...), its
        latency (s) and, for a solve that returned, its statistics."""
        self._requests.labels(method, policy, code).inc()
        self._latency.labels(method, policy).observe(latency_s)
        if stats is not None:
            from apportion.server.render import termination_name

            self._solve_time.labels(policy).observe(stats.solve_time_s)
            self._terminations.labels(policy, termination_name(stats.termination)).inc()

    def start_http(self, host: str, port: int) -> int:
        """Serve ``/metrics`` on `host`:`port` (0 = any free port) from a background thread;
        returns the bound port."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._http = server
        bound: int = server.server_port
        return bound

    def stop_http(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
