"""Themis's auction as a policy (B1): who bids, derived bids, leases, leftover allocation, the
knob, and bad inputs with field paths (the mechanism itself: test_partial_allocation.py).

* B1.4: leftover allocation is work-conserving: a type has idle device-time only when every
  job that did not win and can use it already runs all the time.
* B1.5 (statistical): over 30 seeded instances, the mean worst rho after the epoch and the
  mean efficiency (sum of throughput over isolated throughput) are not larger with f = 0.9
  than with f = 0.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st

import apportion.formulations.themis_auction as themis_module
import apportion.solver.deadline as deadline_module
from apportion.formulations.gavel_lp import ftf_data
from apportion.formulations.themis_auction import lease_rho, leftover_allocation, offered_jobs
from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.backends.highs_startup import BUNDLE_MILP
from apportion.solver.deadline import Deadline
from apportion.solver.errors import ValidationError
from apportion.solver.fairness_model import BidTable, BundleBid, FairnessInputs
from apportion.solver.model import Compat, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import ThemisAuctionParameters
from apportion.solver.result import ModelSize, Plan, Termination
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem
from apportion.v1 import allocation_service_pb2 as service_pb
from tests.countdown import CountdownDeadline, FrozenClock
from tests.formulations.test_node_pool import scan_take


def instance(seed: int, m: int | None = None, counts: tuple[int, int] = (3, 3)) -> Problem:
    rng = np.random.default_rng(seed)
    m = m or int(rng.integers(4, 12))
    T = rng.uniform(0.5, 5.0, (m, 2))
    base = make_problem(["a", "b"], list(counts), T, scale_factor=rng.integers(1, 3, m))
    jobs = replace(base.jobs, total_steps=rng.uniform(500.0, 20000.0, m),
                   arrival_time_s=rng.uniform(0.0, 1000.0, m))
    return replace(base, jobs=jobs, time_s=1000.0)


def with_lease(problem: Problem, job: int, type_index: int, share: float = 1.0) -> Problem:
    m = problem.jobs.num_jobs
    current = np.full(m, -1, np.int64)
    devices = np.zeros(m, np.int64)
    current[job], devices[job] = type_index, problem.jobs.scale_factor[job]
    fair = FairnessInputs.empty(m)
    expires = fair.lease_expires_s.copy()
    expires[job] = problem.time_s + 100.0
    shares = fair.lease_time_share.copy()
    shares[job] = share
    return replace(problem,
                   history=replace(problem.history, current_type=current,
                                   current_devices=devices),
                   fairness=replace(fair, lease_expires_s=expires, lease_time_share=shares))


def themis(problem: Problem, **params: Any) -> Plan:
    return solve(problem, PolicyRequest("themis_auction", ThemisAuctionParameters(**params)))


def winners(plan: Plan) -> np.ndarray:
    assert plan.auction is not None
    return np.array([not math.isnan(o.kept_fraction) for o in plan.auction.outcomes])


def assert_work_conserving(problem: Problem, plan: Plan) -> None:
    X = plan.time_share
    s = problem.jobs.scale_factor
    idle = problem.cluster.count - s @ X
    assert np.all(idle >= -1e-9)
    assert np.all(X.sum(axis=1) <= 1 + 1e-9)
    won = winners(plan)
    for j in np.flatnonzero(idle > 1e-7):
        waiting = problem.usable[:, j] & ~won
        assert np.all(X[waiting].sum(axis=1) >= 1 - 1e-7), (j, idle[j])


@given(st.integers(0, 10_000), st.sampled_from([0.0, 0.5, 0.9]), st.booleans(),
       st.booleans())
def test_leftover_allocation_is_work_conserving(seed: int, knob: float, lease: bool,
                                                divisible: bool) -> None:
    problem = instance(seed)
    if lease:
        problem = with_lease(problem, 0, int(np.argmax(problem.jobs.throughput[0])), 0.5)
    plan = themis(problem, fairness_knob=knob, divisible_shares=divisible)
    assert plan.certificate.termination is Termination.OPTIMAL
    assert_work_conserving(problem, plan)


def leftover_one_by_one(X: np.ndarray, order: list[int], left: np.ndarray,
                        problem: Problem) -> np.ndarray:
    """Leftover allocation's rule job by job (step 5): on each usable type, fastest first
    (ties: lower index), with more than 1e-12 left, the job takes min(room, left_j / s_i)
    until its room (1 - its time shares) is 1e-12 or less; nothing once every type is out."""
    s = problem.jobs.scale_factor.astype(np.float64).tolist()
    handed = [0.0] * left.size
    rest = left.tolist()
    for i in order:
        if max(rest) <= 1e-12:
            break
        row = X[i]
        for j in sorted(range(left.size), key=lambda j: (-problem.jobs.throughput[i, j], j)):
            if not problem.usable[i, j] or rest[j] <= 1e-12:
                continue
            room = 1.0 - row.sum()
            if room <= 1e-12:
                break
            x = min(room, rest[j] / s[i])
            row[j] += x
            rest[j] -= x * s[i]
            handed[j] += x * s[i]
    left[:] = rest
    return np.array(handed)


def leftovers(seed: int) -> tuple[Problem, np.ndarray, list[int], np.ndarray]:
    """Up to 60 jobs with equal speeds on several types, some already holding shares (thirds
    and sevenths: inexact sums; some summing to 1 up to rounding), and fractional device-time
    left, so that types run out part-way through a job."""
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 5)), int(rng.integers(1, 61))
    T = rng.choice([0.0, 1.0, 2.0, 2.0, 3.5], (m, n))
    T[:, 0] = np.maximum(T[:, 0], 1.0)  # every job can run somewhere
    problem = make_problem([f"t{j}" for j in range(n)], [8] * n, T,
                           scale_factor=rng.integers(1, 5, m))
    X = np.zeros((m, n))
    held = rng.random(m) < 0.4
    X[held, rng.integers(0, n, m)[held]] = rng.choice([0.25, 0.5, 1.0, 1 / 3, 3 / 7], m)[held]
    if n > 1:  # shares summing to 1 up to rounding: no room, or 1e-16 of it
        full = np.flatnonzero(rng.random(m) < 0.15)
        X[full, 0] = rng.uniform(0.0, 1.0, full.size)
        X[full, 1] = 1.0 - X[full, 0]
    left = np.where(rng.random(n) < 0.2, 0.0, rng.uniform(0.0, 40.0, n))
    order = rng.permutation(m)[:int(rng.integers(0, m + 1))]
    return problem, X, order.tolist(), left


@given(st.integers(0, 2**32 - 1))
def test_leftover_allocation_gives_what_job_by_job_gives(seed: int) -> None:
    """The array route (stretches of whole rooms between the jobs that empty a type) hands
    out the same time shares, to the last bit, as the rule applied job by job."""
    problem, X, order, left = leftovers(seed)
    X_ref, left_ref = X.copy(), left.copy()
    handed_ref = leftover_one_by_one(X_ref, order, left_ref, problem)
    handed = leftover_allocation(X, np.array(order, np.int64), left, problem)
    assert np.array_equal(X, X_ref)
    assert np.array_equal(handed, handed_ref)
    assert np.array_equal(left, left_ref)


def on_nodes(seed: int) -> Problem:
    """Two types on nodes of 2-8 devices; jobs running on nodes (some under a lease, kept at
    a share), some bidding for bundles on named nodes."""
    rng = np.random.default_rng(seed)
    per_type = [[int(d) for d in rng.choice([2, 4, 8], int(rng.integers(1, 5)))]
                for _ in range(2)]
    node_type = np.array([j for j in range(2) for _ in per_type[j]])
    node_devices = np.array([d for sizes in per_type for d in sizes])
    counts = [sum(sizes) for sizes in per_type]
    m = int(rng.integers(4, 24))
    scale = np.minimum(rng.choice([1, 1, 2, 4], m), min(counts))
    base = make_problem(["a", "b"], counts, rng.choice([1.0, 2.0, 3.0], (m, 2)),
                        scale_factor=scale)
    jobs = replace(base.jobs, total_steps=rng.uniform(500.0, 20000.0, m),
                   arrival_time_s=rng.uniform(0.0, 1000.0, m))
    cluster = replace(base.cluster, node_names=tuple(f"n{k}" for k in range(node_type.size)),
                      node_type=node_type, node_devices=node_devices)
    current, held, nodes = np.full(m, -1, np.int64), np.zeros(m, np.int64), [()] * m
    free = node_devices.copy()
    for i in rng.permutation(m).tolist():
        j = int(rng.integers(0, 2))
        room = [int(k) for k in rng.permutation(np.flatnonzero((node_type == j) & (free > 0)))]
        if rng.random() < 0.5 or free[room].sum() < scale[i]:
            continue
        need, taken = int(scale[i]), []
        for k in room:
            use = min(need, int(free[k]))
            free[k] -= use
            need -= use
            taken.append(k)
            if need == 0:
                break
        current[i], held[i], nodes[i] = j, scale[i], tuple(taken)
    leased = (current >= 0) & (rng.random(m) < 0.4)
    tables: list[BidTable | None] = [None] * m
    for i in np.flatnonzero(~leased & (rng.random(m) < 0.3)).tolist():
        bundles = []
        for j in range(2):
            big = np.flatnonzero((node_type == j) & (node_devices >= scale[i]))
            named = ((int(rng.choice(big)), int(scale[i])),) if big.size and \
                rng.random() < 0.7 else ()
            bundles.append(BundleBid(j, named, float(rng.uniform(0.5, 2.0))))
        tables[i] = BidTable(float(rng.uniform(2.0, 4.0)), tuple(bundles))
    fair = replace(FairnessInputs.empty(m), bids=tuple(tables),
                   lease_expires_s=np.where(leased, 1300.0, 0.0),
                   lease_time_share=np.where(leased, rng.choice([0.5, 1.0], m), 1.0))
    history = replace(base.history, current_type=current, current_devices=held,
                      current_nodes=tuple(nodes))
    return replace(base, jobs=jobs, cluster=cluster, history=history, fairness=fair,
                   time_s=1000.0)


def placed_one_by_one(problem: Problem, plan: Plan) -> dict[int, tuple[str, ...]]:
    """Every winner's nodes by the placement rule gang by gang: the free devices are the
    nodes' minus those of the lease holders (each filling its listed nodes in order); bundles
    naming nodes first, then decreasing gang size (ties: index), each gang on its previous
    nodes if they are of its type and hold it, else the best single node, else whole nodes
    largest first."""
    cluster, hist, fair = problem.cluster, problem.history, problem.fairness
    assert plan.auction is not None and fair is not None
    s = problem.jobs.scale_factor
    free = [int(d) for d in cluster.node_devices]
    for i in np.flatnonzero((fair.lease_expires_s > problem.time_s) & (hist.current_type >= 0)):
        devices = int(hist.current_devices[i])
        for k in hist.current_nodes[i]:
            use = min(free[k], devices)
            free[k] -= use
            devices -= use
    pools = [{k: free[k] for k in np.flatnonzero(cluster.node_type == j).tolist()}
             for j in range(cluster.num_types)]
    named, kind = {}, {}
    for i, outcome in enumerate(plan.auction.outcomes):
        lease = plan.auction.leases[i]
        if math.isnan(outcome.kept_fraction) or lease is None:
            continue
        table = fair.bids[i]
        named[i] = table.bundles[outcome.bundle].node_devices if table is not None else ()
        kind[i] = lease.type_index
    placed = {}
    for i in sorted(named, key=lambda i: (not named[i], -s[i], i)):
        pool = pools[kind[i]]
        if named[i]:
            for k, devices in named[i]:
                pool[k] -= devices
            nodes: tuple[int, ...] | None = tuple(k for k, _ in named[i])
        else:
            same = hist.current_type[i] == kind[i]
            nodes = scan_take(pool, sorted(pool), int(s[i]),
                              hist.current_nodes[i] if same else (), False)
        placed[i] = tuple(cluster.node_names[k] for k in nodes or ())
    return placed


@pytest.mark.parametrize("past", [False, True])
@given(st.integers(0, 10_000))
def test_winners_are_placed_as_one_by_one(past: bool, seed: int) -> None:
    """Types placed one after another, runs of one gang size in one walk of the index: every
    winner's lease names the nodes the rule gives gang by gang in the old order (named
    bundles, then decreasing size over all types), with the program solved or, the deadline
    passing at its first look, with the greedy's winners."""
    problem = on_nodes(seed)
    request = PolicyRequest("themis_auction", ThemisAuctionParameters(fairness_knob=0.0))
    plan = solve(problem, request, SolveOptions(), CountdownDeadline(checks=0) if past else None)
    assert plan.auction is not None
    placed = placed_one_by_one(problem, plan)
    assert placed  # somebody won
    for i, nodes in placed.items():
        lease = plan.auction.leases[i]
        assert lease is not None and lease.nodes == nodes
    assert_work_conserving(problem, plan)


