"""gRPC error statuses of the service, each with a machine-readable google.rpc detail.

* INVALID_ARGUMENT (a malformed request): a google.rpc.BadRequest with one field violation per
  problem; the message is the same ``field: description`` lines the CLI prints.
* RESOURCE_EXHAUSTED because every worker is busy: a google.rpc.RetryInfo saying when to
  retry. A RESOURCE_EXHAUSTED *without* RetryInfo (the solve needed more memory than a worker
  may use, or the message is over gRPC's receive limit) will fail again: do not retry it.
* INTERNAL: a one-line message naming the request id, and a google.rpc.RequestInfo carrying
  it; the traceback stays in the server's log under that id.

Clients read the details with ``grpc_status.rpc_status.from_call(error)``. Status message and
details travel in the trailing metadata, which gRPC limits (8 KiB by default), so the text is
bounded: echoed values are cut (`error_text.bounded`) and a long violation list is reported
with its first entries and a final entry counting the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import grpc
import grpc.aio
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from apportion.server.error_text import listed
from apportion.solver.errors import ValidationError, Violation

MAX_LISTED_VIOLATIONS = 50
"""At most this many violations are listed in one status."""
MAX_LISTED_BYTES = 1600
"""...and about this many UTF-8 bytes of violation text (field + description). The message
goes out percent-encoded (up to 3 bytes per byte) next to the base64 BadRequest (4/3), which
keeps the trailers under gRPC's 8 KiB default whatever the characters."""


def _status(code: int, message: str, detail: Message | None = None) -> grpc.Status:
    details = []
    if detail is not None:
        packed = any_pb2.Any()
        packed.Pack(detail)
        details.append(packed)
    return rpc_status.to_status(status_pb2.Status(code=code, message=message, details=details))


def plain_status(code: int, message: str) -> grpc.Status:
    """`code` (a google.rpc.Code) with `message` and no details."""
    return _status(code, message)


def bad_request_status(violations: Sequence[Violation]) -> grpc.Status:
    """INVALID_ARGUMENT whose detail is a google.rpc.BadRequest with one field violation per
    violation (field path and description), and whose message lists them one per line."""
    shown = listed(violations, MAX_LISTED_VIOLATIONS, MAX_LISTED_BYTES)
    bad_request = error_details_pb2.BadRequest()
    for violation in shown:
        bad_request.field_violations.add(field=violation.field, description=violation.description)
    return _status(
        code_pb2.INVALID_ARGUMENT, "\n".join(str(v) for v in shown), bad_request
    )


def validation_status(error: ValidationError) -> grpc.Status:
    """The status for a rejected request."""
    return bad_request_status(error.violations)


def busy_status(message: str, retry_after_s: float) -> grpc.Status:
    """RESOURCE_EXHAUSTED with a google.rpc.RetryInfo: retry after `retry_after_s` seconds."""
    delay = duration_pb2.Duration()
    delay.FromNanoseconds(round(retry_after_s * 1e9))
    return _status(
        code_pb2.RESOURCE_EXHAUSTED, message, error_details_pb2.RetryInfo(retry_delay=delay)
    )


def internal_status(message: str, request_id: str) -> grpc.Status:
    """INTERNAL with a one-line message ending with the request id, and a
    google.rpc.RequestInfo carrying it."""
    return _status(
        code_pb2.INTERNAL,
        f"{message} (request id {request_id}; the server log has the details)",
        error_details_pb2.RequestInfo(request_id=request_id),
    )


async def abort_with(context: grpc.aio.ServicerContext, status: grpc.Status) -> NoReturn:
    """End the call with `status` (code, message and details in the trailing metadata)."""
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("context.abort returned")  # pragma: no cover - abort always raises


async def abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    """End the call with `code` and `message`, no details."""
    await context.abort(code, message)
    raise AssertionError("context.abort returned")  # pragma: no cover - abort always raises
