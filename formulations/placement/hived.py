"""HiveD's cells (D2): virtual clusters as cell quotas, their safety, buddy picks and binding.

A *cell chain* of one accelerator type is the sequence of domain levels above its devices
whose domains all hold the same number of its devices (a regular chain): a level-l cell holds
K_l devices (a device is a level-0 cell, K_0 = 1) and N cells make up the top level. A tenant's
quota (`CellQuota`) is a number of cells of one level.

Safety [derived, brute-forced in the tests]:
* static: HiveD's recursion A_top = N, R_l = A_l - Q_l >= 0, A_(l-1) = k_l R_l (k_l = K_l /
  K_(l-1)) holds iff the total quota volume sum_m Q_m K_m <= N K_top (sizes divide each
  other, so volume suffices);
* runtime: with L_l the level-l cells entirely free (counting those inside larger free
  cells) and U_m the unused quota cells of level m, every unused quota can still be bound iff
  sum_{m >= l} U_m K_m <= L_l K_l for every level l. HiveD's own runtime check compares L_l
  with U_l level by level: necessary, not sufficient (`per_level_check`).

In the placement stage (`PlacementStage.enforce_cell_quotas`, `quota_rules`): a guaranteed
job of a tenant with quotas on its type draws on a cell of the lowest chain level holding it
(ceil(s / K) cells of the top level when none does); its tenant's guaranteed jobs never take
more volume than its quotas, and after placement, at every chain level l from NODE up,
    sum over tenants of (quota volume of levels >= l - volume their jobs draw at levels >= l)
        <= K_l x (level-l cells left entirely free),
the runtime condition with quota cells used below a node not reserved across nodes.

`lca_pick` is the intra-node pick (the lowest level having a cell with enough free devices,
the cell there with the fewest free devices, filled recursively): it attains the lowest
common ancestor level of every k-subset. `bind_cells` is the binding ILP for bad hardware
and pinned cells: quota cells onto healthy physical cells, each device inside at most one
bound cell, preserving the most entirely free cells of the higher levels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from apportion.formulations.placement.instance import Assignment, PlacementInstance
from apportion.solver.backends.highs import INFINITY, HighsSettings, LinearModel, solve_highs
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import IntArray
from apportion.solver.topology import BoolArray, DomainLevel, Topology


@dataclass(frozen=True)
class CellChain:
    """The regular cell levels of one type, innermost first (devices are level 0)."""

    type_index: int
    levels: tuple[DomainLevel, ...]
    sizes: tuple[int, ...]
    """Devices per cell of each level."""
    cells: tuple[IntArray, ...]
    """Domain indices of the cells of each level."""
    devices: IntArray
    """The type's devices."""

    @property
    def top_cells(self) -> int:
        return int(self.cells[-1].size) if self.cells else int(self.devices.size)

    def size_of(self, level: DomainLevel) -> int:
        return self.sizes[self.levels.index(level)]


def cell_chain(topology: Topology, type_index: int) -> CellChain:
    """The chain of regular levels of a type (levels whose domains holding its devices do not
    all hold the same number of them are left out)."""
    devices = np.flatnonzero(topology.device_type == type_index)
    levels: list[DomainLevel] = []
    sizes: list[int] = []
    cells: list[IntArray] = []
    for level in topology.levels_present:
        column = topology.ancestors[devices, level.value]
        if np.any(column < 0):
            continue
        domains, counts = np.unique(column, return_counts=True)
        if not np.all(topology.domain_level[domains] == level.value):
            continue
        if np.unique(counts).size != 1:
            continue
        if sizes and counts[0] <= sizes[-1]:
            continue
        levels.append(level)
        sizes.append(int(counts[0]))
        cells.append(domains)
    return CellChain(type_index, tuple(levels), tuple(sizes), tuple(cells), devices)


