"""IADeep (D9): the set packing against brute force with groups of three, never below
IADeep's greedy, memory and slowdown caps, and groups without interference never lowering the
value."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations import iadeep
from apportion.formulations.iadeep import (
    IadeepInstance,
    iadeep_instance,
    is_packing,
    least_interference,
    least_interference_until,
    packing_value,
    solve_packing,
)
from apportion.solver.backends.highs_startup import StartupCost
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import IadeepParameters
from apportion.solver.result import JobStatus, ModelSize, Plan, Termination
from apportion.solver.sharing import GroupInterference, JobConfiguration, SharingInputs
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem
from tests.countdown import CountdownDeadline
from tests.formulations.colocation_cases import multi_type_problem, two_configurations


def iadeep_problem(seed: int, m: int, devices: int, slowdown_scale: float = 1.0) -> Problem:
    rng = np.random.default_rng(seed)
    problem = make_problem(["gpu"], [devices], np.ones((m, 1)))
    configs = two_configurations(rng, m)
    entries = []
    for k in (2, 3):
        for members in itertools.combinations(range(m), k):
            if rng.random() < 0.5:
                continue
            chosen = tuple(int(c) for c in rng.integers(0, 2, k))
            slow = tuple(float(1 + slowdown_scale * rng.uniform(0.05, 1.5)) for _ in members)
            entries.append(GroupInterference(members, slow, chosen))
    sharing = SharingInputs(gpu_memory_gib=np.full(m, 4.0), configurations=configs,
                            interference=tuple(entries))
    jobs = replace(problem.jobs, arrival_time_s=rng.permutation(m).astype(float),
                   priority_weight=rng.choice([1.0, 2.0], m))
    return replace(problem, jobs=jobs, sharing=sharing)


def brute_force(inst: IadeepInstance) -> float:
    best = 0.0
    k = len(inst.columns)
    # columns are few; every subset of at most `devices` columns
    for size in range(0, min(int(inst.devices.sum()), inst.num_jobs) + 1):
        for chosen in itertools.combinations(range(k), size):
            if is_packing(inst, list(chosen)):
                best = max(best, packing_value(inst, list(chosen)))
    return best


@given(st.integers(0, 10_000), st.integers(1, 6), st.integers(1, 3))
def test_set_packing_matches_brute_force_and_beats_the_greedy(seed: int, m: int,
                                                              devices: int) -> None:
    problem = iadeep_problem(seed, m, devices)
    inst = iadeep_instance(problem, IadeepParameters(device_memory_gib=24.0))
    found = solve_packing(inst, Deadline.never(), 1e-9)
    assert found.status is SolverStatus.OPTIMAL
    assert is_packing(inst, found.chosen)
    expected = brute_force(inst)
    assert abs(found.objective - expected) <= 1e-7
    greedy = least_interference(inst)
    assert is_packing(inst, greedy)
    assert packing_value(inst, greedy) <= found.objective + 1e-9
    for c in found.chosen:
        assert inst.columns[c].memory_gib <= 24.0 + 1e-9


def test_caps_filter_columns() -> None:
    problem = iadeep_problem(1, 6, 2)
    capped = iadeep_instance(problem, IadeepParameters(max_slowdown=1.5, device_memory_gib=16.0))
    for column in capped.columns:
        assert max(column.slowdown) <= 1.5 and column.memory_gib <= 16.0


@given(st.integers(0, 10_000), st.integers(2, 6))
def test_sharing_without_interference_never_lowers_the_value(seed: int, m: int) -> None:
    problem = iadeep_problem(seed, m, devices=max(1, m // 2), slowdown_scale=0.0)
    inst = iadeep_instance(problem, IadeepParameters())
    sharing = problem.sharing
    assert sharing is not None
    alone = iadeep_instance(replace(problem, sharing=replace(sharing, interference=())),
                            IadeepParameters())
    with_groups = solve_packing(inst, Deadline.never(), 1e-9).objective
    without = solve_packing(alone, Deadline.never(), 1e-9).objective
    assert with_groups >= without - 1e-9


def test_policy_reports_configurations_and_the_greedy() -> None:
    problem = iadeep_problem(7, 6, 2)
    plan = solve(problem, PolicyRequest("iadeep", IadeepParameters()), SolveOptions())
    assert plan.certificate.termination is Termination.OPTIMAL
    groups = plan.groups
    assert groups is not None and groups.heuristic_objective is not None
    assert groups.heuristic_objective <= plan.certificate.objective + 1e-9
    assert sum(g.devices for g in groups.groups) <= 2
    for group in groups.groups:
        assert len(group.configurations) == len(group.members)
        assert set(group.configurations) <= {"b32", "b64"}
    compat = solve(problem, PolicyRequest("iadeep", IadeepParameters(), Compat.IADEEP),
                   SolveOptions())
    assert compat.certificate.objective == groups.heuristic_objective


def scan_every_device(inst: IadeepInstance) -> list[int]:
    """IADeep's greedy as published: an arriving job without idle devices looks at every busy
    device for the group (with that device's group, on its type) of least largest slowdown."""
    free = inst.devices.copy()
    devices: list[int] = []
    for i in inst.arrival_order.tolist():
        idle = sorted((column.type_index, c) for c, column in enumerate(inst.columns)
                      if column.members == (i,) and free[column.type_index] >= column.devices)
        if idle:
            c = idle[0][1]
            devices.append(c)
            free[inst.columns[c].type_index] -= inst.columns[c].devices
            continue
        best: tuple[float, int, int] | None = None
        for slot, c in enumerate(devices):
            current = inst.columns[c]
            for option, column in enumerate(inst.columns):
                if (set(column.members) == set(current.members) | {i}
                        and column.type_index == current.type_index
                        and column.devices == current.devices
                        and (best is None or max(column.slowdown) < best[0])):
                    best = (max(column.slowdown), slot, option)
        if best is not None:
            devices[best[1]] = best[2]
    return devices


@given(st.integers(0, 10_000), st.integers(1, 7), st.integers(1, 3))
def test_greedy_matches_the_scan_of_every_busy_device(seed: int, m: int, devices: int) -> None:
    """The greedy's lookup of joinable groups (linear in the columns) chooses what scanning
    every busy device for every listed group chooses."""
    inst = iadeep_instance(iadeep_problem(seed, m, devices), IadeepParameters())
    assert least_interference(inst) == scan_every_device(inst)


@given(st.integers(0, 10_000), st.integers(1, 7), st.integers(0, 7),
       st.sampled_from([8.0, 12.0, 24.0]))
def test_alone_columns_are_every_job_type_and_configuration_that_fits(
    seed: int, m: int, configured: int, device_memory: float
) -> None:
    """One column per job, usable type with its GPU count of devices, and configuration (or
    the job's own memory without configurations) that fits a device, in that order, valued
    at priority weight x relative throughput."""
    problem = multi_type_problem(seed, m)
    sharing = problem.sharing
    assert sharing is not None
    configs = sharing.configurations[:configured]  # the later jobs have none
    # without shared devices every device of a type has `device_memory` free
    problem = replace(problem, sharing=replace(sharing, configurations=configs, devices=None,
                                                  interference=()))
    inst = iadeep_instance(problem, IadeepParameters(device_memory_gib=device_memory))
    alone = list(inst.columns)
    jobs, memory = problem.jobs, sharing.gpu_memory(m)
    expected = []
    for i in range(m):
        own = configs[i] if i < len(configs) and configs[i] else (
            JobConfiguration("", 1.0, float(memory[i])),)
        for j in range(problem.cluster.num_types):
            if not problem.usable[i, j] or jobs.scale_factor[i] > inst.devices[j]:
                continue
            for k, conf in enumerate(own):
                if conf.gpu_memory_gib <= device_memory + 1e-9:
                    expected.append(((i,), (k,), (1.0,),
                                     float(jobs.priority_weight[i] * conf.throughput),
                                     conf.gpu_memory_gib, int(jobs.scale_factor[i]), j))
    assert [tuple(c) for c in alone] == expected


def assert_feasible_groups(problem: Problem, plan: Plan) -> None:
    """Every group on one usable type of its members, within that type's devices, every job
    in at most one group, and only the jobs in groups allocated."""
    assert plan.groups is not None
    used = np.zeros(problem.cluster.num_types, np.int64)
    members = [i for g in plan.groups.groups for i in g.members]
    assert len(members) == len(set(members))
    for group in plan.groups.groups:
        assert 0 <= group.type_index < problem.cluster.num_types
        assert all(problem.usable[i, group.type_index] for i in group.members)
        assert all(problem.jobs.scale_factor[i] == group.devices for i in group.members)
        used[group.type_index] += group.devices
    assert (used <= problem.cluster.count).all()
    allocated = {i for i, s in enumerate(plan.job_status) if s is JobStatus.ALLOCATED}
    assert allocated == set(members)


@given(st.integers(0, 10_000), st.integers(2, 7), st.integers(1, 3))
def test_too_little_time_for_the_set_packing_keeps_the_greedys_plan(
    seed: int, m: int, devices: int
) -> None:
    """With less time left than HiGHS needs before it first reads its limit, the set packing
    is not started (no model is built): the plan is the greedy's (compat iadeep's groups),
    feasible, and reported time-limited (feasible, never optimal) with the greedy's value."""
    problem = iadeep_problem(seed, m, devices)
    policy = PolicyRequest("iadeep", IadeepParameters())
    with pytest.MonkeyPatch.context() as patch:  # an hour is not enough for any instance
        patch.setattr(iadeep, "SET_PACKING_MILP", StartupCost(per_column_pair_s=3600.0))
        plan = solve(problem, policy, SolveOptions(), Deadline.after(3600.0))
    compat = solve(problem, replace(policy, compat=Compat.IADEEP), SolveOptions())
    cert = plan.certificate
    assert cert.termination is Termination.FEASIBLE
    assert cert.model_size == ModelSize() and "not started" in cert.detail
    assert plan.groups is not None and compat.groups is not None
    assert plan.groups.groups == compat.groups.groups
    assert cert.objective == pytest.approx(compat.certificate.objective)
    assert cert.objective == pytest.approx(plan.groups.heuristic_objective)
    assert_feasible_groups(problem, plan)


def test_an_expired_deadline_answers_at_once_with_an_honest_termination() -> None:
    """A deadline already past: nothing is placed (the greedy reaches no arrival, the set
    packing is not built) and the answer says the time limit stopped it."""
    problem = iadeep_problem(3, 6, 2)
    plan = solve(problem, PolicyRequest("iadeep", IadeepParameters()), SolveOptions(),
                 Deadline(0.0))
    cert = plan.certificate
    assert cert.termination is Termination.FEASIBLE and cert.objective == 0.0
    assert cert.model_size == ModelSize() and "after 0 of 6 arrivals" in cert.detail
    assert_feasible_groups(problem, plan)
    assert set(plan.job_status) == {JobStatus.DEFERRED}


@given(st.integers(0, 10_000), st.integers(1, 7), st.integers(1, 3), st.integers(0, 8))
def test_a_greedy_cut_by_the_deadline_is_the_greedy_of_the_arrivals_it_reached(
    seed: int, m: int, devices: int, looks: int
) -> None:
    """Cut after `looks` arrivals, the greedy has placed exactly what it places for those
    arrivals alone (the later jobs wait): a packing."""
    inst = iadeep_instance(iadeep_problem(seed, m, devices), IadeepParameters())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(iadeep, "DEADLINE_CHECK_EVERY", 1)
        chosen, reached = least_interference_until(inst, CountdownDeadline(checks=looks))
    assert reached == min(looks, m)
    reached_only = replace(inst, arrival_order=inst.arrival_order[:reached])
    assert chosen == scan_every_device(reached_only)
    assert is_packing(inst, chosen)


def test_listed_groups_stop_being_read_at_the_deadline() -> None:
    """Past the deadline no listed group is read: the instance says it is incomplete (so the
    set packing over it is never reported as IADeep's optimum) and keeps the jobs alone."""
    problem = iadeep_problem(5, 5, 2)
    full = iadeep_instance(problem, IadeepParameters())
    cut = iadeep_instance(problem, IadeepParameters(), CountdownDeadline(checks=0))
    assert full.complete and full.columns.groups
    assert not cut.complete and not cut.columns.groups
    assert [tuple(c) for c in cut.columns] == [tuple(c) for c in full.columns
                                               if len(c.members) == 1]
