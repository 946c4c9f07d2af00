"""Lucid at scale: a pair's type, rules and speeds from its two members agree with the dense
matrices they replace; the first fit in batches pairs as the one-pair-at-a-time binder does;
each job's benefit bound covers its best pair; blocked matching gives a pairing that obeys the
rules with a bound at least the true optimum (networkx); the instance of 20,000 jobs builds no
jobs x jobs array; deadlines cut the pairing into feasible, honest plans."""

from __future__ import annotations

import tracemalloc
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apportion.formulations import lucid
from apportion.formulations.lucid import (
    LucidInstance,
    allowed,
    benefit,
    benefit_of,
    best_benefit_bounds,
    first_fit,
    instance,
    match_blocks,
    pair_speed,
    pair_type,
)
from apportion.formulations.matching import is_matching
from apportion.formulations.pair_speeds import pair_speeds
from apportion.solver import deadline as deadline_module
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, Problem, SolveOptions
from apportion.solver.parameters import LucidParameters
from apportion.solver.result import JobStatus, Plan, Termination
from tests.countdown import CountdownDeadline, FrozenClock
from tests.formulations.lucid_cases import rich_lucid_problem
from tests.formulations.test_lucid import rules_hold
from tests.formulations.test_matching import reference

TOL = 1e-9


def dense_pair_type(problem: Problem, params: LucidParameters) -> np.ndarray:
    """The (m, m) pair types as the dense loops built them (the reference)."""
    inst = instance(problem, params)
    m = inst.num_jobs
    usable = problem.usable
    default = np.full(m, -1, np.int64)
    for i in range(m):
        types = np.nonzero(usable[i])[0]
        if types.size:
            default[i] = int(types[np.argmax(problem.cluster.count[types])])
    out = np.full((m, m), -1, np.int64)
    current = problem.history.current_type
    for r in np.nonzero(inst.running)[0]:
        out[:, r] = current[r]
        out[r, :] = current[r]
    for a in np.nonzero((inst.partner >= 0) & (current >= 0))[0]:
        b = int(inst.partner[a])
        out[a, b] = out[b, a] = current[a]
    if params.pair_pending:
        both = inst.pending[:, None] & inst.pending[None, :] & (default[:, None] == default)
        out = np.where(both, default[:, None], out)
    return out


def dense(inst: LucidInstance) -> tuple[np.ndarray, np.ndarray]:
    every = np.arange(inst.num_jobs)
    ok = allowed(inst, every[:, None], every[None, :])
    return ok, benefit(inst, every[:, None], every[None, :], ok)


PARAMS = st.sampled_from([LucidParameters(), LucidParameters(pair_pending=True),
                          LucidParameters(max_score_sum=1, device_memory_gib=16.0)])


@settings(max_examples=30)
@given(st.integers(0, 10_000), st.integers(2, 40), PARAMS, st.booleans())
def test_pair_types_and_speeds_agree_with_the_dense_matrices(
        seed: int, m: int, params: LucidParameters, colocations: bool) -> None:
    problem = rich_lucid_problem(seed, m, colocations=colocations)
    inst = instance(problem, params)
    every = np.arange(m)
    types = dense_pair_type(problem, params)
    assert np.array_equal(pair_type(inst, every[:, None], every[None, :]), types)
    reference_speed = pair_speeds(problem, types, inst.scores)
    speed = pair_speed(inst, every[:, None], every[None, :])
    assert np.array_equal(np.isnan(speed), np.isnan(reference_speed))
    assert np.array_equal(np.nan_to_num(speed), np.nan_to_num(reference_speed))


def first_fit_one_by_one(inst: LucidInstance) -> np.ndarray:
    """Lucid's binder over the dense rules (the reference)."""
    ok, _ = dense(inst)
    mate = np.full(inst.num_jobs, -1, np.int64)
    waiting = np.nonzero(inst.pending)[0]
    key = np.where(np.isnan(inst.priority[waiting]), np.inf, inst.priority[waiting])
    for p in waiting[np.argsort(key, kind="stable")].tolist():
        for r in np.nonzero(inst.running)[0].tolist():
            if mate[r] < 0 and ok[p, r]:
                mate[p], mate[r] = r, p
                break
    return mate


