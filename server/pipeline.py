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
    call deadline minus its safety margin here.
    """
    started = time.perf_counter()
    problem, policy, options = request_to_model(request)
    limit = options.time_limit_s
    if time_limit_cap_s > 0:
        limit = min(limit, time_limit_cap_s) if limit > 0 else time_limit_cap_s
        options = replace(options, time_limit_s=limit)
    plan = solve(problem, policy, options)
    return plan_to_response(plan, problem, policy, time.perf_counter() - started, limit)
