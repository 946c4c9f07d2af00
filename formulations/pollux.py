"""Pollux's cluster objective (B4, docs/policies/sia.md, OSDI'21 artifact version) solved exactly as
an ILP over Sia's configurations, instead of Pollux's genetic algorithm (NSGA-II, stochastic, no
optimality claim). Same goodput sources, configuration set, restart factor and placement as
`apportion.formulations.sia`.

    maximize FITNESS_p = ((1/J) * sum_i (speedup_i + 1e-3)^p)^(1/p)

speedup_i = r_i * goodput_i(c) / goodput_i(fair share), where r_i is the restart factor (1 on
the job's current configuration) and the fair share is the job's best goodput on at most
max(1, floor(total GPUs / J)) GPUs of any type (Pollux's fair share is defined on a homogeneous
cluster; this is our heterogeneous reading). An unallocated job has speedup 0. Since x -> x^(1/p)
is monotone, the fitness is maximized by optimizing sum_i (speedup_i + 1e-3)^p (minimized for
p < 0), which is Sia's ILP with A = (speedup + 1e-3)^p, lambda_n = (1e-3)^p and no clip. The
GA's node-level repair rules (one distributed job per node, per-node CPU/memory) are not
modelled; placement is A5.6's best-fit decreasing. Objective and bound are reported as fitness.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from apportion.formulations.sia import (
    current_configuration,
    goodput_table,
    job_restart_factor,
    leaving_plan_time,
    not_started,
    plan_from_result,
)
from apportion.formulations.sia_ilp import SiaInstance, solve_exact
from apportion.solver.certificate import termination
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, FloatArray, Problem, SolveOptions
from apportion.solver.parameters import PolluxParameters
from apportion.solver.result import Certificate, Plan, Termination, relative_gap

EPSILON = 1e-3
"""Pollux adds 1e-3 to every speedup before the power."""


def fair_share_goodput(raw: FloatArray, devices: np.ndarray, total_gpus: int) -> FloatArray:
    """(m,) best goodput on at most max(1, floor(total/J)) GPUs; the smallest valid goodput
    when no valid configuration is that small; 0 for a job without valid configuration."""
    m = raw.shape[0]
    share = max(1, total_gpus // max(m, 1))
    small = np.where(devices[None, :] <= share, raw, 0.0).max(axis=1) if raw.size else np.zeros(m)
    smallest = np.where(raw > 0, raw, np.inf).min(axis=1) if raw.size else np.full(m, np.inf)
    return np.asarray(np.where(small > 0, small, np.where(np.isfinite(smallest), smallest, 0)))


FORMULATION = "pollux p-mean fitness as an exact ILP over configurations"


def fitness(sum_of_powers: float, num_jobs: int, p: float) -> float:
    """((1/J) * S)^(1/p) for S = sum_i (speedup_i + 1e-3)^p."""
    return float((sum_of_powers / max(num_jobs, 1)) ** (1.0 / p))


def solve_policy(
    problem: Problem,
    parameters: PolluxParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """The exact ILP; objective and bound reported as p-mean fitness (maximized)."""
    started = time.perf_counter()
    p = parameters.fairness_power
    if problem.jobs.num_jobs == 0:  # the p-mean of no speedups: nothing to allocate
        cert = Certificate(Termination.OPTIMAL, True, 0.0, 0.0, solver="closed form",
                           formulation=FORMULATION, detail="no jobs")
        return Plan.empty(0, problem.cluster.num_types, cert)
    late = not_started(problem, deadline, FORMULATION, maximize=True)
    if late is not None:
        return late
    table = goodput_table(problem, parameters.max_gpus)
    current = current_configuration(problem, table.configs, table.layout)
    restart = job_restart_factor(problem, current >= 0)
    devices = np.asarray([c.devices for c in table.configs], np.int64)
    fair = fair_share_goodput(table.raw, devices, int(problem.cluster.count.sum()))
    speedup = np.divide(
        table.raw, fair[:, None], out=np.zeros_like(table.raw), where=fair[:, None] > 0
    )
    factor = np.repeat(restart[:, None], len(table.configs), axis=1)
    running = np.nonzero(current >= 0)[0]
    factor[running, current[running]] = 1.0
    allowed = table.raw > 0
    coef = np.power(factor * speedup + EPSILON, p)
    instance = SiaInstance(
        config_type=np.asarray([c.type_index for c in table.configs], np.int64),
        config_devices=devices,
        capacity=problem.cluster.count.astype(np.int64),
        coefficient=np.where(allowed, coef, 0.0),
        allowed=allowed,
        weight=np.ones(problem.jobs.num_jobs),
        no_allocation_penalty=EPSILON**p,
        maximize=p > 0,
        pinned=np.full(problem.jobs.num_jobs, -1, np.int64),
    )
    build = time.perf_counter() - started
    # fitness = (S/J)^(1/p) moves by 1/|p| times S's relative change: solve S tighter so the
    # fitness gap meets the tolerance
    result = solve_exact(
        instance,
        deadline=leaving_plan_time(deadline, problem),
        relative_gap=options.relative_gap * min(1.0, abs(p)),
        threads=options.threads,
    )
    m = problem.jobs.num_jobs
    objective = None if result.objective is None else fitness(result.objective, m, p)
    bound = None if result.bound is None else fitness(max(result.bound, 0.0), m, p)
    plan = plan_from_result(
        problem,
        table,
        instance,
        speedup,
        current,
        restart,
        replace(result, objective=result.objective, bound=result.bound),
        f"{FORMULATION}, p = {p:g} (Pollux itself searches with a genetic algorithm)",
        build,
        options.relative_gap,
    )
    cert = replace(plan.certificate, objective=objective, bound=bound, maximize=True)
    if cert.termination is not Termination.ERROR:  # judged again on the reported fitness
        cert = replace(cert, termination=termination(
            result.status, result.has_solution, relative_gap(objective, bound),
            options.relative_gap))
    return replace(plan, certificate=cert)
