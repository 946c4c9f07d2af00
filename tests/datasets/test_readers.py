"""Trace readers: fixture files written here in each format; round trips; bad input."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from apportion.datasets.errors import TraceFormatError, TraceWarning
from apportion.datasets.gavel_trace import read_gavel_trace, write_gavel_trace
from apportion.datasets.generators import gavel_workload
from apportion.datasets.helios import read_helios, write_helios
from apportion.datasets.openb import read_openb_nodes, read_openb_pods, write_openb_pods
from apportion.datasets.pai import read_pai, write_pai
from apportion.datasets.philly import (
    read_philly_csv,
    read_philly_json,
    write_philly_csv,
    write_philly_json,
)
from apportion.datasets.readers import FORMATS, read_trace
from apportion.datasets.sia import read_sia_profile, read_sia_workload, write_sia_workload
from apportion.datasets.table import JobTable

HELIOS_HEADER = (
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
)


def _wallclock_table(n: int = 40, seed: int = 3) -> JobTable:
    """A generated table with whole-second times, users, tenants and statuses."""
    w = gavel_workload(n, seed=seed, jobs_per_hour=30, num_tenants=3)
    rng = np.random.default_rng(seed)
    queue = np.round(rng.exponential(100, n))
    return JobTable.from_columns(
        [f"j{k}" for k in range(n)],
        arrival_s=w.arrival_s,
        start_s=w.arrival_s + queue,
        duration_s=w.duration_s,
        gpus=w.gpus,
        cpus=w.gpus * 6,
        tenant=w.column("tenant"),
        user=[f"u{k % 4}" for k in range(n)],
        status=rng.choice(["COMPLETED", "FAILED"], n),
        origin_s=1_585_699_200.0,
    )


# --------------------------------------------------------------------------- round trips


def test_helios_round_trip(tmp_path: Path) -> None:
    table = _wallclock_table()
    write_helios(table, tmp_path / "cluster_log.csv")
    back = read_helios(tmp_path / "cluster_log.csv")
    cols = ["id", "arrival_s", "start_s", "duration_s", "gpus", "cpus", "tenant", "user", "status"]
    assert back.diff(table, cols) == []
    assert back.origin_s == table.origin_s
    assert back.report is not None and back.report.rows_kept == len(table)
    assert not back.report.anomalies


def test_helios_small_blocks_same_result(tmp_path: Path) -> None:
    """Block boundaries (chunked reading) do not change the table."""
    table = _wallclock_table(200)
    write_helios(table, tmp_path / "c.csv")
    whole = read_helios(tmp_path / "c.csv")
    pieces = read_helios(tmp_path / "c.csv", block_chars=257)
    assert pieces.diff(whole) == []


def test_philly_csv_round_trip(tmp_path: Path) -> None:
    table = _wallclock_table()
    write_philly_csv(table, tmp_path / "philly.csv")
    back = read_philly_csv(tmp_path / "philly.csv")
    assert back.diff(table, ["arrival_s", "duration_s", "gpus", "tenant"]) == []
    assert list(back.id[:3]) == ["0", "1", "2"]


def test_philly_json_round_trip(tmp_path: Path) -> None:
    table = _wallclock_table()
    write_philly_json(table, tmp_path / "log.json")
    cols = ["id", "arrival_s", "start_s", "duration_s", "gpus", "tenant", "user", "status"]
    assert read_philly_json(tmp_path / "log.json").diff(table, cols) == []


def test_philly_json_attempts(tmp_path: Path) -> None:
    """GPUs from the last attempt, duration summed over attempts, no-attempt jobs dropped
    and counted; JSON lines and gzip are accepted."""
    jobs = [
        {
            "jobid": "a", "vc": "v1", "user": "x", "status": "Pass",
            "submitted_time": "2017-10-01 00:00:00",
            "attempts": [
                {"start_time": "2017-10-01 00:00:10", "end_time": "2017-10-01 00:01:10",
                 "detail": [{"ip": "m1", "gpus": ["gpu0"]}]},
                {"start_time": "2017-10-01 00:02:00", "end_time": "2017-10-01 00:04:00",
                 "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]},
                            {"ip": "m2", "gpus": ["gpu0", "gpu1"]}]},
            ],
        },
        {"jobid": "b", "vc": "v1", "user": "y", "status": "Killed",
         "submitted_time": "2017-10-01 00:00:05", "attempts": []},
    ]
    path = tmp_path / "log.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        fh.write("\n".join(json.dumps(j) for j in jobs) + "\n")
    table = read_philly_json(path)
    assert list(table.id) == ["a"]
    assert table.gpus[0] == 4 and table.duration_s[0] == 180 and table.start_s[0] == 10
    assert table.report is not None and sum(table.report.dropped.values()) == 1


def test_pai_round_trip_and_join(tmp_path: Path) -> None:
    table = _wallclock_table()
    table = JobTable.from_columns(
        table.id, arrival_s=table.arrival_s, start_s=table.arrival_s, duration_s=table.duration_s,
        gpus=np.where(np.arange(len(table)) % 5 == 0, 0.5, table.gpus), cpus=table.cpus,
        memory_gib=np.full(len(table), 29.0), user=table.column("user"),
        tenant=table.column("user"), status=table.column("status"),
        gpu_type=["V100" if k % 2 else "P100" for k in range(len(table))], origin_s=1e6,
    )
    write_pai(table, tmp_path / "job.csv", tmp_path / "task.csv")
    back = read_pai(tmp_path / "job.csv", tmp_path / "task.csv")
    cols = ["id", "arrival_s", "duration_s", "gpus", "cpus", "memory_gib", "user", "status",
            "gpu_type"]
    assert back.diff(table, cols) == []


def test_pai_sums_tasks(tmp_path: Path) -> None:
    (tmp_path / "job.csv").write_text("j1,i1,u,Terminated,100,200\nj2,i2,u,Running,150,\n")
    (tmp_path / "task.csv").write_text(
        "j1,worker,4,Terminated,100,200,600,29.3,50,V100\n"
        "j1,ps,1,Terminated,100,200,800,10,,\n"
        "j1,tb,1,Terminated,100,200,100,2,100,T4\n"
    )
    table = read_pai(tmp_path / "job.csv", tmp_path / "task.csv")
    assert table.gpus[0] == 3.0  # 4 x 50% + 1 x 100%
    assert table.column("gpu_type")[0] == "V100"  # the task with the most GPUs
    assert table.cpus[0] == pytest.approx(24 + 8 + 1)
    assert table.gpus[1] == 0 and np.isnan(table.duration_s[1])
    assert table.report is not None and table.report.anomalies["zero_gpus"].count == 1


def test_pai_group_tags(tmp_path: Path) -> None:
    """The group_tag table joins on inst_id: a GPU type requirement replaces the task's type,
    the workload tag becomes the job type; untagged jobs keep the task table's values."""
    (tmp_path / "job.csv").write_text("j1,i1,u,Terminated,100,200\nj2,i2,u,Terminated,150,400\n"
                                      "j3,i3,v,Terminated,160,300\n")
    (tmp_path / "task.csv").write_text(
        "j1,worker,1,Terminated,100,200,600,29.3,100,V100\n"
        "j2,worker,2,Terminated,150,400,600,29.3,100,T4\n"
        "j3,worker,1,Terminated,160,300,600,29.3,100,P100\n"
    )
    (tmp_path / "group.csv").write_text("i2,u,V100M32,g7,bert\ni1,u,,g7,\ni9,w,T4,g1,ctr\n")
    table = read_pai(tmp_path / "job.csv", tmp_path / "task.csv",
                     group_tag_path=tmp_path / "group.csv")
    assert list(table.column("gpu_type")) == ["V100", "V100M32", "P100"]
    assert list(table.column("job_type")) == ["", "bert", ""]
    assert list(table.column("tenant")) == ["u", "u", "v"]
    plain = read_pai(tmp_path / "job.csv", tmp_path / "task.csv")
    assert list(plain.column("gpu_type")) == ["V100", "T4", "P100"]
    assert read_trace("pai", tmp_path / "job.csv", tasks=tmp_path / "task.csv",
                      group_tags=tmp_path / "group.csv").diff(table) == []
    with pytest.raises(ValueError, match="group_tag table belongs to the pai format"):
        read_trace("helios", tmp_path / "job.csv", group_tags=tmp_path / "group.csv")


