"""Synergy (CPU cores and host memory per job) through the event loop.

* From the run's tables only: no round gives more devices, cores or memory than a node has
  (cores and memory held on each node in proportion to the job's devices there), and the work
  done equals each job's total when every job progresses at its throughput times its
  profile's value at the cores and memory it got over the value at its fair point (computed
  here from the profile, not read from the engine); the runs do give some job more than its
  fair share (else the checks say nothing). Nodes from a cluster file keep their own cores
  and memory; nodes without them get Synergy's 3 cores and 62.5 GiB per GPU.
* By hand: two 1-GPU jobs on one 9-core node; the one whose profile doubles at 6 cores gets
  them and finishes in half the time; with a flat profile it takes the full time.
* Without profiles the run is refused naming --resource-profiles; a round over a node's cores
  is an error; the snapshots (profiles, node cores and memory) round-trip through the
  service's conversion.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from apportion.datasets.cluster import ClusterSpec
from apportion.simulator.cluster import parse_cluster, read_cluster_file
from apportion.simulator.drivers import Grant
from apportion.simulator.engine import check_host_resources
from apportion.simulator.errors import SimulationError, SimulationInputError
from apportion.simulator.host_resources import attach_profiles
from apportion.simulator.metrics import RunResult
from apportion.simulator.workload import Workload
from apportion.solver.sharing import ResourceGrid
from tests.simulator.tiny import check_invariants, run, workload


def profiled_workload(seed: int = 0) -> Workload:
    """Ten 1- and 2-GPU jobs of four throughputs with builtin (synthetic) profiles."""
    jobs = [(f"s{k}", 50.0 * k, 1 + (k % 3 == 2), 800.0 + 100.0 * k, [1.0 + 0.2 * (k % 4)])
            for k in range(10)]
    return attach_profiles(workload(jobs), "builtin", seed)


def _value(grid: ResourceGrid, cpus: float, memory: float) -> float:
    """The grid at its largest point within (cores, GiB) per GPU."""
    a = int(np.flatnonzero(grid.cpus_per_gpu <= cpus + 1e-9)[-1])
    b = int(np.flatnonzero(grid.memory_gib_per_gpu <= memory + 1e-9)[-1])
    return float(grid.throughput[a, b])


def check_host(result: RunResult, w: Workload, cluster: ClusterSpec) -> int:
    """Cores and memory per node within capacity in every round, and each grant's slowdown
    equal to its profile's fair value over its value at what it got. Returns the grants
    above their fair point."""
    g = result.grants
    cpus = {n.name: n.cpus for n in cluster.nodes}
    memory = {n.name: n.memory_gib for n in cluster.nodes}
    devices = sum(n.devices for n in cluster.nodes)
    fair = (sum(cpus.values()) / devices, sum(memory.values()) / devices)
    used: dict[tuple[int, str], list[float]] = {}
    above = 0
    assert not np.isnan(g["cpus"]).any() and not np.isnan(g["memory_gib"]).any()
    for r, i, d, nodes, c, mem, slowdown in zip(
        g["round"].tolist(), g["job"].tolist(), g["devices"].tolist(), g["nodes"].tolist(),
        g["cpus"].tolist(), g["memory_gib"].tolist(), g["slowdown"].tolist(), strict=True,
    ):
        for part in filter(None, str(nodes).split(";")):
            name, count = part.rsplit(":", 1)
            got = used.setdefault((r, name), [0.0, 0.0])
            got[0] += c * int(count) / d
            got[1] += mem * int(count) / d
        grid = w.resource_grid[i]
        assert grid is not None
        speedup = _value(grid, c / d, mem / d) / _value(grid, *fair)
        assert slowdown == pytest.approx(1.0 / speedup, rel=1e-12), (r, i)
        above += speedup > 1.0 + 1e-9
    for (r, name), (c, mem) in used.items():
        assert c <= cpus[name] + 1e-9, f"round {r}: {c} cores on {name}"
        assert mem <= memory[name] + 1e-9, f"round {r}: {mem} GiB on {name}"
    return above


@pytest.mark.parametrize("cluster", ["gpu:8:4", "gpu:6:2", "file"])
def test_synergy_keeps_capacity_and_conserves_work(cluster: str, tmp_path: Path) -> None:
    if cluster == "file":  # two 4-GPU nodes with their own cores and memory, one without
        path = tmp_path / "cluster.json"
        path.write_text(json.dumps({
            "acceleratorTypes": [{"name": "gpu", "count": 12}],
            "nodes": [{"name": "a", "acceleratorType": "gpu", "devices": 4, "cpus": 20,
                       "memoryGib": 300},
                      {"name": "b", "acceleratorType": "gpu", "devices": 4, "cpus": 8,
                       "memoryGib": 200},
                      {"name": "c", "acceleratorType": "gpu", "devices": 4}]}))
        spec = read_cluster_file(path)
    else:
        spec = parse_cluster(cluster)
    w = profiled_workload()
    result = run(w, spec, policy="synergy", round_s=100.0)
    check_invariants(result, w, spec, 100.0)
    # the documented default: 3 cores and 62.5 GiB per GPU where a node gives none
    host = replace(spec, nodes=tuple(
        replace(n, cpus=n.cpus or 3.0 * n.devices, memory_gib=n.memory_gib or 62.5 * n.devices)
        for n in spec.nodes))
    assert check_host(result, w, host) > 0, "no job ever got more than its fair share"
    assert result.run["plan_kind"] == "groups"


@pytest.mark.parametrize("unit", [1.0, 2.5])
def test_more_cores_finish_a_job_as_its_profile_says(unit: float) -> None:
    """One node: 2 GPUs, 9 cores, 125 GiB (fair share 4.5 cores and 62.5 GiB per GPU; the
    fair point is 3 cores). Job a's profile doubles its speed at 6 cores, b's is flat: OPT
    gives a 6 cores and b 3 (9 in all). Both 1000 steps at 1 step/s: a finishes at 500 s,
    b at 1000 s. With a flat profile a also takes 1000 s. Profiles in any unit (`unit` = the
    value at the fair point) give the same runs: only ratios matter."""
    path_cluster = ClusterSpec(("gpu",), (2,), (parse_cluster("gpu:2:2").nodes[0],))
    spec = replace(path_cluster, nodes=(replace(path_cluster.nodes[0], cpus=9.0,
                                                memory_gib=125.0),))
    axes = (np.array([3.0, 6.0]), np.array([62.5]))
    doubling = ResourceGrid(*axes, unit * np.array([[1.0], [2.0]]))
    flat = ResourceGrid(*axes, unit * np.array([[1.0], [1.0]]))
    w = workload([("a", 0.0, 1, 1000.0, [1.0]), ("b", 0.0, 1, 1000.0, [1.0])])
    fast = run(replace(w, resource_grid=(doubling, flat)), spec, policy="synergy",
               round_s=100.0)
    np.testing.assert_allclose(fast.jobs["finish_s"], [500.0, 1000.0])
    first = fast.grants["round"] == 0
    assert fast.grants["cpus"][first].tolist() == [6.0, 3.0]
    slow = run(replace(w, resource_grid=(flat, flat)), spec, policy="synergy", round_s=100.0)
    np.testing.assert_allclose(slow.jobs["finish_s"], [1000.0, 1000.0])


def test_synergy_without_profiles_is_refused() -> None:
    w = workload([("a", 0.0, 1, 100.0, [1.0])])
    with pytest.raises(SimulationInputError, match="--resource-profiles builtin"):
        run(w, parse_cluster("gpu:2:2"), policy="synergy")


def test_a_round_over_a_nodes_cores_is_an_error() -> None:
    w = workload([("a", 0.0, 1, 100.0, [1.0]), ("b", 0.0, 1, 100.0, [1.0])])
    grants = [Grant(0, 0, 1, ((0, 1),), cpus=5.0, memory_gib=10.0),
              Grant(1, 0, 1, ((0, 1),), cpus=4.0, memory_gib=10.0)]
    check_host_resources(0, grants, np.array([9.0]), np.array([20.0]), w)
    with pytest.raises(SimulationError, match="cores"):
        check_host_resources(0, grants, np.array([8.5]), np.array([20.0]), w)
    with pytest.raises(SimulationError, match="GiB"):
        check_host_resources(0, grants, np.array([9.0]), np.array([19.0]), w)


def test_synergy_snapshots_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.simulator.test_wire import assert_round_trips, recorded

    seen = recorded(monkeypatch)
    run(profiled_workload(), parse_cluster("gpu:8:4"), policy="synergy", round_s=100.0)
    assert_round_trips(seen)
    assert all(p.sharing is not None and len(p.sharing.resource_grid) == p.jobs.num_jobs
               and p.sharing.node_cpus.tolist() == [12.0, 12.0] for p, _, _ in seen)


def test_speed_comes_from_the_profile_not_the_plans_prediction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plan's predicted slowdowns replaced by 1: jobs still run at their profiles'
    speed-ups at the cores and memory they got."""
    from apportion.simulator import engine
    from apportion.simulator.solvers import InProcessSolver

    class Unpredicted(InProcessSolver):
        def __call__(self, problem, kind):  # type: ignore[no-untyped-def]
            decision = super().__call__(problem, kind)
            groups = tuple(replace(g, slowdown=(1.0,) * len(g.members))
                           for g in decision.groups)
            return replace(decision, groups=groups)

    monkeypatch.setattr(engine, "InProcessSolver", Unpredicted)
    spec = parse_cluster("gpu:8:4")
    w = profiled_workload()
    result = run(w, spec, policy="synergy", round_s=100.0)
    check_invariants(result, w, spec, 100.0)
    host = replace(spec, nodes=tuple(replace(n, cpus=3.0 * n.devices,
                                             memory_gib=62.5 * n.devices) for n in spec.nodes))
    assert check_host(result, w, host) > 0
