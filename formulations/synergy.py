"""Synergy (B5): CPU cores and host memory per job, beyond its GPUs.

Each job has a throughput grid over (CPU cores per GPU, GiB per GPU), normalized so that 1 is
its throughput at the GPU-proportional share (cluster CPUs / GPUs, memory / GPUs). Jobs get
GPUs in the base order (every job that still fits): each on one accelerator type, the usable
one (throughput > 0, enough devices) where it is fastest among those with its GPUs still free,
and all its GPUs on nodes of that type; then:

* OPT (exact): one grid point per job maximizing sum_i w_i tput_i, with total CPUs and memory
  within the cluster's and no job below its fair-share point (the largest grid point within
  the GPU-proportional share in both axes) (B5, LP1, an ILP solved by HiGHS). Points dominated
  by a cheaper point with at least the same throughput are dropped first (never needed).
  Then the shapes are placed on the nodes (LP2): consolidated, larger jobs first; a job that
  does not fit is retried at its fair-share shape, then by shrinking placed jobs back to
  theirs. LP1 ignores where resources sit, so its optimum bounds every placement from above:
  the plan's objective is that of the placed shapes and its bound LP1's, hence its gap.
* TUNE (compat synergy): each job in base order asks for its best point (the cheapest
  reaching its peak throughput), placed consolidated on the nodes with the fewest free GPUs;
  failing that at its fair share; failing that after shrinking placed jobs that hold more
  than their fair share on the emptiest nodes; otherwise it waits. Invariant: every placed
  job has at least its fair-share CPUs and memory, so at least its fair-share throughput.

Under a deadline every stage stops where it is and keeps what it has: jobs not looked at by
the base order get no GPUs, TUNE places the jobs it reached (the others wait), and OPT's two
programs are not started when HiGHS could not reach its first look at the time limit in the
time left (TUNE's plan is then kept, with the bound of every job at its best point); the
plan says what was cut and is optimal only when its bound proves it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from apportion.formulations.group_plans import NO_USABLE_TYPE, ExactRun, compared_plan
from apportion.solver.backends.highs import INFINITY, HighsSettings, LinearModel, solve_highs
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.groups import ColocationGroup, GroupSection
from apportion.solver.model import Compat, FloatArray, IntArray, Problem, SolveOptions
from apportion.solver.parameters import BaseOrder, SynergyParameters
from apportion.solver.result import (
    JobStatus,
    ModelSize,
    Plan,
)
from apportion.solver.sharing import ResourceGrid, SharingInputs

_EPS = 1e-9

DEADLINE_CHECK_EVERY = 1024
"""Jobs looked at (base order, TUNE's placement, OPT's server assignment) between two looks at
the deadline."""
LP1_SETUP_S_PER_NONZERO = 2e-5
"""Time HiGHS may spend on LP1 before it first reads its time limit, per nonzero (measured on a
loaded 2-core machine with a 0.5 s limit: 4.2 s for 244,000 nonzeros, 0.6 s for 58,000). With
less time left LP1 is not started."""
RESHAPE_SETUP_S_PER_NONZERO = 1e-4
"""The same for the reshaping MIP, whose presolve reads no limit for longer (2.6-10.5 s for
58,000 nonzeros with a 0.5 s limit, 27 s for 244,000)."""
PLAN_S_PER_JOB = 3e-6
"""Time (s) the stages before the plan leave, per job, for building it (measured: 0.1-0.2 s
for the 39,503 groups of 100,000 jobs on a loaded 2-core machine)."""


@dataclass(frozen=True)
class Shapes:
    """Candidate points of the chosen jobs, flattened: point k belongs to job `job[k]`."""

    job: IntArray
    cpus: FloatArray
    """(K,) cores per GPU."""
    memory: FloatArray
    """(K,) GiB per GPU."""
    tput: FloatArray
    """(K,) normalized throughput."""
    fair: IntArray
    """(m_chosen,) index into the points of each job's fair-share point."""
    best: IntArray
    """(m_chosen,) each job's best point (the cheapest reaching its peak)."""


