"""The bounds on every size-like and real-valued input, in one place.

A request is served by one worker process; every bound here keeps what a request can make a
worker build (dense arrays, per-device queues, schedules, MIP windows) within what one
machine can serve in seconds, while staying above what real clusters need. Validation
(`apportion.solver.validation` and `apportion.server`) rejects anything beyond a bound with
a field-path error quoting it; each bound is also stated on its proto field.

Real-valued inputs live in windows chosen so that no quantity a policy derives from them
(proportional shares, normalized throughputs, processing times R_i / T_ij, levels s_i/w_i,
sums over a million jobs, ...) can overflow a double: every product or ratio of a dozen
bounded values stays below 1e308. A positive rate, weight or cost therefore also has a
smallest value: its inverse is a time or a price.
"""

from __future__ import annotations

import os

# --------------------------------------------------------------------------------------------
# sizes

MAX_JOBS = 1 << 20
"""Jobs in a snapshot (1,048,576)."""
MAX_ACCELERATOR_TYPES = 256
"""Accelerator types in a cluster."""
MAX_JOB_TYPE_CELLS = 1 << 24
"""jobs x accelerator types (16,777,216): the size of the dense (jobs, types) arrays every
policy builds (one of them is 134 MB)."""
MAX_DEVICES_PER_TYPE = 1 << 17
"""Devices of one accelerator type (131,072; the largest clusters built so far have about
100,000 GPUs). Bounds `AcceleratorType.count`, `Node.devices` and every device count a job
names (elasticity, configurations, `max_gpus`)."""
MAX_DEVICES = 1 << 18
"""Devices over all types (262,144): AlloX builds one queue per device."""
MAX_NODES = 1 << 16
"""Nodes in a cluster (65,536)."""
MAX_COLOCATIONS = 1 << 20
"""Entries of `Snapshot.colocations` (job pairs) and of `type_colocations`."""
MAX_CONFIGURATIONS_PER_JOB = 4096
"""Entries of `Job.configurations`."""
MAX_EPOCHS = 100_000
"""Epochs of one job (`Progress.total_epochs` and the lengths of its `EpochProfile`)."""
MAX_SCHEDULE_ROUNDS = 1000
"""`SolveOptions.schedule_rounds` (with Gavel's 6-minute rounds, four days)."""
MAX_SCHEDULED_GRANTS = 1 << 20
"""schedule_rounds x min(jobs, devices): the grants a round schedule can hold (1,048,576)."""
MAX_PLANNING_ROUNDS = 1000
"""`ShockwaveParameters.planning_rounds`."""
MAX_WINDOW_CELLS = 1 << 18
"""planning_rounds x jobs (262,144): the binary variables of a planning window MIP."""


def max_threads() -> int:
    """`SolveOptions.threads` at most: the machine's cores (0 = the solver's default)."""
    return os.cpu_count() or 1


# --------------------------------------------------------------------------------------------
# real values

MAX_RATE = 1e12
"""Throughputs and goodputs (steps/s, samples/s): at most this; a positive one at least
`MIN_RATE`."""
MIN_RATE = 1e-9
"""Smallest positive throughput or goodput (one step in 30 years)."""
MAX_STEPS = 1e15
"""`Progress.steps_done`, `total_steps` and `measured_epochs`: at most this; a positive one at
least `MIN_STEPS`."""
MIN_STEPS = 1e-9
"""Smallest positive step count (remaining work is divided by rates and times)."""
MAX_TIME_S = 1e12
"""Absolute times (on the snapshot's clock) at most this in magnitude and durations at most
this (s; about 31,700 years)."""
MIN_DURATION_S = 1e-6
"""Smallest profiled epoch duration (s)."""
MAX_WEIGHT = 1e9
"""Priority and tenant weights lie in [1 / MAX_WEIGHT, MAX_WEIGHT]."""
MAX_COST_PER_HOUR = 1e9
"""`AcceleratorType.cost_per_hour` ($ per device-hour): 0 (free) or in
[1 / MAX_COST_PER_HOUR, MAX_COST_PER_HOUR]."""
MAX_MODEL_PARAMETER = 1e12
"""Parameters of a goodput model (Pollux perf params in s and s/sample, gradient statistics)
at most this; a positive one at least 1 / MAX_MODEL_PARAMETER."""
MAX_FAIRNESS_POWER = 20.0
"""|fairness_power| of sia and pollux (p of sum goodput^p, of the p-mean of speedups) and
|fairness_exponent| of shockwave: x^p of the derived ratios stays finite."""
MAX_KNOB = 1e9
"""Other real knobs of a policy (shockwave's makespan_weight and rho_max, sia's
no_allocation_penalty): magnitude at most this."""

SEED_MODULUS = 1 << 64
"""`SolveOptions.seed` is any int64; the seed used is `seed mod 2^64` (a negative seed s
becomes s + 2^64), so that every value names one reproducible random stream."""


def rng_seed(seed: int) -> int:
    """The non-negative seed randomized steps use for the wire's int64 `seed`."""
    return seed % SEED_MODULUS
