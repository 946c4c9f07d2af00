"""The event loop on tiny workloads.

* Every plan kind (time shares, markets, queues, configurations, planning windows) through
  the loop: invariants checked from the run's tables only (`tiny.check_invariants`: no job
  before its arrival or after its finish, no round above a type's or node's devices, work
  done = each job's total).
* A job alone finishes in its standalone time under every policy.
* Hand-computed runs: JCTs on two types with a move and a restart overhead; the metrics of
  a two-job FIFO run (arrival between round boundaries, an epoch crossing a boundary); idle
  gaps; finish-time fairness's C_i carried between solves = the integral of progress / iso_i
  (A2.5 test 9); the static equal split; min makespan's closed form; max-sum-throughput's
  knapsack; a multi-GPU job that a 1-GPU policy cannot serve stalls and is reported.
* Seeded noise and estimation error give identical tables for one seed.
* The round check refuses a round above the cluster.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from apportion.simulator.cluster import parse_cluster, single_type
from apportion.simulator.drivers import Grant
from apportion.simulator.engine import check_grants
from apportion.simulator.errors import SimulationError, SimulationInputError
from apportion.simulator.fidelity import Fidelity
from apportion.simulator.problems import model_cluster
from apportion.solver.capabilities import PlanKind
from apportion.solver.parameters import ShockwaveParameters
from tests.simulator.tiny import check_invariants, epoch_workload, mixed_jobs, run, workload

TWO_TYPES = parse_cluster("fast:4:2,slow:4:2")
"""Two types of 4 devices on 2-device nodes."""


TIME_SHARE_POLICIES = [
    "max_min_fairness_perf",
    "max_min_fairness",
    "finish_time_fairness_perf",
    "isolated",
    "min_makespan",
    "max_sum_throughput",
    "fifo",
    "fifo_perf",
    "gandiva",
    "fisher_market",
    "hierarchical_max_min_fairness",
    "cost_normalized_throughput",
    "themis_auction",
    "gandiva_fair",
    "gandiva_fair_equal_split",
    "astraea",
    "tiresias",
]


@pytest.mark.parametrize("policy", TIME_SHARE_POLICIES)
def test_time_share_and_market_plans_keep_the_invariants(policy: str) -> None:
    w = workload(mixed_jobs())
    result = run(w, TWO_TYPES, policy=policy, round_s=100.0)
    check_invariants(result, w, TWO_TYPES, 100.0)
    assert np.all(result.jobs["jct_s"] >= result.jobs["standalone_s"] - 1e-9)


def test_a_plan_with_rounds_of_its_own_is_followed() -> None:
    """Gandiva_fair plans its own rounds (stride quanta): the simulation runs exactly them
    while the job set stays the same, and solves again when they run out."""
    from apportion.simulator.problems import ProblemContext, build_problem, model_cluster
    from apportion.simulator.state import JobState
    from apportion.solver.model import PolicyRequest, SolveOptions
    from apportion.solver.parameters import GandivaFairParameters
    from apportion.solver.registry import lookup
    from apportion.solver.solve import solve

    jobs = [(f"j{k}", 0.0, 1 + k % 2, 5000.0, [2.0, 1.0]) for k in range(7)]
    w = workload(jobs)
    params = GandivaFairParameters(quanta=4)
    result = run(w, TWO_TYPES, policy="gandiva_fair", parameters=params, round_s=100.0)
    spec = lookup("gandiva_fair")
    context = ProblemContext(w, model_cluster(TWO_TYPES), spec.capabilities, 100.0,
                             w.throughput, np.ones_like(w.throughput))
    first = build_problem(context, JobState.start(w), np.arange(w.num_jobs), 0.0)
    plan = solve(first, PolicyRequest(spec.name, params), SolveOptions())
    assert len(plan.shares.rounds) == 4
    for r, scheduled in enumerate(plan.shares.rounds):
        planned = sorted((g.job, g.type_index) for g in scheduled.grants)
        ran = sorted(zip(result.grants["job"][result.grants["round"] == r].tolist(),
                         result.grants["type"][result.grants["round"] == r].tolist(),
                         strict=True))
        assert ran == planned, r
    assert result.rounds["solves"][:5].tolist() == [1, 0, 0, 0, 1]
    check_invariants(result, w, TWO_TYPES, 100.0)


def test_queue_plans_run_without_preemption() -> None:
    """allox on 1-GPU jobs: invariants, and each job runs in consecutive rounds on one type
    from its start to its finish (no preemption, no migration)."""
    jobs = [(j, a, 1, t, thr) for j, a, _, t, thr in mixed_jobs()]
    w = workload(jobs)
    result = run(w, TWO_TYPES, policy="allox", round_s=100.0)
    check_invariants(result, w, TWO_TYPES, 100.0)
    g = result.grants
    for i in range(w.num_jobs):
        rounds = g["round"][g["job"] == i]
        types = g["type"][g["job"] == i]
        assert np.array_equal(rounds, np.arange(rounds.min(), rounds.max() + 1))
        assert np.unique(types).size == 1
    assert result.jobs["restarts"].sum() == 0


@pytest.mark.parametrize("policy", ["sia", "pollux"])
def test_configuration_plans_keep_the_invariants(policy: str) -> None:
    """Configurations only at each job's gang (so the work check applies)."""
    jobs = mixed_jobs()
    configs = [[(t, 1, s, float(thr[t])) for t in range(2)] for _, _, s, _, thr in jobs]
    w = workload(jobs, configurations=configs)
    result = run(w, TWO_TYPES, policy=policy, round_s=100.0)
    check_invariants(result, w, TWO_TYPES, 100.0)


