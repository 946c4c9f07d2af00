"""`apportion simulate` (and its alias `replay`) as a user runs it: results, files, progress,
and bad input answered with exit code 2 and a message naming the file, line and field,
never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from apportion.server import cli
from apportion.simulator.tables import read_csv

ROOT = Path(__file__).resolve().parents[2]


def test_replay_alias_compares_policies_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`apportion replay` (the former command): one row per policy, per-job finish times in
    the JSON never before arrival + standalone time, and the makespan they imply."""
    out = tmp_path / "replay.json"
    argv = ["replay", "--synthetic", "5", "--gpus", "4", "--policies", "shockwave",
            "max_min_fairness_perf", "isolated", "--time-limit", "2", "--json", str(out),
            "--round", "3600",
            "--workers", "1"]
    assert cli.main(argv) == cli.EXIT_OK
    text = capsys.readouterr().out
    assert all(name in text for name in ("shockwave", "max_min_fairness_perf", "isolated"))
    report = json.loads(out.read_text())
    assert len(report["jobs"]) == 5
    for name in ("shockwave", "max_min_fairness_perf", "isolated"):
        entry = report["policies"][name]
        finish, arrival = entry["finish_s"], entry["arrival_s"]
        assert all(f >= a + s - 1e-6 for f, a, s in zip(finish, arrival, entry["standalone_s"],
                                                        strict=True))
        assert entry["metrics"]["makespan_s"] == pytest.approx(max(finish) - min(arrival))


def test_out_writes_tables_plots_and_a_report(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    argv = ["simulate", "--synthetic", "6", "--rate", "20", "--cluster", "v100:2:2,k80:2:2",
            "--policies", "max_min_fairness_perf", "fifo_perf=fifo", "--seeds", "0", "1",
            "--out", str(out), "--workers", "1", "--restart-overhead", "5"]
    assert cli.main(argv) == cli.EXIT_OK
    capsys.readouterr()
    summary = read_csv(out / "summary.csv")
    assert summary["label"] == ["max_min_fairness_perf", "fifo"] * 2
    assert summary["seed"] == ["0", "0", "1", "1"]
    jobs = read_csv(out / "jobs.csv")
    assert len(jobs["job_id"]) == 4 * 6
    for column in ("arrival_s", "start_s", "finish_s", "jct_s", "standalone_s", "rho",
                   "rho_themis", "gpu_hours", "restarts"):
        assert column in jobs
    rounds = read_csv(out / "rounds.csv")
    assert {"utilization_v100", "utilization_k80", "solve_wall_s", "termination"} <= set(rounds)
    aggregate = read_csv(out / "aggregate.csv")
    assert aggregate["seeds"] == ["2", "2"] and "avg_jct_s_ci95" in aggregate
    for name in ("jobs", "rounds", "grants", "summary", "aggregate"):
        assert (out / f"{name}.parquet").exists()
    for plot in ("jct_cdf", "rho_cdf", "utilization", "allocation_fifo"):
        assert (out / "plots" / f"{plot}.png").stat().st_size > 1000
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 4 and "<table>" in html
    run = json.loads((out / "run.json").read_text())["runs"]
    assert [r["seed"] for r in run] == [0, 0, 1, 1]
    assert all(r["version"] and r["fidelity"]["restart_overhead_s"] == 5.0 for r in run)


def test_progress_reports_rounds_time_and_active_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--synthetic", "4", "--rate", "30", "--cluster", "v100:2",
            "--progress", "--workers", "1"]
    assert cli.main(argv) == cli.EXIT_OK
    err = capsys.readouterr().err
    assert "job" in err and "rounds=" in err and "sim=" in err and "active=" in err


def test_the_trace_formats_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    philly = tmp_path / "philly.csv"
    philly.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n"
                      "2017-10-01 00:00:00,3600,1,3600,vc1\n"
                      "2017-10-01 00:10:00,1800,2,3600,vc2\n"
                      "2017-10-01 00:20:00,7200,1,7200,vc1\n")
    sia = tmp_path / "sia.csv"
    sia.write_text("name,time,application,num_replicas,batch_size\n"
                   "a,0,cifar10,1,128\nb,30,imagenet,2,256\n")
    for trace, fmt in ((philly, "philly-csv"), (sia, "sia")):
        argv = ["simulate", str(trace), "--format", fmt, "--cluster", "v100:2,k80:2",
                "--workers", "1"]
        assert cli.main(argv) == cli.EXIT_OK, fmt
        assert "max_min_fairness_perf" in capsys.readouterr().out


