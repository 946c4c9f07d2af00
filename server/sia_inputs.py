"""Conversion and validation of the inputs the configuration policies read (A5,
docs/policies/sia.md; B4).

* `sia_parameters`, `pollux_parameters` convert their `Policy.parameters` messages.
* `configuration_columns` reads every job's per-configuration goodput, Pollux model and
  elasticity (validated for every policy: they are snapshot facts).
* `check_configuration_policy` is the input check of sia and pollux (declared on their
  registry entries): node caps by type name, job ages, current configurations.

Every problem becomes `Violation(field_path, description)`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from apportion.server.configuration_wire import CONFIGURATIONS_TAG, read_entries
from apportion.server.job_wire import JobFields, JobSpans
from apportion.server.request_context import RequestContext
from apportion.solver import limits
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.errors import Violation, echo, key, listing
from apportion.solver.model import (
    Cluster,
    GivenGoodput,
    GivenGoodputs,
    IntArray,
    PolluxJobModel,
)
from apportion.solver.parameters import PolluxParameters, SiaParameters
from apportion.solver.validation import RATE_RULE, rate_ok, within
from apportion.v1 import snapshot_pb2 as snapshot_pb

_PERF_FIELDS = ("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma")
_DEFAULT_MAX_GPUS = 64


def _power(msg: Any, path: str, default: float, violations: list[Violation]) -> float:
    p = msg.fairness_power if msg.HasField("fairness_power") else default
    bound = limits.MAX_FAIRNESS_POWER
    if not within(p, -bound, bound):
        violations.append(Violation(path, f"must be in [{-bound:g}, {bound:g}], got {p}"))
        return default
    if p == 0:
        violations.append(
            Violation(path, "p = 0 is undefined (goodput^0 = 1 makes every configuration equal)")
        )
        return default
    return float(p)


def _max_gpus(msg: Any, path: str, violations: list[Violation]) -> int:
    if not msg.HasField("max_gpus"):
        return _DEFAULT_MAX_GPUS
    if not 1 <= msg.max_gpus <= limits.MAX_DEVICES_PER_TYPE:
        violations.append(Violation(
            path, f"must be in [1, {limits.MAX_DEVICES_PER_TYPE}], got {msg.max_gpus}"))
        return _DEFAULT_MAX_GPUS
    return int(msg.max_gpus)


def sia_parameters(msg: Any, violations: list[Violation]) -> object:
    """`SiaParameters` from its message."""
    p = _power(msg, "policy.sia.fairness_power", -0.5, violations)
    penalty = 1.1 if p < 0 else -1.1
    if msg.HasField("no_allocation_penalty"):
        penalty = msg.no_allocation_penalty
        if (
            not within(penalty, -limits.MAX_KNOB, limits.MAX_KNOB)
            or penalty == 0
            or (penalty > 0) == (p > 0)
        ):
            violations.append(
                Violation(
                    "policy.sia.no_allocation_penalty",
                    f"must have the opposite sign of fairness_power ({p:g}) and magnitude at "
                    f"most {limits.MAX_KNOB:g}, got {penalty}",
                )
            )
            penalty = 1.1 if p < 0 else -1.1
    for name, cap in sorted(msg.max_nodes_per_type.items()):
        if not 1 <= cap <= limits.MAX_NODES:
            violations.append(Violation(f"policy.sia.max_nodes_per_type{key(name)}",
                                        f"must be in [1, {limits.MAX_NODES}], got {cap}"))
    caps: tuple[tuple[str, int], ...] | None = None
    if msg.no_node_caps:
        caps = ()
        if msg.max_nodes_per_type:
            violations.append(Violation("policy.sia.max_nodes_per_type",
                                        "must be empty when no_node_caps is set"))
    elif msg.max_nodes_per_type:
        caps = tuple((name, int(cap)) for name, cap in sorted(msg.max_nodes_per_type.items()))
    return SiaParameters(
        fairness_power=p,
        no_allocation_penalty=float(penalty),
        max_gpus=_max_gpus(msg, "policy.sia.max_gpus", violations),
        round_coefficients=msg.round_coefficients,
        pin_running=msg.pin_running,
        max_nodes_per_type=caps,
    )


def pollux_parameters(msg: Any, violations: list[Violation]) -> object:
    """`PolluxParameters` from its message."""
    return PolluxParameters(
        fairness_power=_power(msg, "policy.pollux.fairness_power", -1.0, violations),
        max_gpus=_max_gpus(msg, "policy.pollux.max_gpus", violations),
    )


def _pollux_model(
    model: snapshot_pb.PolluxModel,
    p: str,
    type_index: dict[str, int],
    n: int,
    violations: list[Violation],
) -> PolluxJobModel | None:
    """The job's Pollux model (None when invalid): perf params finite, >= 0 and at most
    MAX_MODEL_PARAMETER, gamma in [1, 10], gradient statistics and batch sizes valid."""
    ok = True
    top_value = limits.MAX_MODEL_PARAMETER
    perf = np.full((n, 7), np.nan)
    for name, params in model.perf_params.items():
        fp = f"{p}.perf_params[{echo(name)}]"
        if name not in type_index:
            violations.append(Violation(fp, f"unknown accelerator type {echo(name)}"))
            ok = False
            continue
        values = [getattr(params, f) for f in _PERF_FIELDS]
        for f, v in zip(_PERF_FIELDS[:6], values[:6], strict=True):
            if not within(v, 0.0, top_value):
                violations.append(Violation(f"{fp}.{f}", f"must be in [0, {top_value:g}], got {v}"))
                ok = False
        if ok and values[0] + values[1] < 1 / top_value:
            violations.append(Violation(f"{fp}.alpha_c",
                                        f"alpha_c + beta_c must be at least {1 / top_value:g}"))
            ok = False
        if not within(values[6], 1.0, 10.0):
            violations.append(Violation(f"{fp}.gamma", f"must be in [1, 10], got {values[6]}"))
            ok = False
        perf[type_index[name]] = values
    seed = np.zeros(n)
    for name, value in model.seed_throughput.items():
        fp = f"{p}.seed_throughput[{echo(name)}]"
        if name not in type_index:
            violations.append(Violation(fp, f"unknown accelerator type {echo(name)}"))
            ok = False
        elif not rate_ok(value):
            violations.append(Violation(fp, f"{RATE_RULE} samples/s, got {value}"))
            ok = False
        else:
            seed[type_index[name]] = value
    if not within(model.grad_sqr, 1 / top_value, top_value):
        violations.append(Violation(
            f"{p}.grad_sqr", f"must be in [{1 / top_value:g}, {top_value:g}], got {model.grad_sqr}"
        ))
        ok = False
    if not within(model.grad_var, 0.0, top_value):
        violations.append(Violation(
            f"{p}.grad_var", f"must be in [0, {top_value:g}], got {model.grad_var}"
        ))
        ok = False
    if model.init_batch_size <= 0:
        violations.append(Violation(f"{p}.init_batch_size", "must be > 0"))
        ok = False
    if model.max_batch_size and model.max_batch_size < model.init_batch_size:
        violations.append(Violation(f"{p}.max_batch_size", "must be 0 or >= init_batch_size"))
        ok = False
    lo, hi = model.min_local_batch_size, model.max_local_batch_size
    if lo < 0 or hi < 0:
        violations.append(Violation(f"{p}.min_local_batch_size", "local batch sizes must be >= 0"))
        ok = False
    elif hi and lo > hi:
        violations.append(
            Violation(f"{p}.min_local_batch_size", f"{lo} is more than max_local_batch_size {hi}")
        )
        ok = False
    if not ok:
        return None
    top = max(model.max_batch_size, model.init_batch_size)
    return PolluxJobModel(
        perf_params=perf,
        grad_sqr=float(model.grad_sqr),
        grad_var=float(model.grad_var),
        init_batch_size=int(model.init_batch_size),
        max_batch_size=int(top),
        min_local_batch_size=max(int(lo), 1),
        max_local_batch_size=int(hi) if hi else int(top),
        seed_throughput=seed,
    )


@dataclass(frozen=True)
class ConfigurationColumns:
    """Every job's configuration inputs (`Jobs` fields of the same names)."""

    given_goodput: GivenGoodputs
    pollux: tuple[PolluxJobModel | None, ...]
    min_devices: IntArray
    max_devices: IntArray
    scale_unit: IntArray


