"""`identical_rows` classes rows exactly as comparing them entry by entry does (checked against
`np.unique` and against pairwise comparison), also when two different rows share a hash."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from apportion.solver.row_classes import _MIX, identical_rows

VALUES = st.sampled_from([0.0, -0.0, 1.0, 2.0, 0.5, 1e-300, 3.7, 1e300])


def check_classes(key: np.ndarray) -> None:
    first, inverse, sizes = identical_rows(key)
    m = key.shape[0]
    same = np.all(key[:, None, :] == key[None, :, :], axis=2)  # pairwise, entry by entry
    assert np.array_equal(inverse[:, None] == inverse[None, :], same)
    assert np.array_equal(np.bincount(inverse, minlength=first.size), sizes)
    assert np.array_equal(inverse[first], np.arange(first.size))  # first rows, in order
    assert np.all(np.diff(first) > 0)
    for c, row in enumerate(first):
        assert row == np.flatnonzero(inverse == c)[0]
    _, counts = np.unique(key + 0.0, axis=0, return_counts=True)
    assert sorted(counts.tolist()) == sorted(sizes.tolist()) and sizes.sum() == m


@given(st.integers(0, 30).flatmap(
    lambda m: arrays(np.float64, (m, 3), elements=VALUES)))
def test_classes_are_the_identical_rows(key: np.ndarray) -> None:
    check_classes(key)


def test_different_rows_with_the_same_hash() -> None:
    # rows (x0, x1) and (y0, y1) with (x0 * MIX) ^ x1 == (y0 * MIX) ^ y1 share the digest
    x = np.array([1.0, 2.0]).view(np.uint64)
    y0 = np.array([3.0]).view(np.uint64)[0]
    with np.errstate(over="ignore"):
        y1 = (x[0] * _MIX) ^ x[1] ^ (y0 * _MIX)
    y = np.array([y0, y1], np.uint64).view(np.float64)
    assert np.all(np.isfinite(y)) and not np.array_equal(x.view(np.float64), y)
    key = np.vstack([x.view(np.float64), y, x.view(np.float64), [5.0, 5.0]])
    check_classes(key)
    first, inverse, _ = identical_rows(key)
    assert inverse.tolist() == [0, 1, 0, 2] and first.tolist() == [0, 1, 3]
