"""AlloX near its deadline, without timing: a deadline whose clock stands still (`StillDeadline`:
a fixed time left, never expired, no limit handed to HiGHS) makes every start-or-skip decision
deterministic. An LP round that cannot end in the time left is not started; the answer is then
the best matching found so far (an earlier round's, else every job on its fastest group), it
says so, is never `optimal`, and its bound is still a valid dual bound."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations.allox import Matching, _lp_size, lp_seconds, solve_matching
from apportion.solver.backends.highs_startup import INTERIOR_POINT_LP
from apportion.solver.deadline import Deadline
from apportion.solver.model import PolicyRequest, Problem, SolveOptions
from apportion.solver.outcome import ModelSize
from apportion.solver.parameters import AlloxParameters
from apportion.solver.result import Termination
from apportion.solver.row_classes import identical_rows
from apportion.solver.solve import solve
from tests.formulations.test_allox import (
    Devices,
    assert_rel,
    brute_force,
    device_instances,
    explicit_hungarian,
    problem,
    random_devices,
)
from tests.formulations.test_allox_classes import check_matching


@dataclass(frozen=True)
class StillDeadline(Deadline):
    """`left` seconds remain, whenever asked; HiGHS gets no limit (so a started LP ends)."""

    left: float = 0.0

    def remaining(self) -> float:
        return self.left

    def expired(self) -> bool:
        return False

    def solver_limit_s(self) -> float:
        return 0.0


def estimate(inst: Devices, positions: int) -> float:
    """AlloX's estimate (s) of the time to solve its LP with `positions` positions per
    group."""
    P, _, W = inst.grouped()
    first, _, _ = identical_rows(P)
    return lp_seconds(_lp_size(P[first], np.full(W.size, positions)))


def fastest_groups(inst: Devices) -> Matching:
    """The matching with no time at all: every job on its fastest group."""
    P, tau, W = inst.grouped()
    return solve_matching(P, tau, W, inst.a, StillDeadline(left=0.0))


def test_an_lp_that_can_start_but_not_end_is_not_started() -> None:
    inst = random_devices(np.random.default_rng(7), 40, 3, 2)
    P, tau, W = inst.grouped()
    first, _, _ = identical_rows(P)
    K = np.full(W.size, 2 * -(-40 // int(W.sum())) + 1)
    size = _lp_size(P[first], K)
    starts, ends = INTERIOR_POINT_LP.seconds(size), lp_seconds(size)
    assert starts < ends
    stopped = solve_matching(P, tau, W, inst.a, StillDeadline(left=(starts + ends) / 2))
    assert stopped.status == "time_limit" and "LP not started" in stopped.note
    check_matching(P, tau, W, inst.a, stopped)
    solved = solve_matching(P, tau, W, inst.a, StillDeadline(left=ends))
    assert solved.status == "optimal" and not solved.note
    assert solved.objective <= stopped.objective <= fastest_groups(inst).objective
    assert stopped.bound is not None and solved.bound is not None
    assert stopped.bound <= solved.bound + 1e-9 * abs(solved.bound)


def test_without_time_for_the_lp_a_sample_prices_the_slots() -> None:
    """30 jobs, one fast device and six half as fast: on their fastest group all 30 queue on
    the fast device. With time for an LP over a sample of the jobs but not for the whole LP,
    the sample's slot prices spread them, and its duals give a tighter valid bound."""
    work = np.linspace(10.0, 40.0, 30)
    inst = Devices(p=np.c_[work, np.tile(2 * work[:, None], 6)], tau=np.zeros(7),
                   a=np.zeros(30))
    P, tau, W = inst.grouped()
    every = np.array([31, 6])  # every position a group can use (ceil(30 / W) + 1)
    alone = fastest_groups(inst)
    whole = solve_matching(P, tau, W, inst.a)
    left = 0.99 * lp_seconds(_lp_size(P, every))  # not enough for the whole LP
    priced = solve_matching(P, tau, W, inst.a, StillDeadline(left=left), initial_positions=every)
    assert priced.status == "time_limit" and "LP not started" in priced.note
    assert "placed at their cheapest slot under the slot prices of an LP over" in priced.note
    check_matching(P, tau, W, inst.a, priced)
    assert whole.objective <= priced.objective < alone.objective
    assert whole.bound is not None and priced.bound is not None and alone.bound is not None
    assert alone.bound < priced.bound <= whole.bound * (1 + 1e-12)
    # with capacities scaled to the sample, its duals are close to the whole LP's
    assert priced.bound >= 0.99 * whole.bound


