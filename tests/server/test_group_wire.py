"""Co-location groups written as bytes (`apportion.server.group_wire`) parse to the messages a
message-by-message builder makes: the `Plan.groups` records and the group fields of every
`JobAllocation`, on random group plans (unicode and long strings, a job in two groups, a node
named twice in a group, empty and unnamed types, doubles of any bit pattern, -0.0, NaN and
infinite CPUs and memory)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.server.group_wire import GroupWire
from apportion.server.plan_wire import job_allocations
from apportion.solver.groups import ColocationGroup, GroupSection
from apportion.v1 import allocation_service_pb2 as service_pb
from tests.server.test_plan_wire import DOUBLES, TEXT, same


def built(section: GroupSection, ids: list[str], names: list[str]) -> service_pb.Plan:
    """The groups and the members' fields built message by message (the builder the bytes
    replace)."""
    out = service_pb.Plan()
    for job_id in ids:
        out.jobs.add(job_id=job_id)
    entries = list(out.jobs)
    for g, group in enumerate(section.groups):
        msg = out.groups.add()
        msg.job_ids.extend(ids[i] for i in group.members)
        msg.slowdown.extend(group.slowdown)
        if group.type_index >= 0:
            msg.accelerator_type = names[group.type_index]
        msg.devices = group.devices
        for node, devices in group.node_devices:
            msg.node_devices[node] = msg.node_devices[node] + devices
        msg.device_ids.extend(group.device_ids)
        msg.period_s = group.period_s
        msg.configurations.extend(group.configurations)
        for member, slowdown in zip(group.members, group.slowdown, strict=True):
            if member < len(entries):
                entries[member].group = g
                entries[member].slowdown = slowdown
    for array, name in ((section.cpus, "cpus"), (section.memory_gib, "memory_gib")):
        if array is None:
            continue
        for i, value in enumerate(array.tolist()):
            if i < len(entries) and math.isfinite(value):
                setattr(entries[i], name, value)
    return out


def written(section: GroupSection, ids: list[str], names: list[str]) -> service_pb.Plan:
    """The same from `group_wire`'s bytes, behind the jobs' records (ids only)."""
    m = len(ids)
    zeros = np.zeros(m)
    wire = GroupWire(section)
    jobs = job_allocations(ids, np.zeros(m, np.int32), [""] * m, np.zeros((m, 0)), [],
                           [zeros] * 4, (), tail=wire.member_fields(m))
    return service_pb.Plan.FromString(jobs + wire.records(ids, names))


@st.composite
def group_plans(draw: st.DrawFn) -> tuple[GroupSection, list[str], list[str]]:
    m = draw(st.integers(0, 10))
    ids = draw(st.lists(TEXT, min_size=m, max_size=m))
    names = draw(st.lists(st.one_of(st.sampled_from(["v100", "", "é", "t" * 130]),
                                    st.text(max_size=5)), max_size=3, unique=True))
    nodes = st.sampled_from(["n0", "n1", "", "ü" * 70])
    groups = []
    for _ in range(draw(st.integers(0, 6) if m else st.just(0))):
        members = draw(st.lists(st.integers(0, m - 1), min_size=0, max_size=4, unique=True))
        groups.append(ColocationGroup(
            members=tuple(members),
            slowdown=tuple(draw(st.lists(DOUBLES, min_size=len(members),
                                         max_size=len(members)))),
            type_index=draw(st.integers(-1, len(names) - 1)),
            devices=draw(st.one_of(st.integers(0, 8), st.integers(-(2**31), 2**31 - 1))),
            node_devices=tuple(draw(st.lists(st.tuples(nodes, st.integers(-3, 300)),
                                             max_size=4))),
            device_ids=tuple(draw(st.lists(TEXT, max_size=3))),
            period_s=draw(DOUBLES),
            configurations=tuple(draw(st.lists(TEXT, max_size=3))),
        ))
    column = st.none() | st.lists(st.one_of(DOUBLES, st.just(math.nan)), min_size=m,
                                  max_size=m).map(lambda v: np.array(v, np.float64))
    return GroupSection(tuple(groups), draw(column), draw(column)), ids, names


@given(group_plans())
def test_group_bytes_are_the_messages(plan: tuple[Any, ...]) -> None:
    section, ids, names = plan
    assert same(written(section, ids, names), built(section, ids, names))


def test_a_job_in_two_groups_and_a_node_named_twice() -> None:
    """The later group's index and slowdown; a node's devices added up at its first
    place."""
    section = GroupSection((
        ColocationGroup((0, 1), (1.5, 1.25), 0, 2, (("n0", 1), ("n1", 2), ("n0", 3))),
        ColocationGroup((1, 2), (2.0, -0.0), 1, 1, (), ("d1", "d2"), 0.5, ("a", "b")),
    ), np.array([1.0, math.inf, math.nan]), np.array([-0.0, 2.0, 3.0]))
    ids, names = ["a", "bb", "ccc"], ["v100", "k80"]
    plan = written(section, ids, names)
    assert same(plan, built(section, ids, names))
    assert [entry.group for entry in plan.jobs] == [0, 1, 1]
    assert plan.jobs[1].slowdown == 2.0
    assert dict(plan.groups[0].node_devices) == {"n0": 4, "n1": 2}
    assert not plan.jobs[1].HasField("cpus") and plan.jobs[0].HasField("memory_gib")
