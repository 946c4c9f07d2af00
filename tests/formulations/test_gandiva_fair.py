"""Gandiva_fair (B2): every "How to prove it in a test" item, the equal-split alias, the stride
state across calls, and bad inputs with field paths.

* B2.1 proportional share: one type, every user backlogged, Q quanta: each user's device-time
  is within 4 x the largest gang (device-quanta) of Q * G * t_u / sum t.
* B2.2 redistribution: the water-filling fixed point (capped users get their demand, the others
  one common level per ticket), and through the policy.
* B2.3 gang and work conservation in every planned quantum, with nodes.
* B2.4 every greedy trade is individually rational, hence every user ends at least at its
  ticket-proportional (pre-trade) throughput.
* B2.5 the greedy trades' fixed point on two types, and the exact trading LP (checked against a
  second formulation in cvxpy) bounds them; the gap is reported, never asserted to be 0.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import cvxpy as cp
import numpy as np
import pytest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from apportion.formulations.fair_share import water_fill
from apportion.formulations.gandiva_fair import equal_split
from apportion.formulations.trading import exact_trading, greedy_trades, speedups
from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.errors import ValidationError
from apportion.solver.fairness_model import FairnessInputs
from apportion.solver.model import Compat, PolicyRequest, Problem, Tenant
from apportion.solver.parameters import GandivaFairParameters, TradingMode
from apportion.solver.result import Plan, Termination
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem
from apportion.v1 import allocation_service_pb2 as service_pb

Array = NDArray[np.float64]


def users_problem(
    seed: int, types: int = 1, nodes: int = 0, backlog: float = 2.0
) -> tuple[Problem, NDArray[np.int64], Array]:
    """Users u0..u(U-1) with tickets 1-4, each with jobs of 1 or 2 devices whose total is at
    least `backlog` x its ticket share (backlogged); optional nodes of 4 devices."""
    rng = np.random.default_rng(seed)
    U = int(rng.integers(2, 5))
    per_type = int(rng.integers(2, 4)) * 4
    G = per_type * types
    tickets = rng.integers(1, 5, U).astype(float)
    owner: list[int] = []
    scale: list[int] = []
    for u in range(U):
        demand = 0
        while demand < backlog * G * tickets[u] / tickets.sum() + 2:
            s = int(rng.choice([1, 1, 2]))
            owner.append(u)
            scale.append(s)
            demand += s
    m = len(owner)
    speed = np.sort(rng.uniform(1.0, 4.0, (m, types)), axis=1)[:, ::-1]
    names = [f"t{j}" for j in range(types)]
    problem = make_problem(names, [per_type] * types, speed, scale_factor=scale)
    if nodes:
        count = per_type // 4
        cluster = replace(problem.cluster,
                          node_names=tuple(f"n{k}" for k in range(count * types)),
                          node_type=np.repeat(np.arange(types), count),
                          node_devices=np.full(count * types, 4))
        problem = replace(problem, cluster=cluster)
    jobs = replace(problem.jobs, tenant=tuple(f"u{u}" for u in owner))
    tenants = tuple(Tenant(f"u{u}", float(tickets[u])) for u in range(U))
    return (replace(problem, jobs=jobs, tenants=tenants, round_duration_s=60.0),
            np.array(owner), tickets)


def gandiva_fair(problem: Problem, **params: Any) -> Plan:
    return solve(problem, PolicyRequest("gandiva_fair", GandivaFairParameters(**params)))


@given(st.integers(0, 10_000), st.sampled_from([0, 1]))
def test_every_backlogged_user_gets_its_ticket_share(seed: int, nodes: int) -> None:
    problem, owner, tickets = users_problem(seed, nodes=nodes)
    Q = 100
    plan = gandiva_fair(problem, quanta=Q, trading=TradingMode.NONE)
    s = problem.jobs.scale_factor
    got = np.bincount(owner, weights=s * plan.time_share[:, 0] * Q, minlength=tickets.size)
    ideal = Q * problem.cluster.count.sum() * tickets / tickets.sum()
    assert np.all(np.abs(got - ideal) <= 4 * s.max()), (got, ideal)


@given(st.floats(0.0, 50.0),
       st.lists(st.tuples(st.floats(0.1, 10.0), st.floats(0.0, 20.0)), min_size=1, max_size=8))
def test_water_filling_fixed_point(capacity: float, claims: list[tuple[float, float]]) -> None:
    weights = np.array([w for w, _ in claims])
    caps = np.array([d for _, d in claims])
    a = water_fill(capacity, weights, caps)
    assert np.all(a >= -1e-12) and np.all(a <= caps + 1e-9)
    assert math.isclose(a.sum(), min(capacity, caps.sum()), rel_tol=1e-9, abs_tol=1e-9)
    below = a < caps - 1e-9  # not capped: they share one level per weight
    if below.any():
        level = a[below] / weights[below]
        assert np.allclose(level, level[0], rtol=1e-9)
        # a capped user wanted no more than that level
        assert np.all(caps[~below] <= level[0] * weights[~below] * (1 + 1e-9) + 1e-9)


def test_a_user_below_its_share_gets_its_demand_and_the_rest_is_split_by_tickets() -> None:
    problem = make_problem(["g"], [12], np.ones((5, 1)), scale_factor=[1, 4, 4, 4, 4])
    jobs = replace(problem.jobs, tenant=("small", "big", "big", "other", "other"))
    problem = replace(problem, jobs=jobs,
                      tenants=(Tenant("small", 4.0), Tenant("big", 2.0), Tenant("other", 1.0)))
    plan = gandiva_fair(problem, quanta=30)
    assert plan.stride is not None
    share = {user.user: float(user.fair_share.sum()) for user in plan.stride.users}
    assert math.isclose(share["small"], 1.0)  # demand 1 < its 4/7 of 12
    assert math.isclose(share["big"], 11.0 * 2 / 3) and math.isclose(share["other"], 11.0 / 3)


def free_after(problem: Problem, grants: list[Any]) -> dict[int, int]:
    """Free devices per node index after a round's grants."""
    cluster = problem.cluster
    free = {k: int(cluster.node_devices[k]) for k in range(len(cluster.node_names))}
    index = {name: k for k, name in enumerate(cluster.node_names)}
    for grant in grants:
        share = grant.devices // len(grant.nodes)
        for name in grant.nodes:
            free[index[name]] -= share
    return free