def static_safety(chain: CellChain, quota: dict[DomainLevel, int]) -> bool:
    """HiveD's initialization recursion on the chain for total quotas per level."""
    available = chain.top_cells
    for position in range(len(chain.levels) - 1, -1, -1):
        rest = available - quota.get(chain.levels[position], 0)
        if rest < 0:
            return False
        below = chain.sizes[position - 1] if position else 1
        available = rest * (chain.sizes[position] // below)
    return True


def static_volume(chain: CellChain, quota: dict[DomainLevel, int]) -> bool:
    """The closed form: total quota volume within the type's devices."""
    volume = sum(count * chain.size_of(level) for level, count in quota.items())
    return volume <= chain.top_cells * (chain.sizes[-1] if chain.sizes else 1)


def free_cells(chain: CellChain, topology: Topology, free: BoolArray) -> list[int]:
    """L_l: entirely free cells of each chain level."""
    out = []
    for level, cells in zip(chain.levels, chain.cells, strict=True):
        column = topology.ancestors[chain.devices, level.value]
        busy = np.zeros(topology.num_domains, dtype=bool)
        busy[column[~free[chain.devices]]] = True
        out.append(int(np.count_nonzero(~busy[cells])))
    return out


def runtime_slack(chain: CellChain, topology: Topology, free: BoolArray,
                  unused: dict[DomainLevel, int]) -> list[float]:
    """Per chain level l: L_l K_l - sum_{m >= l} U_m K_m (devices; >= 0 everywhere = safe)."""
    entirely = free_cells(chain, topology, free)
    out = []
    for position in range(len(chain.levels)):
        need = sum(unused.get(m, 0) * chain.sizes[k]
                   for k, m in enumerate(chain.levels) if k >= position)
        out.append(float(entirely[position] * chain.sizes[position] - need))
    return out


def per_level_check(chain: CellChain, topology: Topology, free: BoolArray,
                    unused: dict[DomainLevel, int]) -> bool:
    """HiveD's runtime check: free cells >= unused quota cells, level by level."""
    entirely = free_cells(chain, topology, free)
    return all(entirely[k] >= unused.get(level, 0) for k, level in enumerate(chain.levels))


@dataclass(frozen=True)
class QuotaRule:
    """The quota rows of one accelerator type."""

    type_index: int
    chain: CellChain
    volume: dict[str, int]
    """Per tenant, its quota volume on the type (devices)."""
    reserved: dict[DomainLevel, int]
    """Per chain level l >= NODE: the quota volume of levels >= l over all tenants."""
    draw: dict[int, tuple[str, DomainLevel, int]]
    """Per guaranteed demand: (tenant, the level it draws on, devices of cells drawn)."""


def quota_rules(instance: PlacementInstance, reporting: bool = False) -> list[QuotaRule]:
    """The quota rows of the instance (empty unless quotas are enforced, or given and
    `reporting`)."""
    if not instance.quotas or not (instance.enforce_quotas or reporting):
        return []
    out = []
    for j in sorted({q.type_index for q in instance.quotas}):
        chain = cell_chain(instance.topology, j)
        mine = [q for q in instance.quotas if q.type_index == j and q.level in chain.levels]
        volume: dict[str, int] = {}
        for q in mine:
            volume[q.tenant] = volume.get(q.tenant, 0) + q.count * chain.size_of(q.level)
        reserved = {
            level: sum(q.count * chain.size_of(q.level) for q in mine if q.level >= level)
            for level in chain.levels if level >= DomainLevel.NODE
        }
        draw = {}
        for r, demand in enumerate(instance.demands):
            if demand.type_index != j or demand.guaranteed_tenant not in volume:
                continue
            level = next((lv for lv, k in zip(chain.levels, chain.sizes, strict=True)
                          if k >= demand.devices), chain.levels[-1])
            size = chain.size_of(level)
            draw[r] = (demand.guaranteed_tenant, level, -(-demand.devices // size) * size)
        out.append(QuotaRule(j, chain, volume, reserved, draw))
    return out


def quota_slack(instance: PlacementInstance, used: BoolArray,
                placed: BoolArray) -> list[tuple[int, DomainLevel, float]]:
    """(type, level, slack devices) of the safety rows for the devices `used` and the placed
    demands `placed` (negative = some quota can no longer be honoured)."""
    out = []
    for rule in quota_rules(instance, reporting=True):
        free = instance.free & ~used
        entirely = free_cells(rule.chain, instance.topology, free)
        for position, level in enumerate(rule.chain.levels):
            if level not in rule.reserved:
                continue
            drawn = sum(vol for r, (_, lv, vol) in rule.draw.items() if placed[r] and lv >= level)
            slack = entirely[position] * rule.chain.sizes[position] - (
                rule.reserved[level] - drawn)
            out.append((rule.type_index, level, float(slack)))
    return out


def quota_violations(instance: PlacementInstance, assignment: Assignment) -> list[str]:
    """The quota rows an assignment breaks (volume per tenant, safety per level)."""
    if not (instance.enforce_quotas and instance.quotas):
        return []
    placed = np.array([bool(d) for d in assignment.devices], dtype=bool)
    used = np.zeros(instance.topology.num_devices, dtype=bool)
    for devices in assignment.devices:
        used[list(devices)] = True
    out = []
    for rule in quota_rules(instance):
        for tenant, volume in rule.volume.items():
            drawn = sum(vol for r, (t, _, vol) in rule.draw.items() if placed[r] and t == tenant)
            if drawn > volume:
                out.append(f"tenant {tenant!r} draws {drawn} devices of quota {volume}")
    for j, level, slack in quota_slack(instance, used, placed):
        if slack < -1e-9:
            out.append(f"type {j}: {level.name.lower()} cells short of the unused quota")
    return out


def lca_pick(topology: Topology, ok: BoolArray, count: int,
             limit: int = DomainLevel.CLUSTER.value + 1) -> tuple[int, ...] | None:
    """`count` of the devices `ok` under the lowest common ancestor possible: the lowest level
    with a domain holding `count` of them, there the domain holding the fewest (best fit),
    then recursively inside it (a child holding all of them by best fit, else whole children
    with the most first). None when no domain below `limit` (a level value) holds them."""
    for level in topology.levels_present:
        column = topology.ancestors[:, level.value]
        have = np.bincount(column[ok & (column >= 0)], minlength=topology.num_domains)
        cells = np.flatnonzero((have >= count) & (topology.domain_level == level.value))
        if cells.size:
            cell = int(cells[np.lexsort((cells, have[cells]))][0])
            inside = np.flatnonzero(ok & (column == cell))
            return _fill(topology, inside, count, level.value)
        if level.value >= limit:
            return None
    inside = np.flatnonzero(ok)
    return tuple(int(d) for d in inside[:count]) if inside.size >= count else None


def _fill(topology: Topology, inside: IntArray, count: int, level: int) -> tuple[int, ...]:
    for child_level in range(level - 1, 0, -1):
        column = topology.ancestors[inside, child_level]
        children, have = np.unique(column, return_counts=True)
        if not np.any(topology.domain_level[children] == child_level):
            continue
        fits = np.flatnonzero(have >= count)
        if fits.size:
            best = fits[np.lexsort((children[fits], have[fits]))][0]
            return _fill(topology, inside[column == children[best]], count, child_level)
        out: list[int] = []
        for k in np.lexsort((children, -have)).tolist():
            members = inside[column == children[k]]
            take = min(count - len(out), members.size)
            out.extend(_fill(topology, members, take, child_level))
            if len(out) == count:
                break
        return tuple(out)
    return tuple(int(d) for d in np.sort(inside)[:count])


@dataclass(frozen=True)
class Binding:
    """Quota cells bound to physical cells."""

    cells: dict[tuple[str, DomainLevel], tuple[int, ...]]
    """(tenant, level) -> bound cell domains."""
    feasible: bool
    preserved: int
    """Entirely free cells of the levels above the bound ones left over."""


def bind_cells(
    topology: Topology,
    chain: CellChain,
    quotas: dict[tuple[str, DomainLevel], int],
    usable: BoolArray,
    deadline: Deadline = NO_DEADLINE,
) -> Binding:
    """The binding ILP: b[t, c] = 1 binds one of tenant-level t's quota cells to physical cell
    c of that level (all of c's devices `usable`), sum_c b[t, c] = Q_t, every device inside at
    most one bound cell (the cells on its root path: a laminar family), maximizing the chain's
    cells that overlap no bound cell and have every device usable (f[u] + b[t, c] <= 1 when u
    and c overlap)."""
    keys = sorted(quotas, key=lambda t: (t[1], t[0]))
    all_cells = [(level, int(c)) for level, cells in zip(chain.levels, chain.cells, strict=True)
                 for c in cells.tolist()]
    members = {c: chain.devices[topology.ancestors[chain.devices, level.value] == c]
               for level, c in all_cells}
    columns = [(t, c) for t, (_, level) in enumerate(keys)
               for lv, c in all_cells if lv is level and usable[members[c]].all()]

    def overlap(a: int, b: int) -> bool:
        rep_a, rep_b = int(members[a][0]), int(members[b][0])
        return bool(topology.ancestors[rep_a, topology.domain_level[b]] == b
                    or topology.ancestors[rep_b, topology.domain_level[a]] == a)

    b_count = len(columns)
    total = b_count + len(all_cells)
    rows: list[int] = []
    cols: list[int] = []
    lower: list[float] = []
    upper: list[float] = []

    def add(entries: list[int], lo: float, hi: float) -> None:
        rows.extend([len(lower)] * len(entries))
        cols.extend(entries)
        lower.append(lo)
        upper.append(hi)

    for t, key in enumerate(keys):  # sum_c b[t, c] = Q_t
        add([k for k, (tt, _) in enumerate(columns) if tt == t], quotas[key], quotas[key])
    for d in chain.devices.tolist():  # each device inside at most one bound cell
        path = set(topology.ancestors[d].tolist())
        inside = [k for k, (_, c) in enumerate(columns) if c in path]
        if len(inside) > 1:
            add(inside, -INFINITY, 1.0)
    for j, (_, u) in enumerate(all_cells):  # f[u] + b[t, c] <= 1 when u and c overlap
        if not usable[members[u]].all():
            add([b_count + j], -INFINITY, 0.0)
        for k, (_, c) in enumerate(columns):
            if overlap(u, c):
                add([b_count + j, k], -INFINITY, 1.0)
    matrix = sp.csc_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(lower), total))
    cost = np.zeros(total)
    cost[b_count:] = 1.0
    model = LinearModel(cost=cost, matrix=matrix, row_lower=np.array(lower),
                        row_upper=np.array(upper), col_lower=np.zeros(total),
                        col_upper=np.ones(total), integer=np.ones(total, dtype=bool),
                        maximize=True)
    result = solve_highs(model, HighsSettings(mip_rel_gap=0.0), deadline)
    if not result.has_solution:
        return Binding({}, False, 0)
    bound: dict[tuple[str, DomainLevel], list[int]] = {key: [] for key in keys}
    for k, (t, c) in enumerate(columns):
        if result.x[k] > 0.5:
            bound[keys[t]].append(c)
    preserved = int(np.rint(result.x[b_count:].sum()))
    return Binding({key: tuple(v) for key, v in bound.items()}, True, preserved)