@dataclass(frozen=True)
class SynergyInstance:
    """Chosen jobs and servers on arrays."""

    jobs: IntArray
    """(c,) snapshot indices of the jobs that got GPUs."""
    job_type: IntArray
    """(c,) the accelerator type each of them runs on (its GPUs are all on nodes of it)."""
    gpus: IntArray
    """(c,) their GPU counts."""
    weight: FloatArray
    """(c,) objective weights."""
    shapes: Shapes
    server_gpus: IntArray
    server_type: IntArray
    """(servers,) accelerator type of each server's GPUs."""
    server_cpus: FloatArray
    server_memory: FloatArray
    fair_cpus: float
    """Cores per GPU of the GPU-proportional share."""
    fair_memory: float
    """GiB per GPU of the GPU-proportional share."""
    unreached: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Snapshot indices of the jobs the base order had not looked at when the deadline passed
    (they get no GPUs: no bound over the chosen jobs then bounds the snapshot's optimum)."""

    @property
    def complete(self) -> bool:
        return self.unreached.size == 0


def fair_share(gpus: IntArray, cpus: FloatArray, memory: FloatArray) -> tuple[float, float]:
    """Cores and GiB per GPU of the GPU-proportional share over servers with GPUs."""
    total = float(gpus.sum())
    if total <= 0:
        return 0.0, 0.0
    return float(cpus[gpus > 0].sum()) / total, float(memory[gpus > 0].sum()) / total


def fair_point(grid: ResourceGrid, fair_cpus: float, fair_memory: float) -> tuple[int, int]:
    """(a, b): the largest grid point within the fair share in both axes (-1 = none)."""
    a = int(np.searchsorted(grid.cpus_per_gpu, fair_cpus * (1 + _EPS), side="right")) - 1
    b = int(np.searchsorted(grid.memory_gib_per_gpu, fair_memory * (1 + _EPS), side="right")) - 1
    return a, b


def _points(grid: ResourceGrid, fair: tuple[int, int]) -> tuple[FloatArray, FloatArray,
                                                                  FloatArray, int, int]:
    """The undominated points at or above the fair-share throughput (cpus, memory, tput), the
    index of the fair point and of the best point among them."""
    cpu_grid, mem_grid = np.meshgrid(grid.cpus_per_gpu, grid.memory_gib_per_gpu, indexing="ij")
    cpu, mem = cpu_grid.reshape(-1), mem_grid.reshape(-1)
    tput = grid.throughput.reshape(-1)
    fair_flat = fair[0] * grid.memory_gib_per_gpu.size + fair[1]
    floor = tput[fair_flat]
    keep = tput >= floor - _EPS
    # q dominates p: no more of either resource, at least the throughput, better somewhere
    le = (cpu[:, None] <= cpu[None, :]) & (mem[:, None] <= mem[None, :])
    ge = tput[:, None] >= tput[None, :]
    strict = (cpu[:, None] < cpu[None, :]) | (mem[:, None] < mem[None, :]) | (
        tput[:, None] > tput[None, :]
    )
    dominated = (le & ge & strict & keep[:, None]).any(axis=0)
    keep &= ~dominated | (np.arange(tput.size) == fair_flat)
    index = np.nonzero(keep)[0]
    peak = tput[index].max()
    at_peak = index[tput[index] >= peak - _EPS]
    best = at_peak[np.lexsort((mem[at_peak], cpu[at_peak]))[0]]
    return (cpu[index], mem[index], tput[index], int(np.nonzero(index == fair_flat)[0][0]),
            int(np.nonzero(index == best)[0][0]))


def choose_jobs(problem: Problem, order: BaseOrder, server_gpus: IntArray,
                server_type: IntArray) -> tuple[IntArray, IntArray]:
    """Jobs with a grid that get GPUs in the base order, and the type of each: every job that
    still fits on a type it can use (throughput > 0, enough devices), on the fastest such type
    with its GPUs free (ties: cluster order)."""
    chosen, types, _ = choose_jobs_until(problem, order, server_gpus, server_type)
    return chosen, types


def choose_jobs_until(problem: Problem, order: BaseOrder, server_gpus: IntArray,
                      server_type: IntArray, deadline: Deadline = NO_DEADLINE
                      ) -> tuple[IntArray, IntArray, IntArray]:
    """`choose_jobs` until the deadline, and the jobs it had not looked at then."""
    jobs = problem.jobs
    grids = (problem.sharing or SharingInputs()).resource_grid
    if order is BaseOrder.REMAINING_SERVICE:
        best = jobs.throughput.max(axis=1) if jobs.throughput.size else np.zeros(jobs.num_jobs)
        with np.errstate(divide="ignore", invalid="ignore"):
            key = np.where((jobs.total_steps > 0) & (best > 0),
                           jobs.remaining_steps / best * jobs.scale_factor, np.inf)
    elif order is BaseOrder.ATTAINED_SERVICE:
        key = problem.history.received_time_s.sum(axis=1) * jobs.scale_factor
    else:
        key = jobs.arrival_time_s
    order_ = np.argsort(key, kind="stable")
    if order_.size and deadline.expired():
        return np.zeros(0, np.int64), np.zeros(0, np.int64), order_.astype(np.int64)
    n = problem.cluster.num_types
    free = np.bincount(server_type, weights=server_gpus, minlength=n).astype(np.int64)[:n]
    left = free.tolist()
    usable = problem.usable.tolist()
    throughput = jobs.throughput.tolist()
    gpus = jobs.scale_factor.tolist()
    chosen: list[int] = []
    types: list[int] = []
    for k, i in enumerate(order_.tolist()):
        if k and k % DEADLINE_CHECK_EVERY == 0 and deadline.expired():
            return (np.array(chosen, np.int64), np.array(types, np.int64),
                    order_[k:].astype(np.int64))
        if not grids or grids[i] is None:
            continue
        g = gpus[i]
        fastest = -1
        for j in range(n):  # the fastest type with room (ties: the first)
            if usable[i][j] and left[j] >= g and (
                    fastest < 0 or throughput[i][j] > throughput[i][fastest]):
                fastest = j
        if fastest >= 0:
            chosen.append(i)
            types.append(fastest)
            left[fastest] -= g
    return np.array(chosen, np.int64), np.array(types, np.int64), np.zeros(0, np.int64)


def synergy_instance(problem: Problem, params: SynergyParameters,
                     deadline: Deadline = NO_DEADLINE) -> SynergyInstance:
    sharing = problem.sharing or SharingInputs()
    server_gpus = problem.cluster.node_devices.astype(np.int64)
    server_type = problem.cluster.node_type.astype(np.int64)
    cpus, memory = sharing.node_cpus, sharing.node_memory_gib
    fair_cpus, fair_memory = fair_share(server_gpus, cpus, memory)
    chosen, job_type, unreached = choose_jobs_until(problem, params.order, server_gpus,
                                                    server_type, deadline)
    # the points of each distinct grid once, then every chosen job's copy of its grid's
    unique: dict[int, int] = {}
    points: list[tuple[FloatArray, FloatArray, FloatArray, int, int]] = []
    which = np.zeros(chosen.size, np.int64)
    for c, i in enumerate(chosen.tolist()):
        grid = sharing.resource_grid[i]
        assert grid is not None
        u = unique.setdefault(id(grid), len(unique))
        if u == len(points):
            points.append(_points(grid, fair_point(grid, fair_cpus, fair_memory)))
        which[c] = u
    size = np.array([p[0].size for p in points], np.int64)
    start = np.cumsum(size) - size
    count = size[which]
    first = np.cumsum(count) - count
    flat = np.repeat(start[which] - first, count) + np.arange(int(count.sum()))
    fair_at = np.array([p[3] for p in points], np.int64)
    best_at = np.array([p[4] for p in points], np.int64)
    return SynergyInstance(
        jobs=chosen,
        job_type=job_type,
        gpus=problem.jobs.scale_factor[chosen],
        weight=problem.jobs.priority_weight[chosen],
        shapes=Shapes(
            np.repeat(np.arange(chosen.size), count).astype(np.int64),
            np.concatenate([np.zeros(0), *(p[0] for p in points)])[flat],
            np.concatenate([np.zeros(0), *(p[1] for p in points)])[flat],
            np.concatenate([np.zeros(0), *(p[2] for p in points)])[flat],
            (first + fair_at[which]).astype(np.int64),
            (first + best_at[which]).astype(np.int64),
        ),
        server_gpus=server_gpus,
        server_type=server_type,
        server_cpus=np.asarray(cpus, np.float64),
        server_memory=np.asarray(memory, np.float64),
        fair_cpus=fair_cpus,
        fair_memory=fair_memory,
        unreached=unreached,
    )


@dataclass(frozen=True)
class ShapeChoice:
    """LP1's answer: one point per chosen job."""

    point: IntArray
    """(c,) index into the instance's points, -1 = none."""
    objective: float | None
    bound: float | None
    status: SolverStatus
    solve_time_s: float
    size: tuple[int, int]
    not_started: bool = False
    """The deadline left HiGHS too little time to read its limit: no program was run (the
    bound is `peak_value`)."""


def peak_value(inst: SynergyInstance) -> float:
    """sum_i w_i tput_i at each job's best point: a bound on LP1 (no capacity) and so on
    every placement of these jobs."""
    return float((inst.weight * inst.shapes.tput[inst.shapes.best]).sum())


def solve_shapes(inst: SynergyInstance, deadline: Deadline, gap: float, threads: int = 0,
                 relax: bool = False) -> ShapeChoice:
    """LP1 (B5): max sum w tput y, one point per job, total CPUs and memory within the
    cluster's (the floor is in the points). `relax`: the LP relaxation."""
    s = inst.shapes
    c, k = inst.jobs.size, s.job.size
    if c == 0:
        return ShapeChoice(np.zeros(0, np.int64), 0.0, 0.0, SolverStatus.OPTIMAL, 0.0, (0, 0))
    if deadline.remaining() < LP1_SETUP_S_PER_NONZERO * 3 * k:
        return ShapeChoice(np.full(c, -1, np.int64), None, peak_value(inst),
                           SolverStatus.TIME_LIMIT, 0.0, (k, c + 2), not_started=True)
    g = inst.gpus[s.job].astype(np.float64)
    rows = np.concatenate([s.job, np.full(k, c), np.full(k, c + 1)])
    cols = np.concatenate([np.arange(k)] * 3)
    vals = np.concatenate([np.ones(k), g * s.cpus, g * s.memory])
    model = LinearModel(
        cost=inst.weight[s.job] * s.tput,
        matrix=sp.csc_matrix((vals, (rows, cols)), shape=(c + 2, k)),
        row_lower=np.concatenate([np.ones(c), [-INFINITY, -INFINITY]]),
        row_upper=np.concatenate([np.ones(c), [inst.server_cpus.sum(), inst.server_memory.sum()]]),
        col_lower=np.zeros(k),
        col_upper=np.ones(k),
        integer=None if relax else np.ones(k, bool),
        maximize=True,
    )
    started = time.perf_counter()
    result = solve_highs(model, HighsSettings(mip_rel_gap=gap, threads=threads), deadline)
    point = np.full(c, -1, np.int64)
    objective = None
    if result.has_solution and not relax:
        chosen = np.nonzero(result.x > 0.5)[0]
        point[s.job[chosen]] = chosen
        if (point >= 0).all():
            objective = float((inst.weight * s.tput[point]).sum())
    elif result.has_solution:
        objective = result.objective
    bound = result.bound if not relax else result.objective
    return ShapeChoice(point, objective, bound, result.status, time.perf_counter() - started,
                       (k, c + 2))


def largest_servers(inst: SynergyInstance) -> IntArray:
    """(types,) GPUs of the largest server of each accelerator type (0 = none)."""
    n = int(max(inst.server_type.max(initial=-1), inst.job_type.max(initial=-1))) + 1
    largest = np.zeros(n, np.int64)
    np.maximum.at(largest, inst.server_type, inst.server_gpus)
    return largest


class Servers:
    """Free GPUs, cores and memory per server while jobs are placed, with the jobs placed on
    each server and how many of them hold more than their fair share (peer adjustment looks
    only at those servers)."""

    def __init__(self, inst: SynergyInstance) -> None:
        self.gpus = inst.server_gpus.astype(np.int64).copy()
        self.cpus = inst.server_cpus.astype(np.float64).copy()
        self.memory = inst.server_memory.astype(np.float64).copy()
        self.type = inst.server_type
        self.largest = largest_servers(inst)
        # the same three by type (each type's servers contiguous, ascending): views per type
        self.by_type = np.argsort(self.type, kind="stable")
        self.position = np.empty_like(self.by_type)
        self.position[self.by_type] = np.arange(self.by_type.size)
        edges = np.searchsorted(self.type[self.by_type], np.arange(self.largest.size + 1))
        self.span = list(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True))
        self.of_type = [self.by_type[lo:hi] for lo, hi in self.span]
        """Servers of each accelerator type, ascending."""
        self._gpus = self.gpus[self.by_type]
        self._cpus = self.cpus[self.by_type]
        self._memory = self.memory[self.by_type]
        self.jobs_on: list[list[int]] = [[] for _ in range(self.gpus.size)]
        self.shrinkable = np.zeros(self.gpus.size, np.int64)
        """Jobs on each server above their fair share (point not dominated by it)."""

    def fit(self, g: int, cpu: float, mem: float, split: bool,
            type_index: int) -> list[tuple[int, int]] | None:
        """(server, GPUs) pieces for g GPUs with cpu cores and mem GiB per GPU on servers of
        type `type_index`: the server with the fewest free GPUs that fits them all when g fits
        a server of the type, else (or with `split`) its servers with the most room first;
        None = no room."""
        lo, hi = self.span[type_index] if type_index < len(self.span) else (0, 0)
        mine = self.by_type[lo:hi]
        gpus = self._gpus[lo:hi]
        if g <= self.largest[type_index]:
            # room >= g, with room = min(GPUs, floor(cores / cpu + eps), floor(GiB / mem + eps))
            fits = gpus >= g
            if cpu > 0:
                fits &= self._cpus[lo:hi] / cpu + _EPS >= g
            if mem > 0:
                fits &= self._memory[lo:hi] / mem + _EPS >= g
            ok = np.nonzero(fits)[0]
            if ok.size:
                return [(int(mine[ok[np.argmin(gpus[ok])]]), g)]
            if not split:
                return None
        room = np.minimum(
            gpus,
            np.minimum(np.floor(self._cpus[lo:hi] / cpu + _EPS) if cpu > 0 else gpus,
                       np.floor(self._memory[lo:hi] / mem + _EPS) if mem > 0 else gpus),
        ).astype(np.int64)
        if room.sum() < g:
            return None
        pieces: list[tuple[int, int]] = []
        left = g
        for s in np.argsort(-room, kind="stable").tolist():
            take = int(min(room[s], left))
            if take <= 0:
                break
            pieces.append((int(mine[s]), take))
            left -= take
            if left == 0:
                return pieces
        return None

    def take(self, pieces: list[tuple[int, int]], cpu: float, mem: float, sign: int = 1) -> None:
        for s, k in pieces:
            self.gpus[s] -= sign * k
            self.cpus[s] -= sign * k * cpu
            self.memory[s] -= sign * k * mem
            at = self.position[s]
            self._gpus[at], self._cpus[at], self._memory[at] = (
                self.gpus[s], self.cpus[s], self.memory[s])

    def placed(self, job: int, pieces: list[tuple[int, int]], shrinkable: bool) -> None:
        for s, _ in pieces:
            self.jobs_on[s].append(job)
            self.shrinkable[s] += shrinkable

    def shrunk(self, pieces: list[tuple[int, int]]) -> None:
        for s, _ in pieces:
            self.shrinkable[s] -= 1


