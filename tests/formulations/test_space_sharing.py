"""Max-min fairness with space sharing (A2.2, docs/policies/gavel.md, A2.3): proofs by independent
routes. The reference is a per-pair cvxpy formulation written from A2.2, not from the code."""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.solver.model import (
    Colocations,
    Compat,
    PolicyRequest,
    Problem,
    SolveOptions,
)
from apportion.solver.parameters import MaxMinFairnessParameters
from apportion.solver.result import Plan, Termination
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem

REL = 1e-6


def packed(problem: Problem) -> Plan:
    plan = solve(problem, PolicyRequest("weighted_max_min_fairness",
                                        MaxMinFairnessParameters(space_sharing=True),
                                        Compat.NONE), SolveOptions())
    assert plan.certificate.termination is Termination.OPTIMAL, plan.certificate
    return plan


def plain(problem: Problem) -> float:
    plan = solve(problem, PolicyRequest("weighted_max_min_fairness", MaxMinFairnessParameters()))
    assert plan.certificate.objective is not None
    return plan.certificate.objective


def objective(plan: Plan) -> float:
    assert plan.certificate.objective is not None
    return plan.certificate.objective


def with_pairs(problem: Problem, pairs: list[tuple[int, int]], thr_a: np.ndarray,
               thr_b: np.ndarray) -> Problem:
    n = problem.cluster.num_types
    coloc = Colocations(
        job_a=np.array([a for a, _ in pairs], dtype=np.int64),
        job_b=np.array([b for _, b in pairs], dtype=np.int64),
        throughput_a=np.asarray(thr_a, dtype=np.float64).reshape(-1, n),
        throughput_b=np.asarray(thr_b, dtype=np.float64).reshape(-1, n),
    )
    return replace(problem, colocations=coloc)


def per_pair_throughput(problem: Problem) -> tuple[list[cp.Expression], list[cp.Constraint]]:
    """thr_i as cvxpy expressions over singles x[i, j] and pairs y[p, j] (A2.2), with the
    budget, capacity and usable-cell constraints."""
    thr = problem.jobs.throughput
    W = problem.cluster.count.astype(float)
    s = problem.jobs.scale_factor.astype(float)
    m, n = thr.shape
    allowed = (thr > 0) & (s[:, None] <= W[None, :])
    coloc = problem.colocations
    assert coloc is not None
    x = cp.Variable((m, n), nonneg=True)
    cons: list[cp.Constraint] = [x[~allowed] == 0] if (~allowed).any() else []
    rate = [cp.sum(cp.multiply(thr[i], x[i])) for i in range(m)]
    budget = [cp.sum(x[i]) for i in range(m)]
    cap = [s @ x[:, j] for j in range(n)]
    P = coloc.job_a.size
    if P:
        y = cp.Variable((P, n), nonneg=True)
        for p in range(P):
            a, b = int(coloc.job_a[p]), int(coloc.job_b[p])
            for j in range(n):
                if not (allowed[a, j] and allowed[b, j]):
                    cons.append(y[p, j] == 0)
                cap[j] = cap[j] + s[a] * y[p, j]
            rate[a] = rate[a] + cp.sum(cp.multiply(coloc.throughput_a[p], y[p]))
            rate[b] = rate[b] + cp.sum(cp.multiply(coloc.throughput_b[p], y[p]))
            budget[a] = budget[a] + cp.sum(y[p])
            budget[b] = budget[b] + cp.sum(y[p])
    cons += [budget[i] <= 1 for i in range(m)] + [cap[j] <= W[j] for j in range(n)]
    return rate, cons


