"""AlloX: min-cost bipartite matching of jobs to (device, position) slots (A3,
docs/policies/allox.md).

The problem (Le et al., EuroSys 2020; Horn 1973; Bruno, Coffman and Sethi 1974). Pending jobs
i, devices g (each of one accelerator type, which may be a CPU type), processing time
``p[i, g] = remaining_steps_i / throughput[i, type(g)]`` (s; no arc where the throughput is 0),
device free time ``tau_g = max(now, end of the job holding it)``. Each device runs its jobs back
to back, non-preemptively, from tau_g. A job that is k-th *from last* on g delays itself and
the k - 1 jobs after it by p[i, g], so with ``Q[i, (g, k)] = tau_g - a_i + k * p[i, g]``

    minimize  sum_i sum_(g,k) Q[i,(g,k)] y[i,(g,k)]
    s.t.      sum_(g,k) y[i,(g,k)] = 1   (every job i; dual u_i, free)
              sum_i y[i,(g,k)] <= 1      (every slot; dual v_(g,k) <= 0),  y >= 0

equals the total flow time sum_i (C_i - a_i) of the decoded schedule (each device runs its jobs
in decreasing k from tau_g). The constraint matrix is that of a bipartite transportation
problem, hence totally unimodular: the LP has an integral optimum.

**Grouping.** Devices of one type with the same free time tau are interchangeable. For a group
h of W_h such devices we use slots (h, k) of capacity W_h and cost tau_h - a_i + k p[i, h]; a
grouped flow with n_(h,k) jobs at position k decodes to devices, and the grouped LP has the
same optimum as the per-device one (any per-device solution aggregates to a grouped one of the
same cost, and the decoding below gives the converse).

**Positions beyond ceil(q / W) are never needed.** Claim: in every optimal solution, a group h
of W machines that receives q jobs uses positions 1..ceil(q/W) only. Proof. (1) No gaps: if a
job sits at position k + 1 of the group while fewer than W jobs sit at position k, moving it
to position k lowers its cost by p > 0; so n_(h,1) >= n_(h,2) >= ..., and giving the n_(h,k)
jobs of position k to machines 1..n_(h,k) puts contiguous positions 1..K_g on every machine g.
(2) Balance: if machine A holds K_A >= K_B + 2 jobs and machine B holds K_B, moving A's
earliest job (position K_A from last) to the front of B (position K_B + 1) changes its cost from
tau_h - a + K_A p to tau_h - a + (K_B + 1) p (the other jobs keep their positions and the
machines share tau_h), strictly less since p > 0. So in an optimal solution the machine counts
differ by at most 1, each machine holds at most ceil(q/W) jobs, and positions above
ceil(q/W) <= ceil(N_h/W_h) stay empty (N_h = jobs that can run on the type). QED.
Consequently a model with positions 1..ceil(N_h/W_h) + 1 leaves its last position empty in
every optimal (integral, hence by total unimodularity every optimal fractional) solution, and
by complementary slackness every optimal dual has v = 0 there; positions further out cost
more, so the model's duals are feasible for the untruncated problem.

**Job classes.** In sum_i (C_i - a_i) the a_i are constants, so jobs with identical rows
P[i, :] are interchangeable. The LP is written over classes of such jobs (supply = the
class's size instead of 1): still a transportation problem with integral data, so it has the
same optimum and integral vertices; a class's jobs, in job order, take its groups in group
order, y[c, h] jobs each (any order gives the same total). Snapshots whose jobs come from a
catalog of (model, steps) shrink by orders of magnitude; distinct rows do not shrink.

**Solve.** The grouped LP is solved with HiGHS (interior point with crossover to a vertex).
Positions are generated lazily: each group starts with a few positions; after each solve the
duals are priced against the first missing position of every group (v = 0 there) and the
groups whose next position prices out negatively get twice as many positions, up to
ceil(N_h/W_h) + 1. When nothing prices out, the restricted LP's duals are feasible for the
full problem, so its optimum is the full optimum. (Many devices with distinct busy-until times
make many groups of one device; the model then grows like Gavel's, but only by the positions
the duals ask for.)

**Time.** A round is started only when HiGHS can be expected to end it in the time left
(`lp_seconds`, scaled up by how much longer than estimated the previous round took): stopped
at its limit, the LP leaves no usable point. The LP's deadline leaves time to decode the
matching into queues. After an earlier round, its restricted optimum (a feasible matching) is
kept. Without a solved round the plan is the best schedule of: every job on its fastest group;
the point of an LP stopped at its limit, if any (at 100,000 jobs such a point was 2.4x worse
than the fastest groups); and every job at its cheapest slot under the duals of the LP over a
random sample of the job classes (each slot's capacity scaled by the sample's share of the
jobs; as large as the time left allows, at most `SAMPLE_CLASSES`). Either way the plan is
feasible and time-limited, never `optimal`, and the sample's duals give the bound when they
give a higher one.

**Certificate, independent of the method.** The returned plan is decoded from the grouping
only: each group's jobs are scheduled optimally for that group (largest p at position 1, the
next W at position 2, ... = shortest-processing-time first on every device), and the objective
is recomputed from the simulated schedule as sum_i (C_i - a_i). The bound is the dual
objective sum_i u_i + sum_s cap_s v_s of v = min(0, solver duals) with u_i recomputed as the
smallest reduced cost min_s (Q[i,s] - v_s) over *all* slots (every position of every group,
v = 0 outside the model); it is a valid lower bound for any v <= 0 (weak duality), so it is
reported also when the LP was stopped or not started (with a sample's duals, or v = 0: every
job at its best slot). OPTIMAL means the relative gap is at most 1e-9 (A3 numerical notes).

**Online setting** (policy `allox`). Running jobs (history `current`) are never preempted:
they keep their devices, which become free at `busy_until_s` (or, when that is not after
`time_s`, at time_s + remaining_steps / throughput on the current type, or now when that is
unknown). Only servable pending jobs are matched: scale factor 1 (AlloX's model has no gangs;
a multi-device job gets JOB_STATUS_UNSERVABLE with a reason rather than being treated as a
1-device job), `progress.total_steps` > 0 (AlloX needs the remaining work; 0 = unknown ->
UNSERVABLE with a reason), remaining work > 0 (otherwise FINISHED, predicted completion =
now), and a positive throughput on some type with devices. The alpha filter keeps the
ceil(alpha * |P|) longest-waiting of them (arrival time, then id), at least as many as there
are free devices; compat=gavel uses floor as Gavel does. Priority weights are ignored: with
weights, R||sum w_j C_j is strongly NP-hard and the matching is exact for unit weights only.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.solver.arrays import BoolArray
from apportion.solver.backends.highs import (
    INFINITY,
    HighsSettings,
    LinearModel,
    highs_version,
    solve_highs,
)
from apportion.solver.backends.highs_startup import INTERIOR_POINT_LP, can_start
from apportion.solver.backends.status import SolverStatus
from apportion.solver.certificate import termination
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import Compat, FloatArray, IntArray, Problem, SolveOptions
from apportion.solver.parameters import AlloxParameters
from apportion.solver.queue_plan import take_rows
from apportion.solver.result import (
    Certificate,
    JobStatus,
    ModelSize,
    Plan,
    QueueSection,
    relative_gap,
)
from apportion.solver.row_classes import identical_rows

MAX_PRICING_ROUNDS = 64
DECODE_S_PER_ITEM = 1e-6
"""Time (s) the LP leaves, per matched job and per device, to decode its matching into the
plan's queue section (measured in process: 0.11 s for 67,702 matched jobs on 75,000 devices,
0.8 us per item, at load average 7 on a 2-core machine). The response is the service's
reserve (by plan kind), not this."""
SAMPLE_CLASSES = 2000
"""When the whole LP cannot end in time, the LP over a sample of at most this many job classes
(slot capacities scaled to the sample's share of the jobs) prices every job's slots (measured
at 100,000 jobs: 1,000 sampled jobs placed them within 2e-5 of the optimum with a bound within
3e-5 of it, against 2e-3 and 3e-2 on each job's fastest group; 0.13 s of CPU)."""
MIN_SAMPLE_CLASSES = 8
PRICE_S_PER_JOB = 1e-6
"""Time (s) per job to price, schedule and bound the sample's plan (measured: 0.07 s of CPU for
70,000 jobs)."""
LP_OVERHEAD_S = 0.005
LP_S_PER_NONZERO = 1.8e-6
LP_GROWTH_NONZEROS = 500_000
"""HiGHS solves the transportation LP to its end (interior point, crossover) in about
`LP_OVERHEAD_S` + `LP_S_PER_NONZERO` x nonzeros x (1 + nonzeros / `LP_GROWTH_NONZEROS`) s
(measured on a 2-core machine from the CPU time under load: 2-5 ms for a few hundred nonzeros,
0.2 s at 100,000 nonzeros, 1.2 s at 400,000, 3.6 s at 800,000, about 8 s at 1.26 million). A
round that cannot end in the time left is not started: stopped at its limit, the LP's point is
no plan worth the time (at 100,000 jobs: 2.4x the flow time of every job on its fastest
group)."""


# --------------------------------------------------------------------------------------------
# the matching core (no problem model: arrays in, arrays out)


@dataclass(frozen=True)
class Matching:
    """A matching of N jobs to H device groups (optimal when `status` is) and its certificate."""

    group: IntArray
    """(N,) group of each job."""
    position: IntArray
    """(N,) position from last (1 = runs last on its machine)."""
    machine: IntArray
    """(N,) machine index within the group (0..W_h-1)."""
    start: FloatArray
    """(N,) planned start (s)."""
    completion: FloatArray
    """(N,) predicted completion C_i (s)."""
    objective: float
    """sum_i (C_i - a_i) of the decoded schedule (s)."""
    bound: float | None
    """Dual objective of (u, v): a proven lower bound on the optimum (with v = 0 when no LP was
    solved)."""
    u: FloatArray
    """(N,) job duals u_i = min_s (Q[i,s] - v_s)."""
    v: tuple[FloatArray, ...]
    """Per group, duals v[h][k-1] <= 0 of positions k = 1..K_h (0 beyond)."""
    status: SolverStatus
    """Of the last LP."""
    solver_version: str = ""
    solve_time_s: float = 0.0
    variables: int = 0
    constraints: int = 0
    rounds: int = 0
    classes: int = 0
    """Job classes (jobs with identical processing-time rows) the LP was written over."""
    note: str = ""
    """Why the matching is not the LP's (the LP not started or stopped), or ""."""


def schedule_groups(
    P: FloatArray, tau: FloatArray, W: IntArray, group: IntArray
) -> tuple[IntArray, IntArray, FloatArray, FloatArray]:
    """Optimal schedule of each group's jobs on its W_h identical machines (P||sum C_j: SPT
    list scheduling). Returns (position from last, machine, start, completion) per job."""
    N = group.size
    position = np.zeros(N, np.int64)
    machine = np.zeros(N, np.int64)
    start = np.zeros(N)
    completion = np.zeros(N)
    if N == 0:
        return position, machine, start, completion
    jobs = np.arange(N)
    p = P[jobs, group]
    # by group, longest first, ties by job index
    order = np.lexsort((jobs, -p, group))
    g = group[order]
    begins = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    r = jobs - np.repeat(begins, np.diff(np.r_[begins, N]))  # rank within the group
    width = W[g]
    position[order] = r // width + 1
    machine[order] = r % width
    # run order on each machine: decreasing r (shortest first); back to back from tau_h
    run = order[np.lexsort((-r, r % width, g))]
    g_run, mach, p_run = group[run], machine[run], p[run]
    cum = np.empty(N)
    for b, e in zip(begins.tolist(), np.r_[begins[1:], N].tolist(), strict=True):
        cum[b:e] = np.cumsum(p_run[b:e])  # per group (the runs keep the groups' order)
    first = np.r_[True, (mach[1:] != mach[:-1]) | (g_run[1:] != g_run[:-1])]
    # the offset of a machine's block = cum before its first job
    offset = (cum - p_run)[np.maximum.accumulate(np.where(first, jobs, 0))]
    start[run] = tau[g_run] + (cum - p_run - offset)  # exactly tau_h for a machine's first job
    completion[run] = start[run] + p_run
    return position, machine, start, completion


def _lp_size(R: FloatArray, K: IntArray) -> ModelSize:
    """The size of the LP over classes with rows R (C, H) and positions 1..K_h, before it is
    built."""
    arcs = int(np.isfinite(R).sum(axis=0) @ K)
    return ModelSize(variables=arcs, constraints=R.shape[0] + int(K.sum()), nonzeros=2 * arcs)


def lp_seconds(size: ModelSize) -> float:
    """The estimated time (s) to solve a transportation LP of `size` to its end."""
    nonzeros = size.nonzeros
    return LP_OVERHEAD_S + LP_S_PER_NONZERO * nonzeros * (1.0 + nonzeros / LP_GROWTH_NONZEROS)


def _can_finish(deadline: Deadline, size: ModelSize, slowdown: float) -> bool:
    """Whether an LP of `size` can be solved to its end by `deadline` (always without one):
    `slowdown` x the estimate (>= 1: how much longer than estimated an earlier round took, on
    the deadline's clock)."""
    return can_start(deadline, INTERIOR_POINT_LP, size) and \
        deadline.remaining() >= slowdown * lp_seconds(size)


def _solve_lp(
    R: FloatArray, count: FloatArray, base: FloatArray, capacity: FloatArray, K: IntArray,
    deadline: Deadline, threads: int, slowdown: float,
) -> tuple[SolverStatus, FloatArray, FloatArray, float, ModelSize]:
    """Grouped transportation LP over C job classes (class c: `count[c]` jobs with processing
    times R[c, :]) and positions 1..K_h of `capacity[h]` jobs each. Returns (status, jobs per
    class and group y (C, H), v per slot (S,), solve seconds, model size); not started
    (TIME_LIMIT, y = 0, 0 s) when it cannot end by `deadline` (`_can_finish`)."""
    C, H = R.shape
    slot_group = np.repeat(np.arange(H), K)
    S = slot_group.size
    size = _lp_size(R, K)
    if not _can_finish(deadline, size, slowdown):
        return SolverStatus.TIME_LIMIT, np.zeros((C, H)), np.zeros(S), 0.0, size
    slot_k = np.concatenate([np.arange(1, k + 1) for k in K]).astype(np.float64)
    allowed = np.isfinite(R)[:, slot_group]
    rows, cols = np.nonzero(allowed)
    cost = base[slot_group[cols]] + slot_k[cols] * R[rows, slot_group[cols]]
    nvar = rows.size
    matrix = sp.csc_matrix(
        (np.ones(2 * nvar), np.stack([rows, C + cols], axis=1).ravel(),
         np.arange(0, 2 * nvar + 1, 2)),
        shape=(C + S, nvar),
    )
    model = LinearModel(  # costs unscaled: HiGHS tolerances are absolute, costs are seconds
        cost=cost,
        matrix=matrix,
        row_lower=np.r_[count, np.full(S, -INFINITY)],
        row_upper=np.r_[count, capacity[slot_group]],
        col_lower=np.zeros(nvar),
        col_upper=np.full(nvar, INFINITY),
    )
    # Interior point + crossover (a vertex): 3-6x faster than simplex on 10^4-10^5 arcs here;
    # it can stall on small degenerate instances (no status at these tolerances), which
    # simplex always settles. Infeasible = too few positions for the jobs of some group.
    settings = HighsSettings(method="ipm", crossover=True, primal_tolerance=1e-10,
                             dual_tolerance=1e-10, threads=threads, fallback_to_simplex=True,
                             startup=INTERIOR_POINT_LP)
    result = solve_highs(model, settings, deadline)
    y = np.zeros((C, H))
    np.add.at(y, (rows, slot_group[cols]), result.x)
    return result.status, y, result.row_dual[C:], result.solve_time_s, model.size


def _cheapest_slot(
    P: FloatArray, base: FloatArray, K: IntArray, v: tuple[FloatArray, ...],
    beyond: bool = True,
) -> tuple[FloatArray, IntArray]:
    """Per row of P: the smallest reduced cost (cost - v) over every slot (positions beyond K_h
    at v = 0; only positions 1..K_h when not `beyond`) and the group of a slot where it is
    reached (the first such group)."""
    N, H = P.shape
    smallest = np.full(N, np.inf)
    group = np.zeros(N, np.int64)
    for h in range(H):
        ok = np.flatnonzero(np.isfinite(P[:, h]))
        if not ok.size:
            continue
        k = np.arange(1, K[h] + 1 + beyond, dtype=np.float64)
        duals = np.r_[v[h], 0.0] if beyond else v[h]
        values = (base[h] + np.outer(P[ok, h], k) - duals[None, :]).min(axis=1)
        better = values < smallest[ok]
        smallest[ok[better]] = values[better]
        group[ok[better]] = h
    return smallest, group


def _sampled_prices(
    R: FloatArray, count: IntArray, base: FloatArray, W: IntArray, K: IntArray,
    deadline: Deadline, threads: int,
) -> tuple[tuple[FloatArray, ...] | None, int, float]:
    """Slot duals (per group, positions 1..K_h) of the LP over a random sample of the classes
    (seeded: the same sample every time), every slot's capacity scaled by the sample's share
    of the jobs: prices for every class. The sample is as large as can be solved, priced and
    scheduled in the time left, at most `SAMPLE_CLASSES`. Returns (duals, sampled classes,
    solve seconds); no duals without time for `MIN_SAMPLE_CLASSES` or when its LP is not
    solved."""
    C = R.shape[0]
    order = np.random.default_rng(0).permutation(C)
    after = PRICE_S_PER_JOB * float(count.sum())
    n = min(C, SAMPLE_CLASSES)
    while n >= MIN_SAMPLE_CLASSES:
        pick = np.sort(order[:n])
        if deadline.remaining() >= lp_seconds(_lp_size(R[pick], K)) + after:
            break
        n //= 2
    else:
        return None, 0, 0.0
    share = float(count[pick].sum()) / float(count.sum())
    status, _, v_flat, elapsed, _ = _solve_lp(
        R[pick], count[pick].astype(np.float64), base, share * W.astype(np.float64), K,
        deadline, threads, 1.0)
    if status is not SolverStatus.OPTIMAL:
        return None, n, elapsed
    return _slot_duals(v_flat, K), n, elapsed


def _slot_duals(v_flat: FloatArray, K: IntArray) -> tuple[FloatArray, ...]:
    """The LP's slot duals per group, v = min(0, dual) (positions 1..K_h)."""
    return tuple(np.minimum(part, 0.0) for part in np.split(v_flat, np.cumsum(K)[:-1]))


def _prices_out(
    R: FloatArray, base: FloatArray, K: IntArray, v: tuple[FloatArray, ...]
) -> NDArray[np.bool_]:
    """(H,) groups whose first missing position K_h + 1 (v = 0 there) has a negative reduced
    cost for some class, against the classes' smallest reduced cost inside the model."""
    inside, _ = _cheapest_slot(R, base, K, v, beyond=False)
    outside = base[None, :] + (K + 1)[None, :] * R
    tol = 1e-10 * max(float(np.max(inside[np.isfinite(inside)], initial=0.0)), 1.0)
    return np.asarray((outside < inside[:, None] - tol).any(axis=0))


def _deal(
    y: FloatArray, count: IntArray, job_class: IntArray, fastest: IntArray
) -> IntArray:
    """Each job's group from its class's LP counts y (C, H): the class's members in job order
    take its groups in group order, y[c, h] jobs each (a vertex is integral; a stopped LP's
    fractional part goes to the group with the largest fraction, what it left unassigned to
    the class's fastest group)."""
    C = y.shape[0]
    whole = np.floor(np.maximum(y, 0.0) + 1e-6)
    whole = np.diff(np.minimum(np.cumsum(whole, axis=1), count[:, None]), axis=1,
                    prepend=0.0)  # never more than the class's jobs, the first groups first
    left = count - whole.sum(axis=1)
    fraction = y - whole
    target = np.where(fraction.max(axis=1, initial=0.0) > 0, np.argmax(fraction, axis=1),
                      fastest)
    whole[np.arange(C), target] += left
    by_class = np.argsort(job_class, kind="stable")
    begins = np.r_[0, np.cumsum(count)[:-1]]
    rank = np.empty(job_class.size, np.int64)
    rank[by_class] = np.arange(job_class.size) - begins[job_class[by_class]]
    ends = np.cumsum(whole, axis=1)
    group: IntArray = (ends[job_class] <= rank[:, None]).sum(axis=1)
    return group


def _dual_objective(smallest: FloatArray, count: IntArray, W: IntArray,
                    v: tuple[FloatArray, ...]) -> float:
    """The dual objective up to the constant sum_i (t0 - a_i): classes' smallest reduced costs
    times their sizes plus the slots' capacities times their duals."""
    return float(smallest @ count) + sum(float(W[h] * part.sum()) for h, part in enumerate(v))


def solve_matching(
    P: FloatArray,
    tau: FloatArray,
    W: IntArray,
    a: FloatArray,
    deadline: Deadline = NO_DEADLINE,
    threads: int = 0,
    initial_positions: IntArray | None = None,
) -> Matching:
    """Minimize sum_i (C_i - a_i) over non-preemptive schedules of N jobs on H groups of
    identical machines (group h: W_h machines free from tau_h; job i takes P[i, h] > 0 s there,
    np.inf = not allowed). Every job needs at least one finite entry.

    The LP is written over job classes (identical rows of P): in
    sum_i (C_i - a_i) the a_i are constants, so such jobs are interchangeable, and the
    transportation LP with supply |class| per class has the same optimum and integral
    vertices. A class's jobs are dealt its groups in job order (`_deal`)."""
    N, H = P.shape
    W = np.asarray(W, np.int64)
    if N == 0:
        empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0)
        zeros = tuple(np.zeros(0) for _ in range(H))
        return Matching(
            empty_i, empty_i, empty_i, empty_f, empty_f, 0.0, 0.0, empty_f, zeros,
            SolverStatus.OPTIMAL,
        )
    t0 = float(tau.min())
    base = np.asarray(tau - t0, dtype=np.float64)
    first, job_class, count = identical_rows(P)  # inf (not allowed) compares equal too
    R = P[first]
    n_h = np.isfinite(P).sum(axis=0)
    cap = np.where(n_h > 0, -(-n_h // W) + 1, 1).astype(np.int64)
    if initial_positions is None:
        M = int(W[n_h > 0].sum())
        K = np.minimum(cap, 2 * (-(-N // max(M, 1))) + 1)
    else:
        K = np.minimum(cap, np.maximum(np.asarray(initial_positions, np.int64), 1))
    K_first = K
    solve_time = 0.0
    rounds = 0
    status = SolverStatus.ERROR
    note = ""
    y = np.zeros(R.shape)  # the last optimal (restricted) LP's counts, or none
    v_flat = np.zeros(int(K.sum()))
    K_solved = K
    size = ModelSize()
    slowdown = 1.0  # how much longer than estimated the rounds took, at least 1
    solved = False  # some round's LP was solved
    while True:
        rounds += 1
        before = deadline.remaining()
        status, y_round, v_round, elapsed, size = _solve_lp(
            R, count.astype(np.float64), base, W.astype(np.float64), K, deadline, threads,
            slowdown)
        solve_time += elapsed
        # a larger round takes longer than this one: scale its estimate by this one's error,
        # timed on the deadline's clock
        spent = before - deadline.remaining()
        if elapsed > 0 and math.isfinite(spent):
            slowdown = max(slowdown, spent / lp_seconds(size))
        if status is SolverStatus.INFEASIBLE and bool((cap > K).any()):
            # Not enough positions where some jobs may run: give every group more. At the cap
            # (ceil(N_h/W_h) + 1 positions) every job fits, so this terminates.
            K = np.minimum(cap, 2 * K)
            continue
        if status is not SolverStatus.OPTIMAL:
            what = ("not started: it could not end in the time left"
                    if elapsed == 0.0 and status is SolverStatus.TIME_LIMIT else f"ended {status}")
            if solved:  # an earlier round's restricted optimum: a feasible matching
                note = f"LP round {rounds} {what}; the plan is round {rounds - 1}'s"
            else:
                y, v_flat, K_solved = y_round, v_round, K
                note = f"LP {what}"
            break
        y, v_flat, K_solved, solved = y_round, v_round, K, True
        grow = _prices_out(R, base, K, _slot_duals(v_flat, K)) & (cap > K)
        if not grow.any() or rounds >= MAX_PRICING_ROUNDS:
            break
        K = np.where(grow, np.minimum(cap, 2 * K), K)
    v = _slot_duals(v_flat, K_solved)
    fastest = np.argmin(R, axis=1)
    group = _deal(y, count, job_class, fastest)
    if not np.all(np.isfinite(P[np.arange(N), group])):  # defensive: never assign a blocked arc
        group = np.where(np.isfinite(P[np.arange(N), group]), group, np.argmin(P, axis=1))
    # the dual objective of (u, v) bounds the optimum for any v <= 0 (the LP's, or 0 when it
    # was not solved), u recomputed as each job's smallest reduced cost over every slot
    smallest, _ = _cheapest_slot(R, base, K_solved, v)
    if solved:
        schedule = schedule_groups(P, tau, W, group)
    else:  # no LP solved: the best schedule of the placements at hand
        options = [("their fastest group", fastest[job_class])]
        if y.any():
            options.append(("the stopped LP's point", group))
        prices, sampled, elapsed = _sampled_prices(R, count, base, W, K_first, deadline,
                                                   threads)
        solve_time += elapsed
        if prices is not None:
            value, cheapest = _cheapest_slot(R, base, K_first, prices)
            options.append((f"their cheapest slot under the slot prices of an LP over "
                            f"{sampled} of {first.size} job classes", cheapest[job_class]))
            if _dual_objective(value, count, W, prices) > _dual_objective(smallest, count, W, v):
                smallest, v = value, prices
        schedules = [schedule_groups(P, tau, W, placed) for _, placed in options]
        best = int(np.argmin([np.sum(each[3] - a) for each in schedules]))  # ties: the first
        group, schedule = options[best][1], schedules[best]
        others = [what for k, (what, _) in enumerate(options) if k != best]
        note += f"; jobs placed at {options[best][0]}" + (
            f" (no worse than at {' or '.join(others)})" if others else "")
    position, machine, start, completion = schedule
    objective = float(np.sum(completion - a))
    u = smallest[job_class] + t0 - a
    bound = float(np.sum(u) + sum(float(W[h] * v[h].sum()) for h in range(H)))
    return Matching(
        group=group,
        position=position,
        machine=machine,
        start=start,
        completion=completion,
        objective=objective,
        bound=bound,
        u=u,
        v=v,
        status=status,
        solver_version=highs_version(),
        solve_time_s=solve_time,
        variables=size.variables,
        constraints=size.constraints,
        rounds=rounds,
        classes=first.size,
        note=note,
    )


# --------------------------------------------------------------------------------------------
# the policy: devices, running jobs, job selection, decoding to devices and nodes


@dataclass(frozen=True)
class _Devices:
    type_index: IntArray
    """(G,) type of each device."""
    local: IntArray
    """(G,) index within its type."""
    node_index: IntArray
    """(G,) node holding the device (index into the cluster's nodes), -1 = none given."""
    free_at: FloatArray
    """(G,) tau_g."""
    holder: IntArray
    """(G,) running job index, -1 = free."""
    held: dict[int, list[int]]
    """running job -> its devices."""


def _device_nodes(problem: Problem, offsets: IntArray) -> tuple[IntArray, IntArray, IntArray]:
    """Nodes fill their type's devices in node order. Returns (node of each device (G,), -1 =
    none; first device and end of each node's range (nodes,))."""
    cluster = problem.cluster
    counts = cluster.count.astype(np.int64)
    node_type = np.asarray(cluster.node_type, np.int64)
    node_devices = np.maximum(np.asarray(cluster.node_devices, np.int64), 0)
    by_type = np.argsort(node_type, kind="stable")
    sorted_devices = node_devices[by_type]
    before_sorted = np.cumsum(sorted_devices) - sorted_devices  # devices of earlier nodes...
    type_first = np.searchsorted(node_type[by_type], node_type[by_type])
    before = np.empty_like(node_devices)
    before[by_type] = before_sorted - before_sorted[type_first]  # ...of the node's own type
    taken = np.clip(counts[node_type] - before, 0, node_devices)
    lo = offsets[node_type] + np.minimum(before, counts[node_type])
    node_of_device = np.full(int(counts.sum()), -1, np.int64)
    nodes = np.repeat(np.arange(node_type.size), taken)
    node_of_device[np.repeat(lo, taken) + np.arange(nodes.size) -
                   np.repeat(np.cumsum(taken) - taken, taken)] = nodes
    return node_of_device, lo, lo + taken


def _take_free(is_held: list[bool], mine: list[int], wanted: int, g: int, end: int) -> int:
    """Append to `mine` the free devices g, g + 1, ... before `end` until it holds `wanted`,
    marking them held; return the device after the last one looked at."""
    while len(mine) < wanted and g < end:
        if not is_held[g]:
            mine.append(g)
            is_held[g] = True
        g += 1
    return g


def _devices(problem: Problem) -> _Devices:
    """The devices, which node holds each, and the running jobs on them: each running job
    keeps, in job order, the first free devices of its type on its nodes, then the first free
    ones of its type (one pass over the devices: a node's or a type's devices are taken in
    order, so a pointer per node and per type suffices)."""
    cluster, jobs, hist = problem.cluster, problem.jobs, problem.history
    now = problem.time_s
    counts = cluster.count.astype(np.int64)
    type_index = np.repeat(np.arange(cluster.num_types), counts)
    offsets = np.r_[0, np.cumsum(counts)[:-1]].astype(np.int64)
    G = int(counts.sum())
    local = np.arange(G, dtype=np.int64) - offsets[type_index]
    node_of_device, node_lo, node_hi = _device_nodes(problem, offsets)
    free_at = np.full(G, now, dtype=np.float64)
    holder = np.full(G, -1, np.int64)
    held: dict[int, list[int]] = {}
    running = np.flatnonzero(hist.running(jobs.num_jobs))
    if running.size == 0:
        return _Devices(type_index, local, node_of_device, free_at, holder, held)
    remaining = jobs.remaining_steps[running]
    current = hist.current_type[running]
    thr = jobs.throughput[running, current]
    until = hist.busy_until_s[running].astype(np.float64)
    known = (jobs.total_steps[running] > 0) & (remaining > 0) & (thr > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = np.where(known, now + remaining / np.where(thr > 0, thr, 1.0), now)
    until = np.maximum(now, np.where(until <= now, estimate, until))
    want = np.where(hist.current_devices[running] > 0, hist.current_devices[running],
                    jobs.scale_factor[running])
    node_next, type_next = node_lo.tolist(), offsets.tolist()
    node_end, type_end = node_hi.tolist(), (offsets + counts).tolist()
    is_held = [False] * G
    for i, t, wanted, ends in zip(running.tolist(), current.tolist(), want.tolist(),
                                  until.tolist(), strict=True):
        mine: list[int] = []
        # the job's nodes that hold devices of its type, in device order
        nodes = sorted({k for k in hist.current_nodes[i] if node_lo[k] < node_hi[k] and
                        offsets[t] <= node_lo[k] < type_end[t]}, key=lambda k: node_next[k])
        for k in nodes:
            node_next[k] = _take_free(is_held, mine, wanted, node_next[k], node_end[k])
        g = _take_free(is_held, mine, wanted, type_next[t], type_end[t])
        while g < type_end[t] and is_held[g]:
            g += 1
        type_next[t] = g
        holder[mine] = i
        free_at[mine] = ends
        held[i] = mine
    return _Devices(type_index, local, node_of_device, free_at, holder, held)


def _select(
    problem: Problem, parameters: AlloxParameters, compat: Compat, free_devices: int
) -> tuple[IntArray, list[JobStatus], list[str], BoolArray]:
    """(matched job indices, status per job, reason per job, the finished jobs)."""
    jobs = problem.jobs
    m = jobs.num_jobs
    pending = ~problem.history.running(m)
    remaining = jobs.remaining_steps
    has_devices = problem.cluster.count > 0
    status = [JobStatus.ALLOCATED] * m
    reason = [""] * m
    gang = pending & (jobs.scale_factor > 1)
    unknown = pending & ~gang & ~(jobs.total_steps > 0)
    finished = pending & ~gang & ~unknown & ~(remaining > 0)
    nowhere = pending & ~gang & ~unknown & ~finished & ~(
        (jobs.throughput > 0) & has_devices[None, :]).any(axis=1)
    for i in np.flatnonzero(gang):
        status[i] = JobStatus.UNSERVABLE
        reason[i] = (
            f"scale_factor {int(jobs.scale_factor[i])} > 1: AlloX matches one device per "
            "job and has no model of gang-scheduled multi-device jobs"
        )
    for mask, state, why in (
        (unknown, JobStatus.UNSERVABLE, "progress.total_steps is 0 (unknown): AlloX needs the "
         "remaining work to compute processing times"),
        (finished, JobStatus.FINISHED, "no remaining work (steps_done = total_steps)"),
        (nowhere, JobStatus.UNSERVABLE,
         "no accelerator type with devices on which the job has throughput > 0"),
    ):
        for i in np.flatnonzero(mask):
            status[i], reason[i] = state, why
    eligible = np.flatnonzero(pending & ~gang & ~unknown & ~finished & ~nowhere)
    ids = np.asarray(jobs.ids, dtype=object)[eligible]
    order = eligible[np.lexsort((ids, jobs.arrival_time_s[eligible]))]  # longest waiting first
    q = order.size
    keep = (
        math.floor(parameters.alpha * q)
        if compat is Compat.GAVEL
        else math.ceil(parameters.alpha * q - 1e-12)
    )
    keep = min(q, max(keep, free_devices))
    if keep < q:
        why = (f"alpha = {parameters.alpha:g}: this round matches the {keep} longest-waiting of "
               f"{q} pending jobs")
        for i in order[keep:]:
            status[i], reason[i] = JobStatus.DEFERRED, why
    return np.sort(order[:keep]).astype(np.int64), status, reason, finished


def _groups(dev: _Devices) -> tuple[IntArray, IntArray, FloatArray, IntArray, IntArray]:
    """Device groups (type, free time), sorted by both. Returns (group of each device (G,),
    devices of every group in group order and device order within (G,), tau (H,), W (H,),
    type of each group (H,))."""
    members = np.lexsort((dev.free_at, dev.type_index)).astype(np.int64)
    t, f = dev.type_index[members], dev.free_at[members]
    new = np.r_[True, (t[1:] != t[:-1]) | (f[1:] != f[:-1])][: members.size]
    g_group = np.empty(members.size, np.int64)
    g_group[members] = np.cumsum(new) - 1
    begins = np.flatnonzero(new)
    W = np.diff(np.r_[begins, members.size]).astype(np.int64)
    return g_group, members, f[begins], W, t[begins].astype(np.int64)


def _queues(
    problem: Problem, dev: _Devices, matched: IntArray, device: IntArray,
    result: Matching, g_group: IntArray,
) -> tuple[QueueSection, FloatArray]:
    """The plan's queue section and time shares from each matched job's device: its position
    in the device's queue (by planned start, then job index), whether it starts now; the jobs
    holding devices."""
    jobs, now = problem.jobs, problem.time_s
    m, n = jobs.num_jobs, problem.cluster.num_types
    G = dev.type_index.size
    time_share = np.zeros((m, n))
    rank = np.lexsort((matched, result.start, device))  # rows by device, start, job
    on = device[rank]
    first = np.r_[True, on[1:] != on[:-1]][: rank.size]
    run_start = np.maximum.accumulate(np.where(first, np.arange(rank.size), 0))
    position = np.empty(rank.size, np.int64)
    position[rank] = np.arange(rank.size) - run_start + 1
    starts_now = (position == 1) & (dev.free_at[device] <= now)
    time_share[matched[starts_now], dev.type_index[device[starts_now]]] = 1.0
    type_index = np.full(m, -1, np.int64)
    place = np.zeros(m, np.int64)
    start, completion = np.zeros(m), np.zeros(m)
    start_now, running = np.zeros(m, bool), np.zeros(m, bool)
    type_index[matched] = dev.type_index[device]
    place[matched] = position
    start[matched], completion[matched] = result.start, result.completion
    start_now[matched] = starts_now
    held = np.fromiter(dev.held, np.int64, len(dev.held))
    held_count = np.fromiter(map(len, dev.held.values()), np.int64, held.size)
    held_devices = np.fromiter(
        (g for mine in dev.held.values() for g in mine), np.int64, int(held_count.sum()))
    if held.size:
        current = problem.history.current_type[held].astype(np.int64)
        type_index[held] = current
        time_share[held, current] = 1.0
        owner = np.repeat(np.arange(held.size), held_count)
        until = np.full(held.size, now)
        np.maximum.at(until, owner, dev.free_at[held_devices])
        start[held], completion[held] = now, until
        running[held] = True
    count = np.zeros(m, np.int64)
    count[matched] = 1
    count[held] = held_count
    job_offsets = np.r_[0, np.cumsum(count)].astype(np.int64)
    job_devices = np.zeros(int(job_offsets[-1]), np.int64)
    job_devices[job_offsets[matched]] = device
    _, item = take_rows(job_offsets, held)
    job_devices[item] = held_devices
    duals = list(result.v) + [np.zeros(0)] * (int(g_group.max(initial=-1)) + 1 - len(result.v))
    dual_offsets = np.r_[0, np.cumsum([part.size for part in duals])].astype(np.int64)
    section = QueueSection(
        type_index, place, start, completion, start_now, running, job_offsets, job_devices,
        dev.type_index.astype(np.int64), dev.local, dev.node_index, problem.cluster.node_names,
        dev.free_at, dev.holder, np.r_[0, np.cumsum(np.bincount(device, minlength=G))].astype(
            np.int64), matched[rank].astype(np.int64), g_group,
        dual_offsets, np.concatenate([np.zeros(0), *duals]).astype(np.float64))
    return section, time_share


def solve_policy(
    problem: Problem,
    parameters: AlloxParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """AlloX on a validated snapshot (see the module docstring)."""
    started = time.perf_counter()
    jobs, cluster = problem.jobs, problem.cluster
    m, n = jobs.num_jobs, cluster.num_types
    now = problem.time_s
    dev = _devices(problem)
    free_now = int(np.sum((dev.holder < 0) | (dev.free_at <= now)))
    matched, status, reason, finished = _select(problem, parameters, compat, free_now)
    g_group, members, tau, W, group_type = _groups(dev)
    H = W.size
    thr = jobs.throughput[matched][:, group_type] if H else np.zeros((matched.size, 0))
    rem = jobs.remaining_steps[matched]
    with np.errstate(divide="ignore"):
        P = np.where(thr > 0, rem[:, None] / np.where(thr > 0, thr, 1.0), np.inf)
    build = time.perf_counter() - started
    # the LP leaves time to decode its matching into queues (below)
    lp_deadline = deadline.leaving(DECODE_S_PER_ITEM * (matched.size + dev.type_index.size))
    result = solve_matching(P, tau, W, jobs.arrival_time_s[matched], lp_deadline, options.threads)
    offsets = np.r_[0, np.cumsum(W)].astype(np.int64)
    device = members[offsets[result.group] + result.machine]
    queues, time_share = _queues(problem, dev, matched, device, result, g_group)
    objective_value = np.zeros(m)
    objective_value[matched] = result.completion - jobs.arrival_time_s[matched]
    job_dual = np.zeros(m)
    job_dual[matched] = result.u
    objective_value[finished] = 0.0

    effective = np.einsum("ij,ij->i", jobs.throughput, time_share)
    # the decoded schedule is feasible whatever the LP's status: a plan at a limit
    ended = termination(result.status, True, relative_gap(result.objective, result.bound),
                        options.relative_gap)
    detail = "objective = total JCT sum_i (C_i - a_i) of the matched jobs (s)"
    if result.note:
        detail += f"; {result.note}; the bound is the dual objective of the reported duals"
    cert = Certificate(
        termination=ended,
        maximize=False,
        objective=result.objective,
        bound=result.bound,
        solver="highs" if matched.size else "none",
        solver_version=result.solver_version,
        formulation=(
            "allox: transportation LP over (device group, position) slots, positions priced "
            f"lazily ({result.rounds} LP rounds, {H} groups, {result.classes} job classes)"
        ),
        build_time_s=build,
        solve_time_s=result.solve_time_s,
        model_size=ModelSize(
            variables=result.variables,
            constraints=result.constraints,
            nonzeros=2 * result.variables,
        ),
        detail=detail,
    )
    return Plan(
        time_share=time_share,
        effective_throughput=effective,
        normalized_throughput=np.zeros(m),
        objective_value=objective_value,
        job_dual=job_dual,
        accelerator_prices=np.zeros(n),
        certificate=cert,
        job_status=tuple(status),
        job_reason=tuple(reason),
        queues=queues,
    )


__all__ = ["Matching", "schedule_groups", "solve_matching", "solve_policy"]
