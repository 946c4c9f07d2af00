"""The placement MILP of D0.2 / D0.3 over *units*: nodes (the node-level model, D0.3, cluster
scale) or devices (the device-level model, D0.2, small clusters). One builder serves both.

Columns, per candidate pair p = (demand r, unit t): g[p] devices of r on t (integer,
<= cap[p]; 0/1 for device units) and y[p] (r uses t); per demand: z[r] placed and keep[r]
(running demands that can keep); per demand and level l above the unit level where r has two
or more candidate domains: Y[r, u] (r uses domain u); per demand and level: h[r, l] (r crosses
l); per domain u with a free-domain weight whose devices are all free: f[u].

Rows (D0.2 numbering):
  (P1) sum_t g[r, t] = s_r z_r;  exact node count: sum over nodes used = nodes_r z_r
  (P2) sum_r g[r, t] <= free devices of t
  (P4) g <= cap y,  y <= g;  y[r, t] <= Y[r, anc_l(t)],  Y[r, u] <= sum_{t in u} y[r, t]
  (P5) n_l(r) - z_r <= (n_max - 1) h[r, l],  h[r, l] <= n_l(r) - z_r,  h[r, l'] <= h[r, l]
       for consecutive levels l < l' (n_l = sum of y at the unit level, of Y above)
  (P6) no h column at or above the demand's span limit (nor with one candidate domain): its
       units then lie in one domain of the level
  (P7) keep: c_t keep <= g[r, t] on its previous units (same count or growing), or
       g[r, t] <= c_t + cap (1 - keep) (shrinking; c_t = 0 off its previous units); with only
       previous nodes known: keep <= (use of each previous node), y + keep <= 1 elsewhere;
       keep <= z
  (P8) sum of g under u + K_u f[u] <= K_u
  exclusive: no other demand on the nodes an exclusive demand uses
  Value stage: maximize sum_r V_r z_r. Cost stage: sum_r V_r z_r >= the proven best value,
  minimize the cost of `objective` restricted to the levels above the unit (plus moves, free
  domains, the span reward lost by crossing them, and the best reward a placed demand can
  earn, so that what the units' insides add is >= 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.formulations.placement.hived import QuotaRule, quota_rules
from apportion.formulations.placement.instance import PlacementInstance
from apportion.solver.backends.highs import INFINITY, HighsSettings, LinearModel, solve_highs
from apportion.solver.backends.status import SolverResult
from apportion.solver.deadline import Deadline
from apportion.solver.model import FloatArray, IntArray
from apportion.solver.topology import CommunicationPattern, DomainLevel

Counts = tuple[dict[int, int], ...]
"""Per demand, devices per unit (empty = not placed)."""

Entries = tuple[NDArray[Any], NDArray[Any], NDArray[Any] | float]
"""(row positions local to a block, columns, values) of some sparse entries."""

KEEP = -2
"""Placeholder column of a demand's keep variable in a `KeepRow`."""
KeepRow = tuple[list[int], list[float], float, float]
"""(columns, values, lower, upper) of one row; column KEEP = the demand's keep column."""


@dataclass(frozen=True)
class Units:
    """What the model places on: nodes or devices, with their domains."""

    level: int
    """DomainLevel.NODE for nodes, 0 for devices."""
    ancestor: IntArray
    """(units, 8) domain of each unit at each level (-1 = none)."""
    node: IntArray
    """(units,) node of each unit."""
    capacity: IntArray
    """(units,) free devices of each unit."""
    eligible: IntArray
    """(demands, units) free devices each demand may use on each unit."""
    levels: tuple[DomainLevel, ...]
    """Levels above the unit level that have domains (NODE included for devices)."""
    unit_of_device: IntArray
    """(devices,) the unit holding each device."""


def node_units(instance: PlacementInstance) -> Units:
    """Nodes as units (the node-level model)."""
    topo = instance.topology
    return Units(
        level=DomainLevel.NODE.value,
        ancestor=instance.node_ancestor,
        node=np.arange(len(topo.node_domain), dtype=np.int64),
        capacity=instance.node_free,
        eligible=instance.eligible_node_free,
        levels=instance.node_levels,
        unit_of_device=topo.device_node,
    )