@dataclass
class Placement:
    """Where each chosen job runs and at which point (-1 = waits)."""

    point: IntArray
    pieces: list[list[tuple[int, int]]]
    reached: int = -1
    """Jobs of the order looked at before the deadline (-1 = all)."""


def _above_fair(inst: SynergyInstance, job: int, p: int) -> bool:
    """Point p of `job` holds more than its fair share (peer adjustment may shrink it)."""
    s = inst.shapes
    fair = int(s.fair[job])
    return p >= 0 and p != fair and not (s.cpus[p] <= s.cpus[fair]
                                         and s.memory[p] <= s.memory[fair])


def _shrink_for(inst: SynergyInstance, servers: Servers, place: Placement, job: int,
                split: bool) -> list[tuple[int, int]] | None:
    """Peer adjustment: shrink placed jobs that hold more than their fair share on the servers
    with the most free GPUs back to it, until `job` fits at its fair share. Servers (most free
    GPUs first, ties: index) holding none of those jobs change nothing and are skipped."""
    s = inst.shapes
    fair = int(s.fair[job])
    g = int(inst.gpus[job])
    j = int(inst.job_type[job])
    mine = servers.of_type[j]
    look = mine[servers.shrinkable[mine] > 0]
    if not split:
        look = look[servers.gpus[look] >= min(g, servers.largest[j])]
    for server in look[np.argsort(-servers.gpus[look], kind="stable")].tolist():
        for other in sorted(servers.jobs_on[server]):
            p = int(place.point[other])
            if not _above_fair(inst, other, p):
                continue
            servers.take(place.pieces[other], s.cpus[p], s.memory[p], sign=-1)
            q = int(s.fair[other])
            servers.take(place.pieces[other], s.cpus[q], s.memory[q])
            servers.shrunk(place.pieces[other])
            place.point[other] = q
            pieces = servers.fit(g, s.cpus[fair], s.memory[fair], split, j)
            if pieces is not None:
                return pieces
    return None


