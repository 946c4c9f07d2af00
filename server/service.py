"""The apportion.v1.AllocationService implementation (grpc.aio).

`Solve` receives the raw request bytes (no deserializer) so it can enforce its own message
size limit and hand the bytes to a worker process untouched; the worker parses, validates
and solves. The request's deadline is made the moment the call arrives: the gRPC deadline
minus a margin (`time_limits`), so time spent waiting for a worker is taken off it. The worker
also learns the arrival instant, from which the request's own ``options.time_limit_s`` counts.
A worker still busy shortly after the gRPC deadline is terminated.

Every call gets a request id, sent back in the ``apportion-request-id`` header of every reply
and logged with the call when it ends. Unexpected failures answer INTERNAL with a one-line
message and that id; the traceback goes to the server's log under the same id, never to the
client.
"""

from __future__ import annotations

import logging
import math
import time
import uuid

import grpc
import grpc.aio
from google.rpc import code_pb2

from apportion.server.error_text import one_line
from apportion.server.errors import (
    abort_with,
    bad_request_status,
    busy_status,
    internal_status,
    plain_status,
    validation_status,
)
from apportion.server.metrics import NO_POLICY, Metrics, policy_label
from apportion.server.render import termination_name
from apportion.server.wire_peek import response_stats
from apportion.server.workers import (
    PoolClosedError,
    PoolExhaustedError,
    WorkerFailedError,
    WorkerMemoryError,
    WorkerPool,
)
from apportion.solver.errors import ValidationError, Violation
from apportion.solver.registry import policies
from apportion.solver.stages import Placer
from apportion.v1 import allocation_service_pb2 as service_pb

SERVICE_NAME: str = service_pb.DESCRIPTOR.services_by_name["AllocationService"].full_name
"""``apportion.v1.AllocationService``."""
MARGIN_FRACTION = 0.1
MARGIN_MAX_S = 0.2
MARGIN_MIN_S = 0.05
"""Solver time-limit margin before the deadline: 10% of the remaining time, at most 0.2 s
and at least 0.05 s."""
HARD_TIMEOUT_GRACE_S = 0.5
"""A worker still busy this long (s) after the call deadline is terminated."""
RETRY_AFTER_S = 1.0
"""The retry delay (s) a busy reply suggests in its google.rpc.RetryInfo."""
REQUEST_ID_HEADER = "apportion-request-id"
"""Initial-metadata key carrying the call's request id, on every reply (success or error)."""

_log = logging.getLogger(__name__)


def time_limits(remaining_s: float | None) -> tuple[float, float | None]:
    """(budget, hard timeout) in seconds for a call with `remaining_s` seconds left before
    its gRPC deadline: the budget leaves a margin for the reply to travel back; (inf, None)
    for a call without a deadline."""
    if remaining_s is None:
        return math.inf, None
    remaining_s = max(remaining_s, 0.0)
    margin = max(MARGIN_MIN_S, min(MARGIN_MAX_S, MARGIN_FRACTION * remaining_s))
    budget = max(remaining_s - margin, 0.5 * remaining_s, 1e-3)
    return budget, remaining_s + HARD_TIMEOUT_GRACE_S


def new_request_id() -> str:
    """A short random id naming one call in replies and in the log."""
    return uuid.uuid4().hex[:16]


def list_policies_response() -> service_pb.ListPoliciesResponse:
    """Every registered policy, canonical order, with its capabilities."""
    response = service_pb.ListPoliciesResponse()
    for spec in policies():
        caps = spec.capabilities
        job_value = spec.reporting.job_value
        response.policies.add(
            name=spec.name,
            aliases=list(spec.aliases),
            description=spec.description,
            parameters_message=spec.parameters_message,
            required_inputs=list(spec.required_inputs),
            maximize=spec.maximize,
            parameters_field=spec.parameters_field,
            objective_name=spec.reporting.objective.name,
            objective_unit=spec.reporting.objective.unit,
            job_value_name=job_value.name if job_value else "",
            job_value_unit=job_value.unit if job_value else "",
            capabilities=service_pb.PolicyCapabilities(
                plan_kind=service_pb.PlanKind.Value(f"PLAN_KIND_{caps.plan_kind.name}"),
                problem_class=service_pb.ProblemClass.Value(
                    f"PROBLEM_CLASS_{caps.problem_class.name}"
                ),
                reads_tenants=caps.reads_tenants,
                needs_remaining_work=caps.needs_remaining_work,
                needs_history=caps.needs_history,
                uses_colocations=caps.uses_colocations,
                reads_epoch_profiles=caps.reads_epoch_profiles,
                reads_configurations=caps.reads_configurations,
                round_schedule=caps.round_schedule,
                space_sharing=bool(spec.packed_entry_point),
                default_relative_gap=caps.default_relative_gap,
                reads_loss_history=caps.reads_loss_history,
                reads_inference=caps.reads_inference,
                partitionable=caps.partitionable,
                placement_stage=caps.placement_stage,
                admission_stage=caps.admission_stage,
                reads_resource_profiles=caps.reads_resource_profiles,
                reads_stage_times=caps.reads_stage_times,
                reads_device_sharing=caps.reads_device_sharing,
            ),
            combines_with=list(spec.capabilities.combines_with),
            placers=[placer.value for placer in Placer] if spec.capabilities.placement_stage
            else [],
        )
    return response


