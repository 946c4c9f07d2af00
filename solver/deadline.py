"""One deadline per request, created when the request arrives and read by every stage.

A `Deadline` is an absolute point on the machine's monotonic clock (``time.monotonic()``, s),
or none. On Linux that clock is shared by every process of the machine, so a deadline made by
the server when a call arrives can be handed to a worker process as a number (`at`) and means
the same instant there: time spent waiting for a worker is already taken off.

Stages never do their own ``limit - elapsed`` arithmetic: they ask `remaining()` or
`expired()`, give a solver `solver_limit_s()`, and split the budget with `child(fraction)`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

MIN_SOLVER_LIMIT_S = 1e-3
"""Smallest time limit (s) handed to a solver when a deadline is near or past: the solver still
runs, stops at once and reports its limit, so the policy answers with an explicit termination
instead of not running at all."""


class DeadlineExpiredError(Exception):
    """Raised by `Deadline.check` once the deadline has passed (a stage that cannot return a
    partial answer stops here; the caller reports the time limit)."""


@dataclass(frozen=True)
class Deadline:
    """An absolute deadline on ``time.monotonic()`` (s); `at` = inf means none."""

    at: float = math.inf

    @staticmethod
    def never() -> Deadline:
        """No deadline."""
        return Deadline(math.inf)

    @staticmethod
    def after(seconds: float) -> Deadline:
        """`seconds` from now. `seconds` <= 0 or not finite means no deadline (the convention
        of every ``time_limit_s`` field: 0 = none)."""
        if not math.isfinite(seconds) or seconds <= 0:
            return Deadline(math.inf)
        return Deadline(time.monotonic() + seconds)

    @property
    def bounded(self) -> bool:
        """True when there is a deadline."""
        return math.isfinite(self.at)

    def remaining(self) -> float:
        """Seconds left (>= 0); inf without a deadline."""
        if not self.bounded:
            return math.inf
        return max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        """True once the deadline has passed."""
        return self.bounded and time.monotonic() >= self.at

    def check(self) -> None:
        """Raise `DeadlineExpiredError` once the deadline has passed."""
        if self.expired():
            raise DeadlineExpiredError("the time limit was reached")

    def solver_limit_s(self) -> float:
        """The time limit (s) to hand a solver library: 0.0 = none (no deadline), otherwise the
        time left but at least `MIN_SOLVER_LIMIT_S`."""
        if not self.bounded:
            return 0.0
        return max(MIN_SOLVER_LIMIT_S, self.at - time.monotonic())

    def child(self, fraction: float) -> Deadline:
        """A deadline `fraction` (in (0, 1]) of the time left from now: for a stage that must
        leave time to the stages after it. Without a deadline, none."""
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        if not self.bounded:
            return self
        now = time.monotonic()
        return Deadline(now + fraction * max(0.0, self.at - now))

    def leaving(self, seconds: float, max_share: float = 0.5) -> Deadline:
        """A deadline `seconds` earlier, for a stage that must leave that much time to the
        work after it (decoding, building a response); never more than `max_share` of the
        time left from now is held back. Without a deadline, none."""
        if not self.bounded:
            return self
        held = min(max(0.0, seconds), max_share * self.remaining())
        return Deadline(self.at - held)

    def earliest(self, other: Deadline) -> Deadline:
        """The earlier of the two deadlines."""
        return self if self.at <= other.at else other

    def within(self, seconds: float) -> Deadline:
        """This deadline, or `seconds` from now if that is earlier (`seconds` <= 0: no cap)."""
        return self.earliest(Deadline.after(seconds))


NO_DEADLINE = Deadline()
"""The absent deadline, for default arguments."""
