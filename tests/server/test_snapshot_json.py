"""The CLI's fast JSON route gives the message `json_format.Parse` gives, and the same error when
`json_format.Parse` rejects the file (then it is `json_format` that answers)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apportion.server import snapshot_json
from apportion.server.snapshot_json import parse_request
from apportion.v1 import allocation_service_pb2 as service_pb
from tests.server.fuzz_requests import every_base, mutated

BASES = every_base()


def both(text: str) -> tuple[object, object]:
    """(json_format's result, the fast route's result): a message or the error text."""
    outcomes: list[object] = []
    for parse in (lambda: json_format.Parse(text, service_pb.SolveRequest()),
                  lambda: parse_request(text)):
        try:
            outcomes.append(parse())
        except json_format.ParseError as exc:
            outcomes.append(str(exc))
    return outcomes[0], outcomes[1]


def takes_fast_route(text: str) -> bool:
    try:
        snapshot_json._fast(text.encode())
    except snapshot_json._Slow:
        return False
    return True


@pytest.mark.parametrize(("label", "base"), BASES, ids=[label for label, _ in BASES])
def test_same_message(label: str, base: dict[str, Any]) -> None:
    for text in (json.dumps(base), json.dumps(base, indent=2), json.dumps(base, indent="\t")):
        expected, got = both(text)
        assert got == expected


@pytest.mark.parametrize("name", ["four_jobs.json", "cluster_32_jobs.json",
                                  "tenants_and_sharing.json"])
def test_the_examples_take_the_fast_route(name: str) -> None:
    text = dict(BASES)[name]
    assert takes_fast_route(json.dumps(text))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('"id": "resnet50"', '"id": "resnet50", "id": "other"'),  # duplicate key
        ('"id": "resnet50"', '"id": "resnet50", "scale_factor": 1, "scaleFactor": 1'),
        ('"id": "resnet50"', '"id": "resnet50", "unknownField": 1'),
        ('"id": "resnet50"', '"id": "resnet50", "priorityWeight": true'),
        ('"id": "resnet50"', '"id": "resnet50", "scaleFactor": 2.5'),
        ('"id": "resnet50"', '"id": "resnet50", "scaleFactor": 4294967296'),
        ('"id": "resnet50"', '"id": "resnet50", "arrivalTimeS": NaN'),
        ('"id": "resnet50"', '"id": "resnet50", "progress": {"stepsDone": "x"}'),
        ('"v100": 3.1', '"v100": 3.1, "v100": 1'),
        ('"name": "v100"', '"name": "v100", "name": "x"'),
        ('"snapshot": {', '"snapshot": {"timeS": 1, "timeS": 2, '),
        ('"snapshot": {', '"snapshot": {"timeS": "1:2:3", '),
        ('"id": "resnet50"', '"id": "a\\":b"'),  # a colon and a quote inside a string
        ('"id": "resnet50"', '"id": "a:b", "id": "c"'),  # a colon in a string, a duplicate
        ('"id": "resnet50"', '"id": "a\\u003ab", "id": "c"'),  # an escaped colon, a duplicate
        ('"v100": 3.1', '"v100": 3.1, "v:100": 1, "v:100": 2'),
    ],
)
def test_same_error_or_message_on_edited_text(old: str, new: str) -> None:
    text = json.dumps(dict(BASES)["four_jobs.json"])
    assert old in text
    expected, got = both(text.replace(old, new, 1))
    assert got == expected


@pytest.mark.parametrize(("label", "base"), BASES, ids=[label for label, _ in BASES])
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_same_outcome_on_mutated_files(label: str, base: dict[str, Any],
                                       data: st.DataObject) -> None:
    tree = data.draw(mutated(base), label="request")
    expected, got = both(json.dumps(tree))
    assert got == expected


_NAMES = {"id": "id", "scale_factor": "scaleFactor", "priority_weight": "priorityWeight",
          "tenant": "tenant", "arrival_time_s": "arrivalTimeS", "deadline_s": "deadlineS",
          "restart_penalty_s": "restartPenaltyS", "job_type": "jobType"}
_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\\u003a"), max_size=12)
_NUMBER = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.just(-0.0),
                    st.just(0.0), st.integers(-(2**70), 2**70))
_VALUES = {"id": _TEXT, "tenant": _TEXT, "job_type": _TEXT,
           "scale_factor": st.integers(-(2**31), 2**31 - 1)}


@st.composite
def plain_jobs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Jobs with random subsets of the plain fields, snake or camel keys, values of every
    sign and size (zeros, -0.0, integers beyond int64 for doubles), unicode strings."""
    jobs = []
    for _ in range(draw(st.integers(0, 6))):
        job: dict[str, Any] = {}
        for name in draw(st.lists(st.sampled_from(sorted(_NAMES)), unique=True)):
            key = _NAMES[name] if draw(st.booleans()) else name
            job[key] = draw(_VALUES.get(name, _NUMBER))
        if draw(st.booleans()):
            job["throughput"] = draw(st.dictionaries(_TEXT, _NUMBER, max_size=3))
        if draw(st.booleans()):
            job["progress"] = {
                ("stepsDone" if draw(st.booleans()) else "steps_done"): draw(_NUMBER),
                "totalEpochs": draw(st.integers(0, 2**31 - 1)),
            }
        jobs.append(job)
    return jobs


@settings(max_examples=200, deadline=None)
@given(plain_jobs())
def test_plain_jobs_give_json_formats_message(jobs: list[dict[str, Any]]) -> None:
    """Files the fast route reads (checked) parse to `json_format`'s message, field by field
    and byte for byte."""
    tree = json.loads(json.dumps(dict(BASES)["four_jobs.json"]))
    tree["snapshot"]["jobs"] = jobs
    text = json.dumps(tree)
    assert takes_fast_route(text)
    expected, got = both(text)
    assert isinstance(got, service_pb.SolveRequest)
    assert got == expected
    assert got.SerializeToString(deterministic=True) == expected.SerializeToString(
        deterministic=True)
