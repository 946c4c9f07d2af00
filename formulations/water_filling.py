"""Lexicographic (water-filling) max-min fairness with hierarchical tenants (A2.4), optionally
with space sharing (A2.2, over the job groups of `apportion.formulations.space_sharing`).

Units and weights. Job i's normalized throughput is u_i(X) = thr_i(X) / prop_i (A1.3;
dimensionless, 1 = what the job gets running all the time on a device mix like the
cluster's). Its effective weight weight_i is recomputed after every freeze:
* a job without a tenant (`Job.tenant` empty): its priority weight w_i;
* a job of a tenant e in FAIRNESS mode: E_e w_i / (sum of w_k over e's jobs not yet frozen);
* a job of a tenant e in FIFO mode: E_e for the oldest (arrival, then id) job of e not yet
  frozen, 0 for the others (they wait for their turn).

The algorithm (A2.4). Every job keeps a running value r_i (u units, starting at 0); in each
round every active job rises *from its running value* by t weight_i / s_i, all by the same
amount t:

    LP_k:  maximize t  s.t.  base constraints (A1.2 B1-B4, or A2.2's with space sharing);
           s_i (u_i(X) - r_i) / weight_i >= t    active jobs with weight_i > 0   (dual y_i)
           u_i(X) >= r_i                          active jobs with weight_i = 0
           u_i(X) >= f_i                          frozen jobs (their frozen value)

then r_i += t* weight_i / s_i for the jobs of the first kind, and those whose row has a
positive dual freeze at f_i = r_i; until every job is frozen. Since running values carry
over, no job's u_i falls from one round to the next: when a freeze changes the tenant
weights, the remaining jobs keep what they have and share the further increase by the new
weights. The rises t* add up to the *water level*; a job's `objective_value` is the water
level at which it froze. With fixed weights (no tenants) that is its level s_i u_i / w_i and
this is the classic leximin algorithm. Round 1 is A2.1's max-min LP with round 1's weights;
its optimum is the reported objective (the final plan's smallest round-1 level) and its
repaired dual bound the reported bound.

Why freezing on duals is exact (no MILP, no big-M, unlike Gavel). By complementary
slackness, a row with a positive multiplier in *some* optimal dual is tight in *every*
optimal primal: the job cannot rise while every other active job rises by t*, so freezing it
is what water filling prescribes. The interior-point method (Clarabel) returns the analytic
centre of the optimal face, whose duals are strictly complementary, so every such job freezes
at once; a bottlenecked job whose multiplier is 0 all the same (a degenerate dual, e.g. from
the simplex fallback) stays active and freezes in a later round at t* = 0. Quantitatively,
with the round's proven bound B and duals y normalized to sum 1, a job frozen on y_i can rise
by at most (B - t*)(1 + 1/y_i) weight_i / s_i above its frozen value (for a group: its
jobs' common value, see Groups). The jobs for which that is within the tolerance freeze; when
none is, all with a positive dual freeze and the round's error says how far the proof falls
short. Every round freezes a job, so there are at most as many rounds as jobs. When a round
rises by 0 while FIFO jobs wait, one LP checks whether any job at all can still rise
(`water_filling_rounds.saturation`); if none can, every later round would rise by 0, and all
the jobs left freeze where they are.

Certificate. Each round's duals are repaired into a dual feasible point whose Lagrangian
bound B holds for the rows at their exact values (`water_filling_rounds.solve_round`); the
rise recorded is what the plan reaches but never more than B, and the round's error (u
units) is the larger of (B - t*) max_i weight_i / s_i and the freeze bounds above. The last
round's plan is then settled within the floors' slack of every frozen value
(`water_filling_rounds.polish`). The plan is OPTIMAL only when every round's LP solved, every
round's error and the final plan's shortfall against the frozen values are within the
tolerance (the relative gap option, against max(1, largest u)) and round 1's gap is too: for
fixed weights this proves the leximin property, with tenants each round's LP optimality.
Solved but not within the tolerance: OPTIMAL_INACCURATE. Stopped by the deadline (every LP
gets what is left of it): FEASIBLE, the plan of the last round solved (which keeps every
value reached so far), the jobs not frozen said in the detail.

Groups. Jobs are grouped as in `space_sharing.make_groups` with the tenant in the key and a
FIFO tenant's jobs alone (FIFO weights single out one job), so jobs of a group have equal
weights in every round. The round LP is then invariant under permuting a group's jobs; by the
averaging argument of A2.3 it has a symmetric optimum, which is a plan of the group LP, and a
group whose row has a positive multiplier cannot rise in any optimum (else averaging would
raise the whole group). So freezing whole groups is exactly the per-job water filling, and
since the water-filling values are unique (each round's optimum and its set of blocked jobs
are) and equal within a group, a bound on how far a group's common value can rise bounds
each of its jobs' distance from the exact answer.

Batch freezing at caps (fixed weights only). No job exceeds its cap, the u it gets with all
its time in its best cell. When a round freezes only jobs at their caps, the next round first
tries to pin the next `batch` jobs in order of the level at which they reach their caps; if
the other jobs still rise past all of those levels, the pinned jobs would have frozen at
their caps on the way (nothing else binds below), and one LP did the work of many rounds.

Compat gavel: Gavel's LP (the same, with t <= M when a frozen or waiting job exists) and its
MILP bottleneck test with the 0.01% / 1e-5 threshold (`water_filling_gavel`), one job per
group, until a round freezes nothing; no batching, no polish (the plan is the last LP's).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib.metadata import version

import numpy as np
from numpy.typing import NDArray

from apportion.formulations.max_min_fairness import level_coefficients
from apportion.formulations.space_sharing import (
    Groups,
    build_cells,
    make_groups,
    plan_of,
    realize,
    scaled,
    split_raw,
)
from apportion.formulations.water_filling_gavel import gavel_freeze
from apportion.formulations.water_filling_rounds import (
    FLOOR_SLACK,
    RoundModel,
    polish,
    relaxed,
    round_lp,
    saturation,
    solve_round,
)
from apportion.solver.backends.status import SolverStatus
from apportion.solver.certificate import termination
from apportion.solver.deadline import Deadline
from apportion.solver.model import (
    Compat,
    FloatArray,
    IntArray,
    Problem,
    SolveOptions,
    TenantSharing,
)
from apportion.solver.parameters import WaterFillingParameters
from apportion.solver.result import Certificate, JobStatus, ModelSize, Plan, Termination

BoolArray = NDArray[np.bool_]

DEFAULT_GAP = 1e-6
"""Tolerance (u units, against max(1, largest u)) when the options give none."""
FREEZE_THRESHOLD = 1e-6
"""A level row's dual counts as positive above this fraction of the largest dual."""
RETRY_SLACK = 100 * FLOOR_SLACK
"""The slack of a round retried after the solvers found its floors infeasible."""
NEGLIGIBLE_RISE = 10 * FLOOR_SLACK
"""A round whose rise is at most this (u units, against max(1, largest u)) rose by 0."""
INITIAL_BATCH = 8
"""Jobs pinned at their caps in the first batch round."""
DETAIL_ROUNDS = 20
"""Rounds listed in the certificate's detail."""