def epoch_metrics(problem: Problem, plan: Plan) -> tuple[float, float]:
    """(worst rho after the epoch, sum of throughput / isolated throughput)."""
    data = ftf_data(problem, problem.jobs.throughput, Compat.NONE)
    thr = plan.effective_throughput
    rho = [lease_rho(data, i, float(thr[i]), 600.0) for i in range(problem.jobs.num_jobs)]
    return max(rho), float(np.sum(thr / data.iso))


def test_a_larger_knob_lowers_the_worst_rho_and_the_efficiency_on_average() -> None:
    fair, efficient = [], []
    for seed in range(30):
        problem = instance(seed, m=10)
        fair.append(epoch_metrics(problem, themis(problem, fairness_knob=0.9)))
        efficient.append(epoch_metrics(problem, themis(problem, fairness_knob=0.0)))
    worst_fair, eff_fair = np.mean(fair, axis=0)
    worst_efficient, eff_efficient = np.mean(efficient, axis=0)
    assert worst_fair <= worst_efficient
    assert eff_fair <= eff_efficient


def test_the_worst_jobs_bid() -> None:
    rho = np.array([1.0, 3.0, 2.0, 5.0, np.nan])
    candidates = np.array([0, 1, 2, 3])
    assert list(offered_jobs(rho, candidates, 0.5)) == [1, 3]
    assert list(offered_jobs(rho, candidates, 0.9)) == [3]  # at least one
    assert list(offered_jobs(rho, candidates, 0.0)) == [0, 1, 2, 3]
    problem = instance(3, m=10)
    plan = themis(problem, fairness_knob=0.7)
    assert plan.auction is not None
    offered = [o.offered for o in plan.auction.outcomes]
    assert sum(offered) == 3
    worst = sorted(o.rho_without for o in plan.auction.outcomes)[-3:]
    assert sorted(o.rho_without for o in plan.auction.outcomes if o.offered) == worst


