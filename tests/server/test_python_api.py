"""The Python API (`apportion.solve`, `apportion.validate`): every accepted form of a request
gives the service's answer, malformed input raises one `ValidationError` with every field
path (the same list as the command line's), options and overrides, and the typed result."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format

import apportion
from apportion.server.cli import load_request
from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.result import Termination
from apportion.v1 import allocation_service_pb2 as service_pb

ROOT = Path(__file__).resolve().parents[2]
FOUR_JOBS = ROOT / "examples" / "four_jobs.json"
INVALID = ROOT / "examples" / "invalid.json"
ALLOX = ROOT / "examples" / "allox_queues.json"


def _plan_rows(response: service_pb.SolveResponse) -> list[tuple[str, dict[str, float]]]:
    return [(job.job_id, dict(job.time_share)) for job in response.plan.jobs]


def test_every_form_of_a_request_gives_the_services_answer() -> None:
    message = load_request(str(FOUR_JOBS))
    reference = solve_request(message)
    as_dict = json.loads(FOUR_JOBS.read_text())
    name = message.policy.name
    forms: list[tuple[object, str | None]] = [
        (FOUR_JOBS, None), (str(FOUR_JOBS), None), (message, None), (as_dict, None),
        (as_dict["snapshot"], name), (message.snapshot, name),  # a snapshot names no policy
    ]
    for form, policy in forms:
        result = apportion.solve(form, policy)  # type: ignore[arg-type]
        assert result.termination is Termination.OPTIMAL, form
        assert result.objective == reference.stats.objective
        assert result.bound == reference.stats.best_bound
        assert _plan_rows(result.response) == _plan_rows(reference)
    assert message == load_request(str(FOUR_JOBS)), "the caller's message was modified"


def test_the_typed_result_matches_the_response() -> None:
    result = apportion.solve(FOUR_JOBS)
    assert result.optimal and result.has_plan
    assert result.job_ids == tuple(job.job_id for job in result.response.plan.jobs)
    assert result.type_names == ("v100", "p100", "k80")
    for i, job_id in enumerate(result.job_ids):
        shares = zip(result.type_names, result.time_share[i], strict=True)
        row = {t: float(x) for t, x in shares if x > 0}
        assert row == result.time_share_of(job_id)
    assert result.certificate is not None
    assert result.certificate.objective == result.objective
    assert result.gap == result.response.stats.relative_gap
    assert json.loads(result.to_json())["stats"]["policy"] == "weighted_max_min_fairness"
    with pytest.raises(KeyError):
        result.job("nope")


def test_validation_errors_list_every_violation_like_the_command_line() -> None:
    with pytest.raises(apportion.ValidationError) as caught:
        request_to_model(load_request(str(INVALID)))
    expected = caught.value.violations
    for call in (apportion.validate, apportion.solve):
        with pytest.raises(apportion.ValidationError) as raised:
            call(INVALID)
        assert raised.value.violations == expected
        assert isinstance(raised.value, ValueError)
    assert len(expected) == 5
    assert expected[0].field == 'snapshot.jobs[0].throughput["v100"]'


def test_a_nan_or_negative_throughput_is_rejected_not_solved() -> None:
    """The issue's report: through the model constructors a NaN throughput solved to 1.0."""
    snapshot = json.loads(FOUR_JOBS.read_text())["snapshot"]
    snapshot["jobs"][1]["throughput"]["v100"] = "NaN"
    snapshot["jobs"][2]["throughput"]["v100"] = -3.0
    with pytest.raises(apportion.ValidationError) as raised:
        apportion.solve(snapshot, "max_min_fairness")
    assert [v.field for v in raised.value.violations] == [
        'snapshot.jobs[1].throughput["v100"]', 'snapshot.jobs[2].throughput["v100"]',
    ]


