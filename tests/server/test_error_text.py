"""Bounded, escaped error text (`apportion.server.error_text`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from apportion.server.error_text import (
    MAX_DESCRIPTION_BYTES,
    MAX_FIELD_BYTES,
    bounded,
    escape,
    listed,
    one_line,
)
from apportion.solver.errors import Violation


def size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def test_printable_text_is_unchanged() -> None:
    for text in ("", "v100", "résumé ✓ 😀", "a b"):
        assert escape(text) == text
        assert bounded(text) == text


def test_control_characters_are_escaped() -> None:
    assert escape("a\nb\tc\x00\x1b[2J\u202e\u2028") == "a\\nb\\tc\\x00\\x1b[2J\\u202e\\u2028"


@given(st.text(max_size=3000), st.integers(min_value=40, max_value=1500))
def test_bounded_is_printable_and_within_the_limit(text: str, limit: int) -> None:
    out = bounded(text, limit)
    assert out.isprintable()
    if out == escape(text):
        assert size(out) <= limit
    else:  # cut: both ends kept within the budget, plus the marker
        marker = out[out.index("…[") : out.index("]…") + 2]
        assert size(out) - size(marker) <= limit
        assert escape(text).startswith(out[: out.index("…[")])
        assert escape(text).endswith(out[out.index("]…") + 2 :])


def test_a_long_text_keeps_its_start_and_end() -> None:
    text = "unknown policy '" + "x" * 2**20 + "'; known policies: a, b, c"
    out = bounded(text, 200)
    assert out.startswith("unknown policy 'xxx")
    assert out.endswith("'; known policies: a, b, c")
    assert f"…[{len(text) - 200} characters omitted]…" in out  # ASCII: 200 characters kept


def test_one_line_mentions_what_follows() -> None:
    assert one_line("first\nsecond") == "first (…)"
    assert one_line("only\n") == "only"


def test_listed_bounds_count_size_and_values() -> None:
    many = [Violation(f"jobs[{i}].id", "bad " + "v" * 5000) for i in range(1000)]
    out = listed(many, max_count=50, max_bytes=1600)
    assert out[-1].field == "request" and out[-1].description.startswith("and ")
    shown = out[:-1]
    assert 1 <= len(shown) < 50
    assert out[-1].description == f"and {1000 - len(shown)} more violations not listed"
    for violation in shown:
        assert size(violation.field) <= MAX_FIELD_BYTES
        assert size(violation.description) <= MAX_DESCRIPTION_BYTES + 40
    assert listed(many[:3], max_count=50) == [
        Violation(v.field, bounded(v.description, MAX_DESCRIPTION_BYTES)) for v in many[:3]
    ]
