"""Sweeps: the same grid run in this process, in worker processes and on Ray (local mode)
gives the same tables in the same order; the aggregate over seeds is the mean with a
Student-t 95% half-width; `--server` against a real `apportion serve` gives the same run as
solving in this process (co-location groups included)."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from apportion.datasets.generators import builtin_throughputs, gavel_workload
from apportion.simulator.cluster import parse_cluster
from apportion.simulator.engine import SimulationConfig
from apportion.simulator.metrics import RunResult
from apportion.simulator.sweep import Task, aggregate, grid, run_tasks
from apportion.simulator.workload import Workload, workload_from_table
from tests.simulator.tiny import run

CLUSTER = parse_cluster("v100:2:2,k80:2:2")


def build(seed: int, load: float | None) -> Workload:
    thr = builtin_throughputs(CLUSTER.types)
    table = gavel_workload(5, seed=seed, table=thr, jobs_per_hour=load or 10.0,
                           scale_probabilities=(0.6, 0.4, 0, 0))
    return workload_from_table(table, CLUSTER, thr, seed=seed)[0]


def tasks() -> list[Task]:
    labels = [(name, SimulationConfig(policy=name, round_s=600.0))
              for name in ("max_min_fairness_perf", "finish_time_fairness_perf")]
    return grid(labels, [0, 1], [10.0], build, CLUSTER)


@pytest.fixture(scope="module")
def in_process() -> list[RunResult]:
    return run_tasks(tasks(), workers=1)


def same_results(a: list[RunResult], b: list[RunResult]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert (x.run["label"], x.run["seed"], x.run["load"]) == (
            y.run["label"], y.run["seed"], y.run["load"])
        for table in ("jobs", "rounds", "grants"):
            tx, ty = getattr(x, table), getattr(y, table)
            for name in tx:
                if name in ("solve_wall_s", "solver_s"):
                    continue
                np.testing.assert_array_equal(tx[name], ty[name], err_msg=f"{table}.{name}")


def test_processes_give_the_in_process_results(in_process: list[RunResult]) -> None:
    assert len(in_process) == 4
    same_results(in_process, run_tasks(tasks(), workers=2))


@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="Ray is not installed (optional extra apportion[ray])")
def test_ray_local_gives_the_process_results(in_process: list[RunResult]) -> None:
    same_results(in_process, run_tasks(tasks(), ray_address="local"))


def test_aggregate_is_the_mean_with_a_student_t_half_width(in_process: list[RunResult]) -> None:
    table = aggregate(in_process)
    assert table["seeds"].tolist() == [2, 2]
    for k, (label, load) in enumerate(zip(table["label"], table["load"], strict=True)):
        values = np.array([r.summary["avg_jct_s"] for r in in_process
                           if r.run["label"] == label and r.run["load"] == load])
        assert table["avg_jct_s"][k] == pytest.approx(values.mean())
        # t(0.975, 1) = 12.706: half-width = 12.706 * s / sqrt(2)
        half = 12.706204736 * values.std(ddof=1) / math.sqrt(2)
        assert table["avg_jct_s_ci95"][k] == pytest.approx(half, rel=1e-6)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """A real `apportion serve` on an ephemeral port of 127.0.0.1."""
    process = subprocess.Popen(
        [sys.executable, "-m", "apportion.server.cli", "serve", "--host", "127.0.0.1",
         "--port", "0", "--workers", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + 120
    line = ""
    while time.monotonic() < deadline and not line:
        if selector.select(timeout=0.5):
            line = process.stdout.readline()
        elif process.poll() is not None:
            break
    selector.close()
    try:
        assert "listening on" in line, f"server did not start: {line!r}"
        yield line.strip().rsplit(" ", 1)[-1]
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.mark.parametrize(
    "policy", ["max_min_fairness_perf", "finish_time_fairness_perf", "allox", "sia",
               "gandiva_fair", "themis_auction", "astraea"]
)
def test_server_gives_the_in_process_run(server: str, policy: str) -> None:
    w = build(0, 10.0)
    w = dataclasses.replace(w, total_steps=w.total_steps / 50.0)  # a few dozen rounds
    if policy == "allox":
        w = w.take(np.flatnonzero(w.scale_factor == 1))
    local = run(w, CLUSTER, policy=policy, round_s=600.0)
    remote = run(w, CLUSTER, policy=policy, round_s=600.0, server=server)
    assert remote.run["server"] == server
    same_results([local], [remote])
    assert local.summary["solves"] == remote.summary["solves"] > 0


def test_server_gives_the_in_process_run_for_a_planning_window(server: str) -> None:
    from apportion.simulator.cluster import single_type
    from apportion.solver.parameters import ShockwaveParameters
    from tests.simulator.tiny import epoch_workload

    w = epoch_workload([("a", 0.0, 1, [100.0, 80.0, 60.0]), ("b", 0.0, 2, [90.0, 90.0]),
                        ("c", 150.0, 1, [200.0]), ("d", 300.0, 2, [50.0, 50.0, 50.0])])
    params = ShockwaveParameters(planning_rounds=4)
    local = run(w, single_type(4), policy="shockwave", parameters=params, round_s=60.0)
    remote = run(w, single_type(4), policy="shockwave", parameters=params, round_s=60.0,
                 server=server)
    same_results([local], [remote])
    assert local.summary["solves"] == remote.summary["solves"] > 1


@pytest.mark.parametrize("policy", ["iadeep", "muri"])
def test_server_gives_the_in_process_run_for_groups(server: str, policy: str) -> None:
    from apportion.simulator.cluster import single_type
    from tests.simulator.test_groups import paired_workload, staged_workload

    w = paired_workload() if policy == "iadeep" else staged_workload()
    local = run(w, single_type(2), policy=policy, round_s=100.0)
    remote = run(w, single_type(2), policy=policy, round_s=100.0, server=server)
    same_results([local], [remote])
    assert (local.grants["slowdown"] != 1.0).any()


def test_server_gives_the_in_process_run_for_synergy(server: str) -> None:
    """The service receives the nodes' cores and memory and each job's profile."""
    from apportion.simulator.cluster import parse_cluster
    from tests.simulator.test_synergy import profiled_workload

    w = profiled_workload()
    spec = parse_cluster("gpu:8:4")
    local = run(w, spec, policy="synergy", round_s=100.0)
    remote = run(w, spec, policy="synergy", round_s=100.0, server=server)
    same_results([local], [remote])
    assert local.summary["solves"] == remote.summary["solves"] > 0
    assert (local.grants["slowdown"] < 1.0).any()
