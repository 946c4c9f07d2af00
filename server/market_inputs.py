"""Wire conversion for the market family (A4, docs/policies/market.md): the Fisher market and
Shockwave.

* `fisher_parameters`, `shockwave_parameters` convert their `Policy.parameters` messages.
* `epoch_columns` reads the per-epoch fields of every job and `reference_finish_times`
  Shockwave's history state (validated for every policy: they are snapshot facts,
  documented in snapshot.proto).
* `check_shockwave` is the input check of the planning-window policies (declared on their
  registry entries): what they need from the snapshot beyond the general rules.

Every problem is appended as `Violation(field_path, description)`, like the rest of
`apportion.server`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from apportion.server.job_wire import JobFields
from apportion.server.request_context import RequestContext
from apportion.solver import limits
from apportion.solver.errors import Violation, listing
from apportion.solver.model import FloatArray, IntArray, ReferenceFinishState
from apportion.solver.parameters import (
    BudgetSource,
    FisherMarketParameters,
    RemainingTimePredictor,
    ShockwaveParameters,
)
from apportion.solver.validation import (
    DURATION_RULE,
    STEPS_RULE,
    TIME_RULE,
    duration_ok,
    flagged,
    steps_ok,
    time_ok,
    within,
)
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


def fisher_parameters(msg: Any, violations: list[Violation]) -> object:
    """`FisherMarketParameters` from its message."""
    if msg.budgets not in _BUDGETS:
        violations.append(Violation("policy.fisher_market.budgets", f"unknown value {msg.budgets}"))
    return FisherMarketParameters(budgets=_BUDGETS.get(msg.budgets, BudgetSource.EQUAL),
                                  uncapped=msg.uncapped)


def shockwave_parameters(msg: Any, violations: list[Violation]) -> object:
    """`ShockwaveParameters` from its message: planning_rounds in [1, MAX_PLANNING_ROUNDS],
    makespan_weight in [0, MAX_KNOB], |fairness_exponent| <= MAX_FAIRNESS_POWER, rho_max in
    (0, MAX_KNOB]."""
    p = "policy.shockwave"
    default = ShockwaveParameters()
    rounds = msg.planning_rounds if msg.HasField("planning_rounds") else default.planning_rounds
    if not 1 <= rounds <= limits.MAX_PLANNING_ROUNDS:
        violations.append(Violation(f"{p}.planning_rounds",
                                    f"must be in [1, {limits.MAX_PLANNING_ROUNDS}], got {rounds}"))
        rounds = default.planning_rounds
    kappa = msg.makespan_weight if msg.HasField("makespan_weight") else default.makespan_weight
    if not within(kappa, 0.0, limits.MAX_KNOB):
        violations.append(Violation(f"{p}.makespan_weight",
                                    f"must be in [0, {limits.MAX_KNOB:g}], got {kappa}"))
        kappa = default.makespan_weight
    exponent = (
        msg.fairness_exponent if msg.HasField("fairness_exponent") else default.fairness_exponent
    )
    bound = limits.MAX_FAIRNESS_POWER
    if not within(exponent, -bound, bound):
        violations.append(Violation(f"{p}.fairness_exponent",
                                    f"must be in [{-bound:g}, {bound:g}], got {exponent}"))
        exponent = default.fairness_exponent
    rho_max = msg.rho_max if msg.HasField("rho_max") else default.rho_max
    if not (rho_max > 0 and within(rho_max, 0.0, limits.MAX_KNOB)):
        violations.append(Violation(f"{p}.rho_max",
                                    f"must be in (0, {limits.MAX_KNOB:g}], got {rho_max}"))
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


@dataclass(frozen=True)
class EpochColumns:
    """The per-epoch fields of every job (`Jobs` fields of the same names)."""

    epochs_done: IntArray
    total_epochs: IntArray
    epoch_duration_s: tuple[FloatArray, ...]
    epoch_batch_size: tuple[IntArray, ...]
    measured_run_time_s: FloatArray
    measured_epochs: FloatArray


_EPOCH_DURATION_RULE = f"must be in [{limits.MIN_DURATION_S:g}, {limits.MAX_TIME_S:g}] s"


def epoch_columns(
    jobs: JobFields, epochs_done: IntArray, total_epochs: IntArray,
    violations: list[Violation],
) -> EpochColumns:
    """Epoch counts, per-epoch profiles and measured progress of every job (validated for
    every policy: they are snapshot facts, documented in snapshot.proto). `epochs_done` and
    `total_epochs` are the counts as given, one per job (m >= the `jobs` messages: jobs beyond
    them, the columnar ones, have no epochs)."""
    m = epochs_done.size
    top = limits.MAX_EPOCHS
    for name, counts in (("epochs_done", epochs_done), ("total_epochs", total_epochs)):
        violations += [
            Violation(f"snapshot.jobs[{i}].progress.{name}",
                      f"must be in [0, {top}], got {counts[i]}")
            for i in np.flatnonzero((counts < 0) | (counts > top))
        ]
    ok = (epochs_done >= 0) & (epochs_done <= top) & (total_epochs >= 0) & (total_epochs <= top)
    done, total = np.where(ok, epochs_done, 0), np.where(ok, total_epochs, 0)
    violations += flagged(
        ok & (total > 0) & (done > total), lambda i: f"snapshot.jobs[{i}].progress.epochs_done",
        lambda i: f"{done[i]} is more than total_epochs {total[i]}",
    )
    none_f, none_i = np.zeros(0), np.zeros(0, np.int64)
    durations: list[FloatArray] = [none_f] * m
    batches: list[IntArray] = [none_i] * m
    measured_time = np.zeros(m)
    measured_epochs = np.zeros(m)
    for i, job in jobs.setting(snapshot_pb.Job.EPOCH_PROFILE_FIELD_NUMBER):
        if not job.HasField("epoch_profile"):
            continue
        p = f"snapshot.jobs[{i}]"
        prof = job.epoch_profile
        dur = np.array(prof.epoch_duration_s, dtype=np.float64)
        bs = np.array(prof.batch_size, dtype=np.int64)
        if max(dur.size, bs.size) > top:
            violations.append(Violation(f"{p}.epoch_profile.epoch_duration_s",
                                        f"{max(dur.size, bs.size)} epochs is more than {top}"))
            dur, bs = none_f, none_i
        if dur.size != bs.size:
            violations.append(
                Violation(
                    f"{p}.epoch_profile.batch_size",
                    f"has {bs.size} entries but epoch_duration_s has {dur.size}",
                )
            )
        violations += [
            Violation(f"{p}.epoch_profile.epoch_duration_s[{e}]",
                      f"{_EPOCH_DURATION_RULE}, got {dur[e]}")
            for e in np.flatnonzero(~within(dur, limits.MIN_DURATION_S, limits.MAX_TIME_S))
        ]
        violations += [
            Violation(f"{p}.epoch_profile.batch_size[{e}]", f"must be > 0, got {bs[e]}")
            for e in np.flatnonzero(bs <= 0)
        ]
        durations[i], batches[i] = dur, bs
        if duration_ok(prof.measured_run_time_s):
            measured_time[i] = prof.measured_run_time_s
        else:
            violations.append(Violation(f"{p}.epoch_profile.measured_run_time_s",
                                        f"{DURATION_RULE}, got {prof.measured_run_time_s}"))
        if not steps_ok(prof.measured_epochs):
            violations.append(Violation(f"{p}.epoch_profile.measured_epochs",
                                        f"{STEPS_RULE}, got {prof.measured_epochs}"))
        elif total_epochs[i] > 0 and prof.measured_epochs > total_epochs[i]:
            violations.append(
                Violation(
                    f"{p}.epoch_profile.measured_epochs",
                    f"{prof.measured_epochs} is more than total_epochs {total_epochs[i]}",
                )
            )
        else:
            measured_epochs[i] = prof.measured_epochs
    return EpochColumns(done.astype(np.int64), total.astype(np.int64), tuple(durations),
                        tuple(batches), measured_time, measured_epochs)


def reference_finish_times(
    msg: snapshot_pb.Snapshot, index: dict[str, int], m: int, violations: list[Violation]
) -> tuple[FloatArray, ReferenceFinishState]:
    """Shockwave's reference finish times F*_i and their state from `history.jobs[]`, aligned
    with the jobs (`index`: job id -> row)."""
    reference = np.zeros(m)
    entries = msg.history.jobs
    values = [entry.reference_finish_time_s for entry in entries]
    ok = time_ok(np.array(values, np.float64))
    for k in np.flatnonzero(~ok).tolist():
        violations.append(Violation(
            f"snapshot.history.jobs[{k}].reference_finish_time_s", f"{TIME_RULE}, got {values[k]}"
        ))
    for k in np.flatnonzero(ok & (np.array(values, np.float64) != 0)).tolist():
        row = index.get(entries[k].job_id)
        if row is not None:
            reference[row] = values[k]
    return reference, _reference_state(msg, index, m, violations)


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
    msg: snapshot_pb.Snapshot, index: dict[str, int], m: int, violations: list[Violation]
) -> ReferenceFinishState:
    """Shockwave's F* state from history.jobs[] (no state for a job without any). An entry
    with state needs reference_estimate_s; times and averages within the time bound, the
    estimate time not after Snapshot.time_s, the weight a duration and the job count in
    [1, MAX_JOBS]."""
    state = ReferenceFinishState.empty(m)
    entries = [(k, entry) for k, entry in enumerate(msg.history.jobs) if _has_state(entry)]
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
            if not time_ok(value):
                violations.append(Violation(f"{p}.{name}", f"{TIME_RULE}, got {value}"))
                ok = False
        when = entry.reference_estimate_time_s
        if not (time_ok(when) and when <= now):
            violations.append(
                Violation(
                    f"{p}.reference_estimate_time_s",
                    f"{TIME_RULE} and <= snapshot.time_s {now}, got {when}",
                )
            )
            ok = False
        weight = entry.reference_earlier_weight_s
        if not duration_ok(weight):
            violations.append(
                Violation(f"{p}.reference_earlier_weight_s", f"{DURATION_RULE}, got {weight}")
            )
            ok = False
        count = entry.reference_job_count
        if entry.HasField("reference_job_count") and not 1 <= count <= limits.MAX_JOBS:
            violations.append(
                Violation(f"{p}.reference_job_count",
                          f"must be in [1, {limits.MAX_JOBS}], got {count}")
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


def check_shockwave(context: RequestContext) -> list[Violation]:
    """What Shockwave needs beyond the general snapshot rules: one accelerator type with
    devices (a homogeneous cluster), total_epochs >= 1 and one profiled epoch per epoch, and
    a planning window of at most MAX_WINDOW_CELLS rounds x jobs."""
    problem, policy = context.problem, context.policy
    violations: list[Violation] = []
    cluster = problem.cluster
    with_devices = [j for j in range(cluster.num_types) if cluster.count[j] > 0]
    if len(with_devices) > 1:
        names = listing(cluster.type_names[j] for j in with_devices)
        violations.append(
            Violation(
                "snapshot.cluster.accelerator_types",
                f"{policy.name} plans for a homogeneous cluster: exactly one type may have "
                f"devices, got {names}",
            )
        )
    jobs = problem.jobs
    params = policy.parameters
    rounds = params.planning_rounds if isinstance(params, ShockwaveParameters) else 0
    if rounds * jobs.num_jobs > limits.MAX_WINDOW_CELLS:
        violations.append(Violation(
            "policy.shockwave.planning_rounds",
            f"{rounds} rounds x {jobs.num_jobs} jobs is more than {limits.MAX_WINDOW_CELLS} "
            "cells of the planning window",
        ))
    total = jobs.total_epochs
    violations += flagged(
        total < 1, lambda i: context.paths.field(i, "progress.total_epochs"),
        lambda i: f"{policy.name} needs >= 1, got {total[i]}",
    )
    got = np.fromiter((d.size for d in jobs.epoch_duration_s), np.int64, jobs.num_jobs)
    violations += flagged(
        (total >= 1) & (got != total),
        lambda i: context.paths.field(i, "epoch_profile.epoch_duration_s"),
        lambda i: f"{policy.name} needs one profiled epoch per epoch: {total[i]} entries, "
                  f"got {got[i]}",
    )
    return violations