def reference_per_pair(problem: Problem) -> float:
    """A2.2 verbatim: x[i, j] singles, y[p, j] pairs; no pruning, no grouping."""
    thr = problem.jobs.throughput
    W = problem.cluster.count.astype(float)
    s = problem.jobs.scale_factor.astype(float)
    prop = (thr * W).sum(axis=1) / W.sum()
    scale = s / (problem.jobs.priority_weight * prop)
    rate, cons = per_pair_throughput(problem)
    t = cp.Variable()
    cons += [t <= scale[i] * rate[i] for i in range(len(rate))]
    return float(cp.Problem(cp.Maximize(t), cons).solve(solver=cp.CLARABEL))


@st.composite
def instances(draw: st.DrawFn) -> Problem:
    n = draw(st.integers(1, 2))
    m = draw(st.integers(2, 5))
    count = np.array([draw(st.integers(1, 3)) for _ in range(n)], dtype=np.int64)
    thr = np.array([[draw(st.sampled_from([0.0, 1.0, 2.0, 4.0])) for _ in range(n)]
                    for _ in range(m)])
    thr[:, int(np.argmax(count))] += 1.0  # every job can run somewhere
    weight = np.array([draw(st.sampled_from([1.0, 2.0])) for _ in range(m)])
    problem = make_problem([f"t{j}" for j in range(n)], count, thr, [1] * m, weight)
    all_pairs = list(combinations(range(m), 2))
    chosen = draw(st.lists(st.sampled_from(all_pairs), unique=True, max_size=len(all_pairs)))
    factors = [[draw(st.sampled_from([0.0, 0.3, 0.6, 0.9])) for _ in range(2 * n)]
               for _ in chosen]
    thr_a = np.array([[f[j] * thr[a, j] for j in range(n)] for (a, _), f in zip(chosen, factors,
                                                                                   strict=True)])
    thr_b = np.array([[f[n + j] * thr[b, j] for j in range(n)]
                      for (_, b), f in zip(chosen, factors, strict=True)])
    return with_pairs(problem, chosen, thr_a, thr_b)


def check_decoded(problem: Problem, plan: Plan) -> None:
    """Per-job time <= 1; a pair holds its devices once; throughput recomputed from the
    decoded singles and pairs equals the reported one."""
    X = plan.time_share
    s = problem.jobs.scale_factor.astype(float)
    assert X.min() >= -1e-12 and np.all(X.sum(axis=1) <= 1 + 1e-7)
    m, n = X.shape
    pair_time = np.zeros((m, n))
    pair_steps = np.zeros(m)
    pair_devices = np.zeros(n)
    coloc = problem.colocations
    table = {}
    if coloc is not None:
        for p in range(coloc.job_a.size):
            a, b = int(coloc.job_a[p]), int(coloc.job_b[p])
            table[(a, b)] = (coloc.throughput_a[p], coloc.throughput_b[p])
            table[(b, a)] = (coloc.throughput_b[p], coloc.throughput_a[p])
    for a, b, j, share in plan.shares.colocated:
        assert share > 0 and a != b
        pair_time[a, j] += share
        pair_time[b, j] += share
        thr_a, thr_b = table[(a, b)]
        pair_steps[a] += thr_a[j] * share
        pair_steps[b] += thr_b[j] * share
        pair_devices[j] += s[a] * share
    single = X - pair_time
    assert single.min() >= -1e-7
    assert np.all(s @ single + pair_devices <= problem.cluster.count + 1e-7)
    steps = np.einsum("ij,ij->i", problem.jobs.throughput, single) + pair_steps
    np.testing.assert_allclose(plan.effective_throughput, steps, rtol=1e-7, atol=1e-9)


@given(problem=instances())
def test_equals_independent_per_pair_lp(problem: Problem) -> None:
    plan = packed(problem)
    assert objective(plan) == pytest.approx(reference_per_pair(problem), rel=REL, abs=1e-9)
    assert plan.certificate.gap is not None and plan.certificate.gap <= REL
    check_decoded(problem, plan)


