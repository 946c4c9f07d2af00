"""Request in, response out: the path shared by `apportion solve` and the gRPC service.

Time limits are end to end. The caller hands over the instant the request arrived and the
deadline it set then (the server: the call's gRPC deadline minus a margin, made before the
request waited for a worker; the CLI: ``--time-limit``, made before the file was read). The
request's own ``options.time_limit_s`` also counts from the arrival. Validation, the solve and
the response conversion all spend the one budget: a request whose budget is used up before
the solve starts (validation checks it between stages and within its long per-job loops)
gets no solve and the termination `no_solution`, and the solver is given
what is left minus an estimate of the time needed to build the response.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from apportion.server.convert import request_to_model
from apportion.server.response import WireResponse, plan_response
from apportion.solver.capabilities import PlanKind
from apportion.solver.deadline import Deadline, DeadlineExpiredError
from apportion.solver.model import PolicyRequest, Problem, SolveOptions
from apportion.solver.registry import lookup
from apportion.solver.result import Plan
from apportion.solver.solve import solve
from apportion.v1 import allocation_service_pb2 as service_pb

RESPONSE_RESERVE: Mapping[PlanKind, float] = MappingProxyType({
    PlanKind.TIME_SHARE: 1e-6,
    PlanKind.QUEUE: 3e-6,
    PlanKind.MARKET: 5e-6,
    PlanKind.CONFIGURATION: 6e-6,
    PlanKind.WINDOW: 4e-6,
    PlanKind.GROUPS: 1e-5,
})
"""Time (s) per job held back from the solve to convert the plan to a response and serialize
it, by plan kind: the CPU time `benchmarks/response_cost.py` measured in process at 100,000
jobs (best of 3; 2026-12-02, 2-core machine), with room for a busy machine: time shares
(weighted max-min fairness, records written as bytes) 0.5 us, queues (allox, the places and
device queues written as bytes) 2.3 us, market plans (the Fisher market: a spending per job
message) 2.4 us, configurations (written as bytes with the allocations; at load average 2.7:
Optimus 1.2 us, Sia 2.5 us, Pollux 3.1 us wall, against 3.4, 3.0 and 3.5 us when written a
message per job; the reserve keeps twice the largest), groups (IADeep) 4.4 us. Planning
windows (Shockwave, 8,192 jobs at most) keep the former single figure."""
RESPONSE_MAX_SHARE = 0.5
"""The response reserve never takes more than this share of the time left before the solve."""


@dataclass(frozen=True)
class SolvedRequest:
    """A request taken through the pipeline: its validated model, the typed plan and the wire
    response (what the CLI prints and the server sends)."""

    problem: Problem | None
    policy: PolicyRequest | None
    options: SolveOptions | None
    """The three are None when the budget ran out during validation."""
    plan: Plan | None
    """None when the budget ran out before the solve (the response says `no_solution`)."""
    wire: WireResponse

    @property
    def response(self) -> service_pb.SolveResponse:
        """The response message."""
        return self.wire.message()


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
    return solve_request_typed(request, deadline, arrived_at).response


def solve_serialized(
    request: service_pb.SolveRequest,
    serialized: bytes,
    deadline: Deadline | None = None,
    arrived_at: float | None = None,
) -> bytes:
    """`solve_request` for a request parsed from `serialized` (the service's route): its jobs
    are decoded from those bytes, and the response is returned serialized."""
    return solve_request_typed(request, deadline, arrived_at, serialized).wire.serialize()


def solve_request_typed(
    request: service_pb.SolveRequest,
    deadline: Deadline | None = None,
    arrived_at: float | None = None,
    serialized: bytes | None = None,
) -> SolvedRequest:
    """`solve_request` keeping the model and the typed plan beside the response (the Python
    API's route). `serialized`: the bytes `request` was parsed from, if at hand."""
    arrived = time.monotonic() if arrived_at is None else arrived_at
    caller = deadline if deadline is not None else Deadline.never()
    # the request's own limit as sent (validated with the rest below): conversion spends it too
    asked = request.options.time_limit_s
    own = Deadline(arrived + asked) if math.isfinite(asked) and asked > 0 else None
    if own is not None and own.at <= caller.at:
        effective, limit_s = own, asked
    else:
        effective = caller
        limit_s = caller.at - arrived if caller.bounded else 0.0
    try:
        problem, policy, options = request_to_model(request, effective, serialized)
    except DeadlineExpiredError:  # an unknown policy name is still reported as invalid
        response = _no_time_left(lookup(request.policy.name).name, limit_s, arrived,
                                 ", while the request was validated")
        return SolvedRequest(None, None, None, None, WireResponse(response))
    if effective.expired():
        response = _no_time_left(policy.name, limit_s, arrived)
        return SolvedRequest(problem, policy, options, None, WireResponse(response))
    per_job = RESPONSE_RESERVE[lookup(policy.name).capabilities.plan_kind]
    solver_deadline = effective.leaving(per_job * problem.jobs.num_jobs, RESPONSE_MAX_SHARE)
    # the request's own limit is in `solver_deadline` already (counted from the arrival)
    plan = solve(problem, policy, replace(options, time_limit_s=0.0), solver_deadline)
    wire = plan_response(plan, problem, policy, 0.0, limit_s,
                         columnar=request.options.columnar_plan)
    wire.stats.wall_time_s = time.monotonic() - arrived
    return SolvedRequest(problem, policy, options, plan, wire)


def _no_time_left(policy: str, limit_s: float, arrived: float,
                  when: str = "") -> service_pb.SolveResponse:
    """The response for a request whose budget ran out before the solve could start."""
    response = service_pb.SolveResponse()
    stats = response.stats
    stats.termination = service_pb.TERMINATION_REASON_NO_SOLUTION
    stats.policy = policy
    stats.maximize = lookup(policy).maximize
    stats.time_limit_s = limit_s
    stats.wall_time_s = time.monotonic() - arrived
    stats.detail = (
        f"the time limit of {limit_s:g} s ran out before the solve started{when} "
        f"({stats.wall_time_s:.3f} s after the request arrived): not solved"
    )
    return response
