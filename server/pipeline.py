"""Request in, response out: the path shared by `apportion solve` and the gRPC service.

Time limits are end to end. The caller hands over the instant the request arrived and the
deadline it set then (the server: the call's gRPC deadline minus a margin, made before the
request waited for a worker; the CLI: ``--time-limit``, made before the file was read). The
request's own ``options.time_limit_s`` also counts from the arrival. Validation, the solve and
the response conversion all spend the one budget: a request whose budget is used up before
the solve starts gets no solve and the termination `no_solution`, and the solver is given
what is left minus an estimate of the time needed to build the response.
"""

from __future__ import annotations

import time
from dataclasses import replace

from apportion.server.convert import plan_to_response, request_to_model
from apportion.solver.deadline import Deadline
from apportion.solver.registry import lookup
from apportion.solver.solve import solve
from apportion.v1 import allocation_service_pb2 as service_pb

RESPONSE_S_PER_JOB = 4e-6
"""Time (s) reserved per job for converting the plan to a response (measured: about 3 µs per
job at 100,000 jobs on a 2-core machine)."""
RESPONSE_MAX_SHARE = 0.5
"""The response reserve never takes more than this share of the time left before the solve."""


def solve_request(
    request: service_pb.SolveRequest,
    deadline: Deadline | None = None,
    arrived_at: float | None = None,
) -> service_pb.SolveResponse:
    """Validate, solve and convert. Raises `ValidationError` for malformed requests.

    `deadline` (None = none) is the caller's deadline; `arrived_at` (``time.monotonic()``
    seconds, None = now) is when the request arrived: its own ``options.time_limit_s`` counts
    from then. The response's ``stats.time_limit_s`` is the budget that applied (from the
    arrival) and ``stats.wall_time_s`` the time from the arrival to the finished response.
    """
    arrived = time.monotonic() if arrived_at is None else arrived_at
    caller = deadline if deadline is not None else Deadline.never()
    problem, policy, options = request_to_model(request)
    own = Deadline(arrived + options.time_limit_s) if options.time_limit_s > 0 else None
    if own is not None and own.at <= caller.at:
        effective, limit_s = own, options.time_limit_s
    else:
        effective = caller
        limit_s = caller.at - arrived if caller.bounded else 0.0
    if effective.expired():
        return _no_time_left(policy.name, limit_s, arrived)
    solver_deadline = effective.leaving(RESPONSE_S_PER_JOB * problem.jobs.num_jobs,
                                        RESPONSE_MAX_SHARE)
    # the request's own limit is in `solver_deadline` already (counted from the arrival)
    plan = solve(problem, policy, replace(options, time_limit_s=0.0), solver_deadline)
    response = plan_to_response(plan, problem, policy, 0.0, limit_s,
                                columnar=request.options.columnar_plan)
    response.stats.wall_time_s = time.monotonic() - arrived
    return response


def _no_time_left(policy: str, limit_s: float, arrived: float) -> service_pb.SolveResponse:
    """The response for a request whose budget ran out before the solve could start."""
    response = service_pb.SolveResponse()
    stats = response.stats
    stats.termination = service_pb.TERMINATION_REASON_NO_SOLUTION
    stats.policy = policy
    stats.maximize = lookup(policy).maximize
    stats.time_limit_s = limit_s
    stats.wall_time_s = time.monotonic() - arrived
    stats.detail = (
        f"the time limit of {limit_s:g} s ran out before the solve started "
        f"({stats.wall_time_s:.3f} s after the request arrived): not solved"
    )
    return response
