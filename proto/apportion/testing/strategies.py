"""Hypothesis strategies for valid snapshots (docs/testing.md).

`snapshots(policy)` draws `apportion.v1.SolveRequest` messages that pass validation for that
policy: a cluster (types, counts, optionally nodes), jobs with throughputs, gangs, weights,
ages and remaining work, and whatever the policy's registry entry says it reads (history and
running jobs, tenants, pair throughputs, epoch profiles, per-configuration goodputs). Every
quantity has a keyword taking a strategy, so a test narrows exactly what it needs; the
defaults cover the degenerate cases on purpose: no jobs, a single type, types with no devices,
cells with zero throughput, and gangs as large as a type (`full_gangs`).

`problems(policy)` draws the same snapshots validated into `apportion.solver.model.Problem`
(what the formulations take), and `clusters()` the cluster alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from apportion.server.convert import request_to_model
from apportion.solver.capabilities import Capabilities, PlanKind
from apportion.solver.model import Problem
from apportion.solver.registry import PolicySpec, lookup
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

TYPE_NAMES = ("v100", "p100", "k80", "a100", "t4", "h100", "rtx", "cpu")
"""Accelerator type names, in order (a snapshot with n types uses the first n)."""

COUNTS: SearchStrategy[int] = st.one_of(st.integers(0, 4), st.integers(0, 16))
"""Devices per type: half the clusters small, so that capacity binds and prices are > 0."""
LOG_THROUGHPUTS: SearchStrategy[float] = st.floats(math.log(0.1), math.log(300.0)).map(math.exp)
"""Throughputs log-uniform in [0.1, 300] steps/s, the range of Gavel's measured tables."""
THROUGHPUTS: SearchStrategy[float] = st.one_of(st.just(0.0), LOG_THROUGHPUTS, LOG_THROUGHPUTS,
                                               LOG_THROUGHPUTS)
"""A cell's throughput: 0 (cannot run there) a quarter of the time, else `LOG_THROUGHPUTS`."""
SCALE_FACTORS: SearchStrategy[int] = st.sampled_from((1, 1, 2, 4, 8))
WEIGHTS: SearchStrategy[float | None] = st.one_of(st.none(), st.floats(0.5, 4.0))
"""Priority weights; None leaves the field unset (weight 1)."""
REMAINING_STEPS: SearchStrategy[float] = st.floats(math.log(1e3), math.log(1e6)).map(math.exp)
AGES: SearchStrategy[float] = st.one_of(st.just(0.0), st.floats(0.0, 1e4))
"""Seconds since a job arrived."""
NODE_SIZES: SearchStrategy[int] = st.sampled_from((1, 2, 4, 8))
"""Devices per node when the snapshot lists nodes."""
JOB_COUNTS: SearchStrategy[int] = st.integers(0, 8)
"""Jobs per snapshot (0 included: the empty snapshot is a case every policy must answer)."""
TYPE_COUNTS: SearchStrategy[int] = st.integers(1, 4)
"""Accelerator types per cluster."""
GOODPUTS: SearchStrategy[bool] = st.booleans()
"""Whether a job of a configuration policy lists goodputs per configuration (else its
throughput is used)."""


@dataclass(frozen=True)
class _Plan:
    """What a policy's snapshots must carry, from its registry entry."""

    spec: PolicySpec

    @property
    def caps(self) -> Capabilities:
        return self.spec.capabilities

    def reads(self, name: str) -> bool:
        return any(name in entry for entry in self.spec.required_inputs)


def clusters(
    *,
    types: SearchStrategy[int] = TYPE_COUNTS,
    count: SearchStrategy[int] = COUNTS,
    nodes: bool | None = False,
    node_size: SearchStrategy[int] = NODE_SIZES,
    node_count: SearchStrategy[int] | None = None,
) -> SearchStrategy[snapshot_pb.Cluster]:
    """Clusters of `types` types (named from `TYPE_NAMES`) with `count` devices each, at least
    one device in all. With `nodes` (None = half of the time) every type's devices sit on
    nodes of `node_size` devices: `node_count` of them, or (None) as many as its `count`
    fills (its count then a multiple of the node size)."""
    return _clusters(types, count, nodes, node_size, node_count)


