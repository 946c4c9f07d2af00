"""Compat placers (D0.6 test 3, D10): their answers are feasible, the exact placer is never
worse on its own objective, and Blox's four placer quirks, Tiresias's rack-bound YARN rule,
Lucid's consolidation and MAPA's queue behave as the published code does."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from apportion.formulations.placement.compat import COMPAT_PLACERS
from apportion.formulations.placement.exact import place_exact
from apportion.formulations.placement.instance import Demand, PlacementInstance
from apportion.formulations.placement.objective import evaluate, violations
from apportion.solver.deadline import NO_DEADLINE
from apportion.solver.stages import Placer
from apportion.solver.topology import DomainLevel, Topology
from tests.formulations.placement.instances import instances, small_topology

PLACERS = sorted(COMPAT_PLACERS, key=str)


@pytest.mark.parametrize("placer", PLACERS, ids=str)
@given(instance=instances())
def test_compat_is_feasible_and_never_better_than_exact(
    placer: Placer, instance: PlacementInstance
) -> None:
    answer = COMPAT_PLACERS[placer](instance, NO_DEADLINE)
    assert not violations(instance, answer), placer
    compat = evaluate(instance, answer)
    exact = place_exact(instance, starts=(answer,))
    assert exact.score.at_least_as_good(compat), (placer, exact.score, compat)
    if compat.placed_value >= exact.placed_value_bound - 1e-9:  # the bound is on this value
        assert exact.bound is not None and exact.bound <= compat.cost + 1e-6


@pytest.mark.parametrize("placer", PLACERS, ids=str)
@given(instance=instances(inner_weights=False))
def test_exact_alone_dominates_compat_without_intra_node_terms(
    placer: Placer, instance: PlacementInstance
) -> None:
    compat = evaluate(instance, COMPAT_PLACERS[placer](instance, NO_DEADLINE))
    exact = place_exact(instance)
    assert exact.score.at_least_as_good(compat)


def _plain(sizes: list[int], racks: list[int] | None = None,
           occupied: tuple[int, ...] | list[int] = ()) -> tuple[Topology, np.ndarray]:
    topo = small_topology(sizes, racks or [0] * len(sizes), False, [], [])
    mask = np.zeros(topo.num_devices, dtype=bool)
    mask[list(occupied)] = True
    return topo, mask


def _nodes(instance: PlacementInstance, devices: tuple[int, ...]) -> list[int]:
    return sorted(set(instance.topology.device_node[list(devices)].tolist()))


def test_blox_consolidated_uses_only_exact_free_counts() -> None:
    """Quirk 1: node 0 has 3 free devices, the job asks for 2: the best-fit fallback is dead
    code, so Blox leaves it unplaced; the exact placer places it."""
    topo, occupied = _plain([4], occupied=[0])
    instance = PlacementInstance(topo, (Demand((0,), 0, 2),), occupied=occupied)
    answer = COMPAT_PLACERS[Placer.BLOX_CONSOLIDATED](instance, NO_DEADLINE)
    assert answer.devices == ((),)
    assert place_exact(instance).score.placed == 1


def test_blox_scattered_overshoots_and_fails() -> None:
    """Quirk 2: 3 devices wanted, nodes with 2 and 2 free: Blox takes 2 then 2 more, never
    exactly 3, and gives up although 4 are free."""
    topo, _ = _plain([2, 2])
    instance = PlacementInstance(topo, (Demand((0,), 0, 3),))
    assert COMPAT_PLACERS[Placer.BLOX_SCATTERED](instance, NO_DEADLINE).devices == ((),)
    assert place_exact(instance).score.placed == 1
    exact = PlacementInstance(topo, (Demand((0,), 0, 2), Demand((1,), 0, 2)))
    assert all(COMPAT_PLACERS[Placer.BLOX_SCATTERED](exact, NO_DEADLINE).devices)


def test_blox_terminates_without_launching() -> None:
    """Quirk 3: a pending 4-device job ahead of a running 1-device job on a 2 x 2 cluster: Blox
    terminates the running job and still cannot place the pending one (consolidated wants one
    node with exactly 4 free). The exact placer never preempts for nothing."""
    topo, _ = _plain([2, 2])
    demands = (Demand((0,), 0, 4), Demand((1,), 0, 1, previous=(0,), move_cost=2.0))
    instance = PlacementInstance(topo, demands)
    answer = COMPAT_PLACERS[Placer.BLOX_CONSOLIDATED](instance, NO_DEADLINE)
    assert answer.devices == ((), ())
    assert "terminated" in answer.reason(1)
    exact = place_exact(instance)
    assert exact.assignment.devices[1] == (0,)


def test_blox_blocks_the_queue_at_the_first_failure() -> None:
    """Quirk 4: the first job cannot be placed, so a later job that fits waits too."""
    topo, _ = _plain([2, 2])
    instance = PlacementInstance(topo, (Demand((0,), 0, 3), Demand((1,), 0, 1)))
    answer = COMPAT_PLACERS[Placer.BLOX_CONSOLIDATED](instance, NO_DEADLINE)
    assert answer.devices == ((), ())
    assert "head-of-line" in answer.reason(1)
    assert place_exact(instance).score.placed == 2


def test_tiresias_yarn_keeps_jobs_inside_one_rack_and_skips() -> None:
    """Racks of two 4-device nodes: a 6-device job takes an idle node and a node for the
    remainder inside one rack; a job larger than any rack is skipped, the next one placed."""
    topo, occupied = _plain([4, 4, 4, 4], [0, 0, 1, 1], occupied=[0, 1, 2])
    demands = (Demand((0,), 0, 6), Demand((1,), 0, 9), Demand((2,), 0, 1))
    instance = PlacementInstance(topo, demands, occupied=occupied)
    answer = COMPAT_PLACERS[Placer.TIRESIAS_YARN](instance, NO_DEADLINE)
    assert _nodes(instance, answer.devices[0]) == [2, 3]
    assert answer.devices[1] == ()
    assert _nodes(instance, answer.devices[2]) == [0]


def test_lucid_consolidate_takes_the_fullest_node() -> None:
    topo, occupied = _plain([4, 4], occupied=[4, 5])
    instance = PlacementInstance(topo, (Demand((0,), 0, 2),), occupied=occupied)
    answer = COMPAT_PLACERS[Placer.LUCID_CONSOLIDATE](instance, NO_DEADLINE)
    assert _nodes(instance, answer.devices[0]) == [1]


def test_hived_buddy_keeps_large_cells_whole() -> None:
    """One device is free on node 0 (which has 2 in use); a 1-device job goes there (best fit
    at the lowest level), leaving node 1 whole for a later 4-device job."""
    topo, occupied = _plain([4, 4], occupied=[0, 1, 2])
    instance = PlacementInstance(topo, (Demand((0,), 0, 1), Demand((1,), 0, 4)),
                                 occupied=occupied)
    answer = COMPAT_PLACERS[Placer.HIVED_BUDDY](instance, NO_DEADLINE)
    assert answer.devices[0] == (3,)
    assert _nodes(instance, answer.devices[1]) == [1]


def test_exact_places_a_span_limited_job_the_greedy_blocks() -> None:
    """Constrained admission (D1 test 4): a consolidated 4-device job must fit in one node; the
    seed-free greedy order that puts two 2-device jobs on different nodes blocks it."""
    topo, _ = _plain([4, 4])
    demands = (Demand((0,), 0, 2), Demand((1,), 0, 2),
               Demand((2,), 0, 4, max_span_level=DomainLevel.NODE.value))
    instance = PlacementInstance(topo, demands)
    exact = place_exact(instance)
    assert exact.score.placed == 3
    scattered = COMPAT_PLACERS[Placer.BLOX_SCATTERED](instance, NO_DEADLINE)
    assert evaluate(instance, scattered).placed <= 3
