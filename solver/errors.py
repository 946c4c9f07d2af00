"""Errors raised for malformed input: every violation carries the field path it refers to."""

from __future__ import annotations

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