@given(st.integers(0, 10_000), st.integers(1, 2), st.floats(0.3, 3.0))
def test_every_quantum_is_gang_scheduled_and_work_conserving(
    seed: int, types: int, backlog: float
) -> None:
    problem, _, _ = users_problem(seed, types=types, nodes=1, backlog=backlog)
    plan = gandiva_fair(problem, quanta=10)
    s = problem.jobs.scale_factor
    cluster = problem.cluster
    for scheduled in plan.shares.rounds:
        grants = list(scheduled.grants)
        jobs = [g.job for g in grants]
        assert len(jobs) == len(set(jobs))
        for grant in grants:
            assert grant.devices == s[grant.job]
            assert problem.usable[grant.job, grant.type_index]
            if s[grant.job] <= 4:  # fits in one node: one node
                assert len(grant.nodes) == 1
        free = free_after(problem, grants)
        assert all(value >= 0 for value in free.values())
        running = set(jobs)
        for j in range(cluster.num_types):
            on = [k for k in free if cluster.node_type[k] == j]
            largest = max((free[k] for k in on), default=0)
            for i in range(problem.jobs.num_jobs):
                if i not in running and problem.usable[i, j]:
                    assert s[i] > largest, (scheduled.index, i, j)  # no idle room it fits


@st.composite
def share_markets(draw: st.DrawFn, types: int = 2) -> tuple[Array, Array, Array, Array]:
    U = draw(st.integers(2, 6))
    slow = np.ones(U)
    fast = np.array(draw(st.lists(st.floats(1.0, 5.0), min_size=U, max_size=U)))
    rate = np.column_stack([fast, slow])[:, :types]
    W = np.array(draw(st.lists(st.integers(2, 10), min_size=types, max_size=types)), float)
    tickets = np.array(draw(st.lists(st.floats(0.5, 4.0), min_size=U, max_size=U)))
    share = np.outer(tickets / tickets.sum(), W)
    demand = np.full(U, W.sum() * 10)  # backlogged
    return share, rate, demand, W


