"""Optimus (EuroSys 2018), B8: marginal-gain allocation of workers (and
parameter servers) by predicted reduction of remaining training time.

* Remaining work Q_i (steps): from the job's loss history when it has one, by the fitted
  inverse curve l(k) = 1/(beta0 k + beta1) + beta2 (`loss_curve`, non-negative least squares):
  the steps until the loss's excess over beta2 has fallen to `convergence_fraction` of its
  excess at the first reported step; else `total_steps - steps_done`. A job whose curve says
  it has converged is FINISHED; one with neither is allocated its base only (value unknown).
* Speed f_i(p, w) (steps/s) per state (`elastic_speed`): Optimus's model, the job's
  configurations, or its throughput at scale_factor (rigid).
* Objective (minimize): sum over allocated jobs of predicted remaining time Q_i / f_i (s). The
  value of a state is the time it saves over the job's base, Q_i/f_i(base) - Q_i/f_i(state).
* Greedy (Optimus's rule): every job starts at its base (1 worker, and 1 parameter server in
  the parameter-server form), in admission order; then one task at a time to the job whose
  best next task saves the most time per dominant share of the devices it adds, until nothing
  fits or no task saves time (`elastic_menu.greedy`). The exact allocation of the same
  objective (dynamic program over devices, or MILP) bounds it: the plan is `heuristic` with
  the exact optimum as bound, or `optimal` with method = exact.
* Placement: fewest servers (most free node first), current nodes kept (`elastic_plan`).

Choices where the sources leave details open: admission order is running jobs, then arrival
time and id; a job runs on one accelerator type (its current type, else the fastest one with
room for its base).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from apportion.formulations.elastic_plan import (
    ElasticOutcome,
    Placement,
    holdings,
    layout_of,
    remaining_time_certificate,
    run_phases,
    settle,
    timed,
    to_plan,
)
from apportion.formulations.elastic_speed import TypeOptions
from apportion.formulations.loss_curve import CurveForm, fit_many
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, FloatArray, Problem, SolveOptions
from apportion.solver.parameters import OptimusParameters
from apportion.solver.result import Plan


def remaining_work(
    problem: Problem, fraction: float, deadline: Deadline
) -> tuple[FloatArray, list[str]]:
    """(m,) Q_i in steps (NaN = unknown) and, per job, where it came from. The loss curves
    are fitted together (skipped, with progress instead, when the deadline has passed)."""
    m = problem.jobs.num_jobs
    jobs = problem.jobs
    out = np.where(jobs.total_steps > 0, np.maximum(jobs.total_steps - jobs.steps_done, 0.0),
                   np.nan)
    source = np.where(jobs.total_steps > 0, "progress", "unknown").tolist()
    elastic = problem.elastic
    fitted = [] if elastic is None else [
        i for i, history in enumerate(elastic.loss_history[:m]) if history is not None]
    if not fitted or deadline.expired():
        return out, source
    assert elastic is not None
    histories = [elastic.history(i) for i in fitted]
    curves = fit_many([h.steps for h in histories if h], [h.loss for h in histories if h],
                      CurveForm.INVERSE)
    for i, history, curve in zip(fitted, histories, curves, strict=True):
        assert history is not None
        target = curve.convergence_step(float(history.steps[0]), fraction)
        now = max(float(history.steps[-1]), float(jobs.steps_done[i]))
        out[i] = max(target - now, 0.0)
        source[i] = "loss curve"
    return out, source


def time_saved(remaining: float, options: TypeOptions) -> FloatArray:
    """Q/f(base) - Q/f(state) (s) per state; 0 everywhere when Q is unknown."""
    if not math.isfinite(remaining):
        return np.zeros(options.num_states)
    return np.asarray(remaining / options.speed[0] - remaining / options.speed, np.float64)


def finished(remaining: FloatArray, source: list[str]) -> Callable[[int], str]:
    """Admission's skip rule: jobs with no remaining work (by progress, or converged by their
    loss curve) are FINISHED."""

    def skip(i: int) -> str:
        if source[i] == "loss curve" and remaining[i] <= 0:
            return "converged: its fitted loss curve is within the convergence fraction"
        if source[i] == "progress" and remaining[i] <= 0:
            return "no remaining work"
        return ""
    return skip


def solve_policy(
    problem: Problem,
    parameters: OptimusParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Entry point registered as `optimus`."""
    return to_plan(problem, optimus(problem, parameters, options, deadline))


def optimus(
    problem: Problem, parameters: OptimusParameters, options: SolveOptions, deadline: Deadline
) -> ElasticOutcome:
    """The Optimus allocation as pure data (module docstring)."""
    clock = timed()
    remaining, source = remaining_work(problem, parameters.convergence_fraction, deadline)
    layout = layout_of(problem)
    placement = Placement(layout, layout.node_devices.copy(), lambda i: holdings(problem, i))
    phases = run_phases(
        problem, parameters.max_devices, problem.cluster.count, placement,
        lambda i, o: time_saved(float(remaining[i]), o), parameters.method, deadline,
        options.relative_gap, options.threads, finished(remaining, source),
        with_exact=parameters.exact_gap,
    )
    build = clock()
    settled = settle(problem, phases, placement, deadline)
    reason = list(settled.reason)
    for i in settled.admitted.tolist():
        if source[i] == "unknown":
            reason[i] = "remaining work unknown (no loss history, no total_steps): base only"
    formulation = (
        f"optimus: {parameters.method.value} allocation minimizing the sum of predicted "
        "remaining times Q_i/f_i (s); Q from loss curves or progress"
    )
    job_time, cert, best = remaining_time_certificate(
        problem, phases, settled, remaining, options.relative_gap, formulation, build)
    return ElasticOutcome(
        settled=settled.with_reasons(reason),
        job_objective=np.where(np.isfinite(job_time), job_time, 0.0),
        certificate=cert,
        exact_objective=best,
        remaining_steps=remaining,
        remaining_time_s=job_time,
    )