def device_units(instance: PlacementInstance) -> Units:
    """Devices as units (the device-level model)."""
    topo = instance.topology
    eligible = np.vstack(instance.eligible).astype(np.int64) if instance.demands else \
        np.zeros((0, topo.num_devices), np.int64)
    return Units(
        level=0,
        ancestor=topo.ancestors,
        node=topo.device_node,
        capacity=instance.free.astype(np.int64),
        eligible=eligible,
        levels=topo.levels_present,
        unit_of_device=np.arange(topo.num_devices, dtype=np.int64),
    )


class _Rows:
    """Sparse rows lower <= A x <= upper, accumulated block by block."""

    def __init__(self) -> None:
        self.rows: list[IntArray] = []
        self.cols: list[IntArray] = []
        self.vals: list[FloatArray] = []
        self.lower: list[FloatArray] = []
        self.upper: list[FloatArray] = []
        self.count = 0

    def add(self, parts: list[Entries], lower: FloatArray | float, upper: FloatArray | float,
            new_rows: int) -> None:
        """A block of `new_rows` rows made of the entries in `parts`."""
        if new_rows == 0:
            return
        for rows, cols, vals in parts:
            rows = np.asarray(rows, np.int64)
            self.rows.append(rows + self.count)
            self.cols.append(np.asarray(cols, np.int64))
            self.vals.append(np.broadcast_to(np.asarray(vals, np.float64), rows.shape).copy())
        self.lower.append(np.broadcast_to(np.asarray(lower, np.float64), (new_rows,)).copy())
        self.upper.append(np.broadcast_to(np.asarray(upper, np.float64), (new_rows,)).copy())
        self.count += new_rows

    def matrix(self, columns: int) -> tuple[sp.csc_matrix, FloatArray, FloatArray]:
        if not self.lower:
            return sp.csc_matrix((0, columns)), np.zeros(0), np.zeros(0)
        a = sp.csc_matrix(
            (np.concatenate(self.vals), (np.concatenate(self.rows), np.concatenate(self.cols))),
            shape=(self.count, columns),
        )
        return a, np.concatenate(self.lower), np.concatenate(self.upper)


@dataclass
class PlacementModel:
    """The MILP and its column layout."""

    units: Units
    active: IntArray
    """Demand indices in the model (position a = row of the per-demand blocks)."""
    pair_demand: IntArray
    """(P,) position in `active` of each pair's demand."""
    pair_unit: IntArray
    cap: IntArray
    g0: int = 0
    y0: int = 0
    z0: int = 0
    upper_y: list[tuple[DomainLevel, IntArray, IntArray, int]] = field(default_factory=list)
    """Per level above the units: (level, demand positions, domains, first column)."""
    crossing: dict[DomainLevel, tuple[IntArray, int]] = field(default_factory=dict)
    """Per level: (demand positions with an h column, first column)."""
    keep: tuple[IntArray, int] = (np.zeros(0, np.int64), 0)
    free: tuple[IntArray, int] = (np.zeros(0, np.int64), 0)
    """(domains with an f column, first column)."""
    columns: int = 0
    model: LinearModel | None = None


def reward_cost(instance: PlacementInstance, r: int, level: DomainLevel,
                levels: tuple[DomainLevel, ...]) -> float:
    """Cost coefficient of h[r, level] from the throughput-by-span reward: the reward lost
    between the level below (or "none" for the first level above the units) and this one
    (>= 0 when the reward does not increase with the span)."""
    reward = instance.span_reward(r)
    present = [lv.value for lv in levels]
    position = present.index(level.value)
    previous = present[position - 1] if position else 0
    return -instance.weights.throughput_by_span * float(reward[level.value] - reward[previous])


def placed_reward(instance: PlacementInstance, r: int) -> float:
    """The most reward a placed demand can earn (a coefficient of z: its best span reward and
    a full link score). The model counts the span reward lost by crossing levels above the
    units; what a demand loses inside its units (inner crossings, a link score below 1) is
    >= 0 and left to the intra-node stage, so the model's bound is a bound on the whole cost
    (minus the free-domain rewards inside the units)."""
    demand = instance.demands[r]
    reward = instance.weights.throughput_by_span * float(instance.span_reward(r)[0])
    if demand.pattern is not CommunicationPattern.NONE and demand.devices >= 2:
        reward += instance.weights.link_score
    return reward


