"""How each plan kind becomes the grants of a round. The engine asks the policy's driver for
every round's grants; the driver decides when to solve (through `RoundContext.solve`) and
reads the answer as a `plans.Decision`. Which driver runs is the policy's plan kind
(`Capabilities.plan_kind`), so a newly registered policy of a known kind needs no change here.

* TIME_SHARE, MARKET (`TimeShareDriver`): the time shares X go through Gavel's round
  mechanism (`apportion.formulations.rounds.round_schedule`, the function the service uses
  for `schedule_rounds`): priorities from the time received since the last solve, placement
  on nodes with lease extensions. X is recomputed when the set of active jobs changes (an
  arrival or a completion) and, with `resolve_every`, every that many rounds; the received
  time restarts at every recompute (Gavel's reset). A plan that comes with rounds of its own
  (Gandiva_fair's stride quanta) is followed round by round instead, and re-solved when they
  run out.
* WINDOW (`WindowDriver`): round t of the planning window runs its planned grants (on the
  nodes the plan names, else placed here with lease preference); re-planned on any change,
  every `resolve_every` rounds (default 8, Shockwave's) and when the window runs out.
* QUEUE (`QueueDriver`): non-preemptive. Jobs the plan starts now run until they finish
  (start/finish events); re-solved when jobs arrive or finish (and every `resolve_every`).
* CONFIGURATION (`ConfigurationDriver`): each job runs in its chosen configuration (type,
  devices, nodes); re-solved every round by default (Sia's scheduling interval); a changed
  configuration is a restart.
* GROUPS (`GroupsDriver`): the co-location policies' groups; every member of a group runs
  on the group's devices (held once) at its speed alone divided by its slowdown in the
  group; re-solved every round by default (the plan is for one round), with the running
  groups and pairs sent back as the current placements. A resource-shape plan (synergy)
  gives each member its CPU cores and memory too (`Grant.cpus`, `memory_gib`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from apportion.simulator.errors import SimulationError
from apportion.simulator.placement import DevicePool
from apportion.simulator.plans import Decision, NodeDevices, Planned
from apportion.simulator.problems import with_round_history
from apportion.simulator.state import JobState
from apportion.solver.capabilities import PlanKind
from apportion.solver.model import FloatArray, IntArray, Problem

WINDOW_RESOLVE_ROUNDS = 8
"""A planning window is re-planned at the latest every 8 rounds (Shockwave's REOPT_ROUNDS)."""


@dataclass(frozen=True)
class Grant:
    """A job's devices for one round."""

    job: int
    """Global job index."""
    type_index: int
    devices: int
    nodes: NodeDevices = ()
    partner: int = -1
    """Global index of the job sharing these devices (space sharing); -1 = alone."""
    lease_extended: bool = False
    group: int = -1
    """GROUPS plans: global index of the group's first member (every member of a group
    shares these devices); -1 = not in a group."""
    slowdown: float = 1.0
    """The job's time per step in its group over its time per step alone (GROUPS)."""
    device_ids: tuple[int, ...] = ()
    """The devices (topology indices) when the placement stage chose them; empty = only
    counts per type and node are kept."""
    cpus: float = math.nan
    """CPU cores the plan gives the job in all, spread over its nodes with its devices
    (resource-shape policies); NaN = not allocated."""
    memory_gib: float = math.nan
    """Host memory the plan gives the job in all (GiB); NaN = not allocated."""


@dataclass
class RoundContext:
    """What a driver sees before a round."""

    index: int
    now_s: float
    round_s: float
    active: IntArray
    """Arrived, unfinished jobs (global indices, ascending)."""
    changed: bool
    """The active set differs from the previous simulated round's."""
    state: JobState
    make_problem: Callable[[], Problem]
    solve_problem: Callable[[Problem], Decision]
    new_pool: Callable[[], DevicePool]
    _problem: Problem | None = None

    def problem(self) -> Problem:
        """The snapshot of this round (built once)."""
        if self._problem is None:
            self._problem = self.make_problem()
        return self._problem

    def solve(self) -> Decision:
        return self.solve_problem(self.problem())


class Driver(Protocol):
    def grants(self, ctx: RoundContext) -> list[Grant]: ...


def driver_for(kind: PlanKind, resolve_every: int | None) -> Driver:
    """The driver of a plan kind; `resolve_every` (rounds, 0 = only on changes, None = the
    kind's default)."""
    if kind in (PlanKind.TIME_SHARE, PlanKind.MARKET):
        return TimeShareDriver(resolve_every or 0)
    if kind is PlanKind.WINDOW:
        return WindowDriver(WINDOW_RESOLVE_ROUNDS if resolve_every is None else resolve_every)
    if kind is PlanKind.QUEUE:
        return QueueDriver(resolve_every or 0)
    if kind is PlanKind.GROUPS:
        return GroupsDriver(1 if resolve_every is None else resolve_every)
    return ConfigurationDriver(1 if resolve_every is None else resolve_every)


def _where_it_ran(ctx: RoundContext, g: Grant) -> Grant:
    """`g` on the nodes and devices the job held in the previous round (the placement stage
    may have moved it from where the driver put it)."""
    before = ctx.state.placement[g.job]
    if before is None or before.type_index != g.type_index or before.devices != g.devices:
        return g
    return replace(g, nodes=before.nodes, device_ids=before.device_ids)


def _reserve(
    ctx: RoundContext,
    pool: DevicePool,
    type_index: int,
    devices: int,
    nodes: NodeDevices,
    previous: NodeDevices,
    what: str,
) -> NodeDevices:
    """Take `devices` of the type from `pool` on `nodes` (the plan's), else on nodes chosen
    here preferring `previous`; SimulationError naming `what` when they do not fit."""
    if pool.has_nodes and not nodes:
        chosen = pool.choose(type_index, devices, previous)
        nodes = chosen if chosen is not None else ()
    why = pool.reserve(type_index, devices, nodes)
    if why:
        raise SimulationError(f"round {ctx.index}: {what} does not fit ({why})")
    return nodes


def _due(changed: bool, index: int, solved_at: int, every: int) -> bool:
    return changed or solved_at < 0 or (every > 0 and index - solved_at >= every)


def place_planned(
    ctx: RoundContext, planned: Sequence[Planned], ids: IntArray, keep_order: bool = False
) -> list[Grant]:
    """The grants of one planned round (`ids` maps the plan's job indices to global ones):
    each on the nodes the plan names (its devices spread over them in order), else placed
    here preferring the nodes the job held in the previous round; a pair shares one set of
    devices. Named nodes and larger gangs are placed first, unless `keep_order` (the order in
    which the plan placed them)."""
    pool = ctx.new_pool()
    placed: dict[int, NodeDevices] = {}
    out = []
    order = (
        list(planned)
        if keep_order
        else sorted(planned, key=lambda p: (not p.nodes, -p.devices, p.job))
    )
    for p in order:
        i = int(ids[p.job])
        before = ctx.state.placement[i]
        if p.partner >= 0 and p.partner in placed:
            nodes = placed[p.partner]
        else:
            previous = (
                before.nodes if before is not None and before.type_index == p.type_index else ()
            )
            found = (
                pool.spread(p.type_index, p.devices, p.nodes)
                if p.nodes
                else pool.choose(p.type_index, p.devices, previous)
            )
            if found is None or pool.reserve(p.type_index, p.devices, found):
                raise SimulationError(
                    f"round {ctx.index}: the plan runs job {i} beyond the free "
                    f"devices of type {p.type_index}"
                )
            nodes = found
        placed[p.job] = nodes
        kept = before is not None and (before.type_index, before.nodes) == (p.type_index, nodes)
        partner = int(ids[p.partner]) if p.partner >= 0 else -1
        out.append(Grant(i, p.type_index, p.devices, nodes, partner, kept and bool(nodes)))
    return out


@dataclass
class TimeShareDriver:
    """Gavel's round mechanism on the plan's time shares, or the plan's own rounds."""

    resolve_every: int = 0
    solved_at: int = -1
    problem: Problem | None = None
    shares: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    colocated: tuple[tuple[int, int, int, float], ...] = ()
    received: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    elapsed_s: float = 0.0
    planned: tuple[tuple[Planned, ...], ...] = ()

    def grants(self, ctx: RoundContext) -> list[Grant]:
        from apportion.formulations.rounds import round_schedule

        offset = ctx.index - self.solved_at
        if _due(ctx.changed, ctx.index, self.solved_at, self.resolve_every) or (
            self.planned and offset >= len(self.planned)
        ):
            self.problem = ctx.problem()
            decision = ctx.solve()
            k, n = self.problem.jobs.num_jobs, self.problem.cluster.num_types
            self.shares, self.colocated, self.planned = np.zeros((k, n)), (), ()
            if decision.has_plan and decision.time_share is not None:
                self.shares, self.colocated = decision.time_share, decision.colocated
                self.planned = decision.planned or ()
            self.received = np.zeros((k, n))
            self.elapsed_s = 0.0
            self.solved_at = ctx.index
            offset = 0
        if self.planned:
            return place_planned(ctx, self.planned[offset], ctx.active)
        assert self.problem is not None
        problem = with_round_history(
            self.problem, self.received, self.elapsed_s, ctx.state, ctx.active
        )
        rounds = round_schedule(problem, self.shares, 1, self.colocated)
        names = {name: k for k, name in enumerate(problem.cluster.node_names)}
        granted = rounds[0].grants if rounds else ()
        for g in granted:
            self.received[g.job, g.type_index] += ctx.round_s
        self.elapsed_s += ctx.round_s
        # in the order the mechanism placed them: kept leases first, then larger gangs
        ordered = sorted(granted, key=lambda g: (not g.lease_extended, -g.devices, g.job))
        planned = [
            Planned(
                g.job, g.type_index, g.devices, tuple(names[x] for x in g.nodes), g.colocated_with
            )
            for g in ordered
        ]
        return place_planned(ctx, planned, ctx.active, keep_order=True)


@dataclass
class WindowDriver:
    resolve_every: int = WINDOW_RESOLVE_ROUNDS
    solved_at: int = -1
    planned: tuple[tuple[Planned, ...], ...] = ()
    ids: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))

    def grants(self, ctx: RoundContext) -> list[Grant]:
        offset = ctx.index - self.solved_at
        if (
            not self.planned
            or _due(ctx.changed, ctx.index, self.solved_at, self.resolve_every)
            or offset >= len(self.planned)
        ):
            decision = ctx.solve()
            self.planned = (decision.planned or ()) if decision.has_plan else ()
            self.ids = ctx.active.copy()
            self.solved_at = ctx.index
            offset = 0
        if offset >= len(self.planned):
            return []
        return place_planned(ctx, self.planned[offset], self.ids)