"""The rounds' outcome (`Filling.status`) in the solver vocabulary of `termination`."""


# --------------------------------------------------------------------------------------------
# tenant weights and groups


@dataclass(frozen=True)
class TenantWeights:
    """The effective weights of every round (module docstring), per job."""

    priority: FloatArray
    """(m,) w_i."""
    tenant: IntArray
    """(m,) tenant code, -1 = no tenant."""
    share: FloatArray
    """(tenants,) E_e."""
    fifo: BoolArray
    """(tenants,) FIFO mode."""
    rank: IntArray
    """(m,) FIFO order: by arrival, then id."""

    @staticmethod
    def of(problem: Problem) -> TenantWeights:
        jobs = problem.jobs
        names = sorted({name for name in jobs.tenant if name})
        code = {name: c for c, name in enumerate(names)}
        spec = {tenant.name: tenant for tenant in problem.tenants}
        share = np.array([spec[e].weight if e in spec else 1.0 for e in names])
        fifo = np.array([e in spec and spec[e].sharing is TenantSharing.FIFO for e in names],
                        dtype=bool)
        tenant = np.array([code.get(name, -1) for name in jobs.tenant], dtype=np.int64)
        order = np.lexsort((np.asarray(jobs.ids, dtype=np.str_), jobs.arrival_time_s))
        rank = np.empty(jobs.num_jobs, dtype=np.int64)
        rank[order] = np.arange(jobs.num_jobs)
        return TenantWeights(jobs.priority_weight.astype(np.float64), tenant, share, fifo, rank)

    @property
    def fixed(self) -> bool:
        """No tenants: the weights never change."""
        return not bool(np.any(self.tenant >= 0))

    def fifo_job(self) -> BoolArray:
        """(m,) jobs of FIFO tenants."""
        if self.fifo.size == 0:
            return np.zeros(self.tenant.size, dtype=bool)
        return (self.tenant >= 0) & self.fifo[np.maximum(self.tenant, 0)]

    def __call__(self, frozen: BoolArray) -> FloatArray:
        """(m,) weight_i for the next round given the frozen jobs; 0 for frozen jobs."""
        live = ~frozen
        if self.share.size == 0:
            return np.where(live, self.priority, 0.0)
        has = self.tenant >= 0
        code = np.maximum(self.tenant, 0)
        weight = np.where(live & ~has, self.priority, 0.0)
        fifo = self.fifo_job()
        fair = has & live & ~fifo
        total = np.bincount(code[fair], self.priority[fair], minlength=self.share.size)
        weight[fair] = self.share[code[fair]] * self.priority[fair] / total[code[fair]]
        waiting = has & live & fifo
        first = np.full(self.share.size, np.iinfo(np.int64).max)
        np.minimum.at(first, code[waiting], self.rank[waiting])
        head = waiting & (self.rank == first[code])
        weight[head] = self.share[code[head]]
        return weight