def build(
    instance: PlacementInstance,
    units: Units,
    active: IntArray,
    pair_demand: IntArray,
    pair_unit: IntArray,
    value_stage: bool,
    min_value: float = 0.0,
) -> PlacementModel:
    """The MILP over the candidate pairs (pair_demand = positions in `active`)."""
    weights = instance.weights
    R = active.size
    P = pair_demand.size
    demand_of = [instance.demands[int(r)] for r in active]
    size = np.array([d.devices for d in demand_of], np.int64)
    elig = units.eligible[active[pair_demand], pair_unit] if P else np.zeros(0, np.int64)
    cap = np.minimum(elig, size[pair_demand]).astype(np.int64)
    pm = PlacementModel(units, active, pair_demand, pair_unit, cap)
    pm.g0, pm.y0, pm.z0 = 0, P, 2 * P
    column = 2 * P + R
    cost: list[tuple[IntArray, FloatArray]] = []
    rows = _Rows()
    offset = 0.0
    pairs = np.arange(P)
    demands = np.arange(R)
    # (P1) gang
    rows.add([(pair_demand, pm.g0 + pairs, 1.0), (demands, pm.z0 + demands, -size)], 0.0, 0.0, R)
    # (P2) unit capacity
    used_units, unit_row = np.unique(pair_unit, return_inverse=True)
    rows.add([(unit_row, pm.g0 + pairs, 1.0)], -INFINITY,
             units.capacity[used_units].astype(np.float64), used_units.size)
    # (P4) g <= cap y, y <= g
    rows.add([(pairs, pm.g0 + pairs, 1.0), (pairs, pm.y0 + pairs, -cap)], -INFINITY, 0.0, P)
    rows.add([(pairs, pm.y0 + pairs, 1.0), (pairs, pm.g0 + pairs, -1.0)], -INFINITY, 0.0, P)
    # per-level domain use and crossings
    limit = np.array([d.max_span_level or 99 for d in demand_of], np.int64)
    previous_h = np.full(R, -1, np.int64)
    complete = np.ones(R, dtype=bool)
    node_use: tuple[IntArray, IntArray] | None = None
    for level in units.levels:
        if level.value == units.level:
            use_demand, use_col = pair_demand, pm.y0 + pairs
            domains_per = np.bincount(pair_demand, minlength=R)
        else:
            use_demand, use_col, domains_per, column = _upper_level(
                instance, pm, rows, level, column
            )
        if level is DomainLevel.NODE:
            node_use = (use_demand, use_col)
        may_cross = (domains_per >= 2) & (size >= 2) & (level.value < limit)
        crossers = np.flatnonzero(may_cross)
        h_first = column
        column += crossers.size
        pm.crossing[level] = (crossers, h_first)
        h_col = np.full(R, -1, np.int64)
        h_col[crossers] = h_first + np.arange(crossers.size)
        multi = np.flatnonzero(domains_per >= 2)
        if multi.size:
            position = np.full(R, -1, np.int64)
            position[multi] = np.arange(multi.size)
            sel = position[use_demand] >= 0
            row_of_use = position[use_demand[sel]]
            n_max = np.minimum(domains_per[multi], size[multi]).astype(np.float64)
            with_h = h_col[multi] >= 0
            # n_l - z - (n_max - 1) h <= 0 (h absent: one domain only)
            rows.add([(row_of_use, use_col[sel], 1.0),
                      (np.arange(multi.size), pm.z0 + multi, -1.0),
                      (np.flatnonzero(with_h), h_col[multi][with_h], -(n_max[with_h] - 1))],
                     -INFINITY, 0.0, multi.size)
            # h - n_l + z <= 0
            hm = np.flatnonzero(with_h)
            if hm.size:
                h_row = np.full(multi.size, -1, np.int64)
                h_row[hm] = np.arange(hm.size)
                sel_h = h_row[row_of_use] >= 0
                rows.add([(h_row[row_of_use[sel_h]], use_col[sel][sel_h], -1.0),
                          (np.arange(hm.size), pm.z0 + multi[hm], 1.0),
                          (np.arange(hm.size), h_col[multi][hm], 1.0)],
                         -INFINITY, 0.0, hm.size)
            # cost: crossing[l] (n_l - z + h)
            a = weights.crossing.get(level, 0.0)
            if a:
                cost.append((use_col[sel], np.full(int(sel.sum()), a)))
                cost.append((pm.z0 + multi, np.full(multi.size, -a)))
                cost.append((h_col[multi][with_h], np.full(int(with_h.sum()), a)))
        if crossers.size:
            b = weights.bottleneck.get(level, 0.0)
            lost = np.array([reward_cost(instance, int(active[k]), level, units.levels)
                             for k in crossers])
            cost.append((h_col[crossers], b + lost))
            both = crossers[(previous_h[crossers] >= 0) & complete[crossers]]
            k = both.size
            rows.add([(np.arange(k), h_col[both], 1.0), (np.arange(k), previous_h[both], -1.0)],
                     -INFINITY, 0.0, k)
        # h is monotone across levels only where every candidate unit of the demand has a
        # domain at this level (a unit outside this level's domains crosses nothing here)
        outside = units.ancestor[pair_unit, level.value] < 0
        complete = np.bincount(pair_demand[outside], minlength=R) == 0
        previous_h = np.where(h_col >= 0, h_col, np.where(complete, previous_h, -1))
    _node_rows(instance, pm, rows, node_use)
    # keep (P7) and moves
    plans: list[tuple[int, list[KeepRow]]] = []
    for k, demand in enumerate(demand_of):
        if not demand.running:
            continue
        offset += demand.move_cost
        mine = np.flatnonzero(pair_demand == k)
        unit_pair = {int(pair_unit[p]): int(p) for p in mine}
        plan = _keep_rows(instance, pm, int(active[k]), unit_pair)
        if plan is not None:
            plans.append((k, plan))
    keepers = np.asarray([k for k, _ in plans], np.int64)
    keep_first = column
    column += keepers.size
    pm.keep = (keepers, keep_first)
    for index, (_, plan) in enumerate(plans):
        for cols, vals, lo, hi in plan:
            mapped = np.asarray([keep_first + index if c == KEEP else c for c in cols], np.int64)
            rows.add([(np.zeros(mapped.size), mapped, np.asarray(vals))], lo, hi, 1)
    if keepers.size:
        rows.add([(np.arange(keepers.size), keep_first + np.arange(keepers.size), 1.0),
                  (np.arange(keepers.size), pm.z0 + keepers, -1.0)],
                 -INFINITY, 0.0, keepers.size)
        keep_cost = []
        for k in keepers.tolist():
            d = demand_of[k]
            resize = bool(d.previous) and len(d.previous) != d.devices
            keep_cost.append(-d.move_cost + (min(d.resize_cost, d.move_cost) if resize else 0.0))
        cost.append((keep_first + np.arange(keepers.size), np.asarray(keep_cost)))
    # (P8) free domains at the levels the units reach (and the quota chains' levels)
    rules = quota_rules(instance)
    quota_levels = {lv for rule in rules for lv in rule.reserved if lv.value >= units.level}
    free_cols: list[int] = []
    free_first = column
    free_at: dict[DomainLevel, tuple[list[int], int]] = {}
    for level in units.levels:
        omega = weights.free_domain.get(level, 0.0)
        if omega <= 0 and level not in quota_levels:
            continue
        open_domains = open_domains_of(instance, level)
        pair_domain = units.ancestor[pair_unit, level.value]
        touched = np.isin(open_domains, pair_domain)
        offset -= omega * float(np.count_nonzero(~touched))  # no candidate: stays free
        columns_here: list[int] = []
        for u in open_domains[touched].tolist():
            under = np.flatnonzero(pair_domain == u)
            k_u = float(instance.topology.domain_devices[u])
            rows.add([(np.zeros(under.size), pm.g0 + under, 1.0),
                      (np.zeros(1), np.array([column]), k_u)], -INFINITY, k_u, 1)
            if omega:
                cost.append((np.array([column]), np.array([-omega])))
            free_cols.append(u)
            columns_here.append(column)
            column += 1
        free_at[level] = (columns_here, int(np.count_nonzero(~touched)))
    pm.free = (np.asarray(free_cols, np.int64), free_first)
    _quota_rows(instance, pm, rows, rules, free_at)
    # placed value: objective of the value stage, a row of the cost stage
    value = np.array([d.value for d in demand_of])
    if not value_stage and R:
        rows.add([(np.zeros(R), pm.z0 + demands, value)],
                 min_value - 1e-9 * max(1.0, abs(min_value)), INFINITY, 1)
        reward = np.array([placed_reward(instance, int(r)) for r in active])
        cost.append((pm.z0 + demands, -reward))
    pm.columns = column
    objective = np.zeros(column)
    if value_stage:
        objective[pm.z0 : pm.z0 + R] = value
        offset = 0.0
    else:
        for cost_cols, cost_vals in cost:
            np.add.at(objective, cost_cols, cost_vals)
    upper = np.ones(column)
    upper[pm.g0 : pm.g0 + P] = cap
    a_matrix, row_lower, row_upper = rows.matrix(column)
    pm.model = LinearModel(
        cost=objective,
        matrix=a_matrix,
        row_lower=row_lower,
        row_upper=row_upper,
        col_lower=np.zeros(column),
        col_upper=upper,
        integer=np.ones(column, dtype=bool),
        maximize=value_stage,
        offset=offset,
    )
    return pm


