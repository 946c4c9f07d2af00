"""AlloX (A3, docs/policies/allox.md) proven by independent routes: exhaustive brute force over
every assignment and every order (n <= 7), the explicit Gavel-style per-device per-position
Hungarian matrix (scipy linear_sum_assignment, up to ~60 jobs), the schedule's structure (SPT on
every device, no gaps, matching cost = sum of predicted completion times), an independent check of
the dual certificate on every per-device slot, metamorphic relations, the online rules
(non-preemption, alpha, unservable jobs), bad inputs with field paths, and one end-to-end
request through `apportion.server.pipeline.solve_request`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from numpy.typing import NDArray
from scipy.optimize import linear_sum_assignment

import apportion
from apportion.formulations.allox import solve_matching
from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.errors import ValidationError
from apportion.solver.model import Compat, History, Jobs, PolicyRequest, Problem
from apportion.solver.parameters import AlloxParameters
from apportion.solver.result import JobStatus, Plan, Termination
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem
from apportion.testing import check_plan, snapshots
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1.allocation_service_pb2 import SolveRequest

Array = NDArray[np.float64]
REL = 1e-9


def assert_rel(actual: float, expected: float, rel: float = REL, what: str = "") -> None:
    scale = max(abs(actual), abs(expected), 1.0)
    assert abs(actual - expected) <= rel * scale, f"{what}: {actual!r} vs {expected!r}"


# --------------------------------------------------------------------------------------------
# instances given per device (the references know nothing about groups)


@dataclass(frozen=True)
class Devices:
    """N jobs on G devices: p (N, G) processing times (inf = not allowed), tau (G,) free times,
    a (N,) arrival times."""

    p: Array
    tau: Array
    a: Array

    def grouped(self) -> tuple[Array, Array, NDArray[np.int64]]:
        """Group devices with identical (processing-time column, tau)."""
        keys: dict[tuple[object, ...], list[int]] = {}
        for g in range(self.tau.size):
            keys.setdefault((tuple(self.p[:, g]), float(self.tau[g])), []).append(g)
        cols = [v[0] for v in keys.values()]
        W = np.array([len(v) for v in keys.values()], np.int64)
        return self.p[:, cols], self.tau[cols], W


def brute_force(inst: Devices) -> float:
    """min over every assignment of jobs to devices and every order on every device of
    sum_i (C_i - a_i). Per device and job subset, every order is enumerated; the devices are
    independent given the assignment, so the minimum over assignments of the sum of the
    per-device minima is the minimum over all (assignment, orders)."""
    N, G = inst.p.shape
    best: list[dict[int, float]] = []
    for g in range(G):
        table: dict[int, float] = {0: 0.0}
        for size in range(1, N + 1):
            for subset in itertools.combinations(range(N), size):
                mask = sum(1 << i for i in subset)
                if not np.all(np.isfinite(inst.p[list(subset), g])):
                    table[mask] = math.inf
                    continue
                value = math.inf
                for order in itertools.permutations(subset):
                    t, total = inst.tau[g], 0.0
                    for i in order:
                        t += inst.p[i, g]
                        total += t - inst.a[i]
                    value = min(value, total)
                table[mask] = value
        best.append(table)
    result = math.inf
    for labels in itertools.product(range(G), repeat=N):
        masks = [0] * G
        for i, g in enumerate(labels):
            masks[g] |= 1 << i
        result = min(result, sum(best[g][masks[g]] for g in range(G)))
    return result


def explicit_hungarian(inst: Devices) -> float:
    """Gavel's formulation: one column per (device, position k = 1..N) with cost
    tau_g - a_i + k p[i, g], solved by scipy's rectangular Hungarian algorithm."""
    N, G = inst.p.shape
    k = np.arange(1, N + 1)
    cost = inst.tau[None, :, None] - inst.a[:, None, None] + inst.p[:, :, None] * k[None, None, :]
    cost = cost.reshape(N, G * N)
    big = 1e15
    finite = np.where(np.isfinite(cost), cost, big)
    rows, cols = linear_sum_assignment(finite)
    assert np.all(finite[rows, cols] < big)
    return float(cost[rows, cols].sum())


def matching_of(inst: Devices) -> tuple[float, float]:
    P, tau, W = inst.grouped()
    result = solve_matching(P, tau, W, inst.a)
    assert result.status == "optimal"
    assert result.bound is not None
    return result.objective, result.bound


