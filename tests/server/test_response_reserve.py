"""The time the pipeline holds back from the solve for the response is its plan kind's
(`pipeline.RESPONSE_RESERVE`): every kind has one, and a request of each kind holds back its
kind's reserve per job."""

from __future__ import annotations

import pytest
from google.protobuf import json_format

from apportion.server.pipeline import RESPONSE_RESERVE, solve_request_typed
from apportion.solver.capabilities import PlanKind
from apportion.solver.deadline import Deadline
from apportion.solver.registry import policies
from apportion.v1 import allocation_service_pb2 as service_pb
from tests.countdown import ReservingDeadline
from tests.server.fuzz_requests import base_request

FIRST_OF_KIND = {spec.capabilities.plan_kind: spec for spec in reversed(policies())}
"""A policy of each plan kind."""


def test_every_plan_kind_has_a_reserve() -> None:
    assert set(RESPONSE_RESERVE) == set(PlanKind)
    assert all(0 < seconds < 1e-3 for seconds in RESPONSE_RESERVE.values())


@pytest.mark.parametrize("kind", sorted(FIRST_OF_KIND), ids=str)
def test_the_solve_leaves_the_kinds_reserve(kind: PlanKind) -> None:
    spec = FIRST_OF_KIND[kind]
    request = json_format.ParseDict(base_request(spec), service_pb.SolveRequest())
    request.options.ClearField("time_limit_s")  # the caller's deadline applies
    held: list[float] = []

    def share(seconds: float) -> Deadline:
        held.append(seconds)
        return Deadline.never()

    solved = solve_request_typed(request, ReservingDeadline(share=share))
    assert solved.problem is not None and solved.plan is not None
    assert held[0] == pytest.approx(RESPONSE_RESERVE[kind] * solved.problem.jobs.num_jobs)
