"""Sia (A5, docs/policies/sia.md): validated Problem -> goodput matrix over configurations -> exact
ILP (`sia_ilp.solve_exact`: Lagrangian bound + rounding, else HiGHS LP + rounding, else HiGHS
MIP) -> placement on nodes -> Plan with certificate (objective, proven bound, gap).

Coefficients are unrounded by default; Sia's 2-decimal rounding is the `round_coefficients`
option, forced on (with invalid configurations kept at goodput 1e-4) by compat = sia. Sia's
allocation-change penalty lambda_a (physical scheduler only) is not modelled.

Goodput per (job, configuration), in order of precedence: `Jobs.given_goodput` (the snapshot's
per-configuration numbers), the job's Pollux model (A5.1, maximized over batch size), else its
`throughput` at exactly `scale_factor` GPUs (a rigid job). A type without a Pollux model gets
its goodput by cross-type bootstrapping (A5.3, `pollux_model.bootstrap_best`) when the job has
1-GPU seed throughputs (`PolluxModel.seed_throughput`) on it and on a modelled type: the
source is the modelled type with the closest seed (`bootstrap_sources`; the notes do not say
which). Without a seed the type gives no configuration.

Configurations follow A5.2 with Sia's per-type node caps (`SiaParameters.max_nodes_per_type`,
default Sia's `cluster_max_physical_nnodes` by type name: aws 16, dgx-ext 2, rtx 3, azure 5,
quad 1 nodes; other type names uncapped). Pollux keeps the uncapped set.

Choices made where the notes are silent (A5.4): a job with no current placement has restart
factor 1 (starting a queued job is not charged as a restart).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from apportion.formulations.pollux_model import (
    best_goodput,
    bootstrap_best,
    job_inputs,
)
from apportion.formulations.sia_configs import (
    SIA_MAX_PROFILED_NODES,
    Configuration,
    NodeLayout,
    configuration_set,
    node_caps,
    node_layout,
    place,
)
from apportion.formulations.sia_ilp import (
    ZERO_ALLOC_GAIN,
    IlpResult,
    SiaInstance,
    coefficients,
    normalize_goodput,
    restart_factor,
    solve_exact,
    violations_of,
)
from apportion.solver.certificate import termination
from apportion.solver.deadline import Deadline
from apportion.solver.model import (
    Compat,
    FloatArray,
    GivenGoodputs,
    IntArray,
    PerfParams,
    PolluxJobModel,
    Problem,
    SolveOptions,
)
from apportion.solver.parameters import SiaParameters
from apportion.solver.result import (
    Certificate,
    ConfigurationChoice,
    ConfigurationSection,
    JobStatus,
    Plan,
    Termination,
    relative_gap,
)


@dataclass(frozen=True)
class GoodputTable:
    """Raw goodput over the configuration set."""

    configs: tuple[Configuration, ...]
    layout: NodeLayout
    raw: FloatArray
    """(m, C) useful samples/s, 0 = invalid for the job."""
    unit: FloatArray
    """(m, C) scale unit of the configuration's type for the job (GPUs per replica)."""
    atomic_batch: IntArray
    """(m, C) Pollux optimum per-device batch (0 = n/a)."""
    accumulation: IntArray
    """(m, C) Pollux optimum accumulation steps."""
    unused_given: int = 0
    """Given configurations (jobs[].configurations) outside the configuration set, not used."""
    unused_example: str = ""
    """The first of them, for the report ("job j: type, N node(s), G GPUs")."""


def sia_node_caps(
    problem: Problem, caps: tuple[tuple[str, int], ...] | None, compat: Compat
) -> tuple[int, ...]:
    """Per-type node caps (A5.2) of `SiaParameters.max_nodes_per_type` for the problem's
    types; None = Sia's `SIA_MAX_PROFILED_NODES` under `compat: sia` (they name Sia's own
    clusters' types, so a user's type named like one of them must not be capped otherwise),
    no caps without it; 0 = uncapped."""
    default = SIA_MAX_PROFILED_NODES if compat is Compat.SIA else {}
    return node_caps(problem.cluster.type_names, default if caps is None else dict(caps))