@given(problem=instances())
def test_sharing_never_lowers_and_zero_pairs_change_nothing(problem: Problem) -> None:
    """A2.2 tests 2 and 3."""
    t_plain = plain(problem)
    assert objective(packed(problem)) >= t_plain * (1 - REL)
    coloc = problem.colocations
    assert coloc is not None
    zero = replace(coloc, throughput_a=coloc.throughput_a * 0, throughput_b=coloc.throughput_b * 0)
    assert objective(packed(replace(problem, colocations=zero))) == pytest.approx(t_plain, rel=REL)


@given(problem=instances(), extra=st.floats(0.55, 1.0))
def test_adding_a_beneficial_pair_never_lowers_the_optimum(problem: Problem, extra: float) -> None:
    coloc = problem.colocations
    assert coloc is not None
    listed = {frozenset((int(a), int(b))) for a, b in zip(coloc.job_a, coloc.job_b, strict=True)}
    missing = [(a, b) for a, b in combinations(range(problem.jobs.num_jobs), 2)
               if frozenset((a, b)) not in listed]
    if not missing:
        return
    a, b = missing[0]
    thr = problem.jobs.throughput
    more = replace(coloc, job_a=np.append(coloc.job_a, a), job_b=np.append(coloc.job_b, b),
                   throughput_a=np.vstack([coloc.throughput_a, extra * thr[a]]),
                   throughput_b=np.vstack([coloc.throughput_b, extra * thr[b]]))
    before = objective(packed(problem))
    assert objective(packed(replace(problem, colocations=more))) >= before * (1 - REL)


