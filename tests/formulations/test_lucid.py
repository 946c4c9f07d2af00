"""Lucid's pairing (D8): the four rules, exact pairing against networkx and brute force, never
below Lucid's first fit, and sharing switched off."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations.lucid import (
    LucidInstance,
    allowed,
    benefit,
    benefit_of,
    first_fit,
    instance,
)
from apportion.formulations.matching import is_matching, max_weight_matching
from apportion.solver.model import (
    Compat,
    History,
    PolicyRequest,
    Problem,
    SolveOptions,
)
from apportion.solver.parameters import LucidParameters
from apportion.solver.result import JobStatus, Termination
from apportion.solver.sharing import SharingInputs
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem
from tests.formulations.test_matching import brute_force, reference


def lucid_problem(seed: int, m: int, running: int, devices: int = 8) -> Problem:
    """m jobs, the first `running` of them running alone on one type."""
    rng = np.random.default_rng(seed)
    gpus = rng.choice([1, 2], m, p=[0.75, 0.25])
    throughput = rng.uniform(1, 5, (m, 1))
    problem = make_problem(["gpu"], [max(devices, int(gpus[:running].sum()))], throughput,
                           scale_factor=list(gpus))
    total = rng.uniform(100, 10_000, m)
    jobs = replace(problem.jobs, total_steps=total, steps_done=np.zeros(m))
    current = np.where(np.arange(m) < running, 0, -1)
    history = replace(problem.history, current_type=current.astype(np.int64),
                      current_devices=np.where(current >= 0, gpus, 0).astype(np.int64))
    sharing = SharingInputs(gpu_memory_gib=rng.uniform(1, 14, m),
                            sharing_score=rng.integers(-1, 3, m))
    return replace(problem, jobs=jobs, history=history, sharing=sharing)


def dense_rules(inst: LucidInstance) -> tuple[np.ndarray, np.ndarray]:
    """(m, m) allowed pairs and their benefits, every pair at once (small instances)."""
    every = np.arange(inst.num_jobs)
    ok = allowed(inst, every[:, None], every[None, :])
    return ok, benefit(inst, every[:, None], every[None, :], ok)


def rules_hold(inst: LucidInstance, a: int, b: int, params: LucidParameters) -> bool:
    """Lucid's four rules, one pair at a time (the pending job first)."""
    p, r = (a, b) if inst.pending[a] else (b, a)
    if inst.gpus[p] != inst.gpus[r]:
        return False
    if not inst.memory_gib[p] + inst.memory_gib[r] < params.device_memory_gib:
        return False
    if inst.scores[p] >= 0 and inst.scores[r] >= 0 and \
            inst.scores[p] + inst.scores[r] > params.max_score_sum:
        return False
    if np.isnan(inst.priority[p]) or np.isnan(inst.priority[r]):
        return True  # unknown remaining work: the priority rule does not apply
    if inst.running[r]:
        return bool(inst.priority[p] <= 2 * inst.priority[r])
    return bool(max(inst.priority[p], inst.priority[r])
                <= 2 * min(inst.priority[p], inst.priority[r]))


@given(st.integers(0, 10_000), st.integers(2, 9), st.integers(0, 9), st.booleans())
def test_exact_pairing_is_maximum_and_obeys_the_rules(seed: int, m: int, running: int,
                                                      pending_pairs: bool) -> None:
    running = min(running, m)
    problem = lucid_problem(seed, m, running)
    params = LucidParameters(pair_pending=pending_pairs)
    inst = instance(problem, params)
    ok, weight = dense_rules(inst)
    found = max_weight_matching(weight)
    assert abs(found.objective - brute_force(weight)) <= 1e-9
    assert abs(found.objective - reference(weight)) <= 1e-9
    for a, b in found.pairs().tolist():
        assert rules_hold(inst, a, b, params)
        assert inst.running[a] ^ inst.running[b] or (pending_pairs and inst.pending[a]
                                                     and inst.pending[b])
    heuristic = first_fit(inst).mate
    assert is_matching(heuristic)
    assert benefit_of(inst, heuristic) <= found.objective + 1e-9
    assert np.array_equal(ok, ok.T)
    for a, b in zip(*np.nonzero(ok), strict=True):
        assert rules_hold(inst, int(a), int(b), params)


