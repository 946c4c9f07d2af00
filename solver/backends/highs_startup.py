"""How long HiGHS works on a program before it first reads its time limit.

HiGHS checks its `time_limit` only between iterations: before the first check it runs setup
(presolve, the crash basis, interior point's factorization, a MIP's root LP and first cuts).
On a large program that alone can outlast the time a request has left. A formulation names the
kind of program it hands HiGHS (`StartupCost`); `solve_highs` does not start a program whose
estimate exceeds the time left, and a formulation that wants its own fallback asks
`can_start` before it builds anything. Every estimate measured on this project's programs
lives here, so there is one place to re-measure them.
"""

from __future__ import annotations

from dataclasses import dataclass

from apportion.solver.deadline import Deadline
from apportion.solver.outcome import ModelSize


@dataclass(frozen=True)
class StartupCost:
    """Seconds before HiGHS first reads its time limit, as a function of the program's size:
    `per_nonzero_s` x nonzeros (times nonzeros / `growth_nonzeros` beyond that size, where the
    setup grows with the square) + `per_column_pair_s` x columns squared."""

    per_nonzero_s: float = 0.0
    growth_nonzeros: int = 0
    """0 = linear in the nonzeros at every size."""
    per_column_pair_s: float = 0.0

    def seconds(self, size: ModelSize) -> float:
        """The estimate (s) for a program of `size`."""
        nonzeros = size.nonzeros
        growth = max(1.0, nonzeros / self.growth_nonzeros) if self.growth_nonzeros else 1.0
        return self.per_nonzero_s * nonzeros * growth + \
            self.per_column_pair_s * size.variables ** 2


NO_STARTUP = StartupCost()
"""No estimate: the program is always started."""

SIMPLEX_LP = StartupCost(per_nonzero_s=5e-7)
"""Dual simplex on an LP (measured: 0.7 s of setup on AlloX's transportation LP with 1.26
million nonzeros, 100,000 jobs on 75,000 devices, on a loaded 2-core machine)."""

INTERIOR_POINT_LP = StartupCost(per_nonzero_s=1e-6)
"""Interior point up to its first iteration (measured: 1.3 s on the same LP)."""

MILP = StartupCost(per_nonzero_s=1e-5)
"""A MILP's presolve and root LP (measured: 1.2 s + 4.6 s on Shockwave's window program with
467,000 nonzeros, 8,192 jobs x 20 rounds)."""

BUNDLE_MILP = StartupCost(per_nonzero_s=2.5e-5, growth_nonzeros=40_000)
"""A one-bundle-per-bidder MILP over shared resources (Themis's partial allocation; measured:
0.25 s at 9,800 nonzeros, 1.1 s at 39,000, 16 s at 120,000 with 60,000 bundles)."""

SET_PACKING_MILP = StartupCost(per_column_pair_s=1.5e-8)
"""A set packing whose setup after presolve and first round of cuts grows with the square of
the columns (IADeep's groups; measured on a loaded 2-core machine: 1.75 s for 24,576 columns,
8 s for 49,152, 31-57 s for 98,304; setup and one round of cuts 1.3 s for 12,288)."""


def can_start(deadline: Deadline, cost: StartupCost, size: ModelSize) -> bool:
    """Whether HiGHS can reach its first look at the time limit before `deadline` on a program
    of `size` (always without a deadline)."""
    return not deadline.expired() and deadline.remaining() >= cost.seconds(size)

DENSE_MATCHING = StartupCost(per_column_pair_s=6e-7)
"""The exact maximum-weight matching of a dense weight matrix (`formulations.matching`;
variables = vertices): its copies of the weights, twin classes, bipartition, assignment and
first edges before the LP first reads the deadline grow with the square of the vertices
(measured on bipartite blocks with 30% of the pairs as edges, on a loaded 2-core machine:
2.6 s for 2,048 vertices, 10.4 s for 4,096, 70 s for 8,192)."""
