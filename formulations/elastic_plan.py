"""The allocation pipeline shared by the elastic policies (Optimus B8, SLAQ B9, Lyra B7).

1. **Admission** (phase 1): jobs in order (running jobs first, then by arrival time and id)
   get their base state (smallest allocation) on one accelerator type, placed on nodes: a
   running job stays on its current type when it can, another job takes the type where its
   base is fastest among those with room. Jobs whose base fits nowhere wait (DEFERRED).
2. **Elastic allocation** (phase 2): the admitted jobs' menus on their types
   (`elastic_menu.Menu`), valued by the policy, solved by the greedy or exactly, within the
   devices of each type.
3. **Placement** of the extra tasks: tasks (workers, parameter servers) of `unit` devices,
   each on one node; current holdings kept first, then preferred nodes, most free first
   (fewest servers). When fragmented nodes cannot take every extra task, the job gets its most
   valuable state within what was placed (the plan's objective is the placed one; the bound
   still holds, so a loss shows as a gap).

The result is an `ElasticOutcome` (pure data); `to_plan` turns it into the solver's `Plan`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from apportion.formulations.elastic_menu import (
    ExactResult,
    Menu,
    MenuAllocation,
    exact,
    greedy,
)
from apportion.formulations.elastic_speed import TypeOptions, job_options, thinned
from apportion.formulations.sia_configs import NodeLayout, node_layout
from apportion.solver.certificate import termination
from apportion.solver.deadline import Deadline
from apportion.solver.model import FloatArray, IntArray, Problem
from apportion.solver.parameters import ElasticMethod
from apportion.solver.result import (
    Certificate,
    ConfigurationChoice,
    ConfigurationSection,
    ElasticSection,
    JobStatus,
    ModelSize,
    Plan,
    Termination,
    relative_gap,
)

BoolArray = NDArray[np.bool_]
Ledger = list[tuple[int, int]]
"""(node index, devices) a job's tasks hold, in placement order."""
EXACT_SHARE = 0.8
"""Fraction of the time left that the exact solve may use (after the greedy when it only
certifies it; before it otherwise)."""
CERTIFY_LIMIT_S = 30.0
"""Longest exact solve (s) run only to certify the greedy (a MILP on large parameter-server
menus); the request's own deadline applies when earlier."""
DEADLINE_CHECK_EVERY = 64
"""Jobs between two reads of the deadline in admission and placement."""
PLAN_S_PER_JOB = 6e-7
"""Time (s) per job of the problem that the stages before the plan leave for the per-job
closing work (the waiting jobs' reasons, the certificate, the plan's arrays; measured: about
0.3 us a job at 100,000 jobs on a 2-core machine)."""
PLAN_S_PER_ADMITTED = 3e-5
"""Time (s) per admitted job left for placing its extra tasks, settling it and writing its
configuration into the plan (measured at 100,000 jobs, about 12,000 admitted, 2-core machine:
16-33 us a job, the most for Lyra, whose extras go to loaned nodes first)."""
PLACE_S_PER_STEP = 7e-5
"""Time (s) per greedy step the greedy leaves for placing the task it adds (measured: 20-60 us
a step on 9,375 nodes, the most for Lyra)."""
WRITE_S_PER_ADMITTED = 1.5e-5
"""The part of `PLAN_S_PER_ADMITTED` that placing the extras leaves for writing the admitted
job's configuration into the plan (measured: 12 us a job)."""
MENU_S_PER_ADMITTED = 1.5e-5
"""Time (s) per admitted job for valuing its states, building the menu and the greedy's first
moves (measured: 6-8 us a job)."""
MENU_CELL_LIMIT = 30_000_000
"""Most (jobs x states x types) entries of a menu (about 240 MB of demands): beyond it every
job's worker counts are thinned geometrically (`elastic_speed.thinned`)."""


def timed() -> Callable[[], float]:
    """Seconds since the call."""
    started = time.perf_counter()
    return lambda: time.perf_counter() - started


def layout_of(problem: Problem) -> NodeLayout:
    """The cluster's nodes (one virtual node per type without nodes)."""
    return node_layout(problem.cluster)


def current_types(problem: Problem) -> IntArray:
    """(m,) type index of each job's current placement, -1 = not running."""
    return problem.history.current_type


