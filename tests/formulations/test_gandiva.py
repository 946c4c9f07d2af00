"""Gavel's `gandiva` heuristic (A2.10, docs/policies/gavel.md): the isolated allocation when the
cluster is not over-subscribed; otherwise random compatible pairs (kept across calls through
the history), equal shares per combination, devices held once per pair."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.solver.model import (
    Colocations,
    PolicyRequest,
    Problem,
    SolveOptions,
)
from apportion.solver.parameters import NoParameters
from apportion.solver.result import Plan, Termination
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem
from tests.formulations.test_fifo import with_type_pairs


def run(prob: Problem, seed: int = 0) -> Plan:
    return solve(prob, PolicyRequest("gandiva", NoParameters()), SolveOptions(seed=seed))


@st.composite
def crowded(draw: st.DrawFn) -> Problem:
    """More devices asked for than there are, explicit pairs among jobs of equal scale."""
    n = draw(st.integers(1, 2))
    count = [draw(st.integers(1, 3)) for _ in range(n)]
    m = draw(st.integers(sum(count) + 1, sum(count) + 5))
    s = [draw(st.sampled_from([1, 1, 2])) if max(count) >= 2 else 1 for _ in range(m)]
    T = np.array([[draw(st.sampled_from([1.0, 2.0, 4.0])) for _ in range(n)] for _ in range(m)])
    prob = make_problem([f"t{j}" for j in range(n)], count, T, scale_factor=s)
    pairs = [(a, b) for a in range(m) for b in range(a + 1, m) if s[a] == s[b]]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=8)) if pairs else []
    factor = [[draw(st.sampled_from([0.3, 0.55, 0.8])) for _ in range(2 * n)] for _ in chosen]
    thr_a = np.array([f[:n] for f in factor]).reshape(-1, n) * T[[a for a, _ in chosen]]
    thr_b = np.array([f[n:] for f in factor]).reshape(-1, n) * T[[b for _, b in chosen]]
    return replace(prob, colocations=Colocations(
        np.array([a for a, _ in chosen], np.int64), np.array([b for _, b in chosen], np.int64),
        thr_a.reshape(-1, n), thr_b.reshape(-1, n)))


def combined(prob: Problem, a: int, b: int) -> np.ndarray:
    coloc = prob.colocations
    assert coloc is not None
    for p in range(coloc.job_a.size):
        if {int(coloc.job_a[p]), int(coloc.job_b[p])} == {a, b}:
            ra, rb = ((coloc.throughput_a[p], coloc.throughput_b[p]) if coloc.job_a[p] == a
                      else (coloc.throughput_b[p], coloc.throughput_a[p]))
            T = prob.jobs.throughput
            return np.asarray(ra / T[a] + rb / T[b])
    raise AssertionError(f"pair {(a, b)} has no data")


@given(crowded(), st.integers(0, 3))
def test_pairs_are_compatible_shares_equal_and_devices_held_once(prob: Problem,
                                                                  seed: int) -> None:
    plan = run(prob, seed)
    assert plan.certificate.termination is Termination.HEURISTIC
    X, s, W = plan.time_share, prob.jobs.scale_factor, prob.cluster.count
    partner = {}
    for a, b, _, share in plan.shares.colocated:
        assert share > 0 and s[a] == s[b]
        partner[a], partner[b] = b, a
    for a, b in partner.items():  # on every type where both can run
        assert np.all(combined(prob, a, b)[prob.usable[a] & prob.usable[b]] >= 1.0)
        np.testing.assert_array_equal(X[a], X[b])  # a pair shares one row
    # every combination gets (W[j]/C)/s of each type it can use, capped at 1 per row
    C = prob.jobs.num_jobs - len(partner) // 2
    for i in range(prob.jobs.num_jobs):
        cells = prob.usable[i] & (prob.usable[partner[i]] if i in partner else True)
        row = np.where(cells, W / C / s[i], 0.0)
        expected = row / max(1.0, float(row.sum()))
        np.testing.assert_allclose(X[i], expected, rtol=1e-12)
    # devices: singles plus each pair once
    singles = [i for i in range(prob.jobs.num_jobs) if i not in partner]
    leaders = [a for a in partner if a < partner[a]]
    used = s[singles] @ X[singles] + s[leaders] @ X[leaders]
    assert np.all(used <= W + 1e-9)
    assert np.all(X.sum(axis=1) <= 1 + 1e-12)
    np.testing.assert_array_equal(run(prob, seed).time_share, X)  # deterministic under a seed


def test_under_subscribed_is_isolated() -> None:
    prob = make_problem(["a", "b"], [2, 2], [[1.0, 2.0], [3.0, 1.0]])
    plan = run(prob)
    iso = solve(prob, PolicyRequest("isolated", NoParameters()))
    np.testing.assert_array_equal(plan.time_share, iso.time_share)
    assert plan.shares.colocated == ()


def test_history_pairs_persist_and_incompatible_ones_are_dropped() -> None:
    """Four jobs on one device: (0, 1) combined 1.6 and (2, 3) combined 1.2 are the only
    compatible pairs; with (0, 2) in the history (combined 0.8 < 1) it is dropped. A valid
    history pair (0, 1) is kept whatever the seed."""
    prob = make_problem(["v100"], [1], [[1.0]] * 4)
    coloc = Colocations(np.array([0, 2, 0]), np.array([1, 3, 2]),
                        np.array([[0.8], [0.6], [0.4]]), np.array([[0.8], [0.6], [0.4]]))
    prob = replace(prob, colocations=coloc)
    for seed in range(4):
        plan = run(prob, seed)
        assert {frozenset((a, b)) for a, b, _, _ in plan.shares.colocated} == {
            frozenset((0, 1)), frozenset((2, 3))}
        np.testing.assert_allclose(plan.time_share[:, 0], 0.5)  # two combinations
        np.testing.assert_allclose(plan.effective_throughput, [0.4, 0.4, 0.3, 0.3])
    bad = replace(prob, history=replace(prob.history, colocated_with=np.array([2, -1, 0, -1])))
    assert {frozenset((a, b)) for a, b, _, _ in run(bad).shares.colocated} == {
        frozenset((0, 1)), frozenset((2, 3))}


def test_history_pair_wins_over_a_random_draw() -> None:
    """Three mutually compatible jobs on one device: the random draw may pair any two; with
    (1, 2) in the history, that pair is kept for every seed."""
    prob = make_problem(["v100"], [1], [[1.0]] * 3)
    coloc = Colocations(np.array([0, 0, 1]), np.array([1, 2, 2]), np.full((3, 1), 0.7),
                        np.full((3, 1), 0.7))
    prob = replace(prob, colocations=coloc)
    draws = {frozenset((a, b)) for seed in range(12)
             for a, b, _, _ in run(prob, seed).shares.colocated}
    assert len(draws) > 1  # the draw does depend on the seed
    kept = replace(prob, history=replace(prob.history, colocated_with=np.array([-1, 2, 1])))
    for seed in range(12):
        assert [frozenset((a, b)) for a, b, _, _ in run(kept, seed).shares.colocated] == [
            frozenset((1, 2))]


def test_history_partner_field_paths() -> None:
    """Through the wire: the plan's pairs come back; bad history partners are field-path
    errors (unknown job, itself, unequal scale factors, a conflicting pair)."""
    from google.protobuf import json_format

    from apportion.server.pipeline import solve_request
    from apportion.solver.errors import ValidationError
    from apportion.v1 import allocation_service_pb2 as pb

    doc = {
        "snapshot": {
            "cluster": {"acceleratorTypes": [{"name": "v100", "count": 1}]},
            "jobs": [{"id": "a", "throughput": {"v100": 1.0}},
                     {"id": "b", "throughput": {"v100": 1.0}},
                     {"id": "c", "throughput": {"v100": 1.0}},
                     {"id": "d", "throughput": {"v100": 1.0}, "scaleFactor": 2}],
            "colocations": [{"jobA": "a", "jobB": "b", "throughputA": {"v100": 0.7},
                             "throughputB": {"v100": 0.7}}],
            "history": {"jobs": [{"jobId": "a", "colocatedWith": "b"}]},
        },
        "policy": {"name": "gandiva"},
    }
    doc["snapshot"]["cluster"]["acceleratorTypes"][0]["count"] = 2  # type: ignore[index]
    response = solve_request(json_format.ParseDict(doc, pb.SolveRequest()))
    assert {(c.job_a, c.job_b) for c in response.plan.colocated} == {("a", "b")}
    doc["snapshot"]["history"] = {"jobs": [  # type: ignore[index]
        {"jobId": "a", "colocatedWith": "zz"}, {"jobId": "b", "colocatedWith": "b"},
        {"jobId": "c", "colocatedWith": "d"}, {"jobId": "d", "colocatedWith": "a"}]}
    with pytest.raises(ValidationError) as caught:
        solve_request(json_format.ParseDict(doc, pb.SolveRequest()))
    fields = {v.field for v in caught.value.violations}
    assert {f"snapshot.history.jobs[{k}].colocated_with" for k in (0, 1, 2, 3)} <= fields


def reference_pairs(prob: Problem, seed: int) -> dict[int, int]:
    """Gandiva's pairing written from its description with type-pair rates: shuffled jobs,
    each paired with the next unpaired job of its scale factor that is compatible."""
    coloc = prob.colocations
    assert coloc is not None
    T, s, kinds, usable = (prob.jobs.throughput, prob.jobs.scale_factor, prob.jobs.job_type,
                           prob.usable)
    table = {}
    for q, (a, b) in enumerate(zip(coloc.type_a, coloc.type_b, strict=True)):
        ra, rb = coloc.type_throughput_a[q], coloc.type_throughput_b[q]
        if a == b:
            ra = rb = (ra + rb) / 2
        table[(a, b)], table[(b, a)] = (ra, rb), (rb, ra)

    def ok(a: int, b: int) -> bool:
        pair = table.get((kinds[a], kinds[b])) if kinds[a] and kinds[b] else None
        both = usable[a] & usable[b]
        if pair is None or s[a] != s[b] or not both.any():
            return False
        return bool(np.all(pair[0][both] / T[a, both] + pair[1][both] / T[b, both] >= 1.0))

    order = list(np.random.default_rng(seed).permutation(prob.jobs.num_jobs))
    partner: dict[int, int] = {}
    for pos, a in enumerate(order):
        if a in partner:
            continue
        for b in order[pos + 1:]:
            if b not in partner and ok(int(a), int(b)):
                partner[int(a)], partner[int(b)] = int(b), int(a)
                break
    return partner


@given(with_type_pairs(), st.integers(0, 3))
def test_type_pairs_match_the_reference_pairing(prob: Problem, seed: int) -> None:
    total = int(prob.jobs.scale_factor.sum())
    # crowd the cluster so that Gandiva pairs (sum of gangs above the devices)
    prob = replace(prob, cluster=replace(prob.cluster, count=np.minimum(
        prob.cluster.count, max(1, total // (2 * prob.cluster.num_types)))))
    if prob.jobs.scale_factor.sum() <= prob.cluster.count.sum():
        return
    if np.any(prob.jobs.scale_factor > prob.cluster.count.max()):
        return
    plan = run(prob, seed)
    got = {}
    for a, b, _, _ in plan.shares.colocated:
        got[a], got[b] = b, a
    assert got == reference_pairs(prob, seed)


def test_a_deadline_stops_the_pairing_with_every_job_still_served() -> None:
    from tests.countdown import CountdownDeadline

    prob = make_problem(["a"], [2], np.ones((6, 1)))
    prob = replace(prob, jobs=replace(prob.jobs, job_type=("x",) * 6),
                   colocations=Colocations(np.zeros(0, np.int64), np.zeros(0, np.int64),
                                           np.zeros((0, 1)), np.zeros((0, 1)), ("x",), ("x",),
                                           np.array([[0.8]]), np.array([[0.8]])))
    whole = run(prob)
    assert len(whole.shares.colocated) == 3
    cut = solve(prob, PolicyRequest("gandiva", NoParameters()), SolveOptions(),
                CountdownDeadline(checks=1))
    assert len(cut.shares.colocated) == 1  # one pair formed, then the deadline passed
    assert "time limit" in cut.certificate.detail
    held = cut.time_share.sum(axis=0)  # a pair holds its devices once
    for _, _, j, share in cut.shares.colocated:
        held[j] -= share
    assert np.all(held <= prob.cluster.count + 1e-9)
    assert np.all(cut.time_share.sum(axis=1) > 0)  # every job still gets its share
