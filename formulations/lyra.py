"""Lyra (EuroSys 2023), B7: capacity loaning and elastic allocation.

1. **Reclaiming** (`lyra_reclaim`): when the inference cluster asks for k of its loaned servers
   back, the k loaned nodes whose return preempts the fewest running jobs (greedy, Lyra's rule,
   with the MILP's bound as its gap; or the MILP). Jobs lose their devices on those nodes;
   preempted jobs lose everything and queue again.
2. **Phase 1**: jobs in order (surviving running jobs, then by arrival time and id) get their
   base demand (elasticity.min_devices, in workers of scale_unit devices); base workers go on
   training (not loaned) nodes first.
3. **Phase 2**: the free devices go to elastic jobs as a multiple-choice knapsack: job i takes
   w extra workers of its type worth v_i(w), the predicted job-completion-time reduction
   R_i/f_i(base) - R_i/f_i(base + w) (s), R_i = total_steps - steps_done; solved exactly by
   dynamic programming over devices (`elastic_menu.exact`). Extra workers go on loaned nodes
   first, so that a later reclaiming hits elastic extras first.

The plan's objective (minimize) is the sum over admitted jobs of predicted remaining time
R_i/f_i (s), optimal for phase 2 given phases 1 and the reclaiming (a placement loss on
fragmented nodes shows as a gap). The reclaiming's own certificate (preempted jobs, bound,
method) is in the plan's elastic section.

Choices where the paper's details are not confirmed: preemption cost = number of
preempted jobs; preempted jobs may be readmitted in the same call if their base fits;
a job with unknown remaining work keeps its base (value 0).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from apportion.formulations.elastic_plan import (
    ElasticOutcome,
    Placement,
    current_types,
    holdings,
    layout_of,
    remaining_time_certificate,
    run_phases,
    settle,
    timed,
    to_plan,
)
from apportion.formulations.elastic_speed import type_options
from apportion.formulations.lyra_reclaim import (
    ReclaimInstance,
    ReclaimResult,
    exact_reclaim,
    greedy_reclaim,
)
from apportion.formulations.optimus import time_saved
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, FloatArray, Problem, SolveOptions
from apportion.solver.parameters import ElasticMethod, LyraParameters, ReclaimMethod
from apportion.solver.result import Certificate, ModelSize, Plan, Termination

BoolArray = NDArray[np.bool_]
RECLAIM_EXACT_NODES = 64
"""Most loaned nodes for which the greedy reclaiming is also solved by MILP to report its gap."""
RECLAIM_SHARE = 0.3
"""Fraction of the time left the reclaiming MILP may use."""
RECLAIM_CERTIFY_LIMIT_S = 10.0
"""Longest MILP (s) run only to bound the greedy reclaiming (64 loaned nodes with jobs on up
to 6 nodes each take about 8 s on 2 cores; fig. in the README)."""


def reclaim_instance(problem: Problem, default_max: int) -> ReclaimInstance:
    """Devices each running job holds on each loaned node, and how many it can lose."""
    assert problem.elastic is not None
    loaned = problem.elastic.loaned_nodes
    m = problem.jobs.num_jobs
    column = {int(v): c for c, v in enumerate(loaned.tolist())}
    held = np.zeros((m, loaned.size), np.int64)
    slack = np.zeros(m, np.int64)
    current = current_types(problem)
    for i in range(m):
        pairs = holdings(problem, i)
        for node, devices in pairs:
            if node in column:
                held[i, column[node]] += devices
        if current[i] < 0:
            continue
        options = type_options(problem, i, int(current[i]), default_max)
        if options is not None and options.num_states > 1:  # elastic: down to its base
            slack[i] = max(sum(d for _, d in pairs) - int(options.devices[0]), 0)
    return ReclaimInstance(held, slack, int(problem.elastic.reclaim_nodes))


def reclaim(problem: Problem, parameters: LyraParameters, deadline: Deadline, threads: int
            ) -> tuple[ReclaimResult, Certificate] | None:
    """Step 1 (module docstring); None when nothing is asked back."""
    elastic = problem.elastic
    if elastic is None or elastic.reclaim_nodes <= 0:
        return None
    instance = reclaim_instance(problem, parameters.max_devices)
    budget = deadline.child(RECLAIM_SHARE)
    if parameters.reclaim_method is not ReclaimMethod.EXACT:
        budget = budget.within(RECLAIM_CERTIFY_LIMIT_S)
    best = None
    if parameters.reclaim_method is ReclaimMethod.EXACT or (
        parameters.reclaim_exact_gap and instance.num_servers <= RECLAIM_EXACT_NODES
    ):
        best = exact_reclaim(instance, budget, threads)
    if parameters.reclaim_method is ReclaimMethod.EXACT and best is not None:
        chosen = best
        ended = Termination.OPTIMAL if best.bound == best.cost else Termination.FEASIBLE
    else:
        chosen = greedy_reclaim(instance, deadline)
        ended = Termination.HEURISTIC
    bound = best.bound if best is not None else None
    detail = f"exact (MILP) preempts {best.cost}" if best is not None and chosen is not best \
        else ""
    cert = Certificate(
        termination=ended,
        maximize=False,
        objective=float(chosen.cost),
        bound=bound,
        solver=best.solver if best is not None else "",
        solver_version=best.solver_version if best is not None else "",
        formulation=(f"lyra reclaiming ({chosen.method}): {instance.count} of "
                     f"{instance.num_servers} loaned nodes, fewest preempted jobs"),
        solve_time_s=chosen.solve_time_s + (best.solve_time_s if best is not None
                                            and chosen is not best else 0.0),
        model_size=best.size if best is not None else ModelSize(),
        detail=detail,
    )
    return chosen, cert


def solve_policy(
    problem: Problem,
    parameters: LyraParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Entry point registered as `lyra`."""
    return to_plan(problem, lyra(problem, parameters, options, deadline))


