"""The answer of the co-location and resource-shape policies: groups of jobs sharing devices,
each member's predicted slowdown, and CPU cores and memory where the policy allocates them.

A group of one job is a job running alone (synergy's jobs, exclusive jobs of lucid). The
section is attached to a `Plan` as `Plan.groups`; the plan's time shares say the same in the
common vocabulary (a member of a running group has time share 1 on the group's type).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apportion.solver.model import FloatArray, IntArray


@dataclass(frozen=True)
class ColocationGroup:
    """Jobs that share the same devices for the whole round."""

    members: tuple[int, ...]
    """Job indices; for interleaving policies (muri) in pipeline order."""
    slowdown: tuple[float, ...]
    """Per member: predicted time per step in the group over its time per step running alone
    on the same devices (> 1 = slower). Resource-shape policies (synergy): over its time per
    step at the GPU-proportional CPU and memory share (< 1 = faster)."""
    type_index: int = -1
    """Accelerator type of the devices (-1 = not placed)."""
    devices: int = 0
    """Devices the group holds (its members' common gang size)."""
    node_devices: tuple[tuple[str, int], ...] = ()
    """(node name, devices) of its placement; empty without a node layout."""
    device_ids: tuple[str, ...] = ()
    """The shared devices it runs on, when the snapshot lists devices (antman, iadeep,
    lucid)."""
    period_s: float = 0.0
    """Interleaving policies: the group's iteration period (s); 0 = n/a."""
    configurations: tuple[str, ...] = ()
    """Per member, the configuration chosen (iadeep); empty = n/a."""


@dataclass(frozen=True)
class GroupSection:
    """`Plan.groups`: the plan of a co-location or resource-shape policy."""

    groups: tuple[ColocationGroup, ...]
    """The running groups, in priority order."""
    cpus: FloatArray | None = None
    """(m,) CPU cores allocated to each job (synergy); NaN = none. None = n/a."""
    memory_gib: FloatArray | None = None
    """(m,) host memory allocated to each job (GiB, synergy); NaN = none. None = n/a."""
    heuristic: str = ""
    """The published heuristic solved on the same instance for comparison ("" = none)."""
    heuristic_objective: float | None = None
    """Its objective, in the policy's objective units."""

    def group_of(self, m: int) -> IntArray:
        """(m,) index of each job's group, -1 = in none."""
        index = np.full(m, -1, np.int64)
        for g, group in enumerate(self.groups):
            index[list(group.members)] = g
        return index

    def slowdown_of(self, m: int) -> FloatArray:
        """(m,) each job's slowdown in its group (NaN = in none)."""
        out = np.full(m, np.nan)
        for group in self.groups:
            out[list(group.members)] = group.slowdown
        return out
