"""Muri (B6): the exact set packing against brute force, the matching rounds against networkx
on the same weights, the grouping invariants, and the policy through `solve()`."""

from __future__ import annotations

import itertools
from dataclasses import replace

import networkx as nx
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations.muri import (
    MURI_OVERHEAD,
    MuriInstance,
    _merge_weights,
    admitted,
    exact_groups,
    group_values,
    grouping_value,
    matching_groups,
    period_of,
)
from apportion.solver.backends.status import SolverStatus
from apportion.solver.model import Compat, PolicyRequest, SolveOptions
from apportion.solver.parameters import MuriParameters
from apportion.solver.result import JobStatus, Termination
from apportion.solver.solve import solve
from tests.formulations.colocation_cases import muri_problem


@st.composite
def instances(draw: st.DrawFn, max_jobs: int = 8) -> MuriInstance:
    m = draw(st.integers(1, max_jobs))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    stage = rng.random((m, 4)) * rng.choice([0.1, 1.0, 3.0], (m, 4))
    stage[:, 2] += 0.05
    gpus = rng.choice([1, 2], m, p=[0.7, 0.3])
    return MuriInstance(
        stage_s=stage,
        gpus=gpus.astype(np.int64),
        priority=rng.random(m),
        weight=rng.choice([1.0, 2.0], m),
        cluster_gpus=draw(st.integers(1, 4)),
        max_group_size=draw(st.integers(1, 4)),
        overhead=draw(st.sampled_from([(1.0, 1.0, 1.0, 1.0), MURI_OVERHEAD])),
    )


def partitions(items: list[int], size: int) -> list[list[tuple[int, ...]]]:
    """Every set of disjoint groups of at most `size` items (items may be left out)."""
    if not items:
        return [[]]
    first, rest = items[0], items[1:]
    out = [p for p in partitions(rest, size)]  # first left out
    for k in range(0, min(size, len(rest) + 1)):
        for others in itertools.combinations(rest, k):
            left = [x for x in rest if x not in others]
            out += [[(first, *others), *p] for p in partitions(left, size)]
    return out


def brute_force(inst: MuriInstance) -> float:
    candidates = admitted(inst).tolist()
    best = 0.0
    for chosen in partitions(candidates, inst.max_group_size):
        if any(len({int(inst.gpus[i]) for i in g}) > 1 for g in chosen):
            continue
        if sum(int(inst.gpus[g[0]]) for g in chosen) > inst.cluster_gpus:
            continue
        best = max(best, groups_value(inst, chosen))
    return best


def groups_value(inst: MuriInstance, chosen: list[tuple[int, ...]]) -> float:
    """The set-packing objective of the groups `chosen` (each at its best period)."""
    value = 0.0
    for g in chosen:
        members = np.array([g], np.int64)
        period, _ = period_of(inst, members)
        value += float(group_values(inst, members, period)[0])
    return value


def check_grouping(inst: MuriInstance, groups: tuple[tuple[int, ...], ...],
                   running: np.ndarray) -> None:
    seen = [i for g in groups for i in g]
    assert len(seen) == len(set(seen))
    for g in groups:
        assert 1 <= len(g) <= inst.max_group_size
        assert len({int(inst.gpus[i]) for i in g}) == 1
    used = sum(int(inst.gpus[g[0]]) for g, run in zip(groups, running, strict=True) if run)
    assert used <= inst.cluster_gpus


@given(instances(max_jobs=7))
def test_exact_groups_match_brute_force(inst: MuriInstance) -> None:
    exact = exact_groups(inst, relative_gap=1e-9)
    assert exact.status is SolverStatus.OPTIMAL
    expected = brute_force(inst)
    assert abs(exact.grouping.objective - expected) <= 1e-6 * max(1.0, expected)
    assert exact.bound is not None and exact.bound >= expected - 1e-6
    check_grouping(inst, exact.grouping.groups, exact.grouping.running)


@given(instances(max_jobs=12))
def test_matching_rounds_are_feasible_and_never_beat_the_set_packing(inst: MuriInstance) -> None:
    heuristic = matching_groups(inst)
    check_grouping(inst, heuristic.groups, heuristic.running)
    value, _ = grouping_value(inst, heuristic.groups, heuristic.running)
    assert abs(value - heuristic.objective) <= 1e-9
    exact = exact_groups(inst, relative_gap=1e-9)
    assert heuristic.objective <= exact.grouping.objective + 1e-7
    assert exact.bound is not None and heuristic.objective <= exact.bound + 1e-7
    for found in heuristic.matchings:
        assert found.status is SolverStatus.OPTIMAL


