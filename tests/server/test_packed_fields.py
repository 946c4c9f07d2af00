"""`write_packed` fills repeated numeric fields exactly as the protobuf runtime's `extend` does
(same field values, same serialized bytes), and `read_packed` reads them as iterating the
field does, for every field type they take, next to string fields and unknown fields."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.server.packed_fields import (
    decode_varints,
    encode_varints,
    read_packed,
    write_packed,
)
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

INT32 = st.integers(-(2**31), 2**31 - 1)
DOUBLES = st.floats(allow_nan=True, allow_infinity=True)
COLUMNS = st.fixed_dictionaries({
    "job_index": st.lists(INT32, max_size=40),  # int32
    "status": st.lists(st.sampled_from([0, 1, 2, 3, 4, 127, 128, 300, -1]), max_size=40),  # enum
    "time_share": st.lists(DOUBLES, max_size=40),  # double
    "effective_throughput": st.lists(DOUBLES, max_size=40),  # float: rounded to single
})


@given(COLUMNS, st.lists(INT32, max_size=3))
def test_write_packed_is_extend(columns: dict[str, list[float]], before: list[int]) -> None:
    expected, got = service_pb.PlanColumns(), service_pb.PlanColumns()
    for message in (expected, got):
        message.job_index.extend(before)  # appended after what the field holds
    for name, values in columns.items():
        getattr(expected, name).extend(values)
    dtypes = {"job_index": np.int32, "status": np.int32}
    write_packed(got, {name: np.array(values, dtypes.get(name, np.float64))
                       for name, values in columns.items()})
    assert got.SerializeToString() == expected.SerializeToString()
    assert list(got.job_index) == list(expected.job_index)


@pytest.mark.parametrize("value", [0, 1, 127, 128, 16383, 16384, 2**31 - 1, -1, -(2**31)])
def test_varint_boundaries(value: int) -> None:
    message = service_pb.PlanColumns()
    message.job_index.append(value)
    tag_and_length = 2  # one byte of tag, one of length
    assert encode_varints(np.array([value])) == message.SerializeToString()[tag_and_length:]


def test_only_repeated_numeric_fields() -> None:
    with pytest.raises(TypeError, match="reason"):
        write_packed(service_pb.PlanColumns(), {"reason": np.zeros(2)})


@given(COLUMNS, st.lists(st.text(max_size=5), max_size=5), st.booleans())
def test_read_packed_is_iteration(columns: dict[str, list[float]], reasons: list[str],
                                  unknown: bool) -> None:
    message = service_pb.PlanColumns()
    for name, values in columns.items():
        getattr(message, name).extend(values)
    message.reason.extend(reasons)  # a string field between the numeric ones
    if unknown:  # a field of a newer schema (number 99, a double)
        message.MergeFromString(b"\x99\x06" + np.float64(2.5).tobytes())
    got = read_packed(message, [*columns, "dual"])
    for name in [*columns, "dual"]:
        expected = np.array(list(getattr(message, name)), got[name].dtype)
        assert np.array_equal(got[name], expected, equal_nan=True)
        assert np.array_equal(np.signbit(got[name]), np.signbit(expected))
    assert got["job_index"].dtype == np.int32 and got["time_share"].dtype == np.float64


@given(st.lists(INT32, max_size=30))
def test_job_columns_scale_factor(values: list[int]) -> None:
    message = snapshot_pb.JobColumns(ids=[str(v) for v in values], scale_factor=values)
    assert read_packed(message, ["scale_factor"])["scale_factor"].tolist() == values


@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=30))
def test_varints_round_trip(values: list[int]) -> None:
    assert decode_varints(encode_varints(np.array(values, np.int64))).tolist() == values
