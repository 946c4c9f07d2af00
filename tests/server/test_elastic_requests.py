"""Requests for the elastic policies (Optimus, SLAQ, Lyra) and POP through the wire: bad input
becomes field-path errors (loss histories too short, non-monotone or NaN, bad speed models,
k < 1 or k > jobs, inference demand above the cluster), good input becomes plans with the
elastic section; POP through a real gRPC server, whose solver workers are daemon processes."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from unittest import mock

import grpc
import pytest
from grpc_harness import CALL_TIMEOUT_S, CHANNEL_OPTIONS, Server, large_request, running_server

from apportion.server import job_inputs
from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.errors import ValidationError
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import allocation_service_pb2_grpc as service_grpc

Mutation = Callable[[service_pb.SolveRequest], None]


def elastic_request(policy: str = "optimus") -> service_pb.SolveRequest:
    """Two nodes of 4 v100 (node1 loaned by inference), three jobs: an elastic one with a
    loss history and a speed model, running on node0 and node1; an elastic one with
    configurations; a rigid one with throughput only."""
    request = service_pb.SolveRequest()
    snap = request.snapshot
    snap.time_s = 100.0
    snap.cluster.accelerator_types.add(name="v100", count=8)
    snap.cluster.nodes.add(name="node0", accelerator_type="v100", devices=4)
    snap.cluster.nodes.add(name="node1", accelerator_type="v100", devices=4)
    snap.inference.loaned_nodes.append("node1")
    a = snap.jobs.add(id="a", arrival_time_s=0.0)
    a.progress.total_steps, a.progress.steps_done = 20000.0, 1000.0
    a.elasticity.min_devices, a.elasticity.max_devices = 1, 4
    model = a.speed_model["v100"]
    model.synchronous = True
    model.theta.extend([0.01, 0.05, 0.0, 0.002, 0.0])
    model.batch_size = 128.0
    a.loss_history.steps.extend([0.0, 250.0, 500.0, 750.0, 1000.0])
    a.loss_history.loss.extend([2.0, 1.2, 0.9, 0.75, 0.66])
    b = snap.jobs.add(id="b", arrival_time_s=10.0)
    b.progress.total_steps = 5000.0
    b.elasticity.max_devices = 4
    for devices, goodput in ((1, 1.0), (2, 1.8), (4, 3.0)):
        b.configurations.add(accelerator_type="v100", nodes=1, devices=devices, goodput=goodput)
    c = snap.jobs.add(id="c", arrival_time_s=20.0, scale_factor=2)
    c.progress.total_steps = 3000.0
    c.throughput["v100"] = 2.0
    c.loss_history.steps.extend([0.0, 10.0, 20.0])
    c.loss_history.loss.extend([1.0, 0.9, 0.85])
    history = snap.history.jobs.add(job_id="a")
    history.current.accelerator_type = "v100"
    history.current.devices = 2
    history.current.nodes.extend(["node0", "node1"])
    history.node_devices["node0"] = 1
    history.node_devices["node1"] = 1
    request.policy.name = policy
    return request


def rejected(request: service_pb.SolveRequest) -> dict[str, str]:
    with pytest.raises(ValidationError) as info:
        request_to_model(request)
    return {v.field: v.description for v in info.value.violations}


def _history(steps: list[float], loss: list[float]) -> Mutation:
    def mutate(r: service_pb.SolveRequest) -> None:
        h = r.snapshot.jobs[0].loss_history
        del h.steps[:], h.loss[:]
        h.steps.extend(steps)
        h.loss.extend(loss)
    return mutate


def _theta(values: list[float]) -> Mutation:
    def mutate(r: service_pb.SolveRequest) -> None:
        model = r.snapshot.jobs[0].speed_model["v100"]
        del model.theta[:]
        model.theta.extend(values)
    return mutate


def _set(path: str, value: object) -> Mutation:
    def mutate(r: service_pb.SolveRequest) -> None:
        *parents, leaf = path.split(".")
        target: object = r
        for name in parents:
            target = getattr(target, name)
        setattr(target, leaf, value)
    return mutate


def _reclaim(count: int) -> Mutation:
    return _set("snapshot.inference.reclaim_nodes", count)


BAD = {
    "too short to fit": (_history([0.0, 10.0], [1.0, 0.9]), "snapshot.jobs[0].loss_history.steps",
                         "too short"),
    "NaN loss": (_history([0.0, 1.0, 2.0], [1.0, math.nan, 0.5]),
                 "snapshot.jobs[0].loss_history.loss[1]", "finite"),
    "non-monotone steps": (_history([0.0, 5.0, 5.0, 9.0], [1.0, 0.9, 0.8, 0.7]),
                           "snapshot.jobs[0].loss_history.steps[2]", "strictly increasing"),
    "steps and losses differ": (_history([0.0, 1.0, 2.0], [1.0, 0.9]),
                                "snapshot.jobs[0].loss_history.loss", "2 values for 3 steps"),
    "negative loss": (_history([0.0, 1.0, 2.0], [1.0, -0.1, 0.5]),
                      "snapshot.jobs[0].loss_history.loss[1]", ">= 0"),
    "theta count": (_theta([0.01, 0.05]), 'snapshot.jobs[0].speed_model["v100"].theta',
                    "5 coefficients"),
    "negative theta": (_theta([0.01, -0.05, 0.0, 0.0, 0.0]),
                       'snapshot.jobs[0].speed_model["v100"].theta[1]', "must be in"),
    "server terms without servers": (_theta([0.01, 0.05, 0.3, 0.0, 0.0]),
                                     'snapshot.jobs[0].speed_model["v100"].theta',
                                     "parameter_server_type"),
    "inference demand above the cluster": (_reclaim(2), "snapshot.inference.reclaim_nodes",
                                           "above the cluster"),
    "negative demand": (_reclaim(-1), "snapshot.inference.reclaim_nodes", ">= 0"),
    "convergence fraction": (_set("policy.optimus.convergence_fraction", 1.5),
                             "policy.optimus.convergence_fraction", "(0, 1)"),
    "max devices": (_set("policy.optimus.max_devices", 0), "policy.optimus.max_devices",
                    "[1, 4096]"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_elastic_input_is_a_field_path_error(case: str) -> None:
    mutate, field, words = BAD[case]
    request = elastic_request()
    mutate(request)
    errors = rejected(request)
    assert field in errors, errors
    assert words in errors[field]


def _on_both_routes(request: service_pb.SolveRequest) -> list[object]:
    """What `request_to_model` gives reading every job's message, and decoding the jobs
    from the request's bytes (the service's route, which visits only the jobs whose bytes
    hold a loss history or a speed model): violations, or the elastic inputs."""
    out: list[object] = []
    for decode_from in (job_inputs.DECODE_FROM_JOBS, 1):
        with mock.patch.object(job_inputs, "DECODE_FROM_JOBS", decode_from):
            try:
                problem = request_to_model(request, serialized=request.SerializeToString())[0]
            except ValidationError as error:
                out.append(sorted((v.field, v.description) for v in error.violations))
                continue
        elastic = problem.elastic
        assert elastic is not None
        out.append(([None if h is None else (h.steps.tolist(), h.loss.tolist())
                     for h in elastic.loss_history],
                    [[None if model is None else (model.theta.tolist(), model.batch_size)
                      for model in row] for row in elastic.speed_model]))
    return out


@pytest.mark.parametrize("case", ["good", *BAD], ids=["good", *BAD])
@pytest.mark.parametrize("history", [True, False], ids=["with history", "model alone"])
def test_elastic_inputs_are_the_same_from_the_wire(case: str, history: bool) -> None:
    request = elastic_request()
    if case != "good":
        BAD[case][0](request)
    if not history:
        request.snapshot.jobs[0].ClearField("loss_history")
    messages, wire = _on_both_routes(request)
    assert wire == messages


def test_more_bad_inputs_with_their_paths() -> None:
    request = elastic_request("lyra")
    request.snapshot.inference.loaned_nodes.append("node9")
    request.snapshot.history.jobs[0].node_devices["node0"] = 3  # 3 + 1 != 2 held
    request.snapshot.jobs[0].speed_model["tpu"].synchronous = True
    errors = rejected(request)
    assert "unknown node" in errors["snapshot.inference.loaned_nodes[1]"]
    assert "adds up to 4" in errors["snapshot.history.jobs[0].node_devices"]
    assert "unknown accelerator type" in errors['snapshot.jobs[0].speed_model["tpu"]']
    slaq = elastic_request("slaq")
    slaq.policy.slaq.recency_decay = 0.0
    slaq.policy.slaq.horizon_s = -1.0
    errors = rejected(slaq)
    assert "(0, 1]" in errors["policy.slaq.recency_decay"]
    assert ">= 0" in errors["policy.slaq.horizon_s"]


def pop_request(jobs: int) -> service_pb.SolveRequest:
    request = service_pb.SolveRequest()
    request.snapshot.cluster.accelerator_types.add(name="v100", count=4)
    for i in range(jobs):
        request.snapshot.jobs.add(id=f"j{i}").throughput["v100"] = 1.0 + i
    request.policy.name = "weighted_max_min_fairness"
    return request


@pytest.mark.parametrize(("k", "words"), [(0, ">= 1"), (-3, ">= 1"), (6, "at most one per job")])
def test_partitions_below_one_or_above_the_jobs_are_refused(k: int, words: str) -> None:
    request = pop_request(5)
    request.options.partitions = k
    assert words in rejected(request)["options.partitions"]


def test_partitions_need_a_partitionable_policy_without_space_sharing() -> None:
    request = elastic_request()
    request.options.partitions = 2
    assert "cannot be partitioned" in rejected(request)["options.partitions"]
    packed = pop_request(4)
    packed.policy.max_min_fairness.space_sharing = True
    packed.options.partitions = 2
    assert "space sharing" in rejected(packed)["options.partitions"]


@pytest.mark.parametrize("policy", ["optimus", "slaq", "lyra"])
def test_elastic_plans_through_the_wire(policy: str) -> None:
    response = solve_request(elastic_request(policy))
    stats = response.stats
    assert stats.termination in (service_pb.TERMINATION_REASON_HEURISTIC,
                                 service_pb.TERMINATION_REASON_OPTIMAL), stats
    assert stats.HasField("best_bound") and stats.HasField("exact_objective")
    jobs = {j.job_id: j for j in response.plan.jobs}
    held = sum(j.configuration.devices for j in jobs.values() if j.HasField("configuration"))
    assert held <= 8
    a = jobs["a"]
    assert a.status == service_pb.JOB_STATUS_ALLOCATED
    assert a.elastic.workers == a.configuration.devices >= 1
    assert sum(a.configuration.node_devices.values()) == a.configuration.devices
    assert jobs["c"].configuration.devices == 2  # rigid at its scale factor
    if policy == "slaq":
        assert a.elastic.HasField("loss_reduction")
    else:
        assert a.elastic.remaining_time_s > 0


def test_lyra_reclaims_through_the_wire() -> None:
    request = elastic_request("lyra")
    request.snapshot.inference.reclaim_nodes = 1
    response = solve_request(request)
    reclaim = response.plan.reclaim
    assert list(reclaim.nodes) == ["node1"]
    assert reclaim.preempted_jobs == 0 and not reclaim.preempted_job_ids  # a shrinks to base
    assert reclaim.HasField("bound") and reclaim.bound == 0
    for job in response.plan.jobs:
        assert "node1" not in job.configuration.node_devices


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--workers", "1", "--max-pending", "2") as started:
        yield started


def test_pop_through_a_real_server(server: Server) -> None:
    """The server solves in daemon worker processes; POP's own workers start from there and
    the answer equals the in-process one."""
    request = large_request(3000)
    request.options.partitions = 4
    request.options.seed = 5
    request.options.partition_exact_gap = True
    with grpc.insecure_channel(server.address, options=CHANNEL_OPTIONS) as channel:
        stub = service_grpc.AllocationServiceStub(channel)
        response = stub.Solve(request, timeout=CALL_TIMEOUT_S)
    stats = response.stats
    assert stats.termination == service_pb.TERMINATION_REASON_HEURISTIC, stats.detail
    assert stats.partitions == 4 and stats.partition_workers >= 1
    assert stats.HasField("exact_objective") and stats.HasField("relative_gap")
    assert stats.objective <= stats.exact_objective * (1 + 1e-6)
    local = solve_request(request)
    assert local.stats.objective == pytest.approx(stats.objective, rel=1e-9)
