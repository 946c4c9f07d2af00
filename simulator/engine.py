"""The event loop: replay a workload on a cluster through one policy, round by round.

Time is cut into rounds of `round_s` seconds starting at the first arrival (Gavel's and
Shockwave's simulators work in rounds; Sia's scheduling interval is the same thing). Before
every round:

1. the jobs that arrived by the round's start and have not finished are *active* (a job
   arriving inside a round waits for the next one);
2. the policy's driver (`drivers`, chosen by the policy's plan kind) returns the round's
   grants, solving a snapshot when it needs one (the snapshot holds the active jobs only);
   with `SimulationConfig.placement` the placement stage then chooses their devices
   (`device_placement`);
3. the grants are checked (only active jobs, each at most once, never more devices than a
   type or a node has, no device twice, gangs whole, a pair's or group's devices held once,
   never more cores or memory than a node has)
   and every granted job progresses: at its true speed on the granted type (its pair speed
   when it shares devices, its goodput in a configuration, its speed alone over its
   slowdown in a co-location group: the workload's pair speed for two jobs of known types,
   its profile's speed-up when the plan gave it CPU cores and memory (`host_resources`),
   else the plan's predicted slowdown), times the round's noise factor, after the restart
   overhead when it did not hold the same devices in the previous round. A job that
   completes inside a round finishes at that instant (the JCT uses the actual finish, not
   the round's end); its devices stay idle until the round ends, as in Gavel's simulator.

Rounds with no active job are skipped (the clock jumps to the round of the next arrival). A
round in which a fresh solve runs nothing while nothing else can arrive ends the simulation:
the remaining jobs are reported unfinished (e.g. multi-GPU jobs under a policy that serves
1-GPU jobs only). With a measurement window (`SimulationConfig.window`, job indices) the run
ends once every job of the window has finished, later jobs still arriving until then
(Gavel's continuous-trace experiments).

Bounds: `max_rounds` simulated rounds (default 1,000,000); each solve has the per-solve time
limit `time_limit_s`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from apportion.datasets.cluster import ClusterSpec
from apportion.simulator.device_placement import place_round, shared_key
from apportion.simulator.drivers import Grant, RoundContext, driver_for
from apportion.simulator.errors import SimulationError, SimulationInputError
from apportion.simulator.fidelity import Fidelity
from apportion.simulator.host_resources import (
    host_capacity,
    nodes_used,
    resource_speedup,
    with_host_resources,
)
from apportion.simulator.placement import DevicePool
from apportion.simulator.plans import Decision
from apportion.simulator.problems import ProblemContext, build_problem, model_cluster
from apportion.simulator.solvers import (
    InProcessSolver,
    RemoteSolver,
    Solver,
    check_snapshot,
    service_reading,
    timed,
)
from apportion.simulator.state import JobState, Placement
from apportion.simulator.workload import Workload, check_fits
from apportion.solver.capabilities import Capabilities, PlanKind
from apportion.solver.errors import ValidationError
from apportion.solver.model import (
    Cluster,
    Compat,
    FloatArray,
    IntArray,
    PolicyRequest,
    Problem,
    SolveOptions,
    SolverPreference,
)
from apportion.solver.registry import PolicySpec, lookup, resolve_parameters
from apportion.solver.stages import PlacementParameters

MAX_ROUNDS = 1_000_000
"""Default bound on simulated rounds."""

ProgressCallback = Callable[[int, float, int, int], None]
"""(round index, simulated time s, active jobs, finished jobs) after every round."""


@dataclass(frozen=True)
class SimulationConfig:
    """One simulation: the policy, how it is solved and what is modelled."""

    policy: str = "max_min_fairness_perf"
    """A registered policy name or alias."""
    parameters: object | None = None
    """The policy's parameters (None = defaults; an alias's forced values still apply)."""
    compat: Compat = Compat.NONE
    round_s: float = 360.0
    """Round length (s)."""
    time_limit_s: float = 15.0
    """Per-solve time limit (s); 0 = none."""
    threads: int = 0
    solver: SolverPreference = SolverPreference.AUTO
    """Which solve path the policy takes (`SolveOptions.solver`): AUTO = its fastest exact one;
    CLARABEL = an interior point on the full model (Gavel's ECOS-like answers where the optimum
    is not unique)."""
    seed: int = 0
    """Seed of the policy (SolveOptions.seed) and of every random draw of the run."""
    resolve_every: int | None = None
    """Re-solve at least every N rounds (None = the plan kind's default; 0 = on changes)."""
    fidelity: Fidelity = field(default_factory=Fidelity)
    window: tuple[int, int] | None = None
    """Measured jobs [start, end) in workload order; the run ends when they all finished."""
    max_rounds: int = MAX_ROUNDS
    server: str = ""
    """HOST:PORT of an `apportion serve` to solve with ("" = in this process)."""
    check_first_snapshot: bool = True
    """Validate the first snapshot with the service's rules before running."""
    placement: PlacementParameters | None = None
    """The placement stage on every round's grants (`simulator.device_placement`; needs a
    node layout); None = the simulator's own best-fit placement on nodes."""

    def policy_request(self) -> tuple[PolicySpec, PolicyRequest]:
        try:
            spec = lookup(self.policy, "--policies")
        except ValidationError as exc:
            raise SimulationInputError(str(exc)) from exc
        if self.parameters is not None and not isinstance(self.parameters, spec.parameters_type):
            raise SimulationInputError(
                f"policy {self.policy!r} takes {spec.parameters_type.__name__}, got "
                f"{type(self.parameters).__name__}"
            )
        params = resolve_parameters(spec, self.policy, self.parameters)
        return spec, PolicyRequest(spec.name, params, self.compat, requested_name=self.policy)


@dataclass
class RoundLog:
    """Per-round records, appended as the simulation goes."""

    index: list[int] = field(default_factory=list)
    start_s: list[float] = field(default_factory=list)
    active: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    busy: list[np.ndarray] = field(default_factory=list)
    """(n,) device-seconds used per type."""
    solves: list[int] = field(default_factory=list)
    solve_wall_s: list[float] = field(default_factory=list)
    solver_s: list[float] = field(default_factory=list)
    termination: list[str] = field(default_factory=list)
    grant_round: list[int] = field(default_factory=list)
    grant_job: list[int] = field(default_factory=list)
    grant_type: list[int] = field(default_factory=list)
    grant_devices: list[int] = field(default_factory=list)
    grant_nodes: list[str] = field(default_factory=list)
    """"node:devices;node:devices" ("" without a node layout)."""
    grant_shared: list[int] = field(default_factory=list)
    """The smallest job index of the pair or group holding the same devices (the job itself
    in a group of one; -1 = not in a pair or group)."""
    grant_slowdown: list[float] = field(default_factory=list)
    """The job's slowdown in its group (1 outside groups)."""
    grant_device_ids: list[str] = field(default_factory=list)
    grant_cpus: list[float] = field(default_factory=list)
    """CPU cores the plan gave the job (resource-shape policies; NaN = not allocated)."""
    grant_memory_gib: list[float] = field(default_factory=list)
    """Host memory the plan gave the job (GiB; NaN = not allocated)."""
    """"d,d,..." the devices (topology indices) the placement stage chose ("" = not used)."""
    unplaced: list[int] = field(default_factory=list)
    """Grants the placement stage could not place in the round (0 without it)."""


@dataclass
class Outcome:
    """Everything a simulation produced (turned into tables by `metrics.run_result`)."""

    workload: Workload
    cluster: ClusterSpec
    config: SimulationConfig
    policy: PolicyRequest
    kind: PlanKind
    state: JobState
    log: RoundLog
    measured: np.ndarray
    """(m,) bool: the jobs the metrics describe."""
    stopped: str
    """Why the run ended: "finished", "window finished" or "stalled: ..."."""
    lease_opportunities: int
    lease_extensions: int
    wall_s: float


def simulate(
    workload: Workload,
    cluster: ClusterSpec,
    config: SimulationConfig,
    progress: ProgressCallback | None = None,
) -> Outcome:
    """Run `config.policy` on `workload` over `cluster` (see the module docstring)."""
    started = time.perf_counter()
    spec, request = config.policy_request()
    if not (math.isfinite(config.round_s) and config.round_s > 0):
        raise SimulationInputError(f"--round must be > 0, got {config.round_s}")
    if workload.num_jobs == 0:
        raise SimulationInputError(f"{workload.source}: no jobs to simulate")
    check_fits(workload, cluster)
    if config.placement is not None and not cluster.nodes:
        raise SimulationInputError(
            "--placement needs a cluster with nodes (e.g. --cluster v100:16:8 for 8-device "
            "nodes, or a cluster file)"
        )
    _check_inputs(config.policy, spec.capabilities, workload)
    kind = spec.capabilities.plan_kind
    host = spec.capabilities.reads_resource_profiles
    if host:
        cluster = with_host_resources(cluster)
    model = model_cluster(cluster)
    m, n = workload.num_jobs, model.num_types
    fid = config.fidelity
    factors = fid.estimate_factors(m, n)
    context = ProblemContext(
        workload=workload,
        cluster=model,
        capabilities=spec.capabilities,
        round_s=config.round_s,
        estimated=workload.throughput * factors,
        estimate_factor=factors,
        restart_penalty_s=fid.restart_overhead_s,
        recalibrate=fid.recalibrate,
        **_host_arrays(cluster, host),
    )
    options = SolveOptions(
        time_limit_s=config.time_limit_s,
        threads=config.threads,
        seed=config.seed,
        solver=config.solver,
    )
    solver: Solver = (
        RemoteSolver(config.server, request, options)
        if config.server
        else InProcessSolver(request, options)
    )
    measured = np.zeros(m, bool)
    if config.window is None:
        measured[:] = True
    else:
        lo, hi = config.window
        if not 0 <= lo < hi <= m:
            raise SimulationInputError(f"--window {lo} {hi}: must satisfy 0 <= START < END <= {m}")
        measured[lo:hi] = True
    loop = _Loop(workload, context, config, kind, solver, request, options)
    try:
        stopped = loop.run(measured, progress)
    finally:
        solver.close()
    return Outcome(
        workload=workload,
        cluster=cluster,
        config=config,
        policy=request,
        kind=kind,
        state=loop.state,
        log=loop.log,
        measured=measured,
        stopped=stopped,
        lease_opportunities=loop.lease_opportunities,
        lease_extensions=loop.lease_extensions,
        wall_s=time.perf_counter() - started,
    )


def _host_arrays(cluster: ClusterSpec, host: bool) -> dict[str, FloatArray]:
    if not host:
        return {}
    cpus, memory = host_capacity(cluster)
    return {"node_cpus": cpus, "node_memory_gib": memory}


def _check_inputs(name: str, caps: Capabilities, workload: Workload) -> None:
    """Refuse a policy that reads inputs no workload of the simulator can give it."""
    if caps.reads_resource_profiles and len(workload.resource_grid) != workload.num_jobs:
        raise SimulationInputError(
            f"policy {name!r} reads each job's throughput over CPU cores and host memory "
            f"(resource profiles); the workload ({workload.source or 'given'}) has none: give "
            "--resource-profiles builtin (synthetic grids per job type) or "
            "--resource-profiles FILE (Synergy's throughput-matrix CSV)"
        )
    if caps.reads_stage_times and workload.stage_s.shape != (workload.num_jobs, 4):
        raise SimulationInputError(
            f"policy {name!r} reads each job's time per iteration in storage, CPU, GPU and "
            f"network (stage times); the workload ({workload.source or 'given'}) has none (no "
            "trace format carries them; set Workload.stage_s)"
        )


def check_grants(
    r: int,
    active: IntArray,
    grants: list[Grant],
    workload: Workload,
    cluster: Cluster,
    kind: PlanKind,
) -> None:
    """The invariants of round `r` (SimulationError when a driver breaks one): only active
    jobs run, each once, gangs whole (configurations may choose their device count), a pair
    or a group on the same devices (held once), never more devices than a type or a node
    has."""
    alive = set(active.tolist())
    seen: set[int] = set()
    pool = DevicePool(cluster)
    placed: dict[int, Grant] = {}
    grouped: dict[int, Grant] = {}
    holder: dict[int, int] = {}
    """device -> the pair, group or job holding it."""
    scale = workload.scale_factor
    for g in grants:
        ident = workload.ids[g.job] if 0 <= g.job < workload.num_jobs else str(g.job)
        if g.job not in alive:
            raise SimulationError(f"round {r}: job {ident!r} runs but is not active")
        if g.job in seen:
            raise SimulationError(f"round {r}: job {ident!r} is granted twice")
        seen.add(g.job)
        owner = shared_key(g) if shared_key(g) >= 0 else g.job
        for d in g.device_ids:
            if holder.setdefault(d, owner) != owner:
                raise SimulationError(f"round {r}: device {d} is granted twice")
        if g.device_ids and len(set(g.device_ids)) != g.devices:
            raise SimulationError(f"round {r}: job {ident!r} holds {len(g.device_ids)} devices "
                                  f"for a grant of {g.devices}")
        if kind is not PlanKind.CONFIGURATION and g.devices != scale[g.job]:
            raise SimulationError(
                f"round {r}: job {ident!r} got {g.devices} devices, its gang is {int(scale[g.job])}"
            )
        if g.group >= 0 and g.group in grouped:
            first = grouped[g.group]
            if (first.type_index, first.devices, first.nodes) != (
                g.type_index,
                g.devices,
                g.nodes,
            ):
                raise SimulationError(
                    f"round {r}: group member {ident!r} is not on the group's devices"
                )
            continue
        if g.partner >= 0 and g.partner in placed:
            other = placed[g.partner]
            same = (other.type_index, other.devices, other.nodes) == (
                g.type_index,
                g.devices,
                g.nodes,
            )
            if not same or other.partner != g.job:
                raise SimulationError(f"round {r}: pair {ident!r} is not on shared devices")
            continue
        why = pool.reserve(g.type_index, g.devices, g.nodes)
        if why:
            raise SimulationError(f"round {r}: granting job {ident!r} exceeds the cluster: {why}")
        placed[g.job] = g
        if g.group >= 0:
            grouped[g.group] = g


def check_host_resources(
    r: int, grants: list[Grant], node_cpus: FloatArray, node_memory_gib: FloatArray,
    workload: Workload,
) -> None:
    """Round `r`'s CPU cores and host memory (resource-shape plans): every job given them
    holds them on its nodes in proportion to its devices there, and no node gives more than
    it has (SimulationError otherwise)."""
    cpus = np.zeros(node_cpus.size)
    memory = np.zeros(node_memory_gib.size)
    for g in grants:
        if math.isnan(g.cpus) and math.isnan(g.memory_gib):
            continue
        ident = workload.ids[g.job]
        if not (g.cpus >= 0 and g.memory_gib >= 0) or not g.nodes:
            raise SimulationError(
                f"round {r}: job {ident!r} got {g.cpus} cores and {g.memory_gib} GiB "
                f"on nodes {g.nodes or 'none'}"
            )
        for k, c, mem in nodes_used(g.nodes, g.cpus, g.memory_gib, g.devices):
            cpus[k] += c
            memory[k] += mem
    for what, used, cap in (("cores", cpus, node_cpus), ("GiB", memory, node_memory_gib)):
        over = np.flatnonzero(used > cap * (1 + 1e-9) + 1e-9)
        if over.size:
            k = int(over[0])
            raise SimulationError(
                f"round {r}: node {k} gives {used[k]:g} {what} of its {cap[k]:g}"
            )


class _Loop:
    def __init__(
        self,
        workload: Workload,
        context: ProblemContext,
        config: SimulationConfig,
        kind: PlanKind,
        solver: Solver,
        request: PolicyRequest,
        options: SolveOptions,
    ) -> None:
        self.w = workload
        self.cluster = context.cluster
        self.context = context
        self.config = config
        self.kind = kind
        self.solver = solver
        self.request = request
        self.options = options
        self.state = JobState.start(workload)
        self.log = RoundLog()
        self.driver = driver_for(kind, config.resolve_every)
        self.checked = not config.check_first_snapshot
        self.lease_opportunities = 0
        self.lease_extensions = 0
        self.configs = self._configuration_rates() if kind is PlanKind.CONFIGURATION else {}

    def _configuration_rates(self) -> dict[tuple[int, int, int, int], float]:
        """(job, type, devices, nodes) -> true goodput, and (job, type, devices, 0) -> the best
        over node counts."""
        out: dict[tuple[int, int, int, int], float] = {}
        for i, rows in enumerate(self.w.configurations):
            for t, nodes, devices, goodput in rows:
                out[(i, t, devices, nodes)] = goodput
                out[(i, t, devices, 0)] = max(out.get((i, t, devices, 0), 0.0), goodput)
        return out

    def run(self, measured: np.ndarray, progress: ProgressCallback | None) -> str:
        w, state, cfg = self.w, self.state, self.config
        delta = cfg.round_s
        arrival = w.arrival_s
        t0 = float(arrival.min())
        prev_active: IntArray | None = None
        r = 0
        simulated = 0
        finished_count = 0
        while True:
            unfinished = np.isnan(state.finish_s)
            if not (unfinished & measured).any():
                return "finished" if cfg.window is None else "window finished"
            now = t0 + r * delta
            active_mask = unfinished & (arrival <= now + 1e-9)
            if not active_mask.any():
                r = self._next_arrival_round(r, t0, unfinished)
                prev_active = None
                continue
            if simulated >= cfg.max_rounds:
                raise SimulationError(
                    f"the simulation did not finish within {cfg.max_rounds:,} rounds "
                    f"(simulated time {now - t0:,.0f} s; raise --max-rounds)"
                )
            active = np.flatnonzero(active_mask)
            changed = prev_active is None or not np.array_equal(active, prev_active)
            solved: list[tuple[float, Decision]] = []
            grants = self._grants(r, now, active, changed, solved)
            busy = self._advance(r, now, grants)
            state.accrue_entitlement(delta)
            finished_now = int((~np.isnan(state.finish_s[active])).sum())
            finished_count += finished_now
            state.contention_sum[active] += active.size
            state.active_rounds[active] += 1
            self._record(r, now, active, grants, busy, solved)
            simulated += 1
            if progress is not None:
                progress(simulated, now + delta - t0, int(active.size), finished_count)
            prev_active = active
            if not grants:
                future = unfinished & (arrival > now + 1e-9)
                if future.any():
                    r = self._next_arrival_round(r, t0, unfinished & ~active_mask)
                    continue
                if solved:
                    left = int(np.isnan(state.finish_s).sum())
                    if self.log.unplaced[-1] and cfg.placement is not None:
                        return (
                            f"stalled: the placement stage ({cfg.placement.placer}) placed none "
                            f"of the policy's {self.log.unplaced[-1]} grants ({left} jobs left)"
                        )
                    return (
                        f"stalled: the policy runs none of the {left} remaining jobs "
                        f"({solved[-1][1].termination}"
                        + (f": {solved[-1][1].detail}" if solved[-1][1].detail else "")
                        + ")"
                    )
                prev_active = None  # force a fresh solve before giving up
            r += 1

    def _next_arrival_round(self, r: int, t0: float, pending: np.ndarray) -> int:
        upcoming = float(self.w.arrival_s[pending].min())
        return max(r + 1, math.ceil((upcoming - t0) / self.config.round_s - 1e-9))

    def _grants(
        self,
        r: int,
        now: float,
        active: IntArray,
        changed: bool,
        solved: list[tuple[float, Decision]],
    ) -> list[Grant]:
        def make_problem() -> Problem:
            problem = build_problem(self.context, self.state, active, now)
            if self.context.capabilities.reads_device_sharing:
                problem = service_reading(problem, self.request, self.options)
            return problem

        def solve_problem(problem: Problem) -> Decision:
            if not self.checked:
                check_snapshot(problem, self.request, self.options)
                self.checked = True
            decision, wall = timed(self.solver, problem, self.kind)
            self.state.apply(active, decision.carry)
            solved.append((wall, decision))
            return decision

        ctx = RoundContext(
            index=r,
            now_s=now,
            round_s=self.config.round_s,
            active=active,
            changed=changed,
            state=self.state,
            make_problem=make_problem,
            solve_problem=solve_problem,
            new_pool=lambda: DevicePool(self.cluster),
        )
        grants = self._true_slowdowns(self.driver.grants(ctx))
        unplaced = 0
        if self.config.placement is not None:
            grants, unplaced = place_round(
                ctx.problem(), active, grants, self.state, self.config.placement, self.options
            )
        self.log.unplaced.append(unplaced)
        check_grants(r, active, grants, self.w, self.cluster, self.kind)
        if self.context.node_cpus.size:
            check_host_resources(r, grants, self.context.node_cpus,
                                 self.context.node_memory_gib, self.w)
        return grants

    def _true_slowdowns(self, grants: list[Grant]) -> list[Grant]:
        """Two jobs sharing devices in a group run at the workload's pair speeds when it has
        them for their job types (their true speeds, as for space-sharing pairs); every
        other member at the slowdown its plan predicted."""
        if self.w.resource_grid and any(not math.isnan(g.cpus) for g in grants):
            grants = [self._resource_slowdown(g) for g in grants]
        pairs = self.w.pairs
        if pairs is None or not any(g.group >= 0 for g in grants):
            return grants
        members: dict[int, list[Grant]] = {}
        for g in grants:
            if g.group >= 0:
                members.setdefault(g.group, []).append(g)
        out = []
        for g in grants:
            both = members.get(g.group, []) if g.group >= 0 else []
            if len(both) == 2:
                other = both[1] if both[0].job == g.job else both[0]
                row = pairs.rates.get((self.w.job_type[g.job], self.w.job_type[other.job]))
                alone = float(self.w.throughput[g.job, g.type_index])
                if row is not None and alone > 0:
                    pair = float(row[g.type_index])
                    g = replace(g, slowdown=alone / pair if pair > 0 else math.inf)
            out.append(g)
        return out

    def _resource_slowdown(self, g: Grant) -> Grant:
        """A job given cores and memory runs at its profile's speed-up over its fair point
        (`host_resources.resource_speedup`), whatever slowdown the plan predicted."""
        grid = self.w.resource_grid[g.job]
        if math.isnan(g.cpus) or grid is None:
            return g
        speedup = resource_speedup(grid, g.cpus, g.memory_gib, g.devices, self.context.fair_shape,
                                   self.w.ids[g.job])
        return replace(g, slowdown=1.0 / speedup if speedup > 0 else math.inf)

    def _rate(self, g: Grant) -> float:
        i, j = g.job, g.type_index
        if self.kind is PlanKind.CONFIGURATION and self.w.configurations:
            nodes = len(g.nodes) if g.nodes else 1
            rate = self.configs.get((i, j, g.devices, nodes))
            if rate is None:
                rate = self.configs.get((i, j, g.devices, 0))
            if rate is None:
                raise SimulationError(
                    f"job {self.w.ids[i]!r} was given {g.devices} devices of type "
                    f"{self.cluster.type_names[j]!r}, a configuration it has no goodput for"
                )
            return rate
        if g.partner >= 0 and self.w.pairs is not None:
            key = (self.w.job_type[i], self.w.job_type[g.partner])
            row = self.w.pairs.rates.get(key)
            return float(row[j]) if row is not None else 0.0
        if g.group >= 0:
            if not g.slowdown > 0:
                raise SimulationError(
                    f"job {self.w.ids[i]!r} got slowdown {g.slowdown} in its group"
                )
            return float(self.w.throughput[i, j]) / g.slowdown
        if g.devices != self.w.scale_factor[i]:
            raise SimulationError(
                f"job {self.w.ids[i]!r} was given {g.devices} devices; without goodput "
                f"tables it runs only on its gang of {int(self.w.scale_factor[i])}"
            )
        return float(self.w.throughput[i, j])

    def _advance(self, r: int, now: float, grants: list[Grant]) -> np.ndarray:
        """Progress every granted job through the round; returns (n,) busy device-seconds."""
        state, w = self.state, self.w
        delta = self.config.round_s
        overhead = min(self.config.fidelity.restart_overhead_s, delta)
        noise = self.config.fidelity.speed_factors(r, w.num_jobs)
        busy = np.zeros(self.cluster.num_types)
        shared: dict[int, tuple[int, int, float]] = {}
        """Devices held by a pair or a group: key -> (type, devices, longest use)."""
        new_placement: dict[int, Placement] = {}
        for g in grants:
            i = g.job
            rate = self._rate(g)
            if noise is not None:
                rate *= float(noise[i])
            key = shared_key(g)
            placed = Placement(g.type_index, g.devices, g.nodes, key, g.device_ids)
            before = state.placement[i]
            kept = before is not None and (
                before.type_index,
                before.devices,
                before.nodes,
                sorted(before.device_ids),
            ) == (placed.type_index, placed.devices, placed.nodes, sorted(placed.device_ids))
            if before is not None:
                self.lease_opportunities += 1
                self.lease_extensions += int(kept)
            if math.isnan(state.start_s[i]):
                state.start_s[i] = now
            elif not kept:
                state.restarts[i] += 1
            lost = 0.0 if kept else overhead
            remaining = w.total_steps[i] - state.work_done[i]
            avail = delta - lost
            if rate > 0 and rate * avail >= remaining * (1 - 1e-12):
                used = lost + remaining / rate
                state.work_done[i] = w.total_steps[i]
                state.finish_s[i] = now + used
            else:
                used = delta
                state.work_done[i] += rate * avail
            state.run_s[i] += used
            state.device_s[i] += g.devices * used
            if key >= 0:
                longest = max(used, shared[key][2]) if key in shared else used
                shared[key] = (g.type_index, g.devices, longest)
            else:
                busy[g.type_index] += g.devices * used
            new_placement[i] = placed
        for type_index, devices, longest in shared.values():
            busy[type_index] += devices * longest
        state.place({i: p for i, p in new_placement.items() if math.isnan(state.finish_s[i])})
        return busy

    def _record(
        self,
        r: int,
        now: float,
        active: IntArray,
        grants: list[Grant],
        busy: np.ndarray,
        solved: list[tuple[float, Decision]],
    ) -> None:
        log = self.log
        names = self.cluster.node_names
        log.index.append(r)
        log.start_s.append(now)
        log.active.append(int(active.size))
        log.running.append(len(grants))
        log.busy.append(busy)
        log.solves.append(len(solved))
        log.solve_wall_s.append(sum(wall for wall, _ in solved))
        log.solver_s.append(sum(d.solve_time_s for _, d in solved))
        log.termination.append(str(solved[-1][1].termination) if solved else "")
        for g in grants:
            log.grant_round.append(r)
            log.grant_job.append(g.job)
            log.grant_type.append(g.type_index)
            log.grant_devices.append(g.devices)
            log.grant_nodes.append(";".join(f"{names[k]}:{d}" for k, d in g.nodes))
            log.grant_shared.append(shared_key(g))
            log.grant_slowdown.append(g.slowdown)
            log.grant_device_ids.append(",".join(str(d) for d in g.device_ids))
            log.grant_cpus.append(g.cpus)
            log.grant_memory_gib.append(g.memory_gib)
