"""Write the example snapshot files (proto3 canonical JSON of `apportion.v1.SolveRequest`).

Deterministic: run it again and the files come out byte-identical (a test checks this).

    python examples/make_examples.py          # rewrite examples/*.json
    python examples/make_examples.py --check  # exit 1 if a committed file is out of date
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

from google.protobuf import json_format

from apportion.datasets.topologies import NodeKind, fill_cluster_message, rack_cluster
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import policy_pb2 as policy_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

EXAMPLES = Path(__file__).resolve().parent
SEED = 20240601
TYPES = ("v100", "p100", "k80")

# Single-device throughput (steps/s) per type, in the spirit of Gavel's measured table:
# k80 is always the slowest, v100 the fastest, and the speed-up varies a lot by model.
MODELS: dict[str, tuple[float, float, float]] = {
    "resnet18": (13.6, 8.9, 3.5),
    "resnet50": (3.1, 1.3, 0.42),
    "transformer": (5.2, 3.3, 1.1),
    "lm": (4.1, 3.0, 1.5),
    "recommendation": (8.3, 6.6, 4.1),
    "a3c": (1.35, 1.22, 1.02),
    "cyclegan": (2.6, 1.45, 0.52),
}


def _request(policy: str) -> service_pb.SolveRequest:
    request = service_pb.SolveRequest()
    request.policy.name = policy
    return request


def _add_type(request: service_pb.SolveRequest, name: str, count: int) -> None:
    accelerator = request.snapshot.cluster.accelerator_types.add()
    accelerator.name = name
    accelerator.count = count


def _add_job(
    request: service_pb.SolveRequest,
    job_id: str,
    throughput: dict[str, float],
    scale_factor: int | None = None,
    priority_weight: float | None = None,
) -> snapshot_pb.Job:
    job = request.snapshot.jobs.add()
    job.id = job_id
    if scale_factor is not None:
        job.scale_factor = scale_factor
    if priority_weight is not None:
        job.priority_weight = priority_weight
    job.throughput.update(throughput)
    return job


def four_jobs() -> service_pb.SolveRequest:
    """4 jobs on 4 v100 + 4 p100 + 4 k80; mixed scale factors, one job with weight 2."""
    request = _request("weighted_max_min_fairness")
    for name in TYPES:
        _add_type(request, name, 4)
    _add_job(request, "resnet50", {"v100": 3.1, "p100": 1.3, "k80": 0.42})
    _add_job(request, "transformer", {"v100": 9.4, "p100": 6.0, "k80": 2.0}, scale_factor=2)
    _add_job(request, "a3c", {"v100": 1.35, "p100": 1.22, "k80": 1.02}, priority_weight=2.0)
    _add_job(request, "recommendation", {"v100": 27.0, "p100": 21.5, "k80": 13.0}, scale_factor=4)
    return request


def cluster_32_jobs(seed: int = SEED) -> service_pb.SolveRequest:
    """32 jobs drawn (seeded) from MODELS on 16 v100 + 16 p100 + 24 k80."""
    rng = random.Random(seed)
    request = _request("weighted_max_min_fairness")
    for name, count in zip(TYPES, (16, 16, 24), strict=True):
        _add_type(request, name, count)
    for i in range(32):
        model = rng.choice(sorted(MODELS))
        scale = rng.choices((1, 2, 4, 8), weights=(0.55, 0.25, 0.13, 0.07))[0]
        efficiency = scale**0.9  # imperfect multi-device scaling
        throughput = {
            name: round(base * efficiency * rng.lognormvariate(0.0, 0.05), 3)
            for name, base in zip(TYPES, MODELS[model], strict=True)
        }
        weight = rng.choices((1.0, 2.0, 0.5), weights=(0.8, 0.12, 0.08))[0]
        job = _add_job(
            request,
            f"job-{i:02d}-{model}",
            throughput,
            scale_factor=scale if scale > 1 else None,
            priority_weight=weight if weight != 1.0 else None,
        )
        job.arrival_time_s = float(60 * i)
    request.snapshot.time_s = 3600.0
    return request


def invalid() -> service_pb.SolveRequest:
    """A deliberately malformed snapshot: NaN and negative throughputs, an unknown type,
    a duplicate job id and a zero scale factor."""
    request = _request("weighted_max_min_fairness")
    _add_type(request, "v100", 2)
    _add_type(request, "k80", 2)
    _add_job(request, "a", {"v100": float("nan"), "k80": 1.0})
    _add_job(request, "b", {"v100": 2.0, "k80": -1.0, "h100": 5.0})
    _add_job(request, "a", {"v100": 2.0})
    _add_job(request, "d", {"k80": 1.0}, scale_factor=0)
    return request


def tenants_and_sharing() -> service_pb.SolveRequest:
    """Water filling with two tenants (one FIFO) on 2 v100 + 2 k80; the two single-GPU
    `lm` jobs of tenant research may share devices (space sharing)."""
    request = _request("hierarchical_max_min_fairness")
    _add_type(request, "v100", 2)
    _add_type(request, "k80", 2)
    research = request.snapshot.tenants.add()
    research.name = "research"
    research.weight = 2.0
    batch = request.snapshot.tenants.add()
    batch.name = "batch"
    batch.sharing = snapshot_pb.TENANT_SHARING_FIFO
    for job_id, tenant, throughput, arrival in (
        ("lm-1", "research", {"v100": 4.0, "k80": 1.0}, 0.0),
        ("lm-2", "research", {"v100": 3.5, "k80": 1.1}, 30.0),
        ("etl-1", "batch", {"v100": 2.0, "k80": 1.8}, 10.0),
        ("etl-2", "batch", {"v100": 2.1, "k80": 1.7}, 20.0),
        ("solo", "", {"v100": 1.4, "k80": 1.0}, 40.0),
    ):
        job = _add_job(request, job_id, throughput)
        job.tenant = tenant
        job.arrival_time_s = arrival
    pair = request.snapshot.colocations.add()
    pair.job_a, pair.job_b = "lm-1", "lm-2"
    pair.throughput_a.update({"v100": 2.6, "k80": 0.7})
    pair.throughput_b.update({"v100": 2.4, "k80": 0.8})
    return request


def dgx_racks() -> service_pb.SolveRequest:
    """Max-min fairness followed by the placement stage on 2 racks x 2 DGX-1 nodes (8 v100
    each: two sockets, two PCIe switches per socket, the hybrid cube-mesh NVLink graph): ring
    all-reduce jobs of 1-8 GPUs, one consolidated, one running on known devices; the exact
    placer is compared with Blox's, Tiresias's and MAPA's placers."""
    request = _request("weighted_max_min_fairness")
    cluster = rack_cluster(2, 2, 8, "v100", kind=NodeKind.DGX1)
    fill_cluster_message(cluster, request.snapshot.cluster)
    sizes = (8, 4, 4, 2, 2, 2, 1, 1, 4, 2)
    for k, size in enumerate(sizes):
        job = _add_job(request, f"job-{k}", {"v100": round(1.0 + 0.3 * k, 2)},
                       scale_factor=size if size > 1 else None)
        if size > 1:
            job.communication.pattern = snapshot_pb.COMMUNICATION_PATTERN_RING_ALLREDUCE
            job.communication.bandwidth_sensitive = size >= 4
        if k == 1:
            job.placement.max_span_level = snapshot_pb.DOMAIN_LEVEL_SOCKET
        if k == 3:
            job.migration.checkpoint_s = 20.0
            job.migration.restore_s = 40.0
    running = request.snapshot.history.jobs.add(job_id="job-3")
    running.current.accelerator_type = "v100"
    running.current.devices = 2
    running.current.nodes.append("r1n1")
    running.devices.extend(["r1n1/0", "r1n1/3"])
    stage = request.policy.placement
    stage.compare.extend([policy_pb.PLACER_BLOX_CONSOLIDATED, policy_pb.PLACER_TIRESIAS_YARN,
                          policy_pb.PLACER_MAPA_GREEDY])
    stage.weights.move_per_s = 0.01
    request.options.schedule_rounds = 2
    return request


