"""Astraea (B3): the long-term GPU-time fairness property B3 proposes, the certificate's bound
by a second route, the two phases, leases, work conservation, and bad inputs.

* B3 property: with every tenant backlogged, after 200 leases each tenant's accumulated
  device-time over its entitlement (weight share of the devices while it has demand) is at
  least 1 - 0.02 when the cluster can be used fully (type counts multiples of every gang);
  otherwise the gangs leave devices idle and every tenant's ratio is below 1, equally (within
  0.02).
* The fractional bound equals scipy's LP of the same relaxation, and the greedy never beats the
  exact integer program (scipy milp) on tiny instances, which never beats the bound.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from apportion.formulations.astraea import fractional_bound, tenants_of
from apportion.formulations.fair_share import water_fill
from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.errors import ValidationError
from apportion.solver.fairness_model import FairnessInputs, TenantUsage
from apportion.solver.model import PolicyRequest, Problem, Tenant
from apportion.solver.parameters import AstraeaParameters
from apportion.solver.result import Plan
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem
from apportion.v1 import allocation_service_pb2 as service_pb

LEASE = 600.0


def tenants_problem(seed: int, jobs_per_tenant: int = 6, whole: bool = False) -> Problem:
    """2-4 tenants with weights 1-3; with `whole`, type counts are multiples of 4 (every gang
    divides them, so the cluster can be used fully)."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 5))
    m = k * jobs_per_tenant
    owner = np.repeat(np.arange(k), jobs_per_tenant)
    T = rng.uniform(1.0, 5.0, (m, 2))
    counts = [4 * int(rng.integers(1, 3)), 4] if whole else \
        [int(rng.integers(3, 9)), int(rng.integers(2, 6))]
    # a gang larger than every type is not a valid snapshot (make_problem validates)
    problem = make_problem(["a", "b"], counts, T,
                           scale_factor=np.minimum(rng.choice([1, 1, 2, 4], m), max(counts)),
                           priority_weight=rng.choice([1.0, 2.0], m))
    jobs = replace(problem.jobs, tenant=tuple(f"t{u}" for u in owner),
                   arrival_time_s=rng.uniform(0.0, 100.0, m))
    tenants = tuple(Tenant(f"t{u}", float(rng.integers(1, 4))) for u in range(k))
    return replace(problem, jobs=jobs, tenants=tenants)


def astraea(problem: Problem) -> Plan:
    return solve(problem, PolicyRequest("astraea", AstraeaParameters(lease_s=LEASE)))


def carry(fair: FairnessInputs, plan: Plan) -> FairnessInputs:
    assert plan.usage is not None
    return replace(fair, gpu_time_s=plan.usage.job_gpu_time_s, tenant_usage=plan.usage.tenants)


@given(st.integers(0, 10_000), st.booleans())
def test_backlogged_tenants_get_their_entitled_gpu_time_in_the_long_run(
    seed: int, whole: bool
) -> None:
    problem = tenants_problem(seed, jobs_per_tenant=12, whole=whole)
    fair = FairnessInputs.empty(problem.jobs.num_jobs)
    for step in range(200):
        fair = carry(fair, astraea(replace(problem, fairness=fair, time_s=step * LEASE)))
    demand = np.bincount(tenants_of(problem)[1], weights=problem.jobs.scale_factor)
    assert demand.min() >= problem.cluster.count.sum()  # every tenant is backlogged
    ratios = np.array([u.gpu_time_s / u.entitled_gpu_time_s for u in fair.tenant_usage])
    # tenants end up equally close to their entitlement, whatever the gangs leave idle
    assert ratios.max() - ratios.min() <= 0.02
    if whole:  # and at it when the cluster can be used fully
        assert ratios.min() >= 1 - 0.02
    total = sum(u.gpu_time_s for u in fair.tenant_usage)
    assert total <= problem.cluster.count.sum() * 200 * LEASE * (1 + 1e-9)


def test_the_entitlement_is_the_weight_share_while_a_tenant_has_demand() -> None:
    problem = make_problem(["g"], [10], np.ones((3, 1)), scale_factor=[1, 4, 4])
    jobs = replace(problem.jobs, tenant=("small", "big", "other"))
    problem = replace(problem, jobs=jobs, tenants=(Tenant("small", 3.0), Tenant("big", 1.0),
                                                   Tenant("other", 1.0)))
    plan = astraea(problem)
    assert plan.usage is not None
    names = [usage.tenant for usage in plan.usage.tenants]
    entitled = dict(zip(names, plan.usage.entitled_devices, strict=True))
    assert entitled == {"small": 1.0, "big": 4.0, "other": 4.0}  # all below their share of 10


