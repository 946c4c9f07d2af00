"""Property tests for the round mechanism (A2.11, docs/policies/gavel.md): per-round feasibility,
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

from apportion.formulations.rounds import combinations, round_schedule
from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.model import Cluster, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import MaxSumThroughputParameters
from apportion.solver.result import ScheduledRound
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem
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
    assert len(plan.shares.rounds) == 5
    check_rounds(prob, plan.time_share, plan.shares.rounds)


# --- space sharing: combinations (singles and pairs), A2.11, docs/policies/gavel.md ---

Colocated = tuple[tuple[int, int, int, float], ...]


def reference_single_rounds(
    prob: Problem, X: Array, rounds: int
) -> list[list[tuple[int, int, int, tuple[str, ...]]]]:
    """A copy of the single-job mechanism before pairs existed (A2.11 with c = jobs only),
    with lease extension (a job granted the type it ran on in the previous round keeps those
    nodes when they have room; such jobs are placed first; no history placement here): per
    round, the grants as (type, job, devices, nodes)."""
    m, n = X.shape
    delta = prob.round_duration_s or 360.0
    T, W = prob.jobs.throughput, prob.cluster.count.astype(np.int64)
    s = prob.jobs.scale_factor.astype(np.int64)
    received = prob.history.received_time_s
    if received.shape != (m, n):
        received = np.zeros((m, n))
    job_time = received + delta / 2.0
    deficit = X * prob.history.elapsed_since_reset_s - received
    eligible = (X > 0) & (T > 0) & (s[:, None] <= W[None, :])
    order = np.argsort(-T.sum(axis=0), kind="stable")
    cluster = prob.cluster
    out = []
    last: dict[int, tuple[int, tuple[str, ...]]] = {}
    for _ in range(rounds):
        worker_time = job_time.sum(axis=0)
        fraction = np.divide(
            job_time, worker_time[None, :], out=np.zeros((m, n)), where=worker_time > 0
        )
        priority = np.where(fraction > 0, X / np.where(fraction > 0, fraction, 1.0), X * 1e9)
        priority = np.where(eligible, priority, 0.0)
        remaining, scheduled = W.copy(), np.zeros(m, bool)
        granted: dict[int, list[int]] = {}
        for j in order:
            cand = np.flatnonzero(eligible[:, j])
            for i in cand[np.lexsort((-X[cand, j], -deficit[cand, j], -priority[cand, j]))]:
                if remaining[j] == 0:
                    break
                if scheduled[i] or s[i] > remaining[j]:
                    continue
                remaining[j] -= s[i]
                scheduled[i] = True
                granted.setdefault(int(j), []).append(int(i))
        grants = []
        for j, jobs in granted.items():
            nodes_j = (
            np.flatnonzero(cluster.node_type == j) if cluster.node_names else np.zeros(0, int)
        )
            free = {int(k): int(cluster.node_devices[k]) for k in nodes_j}
            placed: dict[int, tuple[str, ...]] = {}
            index = {name: k for k, name in enumerate(cluster.node_names)}
            for i in sorted(jobs, key=lambda i: (-int(s[i]), i)):
                before = last.get(i)
                if before is None or before[0] != j or not before[1]:
                    continue
                ks = [index[name] for name in before[1]]
                if sum(free[k] for k in ks) >= s[i]:
                    left = int(s[i])
                    for k in ks:
                        use = min(free[k], left)
                        free[k] -= use
                        left -= use
                    placed[i] = before[1]
            for i in sorted(jobs, key=lambda i: (-int(s[i]), i)):
                need = int(s[i])
                if i in placed:
                    continue
                if not free:
                    placed[i] = ()
                    continue
                whole = [k for k in free if free[k] >= need]
                if whole:
                    k = min(whole, key=lambda k: (free[k], k))
                    free[k] -= need
                    placed[i] = (cluster.node_names[k],)
                    continue
                taken = []
                for k in sorted(free, key=lambda k: (-free[k], k)):
                    if need == 0:
                        break
                    use = min(free[k], need)
                    if use:
                        free[k] -= use
                        need -= use
                        taken.append(cluster.node_names[k])
                placed[i] = tuple(taken)
            for i in jobs:
                grants.append((j, i, int(s[i]), placed[i]))
                job_time[i, j] += delta
        last = {i: (j, nodes) for j, i, _, nodes in grants}
        out.append(sorted(grants))
    return out


def with_history(prob: Problem, received: Array, elapsed: float, delta: float) -> Problem:
    return replace(
        prob,
        round_duration_s=delta,
        history=replace(
            prob.history, received_time_s=received, elapsed_since_reset_s=elapsed
        ),
    )


@given(noded_problems(), st.integers(0, 10_000), st.sampled_from([0.0, 60.0, 360.0]))
def test_no_pairs_is_the_single_job_mechanism(
    case: tuple[Problem, Array], seed: int, delta: float
) -> None:
    """Without pairs (none, or only zero shares) the output is exactly the old mechanism's,
    with or without history."""
    prob, X = case
    rng = np.random.default_rng(seed)
    if seed % 2:
        received = rng.choice([0.0, 180.0, 360.0, 1000.0], X.shape)
        prob = with_history(prob, received, float(rng.uniform(0, 3600)), delta)
    expected = reference_single_rounds(prob, X, 8)
    zero_pairs: Colocated = ((0, 0, 0, 0.5), (0, 1, 0, 0.0)) if X.shape[0] > 1 else ()
    for colocated in ((), zero_pairs):
        rounds = round_schedule(prob, X, 8, colocated)
        got = [
            sorted((g.type_index, g.job, g.devices, g.nodes) for g in r.grants) for r in rounds
        ]
        assert got == expected
        assert all(g.colocated_with == -1 for r in rounds for g in r.grants)


@st.composite
def paired_plans(draw: st.DrawFn) -> tuple[Problem, Array, Colocated]:
    """A noded problem, random pairs among jobs of equal scale factor (a job may be in
    several pairs, on several types), random shares, random history."""
    prob, X = draw(noded_problems())
    m, n = X.shape
    s = prob.jobs.scale_factor
    rng = np.random.default_rng(draw(st.integers(0, 10_000)))
    candidates = [(a, b) for a in range(m) for b in range(a + 1, m) if s[a] == s[b]]
    colocated: list[tuple[int, int, int, float]] = []
    X = X.copy()
    if candidates:
        k = draw(st.integers(1, min(4, len(candidates))))
        for idx in rng.choice(len(candidates), k, replace=False):
            a, b = candidates[idx]
            if rng.random() < 0.5:
                a, b = b, a
            for j in range(n):
                if rng.random() < 0.6 and s[a] <= prob.cluster.count[j]:
                    share = float(rng.choice([0.1, 0.25, 0.5]))
                    colocated.append((int(a), int(b), j, share))
                    X[a, j] += share
                    X[b, j] += share
    if draw(st.booleans()):
        received = rng.choice([0.0, 180.0, 720.0], X.shape)
        prob = with_history(prob, received, 1800.0, 360.0)
    return prob, X, tuple(colocated)


def pair_shares(X: Array, colocated: Colocated) -> tuple[Array, dict[tuple[int, int], Array]]:
    """The combinations' shares: singles (X minus pair shares) and pairs (unordered key)."""
    single = X.copy()
    pairs: dict[tuple[int, int], Array] = {}
    for a, b, j, share in colocated:
        pairs.setdefault((min(a, b), max(a, b)), np.zeros(X.shape[1]))[j] += share
        single[a, j] -= share
        single[b, j] -= share
    return single, pairs


