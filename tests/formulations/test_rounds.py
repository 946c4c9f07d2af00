"""Property tests for the round mechanism (formulations.md A2.11): per-round feasibility,
node limits and consolidation, the fresh-job rule, and tracking (the realized shares converge
to X).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from apportion.formulations.rounds import round_schedule
from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.model import Cluster, PolicyRequest, Problem, SolveOptions, make_problem
from apportion.solver.parameters import MaxSumThroughputParameters
from apportion.solver.result import ScheduledRound
from apportion.solver.solve import solve
from apportion.v1 import allocation_service_pb2 as service_pb

Array = NDArray[np.float64]


def with_nodes(prob: Problem, per_node: list[list[int]]) -> Problem:
    """per_node[j] = device counts of type j's nodes (summing to its count)."""
    names, types, devices = [], [], []
    for j, sizes in enumerate(per_node):
        for k, d in enumerate(sizes):
            names.append(f"n{j}_{k}")
            types.append(j)
            devices.append(d)
    cluster: Cluster = replace(
        prob.cluster,
        node_names=tuple(names),
        node_type=np.array(types, np.int64),
        node_devices=np.array(devices, np.int64),
    )
    return replace(prob, cluster=cluster)


@st.composite
def noded_problems(draw: st.DrawFn) -> tuple[Problem, Array]:
    n = draw(st.integers(1, 3))
    per_node = [
        [draw(st.sampled_from([1, 2, 4, 8])) for _ in range(draw(st.integers(1, 3)))]
        for _ in range(n)
    ]
    count = [sum(p) for p in per_node]
    m = draw(st.integers(1, 10))
    s = [min(draw(st.sampled_from([1, 1, 2, 4, 8])), max(count)) for _ in range(m)]
    T = np.array(
        [[draw(st.sampled_from([0.0, 1.0, 2.0, 5.0])) for _ in range(n)] for _ in range(m)]
    )
    for i in range(m):
        fits = [j for j in range(n) if count[j] >= s[i]]
        if not any(T[i, j] > 0 for j in fits):
            T[i, fits[0]] = 1.0
    prob = with_nodes(make_problem([f"t{j}" for j in range(n)], count, T, scale_factor=s), per_node)
    plan = solve(prob, PolicyRequest("max_sum_throughput", MaxSumThroughputParameters()))
    return prob, plan.time_share


def check_rounds(prob: Problem, X: Array, rounds: tuple[ScheduledRound, ...]) -> None:
    W = prob.cluster.count
    node_index = {name: k for k, name in enumerate(prob.cluster.node_names)}
    for r in rounds:
        used = np.zeros_like(W)
        node_used = np.zeros(len(node_index), np.int64)
        seen = set()
        for g in r.grants:
            assert g.job not in seen  # a job runs at most once per round
            seen.add(g.job)
            assert g.devices == prob.jobs.scale_factor[g.job]
            assert X[g.job, g.type_index] > 0  # X = 0 is never granted
            used[g.type_index] += g.devices
            # consolidation: as few nodes as the node sizes allow
            sizes = sorted(
                (
                    prob.cluster.node_devices[k]
                    for k in range(len(node_index))
                    if prob.cluster.node_type[k] == g.type_index
                ),
                reverse=True,
            )
            if not sizes:  # no node layout given
                assert g.nodes == ()
                continue
            fewest = next(k + 1 for k in range(len(sizes)) if sum(sizes[: k + 1]) >= g.devices)
            assert len(g.nodes) >= fewest
            for name in g.nodes:
                k = node_index[name]
                assert prob.cluster.node_type[k] == g.type_index
                node_used[k] += 1
        assert np.all(used <= W)
        # per node: devices taken never exceed the node's devices
        take = np.zeros(len(node_index), np.int64)
        for g in r.grants:
            if len(g.nodes) == 1:
                take[node_index[g.nodes[0]]] += g.devices
        assert np.all(take <= prob.cluster.node_devices)


@given(noded_problems())
def test_rounds_are_feasible_and_consolidated(case: tuple[Problem, Array]) -> None:
    prob, X = case
    rounds = round_schedule(prob, X, 6)
    assert [r.index for r in rounds] == list(range(6))
    check_rounds(prob, X, rounds)


