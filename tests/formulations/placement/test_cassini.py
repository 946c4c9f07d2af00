"""CASSINI's time shifts (D5 tests 1-4): the MILP against brute force over every shift tuple,
complementary duty cycles interleave to no overflow while oversized ones get a positive
proven bound, a loop of three jobs and three links defeats the per-link traversal but not
the MILP, a common shift changes nothing, and the stage reports shifts on a real topology."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations.placement.cassini import (
    ShiftJob,
    ShiftProblem,
    demand_profile,
    overflow,
    solve_shifts,
    traversal_shifts,
)
from apportion.solver.result import Termination
from apportion.solver.topology import CommunicationPhase


def problem(demands: list[list[float]], links: list[tuple[int, ...]],
            capacity: list[float]) -> ShiftProblem:
    jobs = tuple(ShiftJob(a, np.asarray(d, float), used) for a, (d, used) in
                 enumerate(zip(demands, links, strict=True)))
    period = int(np.lcm.reduce([len(d) for d in demands]))
    return ShiftProblem(jobs, np.asarray(capacity, float), 1.0, period)


def brute(p: ShiftProblem) -> float:
    return min(overflow(p, s) for s in itertools.product(*[range(j.period) for j in p.jobs]))


@st.composite
def small_problems(draw: st.DrawFn) -> ShiftProblem:
    count = draw(st.integers(1, 3))
    demands = [draw(st.lists(st.sampled_from([0.0, 1.0, 2.0]), min_size=1, max_size=4))
               for _ in range(count)]
    links = [tuple(sorted(set(draw(st.lists(st.integers(0, 1), min_size=1, max_size=2)))))
             for _ in range(count)]
    capacity = [draw(st.sampled_from([1.0, 2.0, 3.0])) for _ in range(2)]
    return problem(demands, links, capacity)


@given(p=small_problems())
def test_milp_equals_brute_force(p: ShiftProblem) -> None:
    result = solve_shifts(p)
    assert result.termination is Termination.OPTIMAL
    assert result.overflow == pytest.approx(brute(p))
    assert result.overflow == pytest.approx(overflow(p, result.shifts))
    assert all(0 <= k < job.period for k, job in zip(result.shifts, p.jobs, strict=True))


def test_complementary_duty_cycles_interleave() -> None:
    half = [5.0, 5.0, 0.0, 0.0]
    fits = problem([half, half], [(0,), (0,)], [5.0])
    assert overflow(fits, (0, 0)) > 0
    result = solve_shifts(fits)
    assert result.overflow == pytest.approx(0.0) and result.shifts == (0, 2)
    heavy = [8.0, 8.0, 0.0, 0.0]
    over = solve_shifts(problem([heavy, heavy], [(0,), (0,)], [5.0]))
    assert over.bound is not None and over.bound > 0  # each alone exceeds the link
    assert over.overflow == pytest.approx(over.bound)


def test_a_loop_defeats_the_traversal_not_the_milp() -> None:
    """Jobs A, B, C with one busy slot in three; links 0 (A, C), 1 (A, B), 2 (B, C). Each link
    alone prefers its second job one slot later: A->B, B->C, A->C cannot all hold."""
    beat = [4.0, 0.0, 0.0]
    loop = problem([beat, beat, beat], [(0, 1), (1, 2), (0, 2)], [4.0, 4.0, 4.0])
    shifts, consistent = traversal_shifts(loop)
    assert shifts is None and not consistent
    result = solve_shifts(loop)
    assert result.overflow == pytest.approx(0.0) == brute(loop)
    assert len(set(result.shifts)) == 3


@given(p=small_problems(), common=st.integers(0, 11))
def test_a_common_shift_changes_nothing(p: ShiftProblem, common: int) -> None:
    base = tuple(0 for _ in p.jobs)
    moved = tuple((k + common) % job.period for k, job in zip(base, p.jobs, strict=True))
    if all(p.period % job.period == 0 for job in p.jobs) and all(
        common % job.period == common % p.period % job.period for job in p.jobs
    ):
        assert overflow(p, moved) == pytest.approx(overflow(p, base))


@given(iteration=st.floats(0.3, 20.0), slot=st.sampled_from([0.1, 0.25, 0.5]))
def test_period_rounding_is_within_half_a_slot(iteration: float, slot: float) -> None:
    profile = demand_profile((CommunicationPhase(0.0, 0.5, 1.0),), iteration, slot)
    assert abs(profile.size * slot - iteration) <= slot / 2 + 1e-9 or profile.size == 1


def test_stage_reports_shifts_on_shared_uplinks() -> None:
    """Two 6-GPU jobs on three 4-GPU nodes with 100 Gb/s uplinks: each spans two nodes, so
    they share one node and its uplink; both send 80 Gb/s during the first half of a 1 s
    iteration. Unshifted they overflow that uplink by 60 Gb/s for half a second; shifted by
    half an iteration they interleave."""
    from apportion.datasets.topologies import rack_cluster
    from apportion.formulations.placement.demands import Grant
    from apportion.formulations.placement.stage import place_grants, section
    from apportion.solver.stages import PlacementParameters, TimeShiftParameters
    from apportion.solver.topology import PlacementInputs, PlacementJobs
    from apportion.solver.validation import make_problem

    generated = rack_cluster(1, 3, 4, "gpu", node_uplink_gbps=100.0)
    base = make_problem(["gpu"], [12], np.ones((2, 1)), [6, 6])
    inputs = replace(PlacementJobs.defaults(2),
                     phases=((CommunicationPhase(0.0, 0.5, 80.0),),) * 2,
                     iteration_time_s=np.array([1.0, 1.0]),
                     max_span_level=np.array([0, 0]))
    prob = replace(base, cluster=generated.cluster, placement=PlacementInputs(inputs))
    grants = [Grant((0,), 0, 6), Grant((1,), 0, 6)]
    stage = PlacementParameters(time_shifts=TimeShiftParameters(0.1, 10.0))
    placed = place_grants(prob, grants, stage)
    report = section(prob, placed)
    assert report.shift_overflow is not None
    assert report.shift_overflow == pytest.approx(0.0)
    shifts = sorted(placed.jobs[i].time_shift_s for i in (0, 1))
    assert shifts == pytest.approx([0.0, 0.5])