def tiny_epochs() -> list[tuple[str, float, int, list[float]]]:
    return [
        (f"job{k}", [0.0, 40.0, 130.0, 250.0, 300.0, 560.0][k], [1, 2, 1, 4, 1, 2][k],
         [40.0 + 20.0 * ((k + e) % 6) for e in range(3 + k % 6)])
        for k in range(6)
    ]


@pytest.mark.parametrize(
    "policy", ["shockwave", "max_min_fairness", "finish_time_fairness_perf", "isolated",
               "min_makespan", "max_sum_throughput"]
)
def test_planning_window_and_anchor_policies_on_epoch_jobs(policy: str) -> None:
    """The Shockwave table's policies on 6 epoch-profile jobs, 4 GPUs, 120 s rounds."""
    w = epoch_workload(tiny_epochs())
    cluster = single_type(4)
    params = ShockwaveParameters(planning_rounds=4) if policy == "shockwave" else None
    result = run(w, cluster, policy=policy, parameters=params, round_s=120.0)
    check_invariants(result, w, cluster, 120.0)
    runs = np.bincount(result.grants["job"], minlength=w.num_jobs)
    assert np.all(runs >= np.ceil(w.total_steps / 120.0 - 1e-9))
    if policy == "shockwave":
        assert result.summary["solves"] >= 1


ALONE_POLICIES = [*TIME_SHARE_POLICIES, "allox", "sia", "pollux", "shockwave"]


@pytest.mark.parametrize("policy", ALONE_POLICIES)
def test_a_job_alone_finishes_in_its_standalone_time(policy: str) -> None:
    """One 2-GPU job arriving at 30 s: JCT = total / speed, with the rounds starting at its
    arrival; on one type for every policy."""
    cluster = single_type(4)
    w = workload([("a", 30.0, 2, 280.0, [1.0])], epochs=[[50.0, 100.0, 130.0]],
                 configurations=[[(0, 1, 2, 1.0)]])
    if policy == "allox":
        w = workload([("a", 30.0, 1, 280.0, [1.0])])
    result = run(w, cluster, policy=policy, round_s=120.0)
    assert result.jobs["finish_s"][0] == pytest.approx(30.0 + 280.0)
    assert result.jobs["jct_s"][0] == pytest.approx(result.jobs["standalone_s"][0])
    assert result.summary["rounds"] == 3
    assert result.summary["worst_rho"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "policy", ["max_min_fairness_perf", "finish_time_fairness_perf", "isolated", "fifo_perf",
               "min_makespan", "max_sum_throughput", "fisher_market"]
)
def test_a_job_alone_takes_its_fastest_type(policy: str) -> None:
    w = workload([("a", 0.0, 2, 900.0, [1.0, 3.0])])
    result = run(w, TWO_TYPES, policy=policy, round_s=100.0)
    assert result.jobs["jct_s"][0] == pytest.approx(300.0)
    assert set(result.grants["type"].tolist()) == {1}


