"""gRPC error statuses: validation failures become INVALID_ARGUMENT with a google.rpc.BadRequest.

Clients read the detail with ``grpc_status.rpc_status.from_call(error)``. The status message is
the newline-joined violations, the same text the CLI prints. Status message and details travel
in the trailing metadata, which gRPC limits (8 KiB by default), so a request with thousands of
violations is reported with the first ones and a final entry counting the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import grpc
import grpc.aio
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from apportion.solver.errors import ValidationError, Violation

MAX_LISTED_VIOLATIONS = 50
"""At most this many violations are listed in one status."""
MAX_LISTED_CHARS = 2000
"""...and at most about this many characters of violation text (field + description)."""


def _listed(violations: Sequence[Violation]) -> list[Violation]:
    """The violations to report: the first ones within the size budget, plus a summary entry
    (field ``request``) counting those left out."""
    listed: list[Violation] = []
    chars = 0
    for violation in violations:
        size = len(violation.field) + len(violation.description)
        if len(listed) >= MAX_LISTED_VIOLATIONS or (listed and chars + size > MAX_LISTED_CHARS):
            break
        listed.append(violation)
        chars += size
    left = len(violations) - len(listed)
    if left:
        listed.append(
            Violation("request", f"{left} more violation{'s' if left > 1 else ''} not listed")
        )
    return listed


def bad_request_status(violations: Sequence[Violation]) -> grpc.Status:
    """INVALID_ARGUMENT whose detail is a google.rpc.BadRequest with one field violation per
    violation (field path and description), and whose message lists them one per line."""
    listed = _listed(violations)
    bad_request = error_details_pb2.BadRequest()
    for violation in listed:
        entry = bad_request.field_violations.add()
        entry.field = violation.field
        entry.description = violation.description
    detail = any_pb2.Any()
    detail.Pack(bad_request)
    status = status_pb2.Status(
        code=code_pb2.INVALID_ARGUMENT,
        message="\n".join(str(v) for v in listed),
        details=[detail],
    )
    return rpc_status.to_status(status)


def validation_status(error: ValidationError) -> grpc.Status:
    """The status for a rejected request."""
    return bad_request_status(error.violations)


async def abort_with(context: grpc.aio.ServicerContext, status: grpc.Status) -> NoReturn:
    """End the call with `status` (code, message and details in the trailing metadata)."""
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("context.abort returned")  # pragma: no cover - abort always raises


async def abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    """End the call with `code` and `message`, no details."""
    await context.abort(code, message)
    raise AssertionError("context.abort returned")  # pragma: no cover - abort always raises
