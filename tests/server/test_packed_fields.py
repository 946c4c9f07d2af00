"""`write_packed` fills repeated numeric fields exactly as the protobuf runtime's `extend` does
(same field values, same serialized bytes), for every field type it takes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.server.packed_fields import encode_varints, write_packed
from apportion.v1 import allocation_service_pb2 as service_pb

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