def check_pair_rounds(
    prob: Problem, X: Array, colocated: Colocated, rounds: tuple[ScheduledRound, ...]
) -> None:
    """Per-round feasibility with pairs: devices per type <= W with a pair counted once, a
    pair holds s GPUs once, both members have identical type, devices and nodes and name each
    other, no job twice, no combination granted where its share is 0, nodes never over-full."""
    W = prob.cluster.count
    s = prob.jobs.scale_factor
    single, pairs = pair_shares(X, colocated)
    node_index = {name: k for k, name in enumerate(prob.cluster.node_names)}
    for r in rounds:
        by_job = {}
        for g in r.grants:
            assert g.job not in by_job  # a job runs in at most one combination per round
            by_job[g.job] = g
        used = np.zeros_like(W)
        take = np.zeros(len(node_index), np.int64)
        for g in r.grants:
            if g.colocated_with >= 0:
                partner = by_job[g.colocated_with]
                assert partner.colocated_with == g.job
                assert (partner.type_index, partner.devices, partner.nodes) == (
                    g.type_index,
                    g.devices,
                    g.nodes,
                )
                assert g.devices == s[g.job] == s[partner.job]
                key = (min(g.job, partner.job), max(g.job, partner.job))
                assert pairs[key][g.type_index] > 0  # a pair only where its share > 0
                if g.job > partner.job:
                    continue  # the pair holds its devices once
            else:
                assert g.devices == s[g.job]
                assert single[g.job, g.type_index] > 1e-9  # alone only where that share > 0
            used[g.type_index] += g.devices
            for name in g.nodes:
                assert prob.cluster.node_type[node_index[name]] == g.type_index
            if len(g.nodes) == 1:
                take[node_index[g.nodes[0]]] += g.devices
        assert np.all(used <= W)
        assert np.all(take <= prob.cluster.node_devices)