def test_derived_bids_follow_the_lease_horizon_formula() -> None:
    problem = instance(4, m=3)
    data = ftf_data(problem, problem.jobs.throughput, Compat.NONE)
    R, iso, t, D = data.R[0], data.iso[0], data.t[0], data.D[0]
    fast = 2 * R / 600.0  # finishes within the lease
    assert math.isclose(lease_rho(data, 0, fast, 600.0), (t + R / fast) / D)
    slow = 0.5 * R / 600.0
    expected = (t + 600.0 + (R - slow * 600.0) / iso) / D
    assert math.isclose(lease_rho(data, 0, slow, 600.0), expected)
    assert lease_rho(data, 0, 0.0, 600.0) > lease_rho(data, 0, slow, 600.0)
    plan = themis(problem, fairness_knob=0.0)
    assert plan.auction is not None
    for i, outcome in enumerate(plan.auction.outcomes):
        assert math.isclose(outcome.rho_without, lease_rho(data, i, 0.0, 600.0))
        if outcome.bundle >= 0:
            thr = problem.jobs.throughput[i, outcome.bundle]
            assert math.isclose(outcome.rho_won, lease_rho(data, i, thr, 600.0))


def test_a_lease_is_kept_and_its_devices_are_not_offered() -> None:
    problem = with_lease(instance(5, m=6, counts=(2, 2)), 0, 0, share=0.6)
    plan = themis(problem, fairness_knob=0.0)
    assert plan.auction is not None
    lease = plan.auction.leases[0]
    assert lease is not None and lease.kept and lease.type_index == 0
    assert plan.time_share[0, 0] >= 0.6 - 1e-12
    assert not plan.auction.outcomes[0].offered
    for other in plan.auction.leases[1:]:
        if other is not None:  # winners' leases fit beside the kept one
            assert other.expires_s == problem.time_s + 600.0 and not other.kept
    held = problem.jobs.scale_factor[0]
    use = problem.jobs.scale_factor @ np.where(winners(plan)[:, None], plan.time_share, 0.0)
    assert use[0] <= 2 - held + 1e-9