@st.composite
def device_instances(draw: st.DrawFn, max_jobs: int = 7, max_devices: int = 3) -> Devices:
    N = draw(st.integers(1, max_jobs))
    G = draw(st.integers(1, max_devices))
    types = draw(st.lists(st.integers(0, 1), min_size=G, max_size=G))
    taus = draw(st.lists(st.sampled_from([0.0, 0.0, 2.5, 7.0]), min_size=G, max_size=G))
    work = draw(st.lists(st.floats(0.5, 50.0), min_size=N, max_size=N))
    speed = draw(
        st.lists(st.lists(st.sampled_from([0.0, 0.25, 1.0, 1.0, 3.0]), min_size=2, max_size=2),
                 min_size=N, max_size=N)
    )
    thr = np.array(speed)[:, types]
    for i in range(N):  # every job can run somewhere
        if not (thr[i] > 0).any():
            thr[i, draw(st.integers(0, G - 1))] = 1.0
    with np.errstate(divide="ignore"):
        p = np.where(thr > 0, np.array(work)[:, None] / np.where(thr > 0, thr, 1), np.inf)
    # devices of one type share a column, so equal (column, tau) devices group together
    a = -np.array(draw(st.lists(st.floats(0.0, 20.0), min_size=N, max_size=N)))
    return Devices(p=p, tau=np.array(taus), a=a)


@given(device_instances())
def test_brute_force_every_assignment_and_order(inst: Devices) -> None:
    objective, bound = matching_of(inst)
    expected = brute_force(inst)
    assert_rel(objective, expected, what="matching vs brute force")
    assert_rel(bound, expected, what="dual bound vs brute force")


def random_devices(rng: np.random.Generator, N: int, types: int, per_type: int) -> Devices:
    type_of = np.repeat(np.arange(types), per_type)
    speed = rng.choice([0.0, 0.5, 1.0, 2.0, 4.0], size=(N, types))
    speed[np.arange(N), rng.integers(0, types, N)] = rng.uniform(0.5, 4.0, N)
    work = rng.uniform(10.0, 1000.0, N)
    thr = speed[:, type_of]
    with np.errstate(divide="ignore"):
        p = np.where(thr > 0, work[:, None] / np.where(thr > 0, thr, 1), np.inf)
    tau = np.where(rng.random(type_of.size) < 0.3, rng.uniform(0, 500, type_of.size), 0.0)
    return Devices(p=p, tau=tau, a=-rng.uniform(0, 100, N))


@pytest.mark.parametrize(
    ("N", "types", "per_type", "seed"),
    [(8, 1, 1, 0), (12, 2, 2, 1), (20, 3, 2, 2), (33, 3, 3, 3), (45, 2, 6, 4), (60, 3, 4, 5)],
)
def test_equals_explicit_hungarian(N: int, types: int, per_type: int, seed: int) -> None:
    inst = random_devices(np.random.default_rng(seed), N, types, per_type)
    objective, bound = matching_of(inst)
    expected = explicit_hungarian(inst)
    assert_rel(objective, expected, what="matching vs Hungarian")
    assert_rel(bound, expected, what="bound vs Hungarian")


@given(device_instances(max_jobs=12, max_devices=5), st.integers(1, 3))
def test_lazy_positions_do_not_change_the_optimum(inst: Devices, start: int) -> None:
    """Starting the position pricing from 1..3 positions gives the same certified optimum."""
    P, tau, W = inst.grouped()
    lazy = solve_matching(P, tau, W, inst.a, initial_positions=np.full(W.size, start))
    full = solve_matching(P, tau, W, inst.a, initial_positions=np.full(W.size, 10**6))
    assert lazy.bound is not None and full.bound is not None
    assert_rel(lazy.objective, full.objective)
    assert_rel(lazy.bound, lazy.objective)


def test_single_machine_closed_form() -> None:
    """One machine: SPT, cost sum_k k p_(k) with p sorted descending (A3 test 6)."""
    p = np.array([[5.0], [1.0], [3.0], [2.0]])
    result = solve_matching(p, np.zeros(1), np.array([1]), np.zeros(4))
    assert result.objective == pytest.approx(1 * 5 + 2 * 3 + 3 * 2 + 4 * 1)
    assert list(np.argsort(result.start)) == [1, 3, 2, 0]


