"""What the simulation models beyond the plans themselves. Everything is off by default, so a
default run is the idealized replay the papers' simulators start from.

* `restart_overhead_s`: each time a job starts on devices it did not hold in the previous
  round (its first start, a resume after a preemption, a migration, a new configuration) it
  holds them for this long without progress (checkpoint restore, as Sia charges
  `rescale_time`, default 30 s there). A job that keeps its devices (Gavel's lease extension,
  a configuration kept) pays nothing. For configuration policies the value is also sent as
  each job's `restart_penalty_s`, which they weigh when moving a job.
* `throughput_noise`: the speed a job actually achieves in a round is its throughput times
  exp(N(0, s^2) - s^2 / 2) (mean 1), drawn per job and round.
* `estimate_error`: the policy sees every throughput (and goodput) times a fixed
  exp(N(0, s^2)) per job and accelerator type, while jobs progress at their true speed.
* `recalibrate`: Shockwave's recalibration (A4.6, docs/policies/market.md): each snapshot
  sends the time a job has run on its gang and the epochs it completed meanwhile, so the
  policy can rescale the job's profile to what it measured (useful with noise or estimation
  error).

All draws come from `seed`, so a run is deterministic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from apportion.simulator.errors import SimulationInputError
from apportion.solver.model import FloatArray


@dataclass(frozen=True)
class Fidelity:
    restart_overhead_s: float = 0.0
    """s without progress after every (re)start on new devices; 0 = off."""
    throughput_noise: float = 0.0
    """sigma of the per-round lognormal speed factor; 0 = off."""
    estimate_error: float = 0.0
    """sigma of the fixed lognormal error of the policy's throughputs; 0 = off."""
    recalibrate: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("restart_overhead_s", "throughput_noise", "estimate_error"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise SimulationInputError(f"--{name.replace('_', '-')} must be finite and >= 0")
        if self.throughput_noise > 3 or self.estimate_error > 3:
            raise SimulationInputError("noise and estimation error sigmas must be <= 3")

    def estimate_factors(self, jobs: int, types: int) -> FloatArray:
        """(jobs, types) factors the policy's throughputs are multiplied by (1 when off)."""
        if self.estimate_error == 0:
            return np.ones((jobs, types))
        rng = np.random.default_rng([self.seed, 1])
        return np.exp(rng.normal(0.0, self.estimate_error, (jobs, types)))

    def speed_factors(self, round_index: int, jobs: int) -> FloatArray | None:
        """(jobs,) speed factors of a round (mean 1); None when noise is off."""
        if self.throughput_noise == 0:
            return None
        s = self.throughput_noise
        rng = np.random.default_rng([self.seed, 2, round_index])
        return np.exp(rng.normal(-0.5 * s * s, s, jobs))