def elastic_lyra() -> service_pb.SolveRequest:
    """Lyra on two 4-GPU training nodes and two 4-GPU nodes loaned by an inference cluster
    that asks one back; five jobs: elastic ones with Optimus speed models and loss histories
    (also solvable with --policy optimus or slaq), a profiled one, a rigid one."""
    request = _request("lyra")
    snapshot = request.snapshot
    snapshot.time_s = 3600.0
    snapshot.round_duration_s = 300.0
    _add_type(request, "a100", 16)
    for k in range(4):
        snapshot.cluster.nodes.add(name=f"node{k}", accelerator_type="a100", devices=4)
    snapshot.inference.loaned_nodes.extend(["node2", "node3"])
    snapshot.inference.reclaim_nodes = 1
    for job_id, theta, remaining, arrival, lo, hi in (
        ("bert", (0.004, 0.08, 0.0, 0.003, 0.0), 40_000.0, 0.0, 2, 8),
        ("gpt-small", (0.008, 0.05, 0.0, 0.001, 0.0), 90_000.0, 600.0, 2, 8),
        ("vit", (0.006, 0.12, 0.0, 0.004, 0.0), 25_000.0, 1200.0, 1, 4),
    ):
        job = snapshot.jobs.add(id=job_id, arrival_time_s=arrival)
        job.progress.total_steps = remaining + 5000.0
        job.progress.steps_done = 5000.0
        job.elasticity.min_devices, job.elasticity.max_devices = lo, hi
        model = job.speed_model["a100"]
        model.synchronous = True
        model.theta.extend(theta)
        model.batch_size = 256.0
        steps = [1000.0 * k for k in range(6)]
        job.loss_history.steps.extend(steps)
        job.loss_history.loss.extend([round(0.4 + 30.0 / (k + 800.0), 6) for k in steps])
    resnet = snapshot.jobs.add(id="resnet", arrival_time_s=1800.0)
    resnet.progress.total_steps = 20_000.0
    resnet.elasticity.max_devices = 4
    for devices, goodput in ((1, 2.0), (2, 3.7), (4, 6.4)):
        resnet.configurations.add(accelerator_type="a100", nodes=1, devices=devices,
                                  goodput=goodput)
    rigid = _add_job(request, "rigid", {"a100": 3.0}, scale_factor=2)
    rigid.arrival_time_s = 2400.0
    rigid.progress.total_steps = 8000.0
    for job_id, holdings in (("bert", {"node0": 2, "node2": 2}), ("gpt-small", {"node3": 4})):
        entry = snapshot.history.jobs.add(job_id=job_id)
        entry.current.accelerator_type = "a100"
        entry.current.devices = sum(holdings.values())
        entry.current.nodes.extend(sorted(holdings))
        for node, devices in sorted(holdings.items()):
            entry.node_devices[node] = devices
    return request


