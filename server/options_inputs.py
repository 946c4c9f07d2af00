"""`SolveOptions` into the model's `SolveOptions`, each field within its bound."""

from __future__ import annotations

from apportion.solver import limits
from apportion.solver.errors import Violation
from apportion.solver.model import SolveOptions, SolverPreference
from apportion.solver.validation import DURATION_RULE, duration_ok, within
from apportion.v1 import policy_pb2 as policy_pb

_SOLVER = {
    policy_pb.SOLVER_PREFERENCE_UNSPECIFIED: SolverPreference.AUTO,
    policy_pb.SOLVER_PREFERENCE_CLARABEL: SolverPreference.CLARABEL,
    policy_pb.SOLVER_PREFERENCE_HIGHS: SolverPreference.HIGHS,
}


def options_to_model(msg: policy_pb.SolveOptions, violations: list[Violation]) -> SolveOptions:
    """The options: time limit a duration, gap in [0, 1), threads at most the machine's cores,
    schedule_rounds at most MAX_SCHEDULE_ROUNDS, any int64 seed (used modulo 2^64)."""
    p = "options"
    time_ok = duration_ok(msg.time_limit_s)
    if not time_ok:
        violations.append(Violation(f"{p}.time_limit_s",
                                    f"{DURATION_RULE}, got {msg.time_limit_s}"))
    gap_ok = bool(within(msg.relative_gap, 0.0, 1.0)) and msg.relative_gap < 1
    if not gap_ok:
        violations.append(Violation(f"{p}.relative_gap",
                                    f"must be in [0, 1), got {msg.relative_gap}"))
    cores = limits.max_threads()
    if not 0 <= msg.threads <= cores:
        violations.append(Violation(
            f"{p}.threads", f"must be in [0, {cores}] (the machine's cores; 0 = the solver's "
                            f"default), got {msg.threads}"))
    rounds = msg.schedule_rounds
    if not 0 <= rounds <= limits.MAX_SCHEDULE_ROUNDS:
        violations.append(Violation(f"{p}.schedule_rounds",
                                    f"must be in [0, {limits.MAX_SCHEDULE_ROUNDS}], got {rounds}"))
    if msg.solver not in _SOLVER:
        violations.append(Violation(f"{p}.solver", f"unknown value {msg.solver}"))
    return SolveOptions(
        time_limit_s=msg.time_limit_s if time_ok else 0.0,
        relative_gap=msg.relative_gap if gap_ok else 0.0,
        threads=min(max(msg.threads, 0), cores),
        seed=limits.rng_seed(msg.seed),
        solver=_SOLVER.get(msg.solver, SolverPreference.AUTO),
        schedule_rounds=min(max(rounds, 0), limits.MAX_SCHEDULE_ROUNDS),
    )