def effective_weights(problem: Problem, frozen: BoolArray) -> FloatArray:
    """(m,) weight_i of the round after the `frozen` jobs froze (module docstring)."""
    return TenantWeights.of(problem)(frozen)


def group_key(problem: Problem, weights: TenantWeights, per_job: bool) -> FloatArray:
    """(m, 2) extra grouping key: the tenant, and the job's own index for jobs of FIFO tenants
    (or for every job when `per_job`)."""
    m = problem.jobs.num_jobs
    alone = np.ones(m, dtype=bool) if per_job else weights.fifo_job()
    own = np.where(alone, np.arange(m) + 1.0, 0.0)
    return np.column_stack([weights.tenant.astype(np.float64), own])


# --------------------------------------------------------------------------------------------
# the rounds


@dataclass(frozen=True)
class FillingRound:
    """One round: the water level after it, its rise t*, the rows frozen in it (groups), its
    proven error (u units, relative to max(1, largest u); inf = not proven) and, when traced,
    every row's running value after it (u units)."""

    level: float
    rise: float
    frozen: IntArray
    error: float
    running: FloatArray | None = None


@dataclass(frozen=True)
class Filling:
    """The outcome of the rounds, per row (group)."""

    status: SolverStatus
    """OPTIMAL (every job frozen, or Gavel's stop), or the failing LP's status (a round LP
    found infeasible is a numerical error: the last round's plan is a point of it)."""
    x: FloatArray
    """LP values (without t) of the last round solved; zeros if none."""
    value: FloatArray
    """r_g: running or frozen value (u units)."""
    frozen: BoolArray
    freeze_level: FloatArray
    """Water level at which the row froze (the current level for rows still rising, 0 for
    rows that never had a positive weight)."""
    freeze_dual: FloatArray
    """The row's normalized dual in its freeze round (0 when frozen at its cap or by Gavel's
    test)."""
    first_weight: FloatArray
    """Round 1's effective weights."""
    first_bound: float | None
    prices: FloatArray
    """Round 1's capacity duals (n,)."""
    rounds: tuple[FillingRound, ...]
    lps: int
    solve_time_s: float
    size: ModelSize
    solver: str
    note: str = ""
    retries: int = 0
    """Rounds solved again with RETRY_SLACK."""


