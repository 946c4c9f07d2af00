"""`apportion.testing`'s strategies: valid snapshots for every registered policy (their plans
are checked in test_check_plan), the degenerate cases the defaults promise, the keywords
honoured, and invalid snapshots rejected at the field path each names."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

import apportion
from apportion.solver.model import Problem
from apportion.solver.registry import known_names
from apportion.testing import (
    InvalidSnapshot,
    clusters,
    invalid_snapshots,
    problems,
    snapshots,
)
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

FIND = settings(max_examples=500, database=None, phases=[Phase.generate],
                suppress_health_check=list(HealthCheck))


def _counts(request: service_pb.SolveRequest) -> list[int]:
    return [t.count for t in request.snapshot.cluster.accelerator_types]


def _gangs(request: service_pb.SolveRequest) -> list[int]:
    return [job.scale_factor or 1 for job in request.snapshot.jobs]


@pytest.mark.parametrize(
    ("case", "holds"),
    [
        ("no jobs", lambda r: not r.snapshot.jobs),
        ("a single type", lambda r: len(r.snapshot.cluster.accelerator_types) == 1
         and len(r.snapshot.jobs) > 1),
        ("a type without devices", lambda r: 0 in _counts(r) and len(r.snapshot.jobs) > 0),
        ("a zero throughput written", lambda r: any(
            value == 0 for job in r.snapshot.jobs for value in job.throughput.values())),
        ("a type missing from a job's throughputs", lambda r: any(
            len(job.throughput) < len(r.snapshot.cluster.accelerator_types)
            for job in r.snapshot.jobs)),
        ("a gang as large as a type", lambda r: any(
            gang > 1 and gang in _counts(r) for gang in _gangs(r))),
        ("a gang too large for some type", lambda r: any(
            gang > min(_counts(r)) for gang in _gangs(r))),
    ],
)
def test_the_defaults_reach_the_degenerate_cases(case: str, holds: object) -> None:
    found = find(snapshots(), holds, settings=FIND)  # type: ignore[arg-type]
    apportion.validate(found)  # and they are valid


@settings(max_examples=10)
@given(problems("min_makespan", jobs=st.just(3), types=st.just(2), count=st.just(4),
                throughput=st.just(2.0), scale_factor=st.just(2), priority_weight=st.none(),
                remaining_steps=st.just(1000.0), full_gangs=False))
def test_the_keywords_are_honoured(problem: Problem) -> None:
    assert problem.jobs.num_jobs == 3 and problem.cluster.num_types == 2
    assert problem.cluster.count.tolist() == [4, 4] or problem.cluster.node_names
    assert (problem.jobs.throughput == 2.0).all()
    assert problem.jobs.scale_factor.tolist() == [2, 2, 2]
    assert problem.jobs.priority_weight.tolist() == [1.0, 1.0, 1.0]
    assert problem.jobs.remaining_steps.tolist() == pytest.approx([1000.0] * 3)


@settings(max_examples=25)
@given(clusters(nodes=True))
def test_cluster_nodes_hold_every_device(cluster: snapshot_pb.Cluster) -> None:
    for accelerator in cluster.accelerator_types:
        held = sum(n.devices for n in cluster.nodes if n.accelerator_type == accelerator.name)
        assert held == accelerator.count
    assert sum(t.count for t in cluster.accelerator_types) >= 1


@pytest.mark.parametrize("name", known_names())
def test_invalid_snapshots_are_rejected_at_their_field(name: str) -> None:
    @settings(max_examples=10, suppress_health_check=[HealthCheck.too_slow])
    @given(invalid_snapshots(name))
    def rejected(invalid: InvalidSnapshot) -> None:
        with pytest.raises(apportion.ValidationError) as raised:
            apportion.validate(invalid.request)
        fields = [violation.field for violation in raised.value.violations]
        assert invalid.field in fields, (invalid.defect, fields)

    rejected()


def test_check_plan_does_not_need_hypothesis() -> None:
    code = ("import sys; from apportion.testing import check_plan; "
            "print('hypothesis' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=True)
    assert result.stdout.strip() == "False"
