"""SLAQ (SoCC 2017), B9: quality-driven allocation by predicted loss reduction.

* Each job's loss curve is fitted to its reported loss history with weights decaying toward
  older points (`recency_decay`), in the better of two forms: inverse (O(1/k)) and exponential
  (linear convergence) (`loss_curve.best_fit`).
* The value of a state is the predicted loss reduction over the next `horizon_s` seconds at the
  state's speed f (steps/s), normalized by the job's loss range (largest minus smallest
  reported loss): (l(k) - l(k + f * horizon)) / range, k the job's current step. SLAQ's
  objective (maximize) is the sum over admitted jobs.
* Greedy (SLAQ's rule): every admitted job starts at its base; then one unit at a time to the
  job with the largest predicted marginal normalized loss reduction per dominant share of the
  devices it adds (`elastic_menu.greedy`); the exact allocation of the same objective bounds
  it (`heuristic` plan with the exact optimum as bound; method = exact returns it).

Choices where the paper's details are not confirmed: the device is the unit SLAQ calls a
core; jobs without a loss history (new jobs) are admitted with their base and get nothing more
(their value is unknown); admission and placement as for Optimus (`elastic_plan`).
"""

from __future__ import annotations

import numpy as np

from apportion.formulations.elastic_plan import (
    ElasticOutcome,
    Placement,
    certify,
    exact_objective,
    holdings,
    layout_of,
    run_phases,
    settle,
    timed,
    to_plan,
)
from apportion.formulations.elastic_speed import TypeOptions
from apportion.formulations.loss_curve import LossCurve, best_fits, recency_weights
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, FloatArray, Problem, SolveOptions
from apportion.solver.parameters import SlaqParameters
from apportion.solver.result import Plan

DEFAULT_HORIZON_S = 60.0
"""Prediction horizon when neither the parameters nor the snapshot give one (s)."""


def horizon(problem: Problem, parameters: SlaqParameters) -> float:
    """The prediction horizon (s): the parameter, else the round duration, else 60 s."""
    if parameters.horizon_s > 0:
        return parameters.horizon_s
    return problem.round_duration_s if problem.round_duration_s > 0 else DEFAULT_HORIZON_S


def fitted_curves(
    problem: Problem, decay: float, deadline: Deadline
) -> tuple[list[LossCurve | None], FloatArray, FloatArray]:
    """Per job, its fitted curve (None = no history, or the deadline passed), its current step
    and its loss range (largest minus smallest reported loss)."""
    m = problem.jobs.num_jobs
    curves: list[LossCurve | None] = [None] * m
    step = np.zeros(m)
    spread = np.zeros(m)
    elastic = problem.elastic
    fitted = [i for i in range(m) if elastic is not None and elastic.history(i) is not None]
    if not fitted or deadline.expired():
        return curves, step, spread
    assert elastic is not None
    histories = [h for h in (elastic.history(i) for i in fitted) if h is not None]
    found = best_fits([h.steps for h in histories], [h.loss for h in histories],
                      [recency_weights(h.steps.size, decay) for h in histories])
    for i, history, curve in zip(fitted, histories, found, strict=True):
        curves[i] = curve
        step[i] = max(float(history.steps[-1]), float(problem.jobs.steps_done[i]))
        spread[i] = float(history.loss.max() - history.loss.min())
    return curves, step, spread


def loss_reduction(curve: LossCurve | None, step: float, spread: float, horizon_s: float,
                   options: TypeOptions) -> FloatArray:
    """Normalized predicted loss reduction of each state over the horizon (module docstring);
    0 without a curve or when the losses never moved."""
    if curve is None or spread <= 0:
        return np.zeros(options.num_states)
    ahead = step + options.speed * horizon_s
    return np.asarray((curve.loss(step) - curve.loss(ahead)) / spread, np.float64)


def solve_policy(
    problem: Problem,
    parameters: SlaqParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Entry point registered as `slaq`."""
    return to_plan(problem, slaq(problem, parameters, options, deadline))


def slaq(
    problem: Problem, parameters: SlaqParameters, options: SolveOptions, deadline: Deadline
) -> ElasticOutcome:
    """The SLAQ allocation as pure data (module docstring)."""
    clock = timed()
    ahead = horizon(problem, parameters)
    curves, step, spread = fitted_curves(problem, parameters.recency_decay, deadline)
    jobs = problem.jobs

    def skip(i: int) -> str:
        done = jobs.total_steps[i] > 0 and jobs.steps_done[i] >= jobs.total_steps[i]
        return "no remaining work" if done else ""

    layout = layout_of(problem)
    placement = Placement(layout, layout.node_devices.copy(), lambda i: holdings(problem, i))
    phases = run_phases(
        problem, parameters.max_devices, problem.cluster.count, placement,
        lambda i, o: loss_reduction(curves[i], float(step[i]), float(spread[i]), ahead, o),
        parameters.method, deadline, options.relative_gap, options.threads, skip,
        with_exact=parameters.exact_gap,
    )
    build = clock()
    settled = settle(problem, phases, placement, deadline)
    m = jobs.num_jobs
    value = np.zeros(m)
    reason = list(settled.reason)
    for k, i in enumerate(phases.admission.order.tolist()):
        value[i] = phases.values[k][int(settled.state[i])]
        if curves[i] is None:
            reason[i] = "no loss history (or no time left to fit it): base only"
    objective = float(value.sum())
    notes = [f"{settled.lowered} job(s) lowered by placement"] if settled.lowered else []
    formulation = (
        f"slaq: {parameters.method.value} allocation maximizing the sum of predicted "
        f"normalized loss reductions over {ahead:g} s"
    )
    cert = certify(True, objective, 0.0, phases.solve, options.relative_gap, formulation,
                   build, notes)
    return ElasticOutcome(
        settled=settled.with_reasons(reason),
        job_objective=value,
        certificate=cert,
        exact_objective=exact_objective(True, 0.0, phases.solve),
        loss_reduction=value,
    )
