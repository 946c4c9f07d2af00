"""The queue section's arrays (`apportion.solver.queue_plan`): the per-entry objects they give,
the nodes derived from the devices, and a section laid out over more jobs (admission)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.solver.queue_plan import QueueAssignment, QueueSection, take_rows
from tests.server.test_queue_wire import sections


def test_take_rows() -> None:
    offsets = np.array([0, 2, 2, 5])
    new_offsets, item = take_rows(offsets, np.array([2, 0, 1]))
    assert new_offsets.tolist() == [0, 3, 5, 5]
    assert item.tolist() == [2, 3, 4, 0, 1]


def test_a_running_job_names_each_node_once() -> None:
    section = QueueSection(
        np.array([1]), np.array([0]), np.array([5.0]), np.array([9.0]), np.array([False]),
        np.array([True]), np.array([0, 4]), np.array([3, 0, 2, 1]), np.ones(4, np.int64),
        np.arange(4), np.array([1, 0, 1, -1]), ("a", "b"), np.zeros(4), np.zeros(4, np.int64),
        np.zeros(5, np.int64), np.zeros(0, np.int64), np.zeros(4, np.int64),
        np.zeros(2, np.int64), np.zeros(0))
    assert section.assignment(0) == QueueAssignment(1, (3, 0, 2, 1), ("b", "a"), 0, 5.0, 9.0,
                                                    False, True)
    offsets, nodes = section.job_nodes()
    assert offsets.tolist() == [0, 2] and nodes.tolist() == [1, 0]  # in device order


@st.composite
def expansions(draw: st.DrawFn) -> tuple[QueueSection, np.ndarray, int]:
    k = draw(st.integers(0, 6))
    m = k + draw(st.integers(0, 4))
    back = np.array(draw(st.permutations(range(m)))[:k], np.int64)
    return draw(sections(k, draw(st.integers(1, 3)))), back, m


@given(expansions())
def test_expanded_moves_every_entry(case: tuple[QueueSection, np.ndarray, int]) -> None:
    """Job k's place is job back[k]'s; every other job has none; the devices' queues and
    holders name the jobs by their new indices."""
    section, back, m = case
    wide = section.expanded(back, m)
    assert wide.num_jobs == m
    old = section.assignments()
    new = wide.assignments()
    for k, i in enumerate(back.tolist()):
        assert repr(new[i]) == repr(old[k])  # NaN times compare equal
    assert sum(place is not None for place in new) == sum(place is not None for place in old)
    for before, after in zip(section.device_queues(), wide.device_queues(), strict=True):
        assert after.jobs == tuple(int(back[i]) for i in before.jobs)
        assert after.running_job == (int(back[before.running_job])
                                     if before.running_job >= 0 else -1)
        assert repr(after.position_duals) == repr(before.position_duals)