@st.composite
def _clusters(
    draw: st.DrawFn,
    types: SearchStrategy[int],
    count: SearchStrategy[int],
    nodes: bool | None,
    node_size: SearchStrategy[int],
    node_count: SearchStrategy[int] | None,
) -> snapshot_pb.Cluster:
    n = max(1, min(draw(types), len(TYPE_NAMES)))
    with_nodes = draw(st.booleans()) if nodes is None else nodes
    cluster = snapshot_pb.Cluster()
    counts: list[int] = []
    for j in range(n):
        devices = max(draw(count), 0)
        if with_nodes:
            size = max(draw(node_size), 1)
            if node_count is not None:
                machines = max(draw(node_count), 0)
            else:
                machines = devices // size if devices >= size else int(devices > 0)
            devices = machines * size
            for k in range(machines):
                cluster.nodes.add(name=f"{TYPE_NAMES[j]}-{k}", accelerator_type=TYPE_NAMES[j],
                                  devices=size)
        counts.append(devices)
    if sum(counts) == 0:  # at least one device
        j = draw(st.integers(0, n - 1))
        counts[j] = 1
        if with_nodes:
            cluster.nodes.add(name=f"{TYPE_NAMES[j]}-0", accelerator_type=TYPE_NAMES[j], devices=1)
    for j, devices in enumerate(counts):
        cluster.accelerator_types.add(name=TYPE_NAMES[j], count=devices)
    return cluster


@dataclass(frozen=True)
class _Knobs:
    """The keywords of `snapshots`."""

    jobs: SearchStrategy[int]
    types: SearchStrategy[int]
    count: SearchStrategy[int]
    throughput: SearchStrategy[float]
    scale_factor: SearchStrategy[int]
    priority_weight: SearchStrategy[float | None]
    remaining_steps: SearchStrategy[float]
    age: SearchStrategy[float]
    nodes: bool | None
    node_size: SearchStrategy[int]
    node_count: SearchStrategy[int] | None
    full_gangs: bool
    every_cell_usable: bool
    goodputs: SearchStrategy[bool]
    parameters: Mapping[str, Any] | SearchStrategy[Mapping[str, Any]] | None
    options: Mapping[str, Any] | None


def snapshots(
    policy: str = "weighted_max_min_fairness",
    *,
    jobs: SearchStrategy[int] = JOB_COUNTS,
    types: SearchStrategy[int] = TYPE_COUNTS,
    count: SearchStrategy[int] = COUNTS,
    throughput: SearchStrategy[float] = THROUGHPUTS,
    scale_factor: SearchStrategy[int] = SCALE_FACTORS,
    priority_weight: SearchStrategy[float | None] = WEIGHTS,
    remaining_steps: SearchStrategy[float] = REMAINING_STEPS,
    age: SearchStrategy[float] = AGES,
    nodes: bool | None = None,
    node_size: SearchStrategy[int] = NODE_SIZES,
    node_count: SearchStrategy[int] | None = None,
    full_gangs: bool = True,
    every_cell_usable: bool = False,
    goodputs: SearchStrategy[bool] = GOODPUTS,
    parameters: Mapping[str, Any] | SearchStrategy[Mapping[str, Any]] | None = None,
    options: Mapping[str, Any] | None = None,
) -> SearchStrategy[service_pb.SolveRequest]:
    """Valid `SolveRequest`s for `policy` (a registered name or alias).

    Quantities drawn per snapshot: `jobs`, `types`; per type: `count` (devices); per job:
    `throughput` per type (steps/s of the whole gang; 0 = cannot run there), `scale_factor`
    (gang size; lowered to the largest count when no type is that large), `priority_weight`
    (None = unset), `remaining_steps` and `age` (s since arrival). A job left without a usable
    type gets a positive throughput on a type its gang fits. `full_gangs`: a quarter of the
    jobs get a gang as large as one of their usable types. `every_cell_usable`: no zero
    throughput, no type without devices, every gang fits every type (for closed forms).

    `nodes`: list the cluster's nodes (None = when the policy reads `cluster.nodes` or
    configurations, else half of the time), `node_size` devices each; `node_count` nodes per
    type (None = the type's drawn `count` split into nodes).

    Inputs the policy's capabilities ask for are added: history (running jobs, finish-time
    state, restarts) for `needs_history`, tenants for `reads_tenants`, pair throughputs for
    `uses_colocations`, epoch profiles for `reads_epoch_profiles`, per-configuration goodputs
    (for the jobs `goodputs` draws True for; running jobs run one of them) and elasticity for
    `reads_configurations`. `parameters` (a dict or a strategy of dicts, the policy's
    parameter message in JSON form) and `options` (`SolveOptions` fields by JSON name) are set
    as given.
    """
    knobs = _Knobs(jobs, types, count, throughput, scale_factor, priority_weight,
                   remaining_steps, age, nodes, node_size, node_count, full_gangs,
                   every_cell_usable, goodputs, parameters, options)
    return _snapshots(policy, _Plan(lookup(policy)), knobs)