# --------------------------------------------------------------------------------------------
# the policy on problems


def problem(
    throughput: list[list[float]],
    count: list[int],
    remaining: list[float],
    arrival: list[float] | None = None,
    now: float = 0.0,
    scale_factor: list[int] | None = None,
) -> Problem:
    base = make_problem(
        [f"t{j}" for j in range(len(count))], count, throughput, scale_factor=scale_factor
    )
    m = len(remaining)
    jobs = replace(
        base.jobs,
        total_steps=np.array(remaining, dtype=np.float64),
        arrival_time_s=np.array(arrival if arrival is not None else [0.0] * m, np.float64),
    )
    return replace(base, jobs=jobs, time_s=now)


def with_running(prob: Problem, running: dict[int, tuple[int, int, float]]) -> Problem:
    """running: job -> (type, devices, busy_until_s)."""
    m = prob.jobs.num_jobs
    ctype = np.full(m, -1, np.int64)
    cdev = np.zeros(m, np.int64)
    until = np.zeros(m)
    for i, (t, d, u) in running.items():
        ctype[i], cdev[i], until[i] = t, d, u
    hist: History = replace(
        prob.history, current_type=ctype, current_devices=cdev, busy_until_s=until,
        current_nodes=((),) * m,
    )
    return replace(prob, history=hist)


def run(prob: Problem, alpha: float = 1.0, compat: Compat = Compat.NONE) -> Plan:
    return solve(prob, PolicyRequest("allox", AlloxParameters(alpha=alpha), compat=compat))


def allox_snapshots(max_jobs: int = 14) -> st.SearchStrategy[SolveRequest]:
    """`apportion.testing.snapshots` for AlloX: 1-3 types of 0-3 devices, single-device jobs
    with throughputs from a few values (zeros and ties), 1-500 steps left, up to 60 s old, and
    a few running jobs holding devices (busy until a given or an estimated time)."""
    return snapshots(
        "allox",
        jobs=st.integers(1, max_jobs),
        types=st.integers(1, 3),
        count=st.integers(0, 3),
        throughput=st.sampled_from([0.0, 0.5, 1.0, 2.0, 5.0]),
        scale_factor=st.just(1),
        priority_weight=st.none(),
        remaining_steps=st.floats(1.0, 500.0),
        age=st.floats(0.0, 60.0),
        nodes=False,
        full_gangs=False,
    )


def problems(max_jobs: int = 14) -> st.SearchStrategy[Problem]:
    """`allox_snapshots` validated into the solver's model."""
    return allox_snapshots(max_jobs).map(lambda request: request_to_model(request)[0])


