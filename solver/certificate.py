"""How good a plan is, decided in one place: the gap, the termination, and the rule that a
plan may say `optimal` only when its certificate proves it.

- `apportion.solver.result.relative_gap` (used by `Certificate.gap`) is the only gap
  definition.
- `termination(status, has_plan, gap, tolerance)` maps a solver's claim and the plan's
  certificate to the public `Termination`; every formulation calls it.
- `enforce(plan, tolerance)` runs on every plan that leaves `solve()`: a plan that says
  `optimal` but whose objective and bound are not finite, or are further apart than the
  tolerance, is downgraded to `optimal_inaccurate` with a note, whatever the formulation said.
"""

from __future__ import annotations

import math
from dataclasses import replace

from apportion.solver.backends.status import SolverStatus
from apportion.solver.result import Certificate, Plan, Termination


def termination(
    status: SolverStatus, has_plan: bool, gap: float | None, tolerance: float
) -> Termination:
    """The public termination for a solve whose solver ended with `status`.

    `has_plan`: the formulation returns a feasible plan (checked by the formulation, e.g. a MIP
    incumbent or a repaired LP point); `gap`: its certificate's `relative_gap` (None = no
    proven bound); `tolerance`: the relative gap within which the policy calls a plan optimal.
    """
    if status.solved:
        if not has_plan:
            return Termination.ERROR
        if gap is not None and gap <= tolerance:
            return Termination.OPTIMAL
        return Termination.OPTIMAL_INACCURATE
    if status is SolverStatus.INFEASIBLE:
        return Termination.INFEASIBLE
    if status is SolverStatus.UNBOUNDED:
        return Termination.UNBOUNDED
    if has_plan:
        return Termination.FEASIBLE
    if status.limit_reached:
        return Termination.NO_SOLUTION
    return Termination.ERROR


def enforce(plan: Plan, tolerance: float) -> Plan:
    """`plan` with its termination made consistent with its certificate (module docstring)."""
    cert = plan.certificate
    if cert.termination is not Termination.OPTIMAL:
        return plan
    gap = cert.gap
    if gap is not None and gap <= tolerance:
        return plan
    if gap is None:
        why = "no proven bound" if cert.objective is not None else "no objective value"
    elif math.isinf(gap):
        why = "objective or bound not finite"
    else:
        why = f"gap {gap:.3g} above the tolerance {tolerance:.3g}"
    note = f"not proven optimal: {why}"
    detail = f"{cert.detail}; {note}" if cert.detail else note
    fixed: Certificate = replace(cert, termination=Termination.OPTIMAL_INACCURATE, detail=detail)
    return replace(plan, certificate=fixed)
