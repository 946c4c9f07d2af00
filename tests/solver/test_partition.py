"""POP (B10) as a mechanism of `solve()`: feasibility and the inequalities against the exact
solve, k = 1 is the exact policy bit for bit, determinism and the modulo partition, the
replication case where POP is exact, worker processes bounded by the deadline."""

from __future__ import annotations

import os
import pathlib
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apportion.solver.model import (
    PartitionMode,
    PolicyRequest,
    Problem,
    SolveOptions,
)
from apportion.solver.parameters import (
    MaxMinFairnessParameters,
    MaxSumThroughputParameters,
    MinMakespanParameters,
)
from apportion.solver.partition import WORKER_MODULE, assign, sub_problem
from apportion.solver.result import Plan, Termination
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem

MAX_MIN = PolicyRequest("weighted_max_min_fairness", MaxMinFairnessParameters())
MAX_SUM = PolicyRequest("max_sum_throughput", MaxSumThroughputParameters())
MAKESPAN = PolicyRequest("min_makespan", MinMakespanParameters())
IN_PROCESS = SolveOptions(threads=1)  # one worker: sub-problems solved in this process


def random_problem(m: int, seed: int, per_type: int = 0, scale: bool = True) -> Problem:
    rng = np.random.default_rng(seed)
    T = rng.uniform(0.2, 10.0, (m, 3)) * (rng.random((m, 3)) < 0.85)
    T[:, 0] = np.maximum(T[:, 0], 0.2)
    count = [per_type or max(m // 3, 1)] * 3
    s = rng.choice([1, 1, 1, 2, 4], size=m) if scale else np.ones(m, np.int64)
    problem = make_problem(["a", "b", "c"], count, T, np.minimum(s, min(count)))
    total = rng.uniform(1e3, 1e5, m)
    return replace(problem, jobs=replace(problem.jobs, total_steps=total))


def check_feasible(problem: Problem, plan: Plan) -> None:
    X = plan.time_share
    assert np.all(X >= 0) and np.all(X.sum(axis=1) <= 1 + 1e-9)
    assert np.all(problem.jobs.scale_factor @ X <= problem.cluster.count + 1e-6)
    assert np.all(X[~problem.usable] == 0)


@settings(max_examples=8)
@given(m=st.integers(2, 40), seed=st.integers(0, 1000), k=st.integers(2, 4))
def test_partitioned_plans_are_feasible_and_bounded_by_the_exact_optimum(
    m: int, seed: int, k: int
) -> None:
    """B10 test 1 [derived]: the concatenation is feasible for the whole problem; with the
    whole problem's normalizers its max-min value <= t*, max-sum <= exact, makespan >=
    exact."""
    problem = random_problem(m, seed)
    k = min(k, m)
    options = replace(IN_PROCESS, partitions=k, seed=seed)
    for policy, sign in ((MAX_MIN, 1), (MAX_SUM, 1), (MAKESPAN, -1)):
        exact = solve(problem, policy)
        pop = solve(problem, policy, options)
        assert pop.certificate.termination in (Termination.HEURISTIC, Termination.FEASIBLE)
        check_feasible(problem, pop)
        assert exact.certificate.objective is not None
        if pop.certificate.objective is None:  # a job with no devices left: makespan inf
            assert sign < 0
            continue
        slack = 1e-6 * abs(exact.certificate.objective) + 1e-9
        assert sign * (pop.certificate.objective - exact.certificate.objective) <= slack


def test_one_partition_is_the_exact_policy_bit_for_bit() -> None:
    """B10 test 2: k = 1 gives the exact solve's plan (same solver, same time shares)."""
    problem = random_problem(60, 3)
    for policy in (MAX_MIN, MAX_SUM, MAKESPAN):
        exact = solve(problem, policy)
        one = solve(problem, policy, SolveOptions(partitions=1))
        assert np.array_equal(exact.time_share, one.time_share)
        assert one.certificate.objective == exact.certificate.objective
        assert one.certificate.termination is exact.certificate.termination


def test_fixed_seed_is_deterministic_and_modulo_is_figure_2s_partition() -> None:
    """B10 test 3."""
    problem = random_problem(30, 5)
    a = assign(problem, 4, PartitionMode.RANDOM, seed=7)
    assert np.array_equal(a, assign(problem, 4, PartitionMode.RANDOM, seed=7))
    assert not np.array_equal(a, assign(problem, 4, PartitionMode.RANDOM, seed=8))
    assert assign(problem, 4, PartitionMode.MODULO, 0).tolist() == [i % 4 for i in range(30)]
    options = replace(IN_PROCESS, partitions=3, seed=11)
    first, second = solve(problem, MAX_MIN, options), solve(problem, MAX_MIN, options)
    assert np.array_equal(first.time_share, second.time_share)


REFERENCE = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "reference"
FIGURE_2 = REFERENCE / "gavel" / "pop_logs" / "figure2_num_jobs_2048.out"


@pytest.mark.skipif(not FIGURE_2.is_file(), reason="needs ../shared/reference/gavel/pop_logs "
                    "(POP's logged Figure 2) and Gavel's simulation throughput table")
def test_quality_against_pops_figure_2_logs() -> None:
    """B10 test 4, statistical: POP's logged per-job effective throughput ratios POP-k / exact
    (2,048 jobs, 512 GPUs of each type, job_id mod k) against ours on a regenerated instance
    (job types drawn from Gavel's table; without space sharing, which POP does not partition
    here): the mean ratio within 0.002 of the logged one and the worst within 0.02."""
    import ast

    from apportion.datasets.throughput import read_gavel_throughputs

    lines = FIGURE_2.read_text().splitlines()
    logged = ast.literal_eval(lines[1])  # exact, POP-2, POP-4, POP-8, Gandiva
    exact_logged = np.array([logged[0][i] for i in range(2048)])
    table = read_gavel_throughputs(REFERENCE / "gavel" / "simulation_throughputs.json",
                                   pairs=False)
    keys, types = table.job_keys(1), ("v100", "p100", "k80")
    rng = np.random.default_rng(0)
    rows = [table.throughput(keys[k], types) for k in rng.integers(len(keys), size=2048)]
    problem = make_problem(list(types), [512] * 3,
                           np.array([[row.get(t, 0.0) for t in types] for row in rows]))
    exact = solve(problem, MAX_MIN)
    for position, k in enumerate((2, 4, 8), start=1):
        ratio_logged = np.array([logged[position][i] for i in range(2048)]) / exact_logged
        pop = solve(problem, MAX_MIN, SolveOptions(partitions=k, threads=1,
                                                   partition_mode=PartitionMode.MODULO))
        ratio = pop.effective_throughput / exact.effective_throughput
        assert float(ratio.mean()) >= float(ratio_logged.mean()) - 0.002, k
        assert float(ratio.min()) >= float(ratio_logged.min()) - 0.02, k


@pytest.mark.parametrize("k", [2, 4])
def test_k_copies_one_per_sub_problem_is_exact(k: int) -> None:
    """B10 test 5 [derived from A2.1 test 8]: k identical copies of a base set, each
    sub-problem receiving exactly one copy, W divisible by k: POP's max-min value equals the
    exact value (every s_i <= W[j]/k where it fits W[j])."""
    base = random_problem(7, 2, per_type=4, scale=False)
    T = np.repeat(base.jobs.throughput, k, axis=0)  # b0 x k, b1 x k, ...: position mod k
    problem = make_problem(["a", "b", "c"], base.cluster.count * k, T)
    options = SolveOptions(partitions=k, partition_mode=PartitionMode.MODULO,
                           partition_exact_gap=True, threads=1)
    pop = solve(problem, MAX_MIN, options)
    exact = solve(problem, MAX_MIN)
    assert pop.certificate.objective == pytest.approx(exact.certificate.objective, rel=1e-6)
    assert pop.certificate.gap is not None and pop.certificate.gap <= 1e-6


def test_sub_problems_take_their_jobs_and_floor_the_capacity() -> None:
    problem = random_problem(10, 1, per_type=7)
    members = np.array([1, 4, 8])
    sub = sub_problem(problem, members, 3)
    assert sub.cluster.count.tolist() == [2, 2, 2]
    assert sub.jobs.ids == ("job1", "job4", "job8")
    assert np.array_equal(sub.jobs.throughput, problem.jobs.throughput[members])
    assert np.array_equal(sub.jobs.total_steps, problem.jobs.total_steps[members])


def _children() -> list[str]:
    """Command lines of this process's live children."""
    out = []
    for task in pathlib.Path(f"/proc/{os.getpid()}/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                out.append(pathlib.Path(f"/proc/{pid}/cmdline").read_text())
            except OSError:
                continue
    return out


def test_worker_processes_report_and_never_outlive_the_call() -> None:
    """Real worker processes (two): the answer equals the in-process one; after the call, and
    after a call cut by a tiny time limit, no worker is left."""
    problem = random_problem(300, 9)
    options = SolveOptions(partitions=4, seed=3, threads=2)
    plan = solve(problem, MAX_MIN, options)
    assert plan.shares.partition is not None and plan.shares.partition.workers == 2
    local = solve(problem, MAX_MIN, replace(options, threads=1))
    assert np.allclose(plan.time_share, local.time_share, atol=1e-9)
    assert not [c for c in _children() if WORKER_MODULE in c]
    cut = solve(problem, MAX_MIN, replace(options, time_limit_s=0.01))
    assert cut.certificate.termination is not Termination.OPTIMAL
    assert not [c for c in _children() if WORKER_MODULE in c]


def test_policies_that_cannot_be_partitioned_are_refused() -> None:
    problem = random_problem(5, 0)
    with pytest.raises(ValueError, match="cannot be partitioned"):
        solve(problem, PolicyRequest("fifo_perf", __import__(
            "apportion.solver.parameters", fromlist=["NoParameters"]).NoParameters()),
            SolveOptions(partitions=2))


def test_partitionable_policies_declare_a_score() -> None:
    """The capability flag and the score entry point come together, on LP time-share policies;
    the score of the exact plan is the exact plan's objective."""
    import inspect

    from apportion.solver.capabilities import PlanKind, ProblemClass
    from apportion.solver.registry import load_entry, policies

    problem = random_problem(12, 4)
    for spec in policies():
        caps = spec.capabilities
        assert caps.partitionable == bool(spec.score_entry_point), spec.name
        if not caps.partitionable:
            continue
        assert caps.plan_kind is PlanKind.TIME_SHARE and caps.problem_class is ProblemClass.LP
        score = load_entry(spec.score_entry_point)
        assert list(inspect.signature(score).parameters) == [
            "problem", "parameters", "compat", "X"]
        plan = solve(problem, PolicyRequest(spec.name, spec.parameters_type()))
        value = score(problem, spec.parameters_type(), PolicyRequest(spec.name, None).compat,
                      plan.time_share)
        assert value.objective == pytest.approx(plan.certificate.objective, rel=1e-9), spec.name


def test_partitioned_plans_get_rounds_and_finish_time_state() -> None:
    """POP's plan goes through the round mechanism like the exact one, and per-job state of
    the sub-plans (finish-time fairness's C_i, iso_i, R_i) is returned for every job."""
    from apportion.solver.parameters import FinishTimeFairnessParameters

    problem = replace(random_problem(24, 6), time_s=50.0)
    ftf = PolicyRequest("themis_finish_time_fairness", FinishTimeFairnessParameters())
    plan = solve(problem, ftf, SolveOptions(partitions=3, threads=1, schedule_rounds=2))
    assert len(plan.shares.rounds) == 2
    for state in (plan.shares.cumulative_isolated_time_s, plan.shares.isolated_throughput,
                  plan.shares.remaining_steps):
        assert state is not None and np.all(np.isfinite(state))
