"""`Snapshot.history` read into the model (`apportion.server.history_inputs`): every kind of bad
entry named by its field path with its value, next to good entries that are read (the scalar
fields are checked as columns, the placements of valid running jobs without a per-entry
check)."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format

from apportion.server.convert import request_to_model
from apportion.solver.errors import ValidationError
from apportion.v1 import allocation_service_pb2 as service_pb


def request(history: list[dict[str, Any]], elapsed: float = 10.0) -> service_pb.SolveRequest:
    jobs = [{"id": f"j{i}", "throughput": {"v100": 1.0, "k80": 0.5},
             "progress": {"totalSteps": 1000.0}} for i in range(8)]
    data = {
        "snapshot": {
            "cluster": {
                "acceleratorTypes": [{"name": "v100", "count": 4}, {"name": "k80", "count": 4}],
                "nodes": [{"name": "a", "acceleratorType": "v100", "devices": 4},
                          {"name": "b", "acceleratorType": "k80", "devices": 4}],
            },
            "jobs": jobs,
            "history": {"jobs": history, "elapsedSinceResetS": elapsed},
        },
        "policy": {"name": "allox"},
    }
    return json_format.ParseDict(data, service_pb.SolveRequest())


GOOD = [
    {"jobId": "j0", "receivedTimeS": {"v100": 5.0}, "cumulativeIsolatedTimeS": 3.0,
     "restarts": 2},
    {"jobId": "j1", "current": {"acceleratorType": "v100", "devices": 3, "nodes": ["a"],
                                "busyUntilS": 50.0}},
    {"jobId": "j2", "current": {"acceleratorType": "k80"}},
]


def test_good_entries_are_read() -> None:
    problem, _, _ = request_to_model(request(GOOD))
    history = problem.history
    assert history.received_time_s[0].tolist() == [5.0, 0.0]
    assert history.cumulative_isolated_time_s[0] == 3.0 and history.restarts[0] == 2
    assert history.current_type[1] == 0 and history.current_devices[1] == 3
    assert history.busy_until_s[1] == 50.0 and history.current_nodes[1] == (0,)
    assert history.current_type[2] == 1 and history.current_devices[2] == 1  # scale factor
    assert history.current_nodes[2] == ()
    assert history.current_type[3] < 0


def test_every_bad_entry_is_named() -> None:
    bad = [
        {"jobId": "nope"},
        {"jobId": "j0"},  # a second entry of j0
        {"jobId": "j3", "receivedTimeS": {"tpu": 1.0, "v100": 20.0, "k80": -1.0},
         "current": {"acceleratorType": "k80", "nodes": ["zzz"]}},
        {"jobId": "j4", "previousTimeShare": {"tpu": 0.5}, "cumulativeIsolatedTimeS": "NaN",
         "restarts": -2},
        {"jobId": "j5", "current": {"acceleratorType": "v100", "devices": 2}},  # 3 + 2 > 4
        {"jobId": "j6", "current": {"acceleratorType": "k80", "busyUntilS": "Infinity"}},
        {"jobId": "j7", "current": {"acceleratorType": "k80", "nodes": ["b", "a"]}},
    ]
    with pytest.raises(ValidationError) as info:
        request_to_model(request(GOOD + bad))
    found = {v.field: v.description for v in info.value.violations}
    at = "snapshot.history.jobs"
    assert found == {
        f"{at}[3].job_id": "unknown job 'nope'",
        f"{at}[4].job_id": "duplicate entry for 'j0' (first at [0])",
        f'{at}[5].received_time_s["tpu"]': "unknown accelerator type 'tpu'",
        f'{at}[5].received_time_s["v100"]':
            "20.0 s is more than elapsed_since_reset_s (10.0 s)",
        f'{at}[5].received_time_s["k80"]': found[f'{at}[5].received_time_s["k80"]'],
        f'{at}[6].previous_time_share["tpu"]': "unknown accelerator type 'tpu'",
        f"{at}[6].cumulative_isolated_time_s": found[f"{at}[6].cumulative_isolated_time_s"],
        f"{at}[6].restarts": "must be >= 0, got -2",
        f"{at}[7].current.devices":
            "running jobs would hold 5 devices of type 'v100', which has 4",
        f"{at}[8].current.busy_until_s": found[f"{at}[8].current.busy_until_s"],
        f"{at}[5].current.nodes[0]": "unknown node 'zzz'",
        f"{at}[9].current.nodes[1]": "node 'a' holds no 'k80'",
    }
    assert found[f'{at}[5].received_time_s["k80"]'].endswith("got -1.0")
    assert found[f"{at}[6].cumulative_isolated_time_s"].endswith("got nan")
    assert found[f"{at}[8].current.busy_until_s"].endswith("got inf")


def test_a_running_job_over_the_count_holds_nothing() -> None:
    """The entry that would overfill its type is refused; the ones before it keep theirs."""
    entries = [{"jobId": f"j{i}", "current": {"acceleratorType": "v100", "devices": 2}}
               for i in range(3)]
    with pytest.raises(ValidationError) as info:
        request_to_model(request(entries))
    assert [v.field for v in info.value.violations] == [
        "snapshot.history.jobs[2].current.devices"]