def _quota_rows(
    instance: PlacementInstance, pm: PlacementModel, rows: _Rows, rules: list[QuotaRule],
    free_at: dict[DomainLevel, tuple[list[int], int]],
) -> None:
    """HiveD's quota rows (`hived` module docstring): each tenant's drawn volume within its
    quota; at every chain level above the units, the unused reserved volume within the
    entirely free cells (whose level must have f columns, or be entirely untouched)."""
    position = {int(r): k for k, r in enumerate(pm.active.tolist())}
    for rule in rules:
        for tenant, volume in rule.volume.items():
            mine = [(position[r], vol) for r, (t, _, vol) in rule.draw.items()
                    if t == tenant and r in position]
            if mine:
                rows.add([(np.zeros(len(mine)), pm.z0 + np.array([a for a, _ in mine]),
                           np.array([float(v) for _, v in mine]))], -INFINITY, float(volume), 1)
        for level, reserved in rule.reserved.items():
            if level not in free_at:
                continue
            columns, untouched = free_at[level]
            k_l = float(rule.chain.size_of(level))
            drawn = [(position[r], vol) for r, (_, lv, vol) in rule.draw.items()
                     if lv >= level and r in position]
            # reserved - drawn <= K_l (f + untouched):  -drawn - K_l f <= K_l untouched - reserved
            rows.add([(np.zeros(len(drawn)), pm.z0 + np.array([a for a, _ in drawn], np.int64),
                       -np.array([float(v) for _, v in drawn])),
                      (np.zeros(len(columns)), np.array(columns, np.int64), -k_l)],
                     -INFINITY, k_l * untouched - reserved, 1)