def holdings(problem: Problem, i: int) -> tuple[tuple[int, int], ...]:
    """(node index, devices) job i holds now: the snapshot's per-node holdings, else its
    current devices spread evenly over its current nodes; () when not known."""
    if problem.elastic is not None and problem.elastic.held(i):
        return problem.elastic.held(i)
    hist = problem.history
    nodes = hist.current_nodes[i] if len(hist.current_nodes) > i else ()
    if not nodes or hist.current_devices.size <= i:
        return ()
    devices = int(hist.current_devices[i])
    share, extra = divmod(devices, len(nodes))
    return tuple((v, share + (1 if k < extra else 0)) for k, v in enumerate(nodes))


def admission_order(problem: Problem, running: BoolArray) -> IntArray:
    """Running jobs first, then by arrival time, then id."""
    jobs = problem.jobs
    if jobs.num_jobs == 0:
        return np.zeros(0, np.int64)
    ids = np.asarray(jobs.ids, dtype=str)
    return np.lexsort((ids, jobs.arrival_time_s, ~np.asarray(running, bool))).astype(np.int64)


def plan_reserve(num_jobs: int, admitted: int) -> float:
    """Time (s) to leave, after the menu is solved, for placing the admitted jobs' extra tasks
    and writing the certificate and the plan: `PLAN_S_PER_JOB` per job of the problem and
    `PLAN_S_PER_ADMITTED` per admitted job."""
    return PLAN_S_PER_JOB * num_jobs + PLAN_S_PER_ADMITTED * admitted


def admission_reserve(num_jobs: int, admitted: int) -> float:
    """Time (s) admission leaves when `admitted` jobs are in: `plan_reserve` and building and
    starting the menu (`MENU_S_PER_ADMITTED` per admitted job)."""
    return plan_reserve(num_jobs, admitted) + MENU_S_PER_ADMITTED * admitted


@dataclass(frozen=True)
class TaskRequest:
    """Tasks of one job on one accelerator type to place on nodes."""

    type_index: int
    tasks: int
    unit: int
    """Devices per task (all on one node)."""
    keep: tuple[tuple[int, int], ...] = ()
    """(node, devices) the job holds there now: used first (no migration)."""
    prefer: BoolArray | None = None
    """Nodes tried first (the other nodes of the type after); None = no preference."""
    near: tuple[int, ...] = ()
    """Nodes the job already uses: tried first within each preference group."""


def type_nodes(layout: NodeLayout) -> tuple[IntArray, ...]:
    """Per accelerator type, its node indices (ascending)."""
    types = int(layout.node_type.max()) + 1 if layout.node_type.size else 0
    order = np.argsort(layout.node_type, kind="stable")
    bounds = np.searchsorted(layout.node_type[order], np.arange(types + 1))
    return tuple(order[bounds[j]:bounds[j + 1]] for j in range(types))


