"""The `apportion` command line, run as a subprocess like a user would (plus a few in-process
checks of the rendering and error mapping)."""

from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import json
import math
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import json_format

from apportion.server import cli, render
from apportion.server.pipeline import solve_request
from apportion.solver.capabilities import PlanKind
from apportion.solver.registry import known_names, lookup, policies
from apportion.v1 import allocation_service_pb2 as service_pb

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FOUR_JOBS = EXAMPLES / "four_jobs.json"
CLUSTER_32 = EXAMPLES / "cluster_32_jobs.json"
INVALID = EXAMPLES / "invalid.json"
ALLOX = EXAMPLES / "allox_queues.json"
SIA = EXAMPLES / "sia_configurations.json"


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`python -m apportion.server.cli ARGS` from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "apportion.server.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def load(path: Path) -> service_pb.SolveRequest:
    return json_format.Parse(path.read_text(), service_pb.SolveRequest())


# --------------------------------------------------------------------------- solve


def test_solve_four_jobs_prints_table_and_stats() -> None:
    result = run_cli("solve", FOUR_JOBS)
    assert result.returncode == 0, result.stderr
    for job in load(FOUR_JOBS).snapshot.jobs:
        assert job.id in result.stdout
    for type_name in ("v100", "p100", "k80"):
        assert type_name in result.stdout
    assert "optimal" in result.stdout
    assert "weighted_max_min_fairness" in result.stdout
    assert result.stderr == ""


def test_solve_json_matches_in_process_pipeline() -> None:
    result = run_cli("solve", FOUR_JOBS, "--json")
    assert result.returncode == 0, result.stderr
    response = json_format.Parse(result.stdout, service_pb.SolveResponse())
    assert response.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    assert [j.job_id for j in response.plan.jobs] == [j.id for j in load(FOUR_JOBS).snapshot.jobs]
    expected = solve_request(load(FOUR_JOBS))
    assert math.isclose(response.stats.objective, expected.stats.objective, rel_tol=1e-9)
    assert "preserving" not in result.stdout and "jobId" in result.stdout  # camelCase JSON


def test_solve_32_jobs_with_time_limit_override() -> None:
    result = run_cli("solve", CLUSTER_32, "--time-limit", "30")
    assert result.returncode == 0, result.stderr
    assert "optimal" in result.stdout
    assert "limit 30 s" in result.stdout
    assert "job-31-" in result.stdout


def test_solve_policy_override_by_alias() -> None:
    result = run_cli("solve", FOUR_JOBS, "--policy", "max_min_fairness_perf", "--json")
    assert result.returncode == 0, result.stderr
    response = json_format.Parse(result.stdout, service_pb.SolveResponse())
    assert response.stats.policy == "weighted_max_min_fairness"


def test_unknown_policy_exits_2_listing_known_policies() -> None:
    result = run_cli("solve", FOUR_JOBS, "--policy", "nope")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "policy.name: unknown policy 'nope'" in result.stderr
    for name in known_names():
        assert name in result.stderr
    assert "Traceback" not in result.stderr


def test_time_limit_counts_from_the_start_of_the_command() -> None:
    """Reading and validating the file spends the --time-limit too: with 1 µs nothing is left
    for the solve, which is reported instead of run."""
    result = run_cli("solve", FOUR_JOBS, "--time-limit", "1e-6", "--json")
    assert result.returncode == 0, result.stderr
    response = json_format.Parse(result.stdout, service_pb.SolveResponse())
    assert response.stats.termination == service_pb.TERMINATION_REASON_NO_SOLUTION
    assert "ran out before the solve started" in response.stats.detail
    assert response.stats.time_limit_s == 1e-6


