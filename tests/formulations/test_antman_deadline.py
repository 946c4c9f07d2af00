"""AntMan at scale and under a deadline: the heap first fit and the pointer placement of
waiting guaranteed jobs choose what a scan of every device chooses; the candidate pass in
blocks and the sparse extra slowdowns equal their dense definitions; every stage cut by a
countdown deadline (or an expired one) keeps what it reached, the MIP is not started when it
could not finish or read its limit in time, the answer is a feasible plan that says what was
cut, and it is optimal only when its bound proves it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations import antman
from apportion.formulations.antman import (
    AntmanInstance,
    _candidates,
    _extra_slowdowns,
    _guaranteed_devices,
    antman_instance,
    assignment_value,
    feasible,
    fitting_bound,
    least_utilized,
    least_utilized_until,
    solve_assignment,
)
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import AntmanParameters
from apportion.solver.result import JobStatus, Termination
from apportion.solver.sharing import GroupInterference
from apportion.solver.solve import solve
from tests.countdown import CountdownDeadline, ReservingDeadline
from tests.formulations.colocation_cases import check_groups_on_types, multi_type_problem
from tests.formulations.test_antman import antman_problem, brute_force, random_instance

_EPS = 1e-9


def typed_instance(seed: int, jobs: int, devices: int, types: int,
                   weight: float = 0.0) -> AntmanInstance:
    """Devices of `types` accelerator types (ties in utilization on purpose), jobs that can use
    a random subset of the types, extra slowdowns on some pairs."""
    rng = np.random.default_rng(seed)
    used = rng.choice([0.0, 4.0, 8.0, 12.0, 17.0], devices)
    util = rng.choice([0.0, 0.2, 0.5, 0.85], devices)
    delta = np.where(rng.random((jobs, devices)) < 0.3,
                     rng.choice([0.05, 0.1, 0.3], (jobs, devices)), 0.0)
    return AntmanInstance(
        jobs=np.arange(jobs),
        value=rng.choice([1.0, 2.0, 3.0], jobs),
        memory=rng.choice([2.0, 5.0, 9.0], jobs),
        utilization=rng.choice([0.1, 0.25, 0.4], jobs),
        memory_room=24.0 - used,
        utilization_room=1.0 - util,
        used_memory=used,
        device_utilization=util,
        budget=rng.choice([0.0, 0.15, 0.4, np.inf], devices),
        delta=sp.csr_matrix(delta),
        slowdown_weight=weight,
        job_types=rng.random((jobs, types)) < 0.7,
        device_type=rng.integers(0, types, devices),
    )


def scan_first_fit(inst: AntmanInstance, busy_utilization: float,
                   busy_memory_gib: float) -> np.ndarray:
    """AntMan's first fit as a scan of every device per job (the rule's plain statement)."""
    memory_left = inst.memory_room.copy()
    util_left = inst.utilization_room.copy()
    budget_left = inst.budget.copy()
    used = inst.used_memory.copy()
    util = inst.device_utilization.copy()
    delta = inst.delta.toarray()
    usable = inst.job_types[:, inst.device_type]
    device = np.full(inst.value.size, -1, np.int64)
    for o in range(inst.value.size):
        ok = (usable[o] & (util < busy_utilization) & (used < busy_memory_gib)
              & (inst.memory[o] <= memory_left + _EPS)
              & (inst.utilization[o] <= util_left + _EPS)
              & (delta[o] <= budget_left + _EPS))
        candidates = np.nonzero(ok)[0]
        if candidates.size == 0:
            continue
        d = int(candidates[np.argmin(util[candidates])])
        device[o] = d
        memory_left[d] -= inst.memory[o]
        util_left[d] -= inst.utilization[o]
        budget_left[d] -= delta[o, d]
        used[d] += inst.memory[o]
        util[d] += inst.utilization[o]
    return device


@given(st.integers(0, 10_000), st.integers(1, 25), st.integers(1, 12), st.integers(1, 3),
       st.sampled_from([(0.8, 16.0), (1.0, 30.0), (0.3, 6.0)]))
def test_the_heap_first_fit_chooses_what_a_scan_chooses(
    seed: int, jobs: int, devices: int, types: int, busy: tuple[float, float]
) -> None:
    inst = typed_instance(seed, jobs, devices, types)
    device = least_utilized(inst, *busy)
    assert device.tolist() == scan_first_fit(inst, *busy).tolist()
    assert feasible(inst, device)


@given(st.integers(0, 10_000), st.integers(1, 12), st.integers(1, 6), st.integers(0, 14))
def test_a_first_fit_cut_after_k_jobs_is_the_first_fit_of_those_jobs(
    seed: int, jobs: int, devices: int, looks: int
) -> None:
    inst = typed_instance(seed, jobs, devices, 2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(antman, "DEADLINE_CHECK_EVERY", 1)
        device, reached = least_utilized_until(inst, 0.8, 16.0, CountdownDeadline(checks=looks))
    full = least_utilized(inst, 0.8, 16.0)
    assert reached == min(looks, jobs)
    assert device[:reached].tolist() == full[:reached].tolist()
    assert (device[reached:] == -1).all()


def test_an_expired_deadline_places_no_opportunistic_job() -> None:
    inst = typed_instance(3, 10, 4, 1)
    device, reached = least_utilized_until(inst, 1.0, 30.0, Deadline(0.0))
    assert reached == 0 and (device == -1).all()


def scan_guaranteed_devices(problem: Problem) -> tuple[np.ndarray, list[int]]:
    """Waiting guaranteed jobs in arrival order, each on the lowest-index free devices of the
    first type (cluster order) where it has throughput and enough free devices (a scan)."""
    sharing = problem.sharing
    assert sharing is not None and sharing.devices is not None
    devices, jobs = sharing.devices, problem.jobs
    holder = devices.guaranteed_job.copy()
    opportunistic = sharing.opportunistic_jobs(jobs.num_jobs)
    holding = np.zeros(jobs.num_jobs, bool)
    holding[holder[holder >= 0]] = True
    waiting = []
    for i in np.lexsort((np.arange(jobs.num_jobs), jobs.arrival_time_s)).tolist():
        if opportunistic[i] or holding[i]:
            continue
        free = (holder < 0) & (devices.used_memory_gib <= _EPS) & (devices.utilization <= _EPS)
        for j in np.nonzero(jobs.throughput[i] > 0)[0].tolist():
            candidates = np.nonzero(free & (devices.type_index == j))[0]
            if candidates.size >= jobs.scale_factor[i]:
                holder[candidates[:jobs.scale_factor[i]]] = i
                break
        else:
            waiting.append(i)
    return holder, waiting


@given(st.integers(0, 10_000), st.integers(1, 9), st.integers(0, 12))
def test_guaranteed_jobs_take_what_a_scan_gives_them_until_the_deadline(
    seed: int, m: int, looks: int
) -> None:
    """Uncut, the pointer placement equals a scan of the free devices; cut after `looks`
    waiting jobs, those keep what the scan gave them and every later one waits."""
    problem = multi_type_problem(seed, m, running=False)
    holder, waiting, _, cut = _guaranteed_devices(problem)
    expected, expected_waiting = scan_guaranteed_devices(problem)
    assert not cut
    assert holder.tolist() == expected.tolist() and waiting == expected_waiting
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(antman, "DEADLINE_CHECK_EVERY", 1)
        early, late, reasons, cut = _guaranteed_devices(problem, CountdownDeadline(checks=looks))
    reached = [i for i in np.unique(holder[holder >= 0]).tolist()] + expected_waiting
    assert cut == (len(reached) > looks)
    for i in set(np.unique(early[early >= 0]).tolist()):
        assert (early == i).tolist() == (holder == i).tolist()
    for i, why in zip(late, reasons, strict=True):
        if i not in expected_waiting:
            assert why == "not given free devices before the time limit"
            assert not (early == i).any()


@given(st.integers(0, 10_000), st.integers(1, 9))
def test_sparse_extra_slowdowns_are_the_dense_definition(seed: int, m: int) -> None:
    """delta[o, d] = the extra slowdown of the job holding d with o (a later entry for the
    same two jobs replaces an earlier one), 0 without a holder or an entry."""
    problem = multi_type_problem(seed, m, running=False)
    rng = np.random.default_rng(seed)
    sharing = problem.sharing
    assert sharing is not None
    pairs = [tuple(int(x) for x in rng.choice(m, 2, replace=False)) for _ in range(2 * m)
             if m >= 2]
    entries = tuple(GroupInterference((a, b), (float(rng.uniform(0.9, 1.6)),
                                               float(rng.uniform(0.9, 1.6))))
                    for a, b in pairs)
    problem = replace(problem, sharing=replace(sharing, interference=entries))
    holder, *_ = _guaranteed_devices(problem)
    opp = np.nonzero(problem.sharing.opportunistic_jobs(m))[0]  # type: ignore[union-attr]
    extra = np.zeros((m, m))
    for entry in entries:
        a, b = entry.jobs
        extra[a, b] = max(0.0, entry.slowdown[0] - 1)
        extra[b, a] = max(0.0, entry.slowdown[1] - 1)
    dense = np.where(holder[None, :] >= 0, extra[np.maximum(holder, 0)[None, :], opp[:, None]],
                     0.0)
    assert np.array_equal(_extra_slowdowns(problem, holder, opp).toarray(), dense)


@given(st.integers(0, 10_000), st.integers(1, 20), st.integers(1, 12), st.integers(1, 3),
       st.sampled_from([0.0, 1.0]))
def test_the_candidate_pass_in_blocks_equals_one_pass(
    seed: int, jobs: int, devices: int, types: int, weight: float
) -> None:
    """Blocks of one job, with the pairs restricted to each job's 3 roomiest devices when more
    than 10 fit, give the pairs and capacity-free bound of a single block."""
    inst = typed_instance(seed, jobs, devices, types, weight)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(antman, "MAX_ASSIGNMENT_PAIRS", 10)
        patch.setattr(antman, "DEVICES_PER_JOB", 3)
        whole = _candidates(inst, Deadline.never())
        patch.setattr(antman, "BLOCK_PAIRS", 1)
        blocks = _candidates(inst, Deadline.never())
    assert whole is not None and blocks is not None
    assert blocks[0].tolist() == whole[0].tolist() and blocks[1].tolist() == whole[1].tolist()
    assert blocks[2:] == whole[2:]


@given(st.integers(0, 10_000), st.integers(1, 6), st.integers(1, 3), st.sampled_from([0, 1.0]))
def test_the_fitting_bound_is_at_least_the_optimum(seed: int, jobs: int, devices: int,
                                                   weight: float) -> None:
    inst = random_instance(seed, jobs, devices, weight=weight)
    assert fitting_bound(inst) >= brute_force(inst) - 1e-9


def test_a_candidate_pass_cut_by_the_deadline_does_not_start_the_mip() -> None:
    inst = typed_instance(5, 8, 6, 2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(antman, "BLOCK_PAIRS", 1)
        assert _candidates(inst, CountdownDeadline(checks=3)) is None
        found = solve_assignment(inst, CountdownDeadline(checks=3), 1e-9)
    assert (found.device == -1).all() and found.objective == 0.0
    assert "not started" in found.detail and found.status.limit_reached
    assert found.bound == fitting_bound(inst)


@pytest.mark.parametrize("allowance", ["CANDIDATE_S_PER_PAIR", "MIP_SETUP_S_PER_NONZERO"])
def test_a_mip_that_could_not_finish_or_read_its_limit_in_time_is_not_started(
    allowance: str,
) -> None:
    """With less time left than the candidate pass or HiGHS's setup needs (any time, by
    making the allowance huge), no model is built: the plan is the first fit's, feasible, and
    it says why; an unbounded deadline always starts."""
    problem = antman_problem(4)
    request = PolicyRequest("antman", AntmanParameters())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(antman, allowance, 1e9)
        plan = solve(problem, request, SolveOptions(), Deadline.after(3600.0))
        unbounded = solve(problem, request, SolveOptions(), Deadline.never())
    compat = solve(problem, replace(request, compat=Compat.ANTMAN), SolveOptions())
    cert = plan.certificate
    assert "not started" in cert.detail
    assert cert.objective == compat.certificate.objective
    assert plan.job_status == compat.job_status
    check_groups_on_types(problem, plan, same_gang=False)
    assert "not started" not in unbounded.certificate.detail
    assert unbounded.certificate.model_size.variables > 0


def test_a_first_fit_that_reaches_the_bound_is_optimal_without_the_mip() -> None:
    """Every guest fits a device without slowing anyone: the first fit's value is the bound,
    so the plan is optimal although the MIP was not started; when the first fit stays below
    the bound (a budget binds), the same plan is only feasible."""
    request = PolicyRequest("antman", AntmanParameters())
    roomy = antman_problem(2)
    tight = antman_problem(3, guaranteed=1, devices=1)  # one device, budget for one guest
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(antman, "MIP_SETUP_S_PER_NONZERO", 1e9)
        reached = solve(roomy, request, SolveOptions(), Deadline.after(3600.0))
        below = solve(tight, request, SolveOptions(), Deadline.after(3600.0))
    assert reached.certificate.termination is Termination.OPTIMAL
    assert "reaches the bound" in reached.certificate.detail
    assert reached.certificate.objective == reached.certificate.bound
    assert below.certificate.termination is Termination.FEASIBLE
    assert below.certificate.objective is not None and below.certificate.bound is not None
    assert below.certificate.objective < below.certificate.bound


@pytest.mark.parametrize("compat", [Compat.NONE, Compat.ANTMAN])
def test_an_expired_deadline_answers_with_a_plan_that_says_what_was_cut(compat: Compat) -> None:
    """Past the deadline no waiting guaranteed job takes a device and no guest is placed; the
    jobs already holding devices keep them; the plan is feasible, never optimal, and says
    so."""
    problem = antman_problem(4)
    plan = solve(problem, PolicyRequest("antman", AntmanParameters(), compat), SolveOptions(),
                 Deadline(0.0))
    cert = plan.certificate
    check_groups_on_types(problem, plan, same_gang=False)
    assert "waiting guaranteed jobs not all given free devices" in cert.detail
    assert "first fit cut after 0 of 4" in cert.detail
    assert cert.termination is (Termination.FEASIBLE if compat is Compat.NONE
                                else Termination.HEURISTIC)
    assert plan.job_status[0] is JobStatus.ALLOCATED  # held device 0 before
    assert all(s is JobStatus.DEFERRED for s in plan.job_status[1:])
    assert "before the time limit" in plan.job_reason[1]


def test_the_stages_before_the_plan_stop_at_its_reserve() -> None:
    """The guaranteed placement, the first fit and the MIP read the deadline that leaves the
    plan its time: with that one past (and the request's own far away) all three are cut, and
    the plan is still built."""
    problem = antman_problem(4)
    plan = solve(problem, PolicyRequest("antman", AntmanParameters()), SolveOptions(),
                 ReservingDeadline())
    cert = plan.certificate
    assert "waiting guaranteed jobs not all given free devices" in cert.detail
    assert "first fit cut after 0 of 4" in cert.detail and "not started" in cert.detail
    check_groups_on_types(problem, plan, same_gang=False)


@given(st.integers(0, 10_000), st.integers(1, 9), st.sampled_from([0, 1, 2, 5]))
def test_a_plan_cut_anywhere_is_feasible_and_never_claims_more_than_it_has(
    seed: int, m: int, looks: int
) -> None:
    problem = multi_type_problem(seed, m, running=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(antman, "DEADLINE_CHECK_EVERY", 1)
        plan = solve(problem, PolicyRequest("antman", AntmanParameters()), SolveOptions(),
                     CountdownDeadline(checks=looks))
    check_groups_on_types(problem, plan, same_gang=False)
    cert = plan.certificate
    assert cert.objective is not None
    if cert.bound is not None:
        assert cert.objective <= cert.bound + 1e-9
    if cert.termination is Termination.OPTIMAL:
        assert "waiting guaranteed jobs not all" not in cert.detail
    holder, *_ = _guaranteed_devices(problem)
    inst = antman_instance(problem, AntmanParameters(), holder)
    assert assignment_value(inst, least_utilized(inst, 0.8, 16.0)) >= 0.0