def goodput_table(
    problem: Problem, max_gpus: int, max_nodes_per_type: tuple[int, ...] = ()
) -> GoodputTable:
    """The configuration set of the cluster (per-type node caps `max_nodes_per_type`, by type
    index, 0 = none) and every job's raw goodput on it (A5.2-A5.3)."""
    jobs, cluster = problem.jobs, problem.cluster
    m, n = jobs.num_jobs, cluster.num_types
    layout = node_layout(cluster)
    configs = configuration_set(layout, n, max_gpus, max_nodes_per_type=max_nodes_per_type)
    c_type = np.asarray([c.type_index for c in configs], np.int64)
    c_dev = np.asarray([c.devices for c in configs], np.int64)
    raw = np.zeros((m, len(configs)))
    atomic = np.zeros((m, len(configs)), np.int64)
    accum = np.zeros((m, len(configs)), np.int64)
    unit = jobs.scale_unit[:, c_type].astype(np.float64) if configs else np.zeros((m, 0))
    given = jobs.given_goodput
    outside = _fill_given(raw, given, configs)
    example = ""
    if outside.size:
        at = int(outside[0])
        example = (f"job {jobs.ids[int(given.job[at])]}: "
                   f"{cluster.type_names[int(given.type_index[at])]}, "
                   f"{int(given.nodes[at])} node(s), {int(given.devices[at])} GPUs")
    has_given = given.counts > 0
    rigid = ~has_given & np.array([model is None for model in jobs.pollux], bool)
    if rigid.any() and configs:  # a rigid job: its throughput at exactly scale_factor GPUs
        exact = c_dev[None, :] == jobs.scale_factor[rigid, None]
        raw[rigid] = np.where(exact, jobs.throughput[rigid][:, c_type], 0.0)
    for i in np.flatnonzero(~has_given & ~rigid).tolist():
        model = jobs.pollux[i]
        if model is not None:
            grad, limits = job_inputs(model)
            source = bootstrap_sources(model)
            for k, conf in enumerate(configs):
                t = conf.type_index
                row = model.perf_params[t]
                if np.all(np.isfinite(row)):
                    best = best_goodput(
                        PerfParams(*map(float, row)), grad, limits, conf.nodes, conf.devices
                    )
                elif source[t] >= 0:  # A5.3 bootstrapping from the source type's model
                    s_t = int(source[t])
                    best = bootstrap_best(
                        PerfParams(*map(float, model.perf_params[s_t])), grad, limits,
                        max(layout.gpus_per_node(s_t), 1), conf.devices,
                        float(model.seed_throughput[t]), float(model.seed_throughput[s_t]),
                    )
                else:
                    continue
                raw[i, k] = best.goodput
                atomic[i, k], accum[i, k] = best.atomic_batch, best.accumulation_steps
    lo, hi = jobs.min_devices, jobs.max_devices
    fits = (c_dev[None, :] >= np.maximum(lo, 1)[:, None]) & (
        (hi[:, None] <= 0) | (c_dev[None, :] <= hi[:, None])
    )
    multiple = (c_dev[None, :] % np.maximum(unit, 1).astype(np.int64)) == 0
    raw = np.where(fits & multiple & np.isfinite(raw) & (raw > 0), raw, 0.0)
    return GoodputTable(configs, layout, raw, unit, atomic, accum, int(outside.size), example)


def _config_index(given: GivenGoodputs, configs: tuple[Configuration, ...]) -> IntArray:
    """Each given entry's index in `configs` (the same type, nodes and devices), -1 when it is
    not one of them."""
    if not configs or not given.goodput.size:
        return np.full(given.goodput.size, -1, np.int64)
    shape = np.array([(c.type_index, c.nodes, c.devices) for c in configs], np.int64)
    top = int(shape.max()) + 1
    known = (shape[:, 0] * top + shape[:, 1]) * top + shape[:, 2]
    t, nodes, devices = given.type_index, given.nodes, given.devices
    possible = ((t >= 0) & (t < top) & (nodes >= 0) & (nodes < top)
                & (devices >= 0) & (devices < top))
    wanted = np.where(possible, (t * top + nodes) * top + devices, -1)
    order = np.argsort(known, kind="stable")
    at = np.maximum(np.searchsorted(known[order], wanted, side="right") - 1, 0)
    return np.where(known[order][at] == wanted, order[at], -1)  # the last of equal shapes


