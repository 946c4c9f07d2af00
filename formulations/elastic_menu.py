"""Elastic allocation over per-job menus (B7, B8, B9): the core shared by Optimus, SLAQ and Lyra.

Every admitted job i holds exactly one state s of its menu. State 0 is its base (the job was
admitted with it); a state holds `demand[i, s, r]` units of resource r (devices of an
accelerator type) and is worth `value[i, s]` (policy units, 0 at the base). The problem

    maximize sum_i value[i, s_i]  s.t.  sum_i demand[i, s_i, r] <= capacity[r]  for every r

is a multiple-choice knapsack (multi-dimensional when a job's states use several resources).

* `greedy`: the marginal-gain rule of Optimus and SLAQ. From the base, repeatedly take the move
  (one more task: a state listed in `Menu.moves` after the job's current one) with the largest
  gain divided by the dominant share of the resources it adds (max_r added_r / capacity_r),
  among moves that fit the leftover capacity, until no move with a positive gain fits.
* `exact`: the optimum. When each job's states use one resource, a dynamic program over
  capacity per resource (exact; Lyra's method); otherwise, or beyond `DP_CELL_LIMIT`, a HiGHS
  MILP over the states (optimum and best bound within the deadline).

[derived, B8] With one resource, unit steps and concave values (non-increasing marginal
gains), the greedy is optimal: it is the classic greedy for separable concave resource
allocation. Otherwise its gap to `exact` is reported, never assumed.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from apportion.solver.backends.highs import INFINITY, HighsSettings, LinearModel, solve_highs
from apportion.solver.backends.highs_startup import MILP
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import FloatArray, IntArray
from apportion.solver.result import ModelSize

DP_CELL_LIMIT = 400_000_000
"""Largest sum over resources of jobs x states x (capacity + 1) solved by dynamic programming
(about 2 s of numpy on one core); larger instances go to the MILP."""
DEADLINE_CHECK_EVERY = 64
"""Greedy steps between two reads of the deadline (the dynamic program reads it every job)."""
FREE_MOVE_SHARE = 1e-12
"""Dominant share given to a move that adds no resource (so a free positive gain goes first)."""


@dataclass(frozen=True)
class Menu:
    """The states each admitted job can hold. m jobs, S states, R resources."""

    value: FloatArray
    """(m, S) worth of each state (policy units); -inf = the state is not offered to the job.
    State 0 is offered to every job."""
    demand: IntArray
    """(m, S, R) units of each resource each state holds (>= 0)."""
    moves: IntArray
    """(q, 2) (from state, to state) pairs the greedy may take, shared by every job."""

    @property
    def num_jobs(self) -> int:
        return int(self.value.shape[0])

    @property
    def num_states(self) -> int:
        return int(self.value.shape[1])

    @property
    def num_resources(self) -> int:
        return int(self.demand.shape[2])

    def offered(self) -> np.ndarray:
        """(m, S) True where the state is offered."""
        return np.asarray(np.isfinite(self.value))


def ladder_moves(num_states: int) -> IntArray:
    """Moves s -> s + 1: a menu whose states are in increasing size (one more task each)."""
    first = np.arange(max(num_states - 1, 0), dtype=np.int64)
    return np.stack([first, first + 1], axis=1).reshape(-1, 2)


@dataclass(frozen=True)
class MenuAllocation:
    """A state per job and what it is worth."""

    state: IntArray
    """(m,) chosen state per job."""
    objective: float
    """sum_i value[i, state_i]."""
    used: IntArray
    """(R,) units of each resource held."""
    method: str
    complete: bool = True
    """False when the deadline cut the method short (the allocation is still feasible)."""


def evaluate(menu: Menu, state: IntArray) -> tuple[float, IntArray]:
    """(objective, used resources) of a state per job."""
    m = menu.num_jobs
    rows = np.arange(m)
    objective = float(menu.value[rows, state].sum()) if m else 0.0
    used = menu.demand[rows, state].sum(axis=0) if m else np.zeros(menu.num_resources, np.int64)
    return objective, np.asarray(used, np.int64)


def feasible(menu: Menu, state: IntArray, capacity: IntArray) -> bool:
    """Every chosen state is offered and the capacity holds."""
    offered = menu.offered()[np.arange(menu.num_jobs), state]
    _, used = evaluate(menu, state)
    return bool(offered.all() and np.all(used <= capacity))


def _shares(added: IntArray, capacity: IntArray) -> FloatArray:
    """Dominant share of added demand (..., R): max_r added_r / capacity_r."""
    cap = np.where(capacity > 0, capacity, 1).astype(np.float64)
    share = np.max(np.maximum(added, 0) / cap, axis=-1)
    return np.asarray(np.where(share > 0, share, FREE_MOVE_SHARE), np.float64)


def greedy(menu: Menu, capacity: IntArray, deadline: Deadline = NO_DEADLINE,
           step_reserve_s: float = 0.0) -> MenuAllocation:
    """Optimus's and SLAQ's marginal-gain rule (module docstring). Ties: the lower job index,
    then the earlier move. Stops (incomplete) at the deadline, or once no more than
    `step_reserve_s` per step taken is left before it (the time a later stage needs for each
    move, such as placing its task)."""
    m = menu.num_jobs
    state = np.zeros(m, np.int64)
    left = np.asarray(capacity, np.int64) - menu.demand[:, 0, :].sum(axis=0)
    value, demand, moves = menu.value, menu.demand, menu.moves
    by_source: dict[int, IntArray] = {
        int(s): moves[moves[:, 0] == s, 1] for s in np.unique(moves[:, 0])
    } if moves.size else {}
    heap: list[tuple[float, int, int]] = []

    def push_best(i: int) -> None:
        targets = by_source.get(int(state[i]))
        if targets is None or targets.size == 0:
            return
        here = int(state[i])
        gain = value[i, targets] - value[i, here]
        added = demand[i, targets] - demand[i, here]
        fits = np.all(added <= left, axis=1) & (gain > 0) & np.isfinite(gain)
        if not fits.any():
            return
        score = np.where(fits, gain / _shares(added, capacity), -np.inf)
        k = int(np.argmax(score))
        heapq.heappush(heap, (-float(score[k]), i, int(targets[k])))

    heap.extend(_first_moves(menu, by_source.get(0), left, capacity))
    heapq.heapify(heap)
    steps = 0
    complete = True
    while heap:
        steps += 1
        if steps % DEADLINE_CHECK_EVERY == 0 and (
                deadline.expired()
                or (step_reserve_s > 0 and deadline.remaining() <= step_reserve_s * steps)):
            complete = False
            break
        _, i, target = heapq.heappop(heap)
        added = demand[i, target] - demand[i, state[i]]
        if np.all(added <= left):
            left -= added
            state[i] = target
        push_best(i)  # the next move from the new state, or a move that still fits
    objective, used = evaluate(menu, state)
    return MenuAllocation(state, objective, used, f"greedy ({steps} steps)", complete)


def _first_moves(menu: Menu, targets: IntArray | None, left: IntArray, capacity: IntArray
                 ) -> list[tuple[float, int, int]]:
    """Every job's best move from its base, as the greedy's heap entries (-score, job, target
    state), all jobs at once: what the greedy's per-job step gives for state 0 and `left`
    (R,) leftover units."""
    if targets is None or targets.size == 0 or menu.num_jobs == 0:
        return []
    gain = menu.value[:, targets] - menu.value[:, :1]  # (m, T)
    added = menu.demand[:, targets] - menu.demand[:, :1]  # (m, T, R)
    fits = np.all(added <= left, axis=2) & (gain > 0) & np.isfinite(gain)
    with np.errstate(invalid="ignore"):
        score = np.where(fits, gain / _shares(added, capacity), -np.inf)
    best = np.argmax(score, axis=1)
    jobs = np.flatnonzero(fits.any(axis=1))
    return list(zip((-score[jobs, best[jobs]]).tolist(), jobs.tolist(),
                    targets[best[jobs]].tolist(), strict=True))


@dataclass(frozen=True)
class ExactResult:
    """The exact allocation with its proof."""

    allocation: MenuAllocation | None
    """The best allocation found (None = none: the MILP stopped without an incumbent)."""
    bound: float | None
    """Proven upper bound on the optimum (the DP optimum itself; the MILP's best bound)."""
    status: SolverStatus
    solver: str
    solver_version: str
    solve_time_s: float
    size: ModelSize
    detail: str = ""


def single_resource(menu: Menu) -> IntArray | None:
    """(m,) the one resource each job's states use (-1 = none), or None when some job's states
    use several."""
    uses = np.any(menu.demand > 0, axis=1)  # (m, R)
    if np.any(uses.sum(axis=1) > 1):
        return None
    return np.asarray(np.where(uses.any(axis=1), np.argmax(uses, axis=1), -1), np.int64)


def dp_cells(menu: Menu, capacity: IntArray) -> int:
    """Cells of the dynamic program (jobs x states x (capacity + 1), summed over resources)."""
    resource = single_resource(menu)
    if resource is None:
        return -1
    total = 0
    for r in range(menu.num_resources):
        total += int(np.count_nonzero(resource == r)) * menu.num_states * (int(capacity[r]) + 1)
    return total


def exact(
    menu: Menu,
    capacity: IntArray,
    deadline: Deadline = NO_DEADLINE,
    relative_gap: float = 1e-9,
    threads: int = 0,
    cell_limit: int = DP_CELL_LIMIT,
) -> ExactResult:
    """The optimum: dynamic programming over capacity when each job uses one resource and the
    table fits `cell_limit`, else a HiGHS MILP (stopped at `relative_gap` or the deadline)."""
    cells = dp_cells(menu, capacity)
    if 0 <= cells <= cell_limit:
        return _dynamic_program(menu, capacity, deadline)
    return _milp(menu, capacity, deadline, relative_gap, threads)


def _dynamic_program(menu: Menu, capacity: IntArray, deadline: Deadline) -> ExactResult:
    """Per resource r: best[c] = the most value of the jobs so far using at most c units,
    best_i[c] = max_s best_{i-1}[c - d_is] + v_is; the choices are kept to trace back."""
    started = time.perf_counter()
    m, S = menu.num_jobs, menu.num_states
    resource = single_resource(menu)
    assert resource is not None
    state = np.zeros(m, np.int64)
    free = resource < 0
    # jobs that use no resource take their most valuable state
    if free.any():
        state[free] = np.argmax(np.where(menu.offered()[free], menu.value[free], -np.inf), axis=1)
    cells = 0
    for r in range(menu.num_resources):
        jobs = np.nonzero(resource == r)[0]
        if jobs.size == 0:
            continue
        cap = int(capacity[r])
        best = np.zeros(cap + 1)
        choice = np.zeros((jobs.size, cap + 1), np.int32)
        columns = np.arange(cap + 1)
        for k, i in enumerate(jobs):
            if k and deadline.expired():  # a job's row costs S x (capacity + 1) cells
                return _stopped(menu, started, "dynamic program cut by the deadline")
            d = menu.demand[i, :, r]
            v = menu.value[i]
            source = columns[None, :] - d[:, None]  # (S, cap + 1)
            candidate = np.where(source >= 0, best[np.maximum(source, 0)], -np.inf) + v[:, None]
            choice[k] = np.argmax(candidate, axis=0)
            best = candidate[choice[k], columns]
        cells += jobs.size * S * (cap + 1)
        if not np.isfinite(best[cap]):
            return _stopped(menu, started, "no base allocation fits the capacity")
        c = cap
        for k in range(jobs.size - 1, -1, -1):
            s = int(choice[k, c])
            state[jobs[k]] = s
            c -= int(menu.demand[jobs[k], s, r])
    objective, used = evaluate(menu, state)
    elapsed = time.perf_counter() - started
    allocation = MenuAllocation(state, objective, used, "dynamic program over capacity")
    resources = int(np.count_nonzero(np.bincount(resource[resource >= 0],
                                                 minlength=menu.num_resources)))
    size = ModelSize(variables=int(np.count_nonzero(menu.offered())), constraints=resources)
    return ExactResult(
        allocation, objective, SolverStatus.OPTIMAL, "dynamic program", "", elapsed, size,
        f"{cells} table cells",
    )


def _stopped(menu: Menu, started: float, why: str) -> ExactResult:
    return ExactResult(
        None, None, SolverStatus.TIME_LIMIT if "deadline" in why else SolverStatus.ERROR,
        "dynamic program", "", time.perf_counter() - started, ModelSize(), why,
    )


def _milp(
    menu: Menu, capacity: IntArray, deadline: Deadline, relative_gap: float, threads: int
) -> ExactResult:
    """z[i, s] in {0, 1} per offered state: sum_s z[i, s] = 1, sum demand z <= capacity."""
    m, R = menu.num_jobs, menu.num_resources
    ii, ss = np.nonzero(menu.offered())
    nv = ii.size
    dem = menu.demand[ii, ss]  # (nv, R)
    dr, dc = np.nonzero(dem.T)
    rows = np.concatenate([ii, m + dr])
    cols = np.concatenate([np.arange(nv), dc])
    vals = np.concatenate([np.ones(nv), dem.T[dr, dc].astype(np.float64)])
    matrix = sp.csc_matrix((vals, (rows, cols)), shape=(m + R, nv))
    model = LinearModel(
        cost=np.asarray(menu.value[ii, ss], np.float64),
        matrix=matrix,
        row_lower=np.concatenate([np.ones(m), np.full(R, -INFINITY)]),
        row_upper=np.concatenate([np.ones(m), np.asarray(capacity, np.float64)]),
        col_lower=np.zeros(nv),
        col_upper=np.ones(nv),
        integer=np.ones(nv, dtype=bool),
        maximize=True,
    )
    settings = HighsSettings(mip_rel_gap=relative_gap, threads=threads, startup=MILP)
    result = solve_highs(model, settings, deadline)
    allocation: MenuAllocation | None = None
    if result.has_solution:
        state = np.zeros(m, np.int64)
        picked = result.x > 0.5
        state[ii[picked]] = ss[picked]
        objective, used = evaluate(menu, state)
        allocation = MenuAllocation(state, objective, used, "MILP over menu states",
                                    complete=result.status.solved)
    bound = result.bound
    if allocation is not None and bound is not None:
        bound = max(bound, allocation.objective)  # HiGHS's bound, never below a known point
    return ExactResult(
        allocation, bound, result.status, result.solver, result.solver_version,
        result.solve_time_s, result.size, result.detail,
    )