def test_hand_computed_jcts_with_a_move() -> None:
    """fast:1, slow:1, Delta = 100 s, fifo_perf. A (600 steps; 2/s fast, 1/s slow) and B
    (500; 3/s fast, 1/s slow) arrive at 0. The queue head A takes the fastest type, B the
    free one: A finishes on fast at 300. Round 3 (t = 300): B alone moves to fast with 200
    steps left: finishes at 300 + 200 / 3."""
    cluster = parse_cluster("fast:1,slow:1")
    w = workload([("A", 0.0, 1, 600.0, [2.0, 1.0]), ("B", 0.0, 1, 500.0, [3.0, 1.0])])
    result = run(w, cluster, policy="fifo_perf", round_s=100.0)
    np.testing.assert_allclose(result.jobs["finish_s"], [300.0, 300.0 + 200.0 / 3.0])
    assert result.jobs["restarts"].tolist() == [0, 1]
    check_invariants(result, w, cluster, 100.0)
    # devices are busy only until a job finishes: round 3 uses fast for 200/3 s
    np.testing.assert_allclose(result.rounds["utilization_fast"], [1, 1, 1, 2 / 3])
    np.testing.assert_allclose(result.rounds["utilization_slow"], [1, 1, 1, 0])
    np.testing.assert_allclose(result.rounds["utilization"], [1, 1, 1, 1 / 3])
    busy = 600.0 + 200.0 / 3.0
    assert result.summary["utilization"] == pytest.approx(busy / (2 * (300.0 + 200.0 / 3.0)))


def test_hand_computed_jcts_with_restart_overhead() -> None:
    """The same with 10 s lost per (re)start on new devices. A: 180 + 200 + 200 by 300, 20
    left = 10 s: finishes at 310. B on slow: 90 + 100 + 100 + 100 = 390 by 400 (A still
    active at 300, so nothing is re-solved); at 400 B moves: 10 s lost, 110 steps at 3/s."""
    cluster = parse_cluster("fast:1,slow:1")
    w = workload([("A", 0.0, 1, 600.0, [2.0, 1.0]), ("B", 0.0, 1, 500.0, [3.0, 1.0])])
    result = run(w, cluster, policy="fifo_perf", round_s=100.0,
                 fidelity=Fidelity(restart_overhead_s=10.0))
    np.testing.assert_allclose(result.jobs["finish_s"], [310.0, 400.0 + 10.0 + 110.0 / 3.0])
    # GPU-hours include the time lost restarting: A 310 s, B 400 + 10 + 36.67 s
    np.testing.assert_allclose(result.jobs["gpu_hours"] * 3600.0, [310.0, 410.0 + 110.0 / 3.0])


def test_metrics_by_hand() -> None:
    """One GPU, Delta = 100 s, fifo_perf. A (epochs 150 + 50 s) arrives at 0, B (100 s) at
    50 s. Round 0: A runs 100 s. Round 1: A (the older) runs 50 + 50 s, finishing at 200.
    Round 2: B finishes at 300. JCT 200 and 250 (mean 225), makespan 300; static rho =
    JCT / (T_excl max(1, 2/1)): 0.5 and 1.25; Themis-style: A active in rounds with 1 and 2
    jobs (mean 1.5): 200 / 300; B in rounds with 2 and 1: 250 / 150. Utilization 300/300."""
    w = epoch_workload([("A", 0.0, 1, [150.0, 50.0]), ("B", 50.0, 1, [100.0])])
    result = run(w, single_type(1), policy="fifo_perf", round_s=100.0)
    assert list(zip(result.grants["round"], result.grants["job"], strict=True)) == [
        (0, 0), (1, 0), (2, 1)]
    np.testing.assert_allclose(result.jobs["finish_s"], [200.0, 300.0])
    s = result.summary
    assert s["makespan_s"] == pytest.approx(300.0)
    assert s["avg_jct_s"] == pytest.approx(225.0)
    np.testing.assert_allclose(result.jobs["rho"], [0.5, 1.25])
    assert s["worst_rho"] == pytest.approx(1.25)
    assert s["mean_rho"] == pytest.approx(0.875)
    assert s["frac_rho_gt1"] == pytest.approx(0.5)
    np.testing.assert_allclose(result.jobs["rho_themis"], [200.0 / 300.0, 250.0 / 150.0])
    assert s["utilization"] == pytest.approx(1.0)
    assert s["p50_jct_s"] == pytest.approx(225.0)
    assert s["p99_jct_s"] == pytest.approx(250.0)
    assert s["geo_mean_jct_s"] == pytest.approx(math.sqrt(200.0 * 250.0))
    np.testing.assert_allclose(result.rounds["utilization"], [1.0, 1.0, 1.0])


