"""Muri at scale and under a deadline: the array forms of the used ratios, the splitting,
admission and placement of groups choose what their per-group statements choose; a bucket
beyond the matching's size is matched in blocks; a round that could not finish in the time
left is not started, the ratios stop at the deadline, the placement keeps the groups it
placed; every cut answer is a feasible grouping that says what was cut."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations import muri
from apportion.formulations.group_placement import free_devices, place_group
from apportion.formulations.interleave import STAGES
from apportion.formulations.muri import (
    Grouping,
    MuriInstance,
    _admit_groups,
    _autopack,
    _merge_weights,
    _place,
    _self_ratios,
    admitted,
    grouping_value,
    matching_groups,
    muri_instance,
    period_of,
)
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import MuriParameters
from apportion.solver.result import JobStatus, Termination
from apportion.solver.solve import solve
from tests.countdown import CountdownDeadline, ReservingDeadline
from tests.formulations.colocation_cases import check_groups_on_types, multi_type_problem
from tests.formulations.test_muri import check_grouping, instances


def some_groups(inst: MuriInstance, seed: int) -> list[tuple[int, ...]]:
    """Disjoint groups of 1..max_group_size admitted jobs of one GPU count, in a random order."""
    rng = np.random.default_rng(seed)
    groups: list[tuple[int, ...]] = []
    for g in np.unique(inst.gpus).tolist():
        jobs = rng.permutation(np.nonzero(inst.gpus == g)[0]).tolist()
        while jobs:
            k = int(rng.integers(1, inst.max_group_size + 1))
            groups.append(tuple(jobs[:k]))
            jobs = jobs[k:]
    return [groups[k] for k in rng.permutation(len(groups)).tolist()]


def autopack_per_group(inst: MuriInstance, groups: list[tuple[int, ...]]
                       ) -> list[tuple[int, ...]]:
    solo = inst.solo_s()
    out: list[tuple[int, ...]] = []
    for members in groups:
        if len(members) > 1:
            period, _ = period_of(inst, np.array([members], np.int64))
            if period[0] > solo[list(members)].sum() * (1 + 1e-12):
                out.extend((i,) for i in members)
                continue
        out.append(members)
    return out


def admit_per_group(inst: MuriInstance, groups: list[tuple[int, ...]],
                    types: list[int] | None = None) -> Grouping:
    key = [min(float(inst.priority[i]) for i in members) for members in groups]
    first = [min(members) for members in groups]
    order = sorted(range(len(groups)), key=lambda g: (key[g], first[g]))
    free = inst.capacity().copy()
    runs_on = inst.runs_on()
    ordered: list[tuple[int, ...]] = []
    running = np.zeros(len(groups), bool)
    type_index = np.full(len(groups), -1, np.int64)
    for rank, g in enumerate(order):
        members = groups[g]
        need = int(inst.gpus[members[0]])
        room = runs_on[list(members)].all(axis=0) & (free >= need)
        if types is not None:
            room &= np.arange(free.size) == types[g]
        if room.any():
            j = int(np.argmax(room))
            free[j] -= need
            running[rank] = True
            type_index[rank] = j
        if len(members) > 1:
            _, best = period_of(inst, np.array([members], np.int64))
            members = tuple(int(i) for i in best[0])
        ordered.append(members)
    objective, periods = grouping_value(inst, tuple(ordered), running)
    return Grouping(tuple(ordered), periods, running, type_index, objective)


@given(instances(max_jobs=12), st.integers(0, 10_000), st.booleans())
def test_array_forms_choose_what_the_per_group_statements_choose(inst: MuriInstance,
                                                                 seed: int, ties: bool) -> None:
    """Splitting slow groups, each group's own used ratio, and the admission (order, type,
    best pipeline order, periods, objective), bit for bit; `ties`: priorities in a few
    classes (the group with the lowest job first)."""
    if ties:
        inst = replace(inst, priority=np.floor(inst.priority * 3))
    groups = some_groups(inst, seed)
    assert _autopack(inst, groups) == autopack_per_group(inst, groups)
    for members, ratio in zip(groups, _self_ratios(inst, groups).tolist(), strict=True):
        period, _ = period_of(inst, np.array([members], np.int64))
        assert ratio == float(inst.stage_s[list(members)].sum() / (STAGES * period[0]))
    rng = np.random.default_rng(seed)
    for types in (None, rng.integers(0, inst.capacity().size, len(groups)).tolist()):
        got = _admit_groups(inst, groups, (), "", types)
        want = admit_per_group(inst, groups, types)
        assert got.groups == want.groups
        assert got.running.tolist() == want.running.tolist()
        assert got.type_index.tolist() == want.type_index.tolist()
        assert got.period_s.tolist() == want.period_s.tolist()
        assert got.objective == want.objective


@given(instances(max_jobs=10), st.integers(0, 10_000))
def test_used_ratios_in_chunks_equal_one_chunk(inst: MuriInstance, seed: int) -> None:
    groups = some_groups(inst, seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(muri, "MERGE_PAIRS_PER_CHUNK", 1)
        small = _merge_weights(inst, groups)
    whole = _merge_weights(inst, groups)
    assert small is not None and whole is not None
    assert np.array_equal(small, whole) and np.array_equal(whole, whole.T)


def test_used_ratios_stop_at_the_deadline() -> None:
    inst = muri_instance(_staged(12, seed=4), MuriParameters(), Compat.NONE)
    nodes = [(i,) for i in range(12)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(muri, "MERGE_PAIRS_PER_CHUNK", 1)
        assert _merge_weights(inst, nodes, CountdownDeadline(checks=5)) is None
        assert _merge_weights(inst, nodes, CountdownDeadline(checks=10**6)) is not None


def _staged(m: int, seed: int, devices: int = 2) -> Problem:
    """m one-GPU jobs with stage times on `devices` devices (merges are needed)."""
    from tests.formulations.colocation_cases import muri_problem

    rng = np.random.default_rng(seed)
    stage = rng.random((m, 4)) * np.array([0.2, 1.0, 1.0, 0.5])
    stage[:, 2] += 0.05
    return muri_problem(stage, [1] * m, devices, remaining=rng.uniform(10, 1000, m))


@given(instances(max_jobs=12))
def test_a_bucket_beyond_the_matchings_size_is_matched_in_blocks(inst: MuriInstance) -> None:
    """With blocks of 3 groups, every merge joins two groups of one block and the grouping is
    feasible; each block's matching is proven."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(muri, "MAX_VERTICES", 3)
        found = matching_groups(inst)
    check_grouping(inst, found.groups, found.running)
    for found_matching in found.matchings:
        assert found_matching.mate.size <= 3
    value, _ = grouping_value(inst, found.groups, found.running)
    assert abs(value - found.objective) <= 1e-9


