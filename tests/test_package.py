"""The root package `apportion`: importing it is cheap (its API is loaded on first use),
`__version__` is the installed distribution's, and every `apportion.*` package resolves from
the same tree (pyproject's package-dir and the `.typecheck` symlinks agree)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import apportion

ROOT = Path(__file__).resolve().parents[1]

_LOADED = """
import json, sys
import {module}
print(json.dumps(sorted(m for m in sys.modules
                        if m.split(".")[0] in ("numpy", "google", "grpc", "apportion"))))
"""


def _modules_after(module: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", _LOADED.format(module=module)],
        capture_output=True, text=True, timeout=120, check=True,
    )
    return set(json.loads(result.stdout))


def test_import_apportion_loads_nothing_heavy() -> None:
    assert _modules_after("apportion") == {"apportion"}


def test_import_apportion_solver_does_not_load_the_api() -> None:
    loaded = _modules_after("apportion.solver.registry")
    assert not any(name.startswith(("apportion.server", "google", "grpc")) for name in loaded)


def test_the_api_loads_on_first_use() -> None:
    code = ("import apportion, sys; apportion.solve; "
            "print('apportion.server.python_api' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=True)
    assert result.stdout.strip() == "True"


def test_version_is_the_installed_distributions() -> None:
    assert apportion.__version__ == metadata.version("apportion")
    assert "__version__" in dir(apportion) and "solve" in dir(apportion)


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    try:
        apportion.no_such_thing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "no_such_thing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_every_package_resolves_to_its_mapped_folder() -> None:
    """pyproject's package-dir, the packages list and the `.typecheck` symlinks agree, and
    `import apportion.X` loads that folder (editable install or PYTHONPATH=.typecheck)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = config["package-dir"]
    assert sorted(mapping) == sorted(config["packages"])
    for package, folder in mapping.items():
        module = __import__(package, fromlist=["__name__"])
        assert Path(module.__file__).resolve().parent == (ROOT / folder).resolve(), package
        if package.count(".") == 1 and package != "apportion.solver.backends":
            link = ROOT / ".typecheck" / package.replace(".", "/")
            assert link.resolve() == (ROOT / folder).resolve(), link
    init = ROOT / ".typecheck" / "apportion" / "__init__.py"
    assert init.resolve() == (ROOT / mapping["apportion"] / "__init__.py").resolve()
