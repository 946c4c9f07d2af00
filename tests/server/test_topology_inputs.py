"""The topology, the jobs' placement fields and the stages through the request conversion:
a valid snapshot converts to the model the placement stage reads, every malformed input is a
field-path violation (never a crash), and a solved request reports each job's devices."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format

from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.errors import ValidationError
from apportion.solver.topology import DomainLevel, LinkKind
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import policy_pb2 as policy_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dgx_racks.json"


def example() -> service_pb.SolveRequest:
    request = service_pb.SolveRequest()
    json_format.Parse(EXAMPLE.read_text(), request)
    return request


def small() -> service_pb.SolveRequest:
    """Two 2-device nodes in one rack, devices listed, one link, two jobs."""
    request = service_pb.SolveRequest()
    cluster = request.snapshot.cluster
    cluster.accelerator_types.add(name="a100", count=4)
    for name in ("n0", "n1"):
        cluster.nodes.add(name=name, accelerator_type="a100", devices=2)
    topo = cluster.topology
    topo.domains.add(name="rack", level=snapshot_pb.DOMAIN_LEVEL_RACK, uplink_gbps=100.0)
    for name in ("n0", "n1"):
        topo.domains.add(name=name, level=snapshot_pb.DOMAIN_LEVEL_NODE, parent="rack")
    for node in ("n0", "n1"):
        for k in range(2):
            topo.devices.add(id=f"{node}-{k}", node=node, index=k)
    topo.links.add(device_a="n0-0", device_b="n0-1", kind=snapshot_pb.LINK_KIND_NVLINK,
                   gbps=300.0)
    for job_id, scale in (("a", 2), ("b", 1)):
        job = request.snapshot.jobs.add(id=job_id, scale_factor=scale)
        job.throughput["a100"] = 1.0
    request.policy.name = "weighted_max_min_fairness"
    request.policy.placement.SetInParent()
    return request


def test_the_example_converts_to_the_model() -> None:
    problem, policy, _ = request_to_model(example())
    topo = problem.cluster.topology
    assert topo is not None
    assert topo.num_devices == 32
    assert topo.link_a.size == 4 * 28  # every pair of a DGX-1: NVLink or PCIe
    assert set(topo.levels_present) == {DomainLevel.PCIE_SWITCH, DomainLevel.SOCKET,
                                        DomainLevel.NODE, DomainLevel.RACK, DomainLevel.CLUSTER}
    assert policy.placement is not None and len(policy.placement.compare) == 3
    assert problem.placement is not None
    running = problem.jobs.ids.index("job-3")
    assert [topo.device_ids[d] for d in problem.placement.jobs.current_devices[running]] == \
        ["r1n1/0", "r1n1/3"]


def test_small_topology_converts() -> None:
    problem, _, _ = request_to_model(small())
    topo = problem.cluster.topology
    assert topo is not None
    assert topo.device_ids == ("n0-0", "n0-1", "n1-0", "n1-1")
    assert topo.link_kind == (LinkKind.NVLINK,)
    assert topo.domain_uplink_gbps[0] == 100.0


def test_a_solved_example_reports_distinct_devices_per_job() -> None:
    response = solve_request(example())
    summary = response.plan.placement
    assert summary.placer == "exact"
    assert summary.jobs_placed == 10 and summary.jobs_not_placed == 0
    used = [d for job in response.plan.jobs for d in job.placement.devices]
    assert len(used) == len(set(used))
    sizes = {job.id: max(job.scale_factor, 1) for job in example().snapshot.jobs}
    for job in response.plan.jobs:
        assert job.placement.placed and len(job.placement.devices) == sizes[job.job_id]
    running = next(job for job in response.plan.jobs if job.job_id == "job-3")
    assert running.placement.kept  # moving would cost more than its crossing
    consolidated = next(job for job in response.plan.jobs if job.job_id == "job-1")
    assert consolidated.placement.widest_level in ("", "pcie_switch")  # within one socket
    names = {c.placer for c in summary.compared}
    assert names == {"blox_consolidated", "tiresias_yarn", "mapa_greedy"}
    for other in summary.compared:
        if other.placed_value == summary.placed_value:
            assert other.objective_difference >= -1e-9
        else:
            assert other.placed_value < summary.placed_value
    for scheduled in response.plan.rounds:
        devices = [d for grant in scheduled.grants for d in grant.device_ids]
        assert len(devices) == len(set(devices))


def _violations(request: service_pb.SolveRequest) -> list[str]:
    with pytest.raises(ValidationError) as info:
        request_to_model(request)
    return [v.field for v in info.value.violations]


def _domain(request: service_pb.SolveRequest, k: int) -> snapshot_pb.Domain:
    return request.snapshot.cluster.topology.domains[k]


Mutation = Callable[[service_pb.SolveRequest], None]


def _cycle(r: service_pb.SolveRequest) -> None:
    _domain(r, 0).parent = "n0"


def _missing_node(r: service_pb.SolveRequest) -> None:
    _domain(r, 2).name = "n9"


def _unknown_link_device(r: service_pb.SolveRequest) -> None:
    r.snapshot.cluster.topology.links[0].device_b = "ghost"


def _negative_uplink(r: service_pb.SolveRequest) -> None:
    _domain(r, 0).uplink_gbps = -5.0


def _cross_node_link(r: service_pb.SolveRequest) -> None:
    r.snapshot.cluster.topology.links[0].device_b = "n1-0"


def _bad_index(r: service_pb.SolveRequest) -> None:
    r.snapshot.cluster.topology.devices[1].index = 7


def _history_device(r: service_pb.SolveRequest) -> None:
    entry = r.snapshot.history.jobs.add(job_id="b")
    entry.current.accelerator_type = "a100"
    entry.devices.append("nowhere")


def _shared_device(r: service_pb.SolveRequest) -> None:
    for job_id, devices in (("a", ["n0-0", "n0-1"]), ("b", ["n0-1"])):
        entry = r.snapshot.history.jobs.add(job_id=job_id)
        entry.current.accelerator_type = "a100"
        entry.devices.extend(devices)


def _bad_weight(r: service_pb.SolveRequest) -> None:
    r.policy.placement.weights.crossing["shelf"] = 1.0


def _negative_weight(r: service_pb.SolveRequest) -> None:
    r.policy.placement.weights.crossing["node"] = -1.0


def _bad_shift(r: service_pb.SolveRequest) -> None:
    r.policy.placement.time_shifts.slot_s = 0.0


def _overlapping_phases(r: service_pb.SolveRequest) -> None:
    comm = r.snapshot.jobs[0].communication
    comm.phases.add(start_fraction=0.0, end_fraction=0.6, gbps=10.0)
    comm.phases.add(start_fraction=0.5, end_fraction=0.8, gbps=10.0)


def _rising_span(r: service_pb.SolveRequest) -> None:
    r.snapshot.jobs[0].communication.throughput_by_span["none"] = 1.0
    r.snapshot.jobs[0].communication.throughput_by_span["rack"] = 2.0


def _unknown_pin(r: service_pb.SolveRequest) -> None:
    r.snapshot.jobs[0].placement.pinned_domain = "attic"


def _bad_quota(r: service_pb.SolveRequest) -> None:
    r.snapshot.cell_quotas.add(tenant="t", accelerator_type="a100",
                               level=snapshot_pb.DOMAIN_LEVEL_SOCKET, count=1)


def _negative_migration(r: service_pb.SolveRequest) -> None:
    r.snapshot.jobs[0].migration.restore_s = -1.0


def _parent_below(r: service_pb.SolveRequest) -> None:
    _domain(r, 0).level = snapshot_pb.DOMAIN_LEVEL_SOCKET


def _duplicate_compare(r: service_pb.SolveRequest) -> None:
    r.policy.placement.compare.extend([policy_pb.PLACER_SIA_BFD, policy_pb.PLACER_SIA_BFD])


BAD: dict[str, tuple[Mutation, str]] = {
    "cycle": (_cycle, "snapshot.cluster.topology.domains[0].parent"),
    "node missing from the tree": (_missing_node, "snapshot.cluster.nodes[1].name"),
    "link to an unknown device": (_unknown_link_device,
                                  "snapshot.cluster.topology.links[0].device_b"),
    "negative uplink": (_negative_uplink, "snapshot.cluster.topology.domains[0].uplink_gbps"),
    "link across nodes": (_cross_node_link, "snapshot.cluster.topology.links[0]"),
    "device index out of range": (_bad_index, "snapshot.cluster.topology.devices[1].index"),
    "unknown history device": (_history_device, "snapshot.history.jobs[0].devices[0]"),
    "device held twice": (_shared_device, "snapshot.history.jobs[1].devices[0]"),
    "unknown weight level": (_bad_weight, 'policy.placement.weights.crossing["shelf"]'),
    "negative weight": (_negative_weight, 'policy.placement.weights.crossing["node"]'),
    "zero shift slot": (_bad_shift, "policy.placement.time_shifts.slot_s"),
    "overlapping phases": (_overlapping_phases,
                           "snapshot.jobs[0].communication.phases[1].start_fraction"),
    "span throughput rising": (_rising_span,
                               "snapshot.jobs[0].communication.throughput_by_span"),
    "unknown pinned domain": (_unknown_pin, "snapshot.jobs[0].placement.pinned_domain"),
    "quota on an absent level": (_bad_quota, "snapshot.cell_quotas[0].level"),
    "negative restore time": (_negative_migration, "snapshot.jobs[0].migration.restore_s"),
    "parent not above": (_parent_below, "snapshot.cluster.topology.domains[1].parent"),
    "placer compared twice": (_duplicate_compare, "policy.placement.compare[1]"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_a_field_path_violation(case: str) -> None:
    mutate, field = BAD[case]
    request = small()
    mutate(request)
    assert field in _violations(request)


def test_device_level_is_refused_on_large_clusters() -> None:
    request = example()
    for k in range(600):
        request.snapshot.cluster.nodes.add(name=f"extra{k}", accelerator_type="v100", devices=8)
        request.snapshot.cluster.topology.domains.add(
            name=f"extra{k}", level=snapshot_pb.DOMAIN_LEVEL_NODE, parent="cluster")
    request.snapshot.cluster.accelerator_types[0].count += 4800
    request.snapshot.cluster.topology.ClearField("devices")
    request.snapshot.cluster.topology.ClearField("links")
    for domain in list(request.snapshot.cluster.topology.domains):
        if domain.level < snapshot_pb.DOMAIN_LEVEL_NODE:
            request.snapshot.cluster.topology.domains.remove(domain)
    request.snapshot.history.jobs[0].ClearField("devices")
    request.policy.placement.level = policy_pb.PLACEMENT_LEVEL_DEVICE
    assert _violations(request) == ["policy.placement.level"]


def test_irregular_cells_name_the_first_irregular_domain() -> None:
    request = small()
    request.snapshot.cluster.nodes[1].devices = 1
    request.snapshot.cluster.accelerator_types[0].count = 3
    del request.snapshot.cluster.topology.devices[3]
    request.snapshot.cell_quotas.add(tenant="t", accelerator_type="a100",
                                     level=snapshot_pb.DOMAIN_LEVEL_NODE, count=1)
    assert "snapshot.cluster.topology.domains[2]" in _violations(request)


def test_snapshot_json_round_trip_keeps_the_topology() -> None:
    request = example()
    again = service_pb.SolveRequest()
    json_format.Parse(json.dumps(json_format.MessageToDict(request)), again)
    assert again == request
    first, _, _ = request_to_model(request)
    second, _, _ = request_to_model(again)
    assert first.cluster.topology is not None and second.cluster.topology is not None
    assert np.array_equal(first.cluster.topology.ancestors, second.cluster.topology.ancestors)


def tiresias_request() -> service_pb.SolveRequest:
    request = service_pb.SolveRequest()
    request.snapshot.cluster.accelerator_types.add(name="gpu", count=2)
    for job_id, arrival in (("old", 0.0), ("new", 50.0)):
        job = request.snapshot.jobs.add(id=job_id, arrival_time_s=arrival)
        job.throughput["gpu"] = 1.0
        job.scale_factor = 2
    entry = request.snapshot.history.jobs.add(job_id="old", executed_time_s=5000.0)
    entry.current.accelerator_type = "gpu"
    request.policy.name = "tiresias"
    return request


def test_tiresias_reports_queues_and_state() -> None:
    response = solve_request(tiresias_request())
    old, new = response.plan.jobs
    assert (old.admission.queue, old.admission.admitted) == (2, False)  # 10,000 GPU s
    assert (new.admission.queue, new.admission.admitted, new.admission.rank) == (0, True, 0)
    assert old.admission.executed_time_s == 5000.0
    assert new.time_share["gpu"] == 1.0
    assert old.status == service_pb.JOB_STATUS_ALLOCATED and old.reason.startswith("preempted")


def test_tiresias_behind_load_based_admission_reports_only_offered_jobs() -> None:
    request = tiresias_request()
    request.snapshot.jobs[0].scale_factor = 1  # "old" (running) is accepted first, "new" waits
    request.policy.admission.mode = policy_pb.ADMISSION_MODE_LOAD_BASED
    request.policy.admission.load_threshold = 1.0
    old, new = solve_request(request).plan.jobs
    assert new.status == service_pb.JOB_STATUS_DEFERRED and not new.HasField("admission")
    assert old.HasField("admission") and (old.admission.admitted, old.admission.rank) == (True, 0)


@pytest.mark.parametrize("mutate, field", [
    (lambda p: p.thresholds.extend([10.0, 5.0]), "policy.tiresias.thresholds"),
    (lambda p: setattr(p, "mode", policy_pb.TIRESIAS_MODE_GITTINS),
     "policy.tiresias.service_samples"),
    (lambda p: setattr(p, "gittins_quantum", -1.0), "policy.tiresias.gittins_quantum"),
    (lambda p: setattr(p, "promote_knob", float("nan")), "policy.tiresias.promote_knob"),
])
def test_bad_tiresias_parameters(mutate: Callable[[policy_pb.TiresiasParameters], None],
                                 field: str) -> None:
    request = tiresias_request()
    mutate(request.policy.tiresias)
    assert field in _violations(request)


def test_negative_executed_time_is_rejected() -> None:
    request = tiresias_request()
    request.snapshot.history.jobs[0].waiting_time_s = -1.0
    assert "snapshot.history.jobs[0].waiting_time_s" in _violations(request)


def test_load_based_admission_through_the_request() -> None:
    request = small()
    request.snapshot.jobs.add(id="c", scale_factor=4).throughput["a100"] = 1.0
    request.policy.admission.mode = policy_pb.ADMISSION_MODE_LOAD_BASED
    response = solve_request(request)
    statuses = {job.job_id: job.status for job in response.plan.jobs}
    assert statuses["c"] == service_pb.JOB_STATUS_DEFERRED  # 2 + 1 + 4 > 4 devices
    assert statuses["a"] == statuses["b"] == service_pb.JOB_STATUS_ALLOCATED
    request.policy.admission.load_threshold = 0.0
    assert "policy.admission.load_threshold" in _violations(request)