def test_output_closed_early_exits_quietly() -> None:
    """`apportion solve ... | head`: the reader goes away; no error message, the SIGPIPE
    exit status of a Unix tool."""
    process = subprocess.Popen(
        [sys.executable, "-m", "apportion.server.cli", "solve", str(CLUSTER_32), "--all"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # before the command can write anything
    stderr = process.stderr.read()
    assert process.wait(timeout=120) == 128 + signal.SIGPIPE
    assert stderr == b""


def test_a_huge_echoed_value_is_cut(tmp_path: Path) -> None:
    doc = json.loads(FOUR_JOBS.read_text())
    doc["policy"] = {"name": "p" * 2**20 + "\n" + "fake.field: fake violation"}
    snapshot = tmp_path / "huge_name.json"
    snapshot.write_text(json.dumps(doc))
    result = run_cli("validate", snapshot)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("policy.name: unknown policy 'ppp")
    assert "characters omitted]" in line
    assert len(line) < 2000


def test_negative_time_limit_is_invalid_input() -> None:
    result = run_cli("solve", FOUR_JOBS, "--time-limit", "-1")
    assert result.returncode == 2
    assert "options.time_limit_s" in result.stderr


# --------------------------------------------------------------------------- validate


def test_validate_ok() -> None:
    result = run_cli("validate", FOUR_JOBS)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "ok: 4 jobs, 3 accelerator types, policy weighted_max_min_fairness"
    )


def test_validate_invalid_example_lists_every_violation() -> None:
    result = run_cli("validate", INVALID)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    expected_fields = {
        'snapshot.jobs[0].throughput["v100"]',  # NaN
        'snapshot.jobs[1].throughput["k80"]',  # negative
        'snapshot.jobs[1].throughput["h100"]',  # unknown type
        "snapshot.jobs[2].id",  # duplicate
        "snapshot.jobs[3].scale_factor",  # 0
    }
    assert {line.split(": ", 1)[0] for line in lines} == expected_fields
    assert len(lines) == len(expected_fields)


def test_solve_invalid_example_same_errors_as_validate() -> None:
    solved, validated = run_cli("solve", INVALID), run_cli("validate", INVALID)
    assert solved.returncode == validated.returncode == 2
    assert sorted(solved.stderr.splitlines()) == sorted(validated.stderr.splitlines())


def test_malformed_json_exits_2_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken_snapshot.json"
    bad.write_text('{"snapshot": {"jobs": [}')
    result = run_cli("solve", bad)
    assert result.returncode == 2
    assert "broken_snapshot.json" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_field_exits_2_naming_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "typo.json"
    bad.write_text(json.dumps({"snapshot": {"jobz": []}}))
    result = run_cli("validate", bad)
    assert result.returncode == 2
    assert "typo.json" in result.stderr and "jobz" in result.stderr


def test_missing_file_exits_2(tmp_path: Path) -> None:
    result = run_cli("validate", tmp_path / "absent.json")
    assert result.returncode == 2
    assert "absent.json" in result.stderr


def test_usage_error_exits_2() -> None:
    result = run_cli("solve")
    assert result.returncode == 2
    assert "usage:" in result.stderr


# --------------------------------------------------------------------------- others


def test_policies_lists_registry() -> None:
    result = run_cli("policies")
    assert result.returncode == 0, result.stderr
    assert "weighted_max_min_fairness" in result.stdout
    assert "apportion.v1.MaxMinFairnessParameters" in result.stdout
    assert "jobs[].throughput" in result.stdout


def test_help_and_version() -> None:
    helped = run_cli("--help")
    assert helped.returncode == 0
    for command in ("solve", "validate", "policies", "serve"):
        assert command in helped.stdout
    version = run_cli("--version")
    assert version.returncode == 0
    assert version.stdout.startswith("apportion ")


@pytest.mark.skipif(
    importlib.util.find_spec("apportion.server.app") is None, reason="server app not present"
)
def test_serve_help() -> None:
    result = run_cli("serve", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: apportion serve" in result.stdout


def test_import_is_light() -> None:
    """`apportion --help` must be instant: importing the CLI loads no heavy module."""
    heavy = ["numpy", "scipy", "cvxpy", "grpc", "google.protobuf", "apportion.v1"]
    code = (
        "import json, sys\n"
        "import apportion.server.cli\n"
        f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_internal_error_exits_3_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    def boom(args: argparse.Namespace) -> int:
        raise RuntimeError("solver exploded\nwhile doing\nthings " + "x" * 100_000)

    code = cli.run(boom, argparse.Namespace(debug=False))
    err = capsys.readouterr().err
    assert code == 3
    (line,) = err.splitlines()  # one line, bounded
    assert "solver exploded" in line and "Traceback" not in line and len(line) < 2000

    code = cli.run(boom, argparse.Namespace(debug=True))
    assert code == 3
    assert "Traceback" in capsys.readouterr().err


# --------------------------------------------------------------------------- render


def _response(num_jobs: int) -> service_pb.SolveResponse:
    response = service_pb.SolveResponse()
    response.stats.termination = service_pb.TERMINATION_REASON_OPTIMAL
    for i in range(num_jobs):
        job = response.plan.jobs.add(job_id=f"job{i}", status=service_pb.JOB_STATUS_ALLOCATED)
        job.time_share["a"] = 0.5
    return response


def test_table_truncates_long_plans() -> None:
    table = render.plan_table(_response(60), ["a", "b"], max_rows=50)
    assert "job49" in table and "job50" not in table
    assert "... 10 more jobs" in table
    full = render.plan_table(_response(60), ["a", "b"], max_rows=0)
    assert "job59" in full and "more jobs" not in full


def test_report_flags_non_optimal_termination() -> None:
    response = service_pb.SolveResponse()
    response.stats.termination = service_pb.TERMINATION_REASON_INFEASIBLE
    text = render.solve_report(response, ["a"])
    assert "no plan" in text
    assert "termination    infeasible" in text
    assert "not a proven optimum" in text


def test_control_characters_in_ids_are_escaped() -> None:
    """A newline in a job id must not start a line of its own in the table."""
    response = _response(2)
    response.plan.jobs[0].job_id = "evil\nsnapshot.jobs[1].id: fake\x1b[2J"
    table = render.plan_table(response, ["a\tb"])
    lines = table.splitlines()
    assert len(lines) == 4  # header, rule, two jobs
    assert lines[2].startswith("evil\\nsnapshot.jobs[1].id")
    assert render.plan_table(response, ["a"], 0).count("\x1b") == 0
    response.plan.jobs[0].job_id = "\x1b[2J"
    assert "\\x1b[2J" in render.plan_table(response, ["a"])
    assert "a\\tb" in lines[0]


def test_unservable_jobs_show_their_reason() -> None:
    response = _response(2)
    response.plan.jobs[1].status = service_pb.JOB_STATUS_UNSERVABLE
    response.plan.jobs[1].reason = "needs 16 devices"
    table = render.plan_table(response, ["a"])
    lines = table.splitlines()
    assert lines[3].split()[:2] == ["job1", "unservable"]
    assert "notes:" in lines and "  job1: needs 16 devices" in lines


def test_a_long_reason_does_not_widen_the_table() -> None:
    """Reasons go below the table, so a long one leaves the table's lines short."""
    response = _response(3)
    response.plan.jobs[1].status = service_pb.JOB_STATUS_UNSERVABLE
    response.plan.jobs[1].reason = "x" * 150
    table = render.plan_table(response, ["a"])
    header, rule, *rows = table.split("\n\nnotes:")[0].splitlines()
    assert max(len(line) for line in [header, rule, *rows]) < 100
    assert "x" * 150 in table


# --------------------------------------------------------------------------- in the policy's terms


def _solve_json(path: Path, *args: str) -> dict[str, object]:
    result = run_cli("solve", path, "--format", "json", *args)
    assert result.returncode == 0, result.stderr
    data: dict[str, object] = json.loads(result.stdout)
    return data


@pytest.mark.parametrize(
    ("example", "policy"),
    [(FOUR_JOBS, "weighted_max_min_fairness"), (ALLOX, "allox"), (SIA, "sia"),
     (CLUSTER_32, "fisher_market"), (CLUSTER_32, "fifo")],
)
def test_table_speaks_the_policy_language(example: Path, policy: str) -> None:
    """The table's headings come from the registry: the job's value under its own name and
    unit (no "level" for AlloX), the objective named in the stats, and the allocation in
    the plan's own shape (configurations for Sia, queue places for AlloX, spending and
    prices for a market)."""
    spec = lookup(policy)
    result = run_cli("solve", example, "--policy", policy, "--all")
    assert result.returncode == 0, result.stderr
    header = result.stdout.splitlines()[0]
    job_value = spec.reporting.job_value
    if job_value is None:
        assert "level" not in header
    else:
        assert job_value.heading() in header
    assert f"({'maximize' if spec.maximize else 'minimize'} " \
        f"{spec.reporting.objective.heading()})" in result.stdout
    kind = spec.capabilities.plan_kind
    plan = _solve_json(example, "--policy", policy)["plan"]
    assert isinstance(plan, dict)
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[2:]
            if line.strip() and not line.startswith(" ")}
    if kind is PlanKind.CONFIGURATION:
        assert header.split()[:4] == ["job", "type", "nodes", "GPUs"]
        for job in plan["jobs"]:
            config = job["configuration"]
            assert rows[job["jobId"]][1:4] == [config["acceleratorType"], str(config["nodes"]),
                                               str(config["devices"])]
    elif kind is PlanKind.QUEUE:
        assert header.split()[:3] == ["job", "status", "device"] or \
            header.split()[:2] == ["job", "device"]
        for job in plan["jobs"]:
            if "queue" in job:
                queue = job["queue"]
                device = f"{queue['acceleratorType']}[{','.join(map(str, queue['devices']))}]"
                assert device in rows[job["jobId"]]
    elif kind is PlanKind.MARKET:
        assert header.split()[-1] == "spending"
        assert "prices per device:" in result.stdout
        stats = _solve_json(example, "--policy", policy)["stats"]
        assert isinstance(stats, dict)
        in_steps = next(line for line in result.stdout.splitlines()
                        if line.startswith("in steps/s"))
        assert float(in_steps.split()[2]) == pytest.approx(stats["throughputObjective"],
                                                           rel=1e-9)
    if kind is not PlanKind.MARKET:
        assert "prices per device" not in result.stdout
        assert "in steps/s" not in result.stdout


def test_csv_has_every_job_at_full_precision() -> None:
    result = run_cli("solve", CLUSTER_32, "--format", "csv")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    plan = _solve_json(CLUSTER_32)["plan"]
    assert isinstance(plan, dict)
    assert [row["job"] for row in rows] == [job["jobId"] for job in plan["jobs"]]
    for row, job in zip(rows, plan["jobs"], strict=True):
        assert row["status"] == "allocated" and row["reason"] == ""
        assert float(row["level"]) == job["objectiveValue"]
        assert float(row["throughput (steps/s)"]) == job["effectiveThroughput"]
        for name in ("v100", "p100", "k80"):
            assert float(row[name]) == job.get("timeShare", {}).get(name, 0.0)


def test_json_flag_is_an_alias_of_format_json() -> None:
    by_flag = run_cli("solve", FOUR_JOBS, "--json")
    assert by_flag.returncode == 0
    plan = json.loads(by_flag.stdout)["plan"]
    assert plan == _solve_json(FOUR_JOBS)["plan"]


@pytest.mark.parametrize("example", [FOUR_JOBS, ALLOX, SIA])
def test_plot_draws_each_plan_kind(example: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib (the plot extra) is not installed")
    picture = tmp_path / "plan.png"
    result = run_cli("solve", example, "--plot", picture, "--format", "csv")
    assert result.returncode == 0, result.stderr
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.stdout.startswith("job,")  # the plan is printed as well


def test_plot_without_matplotlib_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    code = cli.main(["solve", str(FOUR_JOBS), "--plot", str(tmp_path / "p.png")])
    assert code == cli.EXIT_INVALID_INPUT
    assert "--plot needs matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "p.png").exists()


def test_policies_lists_capabilities_and_units() -> None:
    result = run_cli("policies")
    assert result.returncode == 0, result.stderr
    blocks = {block.split()[0]: block for block in result.stdout.split("\n\n")}
    assert list(blocks) == [spec.name for spec in policies()]
    for spec in policies():
        block = blocks[spec.name]
        assert spec.reporting.objective.heading() in block.splitlines()[0]
        assert f"gap {spec.capabilities.default_relative_gap:g}" in block
        if spec.parameters_field:
            assert spec.parameters_field in block
    assert "reads        tenants" in blocks["hierarchical_max_min_fairness"]
    assert "schedule_rounds, space_sharing" in blocks["weighted_max_min_fairness"]
    assert "one configuration per job" in blocks["sia"]
