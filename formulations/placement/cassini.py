"""CASSINI's time shifts (D5): jobs whose communication phases share network uplinks are
shifted in time so that their phases interleave.

Links: the uplink of every domain with `uplink_gbps` > 0; a job uses it when some but not all
of its devices are under the domain (its traffic leaves the domain). Time is cut in slots of
`slot_s`; a job's iteration of `iteration_time_s` becomes p_i = max(1, round(T_i / slot))
slots (a rounding error below half a slot), its demand in slot t is the bandwidth of the phase
covering the slot's middle (0 outside phases), and the common period P is the least common
multiple of the p_i, capped at `max_period_s` (above the cap the schedule is evaluated over the
cap and reported as approximate).

Exact MILP (ours): binary s[i, k], job i delayed by k slots (0 <= k < p_i), sum_k s[i, k] = 1;
overflow o[e, t] >= sum_i sum_k b_i((t - k) mod p_i) s[i, k] - C_e, o >= 0; minimize
slot x sum o (Gb). One shift per job across all its links, so shifts are consistent even when
jobs and links form loops. Shifting every job of a connected component of the affinity graph
(jobs and the links they share) by the same amount changes nothing, so one job per component
is fixed at 0 (symmetry breaking). `traversal_shifts` is the published per-link rotation
search with a traversal from a reference job, which fails ("inconsistent") on loops.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from apportion.solver.backends.highs import INFINITY, HighsSettings, LinearModel, solve_highs
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import FloatArray
from apportion.solver.result import Termination
from apportion.solver.topology import CommunicationPhase, Topology

MAX_SHIFT_JOBS = 4096
"""Jobs in one shift problem at most (the others keep shift 0)."""


@dataclass(frozen=True)
class ShiftJob:
    job: int
    demand: FloatArray
    """(p,) Gb/s sent on each of its links in each slot of its iteration."""
    links: tuple[int, ...]
    """Indices into `ShiftProblem.capacity`."""

    @property
    def period(self) -> int:
        return int(self.demand.size)


@dataclass(frozen=True)
class ShiftProblem:
    jobs: tuple[ShiftJob, ...]
    capacity: FloatArray
    """(links,) Gb/s."""
    slot_s: float
    period: int
    """Slots of the common period."""
    approximate: bool = False
    """The least common multiple of the periods exceeded the cap."""


@dataclass(frozen=True)
class ShiftResult:
    shifts: tuple[int, ...]
    """Per job of the problem, its delay in slots."""
    overflow: float
    """Gb over the common period."""
    bound: float | None
    termination: Termination
    detail: str = ""


def job_links(topology: Topology, devices: tuple[int, ...]) -> list[int]:
    """Domains with an uplink capacity whose uplink the job's traffic crosses."""
    if not devices:
        return []
    index = np.asarray(devices, np.int64)
    out = []
    for u in np.flatnonzero(topology.domain_uplink_gbps > 0).tolist():
        level = int(topology.domain_level[u])
        inside = int(np.count_nonzero(topology.ancestors[index, level] == u))
        if 0 < inside < index.size:
            out.append(u)
    return out


def demand_profile(phases: tuple[CommunicationPhase, ...], iteration_s: float,
                   slot_s: float) -> FloatArray:
    """Gb/s per slot of one iteration (the phase covering each slot's middle)."""
    slots = max(1, round(iteration_s / slot_s))
    middle = (np.arange(slots) + 0.5) / slots
    out = np.zeros(slots)
    for phase in phases:
        out[(middle >= phase.start_fraction) & (middle < phase.end_fraction)] = phase.gbps
    return out