def fill(
    model: RoundModel,
    weights: Callable[[BoolArray], FloatArray],
    deadline: Deadline,
    tolerance: float = DEFAULT_GAP,
    gavel: bool = False,
    batch_caps: bool = False,
    trace: bool = False,
) -> Filling:
    """Progressive filling over the rows of `model` (module docstring). `weights(frozen)`
    gives the rows' effective weights for the next round; `batch_caps` (fixed weights only)
    pins jobs at their caps in batches; `trace` records the running values of every round."""
    G, V = model.u.shape
    s = model.s
    frozen = np.zeros(G, dtype=bool)
    value = np.zeros(G)
    freeze_level = np.zeros(G)
    freeze_dual = np.zeros(G)
    ever = np.zeros(G, dtype=bool)
    first_weight = np.zeros(G)
    first_bound: float | None = None
    prices = np.zeros(model.cells.W.size)
    rounds: list[FillingRound] = []
    x = np.zeros(V)
    water = 0.0
    status = SolverStatus.OPTIMAL
    lps = 0
    solve_time = 0.0
    size = ModelSize()
    solvers: set[str] = set()
    note = ""
    batch = 0
    retries = 0
    check_after, check_every = 0, 1
    big_m = float(np.max(model.cap * s, initial=0.0))
    entries = model.entries()
    while True:
        weight = weights(frozen)
        active = ~frozen & (weight > 0)
        if not active.any():
            break
        if deadline.expired():
            status, note = SolverStatus.TIME_LIMIT, "the deadline passed before the next round"
            break
        ever |= active
        scale = np.divide(s, weight, out=np.zeros(G), where=weight > 0)
        take = np.zeros(0, dtype=np.int64)
        if batch_caps and batch > 0:
            live = np.flatnonzero(active)
            order = live[np.argsort(scale[live] * model.cap[live], kind="stable")]
            take = order[: min(batch, order.size - 1)]
        slack = FLOOR_SLACK
        while True:
            pinned = np.zeros(G, dtype=bool)
            pinned[take] = True
            exact = np.where(pinned, model.cap, value)
            floor = relaxed(exact, slack)
            rising = np.flatnonzero(active & ~pinned)
            floored = np.flatnonzero(~active | pinned)
            t_cap = big_m if gavel and floored.size else None
            lp = round_lp(model, entries, scale, rising, floored, floor, t_cap)
            sol = solve_round(model, lp, scale, floor, exact, deadline,
                              fallback=take.size == 0)
            lps += sol.lps
            solve_time += sol.result.solve_time_s
            solvers.add(sol.result.solver)
            size = ModelSize(lp.matrix.shape[1], lp.matrix.shape[0], int(lp.matrix.nnz), 0)
            if take.size == 0:
                if sol.result.status is SolverStatus.INFEASIBLE and slack == FLOOR_SLACK:
                    # the last round's plan is feasible here up to the solvers' tolerance,
                    # which the slack did not absorb: once more with a wider one
                    slack = RETRY_SLACK
                    retries += 1
                    continue
                break
            reached = water + max(sol.t, 0.0)
            if (sol.result.solved
                    and reached >= float(np.max(scale[take] * model.cap[take])) * (1 - 1e-9)):
                break
            if sol.result.status.limit_reached:
                break
            batch //= 2
            take = take[:batch]
        if not sol.result.solved:
            status = (SolverStatus.NUMERICAL_ERROR
                      if sol.result.status is SolverStatus.INFEASIBLE else sol.result.status)
            note = f"round {len(rounds) + 1}: {sol.result.solver} {sol.result.detail}".strip()
            break
        x = sol.x
        unit = max(1.0, float(np.max(value, initial=0.0)))
        rate = weight[rising] / s[rising]
        # the rise: what x reaches, but no more than the bound without the slack (what the
        # slack hands on is not a rise: it would ratchet the values up round after round)
        t = max(min(sol.t, sol.bound), 0.0)
        if t * float(np.max(rate, initial=0.0)) <= NEGLIGIBLE_RISE * unit:
            t = 0.0
        gap = max(sol.bound - t, 0.0)
        error = gap * float(np.max(rate, initial=0.0)) / unit
        if not rounds:
            first_weight = weight.copy()
            first_bound = sol.bound if np.isfinite(sol.bound) else None
            prices = sol.prices
        if take.size:  # pinned at their caps, reached on the way: frozen there
            frozen[take] = True
            value[take] = model.cap[take]
            freeze_level[take] = scale[take] * model.cap[take]
            batch *= 2
        value[rising] += t * rate  # (A2.4) r_i += t* weight_i / s_i
        water += t
        if gavel:
            test = gavel_freeze(model, value, active & ~pinned, big_m, deadline)
            solve_time += test.solve_time_s
            newly = test.frozen
            if test.status not in (SolverStatus.OPTIMAL, SolverStatus.INFEASIBLE):
                status = test.status
                note = f"round {len(rounds) + 1}: bottleneck MILP {test.status}"
                rounds.append(FillingRound(water, t, np.flatnonzero(pinned), error))
                break
        else:
            y = sol.y
            rise_bound = gap * (1 + 1 / np.maximum(y, 1e-300)) * rate / unit
            positive = y > FREEZE_THRESHOLD * float(np.max(y, initial=0.0))
            # the proven ones; the others wait for a round where fewer rows share the dual
            newly_rows = positive & (rise_bound <= tolerance)
            if not newly_rows.any():  # none proven: all with a positive dual (or the tightest
                newly_rows = positive  # row), the round's error says how far from proven
            if not newly_rows.any():
                room = scale[rising] * (model.u[rising] @ x - floor[rising]) - t
                newly_rows[int(np.argmin(room))] = True
            error = max(error, float(np.max(rise_bound[newly_rows])))
            newly = np.zeros(G, dtype=bool)
            newly[rising[newly_rows]] = True
            freeze_dual[rising[newly_rows]] = y[newly_rows]
        freeze_level[newly] = water
        frozen |= newly
        rounds.append(FillingRound(water, t, np.flatnonzero(newly | pinned), error,
                                   value.copy() if trace else None))
        if gavel and not newly.any():
            break  # Gavel stops when a round freezes nothing
        waiting = ~frozen & (weights(frozen) == 0)
        if not gavel and t == 0.0 and waiting.any() and len(rounds) >= check_after:
            # a round rose by 0 and jobs wait (FIFO): if no job at all can rise, every later
            # round rises by 0 too and freezes them where they are, one LP for all of them
            check = saturation(model, value, frozen, deadline)
            lps += 1
            solve_time += check.solve_time_s
            if check.rise <= tolerance * unit:
                rows = np.flatnonzero(~frozen)
                freeze_level[rows] = water
                frozen[rows] = True
                rounds.append(FillingRound(water, 0.0, rows, check.rise / unit,
                                           value.copy() if trace else None))
            else:
                check_every *= 2
                check_after = len(rounds) + check_every
        if batch_caps and newly.any() and np.all(value[newly] >= model.cap[newly] * (1 - 1e-7)):
            batch = max(batch, INITIAL_BATCH)  # jobs freeze at their caps: try a batch
    freeze_level[~frozen & ever] = water
    ceiling = value + FLOOR_SLACK * np.maximum(1.0, value)
    handed_on = np.any((model.u @ x > ceiling) & frozen)
    if not gavel and handed_on and not deadline.expired():
        settled = polish(model, value, frozen, deadline)
        lps += 1
        solve_time += settled.solve_time_s
        if settled.solved:
            x = np.maximum(settled.x, 0.0)
    return Filling(status, x, value, frozen, freeze_level, freeze_dual, first_weight,
                   first_bound, prices, tuple(rounds), lps, solve_time, size,
                   "+".join(sorted(solvers)), note, retries)