def test_bid_tables_from_the_snapshot_decide_and_node_bundles_are_placed() -> None:
    problem = instance(6, m=2, counts=(2, 2))
    cluster = replace(problem.cluster, node_names=("n0", "n1", "n2"),
                      node_type=np.array([0, 0, 1]), node_devices=np.array([1, 1, 2]))
    jobs = replace(problem.jobs, scale_factor=np.array([1, 1]))
    tables = (
        BidTable(2.0, (BundleBid(0, ((1, 1),), 1.0), BundleBid(1, (), 1.9))),
        BidTable(2.0, (BundleBid(0, ((1, 1),), 1.2),)),
    )
    fair = replace(FairnessInputs.empty(2), bids=tables)
    problem = replace(problem, cluster=cluster, jobs=jobs, fairness=fair)
    plan = themis(problem, fairness_knob=0.0)
    assert plan.auction is not None
    # both want node n1's device: job 0 values it more, job 1 takes nothing else it bid for
    assert plan.auction.outcomes[0].bundle == 0
    lease = plan.auction.leases[0]
    assert lease is not None and lease.nodes == ("n1",)
    assert plan.auction.outcomes[1].bundle == -1
    c = plan.auction.outcomes[0].kept_fraction
    assert math.isclose(c, (1 / 2.0) / (1 / 1.2), rel_tol=1e-9)