def check_allox_plan(prob: Problem, plan: Plan) -> None:
    """Structure and certificate of an allox plan, checked against the problem alone."""
    jobs, now = prob.jobs, prob.time_s
    cert = plan.certificate
    assert cert.termination is Termination.OPTIMAL, cert
    assert cert.objective is not None and cert.bound is not None
    remaining = jobs.remaining_steps
    queue = plan.queues.assignments()
    matched = [i for i, q in enumerate(queue) if q is not None and not q.running]
    # matching cost = sum of predicted completion times (minus arrivals)
    total = sum(queue[i].completion_time_s - jobs.arrival_time_s[i] for i in matched)  # type: ignore[union-attr]
    assert_rel(total, cert.objective, what="sum of predicted JCTs vs objective")
    assert_rel(float(plan.objective_value[matched].sum()), cert.objective)
    slot_cost_total = 0.0
    seen: set[int] = set()
    for dq in plan.queues.device_queues():
        t = dq.type_index
        clock = dq.free_at_s
        assert clock >= now
        if dq.running_job >= 0:
            q = plan.queues.assignments()[dq.running_job]
            assert q is not None and q.running and dq.device in q.devices and q.type_index == t
        else:
            assert clock == now
        K = len(dq.jobs)
        previous = -math.inf
        for pos, i in enumerate(dq.jobs, start=1):
            q = plan.queues.assignments()[i]
            assert q is not None and not q.running
            assert (q.type_index, q.devices, q.position) == (t, (dq.device,), pos)
            assert i not in seen
            seen.add(i)
            p = remaining[i] / jobs.throughput[i, t]
            assert p >= previous * (1 - 1e-12), "SPT order on every device"
            previous = p
            assert q.start_time_s == pytest.approx(clock, rel=1e-12, abs=1e-9), "no gaps"
            clock += p
            assert q.completion_time_s == pytest.approx(clock, rel=1e-12, abs=1e-9)
            assert q.start_now == (pos == 1 and dq.free_at_s <= now)
            k_from_last = K - pos + 1
            slot_cost_total += dq.free_at_s - jobs.arrival_time_s[i] + k_from_last * p
    assert seen == set(matched)
    assert_rel(slot_cost_total, cert.objective, what="matching cost vs objective")
    # dual certificate: u_i + v_(g,k) <= Q[i,(g,k)] on every per-device slot k = 1..N
    u = plan.job_dual
    N = len(matched)
    bound = float(u[matched].sum())
    scale = max(abs(cert.objective), 1.0)
    for dq in plan.queues.device_queues():
        v = np.zeros(N + 1)
        duals = np.array(dq.position_duals[: N + 1])
        v[: duals.size] = duals
        assert np.all(v <= 0)
        bound += float(v.sum())
        for i in matched:
            thr = jobs.throughput[i, dq.type_index]
            if thr <= 0:
                continue
            k = np.arange(1, N + 2)
            q_cost = dq.free_at_s - jobs.arrival_time_s[i] + k * remaining[i] / thr
            assert np.all(u[i] + v[: N + 1] <= q_cost + 1e-9 * scale), "dual feasibility"
    assert_rel(bound, cert.bound, what="recomputed bound")
    assert_rel(bound, cert.objective, what="bound vs objective")
    for i in range(jobs.num_jobs):  # time shares: running jobs and jobs starting now
        q = plan.queues.assignments()[i]
        if q is not None and (q.running or q.start_now):
            assert plan.time_share[i, q.type_index] == 1.0 and plan.time_share[i].sum() == 1.0
        else:
            assert plan.time_share[i].sum() == 0.0


@given(problems())
def test_plan_structure_and_certificate(prob: Problem) -> None:
    check_allox_plan(prob, run(prob))


@given(allox_snapshots())
def test_the_answer_on_the_wire_passes_check_plan(request: SolveRequest) -> None:
    """The same snapshots through the Python API: `check_plan` re-derives every queue's start
    and completion times and the total flow time from the response alone."""
    report = check_plan(request, apportion.solve(request))
    assert report.termination == "optimal"
    assert "device queues and predicted times" in report.checked
    assert "objective recomputed from the plan (total_flow_time)" in report.checked


@given(problems(), st.integers(0, 2))
def test_adding_a_device_never_increases_the_optimum(prob: Problem, j: int) -> None:
    j = j % prob.cluster.num_types
    bigger = replace(prob, cluster=replace(prob.cluster, count=prob.cluster.count + np.eye(
        prob.cluster.num_types, dtype=np.int64)[j]))
    before, after = run(prob).certificate, run(bigger).certificate
    assert before.objective is not None and after.objective is not None
    assert after.objective <= before.objective * (1 + REL) + REL


@given(problems(max_jobs=10), st.floats(1.0, 500.0), st.floats(0.0, 59.0))
def test_adding_a_job_never_decreases_the_optimum(prob: Problem, work: float, age: float
                                                   ) -> None:
    jobs = prob.jobs
    m, n = jobs.num_jobs, prob.cluster.num_types
    usable = int(np.argmax(prob.cluster.count > 0))
    thr = np.zeros((1, n))
    thr[0, usable] = 1.0
    extra = jobs.append(replace(
        Jobs.default(1, n), ids=("extra",), throughput=thr,
        arrival_time_s=np.array([prob.time_s - age]),  # arrived before now
        total_steps=np.array([work]),
    ))
    hist = replace(prob.history, received_time_s=np.zeros((m, n)),
                   cumulative_isolated_time_s=np.zeros(m), restarts=np.zeros(m, np.int64))
    hist = hist.append(History.default(1, n))
    bigger = replace(prob, jobs=extra, history=hist)
    before, after = run(prob).certificate, run(bigger).certificate
    assert before.objective is not None and after.objective is not None
    assert after.objective >= before.objective * (1 - REL) - REL