@st.composite
def _snapshots(
    draw: st.DrawFn, policy: str, plan: _Plan, knobs: _Knobs
) -> service_pb.SolveRequest:
    from google.protobuf import json_format

    caps = plan.caps
    with_nodes = knobs.nodes
    if with_nodes is None:
        with_nodes = plan.reads("cluster.nodes") or caps.reads_configurations \
            or draw(st.booleans())
    request = service_pb.SolveRequest()
    request.policy.name = policy
    snapshot = request.snapshot
    count = knobs.count.map(lambda c: max(c, 1)) if knobs.every_cell_usable else knobs.count
    snapshot.cluster.CopyFrom(draw(_clusters(knobs.types, count, with_nodes, knobs.node_size,
                                             knobs.node_count)))
    if caps.plan_kind is PlanKind.WINDOW:
        _homogeneous(draw, snapshot.cluster)
    names = [t.name for t in snapshot.cluster.accelerator_types]
    counts = [t.count for t in snapshot.cluster.accelerator_types]
    snapshot.time_s = draw(st.sampled_from((0.0, 1e4, 1e5)))
    for i in range(max(draw(knobs.jobs), 0)):
        job = snapshot.jobs.add(id=f"job{i}")
        _job(draw, job, names, counts, knobs)
        weight = draw(knobs.priority_weight)
        if weight is not None:
            job.priority_weight = weight
        job.arrival_time_s = snapshot.time_s - min(draw(knobs.age), snapshot.time_s + 1e4)
        total = draw(knobs.remaining_steps)
        done = total * draw(st.sampled_from((0.0, 0.0, 0.25, 0.5)))
        job.progress.total_steps = total + done
        job.progress.steps_done = done
    if caps.reads_device_sharing:  # first: opportunistic jobs get gangs of 1
        _device_sharing(draw, snapshot)
    if caps.reads_resource_profiles:
        _resource_profiles(draw, snapshot)
    if caps.reads_stage_times:
        _stage_times(draw, snapshot)
    if caps.reads_tenants:
        _tenants(draw, snapshot)
    if caps.reads_configurations:
        _configurations(draw, snapshot, knobs.goodputs)
    if caps.needs_history or plan.reads("history.jobs[].current"):
        _history(draw, snapshot, counts)
    if caps.uses_colocations:
        _colocations(draw, snapshot)
    if caps.reads_epoch_profiles:
        _epochs(draw, snapshot)
    if plan.reads("round_duration_s"):
        snapshot.round_duration_s = draw(st.sampled_from((0.0, 60.0, 360.0)))
    given = draw(knobs.parameters) if isinstance(knobs.parameters, SearchStrategy) \
        else knobs.parameters
    if given is None and caps.reads_device_sharing:
        given = _device_memory_parameter(plan.spec)
    if given is not None and plan.spec.parameters_field:
        field = getattr(request.policy, plan.spec.parameters_field)
        json_format.ParseDict(dict(given), field)
        field.SetInParent()
    reference = str(plan.spec.aliases.get(policy, {}).get("reference_type", "")
                    or (given or {}).get("referenceType", (given or {}).get("reference_type", "")))
    if reference:  # agnostic variants copy this type's column: every job needs a rate there
        for job in snapshot.jobs:
            if job.throughput.get(reference, 0.0) <= 0:
                job.throughput[reference] = draw(LOG_THROUGHPUTS)
    if knobs.options:
        json_format.ParseDict(dict(knobs.options), request.options)
    return request


def _homogeneous(draw: st.DrawFn, cluster: snapshot_pb.Cluster) -> None:
    """Keep the devices of one type only (planning-window policies pool one type)."""
    kept = draw(st.sampled_from([t.name for t in cluster.accelerator_types if t.count > 0]))
    for t in cluster.accelerator_types:
        if t.name != kept:
            t.count = 0
    nodes = [node for node in cluster.nodes if node.accelerator_type == kept]
    del cluster.nodes[:]
    cluster.nodes.extend(nodes)


