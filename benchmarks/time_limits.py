"""Are time limits kept end to end? Every registered policy over gRPC, at 100,000 jobs.

    python benchmarks/time_limits.py [--jobs 100000] [--limits 1 2] [--policies NAME ...]

For each policy in the registry: a seeded snapshot of `--jobs` jobs (Gavel's generator, the
project's synthetic throughputs, and what the policy reads: tenants, pair throughputs,
per-epoch profiles on a one-type cluster, per-configuration goodputs; CPU/memory grids per job
type on nodes of 3 cores and 62.5 GiB per GPU (Synergy's servers); per-iteration stage times;
device memory, utilization, opportunistic jobs and measured pair slowdowns for a policy that
needs shared devices), sent to a real ``apportion serve --workers 1`` on 127.0.0.1 with
``options.time_limit_s`` = each limit and a generous gRPC deadline. The wall time is the
client's, from handing the request's bytes to gRPC to holding the parsed response (the
client's own serialization is printed beside it as `encode s`: it is the caller's work, before
anything reaches the service). Target: wall <= 1.1 x limit + 0.2 s, with an honest
termination.

A policy whose snapshot cannot be built that big (over the server's 64 MiB message limit,
rejected by validation, or estimated to take the snapshot builder over 2 minutes) is tried at
32,768, 8,192 and 2,048 jobs; the size used and the reason are printed.
Reference in the same run, per policy: the same request with a 1 µs limit, answered right after
parsing and validation (`no_solution`): the part of the wall time that is not the solve.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import grpc
import numpy as np
from served import start_server, stop

from apportion.datasets.cluster import ClusterSpec
from apportion.datasets.colocation_profiles import (
    synthetic_device_use,
    synthetic_resource_grid,
    synthetic_stage_times,
)
from apportion.datasets.generators import (
    builtin_throughputs,
    gavel_workload,
    make_cluster,
    pair_throughputs,
)
from apportion.datasets.snapshot import (
    build_request,
    builtin_epoch_profiles,
    builtin_goodputs,
    job_type_key,
)
from apportion.datasets.table import JobTable
from apportion.server.convert import request_to_model
from apportion.server.render import termination_name
from apportion.simulator.host_resources import DEFAULT_CPUS_PER_GPU, DEFAULT_MEMORY_GIB_PER_GPU
from apportion.solver.capabilities import ProblemClass
from apportion.solver.errors import ValidationError
from apportion.solver.registry import PolicySpec, policies
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

SMALLER = (32_768, 8_192, 2_048)
MAX_MESSAGE_BYTES = 64 * 2**20
"""The server's default request limit."""
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 256 * 2**20),
    ("grpc.max_receive_message_length", 256 * 2**20),
]
BUILD_BUDGET_S = 120.0
"""A snapshot estimated to take longer than this to build (in this script) is built smaller
(the estimate: a 2,048-job build scaled a little more than linearly)."""
CALIBRATION_JOBS = 2048
GPUS_PER_JOB = 0.75
"""Cluster size: devices per job of the snapshot (a congested cluster)."""
GPUS_PER_NODE = 8
DEVICE_MEMORY_GIB = 32.0
"""Device memory of a policy that shares devices (its `device_memory_gib` parameter)."""
SHARED_DEVICES = "shared_devices[]"
"""The required input of a policy that shares devices between jobs (in `required_inputs`)."""


def target_s(limit_s: float) -> float:
    return 1.1 * limit_s + 0.2


