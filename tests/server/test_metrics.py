"""`apportion serve --metrics-port 0 --log-format json` on 127.0.0.1: a few calls of each
outcome, then the Prometheus endpoint scraped and the JSON log read. Timeouts only prevent
hangs; nothing asserts speed."""

from __future__ import annotations

import json
import re
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_harness import (
    CALL_TIMEOUT_S,
    Server,
    call_error,
    detail,
    hook_request,
    running_server,
    small_request,
    wait_until,
)

from apportion.server.service import REQUEST_ID_HEADER
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import allocation_service_pb2_grpc as service_grpc

parser = pytest.importorskip("prometheus_client.parser", reason="the metrics extra")
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--workers", "1", "--max-pending", "1", "--metrics-port", "0",
                        "--log-format", "json", hooks=True) as started:
        yield started


def log_lines(server: Server) -> list[dict[str, Any]]:
    """The server's stderr, every line a JSON object."""
    return [json.loads(line) for line in server.stderr().splitlines()]


def metrics_url(server: Server) -> str:
    for entry in log_lines(server):
        if "metrics_port" in entry:
            return f"http://127.0.0.1:{entry['metrics_port']}/metrics"
    raise AssertionError("no metrics line in the log")


def scrape(server: Server) -> Samples:
    with urllib.request.urlopen(metrics_url(server), timeout=CALL_TIMEOUT_S) as reply:
        text = reply.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in parser.text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_metrics_count_calls_by_policy_code_and_termination(server: Server) -> None:
    with grpc.insecure_channel(server.address) as channel:
        stub = service_grpc.AllocationServiceStub(channel)
        stub.ListPolicies(service_pb.ListPoliciesRequest(), timeout=CALL_TIMEOUT_S)
        for _ in range(2):
            stub.Solve(small_request(), timeout=CALL_TIMEOUT_S)
        aliased = small_request()
        aliased.policy.name = "max_min_fairness_perf"  # counts as its canonical policy
        stub.Solve(aliased, timeout=CALL_TIMEOUT_S)
        invalid = small_request()
        invalid.snapshot.jobs[0].throughput["v100"] = -1.0
        call_error(lambda: stub.Solve(invalid, timeout=CALL_TIMEOUT_S))
        unknown = small_request()
        unknown.policy.name = "no-such-policy-" + "x" * 100  # must not become a label
        call_error(lambda: stub.Solve(unknown, timeout=CALL_TIMEOUT_S))
        crash = call_error(lambda: stub.Solve(hook_request("kill"), timeout=CALL_TIMEOUT_S))
        assert crash.code() == grpc.StatusCode.INTERNAL

    assert wait_until(lambda: value(scrape(server), "apportion_worker_restarts_total") >= 1)
    assert wait_until(lambda: value(scrape(server), "apportion_alive_workers") == 1)
    samples = scrape(server)
    mmf = "weighted_max_min_fairness"
    requests = "apportion_requests_total"
    assert value(samples, requests, method="Solve", policy=mmf, code="OK") == 3
    assert value(samples, requests, method="Solve", policy=mmf, code="INVALID_ARGUMENT") == 1
    assert value(samples, requests, method="Solve", policy="unknown",
                 code="INVALID_ARGUMENT") == 1
    assert value(samples, requests, method="Solve", policy="unknown", code="INTERNAL") == 1
    assert value(samples, requests, method="ListPolicies", policy="none", code="OK") == 1
    assert value(samples, "apportion_request_duration_seconds_count", method="Solve",
                 policy=mmf) == 4
    assert value(samples, "apportion_solve_duration_seconds_count", policy=mmf) == 3
    assert value(samples, "apportion_terminations_total", policy=mmf,
                 termination="optimal") == 3
    assert value(samples, "apportion_busy_workers") == 0
    assert value(samples, "apportion_queue_depth") == 0
    policies = {dict(labels).get("policy") for _, labels in samples}
    assert not any(p and p.startswith("no-such") for p in policies)


def test_busy_workers_and_queue_depth_while_solving(server: Server) -> None:
    """One worker, one pending place: a long solve occupies the worker and a second one
    waits in the queue, both visible in a scrape."""
    with grpc.insecure_channel(server.address) as channel:
        stub = service_grpc.AllocationServiceStub(channel)
        calls = [threading.Thread(target=stub.Solve, args=(hook_request("sleep:3"),),
                                  kwargs={"timeout": CALL_TIMEOUT_S}) for _ in range(2)]
        for call in calls:
            call.start()
        try:
            assert wait_until(lambda: (
                value(scrape(server), "apportion_busy_workers") == 1
                and value(scrape(server), "apportion_queue_depth") == 1
            ))
        finally:
            for call in calls:
                call.join(CALL_TIMEOUT_S)
    samples = scrape(server)
    assert value(samples, "apportion_busy_workers") == 0
    assert value(samples, "apportion_queue_depth") == 0


def test_json_log_has_every_call_with_the_request_id_of_its_reply(server: Server) -> None:
    with grpc.insecure_channel(server.address) as channel:
        stub = service_grpc.AllocationServiceStub(channel)
        _, call = stub.Solve.with_call(small_request(), timeout=CALL_TIMEOUT_S)
        ok_id = dict(call.initial_metadata())[REQUEST_ID_HEADER]
        crash = call_error(lambda: stub.Solve(hook_request("raise"), timeout=CALL_TIMEOUT_S))
    info = detail(crash, error_details_pb2.RequestInfo)
    assert isinstance(info, error_details_pb2.RequestInfo)
    assert re.fullmatch(r"[0-9a-f]{16}", ok_id)
    assert dict(crash.initial_metadata())[REQUEST_ID_HEADER] == info.request_id

    def calls() -> dict[str, dict[str, Any]]:
        return {e["request_id"]: e for e in log_lines(server) if e["message"] == "call"}

    assert wait_until(lambda: {ok_id, info.request_id} <= calls().keys())
    logged = calls()
    assert logged[ok_id]["code"] == "OK" and logged[ok_id]["termination"] == "optimal"
    assert logged[ok_id]["policy"] == "weighted_max_min_fairness"
    assert logged[info.request_id]["code"] == "INTERNAL"
    # the failure itself: logged under the same id, with its traceback, never sent
    failures = [e for e in log_lines(server)
                if e.get("request_id") == info.request_id and e["level"] == "ERROR"]
    assert failures and "hunter2" in failures[0]["message"]
    assert "hunter2" not in (crash.details() or "")
