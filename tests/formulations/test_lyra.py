"""Lyra (B7): reclaiming (greedy vs the exact minimum, by brute force for <= 10 servers, gap
reported) and the elastic phase (multiple-choice knapsack by dynamic programming, against
brute force over the extra workers), with base and extra placement on training and loaned
servers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from apportion.formulations.lyra import lyra
from apportion.formulations.lyra_reclaim import (
    ReclaimInstance,
    exact_reclaim,
    greedy_reclaim,
    preemption,
)
from apportion.solver.deadline import Deadline
from apportion.solver.model import Problem, SolveOptions
from apportion.solver.parameters import LyraParameters, ReclaimMethod
from apportion.solver.result import JobStatus, Termination

from .elastic_cases import elastic_problem, sync_model

OPTIONS = SolveOptions(relative_gap=1e-6)
NEVER = Deadline.never()


def fewest_preempted(instance: ReclaimInstance) -> int:
    L = instance.num_servers
    return min(
        int(preemption(instance, np.isin(np.arange(L), chosen)).sum())
        for chosen in itertools.combinations(range(L), instance.count)
    )


@st.composite
def reclaim_instances(draw: st.DrawFn) -> ReclaimInstance:
    m = draw(st.integers(1, 6))
    L = draw(st.integers(1, 10))
    held = np.array(draw(st.lists(st.integers(0, 3), min_size=m * L, max_size=m * L)))
    slack = np.array(draw(st.lists(st.integers(0, 4), min_size=m, max_size=m)))
    return ReclaimInstance(held.reshape(m, L), slack, draw(st.integers(0, L)))


@given(reclaim_instances())
def test_reclaiming_exact_is_the_minimum_and_greedy_never_beats_it(
    instance: ReclaimInstance,
) -> None:
    """B7: the MILP against brute force over every choice of k of <= 10 servers; the greedy
    picks k servers and preempts at least as many jobs (its gap is reported, not assumed 0)."""
    best = fewest_preempted(instance)
    exact = exact_reclaim(instance)
    assert exact is not None
    assert exact.cost == best and int(exact.chosen.sum()) == instance.count
    assert exact.bound == best
    greedy = greedy_reclaim(instance)
    assert int(greedy.chosen.sum()) == instance.count
    assert greedy.cost >= best
    assert greedy.cost == int(preemption(instance, greedy.chosen).sum())


def recounted_greedy(instance: ReclaimInstance) -> np.ndarray:
    """Lyra's greedy with every server's added cost recounted from scratch at each pick."""
    chosen = np.zeros(instance.num_servers, dtype=bool)
    in_use = instance.held.sum(axis=0)
    for _ in range(instance.count):
        base = int(preemption(instance, chosen).sum())
        best = None
        for server in np.flatnonzero(~chosen):
            trial = chosen.copy()
            trial[server] = True
            key = (int(preemption(instance, trial).sum()) - base, int(in_use[server]), server)
            best = key if best is None or key < best else best
        assert best is not None
        chosen[best[2]] = True
    return chosen


@given(reclaim_instances())
@example(ReclaimInstance(np.array([[1, 0, 2, 1], [0, 1, 0, 0], [1, 2, 2, 1], [1, 1, 2, 0]]),
                         np.array([1, 0, 2, 3]), 3))  # a pick changes later added costs
def test_incremental_greedy_picks_what_a_full_recount_picks(instance: ReclaimInstance) -> None:
    assert np.array_equal(greedy_reclaim(instance).chosen, recounted_greedy(instance))


def test_greedy_reclaiming_can_be_worse_than_the_minimum() -> None:
    """The greedy first returns the two free servers for job 0's slack, then must preempt all
    three; returning servers 1, 2, 3 preempts two."""
    held = np.array([[0, 2, 0, 1], [1, 0, 2, 0], [1, 0, 0, 1]])
    instance = ReclaimInstance(held, np.array([1, 0, 0]), 3)
    assert greedy_reclaim(instance).cost == 3
    exact = exact_reclaim(instance)
    assert exact is not None and exact.cost == 2 == fewest_preempted(instance)


def two_node_problem(current: list[tuple[int, tuple[tuple[int, int], ...]] | None],
                     reclaim: int = 0, **kwargs: object) -> Problem:
    """One type, a training node (4 devices) and two loaned nodes (4 each)."""
    m = len(current)
    return elastic_problem(
        [12], [1e4] * m, models=[sync_model(0.05, 0.0, 0.0)] * m, nodes=[(0, 4), (0, 4), (0, 4)],
        current=current, loaned=[1, 2], reclaim=reclaim, **kwargs,  # type: ignore[arg-type]
    )


def test_extras_go_to_loaned_nodes_and_bases_to_training_nodes() -> None:
    problem = two_node_problem([None, None], min_devices=[2, 2], max_devices=[6, 6])
    out = lyra(problem, LyraParameters(), OPTIONS, NEVER)
    assert out.certificate.termination is Termination.OPTIMAL
    for i in range(2):
        nodes = dict(out.settled.node_devices[i])
        assert nodes.get(0, 0) == 2  # the base on the training node
        assert sum(nodes.values()) == 6  # linear speed-up: every device is worth having


def test_reclaiming_shrinks_elastic_jobs_and_preempts_inelastic_ones() -> None:
    """Job 0 (elastic, base 2) holds 2 on the training node and 2 on loaned node 1; job 1
    (rigid at 4) holds loaned node 2. Asking one node back returns node 1: job 0 loses 2
    devices but keeps its base, so nothing is preempted, and grows back on the training node's
    free devices. Asking two back preempts job 1."""
    current = [(0, ((0, 2), (1, 2))), (0, ((2, 4),))]
    kwargs = {"min_devices": [2, 4], "max_devices": [4, 4]}
    out = lyra(two_node_problem(current, reclaim=1, **kwargs), LyraParameters(), OPTIONS, NEVER)
    assert out.reclaimed_nodes == (1,)
    assert out.preempted is not None and not out.preempted.any()
    assert out.reclaim_certificate is not None and out.reclaim_certificate.objective == 0
    assert dict(out.settled.node_devices[0]) == {0: 4}
    both = lyra(two_node_problem(current, reclaim=2, **kwargs),
                LyraParameters(reclaim_method=ReclaimMethod.EXACT), OPTIONS, NEVER)
    assert both.reclaimed_nodes == (1, 2)
    assert both.preempted is not None and both.preempted.tolist() == [False, True]
    assert both.settled.status[1] is JobStatus.DEFERRED
    assert "preempted" in both.settled.reason[1]


def brute_force_remaining_time(problem: Problem, gpus: int) -> float:
    """min sum_i R_i/f_i(w_i) over every device count per job within its range."""
    from apportion.formulations.elastic_speed import type_options

    options = [type_options(problem, i, 0, 64) for i in range(problem.jobs.num_jobs)]
    best = np.inf
    for combo in itertools.product(*(range(o.num_states) for o in options if o)):
        used = sum(int(o.devices[s]) for o, s in zip(options, combo, strict=True) if o)
        if used <= gpus:
            total = sum(float(problem.jobs.total_steps[i]) / float(o.speed[s])
                        for i, (o, s) in enumerate(zip(options, combo, strict=True)) if o)
            best = min(best, total)
    return float(best)


@given(st.lists(st.tuples(st.floats(1e-3, 0.1), st.floats(0.0, 0.5), st.floats(0.0, 0.05),
                          st.integers(1, 3), st.integers(0, 3), st.floats(1e2, 1e5)),
                min_size=1, max_size=4),
       st.integers(0, 6))
def test_elastic_phase_is_the_knapsack_optimum(
    jobs: list[tuple[float, float, float, int, int, float]], spare: int
) -> None:
    """B7: the DP's plan equals brute force over every worker count per job (non-concave
    speeds included: theta3 > 0 makes large counts slower)."""
    models = [sync_model(a, b, c) for a, b, c, _, _, _ in jobs]
    lo = [base for *_, base, _, _ in jobs]
    hi = [base + extra for *_, base, extra, _ in jobs]
    gpus = sum(lo) + spare
    problem = elastic_problem([gpus], [r for *_, r in jobs], models=models,
                              min_devices=lo, max_devices=hi)
    out = lyra(problem, LyraParameters(), OPTIONS, NEVER)
    assert out.certificate.termination is Termination.OPTIMAL
    assert out.certificate.objective == pytest.approx(
        brute_force_remaining_time(problem, gpus), rel=1e-9)
