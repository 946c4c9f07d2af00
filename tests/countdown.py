"""A deadline that passes after a given number of looks, for deterministic deadline tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from apportion.solver.deadline import MIN_SOLVER_LIMIT_S, Deadline


@dataclass(frozen=True)
class CountdownDeadline(Deadline):
    """A deadline that passes after its `checks`-th look (`expired()`), whatever the clock
    says: every place where a solve can be cut short is reached deterministically. Solvers get
    no limit before then and the smallest limit after."""

    checks: int = 0
    looks: list[int] = field(default_factory=lambda: [0])

    def expired(self) -> bool:
        self.looks[0] += 1
        return self.looks[0] > self.checks

    def solver_limit_s(self) -> float:
        return MIN_SOLVER_LIMIT_S if self.looks[0] >= self.checks else 0.0


@dataclass(frozen=True)
class ReservingDeadline(Deadline):
    """A deadline that never passes itself, whose `leaving(seconds)` (what a stage gets when
    it holds `seconds` back for later stages) is `share(seconds)`: a stage reading the share
    can be cut while the stages after it still have all their time."""

    share: Callable[[float], Deadline] = field(default=lambda seconds: Deadline(0.0))

    def leaving(self, seconds: float, max_share: float = 0.5) -> Deadline:
        return self.share(seconds)


class FrozenClock:
    """`time.monotonic` stopped at 0, to put in place of the deadline module's `time`: a
    deadline at `at` always has `at` seconds left, whatever runs, so what a stage decides from
    the time left is fixed."""

    @staticmethod
    def monotonic() -> float:
        return 0.0