@given(st.lists(st.floats(0.0, 1e4), min_size=1, max_size=6), st.data())
def test_the_fractional_bound_is_the_lp_of_the_relaxation(consumed: list[float],
                                                          data: st.DataObject) -> None:
    k = len(consumed)
    G = np.array(consumed)
    basis = np.array(data.draw(st.lists(st.floats(10.0, 1e4), min_size=k, max_size=k)))
    demand = np.array(data.draw(st.lists(st.integers(1, 8), min_size=k, max_size=k)), float)
    held = np.minimum(demand, data.draw(st.lists(st.integers(0, 3), min_size=k, max_size=k)))
    capacity = float(data.draw(st.integers(int(held.sum()), int(held.sum()) + 12)))
    ours = fractional_bound(G, basis, held, demand, capacity, LEASE)
    # variables a (k), t: maximize t s.t. t basis - L a <= G, sum a <= C, held <= a <= demand
    A = np.vstack([np.column_stack([-LEASE * np.eye(k), basis]),
                   np.concatenate([np.ones(k), [0.0]])[None, :]])
    b = np.concatenate([G, [capacity]])
    bounds = [(h, d) for h, d in zip(held, demand, strict=True)] + [(None, None)]
    lp = linprog(np.concatenate([np.zeros(k), [-1.0]]), A_ub=A, b_ub=b, bounds=bounds,
                 method="highs")
    assert lp.status == 0
    assert math.isclose(ours, -lp.fun, rel_tol=1e-7, abs_tol=1e-9)


def exact_min_ratio(problem: Problem, fair: FairnessInputs) -> float:
    """max over whole gangs on types of the smallest projected ratio (scipy milp)."""
    names, tenant, weights = tenants_of(problem)
    usage = {u.tenant: u for u in fair.tenant_usage}
    consumed = np.array([usage[u].gpu_time_s if u in usage else 0.0 for u in names])
    entitled = np.array([usage[u].entitled_gpu_time_s if u in usage else 0.0 for u in names])
    s = problem.jobs.scale_factor.astype(float)
    demand = np.bincount(tenant, weights=s, minlength=len(names))
    basis = entitled + water_fill(float(problem.cluster.count.sum()), weights, demand) * LEASE
    rows, cols = np.nonzero(problem.usable)
    k, m = rows.size, problem.jobs.num_jobs
    cap = sp.csr_matrix((s[rows], (cols, np.arange(k))), shape=(problem.cluster.num_types, k + 1))
    one = sp.csr_matrix((np.ones(k), (rows, np.arange(k))), shape=(m, k + 1))
    ratio = np.zeros((len(names), k + 1))
    ratio[tenant[rows], np.arange(k)] = -LEASE * s[rows] / basis[tenant[rows]]
    ratio[:, k] = 1.0
    A = sp.vstack([cap, one, sp.csr_matrix(ratio)])
    upper = np.concatenate([problem.cluster.count.astype(float), np.ones(m), consumed / basis])
    result = milp(np.concatenate([np.zeros(k), [-1.0]]),
                  constraints=LinearConstraint(A, -np.inf, upper),
                  bounds=Bounds(np.zeros(k + 1), np.concatenate([np.ones(k), [np.inf]])),
                  integrality=np.concatenate([np.ones(k), [0]]))
    assert result.status == 0
    return float(-result.fun)


@given(st.integers(0, 10_000), st.integers(0, 5))
def test_greedy_exact_and_bound_are_ordered(seed: int, history: int) -> None:
    problem = tenants_problem(seed, jobs_per_tenant=3)
    fair = FairnessInputs.empty(problem.jobs.num_jobs)
    for step in range(history):
        fair = carry(fair, astraea(replace(problem, fairness=fair, time_s=step * LEASE)))
    problem = replace(problem, fairness=fair, time_s=history * LEASE)
    plan = astraea(problem)
    cert = plan.certificate
    assert cert.objective is not None and cert.bound is not None
    exact = exact_min_ratio(problem, fair)
    assert cert.objective <= exact + 1e-9 <= cert.bound + 2e-9


@given(st.integers(0, 10_000))
def test_one_lease_is_work_conserving_and_follows_the_two_phases(seed: int) -> None:
    problem = tenants_problem(seed)
    m = problem.jobs.num_jobs
    rng = np.random.default_rng(seed)
    fair = replace(FairnessInputs.empty(m), gpu_time_s=rng.uniform(0.0, 1e4, m))
    plan = astraea(replace(problem, fairness=fair))
    X = plan.time_share
    runs = X.sum(axis=1) > 0
    assert np.all((X == 0) | (X == 1)) and np.all(X.sum(axis=1) <= 1)
    s = problem.jobs.scale_factor
    free = problem.cluster.count - s @ X
    assert np.all(free >= 0)
    for i in np.flatnonzero(~runs):  # nothing waiting fits the idle devices
        assert not np.any(problem.usable[i] & (s[i] <= free))
    # job phase: inside a tenant, a waiting job never has less attained device-time per
    # weight than a running one with the same scale factor
    attained = fair.gpu_time_s / problem.jobs.priority_weight
    tenant = np.array(problem.jobs.tenant)
    for i in np.flatnonzero(~runs):
        peers = runs & (tenant == tenant[i]) & (s == s[i])
        assert np.all(attained[peers] <= attained[i] + 1e-9)