@given(share_markets(), st.floats(0.05, 0.95))
def test_every_trade_is_individually_rational(market: tuple[Array, Array, Array, Array],
                                              theta: float) -> None:
    share, rate, demand, _ = market
    result = greedy_trades(share, rate, demand, theta)
    A = share.copy()
    for trade in result.trades:
        before = np.einsum("uj,uj->u", rate, A)
        A[trade.seller, trade.fast_type] -= trade.fast_devices
        A[trade.buyer, trade.fast_type] += trade.fast_devices
        A[trade.buyer, trade.slow_type] -= trade.price * trade.fast_devices
        A[trade.seller, trade.slow_type] += trade.price * trade.fast_devices
        after = np.einsum("uj,uj->u", rate, A)
        assert after[trade.buyer] > before[trade.buyer]
        assert after[trade.seller] > before[trade.seller]
        assert np.all(A >= -1e-9)
    pre = np.einsum("uj,uj->u", rate, share)  # the ticket-proportional throughput
    assert np.all(result.throughput >= pre - 1e-9)
    assert np.allclose(A, result.share, atol=1e-8)
    assert np.allclose(result.share.sum(axis=0), share.sum(axis=0))


def cvxpy_trading(share: Array, rate: Array, demand: Array, W: Array) -> float:
    """The trading LP in cvxpy (a second formulation)."""
    Y = cp.Variable(share.shape, nonneg=True)
    thr = cp.sum(cp.multiply(rate, Y), axis=1)
    pre = np.sum(rate * share, axis=1)
    constraints = [thr >= pre, cp.sum(Y, axis=0) <= W, cp.sum(Y, axis=1) <= demand]
    return float(cp.Problem(cp.Maximize(cp.sum(thr)), constraints).solve(solver=cp.CLARABEL))


@given(share_markets())
def test_greedy_trades_reach_the_fixed_point_and_the_lp_bounds_them(
    market: tuple[Array, Array, Array, Array],
) -> None:
    share, rate, demand, W = market
    result = greedy_trades(share, rate, demand)
    A = result.share
    sigma = speedups(rate, 0, 1)
    for u in range(sigma.size):
        for v in range(sigma.size):
            if u != v and sigma[u] > sigma[v] * (1 + 1e-9):
                # u would buy fast share with its slow share from v: one side must be empty
                assert A[u, 1] <= 1e-9 or A[v, 0] <= 1e-9
    exact = exact_trading(share, rate, demand, W)
    assert exact.status.solved
    assert exact.bound >= exact.objective - 1e-9
    assert math.isclose(exact.objective, cvxpy_trading(share, rate, demand, W), rel_tol=1e-6)
    assert result.throughput.sum() <= exact.bound + 1e-9  # the gap is reported, not asserted


def test_the_policy_reports_the_gap_and_exact_trading_is_optimal() -> None:
    problem, _, _ = users_problem(7, types=2)
    greedy = gandiva_fair(problem)
    assert greedy.certificate.termination is Termination.HEURISTIC
    assert greedy.certificate.gap is not None and greedy.certificate.gap >= 0
    exact = gandiva_fair(problem, trading=TradingMode.EXACT)
    assert exact.certificate.termination is Termination.OPTIMAL
    assert greedy.certificate.objective is not None and exact.certificate.objective is not None
    assert greedy.certificate.objective <= exact.certificate.objective + 1e-9
    assert exact.stride is not None
    for user in exact.stride.users:
        assert user.throughput_after >= user.throughput_before * (1 - 1e-7)


def test_the_stride_state_carries_across_calls() -> None:
    problem, _, _ = users_problem(11)
    Q = 7
    once = gandiva_fair(problem, quanta=2 * Q)
    first = gandiva_fair(problem, quanta=Q)
    assert first.stride is not None
    carried = replace(problem, fairness=replace(FairnessInputs.empty(problem.jobs.num_jobs),
                                                stride_pass=first.stride.stride_pass))
    second = gandiva_fair(carried, quanta=Q)
    assert np.allclose((first.time_share + second.time_share) / 2, once.time_share)
    fresh = gandiva_fair(problem, quanta=Q)  # without the passes the same quanta come again
    assert np.allclose(fresh.time_share, first.time_share)


