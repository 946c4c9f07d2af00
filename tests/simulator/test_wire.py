"""Model -> wire -> model: the snapshots a simulation builds, written as `SolveRequest`s by
`simulator.wire` and read back by the service's own conversion
(`apportion.server.convert.request_to_model`), are the same models, field by field, for
every plan kind and with the state a client carries (FTF's C_i/iso_i/R_i, Shockwave's
reference state, Gandiva's pairs, co-location rates, configurations, current placements on
nodes). Policies with parameters of every registered type round-trip too."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

from apportion.server.convert import request_to_model
from apportion.simulator import engine
from apportion.simulator.cluster import parse_cluster, single_type
from apportion.simulator.fidelity import Fidelity
from apportion.simulator.solvers import InProcessSolver
from apportion.simulator.wire import policy_message, request_message
from apportion.solver.model import (
    Compat,
    PolicyRequest,
    Problem,
    SolveOptions,
    SolverPreference,
)
from apportion.solver.parameters import ShockwaveParameters, SiaParameters
from apportion.solver.registry import policies, resolve_parameters
from apportion.v1 import policy_pb2 as policy_pb
from tests.simulator.tiny import epoch_workload, mixed_jobs, run, workload


def same(a: Any, b: Any, path: str = "") -> None:
    """Deep equality of models (arrays by value and dtype kind, NaN equal to NaN)."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), f"{path}: {type(a)} != {type(b)}"
        for f in dataclasses.fields(a):
            same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        x, y = np.asarray(a), np.asarray(b)
        assert x.shape == y.shape, f"{path}: shape {x.shape} != {y.shape}"
        assert x.dtype.kind == y.dtype.kind, f"{path}: dtype {x.dtype} != {y.dtype}"
        if x.dtype.kind == "f":
            np.testing.assert_array_equal(x, y, err_msg=path)
        else:
            assert np.array_equal(x, y), path
    elif isinstance(a, tuple | list):
        assert len(a) == len(b), f"{path}: length {len(a)} != {len(b)}"
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{path}[{k}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), path
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Problem, PolicyRequest, SolveOptions]]:
    """Every (problem, policy, options) the simulation solves in this test."""
    seen: list[tuple[Problem, PolicyRequest, SolveOptions]] = []

    class Recording(InProcessSolver):
        def __call__(self, problem: Problem, kind: Any) -> Any:
            seen.append((problem, self.policy, self.options))
            return super().__call__(problem, kind)

    monkeypatch.setattr(engine, "InProcessSolver", Recording)
    return seen


def assert_round_trips(seen: list[tuple[Problem, PolicyRequest, SolveOptions]]) -> None:
    assert seen
    for problem, policy, options in seen:
        back, policy_back, options_back = request_to_model(
            request_message(problem, policy, options)
        )
        same(back, problem, "problem")
        same(policy_back, policy, "policy")
        same(options_back, options, "options")


NODES = parse_cluster("fast:4:2,slow:4:2")


@pytest.mark.parametrize(
    "policy",
    ["max_min_fairness_perf", "finish_time_fairness_perf", "fifo", "fisher_market",
     "min_makespan", "hierarchical_max_min_fairness", "gandiva_fair", "themis_auction",
     "astraea", "tiresias"],
)
def test_time_share_snapshots_round_trip(monkeypatch: pytest.MonkeyPatch, policy: str) -> None:
    seen = recorded(monkeypatch)
    solver = SolverPreference.AUTO
    if policy == "max_min_fairness_perf":
        solver = SolverPreference.CLARABEL
    run(workload(mixed_jobs()[:4]), NODES, policy=policy, round_s=100.0, resolve_every=2,
        fidelity=Fidelity(estimate_error=0.3, seed=1), solver=solver)
    assert_round_trips(seen)
    assert all(options.solver is solver for _, _, options in seen)
    if policy == "gandiva_fair":  # later snapshots carry the stride passes
        assert any(p.fairness is not None for p, _, _ in seen)
    if policy == "finish_time_fairness_perf":  # later snapshots carry C_i, iso_i and R_i
        assert any(np.isfinite(p.history.previous_isolated_throughput).any() for p, _, _ in seen)


def test_queue_snapshots_with_running_jobs_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = recorded(monkeypatch)
    jobs = [(j, a, 1, t, thr) for j, a, _, t, thr in mixed_jobs()[:4]]
    run(workload(jobs), NODES, policy="allox", round_s=100.0)
    assert_round_trips(seen)
    assert any((p.history.current_type >= 0).any() for p, _, _ in seen)