def test_policy_pairs_waiting_jobs_with_running_ones() -> None:
    problem = lucid_problem(3, 12, 6)
    plan = solve(problem, PolicyRequest("lucid", LucidParameters()), SolveOptions())
    assert plan.certificate.termination is Termination.OPTIMAL
    groups = plan.groups
    assert groups is not None
    assert groups.heuristic_objective is not None
    assert groups.heuristic_objective <= plan.certificate.objective + 1e-9
    for group in groups.groups:
        assert len(group.members) <= 2
        if len(group.members) == 2:
            assert all(s > 1 for s in group.slowdown)
    placed = [i for g in groups.groups for i in g.members]
    assert len(placed) == len(set(placed))
    devices = sum(g.devices for g in groups.groups)
    assert devices <= int(problem.cluster.count.sum())
    compat = solve(problem, PolicyRequest("lucid", LucidParameters(), Compat.LUCID),
                   SolveOptions())
    assert compat.certificate.termination is Termination.HEURISTIC
    assert compat.certificate.objective == groups.heuristic_objective


def test_sharing_off_places_waiting_jobs_alone_in_priority_order() -> None:
    problem = lucid_problem(4, 10, 3, devices=6)
    plan = solve(problem, PolicyRequest("lucid", LucidParameters(sharing=False)),
                 SolveOptions())
    groups = plan.groups
    assert groups is not None
    assert all(len(g.members) == 1 for g in groups.groups)
    assert plan.certificate.objective == 0
    inst = instance(problem, LucidParameters())
    waiting = np.nonzero(inst.pending)[0]
    order = waiting[np.argsort(inst.priority[waiting], kind="stable")]
    started = [i for i in order if plan.job_status[i] is JobStatus.ALLOCATED]
    free = int(problem.cluster.count.sum()) - int(problem.jobs.scale_factor[:3].sum())
    expected, used = [], 0
    for i in order.tolist():
        if used + int(problem.jobs.scale_factor[i]) <= free:
            expected.append(i)
            used += int(problem.jobs.scale_factor[i])
    assert started == expected


def test_history_pairs_are_kept() -> None:
    problem = lucid_problem(5, 4, 2)
    problem = replace(problem, jobs=replace(problem.jobs, scale_factor=np.ones(4, np.int64)))
    history: History = replace(problem.history, colocated_with=np.array([1, 0, -1, -1]))
    plan = solve(replace(problem, history=history), PolicyRequest("lucid", LucidParameters()),
                 SolveOptions())
    assert plan.groups is not None
    assert any(sorted(g.members) == [0, 1] for g in plan.groups.groups)


@pytest.mark.parametrize("partner_placed", [False, True])
def test_a_pair_reported_on_one_member_continues(partner_placed: bool) -> None:
    """Job 0 runs and names job 1 as its partner (`colocated_with` on one member only); job
    1 has a placement of its own or none (a pair's devices may be reported once). Either way
    job 1 is in exactly one group, with job 0, at the pair's predicted slowdowns."""
    problem = lucid_problem(7, 4, 2 if partner_placed else 1)
    ones = np.ones(4, np.int64)
    sharing = replace(problem.sharing, sharing_score=np.array([0, 0, 0, 0]),
                      gpu_memory_gib=np.full(4, 2.0))
    history: History = replace(problem.history, colocated_with=np.array([1, -1, -1, -1]))
    problem = replace(problem, jobs=replace(problem.jobs, scale_factor=ones), history=history,
                      sharing=sharing)
    plan = solve(problem, PolicyRequest("lucid", LucidParameters()), SolveOptions())
    assert plan.groups is not None
    with_one = [g for g in plan.groups.groups if 1 in g.members]
    assert len(with_one) == 1 and sorted(with_one[0].members) == [0, 1]
    assert all(s != 1.0 for s in with_one[0].slowdown)