# --------------------------------------------------------------------------------------------
# the wire: a request end to end, and bad inputs with field paths


def request(**policy: Any) -> dict[str, Any]:
    return {
        "snapshot": {
            "time_s": 100,
            "cluster": {
                "accelerator_types": [{"name": "v100", "count": 2}, {"name": "k80", "count": 2}],
                "nodes": [{"name": "n1", "accelerator_type": "v100", "devices": 2},
                          {"name": "n2", "accelerator_type": "k80", "devices": 2}],
            },
            "jobs": [
                {"id": "a", "throughput": {"v100": 4, "k80": 1},
                 "progress": {"total_steps": 1000}},
                {"id": "b", "throughput": {"v100": 3, "k80": 2}, "scale_factor": 2,
                 "progress": {"total_steps": 500}},
                {"id": "c", "throughput": {"v100": 3, "k80": 2},
                 "themis_bids": {"rho_without": 1.5, "bundles": [
                     {"accelerator_type": "v100", "rho": 1.1},
                     {"accelerator_type": "k80", "node_devices": {"n2": 1}, "rho": 1.3}]}},
            ],
        },
        "policy": {"name": "themis_auction", **policy},
    }


def parse(data: dict[str, Any]) -> service_pb.SolveRequest:
    return json_format.ParseDict(data, service_pb.SolveRequest())


