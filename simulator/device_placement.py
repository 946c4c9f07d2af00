"""The placement stage on every round's grants (`SimulationConfig.placement`, `simulate
--placement`): the exact placement MILP of `policy.placement` (or one of its compat placers)
chooses the devices of each round's grants on the cluster's topology, starting from the
devices every job held in the previous round, so that keeping a job in place, moves,
spread over nodes and racks and fragmentation are priced as the stage prices them.

A pair or group sharing devices is one demand. A grant the stage cannot place does not run
in that round (the job waits; `RoundLog.unplaced` counts them). Needs a node layout.
"""

from __future__ import annotations

from dataclasses import replace

from apportion.simulator.drivers import Grant
from apportion.simulator.errors import SimulationError
from apportion.simulator.state import JobState
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import IntArray, Problem, SolveOptions
from apportion.solver.stages import PlacementParameters


def shared_key(g: Grant) -> int:
    """The smallest job index of the pair or group holding `g`'s devices; -1 = alone."""
    if g.group >= 0:
        return g.group
    return min(g.job, g.partner) if g.partner >= 0 else -1


def place_round(
    problem: Problem,
    active: IntArray,
    grants: list[Grant],
    state: JobState,
    parameters: PlacementParameters,
    options: SolveOptions,
) -> tuple[list[Grant], int]:
    """`grants` (global job indices; `problem` holds the jobs `active`) with the devices and
    nodes the stage chose, and how many grants it could not place (left out)."""
    from apportion.formulations.placement.demands import Grant as Demand
    from apportion.formulations.placement.stage import place_grants

    if not grants:
        return [], 0
    row = {int(i): r for r, i in enumerate(active.tolist())}
    groups: dict[int, list[Grant]] = {}
    order: list[int] = []
    for g in grants:
        key = shared_key(g)
        key = key if key >= 0 else g.job
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(g)
    demands = [
        Demand(
            tuple(row[g.job] for g in groups[key]),
            groups[key][0].type_index,
            groups[key][0].devices,
        )
        for key in order
    ]
    previous = {
        row[i]: before.device_ids
        for i in row
        if (before := state.placement[i]) is not None and before.device_ids
    }
    deadline: Deadline = (
        Deadline.after(options.time_limit_s) if options.time_limit_s > 0 else NO_DEADLINE
    )
    placed = place_grants(problem, demands, parameters, previous, options, deadline)
    out: list[Grant] = []
    dropped = 0
    for key in order:
        where = placed.jobs.get(row[groups[key][0].job])
        if where is None or not where.placed:
            dropped += len(groups[key])
            continue
        if len(where.devices) != groups[key][0].devices:
            raise SimulationError(
                f"the placement stage gave job {groups[key][0].job} {len(where.devices)} "
                f"devices for a grant of {groups[key][0].devices}"
            )
        for g in groups[key]:
            out.append(replace(g, nodes=tuple(where.node_devices), device_ids=where.devices))
    return sorted(out, key=lambda g: g.job), dropped
