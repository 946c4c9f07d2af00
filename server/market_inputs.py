"""Wire conversion for the market family (A4, docs/policies/market.md): the Fisher market and
Shockwave.

* `market_parameters` maps a `Policy.parameters` oneof field to a converter of its message.
* `epoch_inputs` reads the per-epoch fields of every job and the Shockwave history state
  (validated for every policy: they are snapshot facts, documented in snapshot.proto).
* `market_input_violations` checks what the resolved policy needs from the snapshot.
* `fill_market_response` writes spending, reference finish times and the round schedule.

Every problem is appended as `Violation(field_path, description)`, like the rest of
`apportion.server.convert`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from apportion.solver.errors import Violation
from apportion.solver.model import History, Jobs, PolicyRequest, Problem, ReferenceFinishState
from apportion.solver.parameters import (
    BudgetSource,
    FisherMarketParameters,
    RemainingTimePredictor,
    ShockwaveParameters,
)
from apportion.solver.result import Plan
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import policy_pb2 as policy_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

_BUDGETS = {
    policy_pb.BUDGET_SOURCE_UNSPECIFIED: BudgetSource.EQUAL,
    policy_pb.BUDGET_SOURCE_EQUAL: BudgetSource.EQUAL,
    policy_pb.BUDGET_SOURCE_PRIORITY_WEIGHT: BudgetSource.PRIORITY_WEIGHT,
}
_PREDICTOR = {
    policy_pb.REMAINING_TIME_PREDICTOR_UNSPECIFIED: RemainingTimePredictor.DIRICHLET,
    policy_pb.REMAINING_TIME_PREDICTOR_DIRICHLET: RemainingTimePredictor.DIRICHLET,
    policy_pb.REMAINING_TIME_PREDICTOR_ORACLE: RemainingTimePredictor.ORACLE,
}


def _fisher(msg: Any, violations: list[Violation]) -> object:
    if msg.budgets not in _BUDGETS:
        violations.append(Violation("policy.fisher_market.budgets", f"unknown value {msg.budgets}"))
    return FisherMarketParameters(budgets=_BUDGETS.get(msg.budgets, BudgetSource.EQUAL),
                                  uncapped=msg.uncapped)


def _shockwave(msg: Any, violations: list[Violation]) -> object:
    p = "policy.shockwave"
    default = ShockwaveParameters()
    rounds = msg.planning_rounds if msg.HasField("planning_rounds") else default.planning_rounds
    if rounds < 1:
        violations.append(Violation(f"{p}.planning_rounds", f"must be >= 1, got {rounds}"))
        rounds = default.planning_rounds
    kappa = msg.makespan_weight if msg.HasField("makespan_weight") else default.makespan_weight
    if not (math.isfinite(kappa) and kappa >= 0):
        violations.append(
            Violation(f"{p}.makespan_weight", f"must be finite and >= 0, got {kappa}")
        )
        kappa = default.makespan_weight
    exponent = (
        msg.fairness_exponent if msg.HasField("fairness_exponent") else default.fairness_exponent
    )
    if not math.isfinite(exponent):
        violations.append(Violation(f"{p}.fairness_exponent", f"must be finite, got {exponent}"))
        exponent = default.fairness_exponent
    rho_max = msg.rho_max if msg.HasField("rho_max") else default.rho_max
    if not (math.isfinite(rho_max) and rho_max > 0):
        violations.append(Violation(f"{p}.rho_max", f"must be finite and > 0, got {rho_max}"))
        rho_max = default.rho_max
    if msg.predictor not in _PREDICTOR:
        violations.append(Violation(f"{p}.predictor", f"unknown value {msg.predictor}"))
    return ShockwaveParameters(
        planning_rounds=int(rounds),
        makespan_weight=float(kappa),
        fairness_exponent=float(exponent),
        rho_max=float(rho_max),
        predictor=_PREDICTOR.get(msg.predictor, RemainingTimePredictor.DIRICHLET),
        work_conserving_fill=not msg.disable_fill,
    )


market_parameters: dict[str, Callable[[Any, list[Violation]], object]] = {
    "fisher_market": _fisher,
    "shockwave": _shockwave,
}


def epoch_inputs(
    msg: snapshot_pb.Snapshot, jobs: Jobs, history: History, violations: list[Violation]
) -> tuple[Jobs, History]:
    """`jobs` and `history` with the epoch counts, the per-epoch profile, the measured
    progress and Shockwave's reference finish times and their state filled in (validated)."""
    m = len(msg.jobs)
    done = np.zeros(m, np.int64)
    total = np.zeros(m, np.int64)
    durations: list[np.ndarray] = []
    batches: list[np.ndarray] = []
    measured_time = np.zeros(m)
    measured_epochs = np.zeros(m)
    for i, job in enumerate(msg.jobs):
        p = f"snapshot.jobs[{i}]"
        prog = job.progress
        done[i], total[i] = max(prog.epochs_done, 0), max(prog.total_epochs, 0)
        if prog.total_epochs > 0 and prog.epochs_done > prog.total_epochs:
            violations.append(
                Violation(
                    f"{p}.progress.epochs_done",
                    f"{prog.epochs_done} is more than total_epochs {prog.total_epochs}",
                )
            )
        prof = job.epoch_profile
        dur = np.array(prof.epoch_duration_s, dtype=np.float64)
        bs = np.array(prof.batch_size, dtype=np.int64)
        if dur.size != bs.size:
            violations.append(
                Violation(
                    f"{p}.epoch_profile.batch_size",
                    f"has {bs.size} entries but epoch_duration_s has {dur.size}",
                )
            )
        for e, value in enumerate(prof.epoch_duration_s):
            if not (math.isfinite(value) and value > 0):
                violations.append(
                    Violation(
                        f"{p}.epoch_profile.epoch_duration_s[{e}]",
                        f"must be finite and > 0, got {value}",
                    )
                )
        for e, size in enumerate(prof.batch_size):
            if size <= 0:
                violations.append(
                    Violation(f"{p}.epoch_profile.batch_size[{e}]", f"must be > 0, got {size}")
                )
        durations.append(dur)
        batches.append(bs)
        for name, value, out in (
            ("measured_run_time_s", prof.measured_run_time_s, measured_time),
            ("measured_epochs", prof.measured_epochs, measured_epochs),
        ):
            if not (math.isfinite(value) and value >= 0):
                violations.append(
                    Violation(f"{p}.epoch_profile.{name}", f"must be finite and >= 0, got {value}")
                )
            else:
                out[i] = value
        if prog.total_epochs > 0 and prof.measured_epochs > prog.total_epochs:
            violations.append(
                Violation(
                    f"{p}.epoch_profile.measured_epochs",
                    f"{prof.measured_epochs} is more than total_epochs {prog.total_epochs}",
                )
            )
    index = {job_id: i for i, job_id in enumerate(jobs.ids)}
    state = _reference_state(msg, index, violations)
    reference = np.zeros(m)
    for k, entry in enumerate(msg.history.jobs):
        row = index.get(entry.job_id)
        value = entry.reference_finish_time_s
        if not math.isfinite(value):
            violations.append(
                Violation(f"snapshot.history.jobs[{k}].reference_finish_time_s", "must be finite")
            )
        elif row is not None:
            reference[row] = value
    jobs = replace(
        jobs,
        epochs_done=done,
        total_epochs=total,
        epoch_duration_s=tuple(durations),
        epoch_batch_size=tuple(batches),
        measured_run_time_s=measured_time,
        measured_epochs=measured_epochs,
    )
    return jobs, replace(history, reference_finish_time_s=reference, reference_state=state)