def test_openb_round_trip(tmp_path: Path) -> None:
    n = 30
    rng = np.random.default_rng(1)
    arrival = np.sort(rng.integers(0, 10_000, n)).astype(float)
    table = JobTable.from_columns(
        [f"openb-pod-{k:04d}" for k in range(n)], arrival_s=arrival, start_s=arrival + 5,
        duration_s=rng.integers(10, 5000, n).astype(float),
        gpus=rng.choice([0.25, 0.5, 1.0, 2.0, 8.0], n), cpus=rng.choice([4.0, 8.0], n),
        memory_gib=rng.choice([16.0, 32.0], n), gpu_type=rng.choice(["", "V100M16|V100M32"], n),
        status=["Running"] * n,
    )
    write_openb_pods(table, tmp_path / "pods.csv")
    cols = ["id", "arrival_s", "start_s", "duration_s", "gpus", "cpus", "memory_gib", "gpu_type",
            "status"]
    assert read_openb_pods(tmp_path / "pods.csv").diff(table, cols) == []


def test_openb_nodes(tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,96000,786432,8,V100M32\n"
        "n2,96000,786432,8,V100M32\nn3,32000,131072,0,\n"
    )
    cluster = read_openb_nodes(tmp_path / "nodes.csv")
    assert cluster.count == {"P100": 2, "V100M32": 16}
    assert len(cluster.nodes) == 3 and cluster.nodes[0].cpus == 64.0


