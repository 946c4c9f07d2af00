"""Moves as an assignment problem (D6, Singularity) [derived]: when every demand needs one
device and the cost has no domain or free-domain terms, placement is a minimum-cost bipartite
assignment of demands to eligible free devices, cost = the demand's move cost off its previous
device (0 on it), a large value for an ineligible pair; exactly solved by the Hungarian method
(`scipy.optimize.linear_sum_assignment`) when every demand can be placed.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from apportion.formulations.placement.instance import Assignment, PlacementInstance


def single_device_assignment(instance: PlacementInstance) -> tuple[Assignment, float]:
    """(assignment, total move cost) of single-device demands by the Hungarian method;
    raises ValueError when a demand needs more than one device or there are fewer eligible
    devices than demands."""
    if any(d.devices != 1 for d in instance.demands):
        raise ValueError("every demand must need exactly one device")
    devices = np.flatnonzero(instance.free)
    count = instance.num_demands
    if devices.size < count:
        raise ValueError(f"{count} demands on {devices.size} free devices")
    big = 1.0 + sum(d.move_cost for d in instance.demands) * 2
    cost = np.full((count, devices.size), big * (count + 1))
    for r, demand in enumerate(instance.demands):
        ok = instance.eligible[r][devices]
        row = np.where(ok, demand.move_cost if demand.running else 0.0, cost[r])
        if demand.previous:
            row[np.isin(devices, demand.previous) & ok] = 0.0
        cost[r] = row
    rows, cols = linear_sum_assignment(cost)
    if np.any(cost[rows, cols] >= big):
        raise ValueError("some demand has no eligible device left")
    chosen: list[tuple[int, ...]] = [()] * count
    for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
        chosen[r] = (int(devices[c]),)
    return Assignment(tuple(chosen)), float(cost[rows, cols].sum())
