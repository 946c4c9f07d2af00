"""Bounded, printable error text: what the CLI prints and what the service sends back.

Error messages echo values from the request (a policy name, an id, a map key). Echoed as they
are, a 1 MiB policy name makes a 1 MiB message (over gRPC's trailer limit, so the client sees a
transport error instead of INVALID_ARGUMENT), and a raw newline in an id can fake a line of the
violation list. Every text that leaves the process passes through `bounded` (control and other
non-printable characters escaped, long texts cut in the middle with a marker) and violation
lists through `listed` (the first ones within a budget, then one entry counting the rest).
Sizes are UTF-8 bytes, the unit gRPC's limits count. Pure functions; no gRPC import.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from apportion.solver.errors import Violation

MAX_FIELD_BYTES = 200
"""A violation's field path is cut to about this many UTF-8 bytes."""
MAX_DESCRIPTION_BYTES = 1200
"""A violation's description is cut to about this many UTF-8 bytes (its end is kept: it often
lists the accepted values)."""
MAX_LINE_BYTES = 1000
"""Any other one-line message (an input error, an internal error) is cut to about this size."""
HEAD_FRACTION = 0.25
"""Share of a cut text's budget kept from its start; the rest is kept from its end."""


def escape(text: str) -> str:
    """`text` with every non-printable character (control characters, line and paragraph
    separators, format characters, non-space whitespace) written as a Python escape
    (``\\n``, ``\\x1b``, ``\\u202e``); printable text is returned unchanged."""
    if text.isprintable():
        return text
    return "".join(_escaped_char(c) for c in text)


def _escaped_char(char: str) -> str:
    return char if char.isprintable() else char.encode("unicode_escape").decode("ascii")


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _take(chars: Iterable[str], budget: int) -> tuple[list[str], int]:
    """Escaped pieces of `chars` while their UTF-8 size fits `budget`; also how many of the
    original characters they cover."""
    pieces: list[str] = []
    used = 0
    for char in chars:
        piece = _escaped_char(char)
        size = _size(piece)
        if size > budget:
            break
        pieces.append(piece)
        budget -= size
        used += 1
    return pieces, used


def bounded(text: str, limit_bytes: int = MAX_LINE_BYTES) -> str:
    """`text` escaped (see `escape`) and, when that exceeds `limit_bytes` UTF-8 bytes, cut in
    the middle: its start and end within the budget around ``…[N characters omitted]…``."""
    if len(text) <= limit_bytes // 4 or (len(text) <= limit_bytes and _size(text) <= limit_bytes):
        escaped = escape(text)
        if _size(escaped) <= limit_bytes:
            return escaped
    head_budget = int(limit_bytes * HEAD_FRACTION)
    # at most `limit_bytes` characters of either end can fit, so only those are looked at
    head, head_used = _take(text[:limit_bytes], head_budget)
    tail, tail_used = _take(reversed(text[-limit_bytes:]), limit_bytes - head_budget)
    omitted = len(text) - head_used - tail_used
    return f"{''.join(head)}…[{omitted} characters omitted]…{''.join(reversed(tail))}"


def one_line(text: str, limit_bytes: int = MAX_LINE_BYTES) -> str:
    """The first line of `text` (a following line is mentioned, not shown), bounded."""
    first, newline, rest = text.strip().partition("\n")
    more = " (…)" if newline and rest.strip() else ""
    return bounded(first, limit_bytes - len(more)) + more


def bounded_violation(violation: Violation) -> Violation:
    """`violation` with its field path and description bounded."""
    return Violation(
        bounded(violation.field, MAX_FIELD_BYTES),
        bounded(violation.description, MAX_DESCRIPTION_BYTES),
    )


def more_violations(count: int) -> Violation:
    """The entry that ends a cut list: how many violations are not listed."""
    return Violation("request", f"and {count} more violation{'s' if count > 1 else ''} not listed")


def listed(
    violations: Sequence[Violation], max_count: int, max_bytes: int | None = None
) -> list[Violation]:
    """The violations to report, bounded (`bounded_violation`): the first ones, at most
    `max_count` and (when given) about `max_bytes` UTF-8 bytes of field and description text
    in all (the first one always), then a `more_violations` entry counting those left out."""
    out: list[Violation] = []
    total = 0
    for violation in violations:
        if len(out) >= max_count:
            break
        entry = bounded_violation(violation)
        size = _size(entry.field) + _size(entry.description)
        if out and max_bytes is not None and total + size > max_bytes:
            break
        out.append(entry)
        total += size
    left = len(violations) - len(out)
    if left:
        out.append(more_violations(left))
    return out