@pytest.mark.parametrize("shockwave", [False, True])
def test_gavel_trace_round_trip(tmp_path: Path, shockwave: bool) -> None:
    table = gavel_workload(25, seed=4, jobs_per_hour=12, multi_priority=True, slo=True)
    if shockwave:
        table = JobTable.from_columns(
            table.id, arrival_s=table.arrival_s, duration_s=table.duration_s, gpus=table.gpus,
            total_steps=table.total_steps, priority_weight=table.priority_weight,
            slo_factor=table.slo_factor, job_type=table.column("job_type"),
            mode=["gns", "accordion", "static", "gns", "gns"] * 5,
        )
    write_gavel_trace(table, tmp_path / "w.trace", shockwave=shockwave)
    back = read_gavel_trace(tmp_path / "w.trace")
    cols = ["arrival_s", "gpus", "total_steps", "priority_weight", "slo_factor", "job_type"]
    cols += ["duration_s", "mode"] if shockwave else []
    assert back.diff(table, cols) == []
    assert list(back.id[:2]) == ["0", "1"]


def test_gavel_old_7_field_layout(tmp_path: Path) -> None:
    (tmp_path / "vc.trace").write_text(
        "LM (batch size 20)\tcd x && python3 main.py\t--steps\t1\t1000\t0.000000\t1\n"
        "ResNet-50 (batch size 64)\tcd y && python3 main.py\t--num_steps\t1\t500\t12.5\t4\n"
    )
    table = read_gavel_trace(tmp_path / "vc.trace")
    assert list(table.arrival_s) == [0.0, 12.5] and list(table.gpus) == [1.0, 4.0]
    assert list(table.total_steps) == [1000.0, 500.0]


def test_sia_workload_round_trip(tmp_path: Path) -> None:
    table = JobTable.from_columns(
        ["cifar10-0", "bert-1", "imagenet-2"], arrival_s=[0.0, 53.0, 400.5], gpus=[1.0, 4.0, 8.0],
        job_type=["cifar10", "bert", "imagenet"], batch_size=[128.0, 12.0, 3200.0],
    )
    write_sia_workload(table, tmp_path / "workload-1.csv")
    back = read_sia_workload(tmp_path / "workload-1.csv")
    assert back.diff(table, ["id", "arrival_s", "gpus", "job_type", "batch_size"]) == []


def test_sia_profile(tmp_path: Path) -> None:
    (tmp_path / "placements-rtx.csv").write_text(
        "placement,local_bsz,step_time,sync_time\n1,32,0.04,0.0005\n1,64,0.06,0.0005\n"
        "22,64,0.07,0.01\n"
    )
    profile = read_sia_profile(tmp_path / "placements-rtx.csv")
    assert list(profile.gpu_type) == ["rtx"] * 3
    configs = profile.configurations()
    assert [(t, n, g) for t, n, g, _ in configs] == [("rtx", 1, 1), ("rtx", 2, 4)]
    assert configs[0][3] == pytest.approx(64 / 0.06)  # step_time includes sync_time


def test_read_trace_dispatch(tmp_path: Path) -> None:
    table = _wallclock_table(5)
    write_helios(table, tmp_path / "c.csv")
    assert read_trace("helios", tmp_path / "c.csv").diff(read_helios(tmp_path / "c.csv")) == []
    assert "pai" in FORMATS
    with pytest.raises(ValueError, match="unknown trace format"):
        read_trace("nope", tmp_path / "c.csv")


# --------------------------------------------------------------------------- bad input


def _helios_file(tmp_path: Path, rows: list[str], header: str = HELIOS_HEADER) -> Path:
    path = tmp_path / "cluster_log.csv"
    path.write_text(header + "".join(r + "\n" for r in rows))
    return path