@dataclass
class QueueDriver:
    resolve_every: int = 0
    solved_at: int = -1
    running: dict[int, Grant] = field(default_factory=dict)

    def grants(self, ctx: RoundContext) -> list[Grant]:
        alive = set(ctx.active.tolist())
        self.running = {i: _where_it_ran(ctx, g) for i, g in self.running.items() if i in alive}
        pool = ctx.new_pool()
        for g in self.running.values():
            if pool.reserve(g.type_index, g.devices, g.nodes):
                raise SimulationError(f"round {ctx.index}: running jobs exceed the cluster")
        if _due(ctx.changed, ctx.index, self.solved_at, self.resolve_every):
            decision = ctx.solve()
            self.solved_at = ctx.index
            for start in decision.starts if decision.has_plan else ():
                i = int(ctx.active[start.job])
                if i in self.running:
                    continue
                nodes = _reserve(
                    ctx, pool, start.type_index, start.devices, start.nodes, (),
                    f"job {i} that the queue plan starts",
                )
                self.running[i] = Grant(i, start.type_index, start.devices, nodes)
        return [self.running[i] for i in sorted(self.running)]


@dataclass
class ConfigurationDriver:
    resolve_every: int = 1
    solved_at: int = -1
    chosen: dict[int, Grant] = field(default_factory=dict)

    def grants(self, ctx: RoundContext) -> list[Grant]:
        if _due(ctx.changed, ctx.index, self.solved_at, self.resolve_every):
            decision = ctx.solve()
            self.solved_at = ctx.index
            self.chosen = {}
            pool = ctx.new_pool()
            configured = decision.configurations if decision.has_plan else ()
            for row, conf in enumerate(configured):
                if conf is None:
                    continue
                i = int(ctx.active[row])
                before = ctx.state.placement[i]
                nodes = _reserve(
                    ctx, pool, conf.type_index, conf.devices, conf.nodes,
                    before.nodes if before is not None else (), f"the configuration of job {i}",
                )
                self.chosen[i] = Grant(i, conf.type_index, conf.devices, nodes)
        alive = set(ctx.active.tolist())
        kept = self.solved_at != ctx.index  # held since an earlier round
        return [
            _where_it_ran(ctx, g) if kept else g
            for i, g in sorted(self.chosen.items())
            if i in alive
        ]


