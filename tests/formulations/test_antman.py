"""AntMan (D7): the assignment MIP against brute force, capacities and budgets, AntMan's first
fit feasible and never better, the guaranteed plan independent of opportunistic jobs, and a
larger U_max never lowering the optimum."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations.antman import (
    AntmanInstance,
    assignment_value,
    feasible,
    least_utilized,
    solve_assignment,
)
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import AntmanParameters
from apportion.solver.result import JobStatus, Termination
from apportion.solver.sharing import GroupInterference, SharedDevices, SharingInputs
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem


def random_instance(seed: int, jobs: int, devices: int, u_max: float = 1.0,
                    weight: float = 0.0) -> AntmanInstance:
    rng = np.random.default_rng(seed)
    used = rng.uniform(0, 16, devices)
    util = rng.uniform(0, 0.9, devices)
    return AntmanInstance(
        jobs=np.arange(jobs),
        value=rng.choice([1.0, 2.0, 3.0], jobs),
        memory=rng.uniform(1, 10, jobs),
        utilization=rng.uniform(0.05, 0.5, jobs),
        memory_room=24.0 - used,
        utilization_room=u_max - util,
        used_memory=used,
        device_utilization=util,
        budget=rng.choice([0.0, 0.15, 0.4, np.inf], devices),
        delta=sp.csr_matrix(rng.choice([0.0, 0.05, 0.1, 0.3], (jobs, devices))),
        slowdown_weight=weight,
        job_types=rng.random((jobs, devices)) < 0.8,  # a type per device: any usable pairs
        device_type=np.arange(devices),
    )


def brute_force(inst: AntmanInstance) -> float:
    n_o, n_d = inst.value.size, inst.memory_room.size
    best = 0.0
    for choice in itertools.product(range(-1, n_d), repeat=n_o):
        device = np.array(choice, np.int64)
        if feasible(inst, device):
            best = max(best, assignment_value(inst, device))
    return best


@given(st.integers(0, 10_000), st.integers(1, 6), st.integers(1, 3), st.sampled_from([0, 1.0]))
def test_assignment_matches_brute_force(seed: int, jobs: int, devices: int,
                                        weight: float) -> None:
    inst = random_instance(seed, jobs, devices, weight=weight)
    found = solve_assignment(inst, Deadline.never(), 1e-9)
    assert found.status is SolverStatus.OPTIMAL
    assert feasible(inst, found.device)
    expected = brute_force(inst)
    assert abs(found.objective - expected) <= 1e-7
    assert found.bound is not None and found.bound >= expected - 1e-7
    heuristic = least_utilized(inst, 0.8, 16.0)
    assert feasible(inst, heuristic)
    assert assignment_value(inst, heuristic) <= found.objective + 1e-9


@given(st.integers(0, 10_000), st.integers(1, 20), st.integers(1, 8))
def test_a_larger_utilization_cap_never_lowers_the_optimum(seed: int, jobs: int,
                                                           devices: int) -> None:
    low = solve_assignment(random_instance(seed, jobs, devices, u_max=0.8), Deadline.never(),
                           1e-9)
    high = solve_assignment(random_instance(seed, jobs, devices, u_max=1.0), Deadline.never(),
                            1e-9)
    assert high.objective >= low.objective - 1e-7


def antman_problem(opportunistic: int, guaranteed: int = 3, devices: int = 4) -> Problem:
    m = guaranteed + opportunistic
    problem = make_problem(["gpu"], [devices], np.ones((m, 1)))
    jobs = replace(problem.jobs, arrival_time_s=np.arange(m, dtype=float))
    holder = np.full(devices, -1, np.int64)
    holder[0] = 0  # job 0 already holds device 0; jobs 1.. wait for free devices
    shared = SharedDevices(
        ids=tuple(f"d{k}" for k in range(devices)),
        type_index=np.zeros(devices, np.int64),
        node=("",) * devices,
        memory_gib=np.full(devices, 24.0),
        used_memory_gib=np.array([10.0] + [0.0] * (devices - 1)),
        utilization=np.array([0.5] + [0.0] * (devices - 1)),
        guaranteed_job=holder,
        slowdown_budget=np.full(devices, 0.1),
    )
    flags = np.arange(m) >= guaranteed
    interference = tuple(
        GroupInterference((0, o), (1.08, 1.3)) for o in range(guaranteed, m)
    )
    sharing = SharingInputs(
        gpu_memory_gib=np.full(m, 6.0),
        gpu_utilization=np.full(m, 0.3),
        opportunistic=flags,
        devices=shared,
        interference=interference,
    )
    return replace(problem, jobs=jobs, sharing=sharing)


def test_guaranteed_plan_is_the_same_with_or_without_opportunistic_jobs() -> None:
    alone = solve(antman_problem(0), PolicyRequest("antman", AntmanParameters()), SolveOptions())
    mixed = solve(antman_problem(4), PolicyRequest("antman", AntmanParameters()), SolveOptions())
    assert alone.groups is not None and mixed.groups is not None

    def holders(plan: object) -> dict[int, tuple[str, ...]]:
        section = plan.groups  # type: ignore[attr-defined]
        return {g.members[0]: g.device_ids for g in section.groups if g.members[0] < 3}

    assert holders(alone) == holders(mixed)
    assert mixed.certificate.termination is Termination.OPTIMAL
    # device 0 (budget 0.1, each guest +0.08) takes one guest; every placed guest fits
    guests = [i for i in range(3, 7) if mixed.job_status[i] is JobStatus.ALLOCATED]
    assert guests
    group0 = next(g for g in mixed.groups.groups if g.members[0] == 0)
    assert len(group0.members) <= 2
    assert group0.slowdown[0] <= 1.1 + 1e-12
    heuristic = solve(antman_problem(4), PolicyRequest("antman", AntmanParameters(),
                                                      Compat.ANTMAN), SolveOptions())
    assert heuristic.certificate.termination is Termination.HEURISTIC
    assert heuristic.certificate.objective is not None
    assert heuristic.certificate.objective <= mixed.certificate.objective + 1e-9


def test_the_slowdown_budget_binds_on_a_shared_device() -> None:
    """One device held by a guaranteed job with budget 0.1; each guest adds 0.08 and would fit
    twice by memory and compute: the budget admits one."""
    problem = antman_problem(3, guaranteed=1, devices=1)
    sharing = problem.sharing
    assert sharing is not None
    sharing = replace(sharing, gpu_utilization=np.full(4, 0.1), gpu_memory_gib=np.full(4, 3.0))
    plan = solve(replace(problem, sharing=sharing), PolicyRequest("antman", AntmanParameters()),
                 SolveOptions())
    assert plan.groups is not None
    guests = next(g for g in plan.groups.groups if g.members[0] == 0).members[1:]
    assert len(guests) == 1
    assert plan.certificate.termination is Termination.OPTIMAL
