"""A fairness plan's per-job state in the response: Gandiva_fair's stride passes and Astraea's
device-time are written with the allocations' records (the plan stays serialized unless a
section needs the messages) and equal the plan's, with the plan-level sections beside them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.server.lease_wire import lease_fields
from apportion.server.response import _core_only, plan_response
from apportion.solver.fairness_result import Lease
from apportion.solver.model import PolicyRequest
from apportion.solver.parameters import AstraeaParameters, GandivaFairParameters
from apportion.solver.solve import solve
from apportion.v1 import allocation_service_pb2 as service_pb
from tests.formulations.test_astraea import LEASE, tenants_problem
from tests.formulations.test_gandiva_fair import users_problem
from tests.server.test_plan_wire import DOUBLES, same


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
    assert any(leased) and _core_only(plan)  # the leases too go with the jobs' records
    for job, lease in zip(jobs, plan.usage.leases, strict=True):
        if lease is not None:
            assert same(job.lease, built_lease(lease, list(problem.cluster.type_names)))


def built_lease(lease: Lease, names: list[str]) -> service_pb.Lease:
    """The reference: the message set field by field."""
    out = service_pb.Lease()
    out.accelerator_type = names[lease.type_index]
    out.devices = lease.devices
    out.nodes.extend(lease.nodes)
    out.expires_s = lease.expires_s
    out.time_share = lease.time_share
    out.kept = lease.kept
    return out


@st.composite
def leases(draw: st.DrawFn) -> tuple[tuple[Lease | None, ...], int, list[str]]:
    names = draw(st.lists(st.sampled_from(["v100", "p100", "é", "t" * 130, ""]), min_size=1,
                          max_size=3, unique=True))
    m = draw(st.integers(0, 6))
    lease = st.builds(
        Lease, type_index=st.integers(0, len(names) - 1),
        devices=st.one_of(st.integers(0, 8), st.integers(-(2**31), 2**31 - 1)),
        nodes=st.lists(st.sampled_from(["n0", "n1", "", "ü" * 70]), max_size=3).map(tuple),
        expires_s=DOUBLES, time_share=DOUBLES, kept=st.booleans())
    listed = draw(st.lists(st.none() | lease, min_size=max(m - 1, 0), max_size=m + 1))
    return tuple(listed), m, names


@given(leases())
def test_leases_written_from_columns_are_the_messages(case: tuple[Any, ...]) -> None:
    listed, m, names = case
    data, length = lease_fields(listed, m, names).bodies()
    assert length.size == m
    starts = np.cumsum(length) - length
    for k in range(m):
        job = service_pb.JobAllocation.FromString(data[starts[k]:starts[k] + length[k]].tobytes())
        lease = listed[k] if k < len(listed) else None
        assert job.HasField("lease") == (lease is not None)
        if lease is not None:
            assert same(job.lease, built_lease(lease, names))
