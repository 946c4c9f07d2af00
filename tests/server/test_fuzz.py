"""Fuzzing the boundary: mutated snapshots for every registered policy, through the path the CLI
and the server use (parse, `request_to_model`, `solve`, the response), and through
`apportion validate` / `apportion solve` as subprocesses on a few cases.

Every request ends in one of three ways, never in an exception: unparsable (the CLI's exit 2,
the server's INVALID_ARGUMENT), a `ValidationError` whose violations all name a field path, or
a response with an honest termination (finite numbers, shares in [0, 1]).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.errors import ValidationError
from apportion.v1 import allocation_service_pb2 as service_pb
from tests.server.fuzz_requests import every_base, mutated

ROOT = Path(__file__).resolve().parents[2]
BASES = every_base()
_FIELD = re.compile(r"(snapshot|policy|options)([.\[]|$)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_WITH_PLAN = (
    service_pb.TERMINATION_REASON_OPTIMAL,
    service_pb.TERMINATION_REASON_OPTIMAL_INACCURATE,
    service_pb.TERMINATION_REASON_FEASIBLE,
    service_pb.TERMINATION_REASON_HEURISTIC,
)


def check_violations(error: ValidationError) -> None:
    """Every violation names a field of the request, on one line (the text is cut to its
    bounds when it leaves the process, `apportion.server.error_text`)."""
    for violation in error.violations:
        assert _FIELD.match(violation.field), violation
        assert not _CONTROL.search(violation.field + violation.description), violation


def check_response(request: service_pb.SolveRequest, response: service_pb.SolveResponse) -> None:
    """An honest answer: a termination, finite statistics, a plan of shares in [0, 1]."""
    stats = response.stats
    assert stats.termination != service_pb.TERMINATION_REASON_UNSPECIFIED
    for name in ("objective", "best_bound", "relative_gap"):
        if stats.HasField(name):
            assert math.isfinite(getattr(stats, name)), (name, stats)
    if stats.termination not in _WITH_PLAN:
        return
    m = len(request.snapshot.jobs) + len(request.snapshot.job_columns.ids)
    plan = response.plan
    if request.options.columnar_plan:
        columns = plan.columns
        assert not plan.jobs and len(columns.status) == len(columns.effective_throughput) == m
        rows = [dict[str, float]() for _ in range(m)]
        for i, j, x in zip(columns.job_index, columns.type_index, columns.time_share,
                           strict=True):
            rows[i][str(j)] = x
        throughputs = list(columns.effective_throughput)
    else:
        assert len(plan.jobs) == m
        rows = [dict(job.time_share) for job in plan.jobs]
        throughputs = [job.effective_throughput for job in plan.jobs]
    for row, throughput in zip(rows, throughputs, strict=True):
        shares = list(row.values())
        assert all(math.isfinite(x) and 0 <= x <= 1 + 1e-6 for x in shares), row
        assert sum(shares) <= 1 + 1e-6, row
        assert math.isfinite(throughput), throughput


def outcome(tree: dict[str, Any]) -> str:
    """"unparsable", "invalid" or "solved" for a request given as canonical JSON; fails the
    test on anything else."""
    text = json.dumps(tree)
    try:
        request = json_format.Parse(text, service_pb.SolveRequest())
    except json_format.ParseError:
        return "unparsable"
    try:
        response = solve_request(request)
    except ValidationError as error:
        check_violations(error)
        with pytest.raises(ValidationError) as validated:  # `validate` says what `solve` does
            request_to_model(request)
        assert validated.value.violations == error.violations
        return "invalid"
    request_to_model(request)
    check_response(request, response)
    return "solved"


@pytest.mark.parametrize(("label", "base"), BASES, ids=[label for label, _ in BASES])
def test_every_base_is_answered(label: str, base: dict[str, Any]) -> None:
    expected = "invalid" if label == "invalid.json" else "solved"
    assert outcome(base) == expected


@pytest.mark.parametrize(("label", "base"), BASES, ids=[label for label, _ in BASES])
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mutated_requests_are_rejected_or_answered(
    label: str, base: dict[str, Any], data: st.DataObject
) -> None:
    outcome(data.draw(mutated(base), label="request"))


# --------------------------------------------------------------------------------------------
# the command line on a few cases: exit 0 or 2, never 3

_CLI_CASES: list[tuple[str, Any]] = [
    ("snapshot.jobs.0.throughput.v100", "NaN"),
    ("snapshot.cluster.acceleratorTypes", []),
    ("options.threads", 2147483647),
    ("options.seed", "-1"),
    ("snapshot.jobs.0.id", "a\nb: fake violation"),
    ("snapshot.timeS", 1e308),
]


def _with(base: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    tree = json.loads(json.dumps(base))
    *parents, last = dotted.split(".")
    node: Any = tree
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[int(last) if last.isdigit() else last] = value
    return tree


@pytest.mark.parametrize(("dotted", "value"), _CLI_CASES)
def test_cli_validate_and_solve_agree(tmp_path: Path, dotted: str, value: Any) -> None:
    base = dict(BASES)["fifo_packed"]
    tree = _with(base, dotted, value)
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(tree))
    expected = outcome(tree)
    codes = {}
    for command in ("validate", "solve"):
        result = subprocess.run(
            [sys.executable, "-m", "apportion.server.cli", command, str(path)],
            capture_output=True, text=True, cwd=ROOT, timeout=120,
        )
        codes[command] = result.returncode
        assert "internal error" not in result.stderr, result.stderr
        if result.returncode == 2:
            lines = result.stderr.strip().splitlines()
            assert all(_FIELD.match(line) or "apportion: error" in line for line in lines), lines
    assert codes["validate"] == codes["solve"] == (0 if expected == "solved" else 2), codes