def test_a_request_end_to_end() -> None:
    response = solve_request(parse(request(themis_auction={"fairness_knob": 0.0})))
    assert response.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    jobs = {entry.job_id: entry for entry in response.plan.jobs}
    assert all(entry.HasField("auction") and entry.auction.offered for entry in jobs.values())
    won = [entry for entry in jobs.values() if entry.auction.HasField("kept_fraction")]
    assert won and all(entry.HasField("lease") for entry in won)
    assert all(0 < entry.lease.time_share <= 1 for entry in won)


def violations(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ValidationError) as info:
        request_to_model(parse(data))
    return {v.field: v.description for v in info.value.violations}


def _bids(data: dict[str, Any]) -> dict[str, Any]:
    bids: dict[str, Any] = data["snapshot"]["jobs"][2]["themis_bids"]
    return bids


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: _bids(d).update(bundles=[]), "snapshot.jobs[2].themis_bids.bundles"),
        (lambda d: _bids(d).update(rho_without=-1), "snapshot.jobs[2].themis_bids.rho_without"),
        (lambda d: _bids(d)["bundles"][0].update(accelerator_type="h100"),
         "snapshot.jobs[2].themis_bids.bundles[0].accelerator_type"),
        (lambda d: _bids(d)["bundles"][1].update(node_devices={"n9": 1}),
         'snapshot.jobs[2].themis_bids.bundles[1].node_devices["n9"]'),
        (lambda d: _bids(d)["bundles"][1].update(node_devices={"n1": 1}),
         'snapshot.jobs[2].themis_bids.bundles[1].node_devices["n1"]'),
        (lambda d: _bids(d)["bundles"][1].update(node_devices={"n2": 2}),
         "snapshot.jobs[2].themis_bids.bundles[1].node_devices"),
        (lambda d: _bids(d)["bundles"][1].update(rho="NaN"),
         "snapshot.jobs[2].themis_bids.bundles[1].rho"),
        (lambda d: _bids(d)["bundles"].append({"accelerator_type": "v100", "rho": 1.0}),
         "snapshot.jobs[2].themis_bids.bundles[2]"),
        (lambda d: d["snapshot"]["jobs"][0]["progress"].update(total_steps=0),
         "snapshot.jobs[0].progress.total_steps"),
        (lambda d: d["policy"].update(themis_auction={"fairness_knob": 1.0}),
         "policy.themis_auction.fairness_knob"),
        (lambda d: d["policy"].update(themis_auction={"lease_s": 0}),
         "policy.themis_auction.lease_s"),
        (lambda d: d["policy"].update(themis_auction={"divisible_shares": True}),
         "snapshot.jobs[2].themis_bids"),
        (lambda d: d["snapshot"].update(history={"jobs": [
            {"job_id": "a", "lease_expires_s": 500}]}), "snapshot.history.jobs[0].lease_expires_s"),
        (lambda d: d["snapshot"].update(history={"jobs": [
            {"job_id": "a", "lease_time_share": 1.5}]}),
         "snapshot.history.jobs[0].lease_time_share"),
    ],
)
def test_bad_inputs_are_field_errors(mutate: Any, field: str) -> None:
    data = request()
    mutate(data)
    assert field in violations(data)


# --------------------------------------------------------------------------------------------
# the deadline: cut at every place a solve looks at it


