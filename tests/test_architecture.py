"""The architecture's rules, checked on the source: no import cycles among apportion's modules
(function-local and type-checking imports included), the solver libraries driven only by the
solver layer, and the lower packages never importing the higher ones."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "solver": "apportion.solver",
    "formulations": "apportion.formulations",
    "server": "apportion.server",
    "datasets": "apportion.datasets",
    "simulator": "apportion.simulator",
}


def modules() -> dict[str, Path]:
    """Every apportion module (dotted name) and its file."""
    found: dict[str, Path] = {}
    for folder, package in PACKAGES.items():
        base = ROOT / folder
        if not base.is_dir():
            continue
        for path in base.rglob("*.py"):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The apportion modules `name` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rsplit(".", 1)[0] if "." in target else ""
            if target and target != name and known[target].name != "__init__.py":
                out.add(target)
    return out


def third_party_imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def test_no_import_cycles() -> None:
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_solver_libraries_only_in_the_solver_layer() -> None:
    """HiGHS and Clarabel are driven only by `apportion.solver.backends` (OR-Tools' CP-SAT
    modelling API may build models elsewhere; they are solved by the backend)."""
    layer = ROOT / "solver" / "backends"
    offenders = [
        str(path.relative_to(ROOT))
        for path in modules().values()
        if layer not in path.parents and {"highspy", "clarabel"} & third_party_imports(path)
    ]
    assert not offenders, offenders


def test_lower_packages_never_import_higher_ones() -> None:
    """solver <- formulations <- server; datasets below formulations; nothing imports the
    simulator but the server's command line."""
    rank = {"apportion.solver": 0, "apportion.datasets": 1, "apportion.formulations": 2,
            "apportion.simulator": 3, "apportion.server": 4}
    known = modules()
    wrong = []
    for name, path in known.items():
        here = next(r for p, r in rank.items() if name.startswith(p))
        for target in imports(name, path, known):
            there = next(r for p, r in rank.items() if target.startswith(p))
            allowed = there <= here or (
                # the simulator drives the service's conversion (its wire mode) ...
                name.startswith("apportion.simulator") and target.startswith("apportion.server")
            ) or (
                # ... and only the command line reaches back into the simulator
                name == "apportion.server.cli" and target.startswith("apportion.simulator"))
            if not allowed:
                wrong.append(f"{name} -> {target}")
    assert not wrong, wrong