def test_overrides_policy_parameters_compat_and_options() -> None:
    result = apportion.solve(
        FOUR_JOBS, "max_min_fairness", parameters={"canonicalize": "CANONICALIZATION_SUM"},
        compat="gavel", solver="highs", time_limit_s=30, relative_gap=1e-7, seed=3,
    )
    policy, options = result.request.policy, result.request.options
    assert policy.name == "max_min_fairness" and policy.compat == 1
    assert policy.WhichOneof("parameters") == "max_min_fairness"
    assert options.solver == 2 and options.time_limit_s == 30 and options.seed == 3
    assert result.policy.name == "weighted_max_min_fairness"
    assert result.policy.parameters.heterogeneity_agnostic  # forced by the alias
    assert result.response.stats.time_limit_s == 30
    # all-default parameters still select the policy's oneof field
    plain = apportion.validate(ALLOX, "allox", parameters={})
    assert plain.request.policy.WhichOneof("parameters") == "allox"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"time_limit_s": -1.0}, "options.time_limit_s"),
        ({"relative_gap": math.nan}, "options.relative_gap"),
        ({"solver": "gurobi"}, "options.solver"),
        ({"compat": "slurm"}, "policy.compat"),
        ({"policy": "no_such_policy"}, "policy.name"),
        ({"policy": "isolated", "parameters": {"alpha": 0.5}}, "policy.parameters"),
        ({"policy": "allox", "parameters": {"alpha": 2.0}}, "policy.allox.alpha"),
        ({"policy": "allox", "parameters": {"beta": 1}}, "policy.allox"),
    ],
)
def test_bad_options_are_validation_errors_with_a_field_path(
    kwargs: dict[str, object], field: str
) -> None:
    with pytest.raises(apportion.ValidationError) as raised:
        source = ALLOX if kwargs.get("policy") == "allox" else FOUR_JOBS  # allox reads work
        apportion.validate(source, **kwargs)  # type: ignore[arg-type]
    assert [v.field for v in raised.value.violations] == [field]


def test_an_unknown_option_name_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="unknown option 'time_limit'"):
        apportion.solve(FOUR_JOBS, time_limit=3)


def test_json_that_is_not_a_request(tmp_path: Path) -> None:
    with pytest.raises(apportion.ValidationError, match="not a valid Snapshot"):
        apportion.validate({"cluster": {}, "jobz": []})
    with pytest.raises(apportion.ValidationError, match="not a valid SolveRequest"):
        apportion.validate({"snapshot": {}, "extra": 1})
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(apportion.ValidationError, match="not valid JSON"):
        apportion.validate(broken)
    with pytest.raises(FileNotFoundError):
        apportion.validate(tmp_path / "missing.json")
    with pytest.raises(TypeError):
        apportion.validate(42)  # type: ignore[arg-type]


def test_an_infeasible_or_timed_out_solve_is_an_answer_not_an_error() -> None:
    result = apportion.solve(FOUR_JOBS, time_limit_s=1e-9)
    assert result.termination is Termination.NO_SOLUTION
    assert not result.has_plan and result.plan is None and result.certificate is None
    assert result.objective is None
    np.testing.assert_array_equal(result.time_share, np.zeros((4, 3)))


def test_a_snapshot_without_a_policy_name_is_rejected() -> None:
    snapshot = json.loads(FOUR_JOBS.read_text())["snapshot"]
    with pytest.raises(apportion.ValidationError) as raised:
        apportion.validate(snapshot)
    assert [v.field for v in raised.value.violations] == ["policy.name"]


def test_validate_returns_the_model() -> None:
    checked = apportion.validate(FOUR_JOBS, "las")
    assert checked.policy.name == "weighted_max_min_fairness"
    assert checked.policy.requested_name == "las"
    assert checked.problem.jobs.num_jobs == 4
    assert json_format.MessageToDict(checked.request)["policy"]["name"] == "las"


def test_policies_are_the_registry() -> None:
    names = {spec.name for spec in apportion.policies()}
    assert {"weighted_max_min_fairness", "allox", "sia"} <= names


def test_a_limit_spent_during_validation_still_gives_a_solution() -> None:
    """The budget can run out while the request is validated (the pipeline then has no model):
    the Solution still carries the validated model, no plan, and the no_solution reply."""
    result = apportion.solve(ROOT / "examples" / "cluster_32_jobs.json", time_limit_s=1e-9)
    assert result.termination is Termination.NO_SOLUTION and result.plan is None
    assert "ran out before the solve started" in result.response.stats.detail
    assert result.problem.jobs.num_jobs == 32
    assert result.policy.name == "weighted_max_min_fairness"