def test_configuration_snapshots_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = recorded(monkeypatch)
    jobs = mixed_jobs()[:4]
    configs = [[(t, n, d, float(thr[t]) * d / s) for t in range(2) for n, d in ((1, 1), (1, 2))]
               for _, _, s, _, thr in jobs]
    run(workload(jobs, configurations=configs), NODES, policy="sia", round_s=100.0,
        fidelity=Fidelity(restart_overhead_s=12.0))
    assert_round_trips(seen)
    assert all(p.jobs.restart_penalty_s.tolist() == [12.0] * p.jobs.num_jobs for p, _, _ in seen)


def test_window_snapshots_with_reference_state_round_trip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = recorded(monkeypatch)
    w = epoch_workload([("a", 0.0, 1, [100.0, 80.0, 60.0]), ("b", 0.0, 2, [90.0, 90.0]),
                        ("c", 150.0, 1, [200.0]), ("d", 300.0, 2, [50.0, 50.0, 50.0])])
    run(w, single_type(4), policy="shockwave", round_s=60.0,
        parameters=ShockwaveParameters(planning_rounds=4), compat=Compat.SHOCKWAVE,
        fidelity=Fidelity(recalibrate=True))
    assert_round_trips(seen)
    assert any(p.history.reference_state is not None for p, _, _ in seen)
    assert any((p.jobs.measured_run_time_s > 0).any() for p, _, _ in seen)


def test_space_sharing_snapshots_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gandiva with type-pair rates: job types, type colocations and the previous pairs."""
    from apportion.datasets.generators import gavel_workload, pair_throughputs, throughput_table
    from apportion.simulator.workload import workload_from_table

    seen = recorded(monkeypatch)
    cluster = parse_cluster("v100:2,k80:2")
    table = pair_throughputs(throughput_table(cluster.types, seed=3), seed=4)
    jobs = gavel_workload(8, seed=1, table=table, jobs_per_hour=30.0,
                          scale_probabilities=(1.0, 0, 0, 0))
    w, _ = workload_from_table(jobs, cluster, table, colocations=True)
    run(w, cluster, policy="gandiva", round_s=360.0)
    assert_round_trips(seen)
    assert any(p.colocations is not None for p, _, _ in seen)
    assert any(p.history.colocated_with.size for p, _, _ in seen)


def _policy(msg: Any, violations: list[Any]) -> PolicyRequest | None:
    """The service's reading of a policy message (None for an unknown name)."""
    from apportion.server.policy_inputs import policy_to_model

    read = policy_to_model(msg, violations)
    return None if read is None else read[1]


@pytest.mark.parametrize("spec", policies(), ids=lambda s: s.name)
def test_every_registered_policy_round_trips(spec: Any) -> None:
    for name in [spec.name, *spec.aliases]:
        request = PolicyRequest(spec.name, resolve_parameters(spec, name, None), Compat.GAVEL,
                                requested_name=name)
        violations: list[Any] = []
        back = _policy(policy_message(request), violations)
        # defaults that need data from the user (2D-Gittins's service samples) are refused
        # the same way when the request names the policy alone
        alone: list[Any] = []
        _policy(policy_pb.Policy(name=name, compat=policy_pb.COMPAT_GAVEL), alone)
        assert violations == alone, (name, violations)
        same(back, request, name)


def test_non_default_parameters_round_trip() -> None:
    from apportion.solver.parameters import RemainingTimePredictor

    for request in (
        PolicyRequest("shockwave", ShockwaveParameters(
            planning_rounds=7, makespan_weight=0.5, fairness_exponent=3.0, rho_max=1.5,
            predictor=RemainingTimePredictor.ORACLE, work_conserving_fill=False),
            requested_name="shockwave"),
        PolicyRequest("sia", SiaParameters(fairness_power=0.5, no_allocation_penalty=-2.0,
                                           max_gpus=16, pin_running=True,
                                           max_nodes_per_type=(("fast", 2),)),
                      requested_name="sia"),
        PolicyRequest("sia", SiaParameters(max_nodes_per_type=()), requested_name="sia"),
    ):
        violations: list[Any] = []
        same(_policy(policy_message(request), violations), request, request.name)
        assert violations == []


@pytest.mark.parametrize("compat", list(Compat))
def test_every_compat_mode_reaches_the_service(compat: Compat) -> None:
    """`apportion simulate --compat X --server` sends X: the service reads back the same
    mode for every value of the model's Compat."""
    violations: list[Any] = []
    spec = next(s for s in policies() if s.name == "weighted_max_min_fairness")
    params = resolve_parameters(spec, spec.name, None)
    sent = policy_message(PolicyRequest(spec.name, params, compat=compat))
    read = _policy(sent, violations)
    assert not violations and read is not None
    assert read.compat is compat
