"""`Job.configurations` read from the wire (`apportion.server.configuration_wire`) give what
reading every message gives: the same goodput entries, or the same violations in the same
order, for configurations written any way protobuf allows (fields omitted, in another order,
given twice, with unknown fields or wrong wire types, overlong varints, long names) and for
any values (unknown types, nodes and devices out of range, goodputs NaN, negative or huge)."""

from __future__ import annotations

import struct
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.server import configuration_wire, job_inputs, wire_records
from apportion.server.configuration_wire import (
    CONFIGURATIONS_TAG,
    WireConfigurations,
    read_entries,
)
from apportion.server.job_wire import JobSpans, WireJobs
from apportion.server.wire_records import PADDING, WireBuffer
from apportion.solver.deadline import NO_DEADLINE, Deadline, DeadlineExpiredError
from apportion.solver.model import GivenGoodput, GivenGoodputs
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb
from tests.countdown import CountdownDeadline
from tests.server.test_job_wire import (
    DOUBLES,
    I32,
    I64,
    LEN,
    NAMES,
    OVERLONG,
    TYPES,
    VARINT,
    VARINTS,
    outcome,
    record,
    varint,
)
from tests.solver.test_model import assert_same_model

# mostly valid values (a job with one invalid entry is read from its message), and any
GOODPUTS = st.one_of(st.floats(1e-9, 1e12), st.floats(1e-9, 1e12), st.floats(1e-9, 1e12),
                     st.sampled_from([0.0, 1.0, 250.5, 1e-10, 1e13, -1.0]), DOUBLES)
NODES = st.one_of(st.sampled_from([1, 1, 1, 2, 2, 3]), st.sampled_from([0, 127, 128]), VARINTS)
DEVICES = st.one_of(st.integers(1, 8), st.integers(1, 8), st.sampled_from([0, 9, 128, 300]),
                    VARINTS)


@st.composite
def configuration(draw: st.DrawFn) -> bytes:
    """One `ConfigurationGoodput` record: mostly as serializers write it, else with an
    oddity."""
    name = draw(st.one_of(st.sampled_from(TYPES[:3]), st.sampled_from(TYPES), NAMES))
    nodes, devices = draw(NODES), draw(DEVICES)
    goodput = draw(GOODPUTS)
    overlong = draw(OVERLONG)
    parts = [record(1, LEN, name.encode()) if name else b"",
             record(2, VARINT, varint(nodes, overlong)) if nodes else b"",
             record(3, VARINT, varint(devices)) if devices else b"",
             record(4, I64, struct.pack("<d", goodput)) if goodput != 0 else b""]
    odd = draw(st.integers(0, 9))
    if odd == 1:
        parts = draw(st.permutations(parts))
    elif odd == 2:  # a field again: the last one counts
        parts.append(draw(st.sampled_from([record(2, VARINT, b"\x01"),
                                           record(1, LEN, b"k80"),
                                           record(4, I64, struct.pack("<d", 3.0))])))
    elif odd == 3:
        parts.append(draw(st.sampled_from([record(9, VARINT, b"\x01"),  # unknown
                                           record(2, I64, b"\x01" * 8),  # nodes as a double
                                           record(4, I32, b"\x00" * 4),  # goodput as fixed32
                                           record(1, VARINT, b"\x01")])))  # name as a varint
    return record(9, LEN, b"".join(parts))


@st.composite
def job(draw: st.DrawFn, k: int) -> bytes:
    """A job with a throughput and configurations, sometimes elasticity or a Pollux model
    (read from the message), sometimes other records between its configurations."""
    head = record(1, LEN, f"j{k}".encode()) + record(
        6, LEN, record(1, LEN, b"v100") + record(2, I64, struct.pack("<d", 1.0)))
    configurations = draw(st.lists(configuration(), max_size=draw(st.sampled_from([2, 6]))))
    if draw(st.integers(0, 5)) == 0:
        configurations.insert(draw(st.integers(0, len(configurations))),
                              record(5, I64, struct.pack("<d", 1.0)))  # arrival in between
    tail = draw(st.sampled_from([
        b"", b"", b"", record(11, LEN, record(2, VARINT, b"\x04")),
        record(12, LEN, record(3, I64, struct.pack("<d", 1.0))),
    ]))
    return head + b"".join(configurations) + tail


