"""Tiresias (D1 tests 1-4, 6): queue bookkeeping at the thresholds and the starvation knob,
the Gittins index against its definition, skip-fit against the brute-force lexicographic
optimum, and exact admission under a consolidation constraint where a greedy placer fails."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations.placement.compat import tiresias_yarn
from apportion.formulations.placement.demands import Grant, demand_for, placement_jobs
from apportion.formulations.placement.instance import PlacementInstance
from apportion.formulations.tiresias import gittins_index, queue_of, skip_fit, solve_policy
from apportion.solver.cluster_topology import topology_of
from apportion.solver.deadline import NO_DEADLINE
from apportion.solver.model import Compat, History, Problem, SolveOptions
from apportion.solver.parameters import (
    TiresiasAdmission,
    TiresiasMode,
    TiresiasParameters,
    TiresiasService,
)
from apportion.solver.result import Termination
from apportion.solver.stages import PlacementParameters
from apportion.solver.topology import DomainLevel, PlacementInputs, PlacementJobs
from apportion.solver.validation import make_problem
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
    admitted = skip_fit(problem, order) >= 0
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
