"""`wire_records.copy_ranges`: every range copied, nothing outside the ranges touched."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.server.wire_records import copy_ranges


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
