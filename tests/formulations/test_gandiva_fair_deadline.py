"""Gandiva_fair under a deadline: cut at every place it looks at the deadline (a countdown), or
already past, the answer is a feasible plan, says which stage was cut, is never `optimal` when
cut, and nothing long runs after the cut."""

from __future__ import annotations

import numpy as np
import pytest

from apportion.formulations import gandiva_fair, stride
from apportion.solver.deadline import Deadline
from apportion.solver.model import PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import GandivaFairParameters, TradingMode
from apportion.solver.result import Plan, Termination
from apportion.solver.solve import solve
from tests.countdown import CountdownDeadline
from tests.formulations.test_gandiva_fair import users_problem

QUANTA = 4
STAGE_LOOKS = 3
"""Looks a cut solve may still make after the deadline passed: one per stage (trading, homes,
stride) that sees it and stops."""


def run(problem: Problem, deadline: Deadline, mode: TradingMode) -> Plan:
    policy = PolicyRequest("gandiva_fair", GandivaFairParameters(quanta=QUANTA, trading=mode))
    return solve(problem, policy, SolveOptions(), deadline)


def assert_feasible(problem: Problem, plan: Plan) -> None:
    """Every round: each job once, its whole gang on a usable type, no node over its devices;
    the time shares are the rounds run."""
    s = problem.jobs.scale_factor
    cluster = problem.cluster
    index = {name: k for k, name in enumerate(cluster.node_names)}
    ran = np.zeros_like(plan.time_share)
    for scheduled in plan.shares.rounds:
        jobs = [g.job for g in scheduled.grants]
        assert len(jobs) == len(set(jobs))
        used = np.zeros(len(cluster.node_names))
        for g in scheduled.grants:
            assert g.devices == s[g.job] and problem.usable[g.job, g.type_index]
            assert all(cluster.node_type[index[k]] == g.type_index for k in g.nodes)
            for k in g.nodes:
                used[index[k]] += g.devices / len(g.nodes)
            ran[g.job, g.type_index] += 1
        assert np.all(used <= cluster.node_devices)
    assert plan.shares.rounds
    assert np.allclose(plan.time_share, ran / len(plan.shares.rounds))
    assert np.all(s @ plan.time_share <= cluster.count + 1e-9)


@pytest.mark.parametrize("mode", [TradingMode.GREEDY, TradingMode.EXACT])
def test_a_cut_at_every_look_is_feasible_and_says_so(
    mode: TradingMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stride, "CHECK_EVERY", 3)  # look often enough for a small problem
    monkeypatch.setattr(gandiva_fair, "HOME_CHECK_EVERY", 3)
    problem, _, _ = users_problem(5, types=2, nodes=1)
    whole = CountdownDeadline(checks=10**9)
    full = run(problem, whole, mode)
    looks = whole.looks[0]
    assert len(full.shares.rounds) == QUANTA and "cut" not in full.certificate.detail
    assert looks > 10
    first = set(full.shares.rounds[0].grants)
    seen = set()
    placed_before = -1
    for checks in range(looks):
        deadline = CountdownDeadline(checks=checks)
        plan = run(problem, deadline, mode)
        assert_feasible(problem, plan)
        cert = plan.certificate
        assert "limit" in cert.detail, (checks, cert.detail)
        assert cert.termination is (Termination.HEURISTIC if mode is TradingMode.GREEDY
                                    else Termination.FEASIBLE), (checks, cert.termination)
        assert deadline.looks[0] <= checks + 1 + STAGE_LOOKS  # nothing long ran after it
        rounds = plan.shares.rounds
        stages = {"trading": "fixed point" in cert.detail, "homes": "homes" in cert.detail,
                  "first quantum": "within its first quantum" in cert.detail,
                  "quanta": "quanta by the time limit" in cert.detail}
        seen |= {stage for stage, cut in stages.items() if cut}
        if stages["homes"] or stages["trading"]:
            continue
        if stages["first quantum"]:  # the gangs placed before the cut, a few per look
            assert len(rounds) == 1 and set(rounds[0].grants) <= first
            placed = len(rounds[0].grants)
            assert placed_before < 0 or placed <= placed_before + stride.CHECK_EVERY
            placed_before = placed
        else:  # whole quanta of the full plan
            assert stages["quanta"] and rounds == full.shares.rounds[:len(rounds)]
    assert seen == {"homes", "first quantum", "quanta"} | (
        {"trading"} if mode is TradingMode.GREEDY else set())


def test_a_past_deadline_answers_with_part_of_one_quantum() -> None:
    problem, _, _ = users_problem(3, types=2, nodes=1, backlog=400.0)
    m = problem.jobs.num_jobs
    assert m > 2 * stride.CHECK_EVERY  # the stride looks within the first quantum
    for mode in (TradingMode.GREEDY, TradingMode.EXACT):
        plan = run(problem, Deadline(0.0), mode)
        assert_feasible(problem, plan)
        assert len(plan.shares.rounds) == 1
        assert "within its first quantum" in plan.certificate.detail
        assert plan.certificate.termination is not Termination.OPTIMAL
        assert plan.stride is not None and plan.stride.stride_pass.shape == (m,)
    full = run(problem, Deadline.never(), TradingMode.GREEDY)
    assert len(full.shares.rounds) == QUANTA
    assert full.certificate.detail.count("cut") == 0