@st.composite
def requests(draw: st.DrawFn) -> tuple[bytes, service_pb.SolveRequest]:
    names = draw(st.sampled_from([TYPES, TYPES[:3], [*TYPES[:3], "v100"]]))
    cluster = snapshot_pb.Cluster()
    for name in names:
        cluster.accelerator_types.add(name=name, count=8)
    if draw(st.booleans()):  # nodes of 4 GPUs: multi-node configurations
        for t, name in enumerate(names):
            for v in range(2):
                cluster.nodes.add(name=f"n{t}-{v}", accelerator_type=name, devices=4)
    jobs = [record(3, LEN, draw(job(k))) for k in range(draw(st.integers(1, 8)))]
    data = record(1, LEN, record(2, LEN, cluster.SerializeToString()) + b"".join(jobs))
    data += record(2, LEN, record(1, LEN, b"sia"))
    return data, service_pb.SolveRequest.FromString(data)


@pytest.mark.parametrize("block", [2, wire_records.WALK_BLOCK])
@given(case=requests())
def test_configurations_are_the_same_from_the_wire_and_from_messages(
    block: int, case: tuple[bytes, service_pb.SolveRequest]
) -> None:
    """Also in blocks of 2 jobs: the walk and the reader take jobs a block at a time."""
    data, request = case
    with (mock.patch.object(job_inputs, "DECODE_FROM_JOBS", 1),
          mock.patch.object(wire_records, "WALK_BLOCK", block),
          mock.patch.object(configuration_wire, "WALK_BLOCK", block)):
        wire = outcome(request, data)
    messages = outcome(request, data)  # few jobs: every message is read
    if isinstance(wire, list) or isinstance(messages, list):
        assert wire == messages
    else:
        assert_same_model(wire, messages)


def plain(name: bytes, nodes: int, devices: int, goodput: float, extra: bytes = b"") -> bytes:
    """A configuration record as serializers write it (then `extra`)."""
    return record(9, LEN, record(1, LEN, name) + record(2, VARINT, varint(nodes))
                  + record(3, VARINT, varint(devices))
                  + record(4, I64, struct.pack("<d", goodput)) + extra)


EACH_RULE = {  # one job's configurations -> the violation's field and its start
    "unknown type": (plain(b"h100", 1, 1, 2.0), "configurations[1].accelerator_type",
                     "unknown accelerator type"),
    "nodes beyond the type's": (plain(b"v100", 3, 4, 2.0), "configurations[1].nodes",
                                "must be in [1, 2]"),
    "no nodes": (plain(b"v100", 0, 4, 2.0), "configurations[1].nodes", "must be in [1, 2]"),
    "devices beyond the nodes": (plain(b"v100", 1, 5, 2.0), "configurations[1].devices",
                                 "5 devices on 1 node(s)"),
    "devices below the nodes": (plain(b"v100", 2, 1, 2.0), "configurations[1].devices",
                                "1 devices on 2 node(s)"),
    "goodput too large": (plain(b"v100", 1, 1, 1e13), "configurations[1].goodput",
                          "must be 0 or in"),
    "goodput too small": (plain(b"v100", 1, 1, 1e-10), "configurations[1].goodput",
                          "must be 0 or in"),
    "goodput negative": (plain(b"v100", 1, 1, -1.0), "configurations[1].goodput",
                         "must be 0 or in"),
    "goodput NaN": (plain(b"v100", 1, 1, float("nan")), "configurations[1].goodput",
                    "must be 0 or in"),
}


def both_routes(cluster: snapshot_pb.Cluster, jobs: list[bytes]) -> tuple[Any, Any]:
    """What a sia request of `jobs` (serialized) on `cluster` converts to, decoding the jobs
    from the request's bytes, and reading every job's message."""
    data = record(1, LEN, record(2, LEN, cluster.SerializeToString())
                  + b"".join(record(3, LEN, job) for job in jobs))
    data += record(2, LEN, record(1, LEN, b"sia"))
    request = service_pb.SolveRequest.FromString(data)
    with mock.patch.object(job_inputs, "DECODE_FROM_JOBS", 1):
        wire = outcome(request, data)
    return wire, outcome(request, data)


def test_jobs_read_from_their_messages_are_read_once() -> None:
    """A job that also sets elasticity (or a Pollux model: the same rule), or that the job
    decoder leaves to its message (progress given twice), keeps its configurations once, as
    from messages."""
    cluster = snapshot_pb.Cluster()
    cluster.accelerator_types.add(name="v100", count=8)
    configurations = plain(b"v100", 1, 1, 2.0) + plain(b"v100", 1, 2, 3.5)
    tails = [b"", record(11, LEN, record(2, VARINT, b"\x04")),
             record(7, LEN, record(1, I64, struct.pack("<d", 1.0))) * 2, b""]
    wire, messages = both_routes(cluster, [record(1, LEN, f"j{k}".encode()) + configurations
                                           + tail for k, tail in enumerate(tails)])
    assert not isinstance(messages, list), messages
    assert [len(messages.jobs.given_goodput[i]) for i in range(4)] == [2] * 4
    assert_same_model(wire, messages)