def test_a_round_that_could_not_finish_in_time_is_not_started() -> None:
    """With less time left than the round's candidate merges need (any time, by making the
    allowance per merge huge): no round, jobs alone by priority, and the answer says why; an
    unbounded deadline starts it."""
    problem = _staged(10, seed=1)
    request = PolicyRequest("muri", MuriParameters())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(muri, "MERGE_S_PER_PAIR", 1e9)
        plan = solve(problem, request, SolveOptions(), Deadline.after(3600.0))
        unbounded = solve(problem, request, SolveOptions(), Deadline.never())
    assert "grouping round was not started" in plan.certificate.detail
    assert plan.groups is not None and all(len(g.members) == 1 for g in plan.groups.groups)
    assert len(plan.groups.groups) == 2  # the two devices, a job alone on each
    assert "not started" not in unbounded.certificate.detail
    assert unbounded.groups is not None
    assert any(len(g.members) > 1 for g in unbounded.groups.groups)
    check_groups_on_types(problem, plan)


def place_per_group(problem: Problem, inst: MuriInstance, grouping: Grouping
                    ) -> list[tuple[tuple[int, ...], int, tuple[tuple[str, int], ...]]]:
    """(members, type, nodes) of each running group placed by `place_group`, in order."""
    free = free_devices(problem, holding=np.zeros(inst.num_jobs, bool))
    out = []
    for g, members in enumerate(grouping.groups):
        if not grouping.running[g]:
            continue
        spot = place_group(problem, free, int(inst.gpus[members[0]]),
                           grouping.type_index[g:g + 1])
        if spot is not None:
            out.append((members, spot[0], spot[1]))
    return out


@given(st.integers(0, 10_000), st.integers(1, 10))
def test_groups_go_to_the_nodes_the_group_placer_chooses(seed: int, m: int) -> None:
    problem = multi_type_problem(seed, m, running=False)
    inst = muri_instance(problem, MuriParameters(), Compat.NONE)
    grouping = matching_groups(inst)
    groups, *_ = _place(problem, inst, grouping)
    assert [(g.members, g.type_index, g.node_devices) for g in groups] == \
        place_per_group(problem, inst, grouping)


