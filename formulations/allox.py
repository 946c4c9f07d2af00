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

**Solve.** The grouped LP is solved with HiGHS (interior point with crossover to a vertex).
Positions are generated lazily: each group starts with a few positions; after each solve the
duals are priced against
the first missing position of every group (v = 0 there) and the groups whose next position
prices out negatively get twice as many positions, up to ceil(N_h/W_h) + 1. When nothing
prices out, the restricted LP's duals are feasible for the full problem, so its optimum is the
full optimum. (Many devices with distinct busy-until times make many groups of one device;
the model then grows like Gavel's, but only by the positions the duals ask for.)

**Certificate, independent of the method.** The returned plan is decoded from the grouping
only: each group's jobs are scheduled optimally for that group (largest p at position 1, the
next W at position 2, ... = shortest-processing-time first on every device), and the objective
is recomputed from the simulated schedule as sum_i (C_i - a_i). The bound is the dual
objective sum_i u_i + sum_s cap_s v_s of v = min(0, solver duals) with u_i recomputed as the
smallest reduced cost min_s (Q[i,s] - v_s) over *all* slots (every position of every group,
v = 0 outside the model); it is a valid lower bound for any v <= 0 (weak duality). OPTIMAL
means the relative gap is at most 1e-9 (A3 numerical notes).

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

from apportion.solver.backends.highs import (
    INFINITY,
    HighsSettings,
    LinearModel,
    highs_version,
    solve_highs,
)
from apportion.solver.backends.highs_startup import INTERIOR_POINT_LP, SIMPLEX_LP, can_start
from apportion.solver.backends.status import SolverStatus
from apportion.solver.certificate import termination
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import Compat, FloatArray, IntArray, Problem, SolveOptions
from apportion.solver.parameters import AlloxParameters
from apportion.solver.result import (
    Certificate,
    DeviceQueue,
    JobStatus,
    ModelSize,
    Plan,
    QueueAssignment,
    QueueSection,
    relative_gap,
)

MAX_PRICING_ROUNDS = 64
DECODE_S_PER_ITEM = 6e-6
"""Time (s) the LP leaves, per matched job and per device, for decoding its matching into
queues (measured: about 1 s for 100,000 jobs on 75,000 devices on a loaded 2-core machine)."""


# --------------------------------------------------------------------------------------------
# the matching core (no problem model: arrays in, arrays out)


@dataclass(frozen=True)
class Matching:
    """An optimal matching of N jobs to H device groups and its certificate."""

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
    """Dual objective of (u, v): a proven lower bound on the optimum (None if no duals)."""
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
    for h in np.unique(group):
        jobs = np.nonzero(group == h)[0]
        p = P[jobs, h]
        order = jobs[np.lexsort((jobs, -p))]  # longest first, ties by job index
        r = np.arange(order.size)
        position[order] = r // W[h] + 1
        machine[order] = r % W[h]
        # run order on machine m: decreasing r (shortest first); back to back from tau_h
        run = order[np.lexsort((-r, r % W[h]))]
        mach = machine[run]
        p_run = P[run, h]
        cum = np.cumsum(p_run)
        first = np.r_[True, mach[1:] != mach[:-1]]
        offset = np.maximum.accumulate(np.where(first, cum - p_run, 0.0))
        # offset of a machine's block = cum before its first job (non-decreasing along `run`)
        start[run] = tau[h] + (cum - p_run - offset)  # exactly tau_h for a machine's first job
        completion[run] = start[run] + p_run
    return position, machine, start, completion


def _solve_lp(
    P: FloatArray, base: FloatArray, W: IntArray, K: IntArray, deadline: Deadline, threads: int
) -> tuple[SolverStatus, FloatArray, FloatArray, float, int, int]:
    """Grouped transportation LP with positions 1..K_h. Returns (status, y per job and group
    (N, H), v per slot (S,), solve seconds, variables, rows)."""
    N, H = P.shape
    slot_group = np.repeat(np.arange(H), K)
    slot_k = np.concatenate([np.arange(1, k + 1) for k in K]).astype(np.float64)
    S = slot_group.size
    allowed = np.isfinite(P)[:, slot_group]
    rows, cols = np.nonzero(allowed)
    cost = base[slot_group[cols]] + slot_k[cols] * P[rows, slot_group[cols]]
    scale = 1.0  # unscaled: HiGHS tolerances are absolute, costs are seconds
    scale = scale if scale > 0 else 1.0
    nvar = rows.size
    matrix = sp.csc_matrix(
        (np.ones(2 * nvar), np.stack([rows, N + cols], axis=1).ravel(),
         np.arange(0, 2 * nvar + 1, 2)),
        shape=(N + S, nvar),
    )
    model = LinearModel(
        cost=cost / scale,
        matrix=matrix,
        row_lower=np.r_[np.ones(N), np.full(S, -INFINITY)],
        row_upper=np.r_[np.ones(N), W[slot_group].astype(np.float64)],
        col_lower=np.zeros(nvar),
        col_upper=np.full(nvar, INFINITY),
    )
    # Interior point + crossover (a vertex): 3-6x faster than simplex on 10^4-10^5 arcs here;
    # it can stall on small degenerate instances (no status at these tolerances), which
    # simplex always settles. Infeasible = too few positions for the jobs of some group.
    # Interior point cannot stop before its first iteration: with too little time for that,
    # simplex (it reads the time limit often) returns the best point it reached instead of
    # overrunning the deadline; with too little for simplex's setup, nothing is started.
    short = not can_start(deadline, INTERIOR_POINT_LP, model.size)
    settings = HighsSettings(method="simplex" if short else "ipm", crossover=True,
                             primal_tolerance=1e-10, dual_tolerance=1e-10, threads=threads,
                             fallback_to_simplex=True, startup=SIMPLEX_LP)
    result = solve_highs(model, settings, deadline)
    y = np.zeros((N, H))
    np.add.at(y, (rows, slot_group[cols]), result.x)
    v = scale * result.row_dual[N:]
    return result.status, y, v, result.solve_time_s, nvar, N + S