def _has_state(entry: snapshot_pb.JobHistory) -> bool:
    """Whether a history entry sets any of Shockwave's reference_* state fields."""
    return (
        entry.HasField("reference_estimate_s")
        or entry.HasField("reference_estimate_time_s")
        or entry.HasField("reference_earlier_average_s")
        or entry.HasField("reference_earlier_weight_s")
        or entry.HasField("reference_job_count")
    )


def _reference_state(
    msg: snapshot_pb.Snapshot, index: dict[str, int], violations: list[Violation]
) -> ReferenceFinishState | None:
    """Shockwave's F* state from history.jobs[] (None when no entry has any of it). An entry
    with state needs reference_estimate_s; times and averages finite, the estimate time not
    after Snapshot.time_s, the weight >= 0 and the job count >= 1."""
    entries = [(k, entry) for k, entry in enumerate(msg.history.jobs) if _has_state(entry)]
    if not entries:
        return None
    state = ReferenceFinishState.empty(len(msg.jobs))
    now = msg.time_s
    for k, entry in entries:
        p = f"snapshot.history.jobs[{k}]"
        ok = True
        if not entry.HasField("reference_estimate_s"):
            violations.append(
                Violation(
                    f"{p}.reference_estimate_s",
                    "required when any other reference_* state field is set",
                )
            )
            ok = False
        for name in ("reference_estimate_s", "reference_earlier_average_s"):
            value = getattr(entry, name)
            if not math.isfinite(value):
                violations.append(Violation(f"{p}.{name}", f"must be finite, got {value}"))
                ok = False
        when = entry.reference_estimate_time_s
        if not (math.isfinite(when) and when <= now):
            violations.append(
                Violation(
                    f"{p}.reference_estimate_time_s",
                    f"must be finite and <= snapshot.time_s {now}, got {when}",
                )
            )
            ok = False
        weight = entry.reference_earlier_weight_s
        if not (math.isfinite(weight) and weight >= 0):
            violations.append(
                Violation(
                    f"{p}.reference_earlier_weight_s", f"must be finite and >= 0, got {weight}"
                )
            )
            ok = False
        if entry.HasField("reference_job_count") and entry.reference_job_count < 1:
            violations.append(
                Violation(
                    f"{p}.reference_job_count", f"must be >= 1, got {entry.reference_job_count}"
                )
            )
            ok = False
        row = index.get(entry.job_id)
        if ok and row is not None:
            state.estimate_s[row] = entry.reference_estimate_s
            state.estimate_time_s[row] = when
            state.earlier_average_s[row] = entry.reference_earlier_average_s
            state.earlier_weight_s[row] = weight
            state.job_count[row] = entry.reference_job_count
    return state