def test_running_jobs_are_not_preempted_and_delay_their_device() -> None:
    # two devices of one type; job0 runs until t=100 on device 0; three pending jobs
    prob = with_running(
        problem([[1.0], [1.0], [1.0], [1.0]], [2], [1000, 10, 20, 30], now=0.0), {0: (0, 1, 100.0)}
    )
    plan = run(prob)
    check_allox_plan(prob, plan)
    q0 = plan.queues.assignments()[0]
    assert q0 is not None and q0.running and q0.completion_time_s == 100.0
    dq = {d.device: d for d in plan.queues.device_queues()}
    assert dq[0].running_job == 0 and dq[0].free_at_s == 100.0
    # device 1 is free: 10, 20 then 30 there (C = 10, 30, 60) beats waiting for device 0
    assert [prob.jobs.ids[i] for i in dq[1].jobs] == ["job1", "job2", "job3"]
    assert plan.certificate.objective == pytest.approx(10 + 30 + 60)
    starts = [i for i, q in enumerate(plan.queues.assignments()) if q is not None and q.start_now]
    assert starts == [1]


def reference_holders(prob: Problem) -> dict[int, tuple[int, tuple[int, ...], tuple[str, ...]]]:
    """Running job -> (type, the devices it keeps in order, their nodes), by the rule as stated
    and scanned plainly: nodes fill their type's devices in node order; in job order, each
    running job keeps the first free devices of its type on its nodes, then the first other
    free ones of its type."""
    cluster, hist = prob.cluster, prob.history
    node_of: dict[tuple[int, int], int] = {}
    filled = [0] * cluster.num_types
    for k, (t, d) in enumerate(zip(cluster.node_type.tolist(), cluster.node_devices.tolist(),
                                   strict=True)):
        for _ in range(d):
            if filled[t] < cluster.count[t]:
                node_of[(t, filled[t])] = k
                filled[t] += 1
    taken: set[tuple[int, int]] = set()
    holders = {}
    for i in range(prob.jobs.num_jobs):
        t = int(hist.current_type[i])
        if t < 0:
            continue
        want = int(hist.current_devices[i]) or int(prob.jobs.scale_factor[i])
        free = [d for d in range(int(cluster.count[t])) if (t, d) not in taken]
        mine = [d for d in free if node_of.get((t, d), -1) in hist.current_nodes[i]][:want]
        mine += [d for d in free if d not in mine][: want - len(mine)]
        taken.update((t, d) for d in mine)
        nodes = [cluster.node_names[node_of[(t, d)]] for d in mine if (t, d) in node_of]
        holders[i] = (t, tuple(mine), tuple(dict.fromkeys(nodes)))
    return holders


@st.composite
def clusters_with_running_jobs(draw: st.DrawFn) -> Problem:
    """1-3 types of 0-6 devices split into nodes listed in a shuffled order; up to 12 jobs, some
    running on a type with devices, asking for 1..count devices on any of that type's nodes (in
    any order, possibly more than are free: claims overlap)."""
    counts = draw(st.lists(st.integers(0, 6), min_size=1, max_size=3))
    assume(sum(counts) > 0)
    nodes: list[tuple[int, int]] = []
    for t, c in enumerate(counts):
        while c > 0:
            size = draw(st.integers(1, c))
            nodes.append((t, size))
            c -= size
    nodes = draw(st.permutations(nodes))
    m = draw(st.integers(1, 12))
    base = problem([[1.0] * len(counts)] * m, counts, [50.0] * m)
    cluster = replace(base.cluster, node_names=tuple(f"n{k}" for k in range(len(nodes))),
                      node_type=np.array([t for t, _ in nodes], np.int64),
                      node_devices=np.array([d for _, d in nodes], np.int64))
    running = {}
    current_nodes: list[tuple[int, ...]] = [()] * m
    for i in range(m):
        usable = [t for t, c in enumerate(counts) if c > 0]
        if not draw(st.booleans()):
            continue
        t = draw(st.sampled_from(usable))
        running[i] = (t, draw(st.integers(1, counts[t])), draw(st.sampled_from([0.0, 30.0])))
        mine = [k for k, (kt, _) in enumerate(nodes) if kt == t]
        current_nodes[i] = tuple(draw(st.lists(st.sampled_from(mine), unique=True)))
    prob = with_running(replace(base, cluster=cluster), running)
    return replace(prob, history=replace(prob.history, current_nodes=tuple(current_nodes)))