GOOD = "1,u,vc1,8,48,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:05,2020-04-01 01:00:05,3600,5"


def test_bad_cell_names_file_line_column(tmp_path: Path) -> None:
    bad = GOOD.replace(",8,48,", ",eight,48,").replace("1,u", "2,u", 1)
    path = _helios_file(tmp_path, [GOOD, bad, GOOD])
    with pytest.raises(TraceFormatError) as info:
        read_helios(path)
    assert info.value.error.line == 3 and info.value.error.column == "gpu_num"
    assert str(path) in str(info.value) and ":3:" in str(info.value)


def test_bad_date_and_ragged_row(tmp_path: Path) -> None:
    bad_date = GOOD.replace("2020-04-01 00:00:00", "2020-13-01 00:00:00")
    with pytest.raises(TraceFormatError, match="submit_time"):
        read_helios(_helios_file(tmp_path, [bad_date]))
    with pytest.raises(TraceFormatError, match=r":2: expected 12 fields, got 11"):
        read_helios(_helios_file(tmp_path, [GOOD.rsplit(",", 1)[0]]))


def test_skip_bad_counts_and_reports(tmp_path: Path) -> None:
    bad1 = GOOD.replace(",8,48,", ",x,48,")
    bad2 = GOOD.replace("3600", "1h")
    path = _helios_file(tmp_path, [GOOD, bad1, GOOD.replace("1,u", "3,u", 1), bad2])
    table = read_helios(path, skip_bad=True)
    report = table.report
    assert report is not None
    assert len(table) == 2 and report.skipped == 2 and report.rows_read == 4
    assert [(e.line, e.column) for e in report.skipped_examples] == [(3, "gpu_num"),
                                                                     (5, "duration")]
    assert "skipped 2 malformed rows" in report.summary()


def test_unknown_column_warns_missing_column_errors(tmp_path: Path) -> None:
    header = HELIOS_HEADER.replace("job_id,", "job_id,jobname,")
    row = GOOD.replace("1,u,", "1,train,u,", 1)
    with pytest.warns(TraceWarning, match="jobname"):
        table = read_helios(_helios_file(tmp_path, [row], header))
    assert len(table) == 1 and table.gpus[0] == 8
    header = HELIOS_HEADER.replace("gpu_num,", "")
    row = GOOD.replace(",8,48,", ",48,")
    with pytest.raises(TraceFormatError, match=r"missing required column.*gpu_num"):
        read_helios(_helios_file(tmp_path, [row], header))


def test_anomalies_reported_not_guessed(tmp_path: Path) -> None:
    zero = GOOD.replace(",8,48,", ",0,2,").replace("1,u", "2,u", 1)
    early = GOOD.replace("2020-04-01 00:00:00", "2020-03-31 23:00:00").replace("1,u", "3,u", 1)
    negative = GOOD.replace(",3600,", ",-5,").replace("1,u", "4,u", 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = read_helios(_helios_file(tmp_path, [GOOD, zero, early, negative]))
    report = table.report
    assert report is not None
    assert {k: (v.count, v.examples[0].line) for k, v in report.anomalies.items()} == {
        "zero_gpus": (1, 3), "arrival_out_of_order": (1, 4), "negative_duration": (1, 5),
    }
    assert len(table) == 4  # kept as read
    assert table.gpus[1] == 0 and table.duration_s[3] == -5


def test_gavel_trace_bad_field(tmp_path: Path) -> None:
    (tmp_path / "t.trace").write_text("LM (batch size 20)\tcmd\t--steps\t1\tmany\t0\t1\n")
    with pytest.raises(TraceFormatError, match=r"t.trace:1: column 'total_steps'"):
        read_gavel_trace(tmp_path / "t.trace")
    (tmp_path / "u.trace").write_text("LM\tcmd\n")
    table = read_gavel_trace(tmp_path / "u.trace", skip_bad=True)
    assert len(table) == 0 and table.report is not None and table.report.skipped == 1


def test_philly_json_bad_record(tmp_path: Path) -> None:
    path = tmp_path / "log.json"
    path.write_text('[\n{"jobid": "a", "attempts": []},\n{"jobid": "b", "submitted_time": '
                    '"yesterday", "attempts": [{"start_time": "None"}]}\n]\n')
    with pytest.raises(TraceFormatError) as info:
        read_philly_json(path)
    assert (info.value.error.line, info.value.error.column) == (2, "submitted_time")
    table = read_philly_json(path, skip_bad=True)
    assert table.report is not None and table.report.skipped == 2 and len(table) == 0