def test_single_node_jobs_stay_on_one_node() -> None:
    """gpus_per_node a multiple of every s: no job of size <= node spans two nodes (A2.11 4)."""
    prob = make_problem(["a"], [16], [[1.0]] * 6, scale_factor=[4, 2, 2, 4, 1, 1])
    prob = with_nodes(prob, [[8, 8]])
    X = np.full((6, 1), 14 / 16 * 16 / 14)  # every job wants the whole time; 14 <= 16 devices
    X = np.minimum(X, 1.0)
    for r in round_schedule(prob, X, 3):
        assert all(len(g.nodes) == 1 for g in r.grants)
        assert sum(g.devices for g in r.grants) == 14


def test_fresh_job_goes_first() -> None:
    """After a reset, a job with X > 0 and no received time on a type beats one with time."""
    prob = make_problem(["a"], [1], [[1.0], [1.0]])
    prob = replace(
        prob,
        history=replace(
            prob.history, received_time_s=np.array([[0.0], [720.0]]), elapsed_since_reset_s=720.0
        ),
    )
    X = np.array([[0.5], [0.5]])
    first = round_schedule(prob, X, 1)[0]
    assert [g.job for g in first.grants] == [0]


@given(st.integers(2, 8), st.integers(1, 3), st.integers(0, 10_000))
def test_shares_converge_to_x(m: int, n: int, seed: int) -> None:
    """s = 1, sum_i X[i,j] = W[j], no arrivals: after 100 rounds the realized fraction of
    rounds job i ran on j is within 0.05 of X[i,j] (A2.11 3)."""
    rng = np.random.default_rng(seed)
    W = rng.integers(1, 3, n)
    if W.sum() > m:
        W = np.ones(n, np.int64)
        m = max(m, n)
    X = rng.uniform(0.1, 1.0, (m, n))
    for _ in range(500):  # Sinkhorn: columns sum to W, rows to W.sum()/m <= 1
        X *= (W / X.sum(axis=0))[None, :]
        X *= (W.sum() / m / X.sum(axis=1))[:, None]
    X *= (W / X.sum(axis=0))[None, :]
    prob = make_problem([f"t{j}" for j in range(n)], W, np.ones((m, n)))
    rounds = round_schedule(prob, X, 100)
    ran = np.zeros((m, n))
    for r in rounds:
        for g in r.grants:
            ran[g.job, g.type_index] += 1
    error = np.abs(ran / 100 - X).max()
    assert error <= 0.05, (error, X, ran / 100)


def test_rounds_in_the_response() -> None:
    req = service_pb.SolveRequest()
    snap = req.snapshot
    snap.cluster.accelerator_types.add(name="v100", count=4)
    snap.cluster.nodes.add(name="a", accelerator_type="v100", devices=2)
    snap.cluster.nodes.add(name="b", accelerator_type="v100", devices=2)
    for k, s in enumerate([2, 1, 1, 2]):
        job = snap.jobs.add(id=f"j{k}", scale_factor=s)
        job.throughput["v100"] = 1.0 + k
    req.policy.name = "max_min_fairness_perf"
    req.options.schedule_rounds = 4
    response = solve_request(req)
    assert [r.index for r in response.plan.rounds] == [0, 1, 2, 3]
    prob, _, _ = request_to_model(req)
    shares = {j.job_id: j.time_share.get("v100", 0.0) for j in response.plan.jobs}
    for r in response.plan.rounds:
        assert sum(g.devices for g in r.grants) <= 4
        for g in r.grants:
            assert shares[g.job_id] > 0 and g.accelerator_type == "v100"
            assert len(g.nodes) == 1  # 2-GPU jobs fit on one 2-GPU node
    # no rounds unless asked
    req.options.schedule_rounds = 0
    assert not solve_request(req).plan.rounds
    assert prob.jobs.num_jobs == 4


@pytest.mark.parametrize("policy", ["min_total_duration_perf", "finish_time_fairness_perf"])
def test_every_lp_policy_schedules(policy: str) -> None:
    prob = make_problem(["a", "b"], [2, 1], [[1.0, 2.0], [2.0, 1.0], [1.0, 1.0]])
    prob = replace(prob, jobs=replace(prob.jobs, total_steps=np.array([100.0, 200.0, 50.0])))
    from apportion.solver.registry import lookup, resolve_parameters

    spec = lookup(policy)
    plan = solve(
        prob,
        PolicyRequest(spec.name, resolve_parameters(spec, policy, None)),
        SolveOptions(schedule_rounds=5),
    )
    assert len(plan.rounds) == 5
    check_rounds(prob, plan.time_share, plan.rounds)
