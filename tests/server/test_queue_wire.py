"""Queue plans written as bytes (`apportion.server.queue_wire`) parse to the messages a
message-by-message builder makes from the section's entries: on random queue sections (running
jobs holding several devices, jobs with no device, nodes given or not, devices on no node,
empty queues and empty dual lists, unicode and empty ids and names, doubles of any bit
pattern, positions whose varints take several bytes), alone and inside every job's core
allocation record."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.server.plan_wire import job_allocations
from apportion.server.queue_wire import device_queue_records, job_queue_fields
from apportion.server.wire_fields import FEW_STRINGS, records
from apportion.solver.queue_plan import QueueSection
from apportion.v1 import allocation_service_pb2 as service_pb
from tests.server.test_plan_wire import DOUBLES, TEXT, built, numbered, plans, same


def queue_built(section: QueueSection, names: list[str], ids: list[str],
                jobs: Any) -> None:
    """Each job's place into `jobs` (JobAllocations, in job order), as the message builder
    wrote them."""
    for entry, placed in zip(jobs, section.assignments(), strict=True):
        if placed is None:
            continue
        queue = entry.queue
        queue.accelerator_type = names[placed.type_index]
        queue.devices.extend(placed.devices)
        queue.nodes.extend(placed.nodes)
        queue.position = placed.position
        queue.start_time_s = placed.start_time_s
        queue.completion_time_s = placed.completion_time_s
        queue.start_now = placed.start_now
        queue.running = placed.running


def device_queues_built(section: QueueSection, names: list[str], ids: list[str]
                        ) -> service_pb.Plan:
    """Every device's queue, as the message builder wrote them."""
    out = service_pb.Plan()
    for device in section.device_queues():
        dq = out.device_queues.add()
        dq.accelerator_type = names[device.type_index]
        dq.device = device.device
        dq.node = device.node
        dq.free_at_s = device.free_at_s
        dq.running_job_id = ids[device.running_job] if device.running_job >= 0 else ""
        dq.job_ids.extend(ids[i] for i in device.jobs)
        dq.position_duals.extend(device.position_duals)
    return out


def csr(draw: st.DrawFn, rows: int, items: st.SearchStrategy[int]) -> tuple[Any, Any]:
    counts = draw(st.lists(st.integers(0, 3), min_size=rows, max_size=rows))
    offsets = np.r_[0, np.cumsum(counts)].astype(np.int64)
    values = np.array(draw(st.lists(items, min_size=int(offsets[-1]),
                                    max_size=int(offsets[-1]))), np.int64)
    return offsets, values


@st.composite
def sections(draw: st.DrawFn, m: int, n: int) -> QueueSection:
    """A random queue section over m jobs and n types (not a schedule: any values the
    section's types allow)."""
    devices = draw(st.integers(0, 8)) if n else 0
    device_type = np.sort(np.array(draw(st.lists(st.integers(0, max(n - 1, 0)), min_size=devices,
                                                 max_size=devices)), np.int64))
    local = np.arange(devices) - np.searchsorted(device_type, device_type)
    node_names = tuple(draw(st.lists(TEXT, max_size=3, unique=True)))
    device_node = np.array(draw(st.lists(st.integers(-1, len(node_names) - 1),
                                         min_size=devices, max_size=devices)), np.int64)
    queued = np.array(draw(st.lists(st.booleans(), min_size=m, max_size=m)), bool)
    type_index = np.where(queued, np.array(draw(st.lists(
        st.integers(0, max(n - 1, 0)), min_size=m, max_size=m)), np.int64), -1)
    if not n:
        type_index[:] = -1
    job_offsets, job_devices = csr(draw, m, st.integers(0, max(devices - 1, 0)))
    if not devices:
        job_offsets[:] = 0
        job_devices = np.zeros(0, np.int64)
    jobs = st.integers(0, max(m - 1, 0))
    queue_offsets, queued_jobs = csr(draw, devices, jobs)
    if not m:
        queue_offsets[:], queued_jobs = 0, np.zeros(0, np.int64)
    groups = draw(st.integers(1, 3))
    dual_offsets, dual_items = csr(draw, groups, st.integers(0, 9))
    duals = np.array(draw(st.lists(DOUBLES, min_size=dual_items.size,
                                   max_size=dual_items.size)), np.float64)

    def column(strategy: st.SearchStrategy[Any], size: int, dtype: Any) -> Any:
        return np.array(draw(st.lists(strategy, min_size=size, max_size=size)), dtype)

    return QueueSection(
        type_index, column(st.integers(0, 1 << 20), m, np.int64),
        column(DOUBLES, m, np.float64), column(DOUBLES, m, np.float64),
        column(st.booleans(), m, bool), column(st.booleans(), m, bool), job_offsets,
        job_devices, device_type, local, device_node, node_names,
        column(DOUBLES, devices, np.float64),
        column(st.integers(-1, m - 1), devices, np.int64) if m else np.full(devices, -1),
        queue_offsets, queued_jobs, column(st.integers(0, groups - 1), devices, np.int64),
        dual_offsets, duals)