@dataclass
class GroupsDriver:
    """The groups of a co-location plan, kept until the next solve (every round by default)."""

    resolve_every: int = 1
    solved_at: int = -1
    groups: list[Grant] = field(default_factory=list)

    def grants(self, ctx: RoundContext) -> list[Grant]:
        if _due(ctx.changed, ctx.index, self.solved_at, self.resolve_every):
            decision = ctx.solve()
            self.solved_at = ctx.index
            self.groups = []
            taken: set[int] = set()
            pool = ctx.new_pool()
            for group in decision.groups if decision.has_plan else ():
                members = [int(ctx.active[x]) for x in group.members]
                twice = [i for i in members if i in taken]
                if twice:
                    raise SimulationError(
                        f"round {ctx.index}: the plan puts job "
                        f"{ctx.problem().jobs.ids[group.members[members.index(twice[0])]]!r} in "
                        "two groups"
                    )
                taken.update(members)
                lead = min(members)
                before = ctx.state.placement[lead]
                previous = (
                    before.nodes
                    if before is not None and before.type_index == group.type_index
                    else ()
                )
                nodes = _reserve(
                    ctx, pool, group.type_index, group.devices, group.nodes, previous,
                    f"the group of jobs {sorted(members)}",
                )
                cpus = group.cpus or (math.nan,) * len(members)
                memory = group.memory_gib or (math.nan,) * len(members)
                for i, slowdown, c, mem in zip(members, group.slowdown, cpus, memory,
                                               strict=True):
                    self.groups.append(
                        Grant(i, group.type_index, group.devices, nodes, group=lead,
                              slowdown=float(slowdown), cpus=c, memory_gib=mem)
                    )
        alive = set(ctx.active.tolist())
        kept = self.solved_at != ctx.index  # held since an earlier round
        return sorted(
            (_where_it_ran(ctx, g) if kept else g for g in self.groups if g.job in alive),
            key=lambda g: g.job,
        )