def snapshot(spec: PolicySpec, jobs: int, seed: int = 0) -> service_pb.SolveRequest:
    """A `jobs`-job snapshot with the inputs `spec` reads (module docstring)."""
    caps = spec.capabilities
    table = gavel_workload(
        jobs, seed=seed, multi_priority=True, slo=True,
        num_tenants=5 if caps.reads_tenants else 0,
    )
    devices = max(8, int(GPUS_PER_JOB * jobs))
    cluster: ClusterSpec
    if caps.reads_epoch_profiles:  # planning-window policies take one accelerator type
        cluster = make_cluster({"v100": devices})
    elif caps.reads_resource_profiles:  # the synthetic grids are 1 at Synergy's servers' share
        cluster = make_cluster(total=devices, mix={"v100": 1, "p100": 1, "k80": 1},
                               gpus_per_node=GPUS_PER_NODE,
                               cpus_per_node=DEFAULT_CPUS_PER_GPU * GPUS_PER_NODE,
                               memory_gib_per_node=DEFAULT_MEMORY_GIB_PER_GPU * GPUS_PER_NODE)
    else:
        cluster = make_cluster(total=devices, mix={"v100": 1, "p100": 1, "k80": 1})
    throughputs = builtin_throughputs(cluster.types)
    colocations = caps.uses_colocations and caps.problem_class == ProblemClass.HEURISTIC
    if colocations:
        throughputs = pair_throughputs(throughputs, seed=seed, scale_factors=(1, 2, 4, 8))
    request, _ = build_request(
        table, cluster, throughputs, 0.0, seed=seed, policy=spec.name,
        colocations=colocations,
        epoch_profiles=builtin_epoch_profiles(table, seed) if caps.reads_epoch_profiles else None,
        goodputs=builtin_goodputs(cluster, seed=seed) if caps.reads_configurations else None,
    )
    rng = np.random.default_rng([seed, 1])
    if caps.reads_resource_profiles:
        _add_resource_profiles(request.snapshot, table, rng)
    if caps.reads_stage_times:
        _add_stage_times(request.snapshot.jobs, rng)
    if SHARED_DEVICES in spec.required_inputs:
        _add_device_use(request, spec, rng)
    return request


def _add_resource_profiles(snap: snapshot_pb.Snapshot, table: JobTable,
                           rng: np.random.Generator) -> None:
    """Every job's job type (its throughput-table key) and a synthetic grid per job type."""
    row = {str(job_id): k for k, job_id in enumerate(table.id.tolist())}
    job_types = table.column("job_type")
    grids: dict[str, None] = {}
    for job in snap.jobs:
        job.job_type = job_type_key((str(job_types[row[job.id]]), job.scale_factor or 1))
        grids.setdefault(job.job_type)
    for job_type in grids:
        grid = synthetic_resource_grid(rng)
        profile = snap.resource_profiles.add(job_type=job_type)
        profile.cpus_per_gpu.extend(grid.cpus_per_gpu.tolist())
        profile.memory_gib_per_gpu.extend(grid.memory_gib_per_gpu.tolist())
        profile.throughput.extend(grid.throughput.reshape(-1).tolist())


def _add_stage_times(jobs: Sequence[snapshot_pb.Job], rng: np.random.Generator) -> None:
    for job, (storage, cpu, gpu, network) in zip(
        jobs, synthetic_stage_times(rng, len(jobs)).tolist(), strict=True
    ):
        times = job.stage_times
        times.storage_s, times.cpu_s, times.gpu_s, times.network_s = storage, cpu, gpu, network


def _add_device_use(request: service_pb.SolveRequest, spec: PolicySpec,
                    rng: np.random.Generator) -> None:
    """Device memory (the policy's parameter), each job's memory and utilization, opportunistic
    jobs, and the measured pairs as interference."""
    snap = request.snapshot
    scale = np.array([job.scale_factor or 1 for job in snap.jobs], np.int64)
    use = synthetic_device_use(rng, scale)
    params = getattr(request.policy, spec.parameters_field)
    params.device_memory_gib = DEVICE_MEMORY_GIB
    for job, memory, utilization, opportunistic in zip(
        snap.jobs, use.gpu_memory_gib.tolist(), use.gpu_utilization.tolist(),
        use.opportunistic.tolist(), strict=True,
    ):
        job.sharing.gpu_memory_gib, job.sharing.gpu_utilization = memory, utilization
        if opportunistic:
            job.service_class = snapshot_pb.SERVICE_CLASS_OPPORTUNISTIC
    ids = [job.id for job in snap.jobs]
    for (a, b), (slow_a, slow_b) in zip(use.pairs.tolist(), use.pair_slowdown.tolist(),
                                        strict=True):
        snap.interference.add(job_ids=[ids[a], ids[b]], slowdown=[slow_a, slow_b])