def shift_problem(
    topology: Topology,
    devices: dict[int, tuple[int, ...]],
    phases: tuple[tuple[CommunicationPhase, ...], ...],
    iteration_s: FloatArray,
    slot_s: float,
    max_period_s: float,
) -> ShiftProblem:
    """The shift problem of the placed jobs with phases that share a link with another."""
    candidates = []
    for i, held in sorted(devices.items()):
        if not phases[i] or iteration_s[i] <= 0:
            continue
        links = job_links(topology, held)
        if links:
            candidates.append((i, links))
    users: dict[int, int] = {}
    for _, links in candidates:
        for u in links:
            users[u] = users.get(u, 0) + 1
    shared = sorted(u for u, k in users.items() if k >= 2)
    position = {u: k for k, u in enumerate(shared)}
    jobs = []
    for i, links in candidates[:MAX_SHIFT_JOBS]:
        mine = tuple(position[u] for u in links if u in position)
        if mine:
            jobs.append(ShiftJob(i, demand_profile(phases[i], float(iteration_s[i]), slot_s),
                                 mine))
    period = 1
    for job in jobs:
        period = period * job.period // math.gcd(period, job.period)
    cap = max(1, int(max_period_s / slot_s + 1e-9))
    approximate = period > cap
    return ShiftProblem(tuple(jobs), topology.domain_uplink_gbps[shared].astype(np.float64),
                        slot_s, min(period, cap), approximate)


def load(problem: ShiftProblem, shifts: tuple[int, ...]) -> FloatArray:
    """(links, P) Gb/s on every link in every slot of the common period."""
    out = np.zeros((problem.capacity.size, problem.period))
    t = np.arange(problem.period)
    for job, k in zip(problem.jobs, shifts, strict=True):
        profile = job.demand[(t - k) % job.period]
        for e in job.links:
            out[e] += profile
    return out


def overflow(problem: ShiftProblem, shifts: tuple[int, ...]) -> float:
    """Gb above the links' capacities over the common period."""
    excess = load(problem, shifts) - problem.capacity[:, None]
    return float(np.maximum(excess, 0.0).sum() * problem.slot_s)


def components(problem: ShiftProblem) -> list[list[int]]:
    """Jobs connected through shared links (the affinity graph's components)."""
    parent = list(range(len(problem.jobs)))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    first: dict[int, int] = {}
    for a, job in enumerate(problem.jobs):
        for e in job.links:
            if e in first:
                parent[find(a)] = find(first[e])
            else:
                first[e] = a
    groups: dict[int, list[int]] = {}
    for a in range(len(problem.jobs)):
        groups.setdefault(find(a), []).append(a)
    return list(groups.values())


def solve_shifts(problem: ShiftProblem, deadline: Deadline = NO_DEADLINE,
                 relative_gap: float = 1e-4) -> ShiftResult:
    """The exact shift MILP (module docstring)."""
    jobs = problem.jobs
    if not jobs:
        return ShiftResult((), 0.0, 0.0, Termination.OPTIMAL)
    fixed = {group[0] for group in components(problem)}
    offsets = np.cumsum([0] + [job.period for job in jobs])
    n_shift = int(offsets[-1])
    links, period = problem.capacity.size, problem.period
    columns = n_shift + links * period
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    lower: list[float] = []
    upper: list[float] = []
    for a, job in enumerate(jobs):  # one shift per job
        rows.append(np.full(job.period, len(lower)))
        cols.append(offsets[a] + np.arange(job.period))
        vals.append(np.ones(job.period))
        lower.append(1.0)
        upper.append(1.0)
    t = np.arange(period)
    for e in range(links):  # load - o[e, t] <= C_e
        users = [a for a, job in enumerate(jobs) if e in job.links]
        for slot in t.tolist():
            row = len(lower)
            for a in users:
                job = jobs[a]
                k = np.arange(job.period)
                b = job.demand[(slot - k) % job.period]
                keep = b > 0
                rows.append(np.full(int(keep.sum()), row))
                cols.append(offsets[a] + k[keep])
                vals.append(b[keep])
            rows.append(np.array([row]))
            cols.append(np.array([n_shift + e * period + slot]))
            vals.append(np.array([-1.0]))
            lower.append(-INFINITY)
            upper.append(float(problem.capacity[e]))
    matrix = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                           shape=(len(lower), columns))
    col_upper = np.concatenate([np.ones(n_shift), np.full(links * period, INFINITY)])
    for a in fixed:  # symmetry breaking: one job per component at shift 0
        col_upper[offsets[a] + 1 : offsets[a + 1]] = 0.0
    cost = np.concatenate([np.zeros(n_shift), np.full(links * period, problem.slot_s)])
    integer = np.concatenate([np.ones(n_shift, dtype=bool), np.zeros(links * period, bool)])
    model = LinearModel(cost=cost, matrix=matrix, row_lower=np.array(lower),
                        row_upper=np.array(upper), col_lower=np.zeros(columns),
                        col_upper=col_upper, integer=integer)
    result = solve_highs(model, HighsSettings(mip_rel_gap=relative_gap, mip_abs_gap=1e-9),
                         deadline)
    if not result.has_solution:
        zeros = tuple(0 for _ in jobs)
        return ShiftResult(zeros, overflow(problem, zeros), result.bound, Termination.FEASIBLE,
                           f"no shift found ({result.detail}); jobs left unshifted")
    shifts = tuple(int(np.argmax(result.x[offsets[a] : offsets[a + 1]]))
                   for a in range(len(jobs)))
    value = overflow(problem, shifts)
    bound = result.bound if result.bound is not None else None
    solved = result.status is SolverStatus.OPTIMAL
    gap_ok = bound is not None and value - bound <= relative_gap * max(1.0, abs(value)) + 1e-9
    termination = Termination.OPTIMAL if solved and gap_ok else Termination.FEASIBLE
    detail = "period capped: overflow over the cap only" if problem.approximate else ""
    return ShiftResult(shifts, value, bound, termination, detail)