def _node_rows(
    instance: PlacementInstance, pm: PlacementModel, rows: _Rows,
    node_use: tuple[IntArray, IntArray] | None,
) -> None:
    """Exact node counts (`node_use`: the NODE level's use columns) and exclusive demands."""
    units = pm.units
    demands = [instance.demands[int(r)] for r in pm.active]
    pair_node = units.node[pm.pair_unit]
    exact = np.array([d.nodes for d in demands], np.int64)
    with_exact = np.flatnonzero(exact > 0)
    if with_exact.size and node_use is not None:
        use_demand, use_col = node_use
        position = np.full(pm.active.size, -1, np.int64)
        position[with_exact] = np.arange(with_exact.size)
        sel = position[use_demand] >= 0
        # demands with one candidate node have no use columns: nodes = 1 is then implied
        counted = np.unique(use_demand[sel])
        rows.add([(position[use_demand[sel]], use_col[sel], 1.0),
                  (position[counted], pm.z0 + counted, -exact[counted])],
                 0.0, 0.0, with_exact.size)
    for k in np.flatnonzero([d.exclusive for d in demands]).tolist():
        for p in np.flatnonzero(pm.pair_demand == k).tolist():
            others = np.flatnonzero((pair_node == pair_node[p]) & (pm.pair_demand != k))
            if others.size:
                big = float(others.size)
                rows.add([(np.zeros(others.size), pm.y0 + others, 1.0),
                          (np.zeros(1), np.array([pm.y0 + p]), big)], -INFINITY, big, 1)