@dataclass(frozen=True)
class _TypeShape:
    """What a configuration entry is checked against: its type's index, node count and the
    largest node's devices."""

    index: int
    nodes: int
    per_node: int


def _type_shapes(cluster: Cluster) -> dict[str, _TypeShape]:
    """Each type's `_TypeShape` by name (a type without nodes is one node of all its devices)."""
    node_sizes: dict[int, list[int]] = {}
    for t, d in zip(cluster.node_type.tolist(), cluster.node_devices.tolist(), strict=True):
        node_sizes.setdefault(int(t), []).append(int(d))
    shapes = {}
    for t, name in enumerate(cluster.type_names):
        sizes = node_sizes.get(t, [int(cluster.count[t])])
        shapes[name] = _TypeShape(t, len(sizes), max(sizes) if sizes else 0)
    return shapes


def _rate_ok(goodput: float) -> bool:
    """`rate_ok` for one Python float (the scalar form costs a numpy call per entry)."""
    return goodput == 0 or limits.MIN_RATE <= goodput <= limits.MAX_RATE  # NaN fails both


def _given_goodput(
    job: snapshot_pb.Job, p: str, cluster: Cluster, shapes: dict[str, _TypeShape],
    violations: list[Violation],
) -> tuple[GivenGoodput, ...]:
    """The job's valid `configurations` entries (shapes that exist on the cluster's nodes)."""
    if len(job.configurations) > limits.MAX_CONFIGURATIONS_PER_JOB:
        violations.append(Violation(f"{p}.configurations",
                                    f"{len(job.configurations)} entries is more than "
                                    f"{limits.MAX_CONFIGURATIONS_PER_JOB}"))
        return ()
    entries: list[GivenGoodput] = []
    for k, conf in enumerate(job.configurations):
        name, nodes, devices = conf.accelerator_type, conf.nodes, conf.devices
        goodput = conf.goodput
        shape = shapes.get(name)
        if shape is not None and 1 <= nodes <= shape.nodes \
                and nodes <= devices <= nodes * shape.per_node and _rate_ok(goodput):
            if goodput > 0:  # 0 = invalid configuration: the job cannot run there
                entries.append(GivenGoodput(shape.index, nodes, devices, float(goodput)))
            continue
        fp = f"{p}.configurations[{k}]"
        if shape is None:
            violations.append(
                Violation(
                    f"{fp}.accelerator_type",
                    f"unknown accelerator type {echo(name)}; the cluster has "
                    f"{listing(cluster.type_names)}",
                )
            )
        elif nodes < 1 or nodes > shape.nodes:
            violations.append(
                Violation(
                    f"{fp}.nodes",
                    f"must be in [1, {shape.nodes}] (nodes of type {echo(name)}), got {nodes}",
                )
            )
        elif devices < nodes or devices > nodes * shape.per_node:
            violations.append(
                Violation(
                    f"{fp}.devices",
                    f"{devices} devices on {nodes} node(s) exceeds a node "
                    f"(at most {shape.per_node} per node of type {echo(name)}) or "
                    "leaves a node empty",
                )
            )
        else:
            violations.append(Violation(f"{fp}.goodput", f"{RATE_RULE}, got {goodput}"))
    return tuple(entries)


