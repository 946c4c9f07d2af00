"""Sia's cross-type bootstrapping (A5.3, docs/policies/sia.md) through the snapshot: a job with a
Pollux model on one type and 1-GPU seed throughputs on others gets goodput on the others by
projection (the source type's best goodput at the same GPU count on ceil(g / G_s) nodes,
times the seed ratio); without a seed nothing changes; bad seeds are field-path errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from google.protobuf import json_format

from apportion.formulations.pollux_model import BatchLimits, GradParams, best_goodput
from apportion.formulations.sia import bootstrap_sources, goodput_table
from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.errors import ValidationError
from apportion.solver.model import PerfParams, PolluxJobModel
from apportion.v1 import allocation_service_pb2 as service_pb
from tests.formulations.test_sia import CLUSTER

T4 = {"alphaC": 0.05, "betaC": 0.004, "alphaN": 0.3, "betaN": 0.01, "alphaR": 0.1,
      "betaR": 0.005, "gamma": 1.5}


def request(seeds: dict[str, float] | None) -> service_pb.SolveRequest:
    """16 A100 on two 8-GPU nodes, 4 T4 on one node; one job modelled on t4 only."""
    pollux: dict[str, object] = {
        "perfParams": {"t4": T4}, "gradSqr": 1, "gradVar": 10, "initBatchSize": 32,
        "maxBatchSize": 512, "minLocalBatchSize": 4, "maxLocalBatchSize": 128,
    }
    if seeds is not None:
        pollux["seedThroughput"] = seeds
    body = {
        "snapshot": {
            "timeS": 1000,
            "cluster": CLUSTER,
            "jobs": [{"id": "j", "pollux": pollux}],
        },
        "policy": {"name": "sia"},
    }
    return json_format.ParseDict(body, service_pb.SolveRequest())


def test_a_seeded_type_gets_the_projected_goodput() -> None:
    problem, _, _ = request_to_model(request({"t4": 50.0, "a100": 200.0}))
    table = goodput_table(problem, 64)
    theta = PerfParams(*(T4[k] for k in ("alphaC", "betaC", "alphaN", "betaN", "alphaR",
                                         "betaR", "gamma")))
    grad, limits = GradParams(1.0, 10.0), BatchLimits(32, 512, 4, 128)
    types = problem.cluster.type_names
    a100 = 0
    for k, conf in enumerate(table.configs):
        on_t4 = best_goodput(theta, grad, limits,
                             math.ceil(conf.devices / 4), conf.devices).goodput
        if types[conf.type_index] == "a100":  # projected from t4 (G_s = 4), ratio 200 / 50
            assert table.raw[0, k] == pytest.approx(on_t4 * 4.0, rel=1e-12)
            a100 += table.raw[0, k] > 0
        else:
            assert table.raw[0, k] == pytest.approx(
                best_goodput(theta, grad, limits, conf.nodes, conf.devices).goodput, rel=1e-12)
    assert a100 > 0


def test_without_a_seed_the_type_stays_unusable() -> None:
    for seeds in (None, {"t4": 50.0}, {"a100": 200.0}):
        problem, _, _ = request_to_model(request(seeds))
        table = goodput_table(problem, 64)
        on_a100 = [k for k, c in enumerate(table.configs)
                   if problem.cluster.type_names[c.type_index] == "a100"]
        assert np.all(table.raw[0, on_a100] == 0)


def test_the_seeded_job_is_solved_and_can_use_the_projected_type() -> None:
    """Seeds that make a100 16x faster than t4 per GPU: the job leaves t4 for a100."""
    response = solve_request(request({"t4": 10.0, "a100": 160.0}))
    assert response.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    (job,) = response.plan.jobs
    assert job.configuration.accelerator_type == "a100"
    assert job.configuration.atomic_batch_size > 0
    plain = solve_request(request(None))
    assert plain.plan.jobs[0].configuration.accelerator_type == "t4"


def test_the_source_is_the_modelled_type_with_the_closest_seed() -> None:
    row = [0.05, 0.004, 0.3, 0.01, 0.1, 0.005, 1.5]
    nan = [math.nan] * 7
    model = PolluxJobModel(np.array([row, nan, row, nan]), 1.0, 10.0, 32, 512, 4, 128,
                           seed_throughput=np.array([10.0, 3.0, 2.0, 0.0]))
    # type 1 (seed 3): |log 2/3| < |log 10/3|, so type 2; type 3 has no seed; modelled: -1
    assert bootstrap_sources(model).tolist() == [-1, 2, -1, -1]


@pytest.mark.parametrize(("seeds", "path"), [
    ({"h100": 1.0}, "snapshot.jobs[0].pollux.seed_throughput['h100']"),
    ({"a100": -1.0}, "snapshot.jobs[0].pollux.seed_throughput['a100']"),
    ({"a100": "NaN"}, "snapshot.jobs[0].pollux.seed_throughput['a100']"),
])
def test_bad_seeds_are_field_path_errors(seeds: dict[str, object], path: str) -> None:
    with pytest.raises(ValidationError) as info:
        request_to_model(request(seeds))  # type: ignore[arg-type]
    assert path in {v.field for v in info.value.violations}