def place(inst: SynergyInstance, wanted: IntArray, order: IntArray, split: bool,
          deadline: Deadline = NO_DEADLINE) -> Placement:
    """Place each job of `order` at its `wanted` point, else at its fair point, else after
    shrinking others (module docstring); `split` as in `Servers.fit`. Jobs not reached by the
    deadline wait (`Placement.reached`)."""
    s = inst.shapes
    servers = Servers(inst)
    placement = Placement(np.full(inst.jobs.size, -1, np.int64), [[] for _ in inst.jobs])
    for k, job in enumerate(order.tolist()):
        if k % DEADLINE_CHECK_EVERY == 0 and deadline.expired():
            placement.reached = k
            return placement
        g = int(inst.gpus[job])
        for p in dict.fromkeys([int(wanted[job]), int(s.fair[job])]):
            pieces = servers.fit(g, s.cpus[p], s.memory[p], split, int(inst.job_type[job]))
            if pieces is not None:
                break
        else:
            p = int(s.fair[job])
            pieces = _shrink_for(inst, servers, placement, job, split)
        if pieces is None:
            continue
        servers.take(pieces, s.cpus[p], s.memory[p])
        servers.placed(job, pieces, _above_fair(inst, job, p))
        placement.point[job] = p
        placement.pieces[job] = pieces
    return placement


