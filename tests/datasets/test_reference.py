"""Readers on the real reference samples (T3, docs/datasets.md); skipped when ../shared/reference is
absent. Nothing here is copied into the repository: the files are read in place."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from apportion.datasets.cluster import ClusterSpec
from apportion.datasets.gavel_trace import read_gavel_trace
from apportion.datasets.openb import read_openb_nodes, read_openb_pods
from apportion.datasets.philly import read_philly_csv
from apportion.datasets.shockwave import read_shockwave_profiles
from apportion.datasets.sia import read_sia_app_profiles, read_sia_profile, read_sia_workload
from apportion.datasets.snapshot import build_request
from apportion.datasets.throughput import read_gavel_throughputs
from apportion.server.pipeline import solve_request

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "reference"
pytestmark = pytest.mark.skipif(not REFERENCE.is_dir(), reason="shared/reference not present")


def test_philly_csv_counts() -> None:
    table = read_philly_csv(REFERENCE / "traces/philly/sia_philly_jobs.csv")
    # the trace's description says 82,248 rows; the file has 82,247 data rows plus a trailing blank
    # line
    assert len(table) == 82_247
    gpus = Counter(table.gpus.astype(int).tolist())
    expected = {1: 76_627, 2: 1_818, 4: 1_870, 8: 1_643, 16: 199, 32: 67, 64: 6, 128: 3}
    assert {g: gpus[g] for g in expected} == expected
    assert set(gpus) - set(expected) <= {12, 24}
    assert len(set(table.column("tenant"))) == 15
    assert float(np.median(table.duration_s)) == pytest.approx(1_144, rel=0.01)


def test_openb_counts() -> None:
    base = REFERENCE / "traces/alibaba_gpu_v2023_openb"
    pods = read_openb_pods(base / "openb_pod_list_default.csv")
    assert len(pods) == 8_152
    assert pods.report is not None and pods.report.anomalies["zero_gpus"].count == 1_088
    whole = np.isclose(pods.gpus, np.round(pods.gpus)) & (pods.gpus > 1)
    assert int(whole.sum()) == 75  # the 2/4/8-GPU pods
    nodes = read_openb_nodes(base / "openb_node_list_gpu_node.csv")
    assert len(nodes.nodes) == 1_213
    assert nodes.count == {
        "P100": 265, "G3": 312, "V100M32": 204, "V100M16": 195, "G2": 4_392, "T4": 842, "A10": 2
    }


def test_gavel_traces() -> None:
    msr = sorted((REFERENCE / "gavel/traces/msr_seed0").glob("*.trace"))
    assert len(msr) == 15
    assert sum(len(read_gavel_trace(p)) for p in msr) == 15_264
    expected = {"artifact_evaluation": 15, "debug": 14, "debug_v2": 14, "highmem_test": 8,
                "max_min_fairness": 96, "medium_test": 20, "minimize_makespan": 100,
                "small_test": 20}
    for name, rows in expected.items():
        assert len(read_gavel_trace(REFERENCE / f"gavel/traces/physical_cluster/{name}.trace")) \
            == rows


def test_shockwave_traces_and_profiles() -> None:
    t120 = read_gavel_trace(REFERENCE / "shockwave/trace_120jobs_32gpus.trace")
    assert t120.source == "shockwave" and len(t120) == 120
    assert Counter(t120.gpus.astype(int).tolist()) == {1: 92, 2: 20, 4: 8}
    assert Counter(t120.column("mode").tolist()) == {"accordion": 59, "gns": 57, "static": 4}
    assert t120.arrival_s.min() == 0 and t120.arrival_s.max() == 5_011
    t220 = read_gavel_trace(REFERENCE / "shockwave/trace_220jobs_64gpus.trace")
    assert Counter(t220.gpus.astype(int).tolist()) == {1: 160, 2: 49, 4: 9, 8: 2}
    profiles = read_shockwave_profiles(REFERENCE / "shockwave/profiles_120jobs.json.gz")
    assert len(profiles) == 120 and sum(p.num_epochs for p in profiles) == 124_938


def test_throughput_tables() -> None:
    sim = read_gavel_throughputs(REFERENCE / "gavel/simulation_throughputs.json")
    assert len([k for k in sim.isolated if "v100" in sim.isolated[k]]) == 83
    assert len([k for k in sim.isolated if "k80_unconsolidated" in sim.isolated[k]]) == 77
    assert sim.isolated[("ResNet-50 (batch size 128)", 2)]["k80"] == 0  # out of memory
    tacc = read_gavel_throughputs(REFERENCE / "shockwave/tacc_throughputs.json.gz", pairs=False)
    assert set(tacc.types) == set(sim.types)


def test_sia_workloads_and_profiles() -> None:
    for k in range(1, 9):
        path = REFERENCE / f"pollux/osdi21_workloads/workload-{k}.csv"
        assert len(read_sia_workload(path)) == 160
    scale = read_sia_workload(REFERENCE / "sia/workloads_scale/scale_2x_workload-1.csv")
    assert len(scale) == 320
    seed = read_sia_profile(REFERENCE / "sia/seed_1gpu_profiles/cifar10.csv")
    assert "dgx" in set(seed.gpu_type.tolist())
    app = read_sia_app_profiles(REFERENCE / "traces/sia_profiles/cifar10")
    assert {"aws", "azure", "dgx", "dgx-ext", "quad", "rtx"} <= set(app.gpu_type.tolist())
    assert all(rate > 0 for *_, rate in app.configurations())


def test_shockwave_snapshot_with_gavel_table_solves() -> None:
    trace = read_gavel_trace(REFERENCE / "shockwave/trace_120jobs_32gpus.trace")
    table = read_gavel_throughputs(REFERENCE / "gavel/simulation_throughputs.json", pairs=False)
    request, report = build_request(trace, ClusterSpec.parse("v100:32"), table, 2_000.0)
    assert report.included == report.active > 0
    assert report.sampled_job_types == 0  # every Shockwave job type is a key of the table
    response = solve_request(request)
    assert len(response.plan.jobs) == report.included
