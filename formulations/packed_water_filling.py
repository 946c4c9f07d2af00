"""Water filling with space sharing (Gavel's `max_min_fairness_water_filling_packed`; A2.4 over
A2.2's pair variables): the entry point the registry uses when the parameters ask for space
sharing and the snapshot has co-location data.

The rounds are those of `apportion.formulations.water_filling`, over the job groups and cells
of `apportion.formulations.space_sharing` with the pair and partner cells included: each job's
normalized throughput counts its time alone and in pairs, a pair holds its devices once, and
groups are frozen whole (exact by the symmetry argument in `water_filling`).
"""

from __future__ import annotations

from apportion.formulations.water_filling import solve_water_filling
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, Problem, SolveOptions
from apportion.solver.parameters import WaterFillingParameters
from apportion.solver.result import Plan


def solve_packed_water_filling(
    problem: Problem,
    params: WaterFillingParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Water filling with space sharing; see the module docstring."""
    return solve_water_filling(problem, params, compat, options, deadline)
