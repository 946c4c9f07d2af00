"""Request in, response out: the path shared by `apportion solve` and the gRPC service."""

from __future__ import annotations

import time
from dataclasses import replace

from apportion.server.convert import plan_to_response, request_to_model
from apportion.solver.solve import solve
from apportion.v1 import allocation_service_pb2 as service_pb


def solve_request(
    request: service_pb.SolveRequest, time_limit_cap_s: float = 0.0
) -> service_pb.SolveResponse:
    """Validate, solve and convert. Raises `ValidationError` for malformed requests.

    `time_limit_cap_s` (s, 0 = none) caps the request's own time limit; the server passes the
    call deadline minus its safety margin here. The limit counts from the call: time spent
    validating is deducted from what the policy gets (at least 1 ms, so the policy still
    answers with an explicit termination instead of not running).
    """
    started = time.perf_counter()
    problem, policy, options = request_to_model(request)
    limit = options.time_limit_s
    if time_limit_cap_s > 0:
        limit = min(limit, time_limit_cap_s) if limit > 0 else time_limit_cap_s
    if limit > 0:
        remaining = max(1e-3, limit - (time.perf_counter() - started))
        options = replace(options, time_limit_s=remaining)
    plan = solve(problem, policy, options)
    return plan_to_response(plan, problem, policy, time.perf_counter() - started, limit)