def typed_problem(copies: list[int], seed: int) -> tuple[Problem, Problem]:
    """The same workload twice: pair throughputs per job-type pair, and expanded to every job
    pair (A2.3 test 2: equal optima when jobs of a type are identical)."""
    rng = np.random.default_rng(seed)
    n = 2
    kinds = len(copies)
    base = rng.uniform(0.5, 4.0, (kinds, n))
    kind_of = np.repeat(np.arange(kinds), copies)
    m = kind_of.size
    problem = make_problem(["v100", "k80"], [max(1, m // 3), max(1, m // 3)], base[kind_of],
                           [1] * m)
    ratio = rng.uniform(0.4, 0.9, (kinds, kinds, n))
    names = tuple(f"k{k}" for k in kind_of)
    type_a, type_b, rows_a, rows_b = [], [], [], []
    for u in range(kinds):
        for v in range(u, kinds):
            type_a.append(f"k{u}")
            type_b.append(f"k{v}")
            rows_a.append(ratio[u, v] * base[u])
            rows_b.append((ratio[u, v] if u == v else ratio[v, u]) * base[v])
    typed = replace(problem, jobs=replace(problem.jobs, job_type=names), colocations=Colocations(
        job_a=np.zeros(0, np.int64), job_b=np.zeros(0, np.int64),
        throughput_a=np.zeros((0, n)), throughput_b=np.zeros((0, n)),
        type_a=tuple(type_a), type_b=tuple(type_b),
        type_throughput_a=np.array(rows_a), type_throughput_b=np.array(rows_b)))
    pairs = list(combinations(range(m), 2))
    thr_a = np.array([ratio[kind_of[a], kind_of[b]] * base[kind_of[a]] for a, b in pairs])
    thr_b = np.array([(ratio[kind_of[a], kind_of[b]] if kind_of[a] == kind_of[b]
                       else ratio[kind_of[b], kind_of[a]]) * base[kind_of[b]] for a, b in pairs])
    return typed, with_pairs(problem, pairs, thr_a, thr_b)


@given(copies=st.lists(st.integers(1, 4), min_size=1, max_size=3), seed=st.integers(0, 10**6))
def test_job_type_formulation_equals_per_pair(copies: list[int], seed: int) -> None:
    typed, explicit = typed_problem(copies, seed)
    plan = packed(typed)
    assert objective(plan) == pytest.approx(objective(packed(explicit)), rel=REL)
    assert objective(plan) == pytest.approx(reference_per_pair(explicit), rel=REL)
    # The decoded pairs are concrete job pairs of the typed workload: check against the
    # expanded table (same throughputs).
    check_decoded(explicit, plan)


def test_model_size_grows_with_types_not_jobs() -> None:
    """A2.3 test 3: with job-type pairs, the LP is over groups, not jobs."""
    small, _ = typed_problem([2, 2, 2], 1)
    big, _ = typed_problem([200, 200, 200], 1)
    size_small = packed(small).certificate.model_size.variables
    size_big = packed(big).certificate.model_size.variables
    assert size_big == size_small


def test_wire_format_pairs_and_field_path_errors() -> None:
    """Through the wire: the `max_min_fairness_packed` alias shares devices and reports the
    pairs; malformed co-location entries are reported with their field paths."""
    from google.protobuf import json_format

    from apportion.server.pipeline import solve_request
    from apportion.solver.errors import ValidationError
    from apportion.v1 import allocation_service_pb2 as pb

    doc: dict[str, object] = {
        "snapshot": {
            "cluster": {"acceleratorTypes": [{"name": "v100", "count": 1}]},
            "jobs": [
                {"id": "a", "throughput": {"v100": 2.0}},
                {"id": "b", "throughput": {"v100": 2.0}},
                {"id": "c", "scaleFactor": 1, "throughput": {"v100": 1.0}},
            ],
            "colocations": [{"jobA": "a", "jobB": "b", "throughputA": {"v100": 1.5},
                             "throughputB": {"v100": 1.5}}],
        },
        "policy": {"name": "max_min_fairness_packed"},
    }
    response = solve_request(json_format.ParseDict(doc, pb.SolveRequest()))
    assert response.stats.termination == pb.TERMINATION_REASON_OPTIMAL
    pairs = [(p.job_a, p.job_b, p.accelerator_type) for p in response.plan.colocated]
    assert pairs and all(pair == ("a", "b", "v100") for pair in pairs)
    bad = json_format.ParseDict(doc, pb.SolveRequest())
    bad.snapshot.cluster.accelerator_types.add(name="k80", count=2)
    bad.snapshot.jobs[2].scale_factor = 2
    bad.snapshot.colocations.add(job_a="a", job_b="zz")
    bad.snapshot.colocations.add(job_a="a", job_b="c")
    bad.snapshot.colocations.add(job_a="b", job_b="a")
    bad.snapshot.colocations.add(job_a="c", job_b="c")
    bad.snapshot.colocations[0].throughput_a["v100"] = -1.0
    bad.snapshot.type_colocations.add(type_a="", type_b="x")
    with pytest.raises(ValidationError) as caught:
        solve_request(bad)
    fields = {v.field for v in caught.value.violations}
    assert {
        'snapshot.colocations[0].throughput_a["v100"]',
        "snapshot.colocations[1].job_b",
        "snapshot.colocations[2].job_b",
        "snapshot.colocations[3]",
        "snapshot.colocations[4].job_b",
        "snapshot.type_colocations[0].type_a",
    } <= fields, fields


def test_a_gang_too_large_for_a_type_it_runs_fast_on_keeps_its_level() -> None:
    """Regression (found by apportion.testing.check_plan): job a's gang of 8 cannot use the
    1-device type on which it is fastest; its level per unit of throughput is s/(w prop) on
    the cells it can use, not the cells' share of all its throughputs (which made the packed
    optimum 30 times too small, below the plain LP's)."""
    problem = make_problem(["big", "small"], [8, 1], [[1.0, 30.0], [2.0, 0.0]], [8, 8])
    problem = with_pairs(problem, [(0, 1)], np.array([[0.9, 0.0]]), np.array([[1.5, 0.0]]))
    value = objective(packed(problem))
    assert value >= plain(problem) * (1 - REL)
    assert value == pytest.approx(reference_per_pair(problem), rel=REL)
