"""Tests for Gavel's FIFO baselines (A2.10, docs/policies/gavel.md): feasibility, no skipping,
`fifo_perf` picks the fastest fitting type, running jobs keep their type under `fifo`, and
determinism under a fixed seed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.solver.model import PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import NoParameters
from apportion.solver.result import JobStatus, Plan, Termination
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem


@st.composite
def problems(draw: st.DrawFn) -> Problem:
    n = draw(st.integers(1, 3))
    count = [draw(st.integers(1, 6)) for _ in range(n)]
    m = draw(st.integers(1, 10))
    s = [min(draw(st.sampled_from([1, 1, 2, 4])), max(count)) for _ in range(m)]
    T = np.array(
        [[draw(st.sampled_from([0.0, 1.0, 2.0, 5.0])) for _ in range(n)] for _ in range(m)]
    )
    for i in range(m):
        fits = [j for j in range(n) if count[j] >= s[i]]
        if not any(T[i, j] > 0 for j in fits):
            T[i, fits[0]] = 1.0
    prob = make_problem([f"t{j}" for j in range(n)], count, T, scale_factor=s)
    arrival = np.array([draw(st.sampled_from([0.0, 5.0, 10.0])) for _ in range(m)])
    return replace(prob, jobs=replace(prob.jobs, arrival_time_s=arrival))


def run(prob: Problem, name: str, seed: int = 0) -> Plan:
    return solve(prob, PolicyRequest(name, NoParameters()), SolveOptions(seed=seed))


def order(prob: Problem) -> list[int]:
    return sorted(range(prob.jobs.num_jobs), key=lambda i: (prob.jobs.arrival_time_s[i], i))


@given(problems(), st.sampled_from(["fifo", "fifo_perf"]), st.integers(0, 5))
def test_feasible_no_skipping_deterministic(prob: Problem, name: str, seed: int) -> None:
    plan = run(prob, name, seed)
    X = plan.time_share
    assert plan.certificate.termination is Termination.HEURISTIC
    assert set(np.unique(X)) <= {0.0, 1.0}
    assert np.all(X.sum(axis=1) <= 1)
    assert np.all(prob.jobs.scale_factor @ X <= prob.cluster.count)
    assert np.all(X[~prob.usable] == 0)
    scheduled = X.sum(axis=1) > 0
    seq = [bool(scheduled[i]) for i in order(prob)]
    assert seq == sorted(seq, reverse=True)  # no job behind an unscheduled one runs
    assert all((plan.job_status[i] is JobStatus.ALLOCATED) == scheduled[i] for i in range(len(seq)))
    np.testing.assert_array_equal(run(prob, name, seed).time_share, X)


@given(problems())
def test_fifo_perf_picks_the_fastest_fitting_type(prob: Problem) -> None:
    X = run(prob, "fifo_perf").time_share
    free = prob.cluster.count.copy()
    for i in order(prob):
        if X[i].sum() == 0:
            break
        fits = np.flatnonzero(prob.usable[i] & (free >= prob.jobs.scale_factor[i]))
        j = int(np.argmax(X[i]))
        assert prob.jobs.throughput[i, j] == prob.jobs.throughput[i, fits].max()
        free[j] -= prob.jobs.scale_factor[i]


def test_fifo_running_jobs_keep_their_type() -> None:
    prob = make_problem(["a", "b"], [1, 1], [[1.0, 5.0], [1.0, 1.0], [1.0, 1.0]])
    prob = replace(
        prob,
        jobs=replace(prob.jobs, arrival_time_s=np.array([0.0, 1.0, 2.0])),
        history=replace(
            prob.history,
            current_type=np.array([-1, -1, 0]),
            current_devices=np.array([0, 0, 1]),
        ),
    )
    for seed in range(5):
        X = run(prob, "fifo", seed).time_share
        assert X[2, 0] == 1.0  # the running job keeps type a
        assert X[0, 1] == 1.0  # the head gets the only free type
        assert X[1].sum() == 0  # nothing left: queued


@st.composite
def with_pairs(draw: st.DrawFn) -> Problem:
    """A FIFO instance with explicit pair throughputs for some pairs of equal scale factor."""
    from apportion.solver.model import Colocations

    prob = draw(problems())
    m, n = prob.jobs.num_jobs, prob.cluster.num_types
    s = prob.jobs.scale_factor
    candidates = [(a, b) for a in range(m) for b in range(a + 1, m) if s[a] == s[b]]
    chosen = draw(st.lists(st.sampled_from(candidates), unique=True, max_size=6)
                  ) if candidates else []
    T = prob.jobs.throughput
    fa = np.array([[draw(st.sampled_from([0.2, 0.6, 0.9])) for _ in range(n)] for _ in chosen]
                  ).reshape(-1, n)
    fb = np.array([[draw(st.sampled_from([0.2, 0.6, 0.9])) for _ in range(n)] for _ in chosen]
                  ).reshape(-1, n)
    coloc = Colocations(
        job_a=np.array([a for a, _ in chosen], np.int64),
        job_b=np.array([b for _, b in chosen], np.int64),
        throughput_a=fa * T[np.array([a for a, _ in chosen], np.int64)],
        throughput_b=fb * T[np.array([b for _, b in chosen], np.int64)],
    )
    return replace(prob, colocations=coloc)


@given(with_pairs())
def test_fifo_packed_packs_queued_jobs_onto_single_jobs(prob: Problem) -> None:
    """fifo_packed = fifo_perf for the jobs it schedules alone; every packed job shares a job
    scheduled alone by fifo_perf, on that job's type, with the same scale factor, combined
    normalized throughput > 1.5 and at most one partner each; devices are held once."""
    packed, perf = run(prob, "fifo_packed"), run(prob, "fifo_perf")
    X, T, s = packed.time_share, prob.jobs.throughput, prob.jobs.scale_factor
    coloc = prob.colocations
    assert coloc is not None
    rate = {}
    for p in range(coloc.job_a.size):
        a, b = int(coloc.job_a[p]), int(coloc.job_b[p])
        rate[(a, b)] = (coloc.throughput_a[p], coloc.throughput_b[p])
        rate[(b, a)] = (coloc.throughput_b[p], coloc.throughput_a[p])
    alone = perf.time_share.sum(axis=1) > 0
    np.testing.assert_array_equal(X[alone], perf.time_share[alone])
    partners = set()
    for i, k, j, share in packed.shares.colocated:
        assert share == 1.0 and not alone[i] and alone[k] and k not in partners
        partners.add(k)
        assert X[i, j] == 1.0 and perf.time_share[k, j] == 1.0 and s[i] == s[k]
        ri, rk = rate[(i, k)]
        assert ri[j] / T[i, j] + rk[j] / T[k, j] > 1.5
        assert packed.effective_throughput[i] == ri[j] and packed.effective_throughput[k] == rk[j]
    # devices: the pass of fifo_perf only (pairs add none)
    assert np.all(s @ perf.time_share <= prob.cluster.count)
    unpacked = [i for i in range(prob.jobs.num_jobs)
                if not alone[i] and all(i != c[0] for c in packed.shares.colocated)]
    assert all(packed.job_status[i] is JobStatus.DEFERRED for i in unpacked)
    assert packed.certificate.termination is Termination.HEURISTIC


def test_fifo_packed_picks_the_best_partner_and_without_pairs_is_fifo_perf() -> None:
    from apportion.solver.model import Colocations

    prob = make_problem(["v100"], [2], [[1.0], [1.0], [1.0]])
    prob = replace(prob, jobs=replace(prob.jobs, arrival_time_s=np.array([0.0, 1.0, 2.0])))
    pairs = Colocations(job_a=np.array([2, 2]), job_b=np.array([0, 1]),
                        throughput_a=np.array([[0.8], [0.9]]),
                        throughput_b=np.array([[0.8], [0.9]]))
    # capacity 2: jobs 0 and 1 run alone; job 2 pairs with job 1 (1.8 > 1.6 > 1.5)
    plan = run(replace(prob, colocations=pairs), "fifo_packed")
    assert plan.shares.colocated == ((2, 1, 0, 1.0),)
    np.testing.assert_allclose(plan.effective_throughput, [1.0, 0.9, 0.9])
    none = run(prob, "fifo_packed")
    np.testing.assert_array_equal(none.time_share, run(prob, "fifo_perf").time_share)
    assert none.shares.colocated == ()


@st.composite
def with_type_pairs(draw: st.DrawFn) -> Problem:
    """A FIFO instance whose jobs have job types and type-pair throughputs (some missing)."""
    from apportion.solver.model import Colocations

    prob = draw(problems())
    m, n = prob.jobs.num_jobs, prob.cluster.num_types
    kinds = ["x", "y", "z"]
    job_type = tuple(draw(st.sampled_from([*kinds, ""])) for _ in range(m))
    pairs = [(a, b) for ia, a in enumerate(kinds) for b in kinds[ia:]]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, min_size=1, max_size=len(pairs)))
    rate = st.sampled_from([0.0, 0.3, 0.7, 1.1, 2.5])
    first = np.array([[draw(rate) for _ in range(n)] for _ in chosen])
    second = np.array([[draw(rate) for _ in range(n)] for _ in chosen])
    coloc = Colocations(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, n)),
                        np.zeros((0, n)), tuple(a for a, _ in chosen), tuple(b for _, b in chosen),
                        first, second)
    return replace(prob, jobs=replace(prob.jobs, job_type=job_type), colocations=coloc)


def reference_packing(prob: Problem, perf: Plan) -> list[tuple[int, int, int]]:
    """Gavel's packing pass written from its description: queued jobs in arrival order take
    the first best partner scheduled alone (same scale factor, combined > 1.5)."""
    coloc = prob.colocations
    assert coloc is not None
    T, s, kinds = prob.jobs.throughput, prob.jobs.scale_factor, prob.jobs.job_type
    table = {}
    for q, (a, b) in enumerate(zip(coloc.type_a, coloc.type_b, strict=True)):
        ra, rb = coloc.type_throughput_a[q], coloc.type_throughput_b[q]
        if a == b:
            ra = rb = (ra + rb) / 2
        table[(a, b)], table[(b, a)] = (ra, rb), (rb, ra)
    X = perf.time_share
    alone = {i: int(np.argmax(X[i])) for i in range(X.shape[0]) if X[i].sum() > 0}
    packed = []
    for i in order(prob):
        if X[i].sum() > 0:
            continue
        best, value = -1, 1.5
        for k, j in alone.items():
            pair = table.get((kinds[i], kinds[k])) if kinds[i] and kinds[k] else None
            if pair is None or s[i] != s[k] or T[i, j] <= 0 or T[k, j] <= 0:
                continue
            if s[i] > prob.cluster.count[j]:
                continue
            combined = pair[0][j] / T[i, j] + pair[1][j] / T[k, j]
            if combined > value:
                best, value = k, combined
        if best >= 0:
            packed.append((i, best, alone.pop(best)))
    return packed


@given(with_type_pairs())
def test_fifo_packed_with_type_pairs_matches_the_reference_pass(prob: Problem) -> None:
    packed, perf = run(prob, "fifo_packed"), run(prob, "fifo_perf")
    got = [(i, k, j) for i, k, j, _ in packed.shares.colocated]
    assert got == reference_packing(prob, perf)


def test_a_deadline_cuts_the_fifo_passes_honestly() -> None:
    """Cut after a given number of deadline looks: the jobs placed so far keep their devices,
    the rest stay queued with the reason, and the detail says the pass was cut short."""
    from apportion.solver.model import PolicyRequest, SolveOptions
    from apportion.solver.parameters import NoParameters
    from apportion.solver.solve import solve
    from tests.countdown import CountdownDeadline

    prob = make_problem(["a"], [4], np.ones((6, 1)))
    full = run(prob, "fifo_perf")
    assert int(full.time_share.sum()) == 4
    for checks in range(7):
        plan = solve(prob, PolicyRequest("fifo_perf", NoParameters()), SolveOptions(),
                     CountdownDeadline(checks=checks))
        placed = int(plan.time_share.sum())
        if checks < 4:
            assert placed == checks
            assert "time limit" in plan.certificate.detail
            assert all(r == "stopped at the time limit" for r in plan.job_reason[checks:])
        elif checks > 4:  # the 5th look finds the head blocked: the pass ends on its own
            assert placed == 4 and "time limit" not in plan.certificate.detail
        assert plan.certificate.termination is Termination.HEURISTIC


def test_fifo_packed_ties_go_to_the_first_partner() -> None:
    """Two partners scheduled alone with the same combined throughput: the earlier job (the
    first one Gavel's loop tries) is chosen."""
    from apportion.solver.model import Colocations

    prob = make_problem(["v100"], [2], [[1.0], [1.0], [1.0]])
    prob = replace(prob, jobs=replace(prob.jobs, arrival_time_s=np.array([0.0, 1.0, 2.0]),
                                      job_type=("x", "x", "x")))
    pairs = Colocations(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 1)),
                        np.zeros((0, 1)), ("x",), ("x",), np.array([[0.8]]), np.array([[0.8]]))
    plan = run(replace(prob, colocations=pairs), "fifo_packed")
    assert plan.shares.colocated == ((2, 0, 0, 1.0),)