def _upper_level(
    instance: PlacementInstance, pm: PlacementModel, rows: _Rows, level: DomainLevel,
    column: int,
) -> tuple[IntArray, IntArray, IntArray, int]:
    """Y[r, u] columns for a level above the units (only for demands with two or more
    candidate domains there) and their rows (P4). Returns (use demand positions, use columns,
    candidate domains per demand, next free column)."""
    topo = instance.topology
    R = pm.active.size
    anc = pm.units.ancestor[pm.pair_unit, level.value]
    with_domain = np.flatnonzero(anc >= 0)
    keys = pm.pair_demand[with_domain] * topo.num_domains + anc[with_domain]
    unique, inverse = np.unique(keys, return_inverse=True)
    u_demand = unique // topo.num_domains
    u_domain = unique % topo.num_domains
    domains_per = np.bincount(u_demand, minlength=R)
    kept = np.flatnonzero(domains_per[u_demand] >= 2)
    first = column
    pm.upper_y.append((level, u_demand[kept], u_domain[kept], first))
    col_of_unique = np.full(unique.size, -1, np.int64)
    col_of_unique[kept] = first + np.arange(kept.size)
    pair_col = col_of_unique[inverse]
    sel = pair_col >= 0
    pairs_sel = with_domain[sel]
    k = pairs_sel.size
    # y[p] <= Y[r, anc(t)]
    rows.add([(np.arange(k), pm.y0 + pairs_sel, 1.0), (np.arange(k), pair_col[sel], -1.0)],
             -INFINITY, 0.0, k)
    # Y[r, u] <= sum_{t in u} y[r, t]
    row_of_pair = np.searchsorted(kept, inverse[sel])
    rows.add([(np.arange(kept.size), first + np.arange(kept.size), 1.0),
              (row_of_pair, pm.y0 + pairs_sel, -1.0)], -INFINITY, 0.0, kept.size)
    return u_demand[kept], first + np.arange(kept.size), domains_per, column + kept.size


def open_domains_of(instance: PlacementInstance, level: DomainLevel) -> IntArray:
    """Domains of `level` whose devices are all free now (the ones f[u] may reward)."""
    topo = instance.topology
    domains = topo.domain_of_level(level)
    dev_anc = topo.ancestors[:, level.value]
    blocked = np.zeros(topo.num_domains, dtype=bool)
    blocked[dev_anc[(dev_anc >= 0) & ~instance.free]] = True
    return domains[~blocked[domains] & (topo.domain_devices[domains] > 0)]


def _keep_rows(
    instance: PlacementInstance, pm: PlacementModel, r: int, unit_pair: dict[int, int]
) -> list[KeepRow] | None:
    """Rows tying keep[r] to the pairs of running demand r (`unit_pair`: unit -> pair); None
    when it cannot keep (its previous devices are not all eligible, or a previous unit is not
    a candidate)."""
    demand = instance.demands[r]
    units = pm.units
    out: list[KeepRow] = []
    if demand.previous:
        previous = np.asarray(demand.previous, np.int64)
        shrink = demand.devices < previous.size
        if shrink:  # only the previous devices still eligible can be kept
            previous = previous[instance.eligible[r][previous]]
            if previous.size < demand.devices:
                return None
        elif not instance.eligible[r][previous].all():
            return None
        held, counts = np.unique(units.unit_of_device[previous], return_counts=True)
        if not shrink and any(int(t) not in unit_pair for t in held):
            return None
        prev = dict(zip(held.tolist(), counts.tolist(), strict=True))
        for t, p in unit_pair.items():
            c = prev.get(t, 0)
            if not shrink:
                if c:  # c keep <= g
                    out.append(([pm.g0 + p, KEEP], [-1.0, float(c)], -INFINITY, 0.0))
            else:  # g <= c + cap (1 - keep)
                big = float(pm.cap[p])
                out.append(([pm.g0 + p, KEEP], [1.0, big], -INFINITY, c + big))
        return out
    nodes_prev = set(demand.previous_nodes)
    node_pairs: dict[int, list[int]] = {}
    for t, p in unit_pair.items():
        node_pairs.setdefault(int(units.node[t]), []).append(p)
    if any(v not in node_pairs for v in nodes_prev):
        return None
    for v, plist in node_pairs.items():
        if v in nodes_prev:  # keep <= sum of y on the node
            out.append(([KEEP, *[pm.y0 + p for p in plist]], [1.0] + [-1.0] * len(plist),
                        -INFINITY, 0.0))
        else:
            for p in plist:
                out.append(([pm.y0 + p, KEEP], [1.0, 1.0], -INFINITY, 1.0))
    return out