def _job(
    draw: st.DrawFn, job: snapshot_pb.Job, names: list[str], counts: list[int], knobs: _Knobs
) -> None:
    """Throughputs and gang of one job, with at least one usable type."""
    n = len(names)
    positive = knobs.throughput.filter(lambda x: x > 0) if _can_be_positive(knobs.throughput) \
        else st.just(1.0)
    rates = [max(draw(knobs.throughput), 0.0) for _ in range(n)]
    largest = min(counts) if knobs.every_cell_usable else max(counts)
    gang = max(1, min(draw(knobs.scale_factor), largest))
    if knobs.every_cell_usable:
        rates = [rate if rate > 0 else draw(positive) for rate in rates]
    fits = [j for j in range(n) if counts[j] >= gang]
    if not any(rates[j] > 0 for j in fits):
        rates[draw(st.sampled_from(fits))] = draw(positive)
    usable = [j for j in range(n) if rates[j] > 0 and counts[j] >= gang]
    if knobs.full_gangs and draw(st.integers(0, 3)) == 0:
        gang = min(counts) if knobs.every_cell_usable else counts[draw(st.sampled_from(usable))]
    for j, rate in enumerate(rates):
        if rate > 0 or draw(st.booleans()):  # 0 is written or left out: both mean "cannot run"
            job.throughput[names[j]] = rate
    if gang != 1 or draw(st.booleans()):
        job.scale_factor = gang


def _can_be_positive(strategy: SearchStrategy[float]) -> bool:
    """False for strategies that only produce 0 (a filter would never succeed)."""
    return repr(strategy) not in ("just(0.0)", "just(0)")


def _tenants(draw: st.DrawFn, snapshot: snapshot_pb.Snapshot) -> None:
    """0-3 listed tenants (weights, fairness or FIFO); each job in one of them or its own."""
    count = draw(st.integers(0, 3))
    sharing = (snapshot_pb.TENANT_SHARING_FAIRNESS, snapshot_pb.TENANT_SHARING_FIFO,
               snapshot_pb.TENANT_SHARING_UNSPECIFIED)
    for k in range(count):
        tenant = snapshot.tenants.add(name=f"tenant{k}", sharing=draw(st.sampled_from(sharing)))
        if draw(st.booleans()):
            tenant.weight = draw(st.floats(0.5, 4.0))
    choices = ["", *(t.name for t in snapshot.tenants)]
    for job in snapshot.jobs:
        job.tenant = draw(st.sampled_from(choices))


def _history(draw: st.DrawFn, snapshot: snapshot_pb.Snapshot, counts: list[int]) -> None:
    """Finish-time state and restarts for some jobs, and running jobs within capacity (placed
    on nodes with room when the cluster lists nodes)."""
    names = [t.name for t in snapshot.cluster.accelerator_types]
    held = [0] * len(names)
    free = {node.name: node.devices for node in snapshot.cluster.nodes}
    for job in snapshot.jobs:
        if draw(st.integers(0, 2)) != 0:
            continue
        entry = snapshot.history.jobs.add(job_id=job.id)
        entry.cumulative_isolated_time_s = draw(st.sampled_from((0.0, 10.0, 300.0)))
        entry.restarts = draw(st.integers(0, 3))
        if job.configurations:  # it runs one of its configurations
            shapes = [(c.accelerator_type, c.devices) for c in job.configurations]
        else:
            shapes = [(name, job.scale_factor or 1) for name in names
                      if job.throughput.get(name, 0.0) > 0]
        room = [(name, gang) for name, gang in shapes
                if held[names.index(name)] + gang <= counts[names.index(name)]]
        if not room or not draw(st.booleans()):
            continue
        name, gang = draw(st.sampled_from(room))
        j = names.index(name)
        nodes = _take_nodes(snapshot, free, names[j], gang)
        if snapshot.cluster.nodes and nodes is None:
            continue
        held[j] += gang
        entry.current.accelerator_type = names[j]
        entry.current.devices = gang
        entry.current.nodes.extend(nodes or ())
        if draw(st.booleans()):
            entry.current.busy_until_s = snapshot.time_s + draw(st.sampled_from((60.0, 600.0)))