def lyra(
    problem: Problem, parameters: LyraParameters, options: SolveOptions, deadline: Deadline
) -> ElasticOutcome:
    """The Lyra allocation as pure data (module docstring)."""
    clock = timed()
    m = problem.jobs.num_jobs
    layout = layout_of(problem)
    loaned = np.zeros(layout.node_type.size, dtype=bool)
    returned = np.zeros(layout.node_type.size, dtype=bool)
    preempted = np.zeros(m, dtype=bool)
    reclaimed = reclaim(problem, parameters, deadline, options.threads)
    reclaim_cert = None
    if problem.elastic is not None:
        loaned[problem.elastic.loaned_nodes] = True
    if reclaimed is not None:
        result, reclaim_cert = reclaimed
        returned[problem.elastic.loaned_nodes[result.chosen]] = True  # type: ignore[union-attr]
        preempted = result.preempted
    free = np.where(returned, 0, layout.node_devices).astype(np.int64)
    capacity = np.bincount(layout.node_type, weights=free,
                           minlength=problem.cluster.num_types).astype(np.int64)
    current = np.where(preempted, -1, current_types(problem))

    def keep(i: int) -> tuple[tuple[int, int], ...]:
        if preempted[i]:
            return ()
        return tuple((v, d) for v, d in holdings(problem, i) if not returned[v])

    remaining = remaining_steps(problem)
    jobs = problem.jobs
    placement = Placement(layout, free, keep, prefer_base=~loaned, prefer_extra=loaned)
    phases = run_phases(
        problem, parameters.max_devices, capacity, placement,
        lambda i, o: time_saved(float(remaining[i]), o), ElasticMethod.EXACT, deadline,
        options.relative_gap, options.threads,
        lambda i: "no remaining work" if jobs.total_steps[i] > 0 and remaining[i] <= 0 else "",
        current=current,
    )
    build = clock()
    settled = settle(problem, phases, placement, deadline)
    reason = list(settled.reason)
    for i in np.nonzero(preempted)[0]:
        note = "preempted: a loaned node it used was given back to inference"
        reason[i] = f"{note}; {reason[i]}" if reason[i] else note
    formulation = (
        "lyra: base demands in order, then extra workers by multiple-choice knapsack "
        "(dynamic program over devices) minimizing the sum of predicted remaining times (s)"
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
        reclaimed_nodes=tuple(int(v) for v in np.nonzero(returned)[0]),
        preempted=preempted,
        reclaim_certificate=reclaim_cert,
    )


def remaining_steps(problem: Problem) -> FloatArray:
    """(m,) R_i = total_steps - steps_done (steps), NaN when total_steps is unknown (0)."""
    jobs = problem.jobs
    known = jobs.total_steps > 0
    out: FloatArray = np.where(known, np.maximum(jobs.total_steps - jobs.steps_done, 0.0),
                               np.nan)
    return out
