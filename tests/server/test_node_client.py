"""The Node.js example client (examples/clients/node) against a real `apportion serve`.

Its npm packages are installed once from its lock file into a cache folder
(``$XDG_CACHE_HOME/apportion-tests``, default ``~/.cache``), keyed by the lock file's hash. The
test is skipped, with the reason, when node or npm is missing or the npm registry cannot be
reached; any other install failure fails it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from grpc_harness import running_server

from apportion.server.cli import load_request
from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.errors import ValidationError
from apportion.solver.registry import policies

ROOT = Path(__file__).resolve().parents[2]
CLIENT_DIR = ROOT / "examples" / "clients" / "node"
EXAMPLES = ROOT / "examples"
INSTALL_TIMEOUT_S = 600
RUN_TIMEOUT_S = 180
NETWORK_ERRORS = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT",
                  "ENETUNREACH", "network")


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "apportion-tests"


def installed_node_modules() -> Path:
    """node_modules for the client, installed with `npm ci` from its lock file (cached)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for the Node.js client test (not on PATH)")
    lock = (CLIENT_DIR / "package-lock.json").read_bytes()
    target = _cache_root() / f"node-client-{hashlib.sha256(lock).hexdigest()[:16]}"
    if (target / "node_modules" / "@grpc" / "grpc-js").is_dir():
        return target / "node_modules"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        for name in ("package.json", "package-lock.json"):
            shutil.copy(CLIENT_DIR / name, tmp)
        result = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=tmp, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False,
        )
        if result.returncode != 0:
            output = result.stdout + result.stderr
            if any(word in output for word in NETWORK_ERRORS):
                pytest.skip(f"the npm registry cannot be reached: {output.strip()[-300:]}")
            raise AssertionError(f"npm ci failed:\n{output}")
        if not target.exists():
            os.replace(tmp, target)
            Path(tmp).mkdir()  # for TemporaryDirectory's cleanup
    return target / "node_modules"


def run_client(address: str, node_modules: Path) -> dict[str, Any]:
    env = {**os.environ, "NODE_PATH": str(node_modules)}
    result = subprocess.run(
        ["node", str(CLIENT_DIR / "client.js"), "--json", address,
         str(EXAMPLES / "four_jobs.json"), str(EXAMPLES / "invalid.json")],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env, check=False,
    )
    assert result.returncode == 0, result.stderr
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def test_node_client_lists_solves_and_decodes_bad_request() -> None:
    node_modules = installed_node_modules()
    with running_server("--workers", "1") as server:
        out = run_client(server.address, node_modules)

    # ListPolicies: every registered policy, with its parameters oneof field and plan kind
    by_name = {p["name"]: p for p in out["policies"]}
    assert list(by_name) == [spec.name for spec in policies()]
    for spec in policies():
        assert by_name[spec.name]["parametersField"] == spec.parameters_field
        assert by_name[spec.name]["planKind"] == f"PLAN_KIND_{spec.capabilities.plan_kind.name}"
        assert by_name[spec.name]["requiredInputs"] == list(spec.required_inputs)

    # Solve: the same plan as solving the file in this process
    request = load_request(str(EXAMPLES / "four_jobs.json"))
    expected = json_format.MessageToDict(solve_request(request))
    assert out["solve"]["termination"] == expected["stats"]["termination"]
    assert out["solve"]["objective"] == pytest.approx(expected["stats"]["objective"], rel=1e-9)
    shares = {job["jobId"]: job.get("timeShare", {}) for job in expected["plan"]["jobs"]}
    assert out["solve"]["jobs"].keys() == shares.keys()
    for job_id, share in shares.items():
        assert out["solve"]["jobs"][job_id] == pytest.approx(share, rel=1e-9)

    # BadRequest decoded from the trailer: the violations validation reports in this process
    with pytest.raises(ValidationError) as rejected:
        request_to_model(load_request(str(EXAMPLES / "invalid.json")))
    # (as sets: the order of a map's entries is not kept across languages)
    assert sorted((v["field"], v["description"]) for v in out["badRequest"]) == sorted(
        (v.field, v.description) for v in rejected.value.violations
    )
    assert len(out["badRequest"]) >= 4