def _fill_given(raw: FloatArray, given: GivenGoodputs, configs: tuple[Configuration, ...]
                ) -> IntArray:
    """raw[i, k] = job i's given goodput on configuration k (the last of entries naming one
    configuration twice); returns the entries outside `configs`."""
    k = _config_index(given, configs)
    inside = np.flatnonzero(k >= 0)
    cell = given.job[inside] * raw.shape[1] + k[inside]
    last = np.full(raw.size, -1, np.int64)
    np.maximum.at(last, cell, np.arange(inside.size))  # the last entry of a cell wins
    wins = last[cell] == np.arange(inside.size)
    raw.reshape(-1)[cell[wins]] = given.goodput[inside[wins]]
    return np.flatnonzero(k < 0)


def bootstrap_sources(model: PolluxJobModel) -> IntArray:
    """(n,) per type without a throughput model but with a seed: the type to project from
    (A5.3), -1 otherwise. The notes do not say which source to use when several types have
    a model and a seed; we take the one whose seed throughput is closest to the target's
    (smallest |log ratio|, the most similar device for this job; ties: the lower index)."""
    n = model.perf_params.shape[0]
    seed = model.seed_throughput
    modelled = np.all(np.isfinite(model.perf_params), axis=1) & (seed > 0)
    out = np.full(n, -1, dtype=np.int64)
    if not modelled.any():
        return out
    candidates = np.flatnonzero(modelled)
    for t in np.flatnonzero(~np.all(np.isfinite(model.perf_params), axis=1) & (seed > 0)):
        distance = np.abs(np.log(seed[candidates] / seed[t]))
        out[t] = candidates[int(np.argmin(distance))]
    return out


def current_configuration(
    problem: Problem, configs: tuple[Configuration, ...], layout: NodeLayout
) -> IntArray:
    """(m,) index of each running job's current configuration, -1 when not running or when the
    shape is not in the configuration set (convert rejects the latter for sia)."""
    m = problem.jobs.num_jobs
    out = np.full(m, -1, np.int64)
    hist = problem.history
    index = {(c.type_index, c.nodes, c.devices): k for k, c in enumerate(configs)}
    for i in np.flatnonzero(hist.current_type >= 0).tolist():
        t = int(hist.current_type[i])
        devices = int(hist.current_devices[i]) or int(problem.jobs.scale_factor[i])
        nodes = len(hist.current_nodes[i])
        if nodes == 0:
            g = layout.gpus_per_node(t)
            nodes = max(1, math.ceil(devices / g)) if g else 1
        out[i] = index.get((t, nodes, devices), -1)
    return out


def job_restart_factor(problem: Problem, running: np.ndarray) -> FloatArray:
    """(m,) r_i from age, restarts and delta_i; 1 for jobs not running (module docstring)."""
    age = np.maximum(problem.time_s - problem.jobs.arrival_time_s, 0.0)
    delta = problem.jobs.restart_penalty_s
    r = restart_factor(age, problem.history.restarts, delta)
    return np.asarray(np.where(running, r, 1.0))


def build_instance(
    problem: Problem,
    params: SiaParameters,
    compat: Compat,
    table: GoodputTable,
    current: IntArray,
    restart: FloatArray,
) -> tuple[SiaInstance, FloatArray]:
    """The ILP of A5.5 and the normalized goodput matrix G."""
    p = params.fairness_power
    normalized = normalize_goodput(table.raw, table.unit)
    sia = compat is Compat.SIA
    coef, allowed = coefficients(
        normalized,
        restart,
        current,
        p,
        round2=params.round_coefficients or sia,
        clip=params.coefficient_clip,
        zero_alloc_gain=ZERO_ALLOC_GAIN if sia else None,
    )
    # a job without any valid configuration is unservable, also in compat mode
    allowed &= np.asarray((table.raw > 0).any(axis=1), dtype=bool)[:, None]
    pinned = (
        np.where(current >= 0, current, -1) if params.pin_running else np.full_like(current, -1)
    )
    instance = SiaInstance(
        config_type=np.asarray([c.type_index for c in table.configs], np.int64),
        config_devices=np.asarray([c.devices for c in table.configs], np.int64),
        capacity=problem.cluster.count.astype(np.int64),
        coefficient=coef,
        allowed=allowed,
        weight=problem.jobs.priority_weight.astype(np.float64),
        no_allocation_penalty=params.no_allocation_penalty,
        maximize=p > 0,
        pinned=pinned.astype(np.int64),
    )
    return instance, normalized


