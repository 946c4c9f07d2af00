"""Workloads from traces, profiles and the generator; clusters from specs and files; and the
errors a user sees for bad input (file, line and field named)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from apportion.datasets.gavel_trace import read_gavel_trace
from apportion.datasets.generators import builtin_throughputs, gavel_workload
from apportion.datasets.philly import read_philly_csv
from apportion.datasets.snapshot import build_request
from apportion.datasets.table import Categorical
from apportion.simulator.cluster import parse_cluster, read_cluster_file
from apportion.simulator.errors import SimulationInputError
from apportion.simulator.workload import (
    first_jobs,
    gavel_duration_s,
    workload_from_profiles,
    workload_from_table,
)

GAVEL_LINES = [
    "ResNet-18 (batch size 32)\tpython3 train.py\tdir\t--num_steps\t1\t1000\t1\t1\t-1\t0",
    "LM (batch size 20)\tpython3 train.py\tdir\t--num_steps\t1\t5000\t2\t1\t-1\t100",
    "ResNet-50 (batch size 64)\tpython3 train.py\tdir\t--num_steps\t1\t800\t4\t1\t-1\t250",
]


def write(tmp: Path, name: str, lines: list[str]) -> Path:
    path = tmp / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_gavel_trace_keeps_its_steps_and_job_types(tmp_path: Path) -> None:
    cluster = parse_cluster("v100:4,p100:4,k80:4")
    table = read_gavel_trace(write(tmp_path, "t.trace", GAVEL_LINES))
    thr = builtin_throughputs(cluster.types)
    w, report = workload_from_table(table, cluster, thr, fmt="gavel")
    assert report.kept == 3 and report.sampled_job_types == 0
    np.testing.assert_array_equal(w.total_steps, [1000, 5000, 800])
    np.testing.assert_array_equal(w.scale_factor, [1, 2, 4])
    np.testing.assert_array_equal(w.arrival_s, [0, 100, 250])
    key = ("LM (batch size 20)", 2)
    assert w.throughput[1].tolist() == [thr.isolated[key][t] for t in cluster.types]
    np.testing.assert_array_equal(w.lines, [1, 2, 3])


def test_drawn_job_types_match_apportion_snapshot() -> None:
    """A trace without job types: the simulator draws the same type per job (same seed) as
    `apportion snapshot`, so a snapshot of the trace and the simulation agree."""
    cluster = parse_cluster("v100:8,p100:8,k80:8")
    thr = builtin_throughputs(cluster.types)
    table = gavel_workload(12, seed=5, table=thr, jobs_per_hour=20.0,
                           scale_probabilities=(0.5, 0.5, 0, 0))
    table = dataclasses.replace(table, job_type=Categorical.constant("", len(table)))
    w, report = workload_from_table(table, cluster, thr, seed=3)
    request, _ = build_request(table, cluster, thr, time_s=float(table.arrival_s.max()),
                               seed=3)
    by_id = {job.id: dict(job.throughput) for job in request.snapshot.jobs}
    assert report.sampled_job_types == 12
    for i, job_id in enumerate(w.ids):
        if job_id in by_id:
            assert by_id[job_id] == {t: w.throughput[i, j] for j, t in enumerate(cluster.types)
                                     if w.throughput[i, j] > 0}


def test_a_job_larger_than_the_cluster_names_file_line_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, "philly.csv", [
        "timestamp,duration,num_gpus,gpu_time,cluster",
        "2017-10-01 00:00:00,100,1,100,vc1",
        "2017-10-01 00:01:00,100,8,800,vc1",
    ])
    cluster = parse_cluster("v100:4")
    with pytest.raises(SimulationInputError) as info:
        workload_from_table(read_philly_csv(path), cluster, builtin_throughputs(cluster.types),
                            fmt="philly-csv", path=str(path))
    message = str(info.value)
    assert f"{path}:3" in message and "'num_gpus'" in message and "8 devices" in message


def test_unusable_rows_are_excluded_and_counted(tmp_path: Path) -> None:
    path = write(tmp_path, "philly.csv", [
        "timestamp,duration,num_gpus,gpu_time,cluster",
        "2017-10-01 00:00:00,100,1,100,vc1",
        "2017-10-01 00:01:00,100,0,0,vc1",
        "2017-10-01 00:02:00,,2,,vc2",
    ])
    cluster = parse_cluster("v100:4")
    w, report = workload_from_table(read_philly_csv(path), cluster,
                                    builtin_throughputs(cluster.types), fmt="philly-csv")
    assert w.num_jobs == 2
    assert report.excluded == {"zero, negative or unknown GPU count": 1}
    assert report.drawn_durations == 1  # the unknown duration is drawn, seeded per job
    assert "1 durations drawn" in report.summary()


def test_empty_and_unusable_traces_are_errors(tmp_path: Path) -> None:
    cluster = parse_cluster("v100:4")
    thr = builtin_throughputs(cluster.types)
    empty = write(tmp_path, "empty.csv", ["timestamp,duration,num_gpus,gpu_time,cluster"])
    with pytest.raises(SimulationInputError, match="has no jobs"):
        workload_from_table(read_philly_csv(empty), cluster, thr, path=str(empty))
    zero = write(tmp_path, "zero.csv", ["timestamp,duration,num_gpus,gpu_time,cluster",
                                        "2017-10-01 00:00:00,100,0,0,vc1"])
    with pytest.raises(SimulationInputError, match="no job can be simulated"):
        workload_from_table(read_philly_csv(zero), cluster, thr, path=str(zero))


def test_profiles_as_the_workload() -> None:
    from apportion.datasets.generators import shockwave_profiles

    table = gavel_workload(5, seed=2, jobs_per_hour=10.0, scale_probabilities=(0.6, 0.4, 0, 0))
    profiles = shockwave_profiles(table, seed=1)
    w = workload_from_profiles(profiles, parse_cluster("gpu:4"))
    np.testing.assert_allclose(w.total_steps, [p.total_duration_s for p in profiles])
    np.testing.assert_allclose(w.standalone_s, w.total_steps)
    with pytest.raises(SimulationInputError, match="devices"):
        workload_from_profiles(profiles, parse_cluster("gpu:1"))


def test_loads_and_first_jobs() -> None:
    cluster = parse_cluster("v100:4")
    thr = builtin_throughputs(cluster.types)
    table = gavel_workload(6, seed=1, table=thr, jobs_per_hour=6.0,
                           scale_probabilities=(1.0, 0, 0, 0))
    w, _ = workload_from_table(table, cluster, thr)
    double = w.with_load(2.0)
    np.testing.assert_allclose(double.arrival_s - w.arrival_s[0],
                               (w.arrival_s - w.arrival_s[0]) / 2.0)
    assert first_jobs(w, 3).ids == w.ids[:3]
    with pytest.raises(SimulationInputError):
        w.with_load(0.0)


def test_gavel_durations_follow_the_two_ranges() -> None:
    rng = np.random.default_rng(0)
    draws = np.array([gavel_duration_s(rng) for _ in range(4000)])
    assert draws.min() >= 60 * 10**1.5 and draws.max() <= 60 * 10**4
    assert np.mean(draws >= 60 * 10**3) == pytest.approx(0.2, abs=0.03)


def test_cluster_specs_and_files(tmp_path: Path) -> None:
    spec = parse_cluster("v100:8:4,k80:3", gpus_per_node=2)
    assert spec.count == {"v100": 8, "k80": 3}
    assert [n.devices for n in spec.nodes] == [4, 4, 2, 1]
    assert not parse_cluster("v100:36,p100:36,k80:36").nodes
    for bad, message in (("v100", "TYPE:COUNT"), ("v100:x", "COUNT"), ("a:1,a:2", "twice"),
                         ("v100:4:0", "GPUS_PER_NODE")):
        with pytest.raises(SimulationInputError, match=message):
            parse_cluster(bad)
    good = tmp_path / "cluster.json"
    node = {"name": "n0", "acceleratorType": "a100", "devices": 4}
    good.write_text(json.dumps({"acceleratorTypes": [{"name": "a100", "count": 4}],
                                "nodes": [node]}))
    assert read_cluster_file(good).count == {"a100": 4}
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"acceleratorTypes": [{"name": "a100", "count": 5}],
                                 "nodes": [node]}))
    with pytest.raises(SimulationInputError, match=r"acceleratorTypes\[0\].count"):
        read_cluster_file(wrong)
    with pytest.raises(SimulationInputError, match="cannot read"):
        read_cluster_file(tmp_path / "missing.json")
