"""State a round passes to the next, for policies that read it from `history` and
`tenant_usage` (Themis's auction leases, Astraea's leases and long-term device-time):

* Astraea: every snapshot's device-time used per job equals the GPU-seconds the run's grants
  gave the job before it (devices x time held, from the grants and finish times only), per
  tenant the sum over its jobs (finished ones included); the entitled device-time grows
  between two snapshots by exactly the entitled devices of the plan in force times the
  simulated time between them.
* Leases (Themis's auction, Astraea): the lease a snapshot sends for a job is the one the
  previous plan granted, while the job still holds devices and the lease has not ended;
  none otherwise.
* The snapshots round-trip through the service's conversion.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from apportion.simulator import engine
from apportion.simulator.cluster import parse_cluster
from apportion.simulator.metrics import RunResult
from apportion.simulator.plans import Decision
from apportion.simulator.solvers import InProcessSolver
from apportion.solver.model import Problem
from tests.simulator.tiny import mixed_jobs, run, workload

NODES = parse_cluster("fast:4:2,slow:4:2")
ROUND_S = 100.0


def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Problem, Decision]]:
    seen: list[tuple[Problem, Decision]] = []

    class Recording(InProcessSolver):
        def __call__(self, problem: Problem, kind: Any) -> Decision:
            decision = super().__call__(problem, kind)
            seen.append((problem, decision))
            return decision

    monkeypatch.setattr(engine, "InProcessSolver", Recording)
    return seen


def tenant_workload() -> Any:
    jobs = [*mixed_jobs(), ("g", 90.0, 1, 800.0, [2.0, 1.0]), ("h", 170.0, 2, 900.0, [1.0, 1.0])]
    w = workload(jobs)
    return replace(w, tenant=("x", "y", "x", "", "y", "x", "y", "x"))


def device_seconds_before(result: RunResult, t: float) -> np.ndarray:
    """(m,) GPU-seconds each job held in the rounds that started before `t`."""
    g, jobs = result.grants, result.jobs
    start = dict(zip(result.rounds["round"].tolist(), result.rounds["start_s"].tolist(),
                     strict=True))
    out = np.zeros(len(jobs["finish_s"]))
    for r, i, d in zip(g["round"].tolist(), g["job"].tolist(), g["devices"].tolist(),
                       strict=True):
        if start[r] < t - 1e-9:
            out[i] += d * min(ROUND_S, float(jobs["finish_s"][i]) - start[r])
    return out


def test_astraea_device_time_is_what_the_grants_gave(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = recorded(monkeypatch)
    w = tenant_workload()
    result = run(w, NODES, policy="astraea", round_s=ROUND_S)
    assert result.jobs["finished"].all()
    index = {job_id: i for i, job_id in enumerate(w.ids)}
    starts = result.rounds["start_s"]
    grew = 0
    for k, (problem, _) in enumerate(seen):
        t = problem.time_s
        held = device_seconds_before(result, t)
        fair = problem.fairness
        if k == 0:
            assert fair is None
            continue
        assert fair is not None
        rows = [index[x] for x in problem.jobs.ids]
        np.testing.assert_allclose(fair.gpu_time_s, held[rows], rtol=1e-12, atol=1e-9)
        per_tenant: dict[str, float] = {}
        for i in np.flatnonzero(held > 0).tolist():
            key = w.tenant[i] or w.ids[i]
            per_tenant[key] = per_tenant.get(key, 0.0) + float(held[i])
        used = {u.tenant: u.gpu_time_s for u in fair.tenant_usage}
        assert used.keys() >= per_tenant.keys()
        for key, value in per_tenant.items():
            assert used[key] == pytest.approx(value, rel=1e-12)
        # entitlement: the previous plan's entitled devices x simulated time since then
        before, decision = seen[k - 1]
        rates = dict(decision.carry.entitled_devices or ())
        assert rates, "astraea's plan names the tenants' entitled devices"
        simulated = ROUND_S * int(((starts >= before.time_s - 1e-9) & (starts < t - 1e-9)).sum())
        was = {u.tenant: u.entitled_gpu_time_s
               for u in (before.fairness.tenant_usage if before.fairness else ())}
        now = {u.tenant: u.entitled_gpu_time_s for u in fair.tenant_usage}
        for tenant in now.keys() | rates.keys():
            expected = was.get(tenant, 0.0) + rates.get(tenant, 0.0) * simulated
            assert now.get(tenant, 0.0) == pytest.approx(expected, rel=1e-12, abs=1e-9)
        grew += int(fair.gpu_time_s.sum() > 0)
    assert grew >= 2, "too few snapshots carried device-time for the test to say anything"


@pytest.mark.parametrize("policy", ["themis_auction", "astraea"])
def test_leases_are_the_previous_plans(monkeypatch: pytest.MonkeyPatch, policy: str) -> None:
    seen = recorded(monkeypatch)
    w = tenant_workload()
    run(w, NODES, policy=policy, round_s=ROUND_S)
    granted: dict[str, tuple[float, float]] = {}
    carried = 0
    for problem, decision in seen:
        t = problem.time_s
        fair = problem.fairness
        for row, job_id in enumerate(problem.jobs.ids):
            sent = (0.0, 1.0) if fair is None else (float(fair.lease_expires_s[row]),
                                                   float(fair.lease_time_share[row]))
            holds = problem.history.current_type[row] >= 0
            end, share = granted.get(job_id, (0.0, 1.0))
            expected = (end, share) if holds and end > t else (0.0, 1.0)
            assert sent == expected, (policy, t, job_id)
            carried += int(sent[0] > 0)
        ends, shares = decision.carry.lease_expires_s, decision.carry.lease_time_share
        assert ends is not None and shares is not None
        for row, job_id in enumerate(problem.jobs.ids):
            granted[job_id] = (float(ends[row]), float(shares[row]))
    assert carried > 0, "no lease was ever carried: the test says nothing"


@pytest.mark.parametrize("policy", ["themis_auction", "astraea"])
def test_carried_state_round_trips(monkeypatch: pytest.MonkeyPatch, policy: str) -> None:
    from tests.simulator.test_wire import assert_round_trips
    from tests.simulator.test_wire import recorded as recorded_requests

    seen = recorded_requests(monkeypatch)
    run(tenant_workload(), NODES, policy=policy, round_s=ROUND_S)
    assert_round_trips(seen)
    assert any(p.fairness is not None and p.fairness.lease_expires_s.any() for p, _, _ in seen)