@st.composite
def queue_plans(draw: st.DrawFn) -> tuple[QueueSection, list[str], list[str]]:
    """A section with its type names and job ids (a few, or more than `FEW_STRINGS`: the
    ids are then copied as byte ranges)."""
    m = draw(st.one_of(st.integers(0, 10), st.integers(FEW_STRINGS + 1, FEW_STRINGS + 4)))
    names = draw(st.lists(st.one_of(st.sampled_from(["v100", "k80", "é", "t" * 130]), TEXT),
                          max_size=3, unique=True))
    ids = draw(st.lists(TEXT, min_size=m, max_size=m))
    return draw(sections(m, len(names))), names, ids


@given(queue_plans())
def test_device_queues_are_the_messages(plan: tuple[QueueSection, list[str], list[str]]
                                        ) -> None:
    section, names, ids = plan
    data = device_queue_records(section, names, ids)
    expected = device_queues_built(section, names, ids)
    assert same(service_pb.Plan.FromString(data), expected)
    assert data == expected.SerializeToString()


@given(queue_plans())
def test_queue_places_are_the_messages(plan: tuple[QueueSection, list[str], list[str]]
                                       ) -> None:
    section, names, ids = plan
    data = records(service_pb.Plan.JOBS_FIELD_NUMBER, job_queue_fields(section, names))
    expected = service_pb.Plan()
    for _ in ids:
        expected.jobs.add()
    queue_built(section, names, ids, expected.jobs)
    assert same(service_pb.Plan.FromString(data), expected)
    assert data == expected.SerializeToString()


@given(plans(), st.data())
def test_queue_places_within_the_allocations(plan: tuple[Any, ...], data: st.DataObject
                                             ) -> None:
    """The places between the dual and the optional doubles of every job's record."""
    ids, status, reasons, share, names, doubles, state = plan
    section = data.draw(sections(len(ids), len(names)))
    written = job_allocations(ids, np.array(status, np.int32), reasons, share, names, doubles,
                              numbered(state), job_queue_fields(section, names))
    expected = built(ids, status, reasons, share, names, doubles, state)
    queue_built(section, names, ids, expected.jobs)
    assert same(service_pb.Plan.FromString(written), expected)
    assert len(written) == expected.ByteSize()


def test_a_running_job_on_several_nodes() -> None:
    """A running job holding three devices on two nodes (one device on no node) names each
    node once, in device order; a pending job on a device without a node names none."""
    section = QueueSection(
        np.array([0, 0, -1]), np.array([0, 2, 0]), np.array([5.0, 7.0, 0.0]),
        np.array([9.0, math.inf, 0.0]), np.array([False, False, False]),
        np.array([True, False, False]), np.array([0, 3, 4, 4]), np.array([2, 0, 1, 3]),
        np.zeros(4, np.int64), np.arange(4), np.array([1, 0, 1, -1]), ("a", "b"),
        np.array([9.0, 9.0, 9.0, 5.0]), np.array([0, 0, 0, -1]), np.array([0, 0, 0, 0, 1]),
        np.array([1]), np.array([0, 0, 0, 1]), np.array([0, 2, 3]),
        np.array([-1.0, -0.5, 0.0]))
    plan = service_pb.Plan.FromString(
        records(service_pb.Plan.JOBS_FIELD_NUMBER, job_queue_fields(section, ["v100"])))
    running, pending, idle = plan.jobs
    assert list(running.queue.devices) == [2, 0, 1]
    assert list(running.queue.nodes) == ["b", "a"]
    assert running.queue.running and running.queue.completion_time_s == 9.0
    assert list(pending.queue.devices) == [3] and not pending.queue.nodes
    assert pending.queue.position == 2 and math.isinf(pending.queue.completion_time_s)
    assert not idle.HasField("queue")
    queues = service_pb.Plan.FromString(device_queue_records(section, ["v100"], ["r", "p", "i"]))
    assert [q.running_job_id for q in queues.device_queues] == ["r", "r", "r", ""]
    assert [list(q.job_ids) for q in queues.device_queues] == [[], [], [], ["p"]]
    assert [list(q.position_duals) for q in queues.device_queues] == [
        [-1.0, -0.5], [-1.0, -0.5], [-1.0, -0.5], [0.0]]
    assert [q.node for q in queues.device_queues] == ["b", "a", "b", ""]