@settings(max_examples=30)
@given(st.integers(0, 10_000), st.integers(2, 60), PARAMS, st.sampled_from([1, 2, 3]))
def test_first_fit_in_batches_pairs_as_one_by_one(seed: int, m: int, params: LucidParameters,
                                                  window: int) -> None:
    problem = rich_lucid_problem(seed, m, running_share=0.5)
    inst = instance(problem, params)
    with pytest.MonkeyPatch.context() as patch:  # small windows: every scan path is taken
        patch.setattr(lucid, "FIRST_FIT_WINDOW", window)
        patch.setattr(lucid, "FIRST_FIT_BATCH", 2)
        found = first_fit(inst)
    assert not found.cut
    assert np.array_equal(found.mate, first_fit_one_by_one(inst))


@settings(max_examples=30)
@given(st.integers(0, 10_000), st.integers(2, 40), PARAMS, st.booleans())
def test_each_jobs_benefit_bound_covers_its_best_pair(
        seed: int, m: int, params: LucidParameters, colocations: bool) -> None:
    problem = rich_lucid_problem(seed, m, colocations=colocations)
    inst = instance(problem, params)
    _, weight = dense(inst)
    best = np.maximum(weight.max(axis=1), 0.0)
    beta = best_benefit_bounds(inst)
    assert np.all(beta >= best - TOL), np.nonzero(beta < best - TOL)


def check_pairing(inst: LucidInstance, mate: np.ndarray, params: LucidParameters) -> None:
    assert is_matching(mate)
    for a in np.nonzero(mate > np.arange(mate.size))[0].tolist():
        b = int(mate[a])
        assert allowed(inst, np.array([a]), np.array([b]))[0]
        assert rules_hold(inst, a, b, params)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(8, 28), PARAMS, st.sampled_from([4, 6, 10]))
def test_blocked_pairing_obeys_the_rules_and_bounds_the_optimum(
        seed: int, m: int, params: LucidParameters, block: int) -> None:
    """Blocks of at most `block` jobs: the pairing obeys the rules, its objective is its
    benefit, at most the optimum (networkx on every candidate pair), and its bound at least;
    optimal only when each GPU count was one block."""
    problem = rich_lucid_problem(seed, m, running_share=0.5)
    inst = instance(problem, params)
    _, weight = dense(inst)
    optimum = reference(weight)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lucid, "MAX_VERTICES", block)
        blocks = lucid.candidate_blocks(inst)
        found = match_blocks(inst, fallback=first_fit(inst).mate)
    assert all(b.jobs.size <= block for b in blocks)
    check_pairing(inst, found.mate, params)
    assert abs(found.objective - benefit_of(inst, found.mate)) <= 1e-7
    assert found.objective <= optimum + 1e-7
    assert found.bound >= optimum - 1e-7
    split = len(blocks) != len({b.gpus for b in blocks})
    if split:
        assert found.status.value != "optimal"
    else:
        assert abs(found.objective - optimum) <= 1e-7


def test_blocked_bound_is_the_blocks_bounds_plus_the_jobs_best_benefits() -> None:
    """One GPU count in two blocks whose best pairs cross: the blocks pair nothing, and the
    bound still covers the crossing optimum."""
    problem = rich_lucid_problem(3, 24, running_share=0.5, colocations=False)
    inst = instance(problem, LucidParameters())
    _, weight = dense(inst)
    optimum = reference(weight)
    beta = best_benefit_bounds(inst)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lucid, "MAX_VERTICES", 6)
        blocks = lucid.candidate_blocks(inst)
        found = match_blocks(inst)
        nothing = lucid.blocked_bound(inst, blocks, [0.0] * len(blocks), beta)
    assert nothing >= optimum - 1e-9  # the jobs' best benefits alone cover every pair
    assert found.bound >= optimum - 1e-9
    assert found.bound <= nothing + sum(m.bound or 0.0 for m in found.matchings) + 1e-9


def test_instance_of_20000_jobs_has_no_jobs_by_jobs_array() -> None:
    m = 20_000
    problem = rich_lucid_problem(1, m, running_share=0.5)
    tracemalloc.start()
    try:
        inst = instance(problem, LucidParameters(pair_pending=True))
        found = first_fit(inst)
        beta = best_benefit_bounds(inst)
        blocks = lucid.candidate_blocks(inst)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    arrays = [v for v in vars(inst).values() if isinstance(v, np.ndarray)]
    arrays += [v for v in vars(inst.speeds).values() if isinstance(v, np.ndarray)]
    n = problem.cluster.num_types
    assert max(a.size for a in arrays) <= m * n
    assert beta.shape == (m,) and found.mate.shape == (m,)
    assert all(b.jobs.size <= lucid.MAX_VERTICES for b in blocks)
    assert peak < 100 * 2**20  # one (m, m) bool array alone would be 400 MB