def solve_policy(
    problem: Problem,
    parameters: SiaParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Sia's ILP solved exactly; never raises for infeasible or timed-out solves."""
    started = time.perf_counter()
    late = not_started(problem, deadline, "sia goodput ILP",
                       maximize=parameters.fairness_power > 0)
    if late is not None:
        return late
    table = goodput_table(
        problem, parameters.max_gpus,
        sia_node_caps(problem, parameters.max_nodes_per_type, compat),
    )
    current = current_configuration(problem, table.configs, table.layout)
    restart = job_restart_factor(problem, current >= 0)
    instance, normalized = build_instance(problem, parameters, compat, table, current, restart)
    build = time.perf_counter() - started
    result = solve_exact(
        instance,
        deadline=leaving_plan_time(deadline, problem),
        relative_gap=options.relative_gap,
        threads=options.threads,
    )
    formulation = (
        "sia goodput ILP: multiple-choice knapsack over (type, nodes, GPUs) configurations, "
        f"p = {parameters.fairness_power:g}, lambda_n = {parameters.no_allocation_penalty:g}"
        + (
            ", coefficients rounded to 2 decimals"
            if parameters.round_coefficients or compat is Compat.SIA
            else ""
        )
    )
    return plan_from_result(
        problem, table, instance, normalized, current, restart, result, formulation, build,
        options.relative_gap,
    )


FIRST_PLAN_PER_JOB_S = 4e-6
"""Seconds per job of the work no deadline cuts before Sia or Pollux has any plan: the
goodput table, the instance, the plan read off zero prices, its placement and records
(measured with the deadline already past, on a 2-core machine at load 2: 0.46 s at 100,000
jobs with 33 configurations, 0.10 s at 32,768)."""
MAX_OVERRUN_S = 0.05
"""A solve whose first plan would end more than this past its deadline is not started."""


def not_started(problem: Problem, deadline: Deadline, formulation: str, maximize: bool
                ) -> Plan | None:
    """No plan, said at once, when the time left cannot cover the first plan
    (`FIRST_PLAN_PER_JOB_S` per job, `MAX_OVERRUN_S` allowed); None: start."""
    m = problem.jobs.num_jobs
    needed = FIRST_PLAN_PER_JOB_S * m
    left = deadline.remaining()
    if needed <= left + MAX_OVERRUN_S:
        return None
    return Plan.not_started(
        m, problem.cluster.num_types,
        Certificate(Termination.NO_SOLUTION, maximize, solver="none", formulation=formulation),
        left, needed, "goodput table, a plan read off zero prices, its placement")


PLAN_PER_JOB_S = 5e-7
"""Seconds per job to turn the ILP's choice into a plan (`plan_from_result`), besides
`PLAN_PER_ALLOCATION_S`."""
PLAN_PER_ALLOCATION_S = 4e-6
"""Seconds per allocated job for its placement on nodes and its configuration record
(`plan_from_result`): measured 0.23-0.33 s with 62,000 of 100,000 jobs allocated on a 2-core
machine at load 2. At most min(jobs, GPUs) jobs are allocated."""


def leaving_plan_time(deadline: Deadline, problem: Problem) -> Deadline:
    """The solve's deadline: `deadline` less the time `plan_from_result` will take
    (`PLAN_PER_JOB_S`, `PLAN_PER_ALLOCATION_S`), which must run whatever the solve found."""
    jobs = problem.jobs.num_jobs
    allocations = min(jobs, int(problem.cluster.count.sum()))
    return deadline.leaving(PLAN_PER_JOB_S * jobs + PLAN_PER_ALLOCATION_S * allocations,
                            max_share=1.0)


def plan_from_result(
    problem: Problem,
    table: GoodputTable,
    instance: SiaInstance,
    normalized: FloatArray,
    current: IntArray,
    restart: FloatArray,
    result: IlpResult,
    formulation: str,
    build_time_s: float,
    tolerance: float,
) -> Plan:
    """Plan, certificate, placement and per-job reasons from an ILP result; `tolerance` is the
    relative gap within which the plan counts as optimal."""
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    choice = result.choice
    bad = violations_of(instance, choice) if result.objective is not None else []
    placement = place(table.layout, table.configs, choice, problem.history.current_nodes, current)
    failed = set(placement.failed)
    share = np.zeros((m, n))
    goodput = np.zeros(m)
    norm = np.zeros(m)
    term = np.full(m, instance.no_allocation_penalty)
    rows = np.flatnonzero(choice >= 0)
    picked = choice[rows]
    share[rows, np.array([c.type_index for c in table.configs], np.int64)[picked]] = 1.0
    goodput[rows], norm[rows] = table.raw[rows, picked], normalized[rows, picked]
    term[rows] = instance.weight[rows] * instance.coefficient[rows, picked]
    servable = np.asarray(instance.allowed.any(axis=1), dtype=bool)
    unallocated = (
        "left unallocated by the ILP (no configuration it could get lowers the objective by "
        "more than lambda_n)" if result.objective is not None
        else f"no plan: solver {result.status}"
    )
    unservable = ("no valid configuration: no positive goodput on any shape the cluster offers "
                  "within the job's device limits")
    # per job: 0 allocated, 1 unservable, 2 deferred
    kind = np.where(choice >= 0, 0, np.where(servable, 2, 1)).tolist()
    statuses = (JobStatus.ALLOCATED, JobStatus.UNSERVABLE, JobStatus.DEFERRED)
    texts = ("", unservable, unallocated)
    status = [statuses[k] for k in kind]
    reasons = [texts[k] for k in kind]
    chosen: list[ConfigurationChoice | None] = [None] * m
    names, types = table.layout.names, problem.cluster.type_names
    configs, nodes_of = table.configs, placement.nodes
    named: dict[tuple[tuple[int, int], ...], tuple[tuple[str, int], ...]] = {}  # one per shape
    for i, c, raw, scaled, restarts, was, atomic, steps in zip(
        rows.tolist(), picked.tolist(), table.raw[rows, picked].tolist(),
        normalized[rows, picked].tolist(), restart[rows].tolist(), current[rows].tolist(),
        table.atomic_batch[rows, picked].tolist(), table.accumulation[rows, picked].tolist(),
        strict=True,
    ):
        conf = configs[c]
        placed = i not in failed
        detail = "" if placed else (
            f"no {conf.nodes} node(s) of type {types[conf.type_index]} "
            f"with {conf.devices // conf.nodes} free GPUs each left after placing "
            "larger configurations"
        )
        if not placed:
            reasons[i] = f"placement failed: {detail}"
        pairs = named.get(nodes_of[i])
        if pairs is None:
            pairs = named[nodes_of[i]] = tuple([(names[v], d) for v, d in nodes_of[i] if names[v]])
        chosen[i] = ConfigurationChoice(
            type_index=conf.type_index,
            nodes=conf.nodes,
            devices=conf.devices,
            goodput=raw,
            normalized_goodput=scaled,
            restart_factor=restarts,
            unchanged=was == c,
            node_devices=pairs if placed else (),
            placed=placed,
            placement_detail=detail,
            atomic_batch_size=atomic,
            accumulation_steps=steps,
        )
    gap = relative_gap(result.objective, result.bound)
    ended = termination(result.status, result.has_solution, gap, tolerance)
    detail = result.detail
    if bad:
        ended, detail = Termination.ERROR, "; ".join(bad)
    if failed:
        detail += f"; placement failed for {len(failed)} job(s)"
    if placement.fell_back:
        detail += "; previous nodes could not all be kept (placed again without preference)"
    if table.unused_given:
        detail += (f"; {table.unused_given} given configuration(s) outside the configuration "
                   f"set not used (e.g. {table.unused_example})")
    cert = Certificate(
        termination=ended,
        maximize=instance.maximize,
        objective=result.objective,
        bound=result.bound,
        solver=result.solver,
        solver_version=result.solver_version,
        formulation=formulation,
        build_time_s=build_time_s,
        solve_time_s=result.solve_time_s,
        model_size=result.model_size,
        detail=detail.strip("; "),
    )
    return Plan(
        time_share=share,
        effective_throughput=goodput,
        normalized_throughput=norm,
        objective_value=term,
        job_dual=np.zeros(m),
        accelerator_prices=np.zeros(n),
        certificate=cert,
        job_status=tuple(status),
        job_reason=tuple(reasons),
        configurations=ConfigurationSection(tuple(chosen)),
    )