def test_the_fastest_groups_are_kept_when_the_sampled_prices_do_worse() -> None:
    """On this instance the sample's prices place the jobs worse than their fastest groups do
    (7,862 s against 7,632 s): the better schedule is returned."""
    inst = random_devices(np.random.default_rng(0), 20, 2, 2)
    P, tau, W = inst.grouped()
    every = -(-20 // W) + 1
    left = 0.99 * lp_seconds(_lp_size(P, every))
    cut = solve_matching(P, tau, W, inst.a, StillDeadline(left=left), initial_positions=every)
    assert "LP not started" in cut.note
    assert "placed at their fastest group (no worse than at their cheapest slot" in cut.note
    assert cut.objective == fastest_groups(inst).objective
    check_matching(P, tau, W, inst.a, cut)


def test_a_pricing_round_that_cannot_end_is_not_started() -> None:
    """Starting from one position per group, the first round's duals ask for more positions;
    with time for the first round's LP but not the second's, the plan is the first round's
    restricted optimum: a feasible matching whose bound is still valid."""
    fast, slow = np.array([1.0, 2.0, 3.0, 4.0]), np.array([10.0, 20.0, 30.0, 40.0])
    inst = Devices(p=np.c_[fast, np.tile(slow[:, None], 5)], tau=np.zeros(6),
                   a=np.zeros(4))  # one fast device, five slow ones: one position fits all
    P, tau, W = inst.grouped()
    one = np.ones(W.size, np.int64)
    full = solve_matching(P, tau, W, inst.a, initial_positions=one)
    assert full.rounds >= 2 and full.status == "optimal"
    left = estimate(inst, 1) * (1 + 1e-9)  # enough for round 1 only: round 2 is larger
    cut = solve_matching(P, tau, W, inst.a, StillDeadline(left=left), initial_positions=one)
    assert cut.status == "time_limit" and cut.rounds == 2
    assert "round 2 not started" in cut.note and "round 1's" in cut.note
    check_matching(P, tau, W, inst.a, cut)
    assert cut.objective >= full.objective * (1 - 1e-12)
    assert cut.bound is not None and full.bound is not None
    assert cut.bound <= full.bound * (1 + 1e-12)
    assert all(part.size == 1 for part in cut.v)  # the duals of round 1's one position


@given(device_instances())
def test_no_time_left_gives_the_fastest_groups_and_a_valid_bound(inst: Devices) -> None:
    """Past the deadline: every job on its fastest group, time-limited, and a bound (the dual
    objective at v = 0) never above the optimum."""
    P, tau, W = inst.grouped()
    stopped = solve_matching(P, tau, W, inst.a, deadline=Deadline(0.0))
    assert stopped.status == "time_limit"
    assert np.array_equal(stopped.group, np.argmin(P, axis=1))
    check_matching(P, tau, W, inst.a, stopped)
    optimum = brute_force(inst)
    scale = max(1.0, abs(optimum))
    assert stopped.objective >= optimum - 1e-9 * scale
    assert stopped.bound is not None and stopped.bound <= optimum + 1e-9 * scale


def test_the_policy_says_its_lp_was_not_started() -> None:
    prob: Problem = problem([[1.0, 2.0], [3.0, 1.0], [2.0, 2.0], [1.0, 1.0]], [1, 2],
                            [12.0, 12.0, 30.0, 5.0])
    policy = PolicyRequest("allox", AlloxParameters())
    solved = solve(prob, policy, SolveOptions(), StillDeadline(left=1.0))
    assert solved.certificate.termination is Termination.OPTIMAL
    plan = solve(prob, policy, SolveOptions(), StillDeadline(left=1e-9))
    cert = plan.certificate
    assert cert.termination is Termination.FEASIBLE
    assert "LP not started" in cert.detail
    assert cert.objective is not None and cert.bound is not None
    assert solved.certificate.objective is not None
    assert cert.bound <= solved.certificate.objective <= cert.objective
    # the reported duals certify the reported bound (u per job, v per device position)
    assert plan.queues is not None
    matched = [i for i, q in enumerate(plan.queues.assignments()) if q is not None]
    duals = float(sum(sum(q.position_duals, 0.0) for q in plan.queues.device_queues()))
    assert_rel(float(plan.job_dual[matched].sum()) + duals, cert.bound)
    assert replace(cert, detail="") != replace(solved.certificate, detail="")


@pytest.mark.parametrize("left", [0.0, 1e-9])
def test_an_lp_not_started_spends_no_solver_time(left: float) -> None:
    inst = random_devices(np.random.default_rng(11), 25, 2, 3)
    P, tau, W = inst.grouped()
    stopped = solve_matching(P, tau, W, inst.a, StillDeadline(left=left))
    assert stopped.solve_time_s == 0.0 and stopped.rounds == 1


@given(device_instances(max_jobs=30, max_devices=6),
       st.sampled_from([-1.0, 0.1, 0.3, 0.5, 0.7, 1.0, 3.0]), st.integers(1, 3))
def test_any_time_left_gives_a_feasible_plan_and_an_honest_bound(
    inst: Devices, fraction: float, start: int
) -> None:
    """Whatever is cut (the LP, a pricing round, the sample), the matching is feasible, never
    below the optimum (Gavel's Hungarian matrix), its bound never above it, and `optimal` only
    at it. The time left: AlloX's estimate for an LP with `fraction` of the nonzeros of the LP
    with every position (-1: none at all)."""
    P, tau, W = inst.grouped()
    every = _lp_size(P, -(-P.shape[0] // W) + 1)
    left = 0.0 if fraction < 0 else lp_seconds(
        ModelSize(nonzeros=int(fraction * every.nonzeros)))
    result = solve_matching(P, tau, W, inst.a, StillDeadline(left=left),
                            initial_positions=np.full(W.size, start))
    check_matching(P, tau, W, inst.a, result)
    optimum = explicit_hungarian(inst)
    scale = max(1.0, abs(optimum))
    assert result.objective >= optimum - 1e-9 * scale
    assert result.bound is not None and result.bound <= optimum + 1e-9 * scale
    if result.status == "optimal":
        assert_rel(result.objective, optimum, what="optimal")
    else:
        assert result.note
