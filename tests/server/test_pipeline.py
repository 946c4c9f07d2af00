"""`solve_request` keeps one deadline, made when the request arrived, across validation, the
solve and the response (in process; the server and the CLI pass the arrival instant)."""

from __future__ import annotations

import time

import pytest
from grpc_harness import small_request

from apportion.server.pipeline import solve_request
from apportion.solver.deadline import Deadline
from apportion.solver.errors import ValidationError
from apportion.v1 import allocation_service_pb2 as service_pb

NO_SOLUTION = service_pb.TERMINATION_REASON_NO_SOLUTION
OPTIMAL = service_pb.TERMINATION_REASON_OPTIMAL


def test_the_requests_own_limit_counts_from_its_arrival() -> None:
    request = small_request()
    request.options.time_limit_s = 5.0
    reply = solve_request(request, arrived_at=time.monotonic() - 6.0)
    assert reply.stats.termination == NO_SOLUTION
    assert "ran out before the solve started" in reply.stats.detail
    assert reply.stats.time_limit_s == 5.0
    assert reply.stats.wall_time_s >= 6.0
    assert reply.stats.policy == "weighted_max_min_fairness" and reply.stats.maximize
    assert not reply.plan.jobs


def test_an_expired_caller_deadline_stops_before_the_solve() -> None:
    arrived = time.monotonic() - 2.0
    reply = solve_request(small_request(), Deadline(arrived + 1.0), arrived)
    assert reply.stats.termination == NO_SOLUTION
    assert reply.stats.time_limit_s == pytest.approx(1.0)


def test_the_earlier_of_the_two_limits_applies() -> None:
    arrived = time.monotonic()
    request = small_request()
    request.options.time_limit_s = 30.0
    reply = solve_request(request, Deadline(arrived + 20.0), arrived)
    assert reply.stats.termination == OPTIMAL
    assert reply.stats.time_limit_s == pytest.approx(20.0)
    request.options.time_limit_s = 10.0
    reply = solve_request(request, Deadline(arrived + 20.0), arrived)
    assert reply.stats.time_limit_s == 10.0


def test_without_limits_the_wall_time_counts_from_the_arrival() -> None:
    reply = solve_request(small_request(), None, time.monotonic() - 3.0)
    assert reply.stats.termination == OPTIMAL
    assert reply.stats.time_limit_s == 0
    assert reply.stats.wall_time_s >= 3.0


def test_validation_stops_at_the_deadline_but_still_rejects_an_unknown_policy() -> None:
    """A budget used up while the request is validated ends there (no_solution, said so);
    a request naming no known policy is still invalid, whatever its budget."""
    request = small_request()
    request.options.time_limit_s = 1e-6
    reply = solve_request(request)
    assert reply.stats.termination == NO_SOLUTION
    assert "while the request was validated" in reply.stats.detail
    request.policy.name = "nope"
    with pytest.raises(ValidationError, match="unknown policy 'nope'"):
        solve_request(request)