def test_synergy_runs_with_resource_profiles(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Builtin profiles, and Synergy's throughput-matrix CSV (one model on 1 and 2 GPUs)."""
    matrices = tmp_path / "tput.csv"
    rows = ["model_gpus,num_gpus,cpus_per_gpu,mem_gb_per_gpu,norm_tput"]
    for gpus in (1, 2):
        rows += [f"m_{gpus},{gpus},{c},{mem},{t}" for c, mem, t in
                 ((3, 62.5, 1.0), (3, 125, 1.1), (6, 62.5, 1.5), (6, 125, 1.8))]
    matrices.write_text("\n".join(rows) + "\n")
    for source in ("builtin", str(matrices)):
        argv = ["simulate", "--synthetic", "6", "--multi-gpu", "--cluster", "v100:8:4",
                "--policies", "synergy", "--resource-profiles", source, "--workers", "1"]
        assert cli.main(argv) == cli.EXIT_OK, source
        out = capsys.readouterr().out
        assert "synergy" in out and "unfin" in out


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "apportion.server.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_bad_input_exits_2_with_a_message(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    bad_row = tmp_path / "bad.trace"
    bad_row.write_text("ResNet-18 (batch size 32)\tcmd\tdir\t--n\t1\tmany\t1\t1\t-1\t0\n")
    big = tmp_path / "big.trace"
    big.write_text("ResNet-18 (batch size 32)\tcmd\tdir\t--n\t1\t100\t1\t1\t-1\t0\n"
                   "LM (batch size 20)\tcmd\tdir\t--n\t1\t100\t8\t1\t-1\t5\n")
    empty = tmp_path / "empty.trace"
    empty.write_text("")
    cases = [
        ([str(tmp_path / "missing.trace"), "--format", "gavel"], "missing.trace"),
        ([str(bad_row), "--format", "gavel"], f"{bad_row}:1: column 'total_steps'"),
        ([str(big), "--format", "gavel", "--cluster", "v100:4"],
         f"{big}:2 (job '1'): field 'scale_factor'"),
        ([str(empty), "--format", "gavel"], "has no jobs"),
        ([str(big)], "needs --format"),
        (["--synthetic", "3", "--policies", "no_such_policy"], "no_such_policy"),
        (["--synthetic", "3", "--gpus", "0"], "--gpus"),
        (["--profiles", str(tmp_path / "missing.json")], "missing.json"),
        (["--synthetic", "3", "--policies", "shockwave"],
         "shockwave plans for a homogeneous cluster"),
        (["--synthetic", "3", "--param", "shockwave.nope=1", "--policies", "shockwave",
          "--gpus", "4"], "no parameter 'nope'"),
        (["--synthetic", "3", "--server", "nowhere"], "HOST:PORT"),
        (["--synthetic", "3", "--cluster", "v100"], "TYPE:COUNT"),
        (["--synthetic", "3", "--window", "2", "9"], "--window"),
        (["--synthetic", "3", "--policies", "synergy"], "--resource-profiles builtin"),
        (["--synthetic", "3", "--policies", "synergy", "--resource-profiles",
          str(tmp_path / "nope.csv")], "nope.csv: no such file"),
    ]
    for extra, message in cases:
        code = cli.main(["simulate", "--workers", "1", *extra])
        err = capsys.readouterr().err
        assert code == cli.EXIT_INVALID_INPUT, (extra, err)
        assert message in err, (extra, err)
        assert "Traceback" not in err
    result = run_cli("simulate", str(tmp_path / "x.trace"), "--format", "nope")
    assert result.returncode == 2 and "invalid choice: 'nope'" in result.stderr


def test_the_format_choices_are_the_readers_formats() -> None:
    """The command line lists the formats without importing the readers (numpy)."""
    from apportion.datasets.readers import FORMATS
    from apportion.simulator.cli import FORMATS as CHOICES

    assert set(CHOICES) == set(FORMATS)


def test_placement_flag_places_every_grant_on_devices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "placed"
    argv = ["simulate", "--synthetic", "6", "--rate", "20", "--cluster", "v100:4:2,k80:4:2",
            "--policies", "max_min_fairness_perf", "--placement", "exact", "--out", str(out),
            "--workers", "1"]
    assert cli.main(argv) == cli.EXIT_OK
    capsys.readouterr()
    grants = read_csv(out / "grants.csv")
    assert grants["device_ids"] and all(grants["device_ids"])
    assert cli.main([*argv[:-4], "--placement", "nope", "--workers", "1"]) == 2
    assert "expected one of exact" in capsys.readouterr().err
    assert cli.main(["simulate", "--synthetic", "2", "--gpus", "4", "--placement", "exact",
                     "--workers", "1"]) == 2
    assert "needs a cluster with nodes" in capsys.readouterr().err