def _reduced_minimum(
    P: FloatArray, base: FloatArray, K: IntArray, v: tuple[FloatArray, ...]
) -> tuple[FloatArray, FloatArray]:
    """(min over model slots of (cost - v), (N, H) cost of each group's first missing slot)."""
    N, H = P.shape
    inside = np.full(N, np.inf)
    outside = np.full((N, H), np.inf)
    for h in range(H):
        ok = np.isfinite(P[:, h])
        if not ok.any():
            continue
        k = np.arange(1, K[h] + 1, dtype=np.float64)
        values = base[h] + np.outer(P[ok, h], k) - v[h][None, :]
        inside[ok] = np.minimum(inside[ok], values.min(axis=1))
        outside[ok, h] = base[h] + (K[h] + 1) * P[ok, h]
    return inside, outside


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
    np.inf = not allowed). Every job needs at least one finite entry."""
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
    n_h = np.isfinite(P).sum(axis=0)
    cap = np.where(n_h > 0, -(-n_h // W) + 1, 1).astype(np.int64)
    if initial_positions is None:
        M = int(W[n_h > 0].sum())
        K = np.minimum(cap, 2 * (-(-N // max(M, 1))) + 1)
    else:
        K = np.minimum(cap, np.maximum(np.asarray(initial_positions, np.int64), 1))
    solve_time = 0.0
    rounds = 0
    status = SolverStatus.ERROR
    y = np.zeros((N, H))
    v_flat = np.zeros(int(K.sum()))
    nvar = nrows = 0
    while True:
        rounds += 1
        status, y, v_flat, elapsed, nvar, nrows = _solve_lp(P, base, W, K, deadline, threads)
        solve_time += elapsed
        if status is SolverStatus.INFEASIBLE and bool((cap > K).any()):
            # Not enough positions where some jobs may run: give every group more. At the cap
            # (ceil(N_h/W_h) + 1 positions) every job fits, so this terminates.
            if deadline.remaining() < elapsed:  # no time for a larger LP than this one
                status = SolverStatus.TIME_LIMIT  # the instance is feasible; time ran out
                break
            K = np.minimum(cap, 2 * K)
            continue
        if status is not SolverStatus.OPTIMAL:
            break
        v = tuple(np.minimum(part, 0.0) for part in np.split(v_flat, np.cumsum(K)[:-1]))
        inside, outside = _reduced_minimum(P, base, K, v)
        tol = 1e-10 * max(float(np.max(inside[np.isfinite(inside)], initial=0.0)), 1.0)
        grow = ((outside < inside[:, None] - tol).any(axis=0)) & (cap > K)
        # a next round takes at least as long as this one: not started without that time
        if not grow.any() or rounds >= MAX_PRICING_ROUNDS or deadline.remaining() < elapsed:
            break
        K = np.where(grow, np.minimum(cap, 2 * K), K)
    v = tuple(np.minimum(part, 0.0) for part in np.split(v_flat, np.cumsum(K)[:-1]))
    has_point = status is SolverStatus.OPTIMAL or status.limit_reached
    fastest = np.argmin(P, axis=1)  # a job the LP left unassigned goes to its fastest group
    group = np.where(y.max(axis=1) > 0, np.argmax(y, axis=1), fastest) if has_point else fastest
    if not np.all(np.isfinite(P[np.arange(N), group])):  # defensive: never assign a blocked arc
        group = np.where(np.isfinite(P[np.arange(N), group]), group, np.argmin(P, axis=1))
    position, machine, start, completion = schedule_groups(P, tau, W, group)
    objective = float(np.sum(completion - a))
    bound: float | None = None
    u = np.zeros(N)
    if status is SolverStatus.OPTIMAL:
        inside, outside = _reduced_minimum(P, base, K, v)
        u_shifted = np.minimum(inside, outside.min(axis=1))
        u = u_shifted + t0 - a
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
        variables=nvar,
        constraints=nrows,
        rounds=rounds,
    )


# --------------------------------------------------------------------------------------------
# the policy: devices, running jobs, job selection, decoding to devices and nodes


@dataclass(frozen=True)
class _Devices:
    type_index: IntArray
    """(G,) type of each device."""
    local: IntArray
    """(G,) index within its type."""
    node: tuple[str, ...]
    """(G,) node name or ""."""
    free_at: FloatArray
    """(G,) tau_g."""
    holder: IntArray
    """(G,) running job index, -1 = free."""
    held: dict[int, list[int]]
    """running job -> its devices."""


def _devices(problem: Problem) -> _Devices:
    cluster, jobs, hist = problem.cluster, problem.jobs, problem.history
    now = problem.time_s
    counts = cluster.count.astype(np.int64)
    type_index = np.repeat(np.arange(cluster.num_types), counts)
    local: IntArray = np.concatenate([np.arange(c, dtype=np.int64) for c in counts])
    offsets = np.r_[0, np.cumsum(counts)[:-1]]
    G = int(counts.sum())
    node = [""] * G
    node_of_device: dict[int, int] = {}
    fill = np.zeros(cluster.num_types, np.int64)
    for nid, (t, d) in enumerate(zip(cluster.node_type, cluster.node_devices, strict=True)):
        for _ in range(int(d)):
            if fill[t] < counts[t]:
                g = int(offsets[t] + fill[t])
                node[g] = cluster.node_names[nid]
                node_of_device[g] = nid
                fill[t] += 1
    free_at = np.full(G, now, dtype=np.float64)
    holder = np.full(G, -1, np.int64)
    held: dict[int, list[int]] = {}
    running = hist.running(jobs.num_jobs)
    remaining = jobs.remaining_steps
    for i in np.nonzero(running)[0]:
        t = int(hist.current_type[i])
        want = int(hist.current_devices[i]) or int(jobs.scale_factor[i])
        until = float(hist.busy_until_s[i])
        if until <= now:
            thr = jobs.throughput[i, t]
            known = jobs.total_steps[i] > 0 and remaining[i] > 0 and thr > 0
            until = now + remaining[i] / thr if known else now
        wanted_nodes = set(hist.current_nodes[i])
        mine = [
            g
            for g in range(offsets[t], offsets[t] + counts[t])
            if holder[g] < 0 and node_of_device.get(g, -1) in wanted_nodes
        ][:want]
        for g in range(offsets[t], offsets[t] + counts[t]):
            if len(mine) >= want:
                break
            if holder[g] < 0 and g not in mine:
                mine.append(g)
        for g in mine:
            holder[g] = i
            free_at[g] = max(now, until)
        held[int(i)] = mine
    return _Devices(type_index, local, tuple(node), free_at, holder, held)


def _select(
    problem: Problem, parameters: AlloxParameters, compat: Compat, free_devices: int
) -> tuple[IntArray, list[JobStatus], list[str]]:
    """(matched job indices, status per job, reason per job)."""
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
    return np.sort(order[:keep]).astype(np.int64), status, reason


def solve_policy(
    problem: Problem,
    parameters: AlloxParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """AlloX on a validated snapshot (see the module docstring)."""
    started = time.perf_counter()
    params = parameters
    jobs, cluster = problem.jobs, problem.cluster
    m, n = jobs.num_jobs, cluster.num_types
    now = problem.time_s
    dev = _devices(problem)
    free_now = int(np.sum((dev.holder < 0) | (dev.free_at <= now)))
    matched, status, reason = _select(problem, params, compat, free_now)

    # device groups: (type, free time)
    keys = sorted({(int(t), float(f)) for t, f in zip(dev.type_index, dev.free_at, strict=True)})
    group_of = {key: h for h, key in enumerate(keys)}
    g_group = np.array(
        [group_of[(int(t), float(f))] for t, f in zip(dev.type_index, dev.free_at, strict=True)],
        dtype=np.int64,
    )
    H = len(keys)
    members = [np.nonzero(g_group == h)[0] for h in range(H)]
    W = np.array([len(mb) for mb in members], dtype=np.int64)
    tau = np.array([key[1] for key in keys], dtype=np.float64)
    group_type = np.array([key[0] for key in keys], dtype=np.int64)
    thr = jobs.throughput[matched][:, group_type] if H else np.zeros((matched.size, 0))
    rem = jobs.remaining_steps[matched]
    with np.errstate(divide="ignore"):
        P = np.where(thr > 0, rem[:, None] / np.where(thr > 0, thr, 1.0), np.inf)
    build = time.perf_counter() - started
    # the LP leaves time to decode its matching into queues (below)
    lp_deadline = deadline.leaving(DECODE_S_PER_ITEM * (matched.size + dev.type_index.size))
    result = solve_matching(P, tau, W, jobs.arrival_time_s[matched], lp_deadline, options.threads)

    # decode to devices: each matched job's device, its position in the device's queue (by
    # planned start, then job index) and whether it starts now
    time_share = np.zeros((m, n))
    objective_value = np.zeros(m)
    job_dual = np.zeros(m)
    queue: list[QueueAssignment | None] = [None] * m
    offsets = np.cumsum([0] + [len(mb) for mb in members])
    flat = np.concatenate(members) if members else np.zeros(0, np.int64)
    device = flat[offsets[result.group] + result.machine].astype(np.int64)
    rank = np.lexsort((matched, result.start, device))  # rows by device, start, job
    first = np.r_[True, device[rank][1:] != device[rank][:-1]][: rank.size]
    run_start = np.maximum.accumulate(np.where(first, np.arange(rank.size), 0))
    position = np.empty(rank.size, np.int64)
    position[rank] = np.arange(rank.size) - run_start + 1
    starts_now = (position == 1) & (dev.free_at[device] <= now)
    objective_value[matched] = result.completion - jobs.arrival_time_s[matched]
    job_dual[matched] = result.u
    time_share[matched[starts_now], dev.type_index[device[starts_now]]] = 1.0
    # plain Python values once (a numpy scalar per field and job costs more than the rest)
    type_of, local_of = dev.type_index.tolist(), dev.local.tolist()
    for i, g, pos, start, done, now_ in zip(
        matched.tolist(), device.tolist(), position.tolist(), result.start.tolist(),
        result.completion.tolist(), starts_now.tolist(), strict=True,
    ):
        node = dev.node[g]
        queue[i] = QueueAssignment(
            type_index=type_of[g],
            devices=(local_of[g],),
            nodes=(node,) if node else (),
            position=pos,
            start_time_s=start,
            completion_time_s=done,
            start_now=now_,
            running=False,
        )
    for i, mine in dev.held.items():
        t = int(problem.history.current_type[i])
        time_share[i, t] = 1.0
        until = float(max(dev.free_at[g] for g in mine)) if mine else now
        queue[i] = QueueAssignment(
            type_index=t,
            devices=tuple(int(dev.local[g]) for g in mine),
            nodes=tuple(dict.fromkeys(dev.node[g] for g in mine if dev.node[g])),
            position=0,
            start_time_s=now,
            completion_time_s=until,
            start_now=False,
            running=True,
        )
    ordered, on = matched[rank], device[rank]
    begins = np.flatnonzero(first)
    ends = np.append(begins[1:], rank.size).astype(np.int64)
    by_device = {int(on[b]): ordered[b:e] for b, e in zip(begins, ends[: begins.size],
                                                           strict=True)}
    group_duals = [tuple(result.v[h].tolist()) if h < len(result.v) else () for h in range(H)]
    device_queues: list[DeviceQueue] = []
    for g, (h, free_at, holder) in enumerate(zip(
        g_group.tolist(), dev.free_at.tolist(), dev.holder.tolist(), strict=True,
    )):
        queued = by_device.get(g)
        device_queues.append(
            DeviceQueue(
                type_index=type_of[g],
                device=local_of[g],
                node=dev.node[g],
                free_at_s=free_at,
                running_job=holder,
                jobs=tuple(queued.tolist()) if queued is not None else (),
                position_duals=group_duals[h],
            )
        )
    finished = np.array([s is JobStatus.FINISHED for s in status], dtype=bool)
    objective_value[finished] = 0.0

    effective = np.einsum("ij,ij->i", jobs.throughput, time_share)
    # the decoded schedule is feasible whatever the LP's status: a plan at a limit
    ended = termination(result.status, True, relative_gap(result.objective, result.bound),
                        options.relative_gap)
    cert = Certificate(
        termination=ended,
        maximize=False,
        objective=result.objective,
        bound=result.bound,
        solver="highs" if matched.size else "none",
        solver_version=result.solver_version,
        formulation=(
            "allox: transportation LP over (device group, position) slots, positions priced "
            f"lazily ({result.rounds} LP rounds, {H} groups)"
        ),
        build_time_s=build,
        solve_time_s=result.solve_time_s,
        model_size=ModelSize(
            variables=result.variables,
            constraints=result.constraints,
            nonzeros=2 * result.variables,
        ),
        detail="objective = total JCT sum_i (C_i - a_i) of the matched jobs (s)",
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
        queues=QueueSection(tuple(queue), tuple(device_queues)),
    )


__all__ = ["Matching", "schedule_groups", "solve_matching", "solve_policy"]