@pytest.mark.parametrize("divisible", [False, True])
def test_a_deadline_passing_at_any_check_gives_a_feasible_honest_plan(divisible: bool) -> None:
    """Ten jobs contest four devices (favourites do not all fit), so the proportional-fair
    program and the payment programs run. Whichever check the deadline passes at, the plan is
    feasible and work-conserving; it is `optimal` only when the deadline never passed, and
    with the deadline past from the start no program is built and every winner keeps its
    whole share."""
    problem = instance(3, m=10, counts=(2, 2))
    request = PolicyRequest("themis_auction", ThemisAuctionParameters(
        fairness_knob=0.0, divisible_shares=divisible))
    reference = solve(problem, request)
    assert reference.certificate.termination is Termination.OPTIMAL
    terminations = []
    for checks in range(40):
        plan = solve(problem, request, SolveOptions(), CountdownDeadline(checks=checks))
        cert = plan.certificate
        assert_work_conserving(problem, plan)
        if cert.termination is Termination.OPTIMAL:  # then it is the mechanism's answer
            assert np.allclose(plan.time_share, reference.time_share, atol=1e-9)
        else:
            assert cert.termination is Termination.FEASIBLE
        won = winners(plan)
        assert plan.auction is not None
        kept = np.array([o.kept_fraction for o in plan.auction.outcomes])[won]
        if checks == 0:
            assert won.any() and np.all(kept == 1.0)
            if not divisible:
                assert cert.model_size == ModelSize()  # no program was built
        terminations.append(cert.termination)
    assert terminations[0] is Termination.FEASIBLE
    assert terminations[-1] is Termination.OPTIMAL  # the countdown outlasts a whole solve


@pytest.mark.parametrize("spare", [0.5, 2.0])
def test_the_mechanism_leaves_the_placement_and_the_plan_their_time(
    spare: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the clock stopped, a deadline leaving the proportional-fair program its start-up
    time plus `spare` times what placement, leftover allocation and the plan are held back:
    with half of that held-back time (it would eat into it) the program is not started (the
    greedy's feasible plan); with twice of it, the program runs."""
    problem = instance(3, m=10, counts=(2, 2))
    request = PolicyRequest("themis_auction", ThemisAuctionParameters(fairness_knob=0.0))
    size = solve(problem, request).certificate.model_size
    assert size.nonzeros > 0  # the program runs without a deadline
    held = themis_module.PLAN_S_PER_JOB * 10 + themis_module.PLACE_S_PER_WINNER * 10
    monkeypatch.setattr(deadline_module, "time", FrozenClock)
    at = BUNDLE_MILP.seconds(size) + spare * held
    plan = solve(problem, request, SolveOptions(), Deadline(at))
    assert_work_conserving(problem, plan)
    if spare < 1:
        assert plan.certificate.model_size == ModelSize()
        assert plan.certificate.termination is Termination.FEASIBLE
    else:
        assert plan.certificate.model_size == size


@pytest.mark.parametrize("divisible", [False, True])
@pytest.mark.parametrize("share", [0.0, 0.9, 1.1])
def test_too_little_time_for_the_work_no_deadline_cuts_answers_at_once(
    divisible: bool, share: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bids, placement, leftover allocation and plan are not cut by the deadline: with the
    clock stopped and less time left than they take (none, or 90% of it), no plan and no
    program, `no_solution` saying why; with 10% more, a plan."""
    problem = instance(3, m=10, counts=(2, 2))
    knob = 0.5
    request = PolicyRequest("themis_auction", ThemisAuctionParameters(
        fairness_knob=knob, divisible_shares=divisible))
    offered = math.ceil((1 - knob) * 10)
    placing = 0.0 if divisible else themis_module.PLACE_S_PER_WINNER * offered
    uncut = (themis_module.START_S_PER_JOB + themis_module.PLAN_S_PER_JOB) * 10 + placing
    monkeypatch.setattr(deadline_module, "time", FrozenClock)
    plan = solve(problem, request, SolveOptions(), Deadline(share * uncut))
    cert = plan.certificate
    if share < 1:
        assert cert.termination is Termination.NO_SOLUTION
        assert "not started" in cert.detail and cert.model_size == ModelSize()
        assert plan.auction is None and not plan.time_share.any()
    else:
        assert cert.termination is not Termination.NO_SOLUTION and plan.auction is not None
        assert_work_conserving(problem, plan)