@given(st.integers(0, 10_000), st.integers(2, 10), st.integers(0, 6))
def test_a_placement_cut_after_k_groups_keeps_the_first_k(seed: int, m: int,
                                                         looks: int) -> None:
    problem = multi_type_problem(seed, m, running=False)
    inst = muri_instance(problem, MuriParameters(), Compat.NONE)
    grouping = matching_groups(inst)
    full, _, _, _, late = _place(problem, inst, grouping)
    assert late == 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(muri, "PLACE_CHECK_EVERY", 1)
        cut, status, reasons, objective, late = _place(problem, inst, grouping,
                                                       CountdownDeadline(checks=looks))
    running = int(grouping.running.sum())
    assert late == max(0, running - looks)
    assert cut == full[:len(cut)] and len(cut) <= looks
    placed = np.zeros(len(grouping.groups), bool)
    members = {g.members for g in cut}
    placed[[k for k, group in enumerate(grouping.groups) if group in members]] = True
    assert objective == grouping_value(inst, grouping.groups, placed)[0]
    for i in range(m):
        assert (status[i] is JobStatus.ALLOCATED) == any(i in g.members for g in cut)
    reached_not = np.nonzero(grouping.running)[0][looks:].tolist()
    for g in reached_not:
        for i in grouping.groups[g]:
            assert reasons[i] == "admitted, but not placed before the time limit"


@pytest.mark.parametrize("deadline", [Deadline(0.0), CountdownDeadline(checks=0)])
def test_an_expired_deadline_answers_at_once_with_no_group(deadline: Deadline) -> None:
    problem = _staged(10, seed=2)
    plan = solve(problem, PolicyRequest("muri", MuriParameters()), SolveOptions(), deadline)
    cert = plan.certificate
    assert cert.termination is Termination.HEURISTIC
    assert "time limit: no group admitted" in cert.detail
    assert plan.groups is not None and plan.groups.groups == ()
    assert cert.objective == 0.0
    assert set(plan.job_reason) == {"not admitted before the time limit"}


def test_groups_are_not_admitted_once_the_deadline_passed_after_the_rounds() -> None:
    """The admission looks at its deadline before the jobs are admitted and after the
    rounds: passing in between, the rounds' matchings are kept in the answer but no group is
    admitted."""
    inst = muri_instance(_staged(10, seed=5), MuriParameters(), Compat.NONE)
    found = matching_groups(inst, admit_deadline=CountdownDeadline(checks=1))
    assert not found.admitted and found.groups == () and found.matchings
    assert "no group admitted" in found.detail
    whole = matching_groups(inst, admit_deadline=CountdownDeadline(checks=2))
    assert whole.admitted and whole.groups


@pytest.mark.parametrize("threshold", [0.0, 1e-4])
def test_the_rounds_and_the_admission_stop_at_their_reserves(threshold: float) -> None:
    """Ten jobs: the rounds leave 1.5e-4 s, the placement and admission 2e-5 s. With both
    reserves past, no group is admitted; with only the rounds', the rounds are cut and jobs
    are admitted alone and placed."""
    problem = _staged(10, seed=3)
    deadline = ReservingDeadline(
        share=lambda seconds: Deadline(0.0) if seconds > threshold else Deadline.never())
    plan = solve(problem, PolicyRequest("muri", MuriParameters()), SolveOptions(), deadline)
    detail = plan.certificate.detail
    assert plan.groups is not None
    if threshold == 0.0:
        assert "no group admitted" in detail and plan.groups.groups == ()
    else:
        assert "grouping rounds cut by the time limit" in detail
        assert "no group admitted" not in detail and "not placed" not in detail
        assert len(plan.groups.groups) == 2  # two devices: the two first jobs alone


def test_the_placement_stops_at_its_reserve() -> None:
    problem = _staged(10, seed=3)
    # the placement's share (the smaller reserve) passes after the admission's two looks
    deadline = ReservingDeadline(share=lambda seconds: CountdownDeadline(checks=2)
                                 if seconds < 1e-4 else Deadline.never())
    plan = solve(problem, PolicyRequest("muri", MuriParameters()), SolveOptions(), deadline)
    assert "admitted group(s) not placed" in plan.certificate.detail
    assert plan.groups is not None and plan.groups.groups == ()


@given(st.integers(0, 10_000), st.integers(2, 10), st.sampled_from([1, 2, 3, 6, 12]))
def test_a_solve_cut_anywhere_is_feasible(seed: int, m: int, looks: int) -> None:
    problem = multi_type_problem(seed, m, running=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(muri, "MERGE_PAIRS_PER_CHUNK", 1)
        patch.setattr(muri, "PLACE_CHECK_EVERY", 1)
        plan = solve(problem, PolicyRequest("muri", MuriParameters()), SolveOptions(),
                     CountdownDeadline(checks=looks))
    check_groups_on_types(problem, plan)
    inst = muri_instance(problem, MuriParameters(), Compat.NONE)
    admitted_jobs = set(admitted(inst).tolist())
    assert plan.groups is not None
    for group in plan.groups.groups:
        assert set(group.members) <= admitted_jobs
    assert plan.certificate.termination is Termination.HEURISTIC