def market_input_violations(problem: Problem, policy: PolicyRequest) -> list[Violation]:
    """What Shockwave needs beyond the general snapshot rules: one accelerator type with
    devices (a homogeneous cluster), total_epochs >= 1 and one profiled epoch per epoch."""
    if policy.name != "shockwave":
        return []
    violations: list[Violation] = []
    with_devices = [j for j in range(problem.cluster.num_types) if problem.cluster.count[j] > 0]
    if len(with_devices) > 1:
        names = ", ".join(problem.cluster.type_names[j] for j in with_devices)
        violations.append(
            Violation(
                "snapshot.cluster.accelerator_types",
                f"shockwave plans for a homogeneous cluster: exactly one type may have devices, "
                f"got {names}",
            )
        )
    jobs = problem.jobs
    for i in range(jobs.num_jobs):
        p = f"snapshot.jobs[{i}]"
        total = int(jobs.total_epochs[i]) if jobs.total_epochs.size else 0
        if total < 1:
            violations.append(
                Violation(f"{p}.progress.total_epochs", f"shockwave needs >= 1, got {total}")
            )
            continue
        got = jobs.epoch_duration_s[i].size if jobs.epoch_duration_s else 0
        if got != total:
            violations.append(
                Violation(
                    f"{p}.epoch_profile.epoch_duration_s",
                    f"shockwave needs one profiled epoch per epoch: {total} entries, got {got}",
                )
            )
    return violations


def fill_market_response(plan: Plan, problem: Problem, out: service_pb.Plan) -> None:
    """Spending (market plans), reference finish times and the round schedule (window
    plans)."""
    entries = list(out.jobs)
    market, window = plan.market, plan.window
    for i, entry in enumerate(entries):
        if market is not None:
            entry.spending = float(market.spending[i])
        if window is None:
            continue
        entry.reference_finish_time_s = float(window.reference_finish_time_s[i])
        state = window.reference_state
        if not math.isnan(state.estimate_s[i]):
            entry.reference_estimate_s = float(state.estimate_s[i])
            entry.reference_estimate_time_s = float(state.estimate_time_s[i])
            entry.reference_earlier_average_s = float(state.earlier_average_s[i])
            entry.reference_earlier_weight_s = float(state.earlier_weight_s[i])
            entry.reference_job_count = int(state.job_count[i])
    if window is None:
        return
    counts = problem.cluster.count
    type_name = problem.cluster.type_names[int(np.argmax(counts))] if counts.size else ""
    for t in range(window.schedule.shape[0]):
        round_msg = out.rounds.add()
        round_msg.index = t
        for job in np.flatnonzero(window.schedule[t]).tolist():
            grant = round_msg.grants.add()
            grant.job_id = problem.jobs.ids[job]
            grant.accelerator_type = type_name
            grant.devices = int(problem.jobs.scale_factor[job])