# --------------------------------------------------------------------------------------------
# the policy


@dataclass(frozen=True)
class Setup:
    """The rows of the rounds for one problem: jobs grouped, cells in u units."""

    cell_problem: Problem
    """The problem whose pairs the cells use (no colocations without space sharing)."""
    groups: Groups
    model: RoundModel
    weights: TenantWeights
    prop: FloatArray


def setup(problem: Problem, params: WaterFillingParameters, compat: Compat) -> Setup:
    """Groups and cells (u = thr / prop on the cells a job may use)."""
    m = problem.jobs.num_jobs
    sharing = params.space_sharing and problem.colocations is not None
    cell_problem = problem if sharing else replace(problem, colocations=None)
    weights = TenantWeights.of(problem)
    groups = make_groups(cell_problem, group_key(problem, weights, compat is Compat.GAVEL))
    unit = replace(problem, jobs=replace(problem.jobs, priority_weight=np.ones(m)))
    a, prop, thr = level_coefficients(unit, params.heterogeneity_agnostic, compat)
    rep = groups.rep
    u_scale = np.divide(1.0, prop[rep], out=np.zeros(rep.size), where=prop[rep] > 0)
    cells = scaled(build_cells(cell_problem, groups, np.where(a > 0, thr, 0.0)), u_scale)
    return Setup(cell_problem, groups, RoundModel.of(cells), weights, prop)