def allox_queues() -> service_pb.SolveRequest:
    """AlloX on 2 v100 + 2 k80: eight jobs with known remaining work (steps), one of them
    already running on a v100; the plan is per-device queues with completion times."""
    request = _request("allox")
    _add_type(request, "v100", 2)
    _add_type(request, "k80", 2)
    request.snapshot.time_s = 600.0
    for i, model in enumerate(("resnet50", "transformer", "a3c", "lm", "resnet18", "cyclegan",
                               "recommendation", "resnet50")):
        v100, _, k80 = MODELS[model]
        job = _add_job(request, f"{model}-{i}", {"v100": v100, "k80": k80})
        job.arrival_time_s = float(60 * i)
        job.progress.total_steps = float(1000 * (1 + i % 3))
    request.snapshot.jobs[0].progress.steps_done = 400.0
    running = request.snapshot.history.jobs.add()
    running.job_id = request.snapshot.jobs[0].id
    running.current.accelerator_type = "v100"
    running.current.devices = 1
    return request


def sia_configurations() -> service_pb.SolveRequest:
    """Sia on two node types (2 nodes x 4 a100, 2 nodes x 4 t4): five jobs, each with its
    goodput (samples/s) per configuration (type, nodes, GPUs); the plan is one configuration
    per job, placed on nodes."""
    request = _request("sia")
    for node_type, count in (("a100", 2), ("t4", 2)):
        _add_type(request, node_type, 4 * count)
        for n in range(count):
            node = request.snapshot.cluster.nodes.add()
            node.name, node.accelerator_type, node.devices = f"{node_type}-{n}", node_type, 4
    request.snapshot.time_s = 300.0
    speed = {"a100": 1.0, "t4": 0.3}
    for i, (job_id, base, scaling) in enumerate((
        ("bert", 300.0, 0.9), ("resnet50", 900.0, 0.95), ("gpt-small", 120.0, 0.85),
        ("cifar10", 2000.0, 0.6), ("deepspeech", 80.0, 0.8),
    )):
        job = request.snapshot.jobs.add()
        job.id = job_id
        job.arrival_time_s = float(30 * i)
        for node_type in ("a100", "t4"):
            for nodes, devices in ((1, 1), (1, 2), (1, 4), (2, 8)):
                config = job.configurations.add()
                config.accelerator_type, config.nodes, config.devices = node_type, nodes, devices
                config.goodput = round(base * speed[node_type] * devices**scaling, 3)
    return request


BUILDERS: dict[str, Callable[[], service_pb.SolveRequest]] = {
    "allox_queues.json": allox_queues,
    "sia_configurations.json": sia_configurations,
    "four_jobs.json": four_jobs,
    "cluster_32_jobs.json": cluster_32_jobs,
    "invalid.json": invalid,
    "tenants_and_sharing.json": tenants_and_sharing,
    "dgx_racks.json": dgx_racks,
    "elastic_lyra.json": elastic_lyra,
}


def render(request: service_pb.SolveRequest) -> str:
    """Canonical proto3 JSON (camelCase field names), two-space indent, trailing newline.

    Protobuf map iteration order is not stable between processes, so every per-type map (job
    throughputs, co-location throughputs) is written in the cluster's type order (names not in
    the cluster last, sorted).
    """
    data = json_format.MessageToDict(request)
    snapshot = data.get("snapshot", {})
    order = [t["name"] for t in snapshot.get("cluster", {}).get("acceleratorTypes", [])]

    def ordered(values: dict[str, object]) -> dict[str, object]:
        keys = [k for k in order if k in values]
        keys += sorted(k for k in values if k not in order)
        return {k: values[k] for k in keys}

    for job in snapshot.get("jobs", []):
        for name in ("throughput", "speedModel"):
            if name in job:
                job[name] = ordered(job[name])
    for entry in snapshot.get("history", {}).get("jobs", []):
        if "nodeDevices" in entry:
            entry["nodeDevices"] = dict(sorted(entry["nodeDevices"].items()))
    for pair in snapshot.get("colocations", []) + snapshot.get("typeColocations", []):
        for name in ("throughputA", "throughputB"):
            if name in pair:
                pair[name] = ordered(pair[name])
    return json.dumps(data, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args(argv)
    stale = []
    for filename, build in BUILDERS.items():
        path = EXAMPLES / filename
        text = render(build())
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(filename)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"out of date: {', '.join(stale)} (run python examples/make_examples.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
