"""Conversion and validation of the inputs sia and pollux read (A5, docs/policies/sia.md, B4).

`sia_parameters` maps a `Policy.parameters` oneof field to a converter of its message;
`sia_problem` adds the per-configuration goodput, elasticity, Pollux models and restart
penalties to the model and checks them (only when the resolved policy reads configurations:
sia, pollux and the elastic policies; other policies ignore these fields). Every problem
becomes `Violation(field_path, description)`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from apportion.solver.errors import Violation
from apportion.solver.model import GivenGoodput, PolicyRequest, PolluxJobModel, Problem
from apportion.solver.parameters import PolluxParameters, SiaParameters
from apportion.solver.registry import lookup
from apportion.solver.result import Plan
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

SIA_POLICIES = ("sia", "pollux")
_PERF_FIELDS = ("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma")


def _finite(x: float) -> bool:
    return math.isfinite(x)


def _power(msg: Any, path: str, default: float, violations: list[Violation]) -> float:
    p = msg.fairness_power if msg.HasField("fairness_power") else default
    if not _finite(p):
        violations.append(Violation(path, f"must be finite, got {p}"))
        return default
    if p == 0:
        violations.append(
            Violation(path, "p = 0 is undefined (goodput^0 = 1 makes every configuration equal)")
        )
        return default
    return float(p)


def _max_gpus(msg: Any, path: str, violations: list[Violation]) -> int:
    if not msg.HasField("max_gpus"):
        return 64
    if msg.max_gpus < 1:
        violations.append(Violation(path, f"must be >= 1, got {msg.max_gpus}"))
        return 64
    return int(msg.max_gpus)


def _sia(msg: Any, violations: list[Violation]) -> object:
    p = _power(msg, "policy.sia.fairness_power", -0.5, violations)
    penalty = 1.1 if p < 0 else -1.1
    if msg.HasField("no_allocation_penalty"):
        penalty = msg.no_allocation_penalty
        if not _finite(penalty) or penalty == 0 or (penalty > 0) == (p > 0):
            violations.append(
                Violation(
                    "policy.sia.no_allocation_penalty",
                    f"must be finite with the opposite sign of fairness_power ({p:g}), "
                    f"got {penalty}",
                )
            )
            penalty = 1.1 if p < 0 else -1.1
    for name, cap in sorted(msg.max_nodes_per_type.items()):
        if cap < 1:
            violations.append(Violation(f'policy.sia.max_nodes_per_type["{name}"]',
                                        f"must be >= 1, got {cap}"))
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


def _pollux(msg: Any, violations: list[Violation]) -> object:
    return PolluxParameters(
        fairness_power=_power(msg, "policy.pollux.fairness_power", -1.0, violations),
        max_gpus=_max_gpus(msg, "policy.pollux.max_gpus", violations),
    )


sia_parameters: dict[str, Callable[[Any, list[Violation]], object]] = {
    "sia": _sia,
    "pollux": _pollux,
}


def _pollux_model(
    model: snapshot_pb.PolluxModel,
    p: str,
    type_index: dict[str, int],
    n: int,
    violations: list[Violation],
) -> PolluxJobModel | None:
    ok = True
    perf = np.full((n, 7), np.nan)
    for name, params in model.perf_params.items():
        fp = f"{p}.perf_params[{name!r}]"
        if name not in type_index:
            violations.append(Violation(fp, f"unknown accelerator type {name!r}"))
            ok = False
            continue
        values = [getattr(params, f) for f in _PERF_FIELDS]
        for f, v in zip(_PERF_FIELDS[:6], values[:6], strict=True):
            if not (_finite(v) and v >= 0):
                violations.append(Violation(f"{fp}.{f}", f"must be finite and >= 0, got {v}"))
                ok = False
        if values[0] + values[1] <= 0:
            violations.append(Violation(f"{fp}.alpha_c", "alpha_c + beta_c must be > 0"))
            ok = False
        if not (_finite(values[6]) and 1 <= values[6] <= 10):
            violations.append(Violation(f"{fp}.gamma", f"must be in [1, 10], got {values[6]}"))
            ok = False
        perf[type_index.get(name, 0)] = values
    seed = np.zeros(n)
    for name, value in model.seed_throughput.items():
        fp = f"{p}.seed_throughput[{name!r}]"
        if name not in type_index:
            violations.append(Violation(fp, f"unknown accelerator type {name!r}"))
            ok = False
        elif not (_finite(value) and value >= 0):
            violations.append(Violation(fp, f"must be finite and >= 0, got {value}"))
            ok = False
        else:
            seed[type_index[name]] = value
    if not (_finite(model.grad_sqr) and model.grad_sqr > 0):
        violations.append(
            Violation(f"{p}.grad_sqr", f"must be finite and > 0, got {model.grad_sqr}")
        )
        ok = False
    if not (_finite(model.grad_var) and model.grad_var >= 0):
        violations.append(
            Violation(f"{p}.grad_var", f"must be finite and >= 0, got {model.grad_var}")
        )
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


def sia_problem(
    request: service_pb.SolveRequest,
    problem: Problem,
    policy: PolicyRequest,
    violations: list[Violation],
) -> Problem:
    """Add and validate the sia/pollux inputs (unchanged problem for other policies).

    Also withdraws convert's "no usable accelerator type" throughput error for jobs that give
    per-configuration goodput or a Pollux model instead of throughput."""
    if not lookup(policy.name).capabilities.reads_configurations:
        return problem
    snap = request.snapshot
    cluster = problem.cluster
    type_index = {name: j for j, name in enumerate(cluster.type_names)}
    named = request.policy.sia.max_nodes_per_type if policy.name == "sia" else {}
    for name in sorted(named):
        if name not in type_index:
            violations.append(Violation(
                f'policy.sia.max_nodes_per_type["{name}"]',
                f"unknown accelerator type {name!r}; the cluster has "
                f"{', '.join(cluster.type_names)}"))
    m, n = problem.jobs.num_jobs, cluster.num_types
    node_sizes: dict[int, list[int]] = {}
    for t, d in zip(cluster.node_type.tolist(), cluster.node_devices.tolist(), strict=True):
        node_sizes.setdefault(int(t), []).append(int(d))
    given: list[tuple[GivenGoodput, ...]] = []
    models: list[PolluxJobModel | None] = []
    lo = np.ones(m, np.int64)
    hi = np.zeros(m, np.int64)
    unit = np.ones((m, n), np.int64)
    delta = np.full(m, 30.0)
    for i, job in enumerate(snap.jobs[:m]):
        p = f"snapshot.jobs[{i}]"
        if job.configurations or job.HasField("pollux"):
            violations[:] = [
                v
                for v in violations
                if not (v.field == f"{p}.throughput" and "no usable" in v.description)
            ]
        entries: list[GivenGoodput] = []
        for k, conf in enumerate(job.configurations):
            fp = f"{p}.configurations[{k}]"
            t = type_index.get(conf.accelerator_type)
            if t is None:
                violations.append(
                    Violation(
                        f"{fp}.accelerator_type",
                        f"unknown accelerator type {conf.accelerator_type!r}; the cluster has "
                        f"{', '.join(cluster.type_names) or 'none'}",
                    )
                )
                continue
            sizes = node_sizes.get(t, [int(cluster.count[t])])
            per_node = max(sizes) if sizes else 0
            if conf.nodes < 1 or conf.nodes > len(sizes):
                violations.append(
                    Violation(
                        f"{fp}.nodes",
                        f"must be in [1, {len(sizes)}] (nodes of type {conf.accelerator_type!r})"
                        f", got {conf.nodes}",
                    )
                )
            elif conf.devices < conf.nodes or conf.devices > conf.nodes * per_node:
                violations.append(
                    Violation(
                        f"{fp}.devices",
                        f"{conf.devices} devices on {conf.nodes} node(s) exceeds a node "
                        f"(at most {per_node} per node of type {conf.accelerator_type!r}) or "
                        "leaves a node empty",
                    )
                )
            elif not (_finite(conf.goodput) and conf.goodput >= 0):
                violations.append(
                    Violation(f"{fp}.goodput", f"must be finite and >= 0, got {conf.goodput}")
                )
            elif conf.goodput > 0:  # 0 = invalid configuration: the job cannot run there
                entries.append(GivenGoodput(t, conf.nodes, conf.devices, float(conf.goodput)))
        given.append(tuple(entries))
        models.append(
            _pollux_model(job.pollux, f"{p}.pollux", type_index, n, violations)
            if job.HasField("pollux")
            else None
        )
        el = job.elasticity
        if el.min_devices < 0:
            violations.append(Violation(f"{p}.elasticity.min_devices", "must be >= 0"))
        if el.max_devices < 0:
            violations.append(Violation(f"{p}.elasticity.max_devices", "must be >= 0"))
        elif el.max_devices and max(el.min_devices, 1) > el.max_devices:
            violations.append(
                Violation(
                    f"{p}.elasticity.min_devices",
                    f"min GPUs {el.min_devices} > max GPUs {el.max_devices}",
                )
            )
        lo[i] = max(el.min_devices, 1)
        hi[i] = max(el.max_devices, 0)
        for name, u in el.scale_unit.items():
            fp = f"{p}.elasticity.scale_unit[{name!r}]"
            if name not in type_index:
                violations.append(Violation(fp, f"unknown accelerator type {name!r}"))
            elif u < 1:
                violations.append(Violation(fp, f"must be >= 1, got {u}"))
            else:
                unit[i, type_index[name]] = u
        if job.HasField("restart_penalty_s") and _finite(job.restart_penalty_s):
            delta[i] = max(job.restart_penalty_s, 0.0)
        if _finite(job.arrival_time_s) and job.arrival_time_s > snap.time_s:
            violations.append(
                Violation(
                    f"{p}.arrival_time_s",
                    f"age = time_s - arrival_time_s must be >= 0 (arrival {job.arrival_time_s} "
                    f"is after time_s {snap.time_s})",
                )
            )
    jobs = replace(
        problem.jobs,
        given_goodput=tuple(given),
        pollux=tuple(models),
        min_devices=lo,
        max_devices=hi,
        scale_unit=unit,
        restart_penalty_s=delta,
    )
    problem = replace(problem, jobs=jobs)
    if policy.name in SIA_POLICIES:  # the others choose any device count
        _check_current(request, problem, policy, violations)
    return problem


def _check_current(
    request: service_pb.SolveRequest,
    problem: Problem,
    policy: PolicyRequest,
    violations: list[Violation],
) -> None:
    """A running job's current configuration must still exist in the configuration set."""
    from apportion.formulations.sia import current_configuration, sia_node_caps
    from apportion.formulations.sia_configs import configuration_set, node_layout

    hist = problem.history
    m = problem.jobs.num_jobs
    if hist.current_type.size != m or not (hist.current_type >= 0).any():
        return
    max_gpus = getattr(policy.parameters, "max_gpus", 64)
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
    where = {h.job_id: k for k, h in enumerate(request.snapshot.history.jobs)}
    for i in np.nonzero((hist.current_type >= 0) & (current < 0))[0]:
        k = where.get(problem.jobs.ids[i], 0)
        devices = int(hist.current_devices[i]) or int(problem.jobs.scale_factor[i])
        violations.append(
            Violation(
                f"snapshot.history.jobs[{k}].current",
                f"{devices} GPU(s) of {problem.cluster.type_names[hist.current_type[i]]!r} is "
                "not a configuration of the cluster any more (powers of two within a node, "
                f"whole nodes beyond, at most {max_gpus} GPUs"
                + (", per-type node caps" if any(caps) else "")
                + ")",
            )
        )


def fill_sia_response(plan: Plan, problem: Problem, out: service_pb.Plan) -> None:
    """`JobAllocation.configuration` for configuration policies (sia, pollux)."""
    if plan.configurations is None:
        return
    names = problem.cluster.type_names
    for entry, choice in zip(out.jobs, plan.configurations.choices, strict=False):
        if choice is None:
            continue
        conf = entry.configuration
        conf.accelerator_type = names[choice.type_index]
        conf.nodes = choice.nodes
        conf.devices = choice.devices
        conf.goodput = choice.goodput
        conf.normalized_goodput = choice.normalized_goodput
        conf.restart_factor = choice.restart_factor
        conf.unchanged = choice.unchanged
        for node, devices in choice.node_devices:
            conf.node_devices[node] = conf.node_devices[node] + devices
        conf.placed = choice.placed
        conf.placement_detail = choice.placement_detail
        conf.atomic_batch_size = choice.atomic_batch_size
        conf.accumulation_steps = choice.accumulation_steps