def test_idle_gap_between_arrivals_is_skipped() -> None:
    w = epoch_workload([("A", 0.0, 1, [100.0]), ("B", 1000.0, 1, [100.0])])
    result = run(w, single_type(1), policy="fifo_perf", round_s=100.0)
    np.testing.assert_allclose(result.jobs["finish_s"], [100.0, 1100.0])
    assert result.summary["rounds"] == 2
    assert result.summary["utilization"] == pytest.approx(200.0 / 1100.0)


def test_ftf_isolated_time_is_the_integral_of_progress_over_iso() -> None:
    """A2.5 test 9 through the loop. 2 GPUs, Delta = 100 s, gangs 1/1/2/1 arriving over three
    rounds, speed 1. Each solve sends back the previous response's C_i, iso_i, R_i; the C_i of
    the last solve that included job i (kept in the run's state) must equal the sum over the
    rounds before that solve of progress / iso_i, iso_i = min(1, G / (m s_i)) for the m
    active jobs of the round."""
    from apportion.simulator.engine import SimulationConfig, simulate

    w = epoch_workload([
        ("a", 0.0, 1, [150.0, 250.0]),
        ("b", 0.0, 1, [90.0]),
        ("c", 120.0, 2, [130.0, 70.0]),
        ("d", 250.0, 1, [300.0]),
    ])
    gpus, delta = 2, 100.0
    outcome = simulate(w, single_type(gpus), SimulationConfig(
        policy="themis_finish_time_fairness", round_s=delta))
    log = outcome.log
    assert np.all(np.isfinite(outcome.state.finish_s))
    granted: dict[int, list[int]] = {}
    for r, i in zip(log.grant_round, log.grant_job, strict=True):
        granted.setdefault(r, []).append(i)
    remaining = w.total_steps.copy()
    integral = np.zeros(w.num_jobs)
    at_last_call = np.zeros(w.num_jobs)
    for r, start, solves in zip(log.index, log.start_s, log.solves, strict=True):
        active = [i for i in range(w.num_jobs)
                  if w.arrival_s[i] <= start and outcome.state.finish_s[i] > start]
        if solves:
            for i in active:
                at_last_call[i] = integral[i]
        for i in granted.get(r, []):
            progress = min(delta, remaining[i])
            remaining[i] -= progress
            iso = min(1.0, gpus / (len(active) * w.scale_factor[i]))
            integral[i] += progress / iso
    np.testing.assert_allclose(outcome.state.isolated_time_s, at_last_call, rtol=1e-9, atol=1e-9)
    assert (outcome.state.isolated_time_s > 0).any()


def test_equal_split_alternates_identical_jobs() -> None:
    """Static equal split (`isolated`) on 1 GPU: three identical 400 s jobs get X = 1/3; while
    all are active their run counts never differ by more than one round."""
    w = epoch_workload([(k, 0.0, 1, [400.0]) for k in "abc"])
    result = run(w, single_type(1), policy="isolated", round_s=100.0)
    runs = np.zeros(3)
    for i in result.grants["job"]:
        runs[i] += 1
        if runs.max() < 4:
            assert runs.max() - runs.min() <= 1
    np.testing.assert_allclose(np.sort(result.jobs["finish_s"]), [1000.0, 1100.0, 1200.0])


def test_min_makespan_follows_its_closed_form() -> None:
    """One GPU: A (300 s) and B (100 s) at 0: X = R z* = (0.75, 0.25). Rounds: both fresh, A
    first (larger X); then B's deficit wins; B finishes at 200, A runs alone to 400."""
    w = epoch_workload([("A", 0.0, 1, [300.0]), ("B", 0.0, 1, [100.0])])
    result = run(w, single_type(1), policy="min_makespan", round_s=100.0)
    assert result.grants["job"].tolist() == [0, 1, 0, 0]
    np.testing.assert_allclose(result.jobs["finish_s"], [400.0, 200.0])


def test_max_sum_throughput_prefers_one_device_jobs() -> None:
    w = epoch_workload([("A", 0.0, 2, [100.0]), ("B", 0.0, 1, [200.0]), ("C", 0.0, 1, [200.0])])
    result = run(w, single_type(2), policy="max_sum_throughput", round_s=100.0)
    pairs = sorted(zip(result.grants["round"].tolist(), result.grants["job"].tolist(),
                       strict=True))
    assert pairs == [(0, 1), (0, 2), (1, 1), (1, 2), (2, 0)]
    np.testing.assert_allclose(result.jobs["finish_s"], [300.0, 200.0, 200.0])


