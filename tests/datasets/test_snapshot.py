"""Generators (determinism, structure), throughput tables and the snapshot builder."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st

from apportion.datasets.cluster import ClusterSpec
from apportion.datasets.errors import TraceFormatError
from apportion.datasets.gavel_trace import read_gavel_trace, write_gavel_trace
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
from apportion.datasets.shockwave import (
    EpochProfile,
    read_shockwave_profiles,
    write_shockwave_profiles,
)
from apportion.datasets.sia import write_sia_workload
from apportion.datasets.snapshot import (
    ARRIVAL_START,
    FIFO_START,
    active_mask,
    build_request,
    builtin_epoch_profiles,
    builtin_goodputs,
    epochs_done,
    fifo_start_times,
    profile_goodputs,
    profiles_by_job_id,
    render_request,
    scale_factors,
)
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


# --------------------------------------------------------------------------- Shockwave / Sia inputs


def _profile(job_id: int, durations: list[float], sizes: list[int] | None = None,
             scale_factor: int = 1) -> EpochProfile:
    sizes = sizes if sizes is not None else [32] * len(durations)
    return EpochProfile(job_id=job_id, arrival_s=0.0, job_type="", mode="static",
                        scale_factor=scale_factor, num_epochs=len(durations),
                        num_samples_per_epoch=1000, bs_every_epoch=tuple(sizes),
                        duration_every_epoch_s=tuple(durations))


def _epoch_table() -> JobTable:
    # id, arrival, start, duration, gpus
    rows = [("0", 0.0, 0.0, 1000.0, 1.0), ("1", 5.0, 10.0, 1000.0, 2.0),
            ("2", 200.0, 300.0, 500.0, 1.0)]
    return JobTable.from_columns(
        [r[0] for r in rows], arrival_s=[r[1] for r in rows], start_s=[r[2] for r in rows],
        duration_s=[r[3] for r in rows], gpus=[r[4] for r in rows],
    )


def test_epochs_done_counts_completed_profiled_epochs() -> None:
    durations = [100.0, 100.0, 50.0, 200.0]  # epochs end at 100, 200, 250, 450 s of run time
    assert [epochs_done(durations, r) for r in (-5, 0, 99.9, 100, 249.9, 250, 449, 450, 1e9)] == [
        0, 0, 0, 1, 2, 3, 3, 4, 4
    ]


def test_snapshot_with_epoch_profiles_solves_shockwave() -> None:
    """Job 0 runs since 0 (epochs end at 100, 200, 250, 450 s): 3 epochs done at t = 260;
    job 1 runs since 10 with 100 s epochs: 2 done; job 2 is pending (starts at 300): 0."""
    profiles = profiles_by_job_id([
        _profile(0, [100.0, 100.0, 50.0, 200.0, 450.0], [16, 16, 32, 32, 64]),
        _profile(1, [100.0] * 10, scale_factor=2),
        _profile(2, [50.0] * 10),
    ])
    cluster = make_cluster({"v100": 8})
    request, report = build_request(_epoch_table(), cluster, builtin_throughputs(("v100",)), 260.0,
                                    policy="shockwave", round_duration_s=120.0,
                                    epoch_profiles=profiles)
    assert report.included == 3 and not report.excluded
    jobs = {j.id: j for j in request.snapshot.jobs}
    assert [jobs[i].progress.epochs_done for i in "012"] == [3, 2, 0]
    assert [jobs[i].progress.total_epochs for i in "012"] == [5, 10, 10]
    assert list(jobs["0"].epoch_profile.epoch_duration_s) == [100.0, 100.0, 50.0, 200.0, 450.0]
    assert list(jobs["0"].epoch_profile.batch_size) == [16, 16, 32, 32, 64]
    response = solve_request(json_format.Parse(render_request(request), service_pb.SolveRequest()))
    assert response.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    assert len(response.plan.jobs) == 3


def test_snapshot_with_builtin_epoch_profiles() -> None:
    """Generated profiles: one per row, durations summing to the trace duration."""
    table = gavel_workload(40, seed=6, jobs_per_hour=40)
    cluster = make_cluster({"v100": 16})
    profiles = builtin_epoch_profiles(table, seed=2)
    assert set(profiles) == {str(i) for i in table.id}
    request, report = build_request(table, cluster, builtin_throughputs(("v100",)), 3000.0,
                                    policy="shockwave", epoch_profiles=profiles)
    assert report.included > 3 and not report.excluded
    for job in request.snapshot.jobs:
        p = profiles[job.id]
        assert job.progress.total_epochs == p.num_epochs == len(job.epoch_profile.batch_size)
        k = list(table.id).index(job.id)
        assert sum(p.duration_every_epoch_s) == pytest.approx(table.duration_s[k], rel=1e-6)
        assert job.progress.epochs_done == epochs_done(p.duration_every_epoch_s,
                                                       3000.0 - table.start_s[k])
    response = solve_request(request)
    assert response.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL


def test_snapshot_epoch_profile_problems_are_counted(tmp_path: Path) -> None:
    """A job without a profile, a profile whose lists differ in length, a profile for another
    gang size: counted exclusions; a file with mismatched lengths or a repeated job id: an
    error naming the place."""
    profiles = {
        "0": _profile(0, [100.0] * 3, [32, 32]),
        "1": _profile(1, [100.0] * 3, scale_factor=4),  # the trace says 2 GPUs
    }
    cluster = make_cluster({"v100": 8})
    request, report = build_request(_epoch_table(), cluster, builtin_throughputs(("v100",)), 260.0,
                                    epoch_profiles=profiles)
    assert report.included == 0 and not request.snapshot.jobs
    assert report.excluded == {
        "epoch profile: batch sizes and epoch durations differ in length (or are empty)": 1,
        "epoch profile: scale factor differs from the job's GPU count": 1,
        "no epoch profile for the job": 1,
    }
    assert "excluded 1: no epoch profile for the job" in report.summary()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"job_id": 0, "scale_factor": 1, "num_epochs": 3,
                                "bs_every_epoch": [32, 32], "duration_every_epoch_s": [1, 1, 1]}]))
    with pytest.raises(TraceFormatError, match=r"\[0\]\.bs_every_epoch.*list of 3"):
        read_shockwave_profiles(bad)
    with pytest.raises(ValueError, match="job_id 0 appears twice"):
        profiles_by_job_id([_profile(0, [1.0]), _profile(0, [2.0])])


def _sia_table() -> JobTable:
    apps = ["cifar10", "bert", "cifar10", "imagenet"]
    return JobTable.from_columns(
        [f"j{k}" for k in range(4)], arrival_s=[0.0, 10.0, 20.0, 500.0], gpus=[1.0, 2.0, 1.0, 4.0],
        job_type=apps,
    )


def test_snapshot_with_builtin_goodputs_solves_sia() -> None:
    cluster = make_cluster({"v100": 16, "k80": 8}, gpus_per_node=4)
    source = builtin_goodputs(cluster, seed=3)
    request, report = build_request(_sia_table(), cluster, builtin_throughputs(cluster.types),
                                    100.0, policy="sia", goodputs=source)
    assert report.included == 3 and not report.excluded  # j3 arrives at 500
    for job in request.snapshot.jobs:
        rows = [(c.accelerator_type, c.nodes, c.devices, c.goodput) for c in job.configurations]
        assert rows == source(job.id, "")  # all generated rows fit (1..16 GPUs, 4 per node)
        assert {(c.accelerator_type, c.devices) for c in job.configurations} == {
            ("v100", 1), ("v100", 2), ("v100", 4), ("v100", 8), ("v100", 16),
            ("k80", 1), ("k80", 2), ("k80", 4), ("k80", 8)}
        assert all(c.nodes == max(1, c.devices // 4) for c in job.configurations)
    later, _ = build_request(_sia_table(), cluster, builtin_throughputs(cluster.types), 600.0,
                             policy="sia", goodputs=source)
    assert later.snapshot.jobs[0].configurations == request.snapshot.jobs[0].configurations
    response = solve_request(json_format.Parse(render_request(request), service_pb.SolveRequest()))
    assert response.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    assert all(j.configuration.devices >= 1 for j in response.plan.jobs)


def test_snapshot_with_profile_goodputs(tmp_path: Path) -> None:
    """Sia profile directory: best samples/s per (type, nodes, GPUs) of the job's application;
    rows that do not fit the nodes are dropped; an application without profiles is excluded."""
    app = tmp_path / "cifar10"
    app.mkdir()
    (app / "placements-v100.csv").write_text(
        "placement,local_bsz,step_time,sync_time\n"
        "1,32,0.1,0\n1,64,0.4,0\n"  # 1 GPU: 320 samples/s (64 x 1 / 0.4 = 160 is worse)
        "2,32,0.1,0.02\n"  # 2 GPUs on one node: 64 / 0.1 (step_time includes sync_time)
        "11,32,0.2,0.05\n"  # 2 GPUs on 2 nodes: 64 / 0.2
        "5,32,0.1,0\n"  # 5 GPUs on one 4-GPU node: dropped
    )
    cluster = make_cluster({"v100": 8}, gpus_per_node=4)
    request, report = build_request(_sia_table(), cluster, builtin_throughputs(("v100",)), 100.0,
                                    policy="sia", goodputs=profile_goodputs(tmp_path))
    assert report.excluded == {"no goodput table for the job": 1}  # bert
    assert [j.id for j in request.snapshot.jobs] == ["j0", "j2"]
    rows = [(c.accelerator_type, c.nodes, c.devices, round(c.goodput, 6))
            for c in request.snapshot.jobs[0].configurations]
    assert rows == [("v100", 1, 1, 320.0), ("v100", 1, 2, 640.0), ("v100", 2, 2, 320.0)]
    response = solve_request(request)
    assert response.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    with pytest.raises(ValueError, match="not a directory"):
        profile_goodputs(tmp_path / "missing")


REFERENCE_SIA_PROFILES = Path("/work/shared/reference/traces/sia_profiles")


@pytest.mark.skipif(not REFERENCE_SIA_PROFILES.is_dir(), reason="reference data absent")
def test_snapshot_with_reference_sia_profiles() -> None:
    cluster = make_cluster({"aws": 8, "azure": 16}, gpus_per_node={"aws": 4, "azure": 8})
    request, report = build_request(_sia_table(), cluster, builtin_throughputs(cluster.types),
                                    100.0, policy="sia",
                                    goodputs=profile_goodputs(REFERENCE_SIA_PROFILES))
    assert report.included == 3 and not report.excluded
    types = {c.accelerator_type for j in request.snapshot.jobs for c in j.configurations}
    assert types == {"aws", "azure"}
    assert solve_request(request).stats.termination == service_pb.TERMINATION_REASON_OPTIMAL


def test_cli_snapshot_shockwave_and_sia_then_solve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = gavel_workload(30, seed=3, jobs_per_hour=30)
    write_gavel_trace(workload, tmp_path / "sw.trace", shockwave=True)
    trace = read_gavel_trace(tmp_path / "sw.trace")
    write_shockwave_profiles(shockwave_profiles(trace, seed=1), tmp_path / "p.json")
    out = tmp_path / "shockwave.json"
    argv = ["snapshot", str(tmp_path / "sw.trace"), "--format", "shockwave", "--time", "2000",
            "--cluster", "v100:16", "--policy", "shockwave", "--round-duration", "120",
            "-o", str(out)]
    for profiles in (str(tmp_path / "p.json"), "builtin"):
        assert cli.main([*argv, "--profiles", profiles]) == cli.EXIT_OK
        jobs = json.loads(out.read_text())["snapshot"]["jobs"]
        assert jobs and all(j["epochProfile"]["epochDurationS"] for j in jobs)
        assert cli.main(["solve", str(out)]) == cli.EXIT_OK
    # a profile file missing a job: the job is excluded and counted on stderr
    write_shockwave_profiles(shockwave_profiles(trace, seed=1)[1:], tmp_path / "short.json")
    capsys.readouterr()
    assert cli.main([*argv, "--profiles", str(tmp_path / "short.json")]) == cli.EXIT_OK
    assert "excluded 1: no epoch profile for the job" in capsys.readouterr().err
    # a profile file with mismatched lengths: exit 2 naming the file and the key
    data = json.loads((tmp_path / "p.json").read_text())
    data[0]["bs_every_epoch"] = data[0]["bs_every_epoch"][:-1]
    (tmp_path / "bad.json").write_text(json.dumps(data))
    assert cli.main([*argv, "--profiles", str(tmp_path / "bad.json")]) == cli.EXIT_INVALID_INPUT
    assert "bad.json: column '[0].bs_every_epoch'" in capsys.readouterr().err

    write_sia_workload(_sia_table(), tmp_path / "sia.csv")
    sia_out = tmp_path / "sia.json"
    assert cli.main(["snapshot", str(tmp_path / "sia.csv"), "--format", "sia", "--time", "600",
                     "--cluster", "v100:16,k80:16", "--policy", "sia", "--goodputs", "builtin",
                     "-o", str(sia_out)]) == cli.EXIT_OK
    jobs = json.loads(sia_out.read_text())["snapshot"]["jobs"]
    assert len(jobs) == 4 and all(j["configurations"] for j in jobs)
    assert cli.main(["solve", str(sia_out)]) == cli.EXIT_OK
    assert cli.main(["snapshot", str(tmp_path / "sia.csv"), "--format", "sia", "--time", "600",
                     "--goodputs", str(tmp_path / "nowhere")]) == cli.EXIT_INVALID_INPUT
    assert "not a directory of Sia application profiles" in capsys.readouterr().err


def test_cli_snapshot_pai_group_tags_with_profile_goodputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """PAI with its group_tag table: the workload tag is the job type, so a `bert` job finds
    the bert Sia profile; an untagged job has no goodput table and is excluded (counted)."""
    (tmp_path / "job.csv").write_text("j1,i1,u,Terminated,100,200\nj2,i2,u,Terminated,150,400\n"
                                      "j3,i3,v,Terminated,160,300\n")
    (tmp_path / "task.csv").write_text("j1,worker,1,Terminated,100,200,600,29.3,100,V100\n"
                                       "j2,worker,2,Terminated,150,400,600,29.3,100,V100\n"
                                       "j3,worker,1,Terminated,160,300,600,29.3,100,V100\n")
    (tmp_path / "group.csv").write_text("i2,u,V100,g7,bert\n")
    (tmp_path / "profiles" / "bert").mkdir(parents=True)
    (tmp_path / "profiles" / "bert" / "placements-v100.csv").write_text(
        "placement,local_bsz,step_time,sync_time\n1,8,0.2,0\n2,8,0.25,0.05\n4,8,0.3,0.1\n")
    out = tmp_path / "snap.json"
    argv = ["snapshot", str(tmp_path / "job.csv"), "--format", "pai", "--tasks",
            str(tmp_path / "task.csv"), "--group-tags", str(tmp_path / "group.csv"), "--time",
            "100", "--cluster", "v100:8", "--policy", "sia", "--goodputs",
            str(tmp_path / "profiles"), "-o", str(out)]
    assert cli.main(argv) == cli.EXIT_OK
    assert "excluded 1: no goodput table for the job" in capsys.readouterr().err
    jobs = json.loads(out.read_text())["snapshot"]["jobs"]
    assert [j["id"] for j in jobs] == ["j2"]
    assert [c["devices"] for c in jobs[0]["configurations"]] == [1, 2, 4]
    assert cli.main(["solve", str(out)]) == cli.EXIT_OK


# --------------------------------------------------------------------------- honesty


def _gpu_table(gpus: list[float]) -> JobTable:
    n = len(gpus)
    return JobTable.from_columns([f"j{k}" for k in range(n)], arrival_s=[0.0] * n,
                                 start_s=[0.0] * n, duration_s=[1000.0] * n, gpus=gpus)


def test_every_gpu_change_is_counted_and_exact_keeps_the_counts() -> None:
    table = _gpu_table([0.5, 3.0, 16.0, 8.0, 2.0, 1.0])
    cluster = ClusterSpec.parse("v100:32,p100:32")
    request, report = build_request(table, cluster, builtin_throughputs(), 10.0)
    assert [j.scale_factor or 1 for j in request.snapshot.jobs] == [1, 4, 8, 8, 2, 1]
    assert report.changed == {
        "fractional GPU count raised to 1 (--gpus exact keeps it: excluded)": 1,
        "GPU count rounded up to a power of two (--gpus exact keeps it)": 1,
        "GPU count above 8 capped at 8 (--gpus exact keeps it)": 1,
    }
    assert "changed 1: GPU count above 8 capped at 8" in report.summary()

    exact_table = builtin_throughputs(cluster.types, extra_scale_factors=[3, 16])
    request, report = build_request(table, cluster, exact_table, 10.0, gpus="exact")
    assert [j.scale_factor or 1 for j in request.snapshot.jobs] == [3, 16, 8, 2, 1]
    assert report.changed == {}
    assert report.excluded == {"fractional GPU count (--gpus exact)": 1}


def test_extra_scale_factors_leave_the_builtin_rows_unchanged() -> None:
    base = builtin_throughputs()
    more = builtin_throughputs(extra_scale_factors=[3, 16])
    assert all(more.isolated[key] == row for key, row in base.isolated.items())
    assert more.job_keys(16) and not base.job_keys(16)


def _check_fifo(arrival: np.ndarray, duration: np.ndarray, need: np.ndarray, total: int,
                start: np.ndarray) -> None:
    """First come, first served on `total` devices, checked event by event: starts in arrival
    order, never before arrival, never over capacity, and no job waits while it could start
    (enough devices free and every earlier job started)."""
    order = np.argsort(arrival, kind="stable")
    started = [k for k in order if np.isfinite(start[k])]
    assert started == list(order[: len(started)])  # a prefix of the arrival order
    assert all(start[k] >= arrival[k] for k in started)
    assert all(start[a] <= start[b] for a, b in itertools.pairwise(started))

    def in_use(t: float, before: list[int]) -> int:
        return sum(int(need[j]) for j in before if start[j] <= t < start[j] + duration[j])

    for i, k in enumerate(started):
        assert in_use(start[k], started[:i]) + need[k] <= total
        earliest = max(arrival[k], start[started[i - 1]] if i else -np.inf)
        if start[k] > earliest:  # it waited: devices were short just before it started
            assert in_use(np.nextafter(start[k], -np.inf), started[:i]) + need[k] > total
    if len(started) < len(order):  # the first one left never fits
        blocked = order[len(started)]
        assert need[blocked] > total - sum(
            int(need[j]) for j in started if not np.isfinite(duration[j]))


@given(
    jobs=st.lists(st.tuples(st.integers(0, 50), st.sampled_from([1.0, 5.0, 20.0, np.inf]),
                            st.integers(1, 6)), min_size=1, max_size=14),
    total=st.integers(1, 8),
)
def test_fifo_start_times_are_first_come_first_served(
    jobs: list[tuple[int, float, int]], total: int
) -> None:
    arrival = np.array([float(a) for a, _, _ in jobs])
    duration = np.array([d for _, d, _ in jobs])
    need = np.array([n for _, _, n in jobs])
    _check_fifo(arrival, duration, need, total, fifo_start_times(arrival, duration, need, total))


def test_trace_without_start_times_never_runs_more_than_the_cluster() -> None:
    """Shockwave's format has no start times: the jobs running at t fit the cluster (a FIFO
    replay), every start counted as a guess; `start_times="arrival"` is the old
    over-subscribed view, counted too."""
    workload = gavel_workload(120, seed=4, jobs_per_hour=200)
    table = JobTable.from_columns(workload.id, arrival_s=workload.arrival_s,
                                  duration_s=workload.duration_s, gpus=workload.gpus,
                                  job_type=workload.column("job_type"))
    cluster = ClusterSpec.parse("v100:16")
    request, report = build_request(table, cluster, builtin_throughputs(["v100"]), 1800.0)
    running = [j for j in request.snapshot.jobs if j.progress.steps_done > 0]
    assert 0 < sum(j.scale_factor or 1 for j in running) <= 16
    assert report.pending > 0
    assert report.guessed[FIFO_START] == report.included
    crowded, old = build_request(table, cluster, builtin_throughputs(["v100"]), 1800.0,
                                 start_times="arrival")
    assert sum(j.scale_factor or 1 for j in crowded.snapshot.jobs) > 16
    assert old.guessed[ARRIVAL_START] == old.included and old.pending == 0


def test_cli_snapshot_time_as_a_date(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    origin = 1_585_699_200.0  # 2020-04-01T00:00:00Z
    table = gavel_workload(30, seed=5, jobs_per_hour=40)
    table = JobTable.from_columns(table.id, arrival_s=table.arrival_s, start_s=table.arrival_s,
                                  duration_s=table.duration_s, gpus=table.gpus, origin_s=origin)
    write_helios(table, tmp_path / "log.csv")
    by_seconds, by_date = tmp_path / "a.json", tmp_path / "b.json"
    common = ["snapshot", str(tmp_path / "log.csv"), "--format", "helios", "--cluster", "v100:8"]
    assert cli.main([*common, "--time", "3000", "-o", str(by_seconds)]) == cli.EXIT_OK
    assert cli.main([*common, "--time", "2020-04-01T00:50:00", "-o", str(by_date)]) == 0
    assert by_seconds.read_text() == by_date.read_text()
    assert cli.snapshot_time("2020-04-01T02:50:00+02:00", origin) == 3000.0
    # a trace without timestamps takes seconds only
    write_gavel_trace(gavel_workload(5, seed=1), tmp_path / "g.trace")
    capsys.readouterr()
    assert cli.main(["snapshot", str(tmp_path / "g.trace"), "--format", "gavel", "--time",
                     "2020-04-01", "-o", str(tmp_path / "c.json")]) == cli.EXIT_INVALID_INPUT
    assert "has no timestamps" in capsys.readouterr().err


def test_cli_snapshot_nodes_keep_multi_node_configurations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With one virtual node per type, multi-node configurations cannot fit and are dropped
    (counted); with --nodes TYPE:N:G they are kept."""
    write_sia_workload(_sia_table(), tmp_path / "sia.csv")
    common = ["snapshot", str(tmp_path / "sia.csv"), "--format", "sia", "--time", "600",
              "--policy", "sia", "--goodputs", "builtin"]

    def nodes_used(argv: list[str]) -> set[int]:
        out = tmp_path / "s.json"
        assert cli.main([*argv, "-o", str(out)]) == cli.EXIT_OK
        jobs = json.loads(out.read_text())["snapshot"]["jobs"]
        return {c.get("nodes", 1) for j in jobs for c in j["configurations"]}

    assert nodes_used([*common, "--cluster", "v100:16,k80:16"]) == {1}
    assert nodes_used([*common, "--nodes", "v100:4:4,k80:2:8"]) > {1}
    assert "configurations dropped" not in capsys.readouterr().err
    assert ClusterSpec.parse_nodes("v100:4:4,k80:2:8").count == {"v100": 16, "k80": 16}
    with pytest.raises(ValueError, match="TYPE:NODES:GPUS"):
        ClusterSpec.parse_nodes("v100:4")
