"""The placement stage on every round's grants (`SimulationConfig.placement`, `--placement`).

From the run's tables only: every grant names as many distinct devices as it holds, the
devices lie on the nodes the grant names (as many on each), no device is held by two grants
of one round (a pair's or group's shared devices once), and the usual invariants hold
(`tiny.check_invariants`: arrivals, capacity, work conservation). For time shares, queues,
configurations and co-location groups, with the exact MILP and a compat placer. A job kept on
its devices is not restarted. Without nodes the option is refused.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from apportion.datasets.cluster import ClusterSpec
from apportion.simulator.cluster import parse_cluster, single_type
from apportion.simulator.errors import SimulationInputError
from apportion.simulator.metrics import RunResult
from apportion.simulator.problems import model_cluster
from apportion.solver.cluster_topology import topology_of
from apportion.solver.stages import PlacementParameters, Placer
from tests.simulator.test_groups import staged_workload
from tests.simulator.tiny import check_invariants, mixed_jobs, run, workload

NODES = parse_cluster("fast:8:4,slow:8:4")
"""Two types of 8 devices on 4-device nodes."""


def jobs() -> list[tuple[str, float, int, float, list[float]]]:
    return [*mixed_jobs(), ("g", 20.0, 4, 2000.0, [4.0, 2.0]), ("h", 150.0, 4, 1500.0, [3.0, 2.0]),
            ("i", 210.0, 1, 600.0, [1.0, 2.0])]


def check_devices(result: RunResult, cluster: ClusterSpec) -> int:
    """The device checks of the module docstring; returns the number of grants checked."""
    topology = topology_of(model_cluster(cluster))
    names = [node.name for node in cluster.nodes]
    g = result.grants
    holder: dict[tuple[int, int], tuple[int, int]] = {}
    checked = 0
    for r, i, d, nodes, ids, shared in zip(
        g["round"].tolist(), g["job"].tolist(), g["devices"].tolist(), g["nodes"].tolist(),
        g["device_ids"].tolist(), g["shared_with"].tolist(), strict=True,
    ):
        devices = [int(x) for x in str(ids).split(",") if x]
        assert len(devices) == len(set(devices)) == d, (r, i, devices)
        on_node: dict[str, int] = {}
        for device in devices:
            node = names[int(topology.device_node[device])]
            on_node[node] = on_node.get(node, 0) + 1
        listed = {part.rsplit(":", 1)[0]: int(part.rsplit(":", 1)[1])
                  for part in str(nodes).split(";") if part}
        assert on_node == listed, (r, i, on_node, listed)
        owner = (r, shared if shared >= 0 else i)
        for device in devices:
            assert holder.setdefault((r, device), owner) == owner, f"round {r}: device {device}"
        checked += 1
    return checked


@pytest.mark.parametrize("placer", [Placer.EXACT, Placer.TIRESIAS_YARN])
@pytest.mark.parametrize("policy", ["max_min_fairness_perf", "fifo", "allox", "sia"])
def test_no_device_is_double_booked(policy: str, placer: Placer) -> None:
    rows = jobs()
    if policy == "allox":
        rows = [(j, a, 1, t, thr) for j, a, _, t, thr in rows]
    configs = [[(t, 1, s, float(thr[t])) for t in range(2)] for _, _, s, _, thr in rows]
    w = workload(rows, configurations=configs if policy == "sia" else None)
    result = run(w, NODES, policy=policy, round_s=100.0,
                 placement=PlacementParameters(placer=placer))
    check_invariants(result, w, NODES, 100.0)
    assert check_devices(result, NODES) == len(result.grants["job"]) > 0


def test_groups_share_their_devices() -> None:
    cluster = parse_cluster("gpu:4:2")
    w = staged_workload()
    result = run(w, cluster, policy="muri", round_s=100.0, placement=PlacementParameters())
    check_invariants(result, w, cluster, 100.0)
    assert check_devices(result, cluster) > 0
    g = result.grants
    assert (g["shared_with"][g["shared_with"] != g["job"]] >= 0).any()


def test_a_job_kept_in_place_is_not_restarted() -> None:
    """One job alone on its devices round after round keeps them (the stage prices a move):
    no restart, lease extensions every round."""
    w = workload([("a", 0.0, 2, 1000.0, [1.0, 1.0])])
    result = run(w, NODES, policy="max_min_fairness_perf", round_s=100.0,
                 placement=PlacementParameters())
    assert result.jobs["restarts"].tolist() == [0]
    assert len(set(result.grants["device_ids"].tolist())) == 1


def test_placement_needs_nodes() -> None:
    w = workload([("a", 0.0, 1, 100.0, [1.0])])
    with pytest.raises(SimulationInputError, match="nodes"):
        run(w, single_type(2), placement=PlacementParameters())


def test_ungranted_devices_stay_free_for_the_stage() -> None:
    """Grants the stage cannot place (none here: the policies' grants fit) are counted per
    round; the column is there and zero."""
    w = workload(jobs())
    result = run(w, NODES, policy="max_min_fairness_perf", round_s=100.0,
                 placement=PlacementParameters())
    assert (result.rounds["unplaced"] == 0).all()
    plain = run(w, NODES, policy="max_min_fairness_perf", round_s=100.0)
    assert (plain.grants["device_ids"] == "").all()
    assert np.isfinite(replace(result).jobs["finish_s"]).all()


def test_a_placer_that_places_nothing_is_named() -> None:
    """Blox's consolidated placer (compat) wants a node with exactly the requested free
    devices: a 1-device job on empty 4-device nodes never runs, and the run says why."""
    w = workload([("a", 0.0, 1, 100.0, [1.0, 1.0])])
    result = run(w, NODES, policy="max_min_fairness_perf", round_s=100.0,
                 placement=PlacementParameters(placer=Placer.BLOX_CONSOLIDATED))
    assert not result.jobs["finished"].any()
    assert "placement stage (blox_consolidated) placed none" in result.summary["stopped"]