DEADLINE_EVERY_JOBS = 1024
"""The per-job loop checks the request's deadline this often (jobs)."""
_CONFIGURATIONS = snapshot_pb.Job.CONFIGURATIONS_FIELD_NUMBER
_OTHER_INPUTS = (snapshot_pb.Job.POLLUX_FIELD_NUMBER, snapshot_pb.Job.ELASTICITY_FIELD_NUMBER)


def _plain_configurations(
    jobs: JobFields, spans: JobSpans | None, cluster: Cluster, shapes: dict[str, _TypeShape],
    deadline: Deadline = NO_DEADLINE,
) -> tuple[NDArray[np.bool_], GivenGoodputs] | None:
    """The jobs whose configurations are read from their bytes `spans` (where the job
    decoder found their records; every entry valid: a job with an invalid one is read from
    its message, which names the violation), and their entries with goodput > 0; None
    without bytes. Jobs that also set `pollux` or `elasticity`, or that the main decoder
    left unread, are read from their messages."""
    m = len(jobs.jobs)
    if (jobs.others is None or jobs.records is None or spans is None or spans.count != m
            or _CONFIGURATIONS not in jobs.others):
        return None
    candidate = np.zeros(m, bool)
    candidate[jobs.others[_CONFIGURATIONS]] = True
    for number in _OTHER_INPUTS:
        candidate[jobs.others.get(number, np.zeros(0, np.int64))] = False
    candidate[jobs.unread] = False
    none = np.zeros(0, np.int64)
    job, start, stop = jobs.records.get(CONFIGURATIONS_TAG, (none, none, none))
    mine = candidate.take(job)
    wire = read_entries(spans.buf, job[mine], start[mine], stop[mine], m, cluster.type_names,
                        deadline)
    n = cluster.num_types
    type_nodes, per_node = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for shape in shapes.values():
        type_nodes[shape.index], per_node[shape.index] = shape.nodes, shape.per_node
    t, nodes, devices, goodput = wire.type_index, wire.nodes, wire.devices, wire.goodput
    ok = ((nodes >= 1) & (nodes <= type_nodes[t]) & (nodes <= devices)
          & (devices <= nodes * per_node[t]) & rate_ok(goodput))  # as `_given_goodput`
    unread = wire.unread
    unread[wire.job[~ok]] = True
    kept = ~unread[wire.job] & (goodput > 0)  # 0 = invalid configuration: not an entry
    job = wire.job
    if not kept.all():  # else as they are: no copy of 1.5M entries at 100,000 jobs
        job, t, nodes, devices, goodput = (job[kept], t[kept], nodes[kept], devices[kept],
                                           goodput[kept])
    return candidate & ~unread, GivenGoodputs.from_entries(m, job, t, nodes, devices, goodput)