def test_each_round_is_a_maximum_weight_matching() -> None:
    rng = np.random.default_rng(7)
    m = 24
    stage = rng.random((m, 4))
    inst = MuriInstance(stage, np.ones(m, np.int64), rng.random(m), np.ones(m), cluster_gpus=6)
    nodes = [(i,) for i in range(m)]
    weight = _merge_weights(inst, nodes)
    graph = nx.Graph()
    for a, b in zip(*np.nonzero(np.triu(weight, 1)), strict=True):
        graph.add_edge(int(a), int(b), weight=float(weight[a, b]))
    expected = sum(weight[a, b] for a, b in nx.max_weight_matching(graph))
    grouping = matching_groups(inst)
    assert abs(grouping.matchings[0].objective - expected) <= 1e-9
    # 24 one-GPU jobs admitted on 6 GPUs: two rounds make groups of up to 4
    assert max(len(g) for g in grouping.groups) == 4


def test_admission_reserves_a_slot_for_four_jobs_of_a_gpu_count() -> None:
    stage = np.ones((7, 4))
    gpus = np.array([2, 1, 1, 1, 1, 1, 2])
    inst = MuriInstance(stage, gpus, np.arange(7.0), np.ones(7), cluster_gpus=3)
    # job 0 (2 GPUs) takes a slot for jobs 0 and 6; job 1 (1 GPU) for jobs 1-4; job 5 waits
    assert admitted(inst).tolist() == [0, 1, 2, 3, 4, 6]


def test_policy_plan_reports_groups_periods_and_slowdowns() -> None:
    stage = np.array([[0.0, 1.0, 0.1, 0.0], [0.0, 0.1, 1.0, 0.0],
                      [0.0, 0.0, 0.1, 1.0], [1.0, 0.0, 0.1, 0.0]])
    problem = muri_problem(stage, [1, 1, 1, 1], devices=1)
    for exact in (False, True):
        plan = solve(problem, PolicyRequest("muri", MuriParameters(exact_groups=exact)),
                     SolveOptions())
        groups = plan.groups
        assert groups is not None and len(groups.groups) == 1
        group = groups.groups[0]
        assert sorted(group.members) == [0, 1, 2, 3]
        # complementary jobs: the period is the longest stage sum over slots
        assert group.period_s <= stage.sum(axis=1).max() * 4
        for member, slowdown in zip(group.members, group.slowdown, strict=True):
            assert abs(slowdown - group.period_s / stage[member].sum()) < 1e-12
        assert all(s == JobStatus.ALLOCATED for s in plan.job_status)
        assert plan.time_share.sum() == 4
        if exact:
            assert plan.certificate.termination is Termination.OPTIMAL
            assert groups.heuristic_objective is not None
            assert groups.heuristic_objective <= plan.certificate.objective + 1e-9
        else:
            assert plan.certificate.termination is Termination.HEURISTIC


def test_compat_muri_applies_the_measured_overheads() -> None:
    stage = np.array([[0.0, 1.0, 0.2, 0.0], [0.0, 0.2, 1.0, 0.0]])
    problem = muri_problem(stage, [1, 1], devices=1)
    plain = solve(problem, PolicyRequest("muri", MuriParameters()), SolveOptions())
    compat = solve(problem, PolicyRequest("muri", MuriParameters(), Compat.MURI), SolveOptions())
    assert plain.groups is not None and compat.groups is not None
    ratio = compat.groups.groups[0].period_s / plain.groups.groups[0].period_s
    assert abs(ratio - MURI_OVERHEAD[1]) < 1e-12


def test_jobs_beyond_the_cluster_wait_and_jobs_without_stage_times_are_unservable() -> None:
    stage = np.ones((6, 4))
    problem = muri_problem(stage, [2] * 6, devices=2)
    sharing = problem.sharing
    assert sharing is not None
    stage_nan = stage.copy()
    stage_nan[5] = np.nan
    problem = replace(problem, sharing=replace(sharing, stage_s=stage_nan))
    plan = solve(problem, PolicyRequest("muri", MuriParameters(max_group_size=2)),
                 SolveOptions())
    assert plan.job_status[5] is JobStatus.UNSERVABLE
    running = [i for i, s in enumerate(plan.job_status) if s is JobStatus.ALLOCATED]
    assert len(running) == 2  # one slot of 2 GPUs, a pair at most
    assert sum(s is JobStatus.DEFERRED for s in plan.job_status) == 3
