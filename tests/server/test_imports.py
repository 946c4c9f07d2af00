"""What the service path imports: never cvxpy (a reference for the tests and benchmarks
only, in the ``dev`` extra) nor the optional extras (prometheus-client, matplotlib), and
everything a solve needs before a worker reports ready."""

from __future__ import annotations

import json
import subprocess
import sys

CODE = """
import importlib, json, pkgutil, sys
import apportion.solver, apportion.formulations, apportion.server, apportion.datasets
for package in (apportion.solver, apportion.formulations, apportion.server, apportion.datasets):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(module.name)
from apportion.server.workers import solve_modules
for name in solve_modules():  # what a worker loads before it reports ready
    importlib.import_module(name)
print(json.dumps({name: name in sys.modules
                  for name in ("cvxpy", "ecos", "prometheus_client", "matplotlib")}))
"""


def test_no_package_module_imports_cvxpy() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    # cvxpy: tests only; prometheus_client and matplotlib: optional extras, imported only
    # for --metrics-port and --plot
    assert found == {"cvxpy": False, "ecos": False, "prometheus_client": False,
                     "matplotlib": False}


def test_workers_load_every_registered_policys_module() -> None:
    from apportion.server.workers import solve_modules
    from apportion.solver.registry import policies

    modules = solve_modules()
    for spec in policies():
        for entry in (spec.entry_point, spec.packed_entry_point):
            assert not entry or entry.partition(":")[0] in modules, spec.name