TRAVERSAL_TUPLES_MAX = 20_000
"""Rotation tuples tried per link; beyond, each job's rotation is chosen in turn."""


def _link_rotations(problem: ShiftProblem, e: int, users: list[int]) -> dict[int, int]:
    """Best rotations of the link's jobs relative to its first, that link alone."""
    jobs = problem.jobs
    sub = ShiftProblem(tuple(ShiftJob(jobs[a].job, jobs[a].demand, (0,)) for a in users),
                       problem.capacity[[e]], problem.slot_s, problem.period)
    ranges = [range(jobs[a].period) for a in users[1:]]
    if math.prod(len(r) for r in ranges) <= TRAVERSAL_TUPLES_MAX:
        best = min(itertools.product(*ranges), key=lambda rest: overflow(sub, (0, *rest)))
        return dict(zip(users, (0, *best), strict=True))
    chosen = [0]
    for options in ranges:
        partial = ShiftProblem(sub.jobs[: len(chosen) + 1], sub.capacity, sub.slot_s, sub.period)
        chosen.append(min(options, key=lambda k: overflow(partial, (*chosen, k))))
    return dict(zip(users, chosen, strict=True))


def traversal_shifts(problem: ShiftProblem) -> tuple[tuple[int, ...] | None, bool]:
    """CASSINI's published route: on each link, the best rotations of its jobs relative to its
    first job (brute force, that link alone), then absolute shifts by traversing the affinity
    graph from a reference job; (shifts, consistent) with shifts None when a loop makes two
    links ask different shifts for one job."""
    jobs = problem.jobs
    relative: dict[int, dict[int, int]] = {}
    for e in range(problem.capacity.size):
        users = [a for a, job in enumerate(jobs) if e in job.links]
        if len(users) >= 2:
            relative[e] = _link_rotations(problem, e, users)
    shifts: dict[int, int] = {}
    for group in components(problem):
        shifts[group[0]] = 0
        queue = [group[0]]
        while queue:
            a = queue.pop()
            for rel in relative.values():
                if a not in rel:
                    continue
                for b, k in rel.items():
                    want = (shifts[a] + k - rel[a]) % jobs[b].period
                    if b not in shifts:
                        shifts[b] = want
                        queue.append(b)
                    elif shifts[b] != want:
                        return None, False
    return tuple(shifts.get(a, 0) for a in range(len(jobs))), True
