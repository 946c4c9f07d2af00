"""Tiresias (D1 tests 1-4, 6): queue bookkeeping at the thresholds and the starvation knob,
the Gittins index against its definition, skip-fit against the brute-force lexicographic
optimum, and exact admission under a consolidation constraint where a greedy placer fails."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations import tiresias
from apportion.formulations.placement.admission import accepted_jobs, restrict_jobs
from apportion.formulations.placement.compat import tiresias_yarn
from apportion.formulations.placement.demands import Grant, demand_for, placement_jobs
from apportion.formulations.placement.instance import PlacementInstance
from apportion.formulations.tiresias import gittins_index, queue_of, skip_fit, solve_policy
from apportion.solver.cluster_topology import topology_of
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import Compat, History, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import (
    TiresiasAdmission,
    TiresiasMode,
    TiresiasParameters,
    TiresiasService,
)
from apportion.solver.result import Plan, Termination
from apportion.solver.solve import solve
from apportion.solver.stages import AdmissionMode, AdmissionParameters, PlacementParameters
from apportion.solver.topology import DomainLevel, PlacementInputs, PlacementJobs
from apportion.solver.validation import make_problem
from tests.countdown import CountdownDeadline
from tests.formulations.placement.instances import small_topology


def problem_with(
    sizes: list[int], gpus: int, executed: list[float] | None = None,
    waiting: list[float] | None = None, running: list[bool] | None = None,
    arrival: list[float] | None = None,
) -> Problem:
    m = len(sizes)
    problem = make_problem(["gpu"], [gpus], np.ones((m, 1)), sizes)
    inputs = PlacementJobs.defaults(m)
    inputs = replace(inputs, executed_time_s=np.asarray(executed or [0.0] * m, float),
                     waiting_time_s=np.asarray(waiting or [0.0] * m, float))
    history = problem.history
    if running is not None:
        history = replace(history, current_type=np.where(running, 0, -1).astype(np.int64),
                          current_devices=np.where(running, sizes, 0).astype(np.int64))
    jobs = problem.jobs if arrival is None else replace(
        problem.jobs, arrival_time_s=np.asarray(arrival, float))
    return replace(problem, jobs=jobs, history=history, placement=PlacementInputs(inputs))


def test_demotion_happens_exactly_at_the_thresholds() -> None:
    thresholds = (3250.0, 7200.0)
    service = np.array([0.0, 3249.999, 3250.0, 7199.0, 7200.0, 1e9])
    assert queue_of(service, thresholds).tolist() == [0, 0, 1, 1, 2, 2]


def test_promotion_exactly_when_the_wait_reaches_rho_times_executed() -> None:
    # one GPU each; executed 4,000 s -> GPU time 4,000 -> queue 1; rho = 2 -> 8,000 s wait
    problem = problem_with([1, 1], 1, executed=[4000.0, 4000.0], waiting=[7999.0, 8000.0])
    plan = solve_policy(problem, TiresiasParameters(promote_knob=2.0), Compat.NONE,
                        SolveOptions(), NO_DEADLINE)
    first, second = plan.admission.jobs
    assert first is not None and second is not None
    assert (first.queue, first.promoted) == (1, False)
    assert (second.queue, second.promoted) == (0, True)
    assert second.executed_time_s == 0.0 and second.waiting_time_s == 0.0
    assert second.admitted and not first.admitted  # queue 0 first, one GPU


def test_gpu_time_and_time_services() -> None:
    problem = problem_with([4, 1], 8, executed=[1000.0, 1000.0])
    gpu = solve_policy(problem, TiresiasParameters(), Compat.NONE, SolveOptions(), NO_DEADLINE)
    assert [a.queue for a in gpu.admission.jobs if a] == [1, 0]  # 4,000 GPU s vs 1,000
    timed = solve_policy(problem, TiresiasParameters(service=TiresiasService.TIME), Compat.NONE,
                         SolveOptions(), NO_DEADLINE)
    assert [a.queue for a in timed.admission.jobs if a] == [0, 0]


def test_lucid_parametrization_has_two_queues() -> None:
    problem = problem_with([1, 1], 2, executed=[17999.0, 18000.0])
    plan = solve_policy(problem, TiresiasParameters(thresholds=(18000.0,)), Compat.NONE,
                        SolveOptions(), NO_DEADLINE)
    assert [a.queue for a in plan.admission.jobs if a] == [0, 1]


def index_by_definition(a: float, samples: list[float], quantum: float = 0.0) -> float:
    """sup over Delta on a fine grid (plus the breakpoints) of P(S-a <= D | S > a) /
    E[min(S-a, D) | S > a], straight from the definition."""
    later = [d for d in samples if d > a]
    grid = sorted({d - a for d in later} | set(np.linspace(0.01, max(later) - a + 1, 400)))
    deltas = [quantum] if quantum > 0 else grid
    best = 0.0
    for delta in deltas:
        prob = sum(1 for d in later if d - a <= delta) / len(later)
        mean = sum(min(d - a, delta) for d in later) / len(later)
        best = max(best, prob / mean)
    return best


@given(samples=st.lists(st.integers(1, 50), min_size=5, max_size=5),
       attained=st.integers(0, 30))
def test_gittins_index_matches_its_definition(samples: list[int], attained: int) -> None:
    if max(samples) <= attained:
        return
    values = [float(x) for x in samples]
    assert abs(gittins_index(attained, np.array(values)) - index_by_definition(attained, values)) \
        <= 1e-9
    assert abs(gittins_index(attained, np.array(values), 7.0)
               - index_by_definition(attained, values, 7.0)) <= 1e-9


def test_memoryless_service_gives_a_constant_index() -> None:
    """A geometric service (half the jobs end after each unit) is memoryless: the index is
    the same at every age (up to the sample's truncation), so 2D-Gittins degenerates to the
    arrival order inside a queue."""
    samples = np.repeat(np.arange(1, 21), 2 ** np.arange(19, -1, -1)).astype(float)
    indices = [gittins_index(a, samples) for a in (0.0, 1.0, 2.0, 3.0, 5.0)]
    assert max(indices) - min(indices) < 1e-3
    assert abs(indices[0] - 0.5) < 1e-3
    problem = problem_with([1, 1, 1], 3, executed=[2.0, 2.0, 2.0],
                           arrival=[20.0, 0.0, 10.0])
    params = TiresiasParameters(mode=TiresiasMode.GITTINS, service_samples=tuple(samples),
                                thresholds=(1e9,))
    plan = solve_policy(problem, params, Compat.NONE, SolveOptions(), NO_DEADLINE)
    assert [a.rank for a in plan.admission.jobs if a] == [2, 0, 1]


def test_decreasing_hazard_orders_like_las() -> None:
    """A mixture of a short and a long geometric service has a decreasing hazard rate: the
    older a job, the less likely it ends soon, so the index falls with attained service and
    2D-Gittins orders like LAS."""
    k = np.arange(1, 121)
    counts = np.round(2**16 * 0.5**k + 2**12 * 0.05 * 0.95 ** (k - 1)).astype(int)
    samples = np.repeat(k, counts).astype(float)
    indices = [gittins_index(float(a), samples) for a in range(12)]
    assert all(b < a for a, b in itertools.pairwise(indices))


def test_compat_quirk_changes_only_the_denominator() -> None:
    samples = np.array([2.0, 4.0, 6.0, 100.0])
    exact = gittins_index(3.0, samples, 2.0)
    quirk = gittins_index(3.0, samples, 2.0, quirk=True)
    # in the quantum: d = 4 (rest 1) and 6 (rest 3 > 2, not done); the quirk sums d = 4
    assert exact == 1 / (1 + 2 + 2)
    assert quirk == 1 / (4 + 2 + 2)


def lexicographic_best(sizes: list[int], order: list[int], capacity: int) -> list[bool]:
    """The admitted indicator vector in rank order that is largest lexicographically among
    all sets fitting the capacity (brute force)."""
    best: tuple[int, ...] | None = None
    for pick in itertools.product((1, 0), repeat=len(order)):
        if sum(sizes[i] for i, p in zip(order, pick, strict=True) if p) <= capacity and (
            best is None or pick > best
        ):
            best = pick
    assert best is not None
    admitted = [False] * len(sizes)
    for i, p in zip(order, best, strict=True):
        admitted[i] = bool(p)
    return admitted


@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=9),
       capacity=st.integers(1, 16), seed=st.integers(0, 1000))
def test_skip_fit_is_the_lexicographic_optimum(sizes: list[int], capacity: int,
                                                seed: int) -> None:
    sizes = [min(s, capacity) for s in sizes]
    order = np.random.default_rng(seed).permutation(len(sizes))
    problem = make_problem(["gpu"], [capacity], np.ones((len(sizes), 1)), sizes)
    admitted = skip_fit(problem, order).chosen >= 0
    assert admitted.tolist() == lexicographic_best(sizes, order.tolist(), capacity)


def test_placement_admission_beats_counts_when_a_consolidated_job_needs_a_node() -> None:
    """Two 3-GPU nodes; ranks A (2), B (2), C (2, skewed: one node). Counts admit all three,
    but Tiresias's placer puts A and B on separate nodes (one node each, first fit) and C no
    longer fits in one node. Placement admission splits B over both nodes and runs all."""
    topo = small_topology([3, 3], [0, 0], False, [], [])
    problem = problem_with([2, 2, 2], 6, arrival=[0.0, 1.0, 2.0])
    problem = replace(problem, cluster=replace(problem.cluster, node_names=("n0", "n1"),
                                               node_type=np.zeros(2, np.int64),
                                               node_devices=np.array([3, 3]),
                                               topology=topo))
    assert problem.placement is not None
    skewed = replace(problem.placement.jobs, tensor_skew=np.array([1.0, 1.0, 3.0]))
    problem = replace(problem, placement=PlacementInputs(skewed))
    params = TiresiasParameters(admission=TiresiasAdmission.PLACEMENT, consolidate_skew_above=2)
    plan = solve_policy(problem, params, Compat.NONE, SolveOptions(), NO_DEADLINE)
    assert plan.certificate.termination is Termination.OPTIMAL
    assert [a.admitted for a in plan.admission.jobs if a] == [True, True, True]
    # the greedy alternative: count admission, then Tiresias's YARN placement in rank order
    stage = PlacementParameters(consolidate_skew_above=2)
    inputs = placement_jobs(problem)
    demands = tuple(demand_for(problem, inputs, stage, Grant((i,), 0, 2)) for i in range(3))
    assert demands[2].max_span_level == DomainLevel.NODE.value
    greedy = tiresias_yarn(PlacementInstance(topology_of(problem.cluster), demands))
    assert [bool(d) for d in greedy.devices] == [True, True, False]


def test_running_jobs_stay_ahead_inside_a_queue_and_lower_queues_wait() -> None:
    problem = problem_with([2, 2, 2], 4, executed=[10.0, 0.0, 5000.0],
                           running=[True, False, True], arrival=[5.0, 0.0, 1.0])
    plan = solve_policy(problem, TiresiasParameters(), Compat.NONE, SolveOptions(), NO_DEADLINE)
    info = [a for a in plan.admission.jobs if a]
    assert [a.rank for a in info] == [0, 1, 2]  # running first inside queue 0
    assert [a.admitted for a in info] == [True, True, False]
    assert plan.job_reason[2].startswith("preempted")
    assert np.allclose(plan.time_share[:, 0], [1, 1, 0])


def test_history_defaults_when_no_state_is_given() -> None:
    problem = make_problem(["gpu"], [2], np.ones((3, 1)), [1, 1, 1])
    problem = replace(problem, history=History.default(3, 1))
    plan = solve_policy(problem, TiresiasParameters(), Compat.NONE, SolveOptions(), NO_DEADLINE)
    assert plan.time_share[:, 0].sum() == 2


def walk_one_job_at_a_time(problem: Problem, order: list[int], free: list[int]) -> list[int]:
    """Skip-fit as the plain one-job-at-a-time walk: the type each job is admitted on."""
    chosen = [-1] * problem.jobs.num_jobs
    for i in order:
        s = int(problem.jobs.scale_factor[i])
        by_speed = sorted(range(problem.cluster.num_types),
                          key=lambda j: (-problem.jobs.throughput[i, j], j))
        for j in by_speed:
            if problem.usable[i, j] and free[j] >= s:
                free[j] -= s
                chosen[i] = j
                break
    return chosen


def test_skip_fit_windows_equal_the_one_job_walk() -> None:
    """On 300 seeded random instances the windowed array walk admits every job on the type the
    plain walk does, whatever the window size, the scale factors, ties in speed, unusable types
    and the free devices (most instances meet several misfits)."""
    rng = np.random.default_rng(11)
    misfits = 0
    for _ in range(300):
        types, jobs = int(rng.integers(1, 5)), int(rng.integers(0, 300))
        counts = rng.integers(1, 40, types)
        sizes = np.minimum(rng.choice([1, 2, 3, 4, 8], jobs), counts.max())
        speeds = rng.choice([0.0, 1.0, 2.0, 3.0], (jobs, types))
        free = rng.integers(0, counts + 1)
        problem = make_problem([f"t{j}" for j in range(types)], counts, speeds, sizes)
        order = rng.permutation(jobs).astype(np.int64)
        window = int(rng.integers(1, 9))
        got = skip_fit(problem, order, free=free.copy(), min_window=window)
        expected = walk_one_job_at_a_time(problem, order.tolist(), free.tolist())
        assert got.chosen.tolist() == expected
        assert got.decided == jobs
        took = got.chosen >= 0
        used = np.bincount(got.chosen[took], problem.jobs.scale_factor[took], types)
        assert got.free.tolist() == (free - used).tolist()
        fastest = np.where(problem.usable, speeds, -1.0).argmax(axis=1)
        misfits += sum(1 for i in range(jobs) if 0 <= expected[i] != fastest[i])
    assert misfits > 500  # jobs admitted on a slower type: the walk's hard part


def congested(jobs: int = 60, seed: int = 3) -> Problem:
    """Three types, fewer devices than demanded, mixed scale factors and speeds: the windowed
    walk meets several misfits (one deadline look each)."""
    rng = np.random.default_rng(seed)
    speeds = rng.choice([0.0, 1.0, 2.0, 4.0], size=(jobs, 3), p=[0.2, 0.3, 0.3, 0.2])
    speeds[:, 0] = np.maximum(speeds[:, 0], 0.5)  # every job can run somewhere
    sizes = rng.choice([1, 2, 4], size=jobs).tolist()
    problem = make_problem(["a", "b", "c"], [9, 7, 5], speeds, sizes)
    running = rng.random(jobs) < 0.4
    executed = rng.choice([0.0, 2000.0, 5000.0], size=jobs)
    inputs = replace(PlacementJobs.defaults(jobs), executed_time_s=executed)
    history = replace(problem.history, current_type=np.where(running, 0, -1).astype(np.int64),
                      current_devices=np.where(running, sizes, 0).astype(np.int64))
    return replace(problem, history=history, placement=PlacementInputs(inputs))


def assert_feasible(problem: Problem, plan: Plan) -> None:
    """Each admitted job holds one usable type whole; no type holds more than its devices."""
    share = plan.time_share
    admitted = share.sum(axis=1) > 0
    assert np.all(share.sum(axis=1) <= 1) and np.all(problem.usable[share > 0])
    held = (share * problem.jobs.scale_factor[:, None]).sum(axis=0)
    assert np.all(held <= problem.cluster.count)
    assert plan.admission is not None
    assert plan.admission.admitted.tolist() == admitted.tolist()


def test_a_deadline_cuts_the_admission_at_a_window_with_the_exact_prefix() -> None:
    """Cut after each number of deadline looks: the jobs decided before the cut get the full
    walk's decisions, the others are not admitted and say so, the plan is feasible and
    `feasible` with a bound the full answer respects; once the looks outlast the walk, the
    answer is the full one, `optimal`."""
    problem = congested()
    m = problem.jobs.num_jobs
    full = solve_policy(problem, TiresiasParameters(), Compat.NONE, SolveOptions(), NO_DEADLINE)
    assert full.certificate.termination is Termination.OPTIMAL
    assert full.admission is not None
    rank = full.admission.rank
    cuts = []
    for checks in range(12):
        plan = solve_policy(problem, TiresiasParameters(), Compat.NONE, SolveOptions(),
                            CountdownDeadline(checks=checks))
        assert_feasible(problem, plan)
        cert = plan.certificate
        stopped = [r.startswith("stopped at the time limit") for r in plan.job_reason]
        if not any(stopped):
            assert cert.termination is Termination.OPTIMAL
            assert np.array_equal(plan.time_share, full.time_share)
            assert plan.job_reason == full.job_reason
            break
        decided = int(rank[np.flatnonzero(stopped)].min())
        cuts.append(decided)
        assert np.all(rank[stopped] >= decided) and sum(stopped) == m - decided
        before = rank < decided
        assert np.array_equal(plan.time_share[before], full.time_share[before])
        assert plan.time_share[~before].sum() == 0
        assert cert.termination is Termination.FEASIBLE
        assert f"jobs from rank {decided} on not decided" in cert.detail
        assert cert.objective is not None and cert.bound is not None
        assert cert.objective <= full.certificate.objective <= cert.bound
    else:
        raise AssertionError("the countdown never outlasted the walk")
    assert cuts[0] == 0 and len(cuts) >= 3 and cuts == sorted(set(cuts))  # several windows


def test_a_past_deadline_admits_nothing_and_says_why() -> None:
    problem = congested(jobs=20)
    plan = solve(problem, PolicyRequest("tiresias", TiresiasParameters()), SolveOptions(),
                 Deadline(time.monotonic() - 1.0))
    assert plan.time_share.sum() == 0
    assert plan.certificate.termination is Termination.FEASIBLE
    assert (plan.certificate.objective, plan.certificate.bound) == (0.0, 20.0)
    assert all(r.startswith("stopped at the time limit: queue") for r in plan.job_reason)


def test_the_placement_checks_stop_at_the_deadline_honestly() -> None:
    """Placement admission cut after each number of deadline looks (inside the placer's checks
    too): every answer is feasible by counts, says which jobs were not decided, and is
    `optimal` only when it is the uncut answer."""
    problem = congested(jobs=12)
    params = TiresiasParameters(admission=TiresiasAdmission.PLACEMENT)
    full = solve_policy(problem, params, Compat.NONE, SolveOptions(), NO_DEADLINE)
    assert full.certificate.termination is Termination.OPTIMAL
    seen = set()
    for checks in range(0, 400, 7):
        plan = solve_policy(problem, params, Compat.NONE, SolveOptions(),
                            CountdownDeadline(checks=checks))
        assert_feasible(problem, plan)
        stopped = sum(r.startswith("stopped at the time limit") for r in plan.job_reason)
        if plan.certificate.termination is Termination.OPTIMAL:
            assert np.array_equal(plan.time_share, full.time_share) and stopped == 0
            seen.add("whole")
        else:
            assert plan.certificate.termination is Termination.FEASIBLE
            if stopped:
                assert f"{12 - stopped} on not decided" in plan.certificate.detail
            seen.add("cut" if stopped else "unproven")
    assert {"whole", "cut"} <= seen


def test_placement_admission_past_its_check_limit_is_not_called_optimal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Beyond `PLACEMENT_CHECKS_MAX` jobs are admitted by counts without a placement check:
    the plan is feasible by counts but not proven the placement-constrained optimum."""
    monkeypatch.setattr(tiresias, "PLACEMENT_CHECKS_MAX", 1)
    problem = problem_with([1, 1, 1], 4)
    plan = solve_policy(problem, TiresiasParameters(admission=TiresiasAdmission.PLACEMENT),
                        Compat.NONE, SolveOptions(), NO_DEADLINE)
    assert plan.time_share[:, 0].tolist() == [1.0, 1.0, 1.0]
    assert plan.certificate.termination is Termination.FEASIBLE
    assert "jobs from rank 1 on decided by counts only (2 admitted)" in plan.certificate.detail
    full = problem_with([3, 2, 2], 4)  # the counts admit nothing more after rank 0: exact
    plan = solve_policy(full, TiresiasParameters(admission=TiresiasAdmission.PLACEMENT),
                        Compat.NONE, SolveOptions(), NO_DEADLINE)
    assert plan.time_share[:, 0].tolist() == [1.0, 0.0, 0.0]
    assert plan.certificate.termination is Termination.OPTIMAL


def test_admission_stage_lays_the_section_over_every_job() -> None:
    """Behind load-based admission the deferred jobs have no admission entry, and the offered
    ones have what Tiresias says on the accepted jobs alone."""
    problem = congested(jobs=30)
    params = AdmissionParameters(AdmissionMode.LOAD_BASED, 0.5)
    index = accepted_jobs(problem, params)
    assert 0 < index.size < 30
    plan = solve(problem, PolicyRequest("tiresias", TiresiasParameters(), admission=params))
    alone = solve_policy(restrict_jobs(problem, index), TiresiasParameters(), Compat.NONE,
                         SolveOptions(), NO_DEADLINE)
    assert plan.admission is not None and alone.admission is not None
    rows = plan.admission.jobs
    assert [i for i, row in enumerate(rows) if row is not None] == index.tolist()
    assert [rows[i] for i in index.tolist()] == list(alone.admission.jobs)


def quirk_by_definition(a: float, samples: list[float], quantum: float) -> float:
    """Tiresias's quirked index straight from its rule: over the quanta (the breakpoints, or
    the fixed one), finished samples over their durations summed plus the quantum for each
    unfinished sample."""
    later = [d for d in samples if d > a]
    deltas = [quantum] if quantum > 0 else sorted({d - a for d in later})
    best = 0.0
    for delta in deltas:
        done = [d for d in later if d - a <= delta]
        best = max(best, len(done) / (sum(done) + delta * (len(later) - len(done))))
    return best


@given(samples=st.lists(st.integers(1, 60), min_size=1, max_size=12),
       attained=st.lists(st.integers(0, 70), min_size=1, max_size=6),
       quantum=st.sampled_from([0.0, 5.0, 20.0]), quirk=st.booleans())
def test_gittins_indices_of_many_jobs_match_one_at_a_time(
    samples: list[int], attained: list[int], quantum: float, quirk: bool
) -> None:
    """The batch over jobs (each distinct attained value once, in chunks) gives each job its
    index from the definition, with and without the quirk, past the largest sample too."""
    values = [float(x) for x in samples]
    got = tiresias.gittins_indices(np.asarray(attained, float), np.asarray(values), quantum,
                                   quirk)
    for a, index in zip(attained, got.tolist(), strict=True):
        probe = float(a)
        if probe >= max(values):  # past every sample: the largest sample below the largest
            below = [d for d in values if d < max(values)]
            if not below:
                assert index == 0.0
                continue
            probe = max(below)
        if quirk:
            expected = quirk_by_definition(probe, values, quantum)
        else:
            expected = index_by_definition(probe, values, quantum)
        assert abs(index - expected) <= 1e-9 * max(1.0, expected)


def test_a_deadline_leaves_the_later_gittins_indices_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Indices are computed one attained value per deadline look (here), lowest first; cut,
    the jobs without one come after the indexed jobs of their queue, by arrival, and the
    order is the policy's up to the queue of the first of them."""
    samples = tuple(float(x) for x in (10, 20, 30, 60, 100, 400))
    monkeypatch.setattr(tiresias, "GITTINS_CHUNK", len(samples))  # one value per chunk
    executed = [40.0, 5.0, 25.0, 5.0, 15.0, 0.0]  # queues 2, 0, 1, 0, 1, 0
    problem = problem_with([1] * 6, 3, executed=executed, arrival=[5, 4, 3, 2, 1, 0])
    params = TiresiasParameters(mode=TiresiasMode.GITTINS, service_samples=samples,
                                thresholds=(10.0, 30.0), service=TiresiasService.TIME)
    full = tiresias.admission_order(problem, params, Compat.NONE)
    assert (full.unindexed, full.exact) == (0, 6)
    distinct = sorted(set(executed))
    exact = []
    for looks in range(len(distinct) + 1):
        cut = tiresias.admission_order(problem, params, Compat.NONE,
                                       CountdownDeadline(checks=looks))
        indexed = [e in distinct[:looks] for e in executed]
        assert (~np.isnan(cut.index)).tolist() == indexed
        assert cut.unindexed == indexed.count(False)
        assert np.array_equal(cut.index[indexed], full.index[indexed])
        for q in range(3):
            mine = [i for i in cut.order.tolist() if cut.queue[i] == q]
            head = [i for i in full.order.tolist() if cut.queue[i] == q and indexed[i]]
            tail = sorted((i for i in mine if not indexed[i]),
                          key=lambda i: problem.jobs.arrival_time_s[i])
            assert mine == head + tail
        assert cut.order[:cut.exact].tolist() == full.order[:cut.exact].tolist()
        exact.append(cut.exact)
    assert exact == [0, 0, 3, 3, 5, 6]  # jobs of the queues before the first without index


def test_a_cut_ranking_with_a_whole_walk_is_feasible_with_the_prefix_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The walk decides every job but the indices were cut: not `optimal`; the bound counts
    the jobs admitted in the queues ranked exactly plus every job after them."""
    samples = tuple(float(x) for x in (10, 20, 30, 60, 100, 400))
    monkeypatch.setattr(tiresias, "GITTINS_CHUNK", len(samples))  # one value per chunk
    executed = [40.0, 5.0, 25.0, 5.0, 15.0, 0.0]  # queues 2, 0, 1, 0, 1, 0
    problem = problem_with([1] * 6, 4, executed=executed)
    params = TiresiasParameters(mode=TiresiasMode.GITTINS, service_samples=samples,
                                thresholds=(10.0, 30.0), service=TiresiasService.TIME)
    whole = tiresias.admit(problem, params, Compat.NONE, NO_DEADLINE, NO_DEADLINE)
    assert whole.certificate.termination is Termination.OPTIMAL
    cut = tiresias.admit(problem, params, Compat.NONE, CountdownDeadline(checks=2), NO_DEADLINE)
    assert cut.certificate.termination is Termination.FEASIBLE
    assert "3 jobs ranked without their Gittins index" in cut.certificate.detail
    assert "not decided" not in cut.certificate.detail
    assert (cut.certificate.objective, cut.certificate.bound) == (4.0, 3.0 + 3.0)
    assert_feasible(problem, cut)
