"""apportion: optimization-based allocation of shared, heterogeneous GPU clusters.

The Python API (docs/python-api.md)::

    import apportion

    result = apportion.solve("examples/four_jobs.json")         # a file, a dict or a message
    print(result.termination, result.objective, result.time_share_of("resnet50"))
    apportion.validate({"cluster": ..., "jobs": [...]}, policy="max_min_fairness")

* `solve(request, policy=None, **options)` validates a request exactly as the command line and
  the server do and solves it: a `Solution` (the wire `SolveResponse` and the typed plan).
* `validate(request, policy=None)` validates without solving: a `ValidatedRequest`.
* `ValidationError` (a `ValueError`) lists every problem of a malformed request, each a
  `Violation` with its field path.
* `policies()` lists the registered policies; `__version__` is the installed version.

Importing this package is cheap: the names above are loaded on first use (module
``__getattr__``), so ``import apportion.solver`` or the command line pay nothing for them.
Property-testing helpers are in `apportion.testing` (extra ``apportion[testing]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from apportion.server.python_api import (
        Solution,
        ValidatedRequest,
        policies,
        solve,
        validate,
    )
    from apportion.solver.errors import ValidationError, Violation

    __version__: str

__all__ = [
    "Solution",
    "ValidatedRequest",
    "ValidationError",
    "Violation",
    "__version__",
    "policies",
    "solve",
    "validate",
]

_LAZY = {
    "solve": "apportion.server.python_api",
    "validate": "apportion.server.python_api",
    "policies": "apportion.server.python_api",
    "Solution": "apportion.server.python_api",
    "ValidatedRequest": "apportion.server.python_api",
    "ValidationError": "apportion.solver.errors",
    "Violation": "apportion.solver.errors",
}


def _version() -> str:
    """The installed distribution's version ("0+unknown" when apportion is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("apportion")
    except PackageNotFoundError:
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = _version()
    elif name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'apportion' has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
