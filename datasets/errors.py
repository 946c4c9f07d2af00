"""Errors, warnings and the read report shared by every trace reader.

A malformed row raises `TraceFormatError` naming the file, the line (1-based, the header is
line 1) and the column; with ``skip_bad=True`` the row is skipped and counted in the
`ReadReport` instead. Suspicious but well-formed values (negative durations, zero GPUs,
arrivals out of order) are kept as read and counted as *anomalies*: reported, not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_EXAMPLES = 5
"""Examples kept per anomaly kind and for skipped rows (the counts are always complete)."""


@dataclass(frozen=True)
class RowError:
    """One problem at a place in a file. `line` 0 = not tied to a line; `column` "" = the
    whole row."""

    path: str
    line: int
    column: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        col = f": column {self.column!r}" if self.column else ""
        return f"{where}{col}: {self.message}"


class TraceFormatError(ValueError):
    """A file cannot be read as the requested format (the message names file, line, column)."""

    def __init__(self, path: str, line: int, column: str, message: str) -> None:
        self.error = RowError(str(path), line, column, message)
        super().__init__(str(self.error))


class TraceWarning(UserWarning):
    """A recoverable oddity of a file (e.g. an unknown header column, ignored)."""


@dataclass
class Anomaly:
    """A well-formed but suspicious value kind: how many rows, and the first examples."""

    count: int = 0
    examples: list[RowError] = field(default_factory=list)


@dataclass
class ReadReport:
    """What happened while reading one trace (mutable while the reader runs)."""

    path: str
    rows_read: int = 0
    """Data rows (or records) seen, good and bad."""
    rows_kept: int = 0
    skipped: int = 0
    """Malformed rows skipped (only with ``skip_bad=True``)."""
    skipped_examples: list[RowError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    anomalies: dict[str, Anomaly] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    """Well-formed records the format's recipe excludes (e.g. Philly jobs with no attempt)."""

    def skip(self, error: RowError) -> None:
        self.skipped += 1
        if len(self.skipped_examples) < MAX_EXAMPLES:
            self.skipped_examples.append(error)

    def anomaly(self, kind: str, count: int, examples: list[RowError]) -> None:
        if count <= 0:
            return
        entry = self.anomalies.setdefault(kind, Anomaly())
        entry.count += count
        room = MAX_EXAMPLES - len(entry.examples)
        entry.examples.extend(examples[: max(room, 0)])

    def drop(self, reason: str, count: int = 1) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + count

    def summary(self) -> str:
        """Human-readable multi-line summary (what the CLI prints on stderr)."""
        lines = [f"{self.path}: {self.rows_kept} of {self.rows_read} rows kept"]
        if self.skipped:
            lines.append(f"  skipped {self.skipped} malformed rows, e.g.:")
            lines += [f"    {e}" for e in self.skipped_examples]
        for reason, n in sorted(self.dropped.items()):
            lines.append(f"  dropped {n} rows: {reason}")
        for kind, entry in sorted(self.anomalies.items()):
            lines.append(f"  {entry.count} rows with {kind.replace('_', ' ')}, e.g.:")
            lines += [f"    {e}" for e in entry.examples]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)