def configuration_columns(
    jobs: JobFields, m: int, cluster: Cluster, violations: list[Violation],
    deadline: Deadline = NO_DEADLINE, spans: JobSpans | None = None,
) -> ConfigurationColumns:
    """Per-configuration goodput, Pollux models and elasticity of every job (m >= the `jobs`
    messages: jobs beyond them, the columnar ones, have the defaults). `spans`: where the
    serialized `jobs` entries are, when at hand (plain configurations are read from them). Raises
    `DeadlineExpiredError` once `deadline` passes."""
    type_index = {name: j for j, name in enumerate(cluster.type_names)}
    n = cluster.num_types
    shapes = _type_shapes(cluster)
    given: list[tuple[GivenGoodput, ...]] = [()] * m
    models: list[PolluxJobModel | None] = [None] * m
    lo = np.ones(m, np.int64)
    hi = np.zeros(m, np.int64)
    unit = np.ones((m, n), np.int64)
    top = limits.MAX_DEVICES_PER_TYPE
    deadline.check()
    plain = _plain_configurations(jobs, spans, cluster, shapes, deadline)
    deadline.check()
    visit: Iterable[tuple[int, snapshot_pb.Job]] = jobs.setting(
        _CONFIGURATIONS, *_OTHER_INPUTS)
    if plain is not None:
        rest = np.zeros(len(jobs.jobs), bool)
        for number in (_CONFIGURATIONS, *_OTHER_INPUTS):
            rest[jobs.others[number] if jobs.others and number in jobs.others else []] = True
        rest[jobs.unread] = True
        visit = ((i, jobs.jobs[i]) for i in np.flatnonzero(rest & ~plain[0]).tolist())
    for visited, (i, job) in enumerate(visit):
        if visited % DEADLINE_EVERY_JOBS == 0:
            deadline.check()
        p = f"snapshot.jobs[{i}]"
        if job.configurations:
            given[i] = _given_goodput(job, p, cluster, shapes, violations)
        if job.HasField("pollux"):
            models[i] = _pollux_model(job.pollux, f"{p}.pollux", type_index, n, violations)
        if not job.HasField("elasticity"):
            continue
        el = job.elasticity
        bad = [name for name in ("min_devices", "max_devices")
               if not 0 <= getattr(el, name) <= top]
        for name in bad:
            violations.append(Violation(f"{p}.elasticity.{name}",
                                        f"must be in [0, {top}], got {getattr(el, name)}"))
        if not bad and el.max_devices and max(el.min_devices, 1) > el.max_devices:
            violations.append(
                Violation(
                    f"{p}.elasticity.min_devices",
                    f"min GPUs {el.min_devices} > max GPUs {el.max_devices}",
                )
            )
        elif not bad:
            lo[i] = max(el.min_devices, 1)
            hi[i] = el.max_devices
        for name, u in el.scale_unit.items():
            fp = f"{p}.elasticity.scale_unit[{echo(name)}]"
            if name not in type_index:
                violations.append(Violation(fp, f"unknown accelerator type {echo(name)}"))
            elif not 1 <= u <= top:
                violations.append(Violation(fp, f"must be in [1, {top}], got {u}"))
            else:
                unit[i, type_index[name]] = u
    columns = GivenGoodputs.of(given)
    if plain is not None and not columns.goodput.size:
        columns = plain[1]
    elif plain is not None:
        more = plain[1]
        columns = GivenGoodputs.from_entries(
            m, np.concatenate([columns.job, more.job]),
            *(np.concatenate([getattr(columns, name), getattr(more, name)])
              for name in ("type_index", "nodes", "devices", "goodput")))
    return ConfigurationColumns(columns, tuple(models), lo, hi, unit)


