"""Sia requests over the wire format: goodput 0 marks a configuration the job cannot run, given
configurations outside the configuration set are reported, and Sia's per-type node caps by
type name apply only under `compat: sia`."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import json_format

from apportion.server.pipeline import solve_request
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import policy_pb2

SIA_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sia_configurations.json"
OPTIMAL = service_pb.TERMINATION_REASON_OPTIMAL


def _example() -> service_pb.SolveRequest:
    return json_format.Parse(SIA_EXAMPLE.read_text(), service_pb.SolveRequest())


def test_goodput_zero_is_an_invalid_configuration_not_an_error() -> None:
    """Zeroing the goodput of the configuration a job got makes the job take another one."""
    request = _example()
    first = solve_request(request)
    assert first.stats.termination == OPTIMAL
    chosen = first.plan.jobs[0].configuration
    for conf in request.snapshot.jobs[0].configurations:
        if (conf.accelerator_type, conf.nodes, conf.devices) == (
                chosen.accelerator_type, chosen.nodes, chosen.devices):
            conf.goodput = 0.0
    again = solve_request(request)
    assert again.stats.termination == OPTIMAL
    other = again.plan.jobs[0].configuration
    assert (other.accelerator_type, other.nodes, other.devices) != (
        chosen.accelerator_type, chosen.nodes, chosen.devices)
    assert "outside the configuration set" not in again.stats.detail


def test_configurations_outside_the_set_are_reported() -> None:
    request = _example()
    odd = request.snapshot.jobs[1].configurations.add()
    odd.accelerator_type, odd.nodes, odd.devices, odd.goodput = "a100", 1, 3, 1e6
    reply = solve_request(request)
    assert reply.stats.termination == OPTIMAL
    assert ("1 given configuration(s) outside the configuration set not used "
            "(e.g. job resnet50: a100, 1 node(s), 3 GPUs)") in reply.stats.detail
    assert reply.plan.jobs[1].configuration.devices != 3


def _rtx_request() -> service_pb.SolveRequest:
    """One job on 4 nodes of a type named like a Sia type ("rtx", capped at 3 nodes by Sia)
    whose goodput is best on all 4 nodes."""
    request = service_pb.SolveRequest()
    request.policy.name = "sia"
    request.snapshot.cluster.accelerator_types.add(name="rtx", count=16)
    for n in range(4):
        request.snapshot.cluster.nodes.add(name=f"rtx-{n}", accelerator_type="rtx", devices=4)
    job = request.snapshot.jobs.add(id="big")
    for nodes, devices, goodput in ((1, 4, 100.0), (2, 8, 190.0), (3, 12, 270.0),
                                    (4, 16, 350.0)):
        job.configurations.add(accelerator_type="rtx", nodes=nodes, devices=devices,
                               goodput=goodput)
    return request


def test_sia_node_caps_by_type_name_only_under_compat_sia() -> None:
    request = _rtx_request()
    plain = solve_request(request)
    assert plain.plan.jobs[0].configuration.nodes == 4
    request.policy.compat = policy_pb2.COMPAT_SIA
    capped = solve_request(request)
    assert capped.plan.jobs[0].configuration.nodes == 3
    assert "outside the configuration set" in capped.stats.detail