def _take_nodes(
    snapshot: snapshot_pb.Snapshot, free: dict[str, int], type_name: str, gang: int
) -> list[str] | None:
    """Nodes of `type_name` with `gang` free devices (one node if it fits, else whole nodes);
    None when there is no room."""
    candidates = [node for node in snapshot.cluster.nodes if node.accelerator_type == type_name]
    for node in candidates:
        if free[node.name] >= gang:
            free[node.name] -= gang
            return [node.name]
    chosen: list[str] = []
    need = gang
    for node in candidates:
        if free[node.name] == node.devices and need > 0:
            chosen.append(node.name)
            need -= node.devices
    if need > 0:
        return None
    for name in chosen:
        free[name] = 0
    return chosen


def _colocations(draw: st.DrawFn, snapshot: snapshot_pb.Snapshot) -> None:
    """Pair throughputs (each job slowed to 30-100% of its own rate) for some pairs of jobs
    with equal gangs, per job pair or per job-type pair."""
    jobs = list(snapshot.jobs)
    by_types = draw(st.booleans())
    if by_types:
        kinds = ("ka", "kb")
        for job in jobs:
            job.job_type = draw(st.sampled_from(kinds))
        for kind_a, kind_b in (("ka", "ka"), ("ka", "kb"), ("kb", "kb")):
            if draw(st.booleans()):
                typed = snapshot.type_colocations.add(type_a=kind_a, type_b=kind_b)
                for t in snapshot.cluster.accelerator_types:
                    typed.throughput_a[t.name] = draw(st.floats(0.3, 1.0)) * 10
                    typed.throughput_b[t.name] = draw(st.floats(0.3, 1.0)) * 10
        return
    for x in range(len(jobs)):
        for y in range(x + 1, len(jobs)):
            a, b = jobs[x], jobs[y]
            if (a.scale_factor or 1) != (b.scale_factor or 1) or not draw(st.booleans()):
                continue
            pair = snapshot.colocations.add(job_a=a.id, job_b=b.id)
            for name, rate in a.throughput.items():
                if rate > 0 and b.throughput.get(name, 0.0) > 0:
                    pair.throughput_a[name] = rate * draw(st.floats(0.3, 1.0))
                    pair.throughput_b[name] = b.throughput[name] * draw(st.floats(0.3, 1.0))


def _epochs(draw: st.DrawFn, snapshot: snapshot_pb.Snapshot) -> None:
    """Per-epoch profiles (1-8 epochs of 10-1000 s, batch sizes 32-256) and epochs done."""
    snapshot.round_duration_s = draw(st.sampled_from((0.0, 60.0, 120.0)))
    for job in snapshot.jobs:
        epochs = draw(st.integers(1, 8))
        job.progress.total_epochs = epochs
        job.progress.epochs_done = draw(st.integers(0, epochs - 1))
        job.epoch_profile.epoch_duration_s.extend(
            draw(st.lists(st.floats(10.0, 1000.0), min_size=epochs, max_size=epochs)))
        job.epoch_profile.batch_size.extend(
            draw(st.lists(st.sampled_from((32, 64, 128, 256)), min_size=epochs,
                          max_size=epochs)))


DEVICE_MEMORY_GIB = 24.0
"""Device memory given to the co-location policies that need one when the snapshot lists no
device memory (their parameter `device_memory_gib`)."""


def _resource_profiles(draw: st.DrawFn, snapshot: snapshot_pb.Snapshot) -> None:
    """CPU and memory on every node (3 cores and 62.5 GiB per device, the GPU-proportional
    share) and a profile per job: throughput (c/3)^a (m/62.5)^b on a 3 x 3 grid around that
    share (1 at the share, a and b in [0, 0.6])."""
    for node in snapshot.cluster.nodes:
        node.cpus = 3.0 * max(node.devices, 1)
        node.memory_gib = 62.5 * max(node.devices, 1)
    cpus, memory = (1.5, 3.0, 6.0), (31.25, 62.5, 125.0)
    for job in snapshot.jobs:
        a, b = draw(st.floats(0.0, 0.6)), draw(st.floats(0.0, 0.6))
        profile = job.resource_profile
        profile.cpus_per_gpu.extend(cpus)
        profile.memory_gib_per_gpu.extend(memory)
        profile.throughput.extend((c / 3.0) ** a * (m / 62.5) ** b for c in cpus for m in memory)


def _stage_times(draw: st.DrawFn, snapshot: snapshot_pb.Snapshot) -> None:
    """Time per iteration in each of the four stages (0.01-1 s; some stages 0)."""
    stage = st.one_of(st.just(0.0), st.floats(0.01, 1.0), st.floats(0.01, 1.0))
    for job in snapshot.jobs:
        times = job.stage_times
        times.storage_s, times.cpu_s = draw(stage), draw(stage)
        times.gpu_s, times.network_s = draw(st.floats(0.01, 1.0)), draw(stage)