def test_jobs_a_policy_cannot_serve_stall_and_are_reported() -> None:
    """allox serves 1-GPU jobs only: the 2-GPU job is never started; the run stops once the
    other finished and says why."""
    w = workload([("one", 0.0, 1, 100.0, [1.0]), ("two", 0.0, 2, 100.0, [1.0])])
    result = run(w, single_type(2), policy="allox", round_s=100.0)
    assert result.jobs["finished"].tolist() == [True, False]
    assert result.summary["unfinished"] == 1
    assert result.summary["stopped"].startswith("stalled")


def test_deterministic_with_a_seed() -> None:
    w = workload(mixed_jobs())
    fid = Fidelity(throughput_noise=0.3, estimate_error=0.2, restart_overhead_s=5.0, seed=7)
    first = run(w, TWO_TYPES, policy="max_min_fairness_perf", round_s=100.0, fidelity=fid)
    again = run(w, TWO_TYPES, policy="max_min_fairness_perf", round_s=100.0, fidelity=fid)
    for name in ("finish_s", "gpu_hours", "restarts"):
        np.testing.assert_array_equal(first.jobs[name], again.jobs[name])
    np.testing.assert_array_equal(first.grants["type"], again.grants["type"])
    other = run(w, TWO_TYPES, policy="max_min_fairness_perf", round_s=100.0,
                fidelity=Fidelity(throughput_noise=0.3, estimate_error=0.2,
                                  restart_overhead_s=5.0, seed=8))
    assert not np.array_equal(first.jobs["finish_s"], other.jobs["finish_s"])


def test_noise_changes_progress_but_not_the_work() -> None:
    """With noise the JCTs move, every job still finishes (the work is conserved in the
    state: work done = total)."""
    from apportion.simulator.engine import SimulationConfig, simulate

    w = workload(mixed_jobs())
    outcome = simulate(w, TWO_TYPES, SimulationConfig(
        policy="max_min_fairness_perf", round_s=100.0, fidelity=Fidelity(throughput_noise=0.5)))
    np.testing.assert_allclose(outcome.state.work_done, w.total_steps)
    plain = run(w, TWO_TYPES, policy="max_min_fairness_perf", round_s=100.0)
    assert not np.allclose(plain.jobs["finish_s"], outcome.state.finish_s)


def test_round_check_refuses_a_round_above_the_cluster() -> None:
    w = workload([("a", 0.0, 1, 100.0, [1.0, 1.0]), ("b", 0.0, 1, 100.0, [1.0, 1.0])])
    cluster = model_cluster(parse_cluster("fast:1,slow:1"))
    active = np.array([0, 1])
    ok = [Grant(0, 0, 1), Grant(1, 1, 1)]
    check_grants(0, active, ok, w, cluster, PlanKind.TIME_SHARE)
    with pytest.raises(SimulationError, match="exceeds the cluster"):
        check_grants(0, active, [Grant(0, 0, 1), Grant(1, 0, 1)], w, cluster,
                     PlanKind.TIME_SHARE)
    with pytest.raises(SimulationError, match="not active"):
        check_grants(0, np.array([0]), ok, w, cluster, PlanKind.TIME_SHARE)
    with pytest.raises(SimulationError, match="gang"):
        check_grants(0, active, [Grant(0, 0, 2)], w, cluster, PlanKind.TIME_SHARE)
    nodes = model_cluster(parse_cluster("fast:4:2"))
    w1 = workload([("a", 0.0, 2, 100.0, [1.0]), ("b", 0.0, 2, 100.0, [1.0])])
    with pytest.raises(SimulationError, match="node"):
        check_grants(0, active, [Grant(0, 0, 2, ((0, 2),)), Grant(1, 0, 2, ((0, 2),))], w1,
                     nodes, PlanKind.TIME_SHARE)


def test_bad_configuration_is_an_input_error() -> None:
    w = workload([("a", 0.0, 8, 100.0, [1.0])])
    with pytest.raises(SimulationInputError, match="8 devices"):
        run(w, single_type(4), policy="max_min_fairness_perf")
    with pytest.raises(SimulationInputError, match="unknown policy"):
        run(workload([("a", 0.0, 1, 100.0, [1.0])]), single_type(4), policy="nope")
    with pytest.raises(SimulationInputError, match="round"):
        run(workload([("a", 0.0, 1, 100.0, [1.0])]), single_type(4), round_s=0.0)
