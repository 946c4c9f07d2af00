"""Errors raised for malformed input: every violation carries the field path it refers to."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    """One problem with the input: where (`field`, a path such as
    ``snapshot.jobs[3].throughput["v100"]``) and what (`description`)."""

    field: str
    description: str

    def __str__(self) -> str:
        return f"{self.field}: {self.description}"


class ValidationError(ValueError):
    """The request is malformed. `violations` lists every problem found, not only the first."""

    def __init__(self, violations: list[Violation]) -> None:
        if not violations:
            raise ValueError("ValidationError needs at least one violation")
        self.violations: tuple[Violation, ...] = tuple(violations)
        super().__init__("\n".join(str(v) for v in self.violations))


def echo(value: str) -> str:
    """`value` quoted for a message, control characters escaped (the text that leaves the
    process is cut to its bounds by `apportion.server.error_text`)."""
    return repr(value)


MAX_LISTED_NAMES = 12
"""Longest list of names a violation repeats (then "and N more")."""


def listing(names: Iterable[str]) -> str:
    """Names for a message ("a", "b", ... and N more; "none" when empty), each as `echo`."""
    items = list(names)
    shown = ", ".join(echo(name) for name in items[:MAX_LISTED_NAMES]) or "none"
    more = len(items) - MAX_LISTED_NAMES
    return f"{shown} and {more} more" if more > 0 else shown


def key(name: str) -> str:
    """A map key in a field path, `["v100"]`: JSON-quoted (control characters escaped)."""
    return f"[{json.dumps(name, ensure_ascii=False)}]"