@given(clusters_with_running_jobs())
def test_running_jobs_keep_the_devices_the_rule_gives(prob: Problem) -> None:
    plan = run(prob)
    assert plan.queues is not None
    expected = reference_holders(prob)
    for i, (t, devices, nodes) in expected.items():
        q = plan.queues.assignments()[i]
        assert q is not None and q.running
        assert (q.type_index, q.devices, q.nodes) == (t, devices, nodes)
    holder = {(t, d): i for i, (t, devices, _) in expected.items() for d in devices}
    for dq in plan.queues.device_queues():
        assert dq.running_job == holder.get((dq.type_index, dq.device), -1)


def test_busy_until_estimated_from_remaining_work() -> None:
    prob = with_running(problem([[2.0], [1.0]], [1], [300, 10], now=5.0), {0: (0, 1, 0.0)})
    plan = run(prob)
    q0, q1 = plan.queues.assignments()
    assert q0 is not None and q0.completion_time_s == pytest.approx(5.0 + 150.0)
    assert q1 is not None and q1.start_time_s == pytest.approx(155.0) and not q1.start_now


def test_alpha_keeps_the_longest_waiting_jobs() -> None:
    prob = problem([[1.0]] * 6, [1], [5, 4, 3, 2, 1, 6], arrival=[5, 4, 3, 2, 1, 0], now=10)
    plan = run(prob, alpha=0.5)
    kept = [i for i, s in enumerate(plan.job_status) if s is JobStatus.ALLOCATED]
    assert kept == [3, 4, 5]  # the three earliest arrivals
    assert all(plan.job_status[i] is JobStatus.DEFERRED for i in (0, 1, 2))
    assert all(plan.queues.assignments()[i] is None for i in (0, 1, 2))
    gavel = run(prob, alpha=0.4, compat=Compat.GAVEL)  # floor(2.4) = 2
    assert sum(s is JobStatus.ALLOCATED for s in gavel.job_status) == 2
    assert sum(s is JobStatus.ALLOCATED for s in run(prob, alpha=0.4).job_status) == 3
    # at least as many jobs as free devices
    wide = problem([[1.0]] * 6, [4], [5, 4, 3, 2, 1, 6], now=10)
    assert sum(s is JobStatus.ALLOCATED for s in run(wide, alpha=0.1).job_status) == 4
    # alpha = 1 is the unconstrained optimum
    full = run(prob, alpha=1.0)
    assert all(s is JobStatus.ALLOCATED for s in full.job_status)


def test_unservable_and_finished_jobs_have_reasons() -> None:
    base = problem([[1.0, 2.0]] * 4, [2, 1], [10, 10, 0, 10], scale_factor=[1, 2, 1, 1])
    jobs = replace(base.jobs, steps_done=np.array([0.0, 0.0, 0.0, 10.0]),
                   total_steps=np.array([10.0, 10.0, 0.0, 10.0]))
    plan = run(replace(base, jobs=jobs))
    assert plan.job_status == (
        JobStatus.ALLOCATED, JobStatus.UNSERVABLE, JobStatus.UNSERVABLE, JobStatus.FINISHED
    )
    assert "scale_factor 2" in plan.job_reason[1]
    assert "total_steps" in plan.job_reason[2]
    assert plan.job_reason[3]
    assert plan.certificate.termination is Termination.OPTIMAL


def test_cpu_and_gpu_types_are_just_types() -> None:
    """Nothing assumes GPUs: a CPU type that is slower for one job and faster for another."""
    prob = problem([[1.0, 4.0], [3.0, 1.0]], [1, 1], [12.0, 12.0])
    plan = run(prob)
    check_allox_plan(prob, plan)
    assert [q.type_index for q in plan.queues.assignments() if q is not None] == [1, 0]
    assert plan.certificate.objective == pytest.approx(3.0 + 4.0)


# --------------------------------------------------------------------------------------------
# the wire: conversion, validation, end to end