def test_equal_split_is_shockwaves_baseline() -> None:
    T = np.array([[1.0, 2.0], [3.0, 0.0], [1.0, 1.0]])
    problem = make_problem(["a", "b"], [2, 3], T, scale_factor=[2, 1, 1])
    literal = equal_split(problem, Compat.SHOCKWAVE)
    expected = np.array([[2 / 3, 1.0], [2 / 3, 1.0], [2 / 3, 1.0]])
    expected /= np.maximum(1.0, expected.sum(axis=1, keepdims=True))
    assert np.allclose(literal, expected)
    plan = solve(problem, PolicyRequest("gandiva_fair",
                                        GandivaFairParameters(static_equal_split=True)))
    X = plan.time_share
    assert X[1, 1] == 0.0  # job 1 cannot run on b
    assert np.all(problem.jobs.scale_factor @ X <= problem.cluster.count + 1e-9)
    assert plan.certificate.termination is Termination.HEURISTIC


# --------------------------------------------------------------------------------------------
# the wire


def request(**policy: Any) -> dict[str, Any]:
    return {
        "snapshot": {
            "round_duration_s": 60,
            "cluster": {"accelerator_types": [{"name": "v100", "count": 2},
                                              {"name": "k80", "count": 2}]},
            "tenants": [{"name": "a", "weight": 2}, {"name": "b"}],
            "jobs": [
                {"id": "j1", "tenant": "a", "throughput": {"v100": 4, "k80": 1}},
                {"id": "j2", "tenant": "b", "throughput": {"v100": 3, "k80": 2}},
                {"id": "j3", "tenant": "b", "throughput": {"v100": 3, "k80": 2}},
            ],
            "history": {"jobs": [{"job_id": "j1", "stride_pass": 1.5}]},
        },
        "policy": {"name": "gandiva_fair", **policy},
    }


def parse(data: dict[str, Any]) -> service_pb.SolveRequest:
    return json_format.ParseDict(data, service_pb.SolveRequest())


def test_a_request_end_to_end() -> None:
    data = request(gandiva_fair={"quanta": 5})
    data["options"] = {"schedule_rounds": 3}  # the stride quanta are kept, not replaced
    response = solve_request(parse(data))
    assert response.stats.termination == service_pb.TERMINATION_REASON_HEURISTIC
    assert response.stats.HasField("best_bound")
    assert len(response.plan.rounds) == 5
    assert {share.user for share in response.plan.user_shares} == {"a", "b"}
    assert all(entry.HasField("stride_pass") for entry in response.plan.jobs)
    alias = request()
    alias["policy"] = {"name": "gandiva_fair_equal_split"}
    alias["options"] = {"schedule_rounds": 3}  # Gavel's round mechanism on the split
    response = solve_request(parse(alias))
    assert len(response.plan.rounds) == 3
    # 2/3 of each type per job, capped to a row of 1
    assert all(math.isclose(v, 0.5) for e in response.plan.jobs for v in e.time_share.values())


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d["snapshot"]["tenants"][0].update(weight=-2), "snapshot.tenants[0].weight"),
        (lambda d: d["snapshot"]["jobs"][1].update(tenant="c"), "snapshot.jobs[1].tenant"),
        (lambda d: d["policy"].update(gandiva_fair={"quanta": 0}), "policy.gandiva_fair.quanta"),
        (lambda d: d["policy"].update(gandiva_fair={"quanta": 5000}),
         "policy.gandiva_fair.quanta"),
        (lambda d: d["policy"].update(gandiva_fair={"trade_price": 1.0}),
         "policy.gandiva_fair.trade_price"),
        (lambda d: d["policy"].update(gandiva_fair={"trading": 9}),
         "policy.gandiva_fair.trading"),
        (lambda d: d["snapshot"]["history"]["jobs"][0].update(stride_pass="NaN"),
         "snapshot.history.jobs[0].stride_pass"),
    ],
)
def test_bad_inputs_are_field_errors(mutate: Any, field: str) -> None:
    data = request()
    mutate(data)
    with pytest.raises(ValidationError) as info:
        request_to_model(parse(data))
    assert field in {v.field for v in info.value.violations}
