"""`wire_records`: the lockstep walk finds every message's records, block by block, as the
one-by-one reader does; `copy_ranges` copies every range and touches nothing outside them."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.server import wire_records
from apportion.server.wire_peek import records as one_by_one
from apportion.server.wire_records import PADDING, WireBuffer, copy_ranges, records
from apportion.solver.deadline import DeadlineExpiredError
from tests.countdown import CountdownDeadline
from tests.server.test_job_wire import I32, I64, LEN, VARINT, record, varint

RECORDS = st.one_of(
    st.builds(lambda n, v: record(n, VARINT, varint(v)), st.integers(1, 300),
              st.integers(0, 2**64 - 1)),
    st.builds(lambda n, b: record(n, I64, b), st.integers(1, 20), st.binary(min_size=8,
                                                                            max_size=8)),
    st.builds(lambda n, b: record(n, I32, b), st.integers(1, 20), st.binary(min_size=4,
                                                                            max_size=4)),
    st.builds(lambda n, b: record(n, LEN, b), st.integers(1, 20), st.binary(max_size=200)),
)


def spans(messages: list[bytes]) -> tuple[WireBuffer, np.ndarray, np.ndarray]:
    length = np.array([len(m) for m in messages], np.int64)
    end = np.cumsum(length)
    return WireBuffer(b"".join([*messages, PADDING])), end - length, end


@given(st.lists(st.lists(RECORDS, max_size=6).map(b"".join), max_size=9),
       st.sampled_from([1, 2, 3, wire_records.WALK_BLOCK]))
def test_the_walk_finds_each_messages_records_in_order(messages: list[bytes],
                                                       block: int) -> None:
    """Every message's records, as the one-by-one reader gives them, whatever the block."""
    buf, start, end = spans(messages)
    malformed = np.zeros(len(messages), bool)
    with mock.patch.object(wire_records, "WALK_BLOCK", block):
        found = records(buf, start, end, 6, malformed)
    assert not malformed.any()
    data = buf.bytes.tobytes()
    for k in range(len(messages)):
        mine = found.owner == k
        got = list(zip(found.tag[mine].tolist(), found.start[mine].tolist(),
                       found.end[mine].tolist(), strict=True))
        assert got == list(one_by_one(data, int(start[k]), int(end[k])))


def test_the_walk_reads_the_deadline_between_blocks() -> None:
    buf, start, end = spans([record(1, VARINT, b"\x01")] * 3)
    with mock.patch.object(wire_records, "WALK_BLOCK", 1):
        for checks in range(2):
            with pytest.raises(DeadlineExpiredError):
                records(buf, start, end, 1, np.zeros(3, bool), CountdownDeadline(checks=checks))
        assert records(buf, start, end, 1, np.zeros(3, bool),
                       CountdownDeadline(checks=2)).owner.tolist() == [0, 1, 2]


@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 9)), max_size=30),
       st.integers(0, 2**32 - 1))
def test_ranges_are_copied_and_nothing_else(ranges: list[tuple[int, int]], seed: int) -> None:
    """Ranges of 0 to 300 bytes (both sides of the 8-byte word copy and of the slice copy),
    packed end to end in the source and with gaps (0 = none) in the output, which starts
    filled with a sentinel."""
    rng = np.random.default_rng(seed)
    length = np.array([n for n, _ in ranges], np.int64)
    gap = np.array([g for _, g in ranges], np.int64)
    source = rng.integers(0, 255, int(length.sum()), dtype=np.uint8, endpoint=True)
    start = np.cumsum(length) - length
    at = np.cumsum(length + gap) - length
    out = np.full(int((length + gap).sum()), 0xA5, np.uint8)
    expected = out.copy()
    for a, s, n in zip(at.tolist(), start.tolist(), length.tolist(), strict=True):
        expected[a:a + n] = source[s:s + n]
    order = rng.permutation(length.size)  # the ranges need not come in order
    copy_ranges(out, at[order], source, start[order], length[order])
    assert out.tobytes() == expected.tobytes()