def run(problem: Problem, params: WaterFillingParameters, compat: Compat,
        options: SolveOptions, deadline: Deadline, trace: bool = False
        ) -> tuple[Setup, Filling]:
    """The rounds for `problem` (rows = `Setup.groups`); `trace` keeps every round's running
    values."""
    st = setup(problem, params, compat)
    group, rep = st.groups.group, st.groups.rep

    def weights(frozen: BoolArray) -> FloatArray:
        return st.weights(frozen[group])[rep]

    gavel = compat is Compat.GAVEL
    filling = fill(st.model, weights, deadline, options.relative_gap or DEFAULT_GAP,
                   gavel=gavel, batch_caps=st.weights.fixed and not gavel, trace=trace)
    return st, filling


def rounds_detail(rounds: tuple[FillingRound, ...]) -> str:
    """The first rounds' water levels, rises and freeze counts, for `Certificate.detail`."""
    detail = "; ".join(f"round {k + 1}: level {r.level:.9g} (+{r.rise:.3g}), "
                       f"{r.frozen.size} frozen" for k, r in enumerate(rounds[:DETAIL_ROUNDS]))
    if len(rounds) > DETAIL_ROUNDS:
        detail += f"; ... {len(rounds)} rounds in all"
    return detail


def solve_policy(problem: Problem, parameters: WaterFillingParameters, compat: Compat,
                 options: SolveOptions, deadline: Deadline) -> Plan:
    """Entry point registered as `hierarchical_max_min_fairness` (and, through
    `packed_water_filling`, its space-sharing form); `deadline` bounds every round."""
    return solve_water_filling(problem, parameters, compat, options, deadline)