def check_configuration_policy(context: RequestContext) -> list[Violation]:
    """What sia and pollux need beyond the general rules: node caps naming types of the
    cluster, no job arriving after time_s, and every running job's current configuration in
    the configuration set."""
    problem, _policy = context.problem, context.policy
    cluster = problem.cluster
    violations: list[Violation] = []
    for name in sorted(context.request.policy.sia.max_nodes_per_type):
        if name not in cluster.type_names:
            violations.append(Violation(
                f"policy.sia.max_nodes_per_type{key(name)}",
                f"unknown accelerator type {echo(name)}; the cluster has "
                f"{listing(cluster.type_names)}"))
    now = problem.time_s
    arrival = problem.jobs.arrival_time_s
    for i in np.flatnonzero(arrival > now):
        violations.append(
            Violation(
                context.paths.field(int(i), "arrival_time_s"),
                f"age = time_s - arrival_time_s must be >= 0 (arrival {arrival[i]} "
                f"is after time_s {now})",
            )
        )
    return violations + _check_current(context)


def _check_current(context: RequestContext) -> list[Violation]:
    """A running job's current configuration must still exist in the configuration set."""
    from apportion.formulations.sia import current_configuration, sia_node_caps
    from apportion.formulations.sia_configs import configuration_set, node_layout

    problem, policy = context.problem, context.policy
    hist = problem.history
    if not hist.running().any():
        return []
    max_gpus = getattr(policy.parameters, "max_gpus", _DEFAULT_MAX_GPUS)
    caps = (
        sia_node_caps(problem, policy.parameters.max_nodes_per_type, policy.compat)
        if isinstance(policy.parameters, SiaParameters)
        else ()
    )
    layout = node_layout(problem.cluster)
    configs = configuration_set(
        layout, problem.cluster.num_types, max_gpus, max_nodes_per_type=caps
    )
    current = current_configuration(problem, configs, layout)
    where = {h.job_id: k for k, h in enumerate(context.request.snapshot.history.jobs)}
    violations: list[Violation] = []
    for i in np.flatnonzero(hist.running() & (current < 0)):
        k = where.get(problem.jobs.ids[i], 0)
        devices = int(hist.current_devices[i]) or int(problem.jobs.scale_factor[i])
        violations.append(
            Violation(
                f"snapshot.history.jobs[{k}].current",
                f"{devices} GPU(s) of {echo(problem.cluster.type_names[hist.current_type[i]])} "
                "is not a configuration of the cluster any more (powers of two within a node, "
                f"whole nodes beyond, at most {max_gpus} GPUs"
                + (", per-type node caps" if any(caps) else "")
                + ")",
            )
        )
    return violations
