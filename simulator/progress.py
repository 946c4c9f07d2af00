"""Progress on stderr for long simulations (tqdm, from the `apportion[sim]` extra).

One run: a bar over the measured jobs that have finished, with the rounds simulated, the
simulated time and the active jobs, and tqdm's rate and ETA. A sweep: a bar over the runs.
Without tqdm, or when disabled, nothing is printed. Updates are throttled (at most ~4 per
second) so that a fast simulation is not slowed down by its bar.
"""

from __future__ import annotations

import sys
import time
from typing import Any

MIN_INTERVAL_S = 0.25


def _tqdm(**kwargs: Any) -> Any | None:
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(file=sys.stderr, dynamic_ncols=True, **kwargs)


class RunProgress:
    """Callable as the engine's progress callback."""

    def __init__(self, label: str, jobs: int, enabled: bool = True) -> None:
        self.bar = _tqdm(total=jobs, desc=label, unit="job", leave=True) if enabled else None
        self.last = 0.0
        self.done = 0

    def __call__(self, rounds: int, simulated_s: float, active: int, finished: int) -> None:
        if self.bar is None:
            return
        now = time.monotonic()
        if now - self.last < MIN_INTERVAL_S and finished < self.bar.total:
            return
        self.last = now
        self.bar.update(max(finished - self.done, 0))
        self.done = finished
        self.bar.set_postfix(
            rounds=rounds, sim=f"{simulated_s / 3600:.1f}h", active=active, refresh=False
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class SweepProgress:
    """A bar over the runs of a sweep."""

    def __init__(self, runs: int, enabled: bool = True) -> None:
        self.bar = _tqdm(total=runs, desc="sweep", unit="run", leave=True) if enabled else None

    def done(self, label: str) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(label, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