def buildable(spec: PolicySpec, sizes: list[int]) -> tuple[service_pb.SolveRequest | None, str]:
    """The largest snapshot in `sizes` the server accepts and that builds within
    `BUILD_BUDGET_S` (estimated from a 2,048-job build), and what happened to larger ones."""
    notes = []
    started = time.perf_counter()
    snapshot(spec, CALIBRATION_JOBS)
    calibration_s = time.perf_counter() - started
    for jobs in sizes:
        estimate = calibration_s * (jobs / CALIBRATION_JOBS) ** 1.1
        if estimate > BUILD_BUDGET_S:
            notes.append(f"{jobs} jobs: building would take about {estimate:.0f} s")
            continue
        started = time.perf_counter()
        request = snapshot(spec, jobs)
        size = request.ByteSize()
        if size > MAX_MESSAGE_BYTES:
            notes.append(f"{jobs} jobs: {size / 2**20:.0f} MiB, over the message limit")
            continue
        try:
            request_to_model(request)
        except ValidationError as exc:
            notes.append(f"{jobs} jobs: rejected ({exc.violations[0]})"[:160])
            continue
        notes.append(f"built {len(request.snapshot.jobs)} jobs in "
                     f"{time.perf_counter() - started:.1f} s")
        return request, "; ".join(notes)
    return None, "; ".join(notes)


SOLVE_METHOD = "/apportion.v1.AllocationService/Solve"


def call(
    channel: grpc.Channel, request: service_pb.SolveRequest, limit_s: float
) -> tuple[float, str, float, float]:
    """(client wall s, termination or error code, server-reported wall s, the client's own
    serialization s). The wall runs from handing the request's bytes to gRPC to holding the
    parsed response: the service's part (wire, queue, solve, reply). Turning the client's
    message objects into bytes is the client's own work, timed separately (a 38 MiB request
    takes this Python client 0.2-0.4 s)."""
    request.options.time_limit_s = limit_s
    started = time.perf_counter()
    payload = request.SerializeToString()
    serialize_s = time.perf_counter() - started
    solve = channel.unary_unary(SOLVE_METHOD,
                                response_deserializer=service_pb.SolveResponse.FromString)
    sent = time.perf_counter()
    try:
        reply = solve(payload, timeout=30 + 5 * limit_s)
    except grpc.RpcError as error:
        return time.perf_counter() - sent, error.code().name, float("nan"), serialize_s
    wall = time.perf_counter() - sent
    return wall, termination_name(reply.stats.termination), reply.stats.wall_time_s, serialize_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--limits", type=float, nargs="+", default=[1.0, 2.0])
    parser.add_argument("--policies", nargs="*", help="registry names (default: all)")
    args = parser.parse_args()
    chosen = [s for s in policies() if not args.policies or s.name in args.policies]
    sizes = [args.jobs, *(n for n in SMALLER if n < args.jobs)]

    process, address, _ = start_server("--workers", "1")
    print(f"{'policy':<30} {'jobs':>7} {'MiB':>5} {'limit':>5} {'wall s':>7} {'target':>6} "
          f"{'':>4}  {'termination':<18} {'server s':>8} {'encode s':>8}  fixed s")
    failures = []
    try:
        with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
            for spec in chosen:
                request, note = buildable(spec, sizes)
                if request is None:
                    print(f"{spec.name:<30} not run: {note}")
                    continue
                fixed, fixed_termination, _, _ = call(channel, request, 1e-6)
                jobs = len(request.snapshot.jobs)
                mib = request.ByteSize() / 2**20
                for limit in args.limits:
                    wall, termination, server_wall, encode = call(channel, request, limit)
                    ok = wall <= target_s(limit)
                    if not ok:
                        failures.append(f"{spec.name} at {limit:g} s")
                    print(f"{spec.name:<30} {jobs:>7} {mib:>5.1f} {limit:>5g} {wall:>7.2f} "
                          f"{target_s(limit):>6.2f} {'ok' if ok else 'OVER':>4}  "
                          f"{termination:<18} {server_wall:>8.2f} {encode:>8.2f}  {fixed:.2f} "
                          f"({fixed_termination})", flush=True)
                if jobs < args.jobs:
                    print(f"{'':<30} ({note})")
    finally:
        stop(process)
    print(f"over the target: {', '.join(failures) if failures else 'none'}")


if __name__ == "__main__":
    main()