def place_tasks(layout: NodeLayout, free: IntArray, request: TaskRequest,
                nodes_of_type: Sequence[IntArray] | None = None) -> Ledger:
    """Place up to `request.tasks` tasks, taking devices from `free` (nodes,): kept nodes
    first, then the preferred nodes of the type, the job's own nodes (`near`, and those just
    kept) before others, most free first (fewest servers), ties by node index. Returns (node,
    devices) pairs (fewer tasks when the nodes are too full). `nodes_of_type`: `type_nodes`
    of the layout, when at hand."""
    left, unit = request.tasks, request.unit
    placed: Ledger = []
    for node, held in request.keep:
        if left <= 0:
            break
        if layout.node_type[node] != request.type_index:
            continue
        take = min(held // unit, left, int(free[node]) // unit)
        if take > 0:
            free[node] -= take * unit
            placed.append((node, take * unit))
            left -= take
    if left <= 0:
        return placed
    j = request.type_index
    nodes = (nodes_of_type[j] if nodes_of_type is not None and j < len(nodes_of_type)
             else np.flatnonzero(layout.node_type == j))
    every = np.ones(nodes.size, dtype=bool)
    groups = [every] if request.prefer is None else [request.prefer[nodes],
                                                     ~request.prefer[nodes]]
    used = list(request.near) + [node for node, _ in placed]
    if used:  # the job's own nodes first within each group
        near = np.isin(nodes, used)
        groups = [part for group in groups for part in (group & near, group & ~near)]
    for group in groups:
        while left > 0:
            room = np.where(group, free[nodes] // unit, 0)
            k = int(np.argmax(room))
            if room[k] <= 0:
                break
            node = int(nodes[k])
            take = min(int(room[k]), left)
            free[node] -= take * unit
            placed.append((node, take * unit))
            left -= take
    return placed


def release(ledger: Ledger, free: IntArray) -> None:
    """Give back everything in `ledger`."""
    for node, devices in ledger:
        free[node] += devices
    ledger.clear()


def release_tasks(ledger: Ledger, free: IntArray, layout: NodeLayout, type_index: int,
                  devices: int, unit: int) -> None:
    """Give back `devices` of `type_index` (whole tasks of `unit`) from the end of `ledger`."""
    for pos in range(len(ledger) - 1, -1, -1):
        if devices <= 0:
            break
        node, held = ledger[pos]
        if layout.node_type[node] != type_index:
            continue
        give = min(devices, held - held % unit)
        free[node] += give
        ledger[pos] = (node, held - give)
        devices -= give


def placed_count(ledger: Ledger, layout: NodeLayout, type_index: int) -> int:
    """Devices of `type_index` in `ledger`."""
    return sum(d for v, d in ledger if layout.node_type[v] == type_index)


def base_demand(options: TypeOptions, n: int) -> IntArray:
    """(n,) devices of every type the base state holds."""
    out = np.zeros(n, np.int64)
    out[options.type_index] += int(options.devices[0])
    if options.parameter_server_type >= 0:
        out[options.parameter_server_type] += int(options.parameter_server_devices[0])
    return out


@dataclass(frozen=True)
class Placement:
    """The nodes and what to keep or prefer when placing tasks."""

    layout: NodeLayout
    free: IntArray
    """(nodes,) free devices; updated as tasks are placed."""
    keep: Callable[[int], tuple[tuple[int, int], ...]]
    """Job -> (node, devices) it holds now on nodes still available."""
    prefer_base: BoolArray | None = None
    prefer_extra: BoolArray | None = None

    @cached_property
    def type_nodes(self) -> tuple[IntArray, ...]:
        """Per accelerator type, its node indices (`type_nodes`)."""
        return type_nodes(self.layout)


def place_base(placement: Placement, i: int, o: TypeOptions, state: int = 0) -> Ledger | None:
    """Place the tasks of a state (default the base: parameter servers, then workers); None
    (nothing taken) when they do not all fit."""
    ledger: Ledger = []
    layout, free = placement.layout, placement.free
    keep = placement.keep(i)
    if o.parameter_server_type >= 0 and o.parameter_servers[state] > 0:
        p = int(o.parameter_servers[state])
        per = int(o.parameter_server_devices[state]) // p
        ledger += place_tasks(layout, free, TaskRequest(o.parameter_server_type, p, per, keep),
                              placement.type_nodes)
        if placed_count(ledger, layout, o.parameter_server_type) < p * per:
            release(ledger, free)
            return None
    want = int(o.workers[state])
    got = place_tasks(layout, free, TaskRequest(o.type_index, want, o.unit, keep,
                                                placement.prefer_base), placement.type_nodes)
    ledger += got
    if sum(d for _, d in got) < want * o.unit:
        release(ledger, free)
        return None
    return ledger


@dataclass(frozen=True)
class Admission:
    """Phase 1: the admitted jobs (in order), the type options they hold and their base
    placement."""

    order: IntArray
    """Admitted job indices, in admission order."""
    options: tuple[TypeOptions, ...]
    ledgers: tuple[Ledger, ...]
    """Per admitted job, where its base tasks were placed (extended by `place_extras`)."""
    status: tuple[JobStatus, ...]
    """Per job of the problem."""
    reason: tuple[str, ...]


def admit(
    problem: Problem,
    options_of: Callable[[int], Sequence[TypeOptions]],
    order: IntArray,
    current_type: IntArray,
    placement: Placement,
    skip: Callable[[int], str] | None = None,
    deadline: Deadline | None = None,
    reserve: Callable[[int], float] | None = None,
) -> Admission:
    """Phase 1 (module docstring): `options_of(i)` job i's states on every type it can use,
    asked when its turn comes. `skip(i)` returns a reason to leave a job out as FINISHED
    (e.g. no remaining work), "" to consider it. Past the deadline, or once no more than
    `reserve(admitted)` seconds are left before it (the later stages' time for that many
    admitted jobs), the remaining jobs wait (their states are never worked out)."""
    m = problem.jobs.num_jobs
    status = [JobStatus.DEFERRED] * m
    reason = [""] * m
    admitted: list[int] = []
    chosen: list[TypeOptions] = []
    ledgers: list[Ledger] = []
    for position, i in enumerate(order.tolist()):
        if (deadline is not None and position % DEADLINE_CHECK_EVERY == 0 and position
                and _out_of_time(deadline, reserve(len(admitted)) if reserve else 0.0)):
            for j in order[position:].tolist():
                reason[j] = "waiting: the time limit was reached before its turn"
            break
        why = skip(i) if skip is not None else ""
        if why:
            status[i], reason[i] = JobStatus.FINISHED, why
            continue
        candidates = options_of(i)
        if not candidates:
            status[i] = JobStatus.UNSERVABLE
            reason[i] = ("no accelerator type offers it an allocation (no speed model, "
                         "configuration or usable throughput within its elasticity range)")
            continue
        ranked = sorted(candidates, key=lambda o: (o.type_index != int(current_type[i]),
                                                      -o.speed[0], o.type_index))
        for o in ranked:
            ledger = place_base(placement, i, o)
            if ledger is not None:
                admitted.append(i)
                chosen.append(o)
                ledgers.append(ledger)
                status[i] = JobStatus.ALLOCATED
                break
        else:
            reason[i] = "waiting: its smallest allocation does not fit the free devices"
    return Admission(np.asarray(admitted, np.int64), tuple(chosen), tuple(ledgers),
                     tuple(status), tuple(reason))


def _out_of_time(deadline: Deadline, reserve_s: float) -> bool:
    """The deadline has passed, or no more than `reserve_s` seconds are left before it."""
    return deadline.expired() or (reserve_s > 0 and deadline.remaining() <= reserve_s)


def _within_cell_limit(admission: Admission, n: int) -> Admission:
    """The admission with its jobs' worker counts thinned so that the menu holds at most
    `MENU_CELL_LIMIT` entries (unchanged when it already does)."""
    options = admission.options
    rows = max((o.num_states // o.worker_axis for o in options), default=1)
    cells = len(options) * rows * worker_axis(options) * n
    if cells <= MENU_CELL_LIMIT:
        return admission
    most = max(2, MENU_CELL_LIMIT // max(len(options) * rows * n, 1))
    return replace(admission, options=tuple(thinned(o, most) for o in options))


def build_menu(options: Sequence[TypeOptions], values: Sequence[FloatArray], n: int) -> Menu:
    """The admitted jobs' menus on a common (parameter servers x workers) grid; `values[k]`
    (S_k,) is the worth of each of job k's own states."""
    rows = max((o.num_states // o.worker_axis for o in options), default=1)
    axis = worker_axis(options)
    size = rows * axis
    m = len(options)
    value = np.full((m, size), -np.inf)
    demand = np.zeros((m, size, n), np.int64)
    for k, (o, v) in enumerate(zip(options, values, strict=True)):
        own = np.arange(o.num_states)
        grid = (own // o.worker_axis) * axis + own % o.worker_axis
        value[k, grid] = v
        demand[k, grid, o.type_index] += o.devices
        if o.parameter_server_type >= 0:
            demand[k, grid, o.parameter_server_type] += o.parameter_server_devices
    moves: list[tuple[int, int]] = []
    for p in range(rows):
        for w in range(axis):
            s = p * axis + w
            if w + 1 < axis:
                moves.append((s, s + 1))
            if p + 1 < rows:
                moves.append((s, s + axis))
    return Menu(value, demand, np.asarray(moves, np.int64).reshape(-1, 2))


def worker_axis(options: Sequence[TypeOptions]) -> int:
    """Worker counts per parameter-server count on the common grid."""
    return max((o.worker_axis for o in options), default=1)


def own_state(option: TypeOptions, grid_state: int, axis: int) -> int:
    """The job's own state index of a common-grid state."""
    return (grid_state // axis) * option.worker_axis + grid_state % axis


@dataclass(frozen=True)
class MenuSolve:
    """Phase 2 with its proof: the allocation returned and the exact solve."""

    allocation: MenuAllocation
    exact: ExactResult | None
    """The exact solve (None when none ran)."""
    returned_exact: bool
    """The allocation is the exact one."""


def solve_menu(
    menu: Menu,
    capacity: IntArray,
    method: ElasticMethod,
    deadline: Deadline,
    tolerance: float,
    threads: int = 0,
    with_exact: bool = True,
) -> MenuSolve:
    """The greedy (and the exact solve for its gap when `with_exact`), or the exact allocation
    (the greedy's when the exact solve finds nothing in time). Under a deadline, the exact
    solve that certifies the greedy leaves `PLACE_S_PER_STEP` per job the greedy moved (for
    placing their tasks) and takes `EXACT_SHARE` of the rest; the exact solve of method
    `exact` takes `EXACT_SHARE` of the time, leaving the rest to the greedy should it find
    nothing."""
    if method is ElasticMethod.EXACT:
        result = exact(menu, capacity, deadline.child(EXACT_SHARE), tolerance, threads)
        if result.allocation is not None:
            return MenuSolve(result.allocation, result, True)
        return MenuSolve(greedy(menu, capacity, deadline, PLACE_S_PER_STEP), result, False)
    allocation = greedy(menu, capacity, deadline, PLACE_S_PER_STEP)
    if not with_exact:
        return MenuSolve(allocation, None, False)
    moved = int(np.count_nonzero(allocation.state))
    budget = deadline.leaving(PLACE_S_PER_STEP * moved).child(EXACT_SHARE).within(
        CERTIFY_LIMIT_S)
    result = exact(menu, capacity, budget, tolerance, threads)
    return MenuSolve(allocation, result, False)


@dataclass(frozen=True)
class Phases:
    """Phases 1 and 2: the admitted jobs, their values, the menu and its solve."""

    admission: Admission
    values: tuple[FloatArray, ...]
    """Per admitted job, the worth of each of its own states (policy units)."""
    menu: Menu
    solve: MenuSolve

    def chosen(self) -> list[int]:
        """Per admitted job, its own state index in the allocation returned."""
        axis = worker_axis(self.admission.options)
        return [own_state(o, int(s), axis)
                for o, s in zip(self.admission.options, self.solve.allocation.state, strict=True)]


def run_phases(
    problem: Problem,
    default_max: int,
    capacity: IntArray,
    placement: Placement,
    value_of: Callable[[int, TypeOptions], FloatArray],
    method: ElasticMethod,
    deadline: Deadline,
    tolerance: float,
    threads: int = 0,
    skip: Callable[[int], str] | None = None,
    with_exact: bool = True,
    current: IntArray | None = None,
) -> Phases:
    """Phases 1 and 2 within `capacity` (n,) devices per type: admit and place the bases,
    value each admitted job's states (`value_of(i, options)`), solve by `method`. `current`
    (m,) current type per job (-1 = pending; default the history's)."""
    current = current_types(problem) if current is None else current
    m = problem.jobs.num_jobs
    admission = admit(problem, lambda i: job_options(problem, i, default_max),
                      admission_order(problem, current >= 0), current, placement, skip, deadline,
                      lambda admitted: admission_reserve(m, admitted))
    admission = _within_cell_limit(admission, problem.cluster.num_types)
    values = tuple(np.asarray(value_of(int(i), o), np.float64)
                   for i, o in zip(admission.order.tolist(), admission.options, strict=True))
    menu = build_menu(admission.options, values, problem.cluster.num_types)
    menu_deadline = deadline.leaving(plan_reserve(m, len(admission.options)))
    solved = solve_menu(menu, capacity, method, menu_deadline, tolerance, threads, with_exact)
    return Phases(admission, values, menu, solved)


def place_extras(phases: Phases, placement: Placement, deadline: Deadline | None = None
                 ) -> tuple[IntArray, int]:
    """Place every admitted job's tasks beyond its base (parameter servers on their type,
    workers on `prefer_extra` nodes first), in admission order. Returns the own state each job
    ends with (`Phases.chosen`, or the most valuable state within what was placed) and how
    many jobs were lowered. Past the deadline the remaining jobs keep their base."""
    adm = phases.admission
    layout, free = placement.layout, placement.free
    states = np.zeros(len(adm.order), np.int64)
    lowered = 0
    late = False
    for k, (i, o, s) in enumerate(zip(adm.order.tolist(), adm.options, phases.chosen(),
                                      strict=True)):
        ledger = adm.ledgers[k]
        if deadline is not None and k % DEADLINE_CHECK_EVERY == 0 and k and not late:
            late = deadline.expired()
        if late and s != 0:
            lowered += 1
            continue  # states[k] stays 0: the base, already placed
        if not placement.keep(i) and placement.prefer_base is None and s != 0:
            # a new job moves freely: all of its state at once, on the fewest servers (its
            # base again if that does not fit)
            release(ledger, free)
            ledger += place_base(placement, i, o, s) or place_base(placement, i, o) or []
        kept = {node: d for node, d in placement.keep(i)}
        for node, d in ledger:
            kept[node] = kept.get(node, 0) - d
        keep = tuple((node, d) for node, d in kept.items() if d > 0)
        servers = 0
        if o.parameter_server_type >= 0 and o.parameter_servers[s] > 0:
            per = int(o.parameter_server_devices[s]) // int(o.parameter_servers[s])
            servers = placed_count(ledger, layout, o.parameter_server_type) // per
            if o.parameter_servers[s] > servers:
                ledger += place_tasks(layout, free, TaskRequest(
                    o.parameter_server_type, int(o.parameter_servers[s]) - servers, per, keep),
                    placement.type_nodes)
                servers = placed_count(ledger, layout, o.parameter_server_type) // per
        workers = placed_count(ledger, layout, o.type_index) // o.unit
        if o.workers[s] > workers:
            ledger += place_tasks(layout, free, TaskRequest(
                o.type_index, int(o.workers[s]) - workers, o.unit, keep, placement.prefer_extra,
                near=tuple(node for node, _ in ledger)), placement.type_nodes)
            workers = placed_count(ledger, layout, o.type_index) // o.unit
        if workers < o.workers[s] or servers < o.parameter_servers[s]:
            fits = (o.workers <= workers) & (o.parameter_servers <= servers)
            s = int(np.argmax(np.where(fits, phases.values[k], -np.inf)))
            lowered += 1
            release_tasks(ledger, free, layout, o.type_index,
                          (workers - int(o.workers[s])) * o.unit, o.unit)
            if o.parameter_server_type >= 0 and servers > o.parameter_servers[s]:
                per = int(o.parameter_server_devices[s]) // max(int(o.parameter_servers[s]), 1)
                release_tasks(ledger, free, layout, o.parameter_server_type,
                              (servers - int(o.parameter_servers[s])) * per, per)
        states[k] = s
    return states, lowered


@dataclass(frozen=True)
class Settled:
    """Per job of the problem, what it holds after placement."""

    status: tuple[JobStatus, ...]
    reason: tuple[str, ...]
    options: tuple[TypeOptions | None, ...]
    """The admitted job's options (None = not admitted)."""
    state: IntArray
    """(m,) own state index, -1 = none."""
    node_devices: tuple[tuple[tuple[int, int], ...], ...]
    """Per job, (node index, devices) of all its tasks."""
    lowered: int
    """Jobs that got a smaller state than phase 2 chose (fragmented nodes)."""
    admitted: IntArray
    """The admitted jobs' indices (in admission order): the jobs with options."""

    def held(self, i: int) -> tuple[TypeOptions, int] | None:
        o = self.options[i]
        return None if o is None else (o, int(self.state[i]))

    def with_reasons(self, reason: Sequence[str]) -> Settled:
        return replace(self, reason=tuple(reason))

    def speeds(self) -> tuple[FloatArray, FloatArray]:
        """(m,) training speed (steps/s) of each job's state and of its base (0 = not
        admitted)."""
        m = len(self.options)
        speed, base = np.zeros(m), np.zeros(m)
        admitted = self.admitted.tolist()
        speed[admitted] = [self.options[i].speed[s]  # type: ignore[union-attr]
                           for i, s in zip(admitted, self.state[admitted].tolist(), strict=True)]
        base[admitted] = [self.options[i].speed[0]  # type: ignore[union-attr]
                          for i in admitted]
        return speed, base


def settle(problem: Problem, phases: Phases, placement: Placement,
           deadline: Deadline | None = None) -> Settled:
    """Place the extras and give the per-job view of the allocation. The extras are placed
    until `WRITE_S_PER_ADMITTED` per admitted job and `PLAN_S_PER_JOB` per job are left
    before the deadline (the later jobs keep their base)."""
    m = problem.jobs.num_jobs
    if deadline is not None:
        deadline = deadline.leaving(PLAN_S_PER_JOB * m
                                    + WRITE_S_PER_ADMITTED * len(phases.admission.options))
    states, lowered = place_extras(phases, placement, deadline)
    options: list[TypeOptions | None] = [None] * m
    state = np.full(m, -1, np.int64)
    nodes: list[tuple[tuple[int, int], ...]] = [()] * m
    for k, i in enumerate(phases.admission.order.tolist()):
        options[i] = phases.admission.options[k]
        state[i] = states[k]
        total: dict[int, int] = {}
        for node, devices in phases.admission.ledgers[k]:
            total[node] = total.get(node, 0) + devices
        nodes[i] = tuple(sorted((v, d) for v, d in total.items() if d > 0))
    return Settled(phases.admission.status, phases.admission.reason, tuple(options), state,
                   tuple(nodes), lowered, phases.admission.order)


def certify(
    maximize: bool,
    objective: float,
    offset: float,
    solve: MenuSolve,
    tolerance: float,
    formulation: str,
    build_time_s: float,
    notes: Sequence[str] = (),
) -> Certificate:
    """The plan's certificate. The policy's objective is offset + v (maximize) or offset - v
    (minimize) for menu value v, so the exact solve's bound on the menu optimum bounds it.
    The greedy plan is `heuristic` with that bound; the exact plan is `optimal` when the bound
    proves it (a placement loss shows as a gap)."""
    sign = 1.0 if maximize else -1.0
    ex = solve.exact
    bound = float(offset + sign * ex.bound) if ex is not None and ex.bound is not None else None
    gap = relative_gap(objective, bound)
    if solve.returned_exact and ex is not None:
        ended = termination(ex.status, True, gap, tolerance)
    else:
        ended = Termination.HEURISTIC
    detail = [note for note in notes if note]
    if ex is not None and ex.allocation is not None and not solve.returned_exact:
        value = offset + sign * ex.allocation.objective
        detail.append(f"exact allocation ({ex.allocation.method}): {value:.9g}")
    elif ex is not None and ex.allocation is None:
        detail.append(f"exact solve found no allocation: {ex.detail or ex.status}")
    if not solve.allocation.complete:
        detail.append(f"{solve.allocation.method} cut short by the deadline")
    return Certificate(
        termination=ended,
        maximize=maximize,
        objective=objective,
        bound=bound,
        solver=ex.solver if ex is not None else "greedy",
        solver_version=ex.solver_version if ex is not None else "",
        formulation=formulation,
        build_time_s=build_time_s,
        solve_time_s=ex.solve_time_s if ex is not None else 0.0,
        model_size=ex.size if ex is not None else ModelSize(),
        detail="; ".join(detail),
    )


def exact_objective(maximize: bool, offset: float, solve: MenuSolve) -> float | None:
    """The policy objective of the exact allocation (None when none was found)."""
    ex = solve.exact
    if ex is None or ex.allocation is None:
        return None
    return offset + (1.0 if maximize else -1.0) * ex.allocation.objective


def remaining_time_certificate(
    problem: Problem,
    phases: Phases,
    settled: Settled,
    remaining: FloatArray,
    tolerance: float,
    formulation: str,
    build_time_s: float,
) -> tuple[FloatArray, Certificate, float | None]:
    """Per-job predicted remaining time Q_i/f_i (s; inf = not allocated or Q unknown), the
    certificate of their sum over the admitted jobs (minimized) and the exact allocation's
    sum. Shared by Optimus and Lyra."""
    m = problem.jobs.num_jobs
    job_time = np.full(m, np.inf)
    speed, base = settled.speeds()
    counted = np.zeros(m, dtype=bool)
    counted[settled.admitted] = True
    counted &= np.isfinite(remaining)
    job_time[counted] = remaining[counted] / speed[counted]
    offset = float(np.sum(remaining[counted] / base[counted]))
    objective = float(job_time[np.isfinite(job_time)].sum())
    notes = [f"{settled.lowered} job(s) lowered by placement"] if settled.lowered else []
    cert = certify(False, objective, offset, phases.solve, tolerance, formulation,
                   build_time_s, notes)
    return job_time, cert, exact_objective(False, offset, phases.solve)


@dataclass(frozen=True)
class ElasticOutcome:
    """What an elastic policy decided (pure data; `to_plan` makes the solver's plan)."""

    settled: Settled
    job_objective: FloatArray
    """(m,) the job's term of the objective (policy units)."""
    certificate: Certificate
    exact_objective: float | None = None
    """The policy objective of the exact allocation, when one was computed."""
    remaining_steps: FloatArray | None = None
    """(m,) predicted remaining steps (Optimus, Lyra); None = n/a."""
    remaining_time_s: FloatArray | None = None
    """(m,) predicted remaining time at the allocated speed (s); None = n/a."""
    loss_reduction: FloatArray | None = None
    """(m,) predicted normalized loss reduction over the horizon (SLAQ); None = n/a."""
    reclaimed_nodes: tuple[int, ...] = ()
    """Lyra: node indices given back to the inference cluster."""
    preempted: BoolArray | None = None
    """(m,) Lyra: running jobs preempted by reclaiming."""
    reclaim_certificate: Certificate | None = None
    """Lyra: preemption cost of the reclaimed nodes, with its bound."""


def to_plan(problem: Problem, outcome: ElasticOutcome) -> Plan:
    """The solver's plan: one configuration per allocated job (its workers' type, devices and
    nodes), time share 1 on that type, and the elastic section."""
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    settled = outcome.settled
    layout = layout_of(problem)
    share = np.zeros((m, n))
    speed, base_speed = settled.speeds()
    workers = np.zeros(m, np.int64)
    servers = np.zeros(m, np.int64)
    base_devices = np.zeros(m, np.int64)
    hist = problem.history
    configurations: list[ConfigurationChoice | None] = [None] * m
    ps_nodes: list[tuple[tuple[str, int], ...]] = [()] * m
    node_type = layout.node_type.tolist()
    current_type, current_devices = hist.current_type.tolist(), hist.current_devices.tolist()
    for i in settled.admitted.tolist():
        o = settled.options[i]
        assert o is not None
        s = int(settled.state[i])
        j = o.type_index
        share[i, j] = 1.0
        workers[i], servers[i] = o.workers[s], o.parameter_servers[s]
        base_devices[i] = o.devices[0]
        mine = [(v, d) for v, d in settled.node_devices[i] if node_type[v] == j]
        ps_nodes[i] = tuple((layout.names[v], d) for v, d in settled.node_devices[i]
                            if node_type[v] != j and layout.names[v])
        current = current_type[i] == j and current_devices[i] == int(o.devices[s])
        configurations[i] = ConfigurationChoice(
            type_index=j,
            nodes=max(len(mine), 1),
            devices=int(o.devices[s]),
            goodput=float(o.speed[s]),
            normalized_goodput=float(o.speed[s] / o.speed[0]) if o.speed[0] > 0 else 0.0,
            restart_factor=1.0,
            unchanged=bool(current),
            node_devices=tuple((layout.names[v], d) for v, d in mine if layout.names[v]),
        )
    section = ElasticSection(
        workers=workers,
        parameter_servers=servers,
        base_devices=base_devices,
        parameter_server_nodes=tuple(ps_nodes),
        remaining_steps=outcome.remaining_steps,
        remaining_time_s=outcome.remaining_time_s,
        loss_reduction=outcome.loss_reduction,
        exact_objective=outcome.exact_objective,
        reclaimed_nodes=tuple(problem.cluster.node_names[v] for v in outcome.reclaimed_nodes),
        preempted=outcome.preempted,
        reclaim=outcome.reclaim_certificate,
    )
    return Plan(
        time_share=share,
        effective_throughput=speed,
        normalized_throughput=np.divide(speed, base_speed, out=np.zeros(m),
                                        where=base_speed > 0),
        objective_value=np.asarray(outcome.job_objective, np.float64),
        job_dual=np.zeros(m),
        accelerator_prices=np.zeros(n),
        certificate=outcome.certificate,
        job_status=settled.status,
        job_reason=settled.reason,
        configurations=ConfigurationSection(tuple(configurations), elastic=section),
    )