def assign_servers(inst: SynergyInstance, point: IntArray, deadline: Deadline = NO_DEADLINE
                   ) -> tuple[list[list[tuple[int, int]]], np.ndarray]:
    """GPUs for every chosen job on servers of its type, consolidated, balancing the cores and
    memory the points ask for: jobs by decreasing demand, each on the server of its type with
    enough free GPUs whose load (the larger of its core and memory shares already asked for)
    is lowest; jobs larger than every server of their type take its emptiest servers. Empty
    list = no server of its type has its GPUs free, or the deadline passed before the job was
    reached (those are marked in the (c,) mask returned beside)."""
    s = inst.shapes
    free = inst.server_gpus.astype(np.int64).copy()
    cap_cpu = np.maximum(inst.server_cpus, _EPS)
    cap_mem = np.maximum(inst.server_memory, _EPS)
    asked_cpu = np.zeros(free.size)
    asked_mem = np.zeros(free.size)
    largest = largest_servers(inst)
    of_type = [np.nonzero(inst.server_type == j)[0] for j in range(largest.size)]
    g = inst.gpus.astype(np.float64)
    demand = np.maximum(g * s.cpus[point] / cap_cpu.mean(), g * s.memory[point] / cap_mem.mean())
    pieces: list[list[tuple[int, int]]] = [[] for _ in range(inst.jobs.size)]
    late = np.zeros(inst.jobs.size, bool)
    order = np.lexsort((-inst.gpus, -demand))
    for k, job in enumerate(order.tolist()):
        if k % DEADLINE_CHECK_EVERY == 0 and deadline.expired():
            late[order[k:]] = True
            return pieces, late
        need = int(inst.gpus[job])
        j = int(inst.job_type[job])
        mine = of_type[j]
        cpu, mem = float(s.cpus[point[job]]), float(s.memory[point[job]])
        if need <= largest[j]:
            ok = mine[free[mine] >= need]
            if ok.size == 0:
                continue
            load = np.maximum((asked_cpu[ok] + need * cpu) / cap_cpu[ok],
                              (asked_mem[ok] + need * mem) / cap_mem[ok])
            chosen = [(int(ok[np.lexsort((free[ok], load))[0]]), need)]
        else:
            if free[mine].sum() < need:
                continue
            chosen, left = [], need
            for server in mine[np.argsort(-free[mine], kind="stable")].tolist():
                take = int(min(free[server], left))
                if take <= 0:
                    break
                chosen.append((server, take))
                left -= take
                if left == 0:
                    break
        for server, count in chosen:
            free[server] -= count
            asked_cpu[server] += count * cpu
            asked_mem[server] += count * mem
        pieces[job] = chosen
    return pieces, late