@given(paired_plans())
def test_rounds_with_pairs_are_feasible(case: tuple[Problem, Array, Colocated]) -> None:
    prob, X, colocated = case
    rounds = round_schedule(prob, X, 6, colocated)
    assert [r.index for r in rounds] == list(range(6))
    check_pair_rounds(prob, X, colocated, rounds)


def test_pair_with_unequal_scale_factors_is_never_granted() -> None:
    """A2.11: skip a pair whose scale factors differ (its members may still run alone)."""
    prob = make_problem(["a"], [4], [[1.0], [1.0]], scale_factor=[1, 2])
    X = np.array([[1.0], [1.0]])
    rounds = round_schedule(prob, X, 5, ((0, 1, 0, 0.5),))
    assert all(g.colocated_with == -1 for r in rounds for g in r.grants)


@st.composite
def realizable_pair_plans(
    draw: st.DrawFn,
) -> tuple[Problem, Array, Colocated, Array, list[tuple[int, ...]]]:
    """One type, s = 1: a plan that is a convex combination of K full rounds (every device
    busy; each job in at most one combination per round) over singles and disjoint pairs, so
    it can be tracked. Returns the problem, X, the colocations, the combination shares Y
    (singles 0..m-1, then pairs) and the combinations' members."""
    rng = np.random.default_rng(draw(st.integers(0, 10_000)))
    W = int(rng.integers(1, 4))
    m = int(rng.integers(max(2, W), 9))
    perm = rng.permutation(m)
    pairs = [(int(perm[2 * k]), int(perm[2 * k + 1])) for k in range(rng.integers(1, m // 2 + 1))]
    members: list[tuple[int, ...]] = [(i,) for i in range(m)] + list(pairs)
    weights = rng.dirichlet(np.ones(int(rng.integers(2, 6))))
    Y = np.zeros((len(members), 1))
    for weight in weights:
        while True:  # a random full round: W disjoint combinations
            busy: set[int] = set()
            picks: list[int] = []
            for _ in range(W):
                free = [c for c, mem in enumerate(members) if not busy & set(mem)]
                if not free:
                    break
                c = int(rng.choice(free))
                busy |= set(members[c])
                picks.append(c)
            if len(picks) == W:
                break
        Y[picks, 0] += weight
    X = Y[:m].copy()
    colocated = []
    for k, (a, b) in enumerate(pairs):
        X[[a, b], 0] += Y[m + k, 0]
        if Y[m + k, 0] > 0:
            colocated.append((a, b, 0, float(Y[m + k, 0])))
    prob = make_problem(["t0"], [W], np.ones((m, 1)))
    return prob, X, tuple(colocated), Y, members


@given(realizable_pair_plans())
def test_pair_shares_converge(
    case: tuple[Problem, Array, Colocated, Array, list[tuple[int, ...]]],
) -> None:
    """s = 1, a fixed plan with pairs that fills the devices: after 100 rounds the realized
    fraction of rounds each combination (single or pair) runs is within 0.05 of its share
    (A2.11 3 with combinations). One type: with several types and jobs whose time budget is
    full, the greedy's fixed type order can miss by more even without pairs."""
    prob, X, colocated, Y, members = case
    rounds = round_schedule(prob, X, 100, colocated)
    check_pair_rounds(prob, X, colocated, rounds)
    index = {mem: c for c, mem in enumerate(members)}
    ran = np.zeros_like(Y)
    for r in rounds:
        for g in r.grants:
            if g.colocated_with < 0:
                ran[g.job, g.type_index] += 1
            elif (g.job, g.colocated_with) in index:  # count each pair once
                ran[index[(g.job, g.colocated_with)], g.type_index] += 1
    error = np.abs(ran / 100 - Y).max()
    assert error <= 0.05, (error, Y, ran / 100)


def test_pair_without_history_is_a_fresh_combination() -> None:
    """No history: every combination starts at the pseudo-count delta/2, so priorities follow
    X; on one device, shares 0.25 / 0.25 / 0.5 (pair) are met exactly in 4 rounds."""
    prob = make_problem(["a"], [1], [[1.0], [1.0]])
    X = np.array([[0.75], [0.75]])  # alone 0.25 each, together 0.5
    rounds = round_schedule(prob, X, 4, ((0, 1, 0, 0.5),))
    ran = [[(g.job, g.colocated_with) for g in r.grants] for r in rounds]
    assert ran == [[(0, 1), (1, 0)], [(0, -1)], [(1, -1)], [(0, 1), (1, 0)]]


def test_history_is_split_over_combinations() -> None:
    """The design choice for pairs (module docstring): a paired job's received time is split
    over its single and its pairs in proportion to their shares; a pair gets the mean of its
    members' parts; unpaired jobs keep theirs."""
    prob = make_problem(["a", "b"], [2, 2], [[1.0, 1.0]] * 3)
    received = np.array([[600.0, 100.0], [300.0, 0.0], [50.0, 70.0]])
    prob = with_history(prob, received, 3600.0, 360.0)
    X = np.array([[0.6, 0.2], [0.4, 0.0], [0.3, 0.3]])
    comb = combinations(prob, X, ((1, 0, 0, 0.2), (0, 1, 0, 0.1)))  # one pair, 0.3 on "a"
    assert comb.members == ((0,), (1,), (2,), (1, 0))
    np.testing.assert_allclose(comb.X, [[0.3, 0.2], [0.1, 0.0], [0.3, 0.3], [0.3, 0.0]])
    np.testing.assert_allclose(
        comb.received,
        [[300.0, 100.0], [75.0, 0.0], [50.0, 70.0], [0.5 * (300.0 + 225.0), 0.0]],
    )
    assert comb.eligible.tolist() == [[True, True], [True, False], [True, True], [True, False]]


def packed_instance() -> Problem:
    """Five 1-GPU jobs on 2 v100 (one per node) and 1 k80; two beneficial pairs (together
    each job keeps 80% of its throughput alone)."""
    from apportion.solver.model import Colocations

    prob = make_problem(["v100", "k80"], [2, 1], [[2.0, 1.0]] * 4 + [[1.0, 1.0]])
    prob = with_nodes(prob, [[1, 1], [1]])
    coloc = Colocations(
        job_a=np.array([0, 2], np.int64),
        job_b=np.array([1, 3], np.int64),
        throughput_a=np.array([[1.6, 0.8], [1.6, 0.8]]),
        throughput_b=np.array([[1.6, 0.8], [1.6, 0.8]]),
    )
    return replace(prob, colocations=coloc)


def test_space_sharing_plan_gets_pair_grants() -> None:
    """End to end: max-min fairness with space sharing (`max_min_fairness_packed`) with
    schedule_rounds > 0 schedules the pairs of its plan on shared devices."""
    from apportion.solver.parameters import MaxMinFairnessParameters

    prob = packed_instance()
    plan = solve(
        prob,
        PolicyRequest("weighted_max_min_fairness", MaxMinFairnessParameters(space_sharing=True)),
        SolveOptions(schedule_rounds=30),
    )
    assert plan.shares.colocated and len(plan.shares.rounds) == 30
    check_pair_rounds(prob, plan.time_share, plan.shares.colocated, plan.shares.rounds)
    pair_grants = [g for r in plan.shares.rounds for g in r.grants if g.colocated_with >= 0]
    assert pair_grants
    _, pairs = pair_shares(plan.time_share, plan.shares.colocated)
    for g in pair_grants:
        assert (min(g.job, g.colocated_with), max(g.job, g.colocated_with)) in pairs
        assert len(g.nodes) == 1


def test_pair_grants_in_the_response() -> None:
    """Through the wire: each job of a granted pair has its own RoundGrant with identical
    type, devices and nodes, and `colocated_with` names the partner (empty when alone)."""
    from google.protobuf import json_format

    doc: dict[str, object] = {
        "snapshot": {
            "cluster": {
                "acceleratorTypes": [{"name": "v100", "count": 2}],
                "nodes": [
                    {"name": "n0", "acceleratorType": "v100", "devices": 1},
                    {"name": "n1", "acceleratorType": "v100", "devices": 1},
                ],
            },
            "jobs": [{"id": name, "throughput": {"v100": 2.0}} for name in "abcd"],
            "colocations": [
                {"jobA": "a", "jobB": "b", "throughputA": {"v100": 1.6},
                 "throughputB": {"v100": 1.6}},
                {"jobA": "c", "jobB": "d", "throughputA": {"v100": 1.6},
                 "throughputB": {"v100": 1.6}},
            ],
        },
        "policy": {"name": "max_min_fairness_packed"},
        "options": {"scheduleRounds": 10},
    }
    response = solve_request(json_format.ParseDict(doc, service_pb.SolveRequest()))
    assert response.plan.colocated and len(response.plan.rounds) == 10
    partners = {"a": "b", "b": "a", "c": "d", "d": "c"}
    paired = 0
    for r in response.plan.rounds:
        grants = {g.job_id: g for g in r.grants}
        assert len(grants) == len(r.grants)
        for g in r.grants:
            if g.colocated_with:
                paired += 1
                assert g.colocated_with == partners[g.job_id]
                other = grants[g.colocated_with]
                assert other.colocated_with == g.job_id
                assert (other.accelerator_type, other.devices, list(other.nodes)) == (
                    g.accelerator_type,
                    g.devices,
                    list(g.nodes),
                )
        devices = sum(g.devices for g in r.grants if g.job_id < (g.colocated_with or "~"))
        assert devices <= 2
    assert paired > 0


def test_lease_extension_keeps_the_previous_nodes() -> None:
    """A2.11 lease extension: a job granted the type it ran on keeps its nodes (from the
    history's current placement in round 0, from the previous round after that) and its grant
    says so; best fit alone would have picked the other node. Without node data nothing is
    marked. Through the wire the flag comes back."""
    req = service_pb.SolveRequest()
    snap = req.snapshot
    snap.cluster.accelerator_types.add(name="v100", count=4)
    snap.cluster.nodes.add(name="a", accelerator_type="v100", devices=2)
    snap.cluster.nodes.add(name="b", accelerator_type="v100", devices=2)
    for k in range(2):
        job = snap.jobs.add(id=f"j{k}", scale_factor=2)
        job.throughput["v100"] = 1.0
    entry = snap.history.jobs.add(job_id="j1")
    entry.current.accelerator_type = "v100"
    entry.current.nodes.append("a")
    req.policy.name = "max_min_fairness_perf"
    req.options.schedule_rounds = 3
    response = solve_request(req)
    for r in response.plan.rounds:
        grants = {g.job_id: g for g in r.grants}
        assert list(grants["j1"].nodes) == ["a"] and grants["j1"].lease_extended
        assert list(grants["j0"].nodes) == ["b"]
        assert grants["j0"].lease_extended == (r.index > 0)  # no history placement for j0
    # the model level: the same plan without nodes marks nothing
    prob, _, _ = request_to_model(req)
    bare = replace(prob, cluster=replace(prob.cluster, node_names=(),
                                         node_type=np.zeros(0, np.int64),
                                         node_devices=np.zeros(0, np.int64)))
    rounds = round_schedule(bare, np.ones((2, 1)), 3)
    assert not any(g.lease_extended for r in rounds for g in r.grants)


def test_lease_extensions_share_one_node_within_its_capacity() -> None:
    """Two jobs on one 3-device node run every round: from round 1 on both keep the node
    (lease extended) and together never hold more than its 3 devices."""
    prob = with_nodes(make_problem(["a"], [3], [[1.0], [1.0]], scale_factor=[2, 1]), [[3]])
    prob = replace(prob, cluster=replace(prob.cluster, count=np.array([3])))
    rounds = round_schedule(prob, np.array([[1.0], [1.0]]), 4)
    for r in rounds:
        assert sum(g.devices for g in r.grants) <= 3
        assert all(g.nodes == ("n0_0",) for g in r.grants)
    assert all(g.lease_extended for r in rounds[1:] for g in r.grants)
