"""Committed generated files are exactly what their generators produce today.

* proto/apportion/v1/*_pb2*.py[i]: regenerated with the command of proto/generate.sh into a
  temporary folder and compared byte for byte.
* examples/*.json written by examples/make_examples.py.
* docs/schema.md (from the .proto comments) and the command reference of docs/cli.md (from
  the command line's --help), written by docs/generate.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROTO_DIR = ROOT / "proto"
PACKAGE_DIR = PROTO_DIR / "apportion" / "v1"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def _generated(folder: Path) -> dict[str, bytes]:
    """Generated files in `folder`, by name."""
    return {
        path.name: path.read_bytes()
        for path in sorted(folder.iterdir())
        if path.name.endswith(GENERATED_SUFFIXES)
    }


def _env_with_plugins() -> dict[str, str]:
    """PATH with this interpreter's scripts folder first (protoc-gen-mypy, protoc-gen-mypy_grpc)."""
    scripts = sysconfig.get_path("scripts")
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([scripts, str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def test_protobuf_code_is_up_to_date(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    env = _env_with_plugins()
    if shutil.which("protoc-gen-mypy", path=env["PATH"]) is None:
        pytest.fail("protoc-gen-mypy not found: pip install -e '.[dev]' (mypy-protobuf)")
    protos = sorted(str(p.relative_to(ROOT)) for p in PACKAGE_DIR.glob("*.proto"))
    assert protos, "no .proto files found"
    out = str(tmp_path)
    command = [
        sys.executable, "-m", "grpc_tools.protoc", "-I", "proto",
        f"--python_out={out}", f"--grpc_python_out={out}",
        f"--mypy_out={out}", f"--mypy_grpc_out={out}",
        *protos,
    ]  # fmt: skip
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr

    fresh = _generated(tmp_path / "apportion" / "v1")
    committed = _generated(PACKAGE_DIR)
    assert sorted(fresh) == sorted(committed), "generated file set differs; run proto/generate.sh"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"out of date: {stale}; run: bash proto/generate.sh"


def test_generate_script_matches_test_command() -> None:
    """proto/generate.sh runs the command this test checks (same plugins and include path)."""
    script = (PROTO_DIR / "generate.sh").read_text()
    flags = ["-I proto", "--python_out=proto", "--grpc_python_out=proto", "--mypy_out=proto"]
    flags += ["--mypy_grpc_out=proto", "proto/apportion/v1/*.proto"]
    for flag in flags:
        assert flag in script


def test_examples_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "make_examples.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_generated_docs_are_up_to_date() -> None:
    """docs/schema.md and docs/cli.md's reference are written by docs/generate.py."""
    pytest.importorskip("grpc_tools")
    result = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "generate.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
