"""`round_wire`: a round schedule written from columns parses to the messages a builder adding
each `Round` and `RoundGrant` makes, for random schedules; through `plan_response`, with and
without the placement stage (whose devices go through the messages)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.server.response import plan_response
from apportion.server.round_wire import round_records
from apportion.solver.model import PolicyRequest
from apportion.solver.parameters import GandivaFairParameters
from apportion.solver.result import RoundGrant, ScheduledRound
from apportion.solver.solve import solve
from apportion.v1 import allocation_service_pb2 as service_pb
from tests.formulations.test_gandiva_fair import users_problem
from tests.server.test_plan_wire import TEXT, same

INT32 = st.one_of(st.integers(0, 8), st.integers(-(2**31), 2**31 - 1))


@st.composite
def schedules(draw: st.DrawFn) -> tuple[tuple[ScheduledRound, ...], list[str], list[str]]:
    m = draw(st.integers(1, 6))
    ids = draw(st.lists(TEXT, min_size=m, max_size=m))
    names = draw(st.lists(st.sampled_from(["v100", "p100", "é", "t" * 130, ""]), min_size=1,
                          max_size=3, unique=True))
    grant = st.builds(
        RoundGrant, job=st.integers(0, m - 1), type_index=st.integers(0, len(names) - 1),
        devices=INT32,
        nodes=st.lists(st.sampled_from(["n0", "n1", "", "ü" * 70]), max_size=3).map(tuple),
        colocated_with=st.integers(-1, m - 1), lease_extended=st.booleans())
    rounds = draw(st.lists(st.builds(ScheduledRound, index=INT32,
                                     grants=st.lists(grant, max_size=4).map(tuple)),
                           max_size=4))
    return tuple(rounds), ids, names


def built(rounds: tuple[ScheduledRound, ...], ids: list[str], names: list[str]
          ) -> service_pb.Plan:
    """The reference: a message per round and grant."""
    out = service_pb.Plan()
    for scheduled in rounds:
        round_msg = out.rounds.add(index=scheduled.index)
        for grant in scheduled.grants:
            round_msg.grants.add(
                job_id=ids[grant.job], accelerator_type=names[grant.type_index],
                devices=grant.devices, nodes=list(grant.nodes),
                colocated_with=ids[grant.colocated_with] if grant.colocated_with >= 0 else "",
                lease_extended=grant.lease_extended)
    return out


@given(schedules())
def test_rounds_written_from_columns_are_the_messages(case: tuple[Any, ...]) -> None:
    rounds, ids, names = case
    assert same(service_pb.Plan.FromString(round_records(rounds, ids, names)),
                built(rounds, ids, names))


@pytest.mark.parametrize("seed", range(3))
def test_a_stride_plans_response_carries_its_rounds(seed: int) -> None:
    """Gandiva_fair's schedule through `plan_response`: the serialized response and the
    message both hold the rounds the builder makes, beside the jobs' records."""
    problem, _, _ = users_problem(seed, types=2)
    policy = PolicyRequest("gandiva_fair", GandivaFairParameters())
    plan = solve(problem, policy)
    assert plan.shares.rounds
    expected = built(plan.shares.rounds, list(problem.jobs.ids),
                     list(problem.cluster.type_names))
    wire = plan_response(plan, problem, policy, 0.0, 0.0)
    parsed = service_pb.SolveResponse.FromString(wire.serialize())
    message = wire.message()
    for response in (parsed, message):
        assert len(response.plan.rounds) == len(expected.rounds)
        for got, want in zip(response.plan.rounds, expected.rounds, strict=True):
            assert same(got, want)
        assert len(response.plan.jobs) == problem.jobs.num_jobs
    assert same(parsed, message)