def valid_plan(problem: Problem, inst: LucidInstance, plan: Plan,
               params: LucidParameters) -> None:
    assert plan.groups is not None
    seen: set[int] = set()
    used = np.zeros(problem.cluster.num_types)
    for group in plan.groups.groups:
        assert not seen & set(group.members)
        seen |= set(group.members)
        used[group.type_index] += group.devices
        if len(group.members) == 2:
            a, b = group.members
            continuing = inst.partner[a] == b or inst.partner[b] == a
            assert continuing or rules_hold(inst, a, b, params)
    assert np.all(used <= problem.cluster.count)
    for i in range(inst.num_jobs):
        assert (plan.job_status[i] is JobStatus.ALLOCATED) == (i in seen), i


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 40), st.booleans())
def test_a_deadline_at_any_look_gives_a_feasible_honest_plan(seed: int, checks: int,
                                                            compat: bool) -> None:
    params = LucidParameters(pair_pending=seed % 2 == 0)
    problem = rich_lucid_problem(seed, 30, running_share=0.5)
    inst = instance(problem, params)
    _, weight = dense(inst)
    optimum = reference(weight)
    with pytest.MonkeyPatch.context() as patch:  # several blocks and batches: many looks
        patch.setattr(lucid, "MAX_VERTICES", 8)
        patch.setattr(lucid, "FIRST_FIT_BATCH", 2)
        patch.setattr(lucid, "PLACE_CHECK_EVERY", 2)
        plan = lucid.solve_policy(problem, params, Compat.LUCID if compat else Compat.NONE,
                                  SolveOptions(), CountdownDeadline(checks=checks))
    valid_plan(problem, inst, plan, params)
    cert = plan.certificate
    assert cert.objective is not None and cert.objective <= optimum + 1e-7
    if compat:
        assert cert.termination is Termination.HEURISTIC
    else:
        assert cert.termination in (Termination.FEASIBLE, Termination.OPTIMAL)
        assert cert.bound is not None and cert.bound >= optimum - 1e-7
    late = [i for i, r in enumerate(plan.job_reason) if r == lucid.LATE]
    if late:
        assert "time limit" in cert.detail
        assert cert.termination is not Termination.OPTIMAL


def test_a_matching_that_cannot_start_in_the_time_left_is_not_started(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A stopped clock with 1 ms left: a block of 120 jobs would take longer to set up, so the
    first fit is the plan (feasible, with a valid bound), where no limit gives the optimum."""
    problem = rich_lucid_problem(5, 120, running_share=0.5)
    params = LucidParameters()
    inst = instance(problem, params)
    _, weight = dense(inst)
    optimum = reference(weight)
    options = SolveOptions(relative_gap=1e-6)
    free = lucid.solve_policy(problem, params, Compat.NONE, options, Deadline())
    assert free.certificate.termination is Termination.OPTIMAL
    monkeypatch.setattr(deadline_module, "time", FrozenClock)
    plan = lucid.solve_policy(problem, params, Compat.NONE, options, Deadline(1e-3))
    cert = plan.certificate
    assert cert.termination is Termination.FEASIBLE
    assert "not matched" in cert.detail
    assert cert.objective == pytest.approx(benefit_of(inst, first_fit(inst).mate))
    assert cert.bound is not None and cert.bound >= optimum - 1e-9
    assert cert.objective < free.certificate.objective
    valid_plan(problem, inst, plan, params)


def test_blocked_solve_is_feasible_not_optimal() -> None:
    problem = rich_lucid_problem(8, 40, running_share=0.5)
    params = LucidParameters()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lucid, "MAX_VERTICES", 10)
        plan = lucid.solve_policy(problem, params, Compat.NONE, SolveOptions(), Deadline())
    assert plan.certificate.termination is Termination.FEASIBLE
    assert "across blocks" in plan.certificate.detail
    valid_plan(problem, instance(problem, params), plan, params)
    assert replace(plan.certificate).bound is not None
