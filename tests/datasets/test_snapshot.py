"""Generators (determinism, structure), throughput tables and the snapshot builder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format

from apportion.datasets.cluster import ClusterSpec
from apportion.datasets.generators import (
    builtin_throughputs,
    gavel_workload,
    make_cluster,
    pair_throughputs,
    shockwave_profiles,
    sia_goodputs,
    templates,
    throughput_table,
)
from apportion.datasets.helios import write_helios
from apportion.datasets.shockwave import read_shockwave_profiles, write_shockwave_profiles
from apportion.datasets.snapshot import active_mask, build_request, render_request, scale_factors
from apportion.datasets.table import JobTable
from apportion.datasets.throughput import read_gavel_throughputs, write_gavel_throughputs
from apportion.server import cli
from apportion.server.pipeline import solve_request
from apportion.v1 import allocation_service_pb2 as service_pb


def test_generators_are_deterministic() -> None:
    a = gavel_workload(300, seed=7, jobs_per_hour=20, multi_priority=True, slo=True)
    b = gavel_workload(300, seed=7, jobs_per_hour=20, multi_priority=True, slo=True)
    assert a.diff(b) == []
    assert gavel_workload(300, seed=8).diff(a) != []
    assert throughput_table(seed=3) == throughput_table(seed=3)
    assert shockwave_profiles(a, seed=1) == shockwave_profiles(a, seed=1)
    c = make_cluster(total=100, mix={"v100": 1, "p100": 1, "k80": 1})
    assert sia_goodputs(c, seed=2) == sia_goodputs(c, seed=2)


def test_gavel_workload_distributions() -> None:
    w = gavel_workload(4000, seed=0, jobs_per_hour=36)
    scale, counts = np.unique(w.gpus, return_counts=True)
    assert list(scale) == [1, 2, 4, 8]
    assert np.allclose(counts / 4000, [0.70, 0.10, 0.15, 0.05], atol=0.03)
    assert w.duration_s.min() >= 60 * 10**1.5 - 1 and w.duration_s.max() <= 60 * 10**4 + 1
    assert np.mean(w.duration_s > 60 * 10**3) == pytest.approx(0.2, abs=0.03)
    gaps = np.diff(w.arrival_s)
    assert gaps.mean() == pytest.approx(100.0, rel=0.1)
    assert set(w.column("job_type")) <= set(templates())
    # distributed jobs only use the four distributed families
    multi = w.column("job_type")[w.gpus > 1]
    assert not any(t.startswith(("A3C", "CycleGAN", "Recommendation")) for t in multi)


def test_throughput_table_structure_and_round_trip(tmp_path: Path) -> None:
    table = pair_throughputs(builtin_throughputs(), seed=1)
    assert len(templates()) == 26 and len(table.isolated) == 83
    rows = np.array([[table.isolated[k][t] for t in ("k80", "p100", "v100")]
                     for k in table.job_keys(1)])
    assert (rows > 0).all()
    assert np.median(rows[:, 2] / rows[:, 0]) > 2  # v100 much faster than k80 typically
    combined = [
        a / table.isolated[ka]["v100"] + b / table.isolated[kb]["v100"]
        for (ka, kb), (a, b) in table.pairs["v100"].items()
    ]
    assert 0.9 < float(np.mean(combined)) < 1.3 and max(combined) <= 2.0 + 1e-9
    write_gavel_throughputs(table, tmp_path / "t.json")
    assert read_gavel_throughputs(tmp_path / "t.json") == table


def test_shockwave_profiles_round_trip(tmp_path: Path) -> None:
    profiles = shockwave_profiles(gavel_workload(12, seed=2), seed=5)
    modes = {p.mode for p in profiles}
    assert modes <= {"static", "gns", "accordion"}
    for p in profiles:
        assert len(p.bs_every_epoch) == len(p.duration_every_epoch_s) == p.num_epochs
    write_shockwave_profiles(profiles, tmp_path / "p.json")
    assert read_shockwave_profiles(tmp_path / "p.json") == profiles


def _table() -> JobTable:
    # id, arrival, start, duration, gpus
    rows = [
        ("done", 0.0, 0.0, 50.0, 1.0),  # finished at 50
        ("running", 10.0, 20.0, 200.0, 2.0),  # runs 20..220
        ("queued", 30.0, 150.0, 10.0, 1.0),  # pending until 150
        ("no-start", 40.0, np.nan, 100.0, 4.0),  # start unknown = arrival; runs 40..140
        ("future", 101.0, 101.0, 10.0, 1.0),  # not yet arrived
        ("exact", 100.0, 100.0, 5.0, 1.0),  # arrived exactly at t
        ("ends-at-t", 0.0, 0.0, 100.0, 1.0),  # finished exactly at t
        ("zero-gpu", 5.0, 5.0, 1000.0, 0.0),
        ("unknown-dur", 1.0, np.nan, np.nan, 1.0),
    ]
    return JobTable.from_columns(
        [r[0] for r in rows], arrival_s=[r[1] for r in rows], start_s=[r[2] for r in rows],
        duration_s=[r[3] for r in rows], gpus=[r[4] for r in rows], tenant=["a", "b"] * 4 + ["a"],
    )


def test_snapshot_has_exactly_the_active_jobs() -> None:
    table = _table()
    mask = active_mask(table, 100.0)
    assert [str(i) for i in table.id[mask]] == [
        "running", "queued", "no-start", "exact", "zero-gpu", "unknown-dur"
    ]
    cluster = ClusterSpec.parse("v100:4,p100:4,k80:4")
    request, report = build_request(table, cluster, builtin_throughputs(), 100.0, seed=1)
    ids = [j.id for j in request.snapshot.jobs]
    assert ids == ["running", "queued", "no-start", "exact", "unknown-dur"]
    assert report.active == 6 and report.included == 5
    assert report.excluded == {"zero, negative or unknown GPU count": 1}
    jobs = {j.id: j for j in request.snapshot.jobs}
    # progress: running 80 of 200 s; queued has not started; unknown duration: no steps
    running = jobs["running"].progress
    assert running.steps_done == pytest.approx(0.4 * running.total_steps)
    assert jobs["queued"].progress.steps_done == 0 and jobs["queued"].progress.total_steps > 0
    assert jobs["no-start"].progress.steps_done == pytest.approx(
        0.6 * jobs["no-start"].progress.total_steps)
    assert jobs["running"].scale_factor == 2 and jobs["running"].tenant == "b"
    assert report.running == 4 and report.pending == 1


def test_job_types_stable_across_times() -> None:
    table = gavel_workload(60, seed=3, jobs_per_hour=60)
    table = JobTable.from_columns(table.id, arrival_s=table.arrival_s, duration_s=table.duration_s,
                                  gpus=table.gpus)  # no job types: they are drawn
    cluster = ClusterSpec.parse("v100:8,p100:8,k80:8")
    thr = builtin_throughputs()
    early, _ = build_request(table, cluster, thr, 1500.0, seed=9)
    late, _ = build_request(table, cluster, thr, 2500.0, seed=9)
    first = {j.id: dict(j.throughput) for j in early.snapshot.jobs}
    common = [j for j in late.snapshot.jobs if j.id in first]
    assert common and all(dict(j.throughput) == first[j.id] for j in common)


def test_scale_factor_rounding() -> None:
    assert list(scale_factors(np.array([0.25, 1, 2, 3, 5, 8, 64.0]))) == [1, 1, 2, 4, 8, 8, 8]


def test_built_snapshot_solves() -> None:
    table = gavel_workload(120, seed=11, jobs_per_hour=30, multi_priority=True, num_tenants=3)
    cluster = make_cluster({"v100": 12, "p100": 12, "k80": 12})
    request, report = build_request(table, cluster, builtin_throughputs(), 3 * 3600.0, seed=2)
    assert report.included > 10
    # the rendered JSON parses back as a SolveRequest identical to the built one
    text = render_request(request)
    again = json_format.Parse(text, service_pb.SolveRequest())
    assert again == request
    response = solve_request(again)
    assert len(response.plan.jobs) == report.included


def test_snapshot_with_colocations_solves_the_packed_policies() -> None:
    """`colocations=True`: job types per table key and type pairs from the table's pair
    entries; the packed policies read them and share devices; without the flag nothing is
    attached."""
    table = gavel_workload(80, seed=4, jobs_per_hour=60)
    cluster = make_cluster({"v100": 4, "p100": 4, "k80": 4})
    thr = pair_throughputs(builtin_throughputs(), seed=2, scale_factors=(1, 2, 4, 8))
    plain, _ = build_request(table, cluster, thr, 2 * 3600.0, seed=1)
    assert not plain.snapshot.type_colocations and not plain.snapshot.jobs[0].job_type
    request, report = build_request(table, cluster, thr, 2 * 3600.0, seed=1, colocations=True)
    jobs = request.snapshot.jobs
    assert report.included > 5 and all(j.job_type for j in jobs)
    # each job type names its scale factor; pairs only between equal scale factors
    assert all(j.job_type.endswith(f" x{j.scale_factor or 1}") for j in jobs)
    present = {j.job_type for j in jobs}
    pairs = request.snapshot.type_colocations
    assert pairs and all({p.type_a, p.type_b} <= present for p in pairs)
    assert all(p.type_a.rsplit(" x", 1)[1] == p.type_b.rsplit(" x", 1)[1] for p in pairs)
    assert len({(p.type_a, p.type_b) for p in pairs}) == len(pairs)
    for name in ("max_min_fairness_packed", "min_total_duration_packed"):
        request.policy.name = name
        response = solve_request(request)
        assert response.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL, name
        assert len(response.plan.colocated) > 0, name


def test_cli_snapshot_then_solve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = gavel_workload(50, seed=5, jobs_per_hour=40)
    table = JobTable.from_columns(
        table.id, arrival_s=table.arrival_s, start_s=table.arrival_s, duration_s=table.duration_s,
        gpus=table.gpus, tenant=["vc1", "vc2"] * 25, origin_s=1.6e9,
    )
    write_helios(table, tmp_path / "cluster_log.csv")
    out = tmp_path / "snap.json"
    argv = ["snapshot", str(tmp_path / "cluster_log.csv"), "--format", "helios", "--time", "3000",
            "--cluster", "v100:8,p100:8,k80:8", "--seed", "3", "-o", str(out)]
    assert cli.main(argv) == cli.EXIT_OK
    err = capsys.readouterr().err
    assert "50 of 50 rows kept" in err and "active jobs" in err
    first = out.read_text()
    assert cli.main(argv) == cli.EXIT_OK
    assert out.read_text() == first  # deterministic
    assert json.loads(first)["snapshot"]["timeS"] == 3000.0
    assert cli.main(["solve", str(out)]) == cli.EXIT_OK
    shared = tmp_path / "shared.json"
    assert cli.main([*argv[:-1], str(shared), "--colocations", "--policy",
                     "max_min_fairness_packed"]) == cli.EXIT_OK
    assert json.loads(shared.read_text())["snapshot"]["typeColocations"]
    assert cli.main(["solve", str(shared)]) == cli.EXIT_OK


def test_cli_snapshot_bad_row_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,1,128\n"
                    "b,soon,cifar10,1,128\n")
    argv = ["snapshot", str(path), "--format", "sia", "--time", "10"]
    assert cli.main(argv) == cli.EXIT_INVALID_INPUT
    assert f"{path}:3: column 'time'" in capsys.readouterr().err
    assert cli.main([*argv, "--skip-bad", "-o", str(tmp_path / "s.json")]) == cli.EXIT_OK
    assert "skipped 1 malformed rows" in capsys.readouterr().err
