"""Hypothesis strategies for invalid snapshots, each with the field path it must be rejected at
(docs/testing.md): a valid snapshot from `snapshots` with one thing broken."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from apportion.testing.strategies import snapshots
from apportion.v1 import allocation_service_pb2 as service_pb


@dataclass(frozen=True)
class InvalidSnapshot:
    """A request with one defect: validation must reject it with a violation at `field`
    (among possibly others caused by the same defect)."""

    request: service_pb.SolveRequest
    field: str
    """The field path, e.g. ``snapshot.jobs[2].throughput["v100"]``."""
    defect: str
    """What was broken, in words."""


Breaker = Callable[[st.DrawFn, service_pb.SolveRequest], tuple[str, str] | None]
"""Breaks the request in place: (field path, defect), or None when it does not apply."""

BAD_NUMBERS = (math.nan, math.inf, -math.inf, -1.0)


def _job(draw: st.DrawFn, request: service_pb.SolveRequest) -> int | None:
    jobs = request.snapshot.jobs
    return draw(st.integers(0, len(jobs) - 1)) if jobs else None


def _bad_throughput(draw: st.DrawFn, request: service_pb.SolveRequest) -> tuple[str, str] | None:
    i = _job(draw, request)
    if i is None:
        return None
    name = draw(st.sampled_from([t.name for t in request.snapshot.cluster.accelerator_types]))
    value = draw(st.sampled_from(BAD_NUMBERS))
    request.snapshot.jobs[i].throughput[name] = value
    return f'snapshot.jobs[{i}].throughput["{name}"]', f"throughput {value}"


def _unknown_type(draw: st.DrawFn, request: service_pb.SolveRequest) -> tuple[str, str] | None:
    i = _job(draw, request)
    if i is None:
        return None
    request.snapshot.jobs[i].throughput["no-such-type"] = 1.0
    return f'snapshot.jobs[{i}].throughput["no-such-type"]', "a throughput for an unknown type"


def _duplicate_id(draw: st.DrawFn, request: service_pb.SolveRequest) -> tuple[str, str] | None:
    jobs = request.snapshot.jobs
    if len(jobs) < 2:
        return None
    k = draw(st.integers(1, len(jobs) - 1))
    old = jobs[k].id
    jobs[k].id = jobs[0].id
    for entry in request.snapshot.history.jobs:  # keep the history about the renamed job
        if entry.job_id == old:
            entry.job_id = jobs[0].id
    return f"snapshot.jobs[{k}].id", "a duplicate job id"


def _scale_factor(draw: st.DrawFn, request: service_pb.SolveRequest) -> tuple[str, str] | None:
    i = _job(draw, request)
    if i is None:
        return None
    largest = max(t.count for t in request.snapshot.cluster.accelerator_types)
    value = draw(st.sampled_from((0, -2, largest + 1)))
    request.snapshot.jobs[i].scale_factor = value
    return f"snapshot.jobs[{i}].scale_factor", f"scale factor {value}"


def _weight(draw: st.DrawFn, request: service_pb.SolveRequest) -> tuple[str, str] | None:
    i = _job(draw, request)
    if i is None:
        return None
    value = draw(st.sampled_from((0.0, -1.0, math.nan, math.inf)))
    request.snapshot.jobs[i].priority_weight = value
    return f"snapshot.jobs[{i}].priority_weight", f"priority weight {value}"


def _arrival(draw: st.DrawFn, request: service_pb.SolveRequest) -> tuple[str, str] | None:
    i = _job(draw, request)
    if i is None:
        return None
    request.snapshot.jobs[i].arrival_time_s = draw(st.sampled_from((math.nan, math.inf)))
    return f"snapshot.jobs[{i}].arrival_time_s", "an arrival time that is not finite"


def _progress(draw: st.DrawFn, request: service_pb.SolveRequest) -> tuple[str, str] | None:
    i = _job(draw, request)
    if i is None:
        return None
    progress = request.snapshot.jobs[i].progress
    if draw(st.booleans()):
        progress.steps_done = draw(st.sampled_from((-1.0, math.nan)))
        return f"snapshot.jobs[{i}].progress.steps_done", "steps done negative or NaN"
    progress.steps_done = 100.0
    progress.total_steps = 50.0
    return f"snapshot.jobs[{i}].progress.total_steps", "fewer total steps than steps done"


def _deadline(draw: st.DrawFn, request: service_pb.SolveRequest) -> tuple[str, str] | None:
    i = _job(draw, request)
    if i is None:
        return None
    request.snapshot.jobs[i].deadline_s = draw(st.sampled_from([math.inf, -math.inf, 2e12]))
    return f"snapshot.jobs[{i}].deadline_s", "a deadline beyond 1e12 s"  # NaN = no deadline


def _count(draw: st.DrawFn, request: service_pb.SolveRequest) -> tuple[str, str] | None:
    types = request.snapshot.cluster.accelerator_types
    j = draw(st.integers(0, len(types) - 1))
    types[j].count = -1
    return f"snapshot.cluster.accelerator_types[{j}].count", "a negative device count"


def _type_name(draw: st.DrawFn, request: service_pb.SolveRequest) -> tuple[str, str] | None:
    types = request.snapshot.cluster.accelerator_types
    if len(types) < 2:
        types.add(name="", count=1)
        return f"snapshot.cluster.accelerator_types[{len(types) - 1}].name", "an empty name"
    k = draw(st.integers(1, len(types) - 1))
    types.add(name=types[k].name, count=0)
    return f"snapshot.cluster.accelerator_types[{len(types) - 1}].name", "a duplicate type"


def _cost(draw: st.DrawFn, request: service_pb.SolveRequest) -> tuple[str, str] | None:
    types = request.snapshot.cluster.accelerator_types
    j = draw(st.integers(0, len(types) - 1))
    types[j].cost_per_hour = draw(st.sampled_from((-1.0, math.nan)))
    return f"snapshot.cluster.accelerator_types[{j}].cost_per_hour", "a negative or NaN price"


def _time(draw: st.DrawFn, request: service_pb.SolveRequest) -> tuple[str, str] | None:
    request.snapshot.time_s = draw(st.sampled_from((math.nan, math.inf)))
    return "snapshot.time_s", "a snapshot time that is not finite"


def _history_job(draw: st.DrawFn, request: service_pb.SolveRequest) -> tuple[str, str] | None:
    del draw
    entries = request.snapshot.history.jobs
    entries.add(job_id="no-such-job")
    return f"snapshot.history.jobs[{len(entries) - 1}].job_id", "history of an unknown job"


def _received(draw: st.DrawFn, request: service_pb.SolveRequest) -> tuple[str, str] | None:
    i = _job(draw, request)
    if i is None:
        return None
    snapshot = request.snapshot
    name = snapshot.cluster.accelerator_types[0].name
    ids = [entry.job_id for entry in snapshot.history.jobs]
    if snapshot.jobs[i].id in ids:
        k = ids.index(snapshot.jobs[i].id)
        entry = snapshot.history.jobs[k]
    else:
        entry = snapshot.history.jobs.add(job_id=snapshot.jobs[i].id)
        k = len(snapshot.history.jobs) - 1
    snapshot.history.elapsed_since_reset_s = 10.0
    entry.received_time_s[name] = 20.0
    return (f'snapshot.history.jobs[{k}].received_time_s["{name}"]',
            "more time received than elapsed since the reset")


def _tenant(draw: st.DrawFn, request: service_pb.SolveRequest) -> tuple[str, str] | None:
    tenants = request.snapshot.tenants
    tenants.add(name=f"t{len(tenants)}-bad", weight=draw(st.sampled_from((0.0, -2.0, math.nan))))
    return f"snapshot.tenants[{len(tenants) - 1}].weight", "a tenant weight that is not > 0"


def _options(draw: st.DrawFn, request: service_pb.SolveRequest) -> tuple[str, str] | None:
    if draw(st.booleans()):
        request.options.time_limit_s = draw(st.sampled_from((-1.0, math.nan)))
        return "options.time_limit_s", "a negative or NaN time limit"
    request.options.relative_gap = draw(st.sampled_from((1.0, 2.0, -0.1)))
    return "options.relative_gap", "a relative gap outside [0, 1)"


def _policy(draw: st.DrawFn, request: service_pb.SolveRequest) -> tuple[str, str] | None:
    request.policy.name = draw(st.sampled_from(("", "no_such_policy", "MAX_MIN_FAIRNESS")))
    return "policy.name", "an unknown policy"


BREAKERS: tuple[Breaker, ...] = (
    _bad_throughput, _unknown_type, _duplicate_id, _scale_factor, _weight, _arrival, _progress,
    _deadline, _count, _type_name, _cost, _time, _history_job, _received, _tenant, _options,
    _policy,
)
"""Every kind of defect `invalid_snapshots` draws from."""


def invalid_snapshots(
    policy: str = "weighted_max_min_fairness", **kwargs: Any
) -> SearchStrategy[InvalidSnapshot]:
    """A valid `snapshots(policy, **kwargs)` with one defect drawn from `BREAKERS` (a bad or
    unknown throughput, a duplicate job id, a gang that fits no type, a weight, arrival,
    progress or deadline that is not allowed, a negative count, a duplicate type, a bad price,
    a bad snapshot time, history of an unknown job or with more time than elapsed, a bad
    tenant weight, bad options, an unknown policy), with the field path it must be rejected
    at."""
    return _invalid(snapshots(policy, **kwargs))


@st.composite
def _invalid(draw: st.DrawFn, valid: SearchStrategy[service_pb.SolveRequest]) -> InvalidSnapshot:
    request = service_pb.SolveRequest()
    request.CopyFrom(draw(valid))
    for breaker in draw(st.permutations(BREAKERS)):
        broken = breaker(draw, request)
        if broken is not None:
            return InvalidSnapshot(request, *broken)
    raise AssertionError("unreachable: some breakers always apply")