def _device_sharing(draw: st.DrawFn, snapshot: snapshot_pb.Snapshot) -> None:
    """Device memory and utilization per job (a third of the device memory or less), sharing
    scores, a service class (opportunistic jobs have one device), and slowdowns for some
    pairs of jobs."""
    classes = (snapshot_pb.SERVICE_CLASS_UNSPECIFIED, snapshot_pb.SERVICE_CLASS_GUARANTEED,
               snapshot_pb.SERVICE_CLASS_OPPORTUNISTIC, snapshot_pb.SERVICE_CLASS_BEST_EFFORT)
    for job in snapshot.jobs:
        job.sharing.gpu_memory_gib = draw(st.floats(0.5, DEVICE_MEMORY_GIB / 3))
        job.sharing.gpu_utilization = draw(st.floats(0.05, 0.9))
        if draw(st.booleans()):
            job.sharing.sharing_score = draw(st.integers(0, 2))
        job.service_class = draw(st.sampled_from(classes))
        if job.service_class in classes[2:]:
            job.scale_factor = 1
    jobs = list(snapshot.jobs)
    for x in range(len(jobs)):
        for y in range(x + 1, len(jobs)):
            same_gang = (jobs[x].scale_factor or 1) == (jobs[y].scale_factor or 1)
            if same_gang and draw(st.integers(0, 3)) == 0:
                snapshot.interference.add(job_ids=[jobs[x].id, jobs[y].id],
                                           slowdown=[draw(st.floats(1.0, 2.0)),
                                                     draw(st.floats(1.0, 2.0))])


def _device_memory_parameter(spec: PolicySpec) -> dict[str, Any] | None:
    """{"deviceMemoryGib": DEVICE_MEMORY_GIB} when the policy's parameters have that field
    (the device memory of snapshots without a device list), else None."""
    if not spec.parameters_message:
        return None
    from apportion.v1 import policy_pb2

    message = getattr(policy_pb2, spec.parameters_message.rsplit(".", 1)[-1], None)
    if message is None or "device_memory_gib" not in message.DESCRIPTOR.fields_by_name:
        return None
    return {"deviceMemoryGib": DEVICE_MEMORY_GIB}


def configuration_shapes(snapshot: snapshot_pb.Snapshot) -> list[tuple[str, int, int]]:
    """(type, nodes, devices) shapes a cluster offers (A5.2): single-node powers of two up to
    the node size, then whole nodes; one device per type count without nodes."""
    shapes: list[tuple[str, int, int]] = []
    for t in snapshot.cluster.accelerator_types:
        sizes = [node.devices for node in snapshot.cluster.nodes if node.accelerator_type == t.name]
        if not sizes:
            continue
        size = max(sizes)
        power = 1
        while power <= size:
            shapes.append((t.name, 1, power))
            power *= 2
        shapes += [(t.name, k, k * size) for k in range(2, len(sizes) + 1)]
    return shapes


def _configurations(
    draw: st.DrawFn, snapshot: snapshot_pb.Snapshot, goodputs: SearchStrategy[bool]
) -> None:
    """Per-configuration goodputs (concave in the devices; 4 in 5 shapes given) for the jobs
    `goodputs` picks, elasticity limits for some; the others fall back to their throughput."""
    shapes = configuration_shapes(snapshot)
    for job in snapshot.jobs:
        given = bool(shapes) and draw(goodputs)
        if given:
            for type_name, nodes, devices in shapes:
                if draw(st.integers(0, 4)) > 0:
                    value = draw(st.floats(0.5, 50.0)) * devices ** draw(st.floats(0.3, 1.0))
                    job.configurations.add(accelerator_type=type_name, nodes=nodes,
                                           devices=devices, goodput=value)
        if draw(st.integers(0, 3)) == 0:
            job.elasticity.max_devices = draw(st.sampled_from((1, 2, 4, 8)))


def problems(policy: str = "weighted_max_min_fairness", **kwargs: Any) -> SearchStrategy[Problem]:
    """`snapshots(policy, **kwargs)` validated into the solver's model (`Problem`): what a
    formulation takes. Every drawn snapshot is valid, so nothing is filtered."""
    return snapshots(policy, **kwargs).map(lambda request: request_to_model(request)[0])