def reshape(inst: SynergyInstance, pieces: list[list[tuple[int, int]]], deadline: Deadline,
            gap: float, threads: int = 0) -> tuple[Placement, SolverStatus]:
    """The best points for jobs whose servers are fixed: max sum w tput over one point per
    placed job with every server's cores and memory respected (a small multiple-choice
    knapsack MIP). A job that cannot keep even its fair point waits (placing jobs comes
    first: each placed job is worth more than every throughput together). Not started when
    HiGHS could not reach its first look at the time limit in the time left (no job placed,
    status time limit, `Placement.reached` 0)."""
    s = inst.shapes
    servers = inst.server_gpus.size
    c = inst.jobs.size
    placement = Placement(np.full(c, -1, np.int64), [[] for _ in range(c)])
    placed = np.array([bool(p) for p in pieces], bool)
    cols = np.nonzero(placed[s.job])[0]
    k = cols.size
    job = s.job[cols]
    # each piece (job, server, GPUs) puts the job's columns in the server's two capacity rows
    piece_job = np.array([j for j, mine in enumerate(pieces) for _ in mine], np.int64)
    piece_server = np.array([srv for mine in pieces for srv, _ in mine], np.int64)
    piece_gpus = np.array([n for mine in pieces for _, n in mine], np.float64)
    first = np.searchsorted(job, np.arange(c))
    count = np.searchsorted(job, np.arange(c), side="right") - first
    per_piece = count[piece_job]
    entry = (np.repeat(first[piece_job] - (np.cumsum(per_piece) - per_piece), per_piece)
             + np.arange(int(per_piece.sum())))
    server = np.repeat(piece_server, per_piece)
    gpus = np.repeat(piece_gpus, per_piece)
    nonzeros = k + 2 * entry.size
    if deadline.remaining() < RESHAPE_SETUP_S_PER_NONZERO * nonzeros:
        placement.reached = 0
        return placement, SolverStatus.TIME_LIMIT
    big = 1.0 + float((inst.weight * s.tput[s.best]).sum()) if inst.jobs.size else 1.0
    model = LinearModel(
        cost=inst.weight[job] * s.tput[cols] + big,
        matrix=sp.csc_matrix(
            (np.concatenate([np.ones(k), gpus * s.cpus[cols[entry]],
                             gpus * s.memory[cols[entry]]]),
             (np.concatenate([job, c + server, c + servers + server]),
              np.concatenate([np.arange(k), entry, entry]))),
            shape=(c + 2 * servers, k),
        ),
        row_lower=np.full(c + 2 * servers, -INFINITY),
        row_upper=np.concatenate([np.ones(c), inst.server_cpus, inst.server_memory]),
        col_lower=np.zeros(k),
        col_upper=np.ones(k),
        integer=np.ones(k, bool),
        maximize=True,
    )
    result = solve_highs(model, HighsSettings(mip_rel_gap=gap * 1e-3, threads=threads),
                         deadline)
    if result.has_solution:
        for col in np.nonzero(result.x > 0.5)[0].tolist():
            j = int(job[col])
            placement.point[j] = int(cols[col])
            placement.pieces[j] = pieces[j]
    return placement, result.status