@pytest.mark.parametrize("rule", sorted(EACH_RULE))
def test_each_rule_names_the_offending_entry_on_the_wire_route(rule: str) -> None:
    """Jobs of valid configurations, one of them with an entry breaking one rule: only that
    entry is named, with the path and text of the message route."""
    bad, field, start = EACH_RULE[rule]
    cluster = snapshot_pb.Cluster()
    for name in ("v100", "p100"):
        cluster.accelerator_types.add(name=name, count=8)
        for v in range(2):
            cluster.nodes.add(name=f"{name}-{v}", accelerator_type=name, devices=4)
    good = plain(b"v100", 1, 2, 5.0) + plain(b"p100", 2, 8, 9.0)
    wire, messages = both_routes(cluster, [record(1, LEN, f"j{k}".encode())
                                           + (good if k != 2 else plain(b"v100", 1, 1, 1.0) + bad)
                                           for k in range(4)])
    assert wire == messages
    assert [f for f, _ in wire] == [f"snapshot.jobs[2].{field}"]
    assert wire[0][1].startswith(start), wire


def read(jobs: list[bytes], type_names: list[str], deadline: Deadline = NO_DEADLINE
         ) -> WireConfigurations:
    """The configurations of the serialized jobs `jobs`, by the service's route: the job
    decoder finds their records, `read_entries` reads them."""
    length = np.array([len(job) for job in jobs], np.int64)
    end = np.cumsum(length)
    spans = JobSpans(WireBuffer(b"".join([*jobs, PADDING])), end - length, end)
    none = np.zeros(0, np.int64)
    job, start, stop = WireJobs.decode_spans(spans, type_names).other_records.get(
        CONFIGURATIONS_TAG, (none, none, none))
    return read_entries(spans.buf, job, start, stop, len(jobs), type_names, deadline)


def test_plain_configurations_are_read_from_the_wire_and_odd_ones_are_not() -> None:
    """Which jobs the wire reader leaves to their messages (not only that the answers
    agree): a job of plain configurations is read; a job with an unknown field, a field
    twice or a type name not of the cluster is not."""
    conf = plain
    jobs = [
        conf(b"v100", 1, 1, 2.5) + conf(b"k80", 1, 2, 4.0),
        conf(b"p100", 1, 1, 2.0, record(7, VARINT, b"\x01")),
        conf(b"p100", 1, 1, 2.0, record(2, VARINT, b"\x01")),
        conf(b"h100", 1, 1, 2.0),
        conf(b"v100", 1, 200, 3.0),  # a two-byte varint: read by walking its records
    ]
    wire = read(jobs, ["v100", "p100", "k80"])
    assert wire.unread.tolist() == [False, True, True, True, False]
    assert wire.job.tolist() == [0, 0, 4]
    assert wire.type_index.tolist() == [0, 2, 0]
    assert wire.devices.tolist() == [1, 2, 200]
    assert wire.goodput.tolist() == [2.5, 4.0, 3.0]


def test_given_goodputs_take_and_append_keep_each_jobs_entries() -> None:
    rows = ((GivenGoodput(0, 1, 1, 1.0), GivenGoodput(1, 1, 2, 2.0)), (),
            (GivenGoodput(2, 2, 8, 3.0),))
    given = GivenGoodputs.of(rows)
    assert [given[i] for i in range(3)] == list(rows) and given[-1] == rows[2]
    assert [given.take(np.array([2, 0, 2]))[i] for i in range(3)] == [rows[2], rows[0], rows[2]]
    both = given.append(given.take(np.array([1, 0])))
    assert [both[i] for i in range(5)] == [*rows, rows[1], rows[0]]
    shuffled = GivenGoodputs.from_entries(3, np.array([2, 0, 0]), np.array([2, 0, 1]),
                                          np.array([2, 1, 1]), np.array([8, 1, 2]),
                                          np.array([3.0, 1.0, 2.0]))
    assert shuffled == given and GivenGoodputs.none(3) != given


def test_the_wire_reader_reads_the_deadline_between_blocks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(configuration_wire, "WALK_BLOCK", 1)
    jobs = [plain(b"v100", 1, 1, 2.5)] * 3
    for checks in range(3):
        with pytest.raises(DeadlineExpiredError):
            read(jobs, ["v100"], CountdownDeadline(checks=checks))
    assert read(jobs, ["v100"], CountdownDeadline(checks=3)).job.size == 3