def request(alpha: float | None = None, **policy: object) -> service_pb.SolveRequest:
    req = service_pb.SolveRequest()
    snap = req.snapshot
    snap.time_s = 100.0
    snap.cluster.accelerator_types.add(name="v100", count=2)
    snap.cluster.accelerator_types.add(name="cpu", count=1, kind=2)
    snap.cluster.nodes.add(name="n0", accelerator_type="v100", devices=1)
    snap.cluster.nodes.add(name="n1", accelerator_type="v100", devices=1)
    snap.cluster.nodes.add(name="c0", accelerator_type="cpu", devices=1)
    for k, (work, gpu, cpu) in enumerate([(100, 1, 0.1), (400, 2, 0.5), (50, 1, 1), (900, 3, 0)]):
        job = snap.jobs.add(id=f"j{k}", arrival_time_s=10.0 * k)
        job.throughput["v100"] = gpu
        if cpu:
            job.throughput["cpu"] = cpu
        job.progress.total_steps = work
    entry = snap.history.jobs.add(job_id="j3")
    entry.current.accelerator_type = "v100"
    entry.current.nodes.append("n1")
    entry.current.busy_until_s = 400.0
    req.policy.name = "allox"
    if alpha is not None:
        req.policy.allox.alpha = alpha
    return req


def test_end_to_end_solve_request() -> None:
    response = solve_request(request(alpha=1.0))
    stats = response.stats
    assert stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    assert stats.policy == "allox" and not stats.maximize
    assert stats.relative_gap <= 1e-9
    jobs = {job.job_id: job for job in response.plan.jobs}
    assert jobs["j3"].queue.running and list(jobs["j3"].queue.nodes) == ["n1"]
    assert jobs["j3"].time_share["v100"] == 1.0
    queues = {(q.accelerator_type, q.device): q for q in response.plan.device_queues}
    assert queues[("v100", 1)].running_job_id == "j3" and queues[("v100", 1)].node == "n1"
    assert queues[("v100", 0)].node == "n0" and queues[("cpu", 0)].node == "c0"
    planned = [j for q in response.plan.device_queues for j in q.job_ids]
    assert sorted(planned) == ["j0", "j1", "j2"]
    total = 0.0
    for job_id in planned:
        q = jobs[job_id].queue
        total += q.completion_time_s - 10.0 * int(job_id[1:])
        assert jobs[job_id].status == service_pb.JOB_STATUS_ALLOCATED
    assert total == pytest.approx(stats.objective, rel=1e-12)
    starting = {j for j, job in jobs.items() if job.queue.start_now}
    assert starting and all(jobs[j].time_share for j in starting)
    # the problem re-solved directly agrees
    prob, policy, _ = request_to_model(request(alpha=1.0))
    check_allox_plan(prob, solve(prob, policy))


@pytest.mark.parametrize("alpha", [0.0, -0.5, 1.5, math.nan, math.inf])
def test_alpha_outside_unit_interval(alpha: float) -> None:
    with pytest.raises(ValidationError) as info:
        request_to_model(request(alpha=alpha))
    assert [v.field for v in info.value.violations] == ["policy.allox.alpha"]


def test_default_alpha_is_one() -> None:
    _, policy, _ = request_to_model(request())
    assert policy.parameters == AlloxParameters(alpha=1.0)


def fields(req: service_pb.SolveRequest) -> list[str]:
    with pytest.raises(ValidationError) as info:
        request_to_model(req)
    return [v.field for v in info.value.violations]


def test_bad_inputs_have_field_paths() -> None:
    req = request()
    req.snapshot.history.jobs[0].current.accelerator_type = "tpu"
    assert fields(req) == ["snapshot.history.jobs[0].current.accelerator_type"]

    req = request()
    req.snapshot.history.jobs[0].current.nodes[0] = "c0"
    assert fields(req) == ["snapshot.history.jobs[0].current.nodes[0]"]

    req = request()
    req.snapshot.history.jobs[0].current.devices = 3
    assert fields(req) == ["snapshot.history.jobs[0].current.devices"]

    req = request()  # negative remaining work
    req.snapshot.jobs[1].progress.steps_done = 500
    assert fields(req) == ["snapshot.jobs[1].progress.total_steps"]

    req = request()  # throughput zero on every type
    req.snapshot.jobs[0].throughput["v100"] = 0
    req.snapshot.jobs[0].throughput["cpu"] = 0
    assert fields(req) == ["snapshot.jobs[0].throughput"]

    req = request()  # parameters of another policy
    req.policy.name = "max_min_fairness"
    req.policy.allox.alpha = 0.5
    assert fields(req) == ["policy.allox"]


def test_zero_remaining_work_is_finished_not_an_error() -> None:
    req = request()
    req.snapshot.jobs[0].progress.steps_done = 100  # = total_steps
    response = solve_request(req)
    job = response.plan.jobs[0]
    assert job.status == service_pb.JOB_STATUS_FINISHED and not job.HasField("queue")
    assert response.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