def test_an_unexpired_lease_is_kept() -> None:
    problem = tenants_problem(3)
    m = problem.jobs.num_jobs
    current = np.full(m, -1, np.int64)
    devices = np.zeros(m, np.int64)
    current[0], devices[0] = 1, problem.jobs.scale_factor[0]
    fair = FairnessInputs.empty(m)
    expires = fair.lease_expires_s.copy()
    expires[0] = 900.0
    problem = replace(problem, time_s=600.0,
                      history=replace(problem.history, current_type=current,
                                      current_devices=devices),
                      fairness=replace(fair, lease_expires_s=expires))
    plan = astraea(problem)
    assert plan.usage is not None
    lease = plan.usage.leases[0]
    assert lease is not None and lease.kept and lease.expires_s == 900.0
    assert plan.time_share[0, 1] == 1.0
    for other in plan.usage.leases[1:]:
        assert other is None or (other.expires_s == 600.0 + LEASE and not other.kept)


# --------------------------------------------------------------------------------------------
# the wire


def request(**policy: Any) -> dict[str, Any]:
    return {
        "snapshot": {
            "time_s": 600,
            "cluster": {"accelerator_types": [{"name": "v100", "count": 4}]},
            "tenants": [{"name": "a", "weight": 2}, {"name": "b"}],
            "jobs": [
                {"id": "j1", "tenant": "a", "throughput": {"v100": 4}},
                {"id": "j2", "tenant": "b", "throughput": {"v100": 3}, "scale_factor": 2},
                {"id": "j3", "tenant": "b", "throughput": {"v100": 3}, "scale_factor": 2},
            ],
            "tenant_usage": [{"tenant": "a", "gpu_time_s": 100, "entitled_gpu_time_s": 900}],
            "history": {"jobs": [{"job_id": "j2", "gpu_time_s": 50}]},
        },
        "policy": {"name": "astraea", **policy},
    }


def parse(data: dict[str, Any]) -> service_pb.SolveRequest:
    return json_format.ParseDict(data, service_pb.SolveRequest())


def test_a_request_end_to_end_returns_the_state_to_send_back() -> None:
    response = solve_request(parse(request()))
    assert response.stats.termination == service_pb.TERMINATION_REASON_HEURISTIC
    usage = {u.tenant: u for u in response.plan.tenant_usage}
    assert set(usage) == {"a", "b"}
    # tenant a is far behind: its only job runs; b gets the rest
    jobs = {entry.job_id: entry for entry in response.plan.jobs}
    assert jobs["j1"].HasField("lease") and jobs["j1"].lease.expires_s == 1200
    assert math.isclose(usage["a"].gpu_time_s, 100 + 600)
    assert jobs["j2"].gpu_time_s in (50.0, 50.0 + 1200)
    sent_back = request()
    sent_back["snapshot"]["tenant_usage"] = [
        {"tenant": u.tenant, "gpu_time_s": u.gpu_time_s,
         "entitled_gpu_time_s": u.entitled_gpu_time_s} for u in usage.values()]
    solve_request(parse(sent_back))


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d["snapshot"]["tenant_usage"][0].update(gpu_time_s=-1),
         "snapshot.tenant_usage[0].gpu_time_s"),
        (lambda d: d["snapshot"]["tenant_usage"].append({"tenant": "a"}),
         "snapshot.tenant_usage[1].tenant"),
        (lambda d: d["snapshot"]["tenant_usage"].append({"tenant": ""}),
         "snapshot.tenant_usage[1].tenant"),
        (lambda d: d["snapshot"]["history"]["jobs"][0].update(gpu_time_s="Infinity"),
         "snapshot.history.jobs[0].gpu_time_s"),
        (lambda d: d["policy"].update(astraea={"lease_s": -5}), "policy.astraea.lease_s"),
        (lambda d: d["snapshot"]["tenants"][1].update(weight=0), "snapshot.tenants[1].weight"),
    ],
)
def test_bad_inputs_are_field_errors(mutate: Any, field: str) -> None:
    data = request()
    mutate(data)
    with pytest.raises(ValidationError) as info:
        request_to_model(parse(data))
    assert field in {v.field for v in info.value.violations}


def test_usage_of_tenants_without_jobs_is_carried_over() -> None:
    problem = tenants_problem(1)
    fair = replace(FairnessInputs.empty(problem.jobs.num_jobs),
                   tenant_usage=(TenantUsage("gone", 5.0, 7.0),))
    plan = astraea(replace(problem, fairness=fair))
    assert plan.usage is not None
    assert TenantUsage("gone", 5.0, 7.0) in plan.usage.tenants
