"""Property-testing helpers for apportion (docs/testing.md): hypothesis strategies for valid
and invalid snapshots, and `check_plan`, which verifies a plan's feasibility and its
certificate independently of the formulation that produced it.

    from hypothesis import given
    import apportion
    from apportion.testing import check_plan, snapshots

    @given(snapshots("max_min_fairness"))
    def test_plans_are_feasible_and_certified(request):
        check_plan(request, apportion.solve(request))

`check_plan` needs only apportion itself; the strategies need hypothesis (install the extra
``apportion[testing]``) and are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from apportion.testing.check import (
    FEASIBILITY_TOLERANCE,
    OBJECTIVE_TOLERANCE,
    Failure,
    PlanCheckError,
    PlanReport,
    check_plan,
)
from apportion.testing.columns import to_job_columns

if TYPE_CHECKING:
    from apportion.testing.invalid import InvalidSnapshot, invalid_snapshots
    from apportion.testing.strategies import (
        clusters,
        configuration_shapes,
        problems,
        snapshots,
    )

__all__ = [
    "FEASIBILITY_TOLERANCE",
    "OBJECTIVE_TOLERANCE",
    "Failure",
    "InvalidSnapshot",
    "PlanCheckError",
    "PlanReport",
    "check_plan",
    "clusters",
    "configuration_shapes",
    "invalid_snapshots",
    "problems",
    "snapshots",
    "to_job_columns",
]

_LAZY = {
    "configuration_shapes": "apportion.testing.strategies",
    "clusters": "apportion.testing.strategies",
    "problems": "apportion.testing.strategies",
    "snapshots": "apportion.testing.strategies",
    "InvalidSnapshot": "apportion.testing.invalid",
    "invalid_snapshots": "apportion.testing.invalid",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'apportion.testing' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