def solve_water_filling(problem: Problem, params: WaterFillingParameters, compat: Compat,
                        options: SolveOptions, deadline: Deadline) -> Plan:
    """The plan of the rounds (module docstring), stopped at `deadline`."""
    started = time.perf_counter()
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    sharing = params.space_sharing and problem.colocations is not None
    formulation = "water filling (A2.4), progressive filling" + (
        " with Gavel's MILP freezing" if compat is Compat.GAVEL else " with LP duals") + (
        ", space sharing (A2.2)" if sharing else "") + (
        ", heterogeneity-agnostic" if params.heterogeneity_agnostic else "")
    if m == 0:
        cert = Certificate(Termination.OPTIMAL, True, 0.0, 0.0, formulation=formulation,
                           detail="no jobs")
        return Plan.empty(0, n, cert)
    st, filling = run(problem, params, compat, options, deadline)
    tolerance = options.relative_gap or DEFAULT_GAP
    group = st.groups.group
    cells = st.model.cells
    job_plan, u_jobs = realize(st.cell_problem, st.groups, cells, split_raw(cells, filling.x))
    s = problem.jobs.scale_factor_float
    W = problem.cluster.count_float
    # the returned plan against the base constraints (after the repair)
    used = job_plan.single.sum(axis=1) + np.bincount(job_plan.pa, job_plan.share, minlength=m)
    used += np.bincount(job_plan.pb, job_plan.share, minlength=m)
    devices = s @ job_plan.single + np.bincount(job_plan.pj, s[job_plan.pa] * job_plan.share,
                                                minlength=n)
    violation = max(float(np.max(used - 1.0, initial=0.0)),
                    float(np.max(devices - W, initial=0.0)))
    objective: float | None = None
    if filling.rounds:
        # round 1 is A2.1's LP with round 1's weights; the final plan keeps every level it
        # reached, so its smallest round-1 level is the reported objective
        first = filling.first_weight[group]
        levels = np.divide(s * u_jobs, first, out=np.zeros(m), where=first > 0)
        objective = float(np.min(levels[first > 0])) if np.any(first > 0) else 0.0
    unit = max(1.0, float(np.max(filling.value, initial=0.0)))
    shortfall = float(np.max(filling.value[group] - u_jobs, initial=0.0)) / unit
    errors = [r.error for r in filling.rounds]
    largest = max(errors, default=0.0)
    cert = Certificate(Termination.OPTIMAL, True, objective, filling.first_bound)
    # proven within the tolerance: round 1's gap, every round's error, the plan's shortfall
    gaps = [cert.gap, largest, shortfall]
    proof = None if gaps[0] is None else max(g for g in gaps if g is not None)
    if filling.status.solved and not np.all(filling.frozen):  # Gavel's stop
        proof = proof if compat is Compat.GAVEL else None
    outcome = termination(filling.status, bool(filling.rounds), proof, tolerance)
    notes = [rounds_detail(filling.rounds),
             f"largest round error {largest:.2g}, plan shortfall {shortfall:.2g} "
             f"(u units, tolerance {tolerance:.2g})"]
    if filling.retries:
        notes.append(f"{filling.retries} rounds solved again with floors relaxed by "
                     f"{RETRY_SLACK:.0e}")
    if not filling.status.solved or not np.all(filling.frozen):
        notes.append(f"{filling.note or 'stopped'}: {int(np.sum(~filling.frozen[group]))} of "
                     f"{m} jobs not frozen, the plan of round {len(filling.rounds)} returned")
    solver = filling.solver or "clarabel"
    cert = replace(
        cert,
        termination=outcome,
        solver=solver,
        solver_version=version("clarabel"),
        formulation=f"{formulation}; {len(filling.rounds)} rounds, {filling.lps} LPs, "
                    f"{cells.k.size} groups",
        build_time_s=max(0.0, time.perf_counter() - started - filling.solve_time_s),
        solve_time_s=filling.solve_time_s,
        model_size=filling.size,
        max_violation=violation,
        detail="; ".join(notes),
    )
    k = cells.k[group]
    return plan_of(job_plan, problem, normalized_throughput=u_jobs,
                   objective_value=filling.freeze_level[group],
                   job_dual=filling.freeze_dual[group] / k,
                   accelerator_prices=filling.prices, certificate=cert,
                   job_status=(JobStatus.ALLOCATED,) * m, job_reason=("",) * m)