def placed_value(inst: SynergyInstance, placement: Placement) -> float:
    ok = placement.point >= 0
    return float((inst.weight[ok] * inst.shapes.tput[placement.point[ok]]).sum())


def tune(inst: SynergyInstance, deadline: Deadline = NO_DEADLINE) -> Placement:
    """TUNE (compat synergy): best points in base order (module docstring)."""
    return place(inst, inst.shapes.best, np.arange(inst.jobs.size), split=False,
                 deadline=deadline)


def solve_policy(
    problem: Problem,
    params: SynergyParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Synergy OPT (exact shapes, bound by LP1) or TUNE (compat synergy); every stage leaves
    the plan's building its time."""
    before_plan = deadline.leaving(PLAN_S_PER_JOB * problem.jobs.num_jobs)
    inst = synergy_instance(problem, params, before_plan)
    started = time.perf_counter()
    heuristic = tune(inst, before_plan)
    heuristic_value = placed_value(inst, heuristic)
    heuristic_late = np.arange(inst.jobs.size) >= heuristic.reached \
        if heuristic.reached >= 0 else np.zeros(inst.jobs.size, bool)
    cut: list[str] = []
    if not inst.complete:
        cut.append(f"time limit: the base order stopped with {inst.unreached.size} job(s) "
                   "not looked at")
    if heuristic.reached >= 0:
        cut.append(f"time limit: TUNE placed {heuristic.reached} of {inst.jobs.size} jobs")
    notes: list[str] = list(cut)
    final, late = heuristic, heuristic_late
    exact: ExactRun | None = None
    if compat is not Compat.SYNERGY:
        shapes = solve_shapes(inst, before_plan, options.relative_gap, options.threads)
        status = shapes.status
        if shapes.not_started:
            notes.append("time limit: LP1 was not started; TUNE's plan kept")
        elif shapes.objective is None:
            notes.append(f"LP1 ended {shapes.status.value} without a point; TUNE's plan kept")
        else:
            pieces, late = assign_servers(inst, shapes.point, before_plan)
            if late.any():
                notes.append(f"time limit: {int(late.sum())} job(s) of LP1 not given servers")
                status = SolverStatus.TIME_LIMIT
            final, reshaped = reshape(inst, pieces, before_plan, options.relative_gap,
                                      options.threads)
            if final.reached == 0:
                notes.append("time limit: placement reshaping was not started")
                late = np.ones(inst.jobs.size, bool)
            elif reshaped is not SolverStatus.OPTIMAL:
                notes.append(f"placement reshaping ended {reshaped.value}")
            moved = int((final.point != shapes.point).sum())
            if moved and final.reached != 0:
                notes.append(f"{moved} job(s) reshaped from LP1's point to fit their nodes")
        if heuristic_value > placed_value(inst, final):
            final, late = heuristic, heuristic_late
            notes.append("TUNE's placement kept (better than the placed LP1 shapes)")
        exact = ExactRun(
            placed_value(inst, final), shapes.bound if inst.complete else None, status,
            "synergy OPT: LP1 shape ILP (HiGHS MIP), consolidated placement",
            time.perf_counter() - started, ModelSize(*shapes.size, 0, shapes.size[0]),
            "; ".join(notes), feasible_when_open=True,
        )
    section, job_status, reasons, values = _section(problem, inst, final, late)
    return compared_plan(problem, section, job_status, reasons, "synergy_tune", heuristic_value,
                         exact, options.relative_gap, objective_value=values,
                         detail="; ".join(cut))


def _section(problem: Problem, inst: SynergyInstance, placement: Placement, late: np.ndarray
             ) -> tuple[GroupSection, list[JobStatus], list[str], FloatArray]:
    """The groups of the placed jobs; `late` (chosen jobs) marks those the deadline left
    unplaced."""
    m = problem.jobs.num_jobs
    s = inst.shapes
    status = [JobStatus.DEFERRED] * m
    reasons = ["no GPUs left this round (base order)"] * m
    grids = (problem.sharing or SharingInputs()).resource_grid
    usable = np.asarray(problem.usable.any(axis=1))
    for i in inst.unreached.tolist():
        reasons[i] = "not given GPUs before the time limit"
    for i in range(m):
        if not grids or grids[i] is None:
            status[i] = JobStatus.UNSERVABLE
            reasons[i] = "no resource profile (jobs[].resource_profile or resource_profiles)"
        elif not usable[i]:
            status[i] = JobStatus.UNSERVABLE
            reasons[i] = NO_USABLE_TYPE
    cpus = np.full(m, np.nan)
    memory = np.full(m, np.nan)
    values = np.zeros(m)
    names = problem.cluster.node_names
    groups: list[ColocationGroup] = []
    for c, i in enumerate(inst.jobs.tolist()):
        p = int(placement.point[c])
        if p < 0:
            reasons[i] = ("not placed before the time limit" if late[c] else
                          "no node has room for its fair share after shrinking others")
            continue
        g = int(inst.gpus[c])
        cpus[i], memory[i] = g * s.cpus[p], g * s.memory[p]
        values[i] = s.tput[p]
        floor = s.tput[s.fair[c]]
        slowdown = floor / s.tput[p] if s.tput[p] > 0 else 1.0
        nodes = tuple((names[srv], k) for srv, k in placement.pieces[c])
        groups.append(ColocationGroup((i,), (float(slowdown),), int(inst.job_type[c]), g, nodes))
        status[i], reasons[i] = JobStatus.ALLOCATED, ""
    return GroupSection(tuple(groups), cpus, memory), status, reasons, values