class AllocationServiceServicer:
    """Solve and ListPolicies; register with `generic_handler`. Every call is logged once when
    it ends (with its request id, policy, status code and latency) and, with `metrics`,
    counted."""

    def __init__(
        self, pool: WorkerPool, max_message_bytes: int, metrics: Metrics | None = None
    ) -> None:
        """`max_message_bytes`: largest accepted request (bytes); larger ones are rejected
        with a field violation on ``request``."""
        self._pool = pool
        self._max_message_bytes = max_message_bytes
        self._metrics = metrics

    async def Solve(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        """Serialized SolveRequest in, serialized SolveResponse out."""
        arrived = time.monotonic()
        request_id = new_request_id()
        await context.send_initial_metadata(((REQUEST_ID_HEADER, request_id),))
        policy = policy_label(request)
        code = "CANCELLED"  # unless the call gets further
        stats = None
        try:
            try:
                response = await self._solve(request, context, arrived, request_id)
            except _Rejected as rejected:
                code = rejected.status.code.name
                await abort_with(context, rejected.status)
            code = "OK"
            stats = response_stats(response)
            return response
        finally:
            self._finished("Solve", request_id, policy, code, arrived, stats)

    async def _solve(
        self, request: bytes, context: grpc.aio.ServicerContext, arrived: float, request_id: str
    ) -> bytes:
        """The response bytes; `_Rejected` with the status to answer otherwise."""
        budget_s, timeout_s = time_limits(context.time_remaining())
        if len(request) > self._max_message_bytes:
            raise _Rejected(
                bad_request_status(
                    [
                        Violation(
                            "request",
                            f"{len(request)} bytes exceeds the limit of "
                            f"{self._max_message_bytes} bytes",
                        )
                    ]
                )
            )
        try:
            return await self._pool.submit(request, arrived + budget_s, arrived, timeout_s)
        except ValidationError as exc:
            raise _Rejected(validation_status(exc)) from exc
        except PoolExhaustedError as exc:
            raise _Rejected(busy_status(str(exc), RETRY_AFTER_S)) from exc
        except WorkerMemoryError as exc:
            _log.warning("request %s: %s", request_id, exc, extra={"request_id": request_id})
            raise _Rejected(plain_status(code_pb2.RESOURCE_EXHAUSTED, str(exc))) from exc
        except TimeoutError as exc:
            raise _Rejected(
                plain_status(
                    code_pb2.DEADLINE_EXCEEDED, "the solve did not finish before the deadline"
                )
            ) from exc
        except PoolClosedError as exc:
            raise _Rejected(plain_status(code_pb2.UNAVAILABLE, str(exc))) from exc
        except WorkerFailedError as exc:
            _log.error("request %s failed: %s\n%s", request_id, exc.summary, exc.detail,
                       extra={"request_id": request_id, "detail": exc.detail})
            raise _Rejected(internal_status(one_line(exc.summary), request_id)) from exc
        except Exception as exc:  # a defect of the service itself: same treatment
            _log.exception("request %s failed in the service", request_id,
                           extra={"request_id": request_id})
            summary = one_line(f"unexpected {type(exc).__name__} in the service")
            raise _Rejected(internal_status(summary, request_id)) from exc

    async def ListPolicies(
        self, request: service_pb.ListPoliciesRequest, context: grpc.aio.ServicerContext
    ) -> service_pb.ListPoliciesResponse:
        arrived = time.monotonic()
        request_id = new_request_id()
        await context.send_initial_metadata(((REQUEST_ID_HEADER, request_id),))
        response = list_policies_response()
        self._finished("ListPolicies", request_id, NO_POLICY, "OK", arrived, None)
        return response

    def _finished(
        self,
        method: str,
        request_id: str,
        policy: str,
        code: str,
        arrived: float,
        stats: service_pb.SolveStats | None,
    ) -> None:
        """Log and count one finished call."""
        latency_s = time.monotonic() - arrived
        fields: dict[str, object] = {
            "request_id": request_id, "method": method, "policy": policy, "code": code,
            "latency_s": round(latency_s, 6),
        }
        if stats is not None:
            fields["termination"] = termination_name(stats.termination)
            fields["solve_time_s"] = round(stats.solve_time_s, 6)
        _log.info("call", extra=fields)
        if self._metrics is not None:
            self._metrics.record(method, policy, code, latency_s, stats)


class _Rejected(Exception):
    """A call answered with an error status."""

    def __init__(self, status: grpc.Status) -> None:
        super().__init__(status.details)
        self.status = status


def generic_handler(servicer: AllocationServiceServicer) -> grpc.GenericRpcHandler:
    """The service's method handlers; Solve takes and returns raw bytes."""
    return grpc.method_handlers_generic_handler(
        SERVICE_NAME,
        {
            "Solve": grpc.unary_unary_rpc_method_handler(servicer.Solve),
            "ListPolicies": grpc.unary_unary_rpc_method_handler(
                servicer.ListPolicies,
                request_deserializer=service_pb.ListPoliciesRequest.FromString,
                response_serializer=service_pb.ListPoliciesResponse.SerializeToString,
            ),
        },
    )
