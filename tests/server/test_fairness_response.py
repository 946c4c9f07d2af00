"""A fairness plan's per-job state in the response: Gandiva_fair's stride passes and Astraea's
device-time are written with the allocations' records (the plan stays serialized unless a
section needs the messages) and equal the plan's, with the plan-level sections beside them."""

from __future__ import annotations

import math

import pytest

from apportion.server.response import _core_only, plan_response
from apportion.solver.model import PolicyRequest
from apportion.solver.parameters import AstraeaParameters, GandivaFairParameters
from apportion.solver.solve import solve
from tests.formulations.test_astraea import LEASE, tenants_problem
from tests.formulations.test_gandiva_fair import users_problem


@pytest.mark.parametrize("seed", range(4))
def test_stride_passes_are_each_jobs(seed: int) -> None:
    problem, _, _ = users_problem(seed, types=2)
    policy = PolicyRequest("gandiva_fair", GandivaFairParameters())
    plan = solve(problem, policy)
    assert plan.stride is not None
    response = plan_response(plan, problem, policy, 0.0, 0.0).message()
    jobs = response.plan.jobs
    assert len(jobs) == problem.jobs.num_jobs
    for job, value in zip(jobs, plan.stride.stride_pass.tolist(), strict=True):
        assert job.HasField("stride_pass") == math.isfinite(value)
        if math.isfinite(value):
            assert job.stride_pass == value
    assert len(response.plan.user_shares) == len(plan.stride.users)
    assert len(response.plan.trades) == len(plan.stride.trades)


@pytest.mark.parametrize("seed", range(4))
def test_device_time_is_each_jobs(seed: int) -> None:
    problem = tenants_problem(seed)
    policy = PolicyRequest("astraea", AstraeaParameters(lease_s=LEASE))
    plan = solve(problem, policy)
    assert plan.usage is not None
    response = plan_response(plan, problem, policy, 0.0, 0.0).message()
    jobs = response.plan.jobs
    assert [job.gpu_time_s for job in jobs] == plan.usage.job_gpu_time_s.tolist()
    assert all(job.HasField("gpu_time_s") for job in jobs)
    assert len(response.plan.tenant_usage) == len(plan.usage.tenants)
    leased = [lease is not None for lease in plan.usage.leases]
    assert [job.HasField("lease") for job in jobs] == leased
    assert _core_only(plan) == (not any(leased))
