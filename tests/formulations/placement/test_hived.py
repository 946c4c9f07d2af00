"""HiveD's cells (D2 tests 1, 2, 4 and the binding ILP): the static recursion equals the
volume condition and brute force, the runtime volume condition equals brute-force binding
while HiveD's per-level check is only necessary (the counterexample), buddy allocation
within quota never fails and keeps the runtime condition, the LCA pick attains the lowest
common ancestor, and the binding ILP matches brute force."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.datasets.topologies import NodeKind, rack_cluster
from apportion.formulations.placement.hived import (
    bind_cells,
    cell_chain,
    lca_pick,
    per_level_check,
    runtime_slack,
    static_safety,
    static_volume,
)
from apportion.solver.topology import DomainLevel, Topology

NODE, RACK = DomainLevel.NODE, DomainLevel.RACK


def tree(per_node: int, per_rack: int, racks: int) -> Topology:
    return rack_cluster(racks, per_rack, per_node, "gpu").topology


def cells_of(topo: Topology, level: DomainLevel) -> list[list[int]]:
    column = topo.ancestors[:, level.value]
    return [np.flatnonzero(column == u).tolist() for u in topo.domain_of_level(level)]


def brute_bind(topo: Topology, free: np.ndarray, unused: dict[DomainLevel, int]) -> bool:
    """Can the unused quota cells be bound to disjoint entirely free cells? (backtracking,
    largest cells first)."""
    wanted = [level for level in sorted(unused, reverse=True) for _ in range(unused[level])]

    def go(k: int, taken: set[int]) -> bool:
        if k == len(wanted):
            return True
        for cell in cells_of(topo, wanted[k]):
            if all(free[d] and d not in taken for d in cell) and go(k + 1, taken | set(cell)):
                return True
        return False

    return go(0, set())


shapes = st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([1, 2, 4]))


@given(shape=shapes, q_node=st.integers(0, 5), q_rack=st.integers(0, 3))
def test_static_recursion_is_the_volume_condition(shape: tuple[int, int, int], q_node: int,
                                                  q_rack: int) -> None:
    topo = tree(*shape)
    chain = cell_chain(topo, 0)
    quota = {NODE: q_node, RACK: q_rack}
    quota = {level: k for level, k in quota.items() if level in chain.levels and k}
    free = np.ones(topo.num_devices, dtype=bool)
    assert static_safety(chain, quota) == static_volume(chain, quota) == brute_bind(
        topo, free, quota)


@given(shape=shapes, used=st.lists(st.integers(0, 15), max_size=6),
       u_node=st.integers(0, 4), u_rack=st.integers(0, 2))
def test_runtime_volume_condition_is_exact_and_the_per_level_check_necessary(
    shape: tuple[int, int, int], used: list[int], u_node: int, u_rack: int
) -> None:
    topo = tree(*shape)
    chain = cell_chain(topo, 0)
    free = np.ones(topo.num_devices, dtype=bool)
    free[[d for d in used if d < topo.num_devices]] = False
    unused = {level: k for level, k in {NODE: u_node, RACK: u_rack}.items()
              if level in chain.levels and k}
    safe = all(s >= 0 for s in runtime_slack(chain, topo, free, unused))
    assert safe == brute_bind(topo, free, unused)
    if safe:
        assert per_level_check(chain, topo, free, unused)


def test_per_level_check_passes_an_unsafe_state() -> None:
    """Two 4-device racks of 2-device nodes, one device in use; unused quota: one rack and
    two nodes. Free racks 1 >= 1 and free nodes 3 >= 2, yet after the rack only one node
    is left whole."""
    topo = tree(2, 2, 2)
    chain = cell_chain(topo, 0)
    free = np.ones(8, dtype=bool)
    free[0] = False
    unused = {RACK: 1, NODE: 2}
    assert per_level_check(chain, topo, free, unused)
    assert min(runtime_slack(chain, topo, free, unused)) < 0
    assert not brute_bind(topo, free, unused)


@given(steps=st.lists(st.tuples(st.booleans(), st.sampled_from([NODE, RACK]), st.integers(0, 99)),
                      max_size=30))
def test_buddy_allocation_within_quota_never_fails(
    steps: list[tuple[bool, DomainLevel, int]]
) -> None:
    """One tenant owns the whole cluster as 2 racks + 4 nodes of quota (4 racks of 2 nodes of
    2 devices): allocating a cell it has unused quota for always succeeds, on exactly one
    aligned cell, and the runtime condition holds after every step."""
    topo = tree(2, 2, 4)
    chain = cell_chain(topo, 0)
    quota = {RACK: 2, NODE: 4}
    free = np.ones(topo.num_devices, dtype=bool)
    held: list[tuple[DomainLevel, tuple[int, ...]]] = []
    for allocate, level, pick in steps:
        in_use = {lv: sum(1 for x, _ in held if x is lv) for lv in quota}
        if allocate and in_use[level] < quota[level]:
            devices = lca_pick(topo, free, chain.size_of(level))
            assert devices is not None
            column = topo.ancestors[list(devices), level.value]
            assert np.unique(column).size == 1  # one aligned cell of the level
            free[list(devices)] = False
            held.append((level, devices))
        elif held:
            _, devices = held.pop(pick % len(held))
            free[list(devices)] = True
        in_use = {lv: sum(1 for x, _ in held if x is lv) for lv in quota}
        unused = {lv: quota[lv] - in_use[lv] for lv in quota}
        assert min(runtime_slack(chain, topo, free, unused)) >= 0


def lca_level(topo: Topology, devices: tuple[int, ...]) -> int:
    for level in topo.levels_present:
        if np.unique(topo.ancestors[list(devices), level.value]).size == 1:
            return level.value
    return 99


@given(occupied=st.lists(st.integers(0, 15), max_size=10), count=st.integers(1, 8))
def test_lca_pick_attains_the_lowest_common_ancestor(occupied: list[int], count: int) -> None:
    topo = rack_cluster(1, 2, 8, "gpu", kind=NodeKind.DGX1).topology  # 2 DGX-1 nodes
    free = np.ones(topo.num_devices, dtype=bool)
    free[occupied] = False
    options = np.flatnonzero(free).tolist()
    if len(options) < count:
        assert lca_pick(topo, free, count) is None
        return
    best = min(lca_level(topo, c) for c in itertools.combinations(options, count))
    picked = lca_pick(topo, free, count)
    assert picked is not None and len(set(picked)) == count and free[list(picked)].all()
    assert lca_level(topo, picked) == best


@given(bad=st.lists(st.integers(0, 15), max_size=4), q_node=st.integers(0, 4),
       q_rack=st.integers(0, 2))
def test_binding_ilp_matches_brute_force(bad: list[int], q_node: int, q_rack: int) -> None:
    topo = tree(2, 2, 4)
    chain = cell_chain(topo, 0)
    usable = np.ones(topo.num_devices, dtype=bool)
    usable[bad] = False
    quotas = {("a", NODE): q_node, ("b", RACK): q_rack}
    quotas = {key: k for key, k in quotas.items() if k}
    binding = bind_cells(topo, chain, quotas, usable)
    wanted = {NODE: q_node, RACK: q_rack}
    assert binding.feasible == brute_bind(topo, usable, {k: v for k, v in wanted.items() if v})
    if binding.feasible:
        chosen = [c for cells in binding.cells.values() for c in cells]
        devices = [d for c in chosen for d in np.flatnonzero(
            topo.ancestors[:, topo.domain_level[c]] == c).tolist()]
        assert len(devices) == len(set(devices)) and usable[devices].all()
        for (_, level), cells in binding.cells.items():
            assert len(cells) == quotas[next(k for k in quotas if k[1] is level)]


def test_enforced_quotas_keep_a_tenants_node_whole() -> None:
    """Tenant A holds one node of quota on two 4-device nodes and has no job yet. Two 3-device
    jobs of others: placing both would leave no node whole, so with quotas enforced only one
    runs and A's node stays free; A's 4-device guaranteed job then fits. Unenforced, both run
    and the slack reports the broken guarantee."""
    from dataclasses import replace

    from apportion.formulations.placement.exact import place_exact
    from apportion.formulations.placement.hived import quota_slack
    from apportion.formulations.placement.instance import Demand, PlacementInstance
    from apportion.formulations.placement.objective import violations
    from apportion.solver.topology import CellQuota

    topo = tree(4, 2, 1)
    others = (Demand((0,), 0, 3), Demand((1,), 0, 3))
    quota = (CellQuota("A", 0, NODE, 1),)
    enforced = PlacementInstance(topo, others, quotas=quota, enforce_quotas=True)
    result = place_exact(enforced)
    assert result.score.placed == 1 and not violations(enforced, result.assignment)
    used = np.zeros(8, dtype=bool)
    used[[d for ds in result.assignment.devices for d in ds]] = True
    placed = np.array([bool(d) for d in result.assignment.devices])
    assert min(s for _, _, s in quota_slack(enforced, used, placed)) >= 0
    loose = replace(enforced, enforce_quotas=False)
    both = place_exact(loose)
    assert both.score.placed == 2
    used[:] = False
    used[[d for ds in both.assignment.devices for d in ds]] = True
    assert min(s for _, _, s in quota_slack(loose, used, np.ones(2, bool))) < 0
    with_a = replace(enforced, demands=(*others, Demand((2,), 0, 4, guaranteed_tenant="A")))
    answer = place_exact(with_a)
    assert answer.assignment.devices[2] and answer.score.placed == 2