def keeps_counts(instance: PlacementInstance, r: int, placed: dict[int, int],
                 unit_of_device: IntArray | None = None, unit_node: IntArray | None = None
                 ) -> bool:
    """The unit counts `placed` let running demand r keep its devices (the keep rows); units
    are nodes unless `unit_of_device` / `unit_node` say otherwise."""
    demand = instance.demands[r]
    topo = instance.topology
    of_device = topo.device_node if unit_of_device is None else unit_of_device
    if not demand.previous:
        node = (lambda t: t) if unit_node is None else (lambda t: int(unit_node[t]))
        return {node(t) for t in placed} == set(demand.previous_nodes)
    previous = np.asarray(demand.previous, np.int64)
    if demand.devices < previous.size:
        previous = previous[instance.eligible[r][previous]]
    held, counts = np.unique(of_device[previous], return_counts=True)
    prev = dict(zip(held.tolist(), counts.tolist(), strict=True))
    if demand.devices >= len(demand.previous):
        return all(placed.get(t, 0) >= c for t, c in prev.items())
    return all(placed.get(t, 0) <= prev.get(t, 0) for t in placed)


def start_point(pm: PlacementModel, instance: PlacementInstance, counts: Counts) -> FloatArray:
    """The column values of an assignment given as per-demand unit counts (a MIP start).
    Counts must use the model's candidate pairs only."""
    units = pm.units
    x = np.zeros(pm.columns)
    pair_index = {(int(a), int(t)): p for p, (a, t) in
                  enumerate(zip(pm.pair_demand.tolist(), pm.pair_unit.tolist(), strict=True))}
    used: dict[int, list[int]] = {}
    for a_, r in enumerate(pm.active.tolist()):
        placed = counts[r]
        if not placed:
            continue
        x[pm.z0 + a_] = 1.0
        for t, k in placed.items():
            p = pair_index[(a_, int(t))]
            x[pm.g0 + p] = k
            x[pm.y0 + p] = 1.0
        used[a_] = sorted(placed)
    for level, demands, domains, first in pm.upper_y:
        for k, (a_, u) in enumerate(zip(demands.tolist(), domains.tolist(), strict=True)):
            if a_ in used and np.any(units.ancestor[used[a_], level.value] == u):
                x[first + k] = 1.0
    for level, (demands, first) in pm.crossing.items():
        for k, a_ in enumerate(demands.tolist()):
            if a_ in used:
                column = units.ancestor[used[a_], level.value]
                x[first + k] = float(np.unique(column[column >= 0]).size >= 2)
    keepers, first = pm.keep
    for k, a_ in enumerate(keepers.tolist()):
        r = int(pm.active[a_])
        if counts[r]:
            kept = keeps_counts(instance, r, counts[r], units.unit_of_device, units.node)
            x[first + k] = float(kept)
    free_domains, first = pm.free
    if free_domains.size:
        touched = np.zeros(instance.topology.num_domains, dtype=bool)
        for unit_list in used.values():
            anc = units.ancestor[unit_list]
            touched[anc[anc >= 0]] = True
        x[first : first + free_domains.size] = ~touched[free_domains]
    return x


def counts_of(pm: PlacementModel, x: FloatArray, demands: int) -> Counts:
    """Per demand (all `demands` of the instance), devices per unit of a solution."""
    out: list[dict[int, int]] = [{} for _ in range(demands)]
    g = np.rint(x[pm.g0 : pm.g0 + pm.pair_demand.size]).astype(np.int64)
    for p in np.flatnonzero(g > 0).tolist():
        r = int(pm.active[pm.pair_demand[p]])
        out[r][int(pm.pair_unit[p])] = int(g[p])
    return tuple(out)


def solve(
    pm: PlacementModel, deadline: Deadline, relative_gap: float, threads: int = 0,
    start: FloatArray | None = None, seed: int = 0,
) -> SolverResult:
    """Run HiGHS on the model (the cost's absolute gap: 1e-6 as well)."""
    assert pm.model is not None
    settings = HighsSettings(
        mip_rel_gap=relative_gap, mip_abs_gap=1e-6, threads=threads, seed=seed,
    )
    return solve_highs(pm.model, settings, deadline, start=start)
