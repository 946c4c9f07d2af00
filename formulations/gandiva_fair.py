"""Gandiva_fair (B2): tickets per user, redistribution of unused share, split
gang-aware stride scheduling per quantum, heterogeneity trading. Also Shockwave's static
equal-split baseline (`static_equal_split`, alias `gandiva_fair_equal_split`).

Our choices where the paper leaves details open (stated here, tested in
tests/formulations/test_gandiva_fair.py):

* **Users and tickets.** A user is a tenant (`jobs[].tenant`; a job without one is its own
  user); its tickets are the tenant's weight (`snapshot.tenants[].weight`, 1 if unlisted).
* **Fair share with redistribution.** The cluster's G devices are water-filled among users by
  tickets, capped by each user's demand d_u = sum of its jobs' scale factors
  (`fair_share.water_fill`): a user needing less than its ticket share gets its demand, the
  rest split by tickets. Each user's devices are spread over the types in proportion to the
  type counts W[j] / G (its ticket share of every generation); a type none of its jobs can use
  is skipped and that part is water-filled, type by type, among the users that can use it
  (capped by what they still demand).
* **Rates.** A user's rate on type j is the mean over its jobs of T[i,j] / max_k T[i,k] (its
  per-device throughput in units of each job's best type; 0 where the job cannot run), which
  is what trading compares (`apportion.formulations.trading`).
* **Trading** per `parameters.trading`: greedy (Gandiva_fair's trades, the default), the exact
  LP, or none. The exact LP is solved in every mode and its optimum is the certificate's bound.
* **Homes and tickets.** Each job belongs to the stride scheduler of one type, its home: a
  user's jobs are spread over the types in proportion to its traded share there (each job, in
  decreasing best throughput, goes to the usable type with the largest unmet part of the
  user's demand on it). A job's tickets are its user's share of its home type divided among
  the user's jobs homed there in proportion to priority weight times scale factor (so a user
  whose share equals its demand can run all its jobs all the time); a job whose user has no
  share on any type it can use gets a nominal 1e-9 tickets (it runs only on devices nobody
  else wants).
* **Stride** (`apportion.formulations.stride`) over `parameters.quanta` quanta of
  `snapshot.round_duration_s` (0 = 60 s); the time shares are the fractions of those quanta
  each job runs, the plan's rounds are the quanta (grants with nodes), and each job's pass
  after them is returned to be sent back (`history.jobs[].stride_pass`).

Certificate: objective = total user throughput after trading (sum_u rate_u . share_u, each in
its own units), bound = the trading LP's proven bound; `heuristic` for greedy trading or none,
the LP's termination for exact trading.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from apportion.formulations.fair_share import water_fill
from apportion.formulations.normalizers import repair_time_share
from apportion.formulations.stride import stride_schedule
from apportion.formulations.trading import ExactTrading, exact_trading, greedy_trades
from apportion.solver.certificate import termination
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.fairness_model import FairnessInputs
from apportion.solver.fairness_result import StrideSection, Trade, UserShare
from apportion.solver.model import Compat, FloatArray, IntArray, Problem, SolveOptions
from apportion.solver.parameters import GandivaFairParameters, TradingMode
from apportion.solver.result import Certificate, JobStatus, Plan, ShareSection, Termination

NOMINAL_TICKETS = 1e-9
"""Tickets of a job whose user has no share on any type it can use."""
HOME_CHECK_EVERY = 8192
"""Jobs homed between two looks at the deadline."""
PLAN_S_PER_JOB = 1e-6
"""Time (s) left per job for building the plan after the stride quanta."""
AFTER_TRADING_S_PER_JOB = 6e-6
"""Time (s) trading leaves per job for the homes (about 3 us a job at 100,000 jobs), a first
stride quantum and the plan (at most half the time left)."""


def users_of(problem: Problem) -> tuple[list[str], IntArray, FloatArray]:
    """(user names, (m,) user index of each job, (U,) tickets): users are tenants, a job
    without a tenant is its own user (named by its id); tickets = the tenant's weight."""
    jobs = problem.jobs
    weight = {tenant.name: tenant.weight for tenant in problem.tenants}
    names: list[str] = []
    index: dict[tuple[str, str], int] = {}
    user = np.zeros(jobs.num_jobs, np.int64)
    for i, (job_id, tenant) in enumerate(zip(jobs.ids, jobs.tenant, strict=True)):
        key = ("t", tenant) if tenant else ("j", job_id)
        if key not in index:
            index[key] = len(names)
            names.append(tenant or job_id)
        user[i] = index[key]
    tickets = np.array([weight.get(name, 1.0) if key[0] == "t" else 1.0
                        for key, name in zip(index, names, strict=True)], np.float64)
    return names, user, tickets


def user_rates(problem: Problem, user: IntArray, users: int) -> FloatArray:
    """(U, n) mean over each user's jobs of T[i,j] / max_k T[i,k] on usable cells."""
    T = np.where(problem.usable, problem.jobs.throughput, 0.0)
    best = T.max(axis=1, keepdims=True)
    relative = np.divide(T, best, out=np.zeros_like(T), where=best > 0)
    rate = np.zeros((users, T.shape[1]))
    np.add.at(rate, user, relative)
    count = np.bincount(user, minlength=users).astype(np.float64)
    return rate / np.maximum(count, 1.0)[:, None]


def fair_shares(
    tickets: FloatArray, demand: FloatArray, rate: FloatArray, W: FloatArray
) -> FloatArray:
    """(U, n) pre-trade shares (module docstring: water-filled by tickets, spread by W)."""
    G = float(W.sum())
    total = water_fill(G, tickets, demand)
    usable = rate > 0
    share = np.where(usable, total[:, None] * (W / G)[None, :], 0.0)
    for j in range(W.size):
        unclaimed = W[j] - share[:, j].sum()
        if unclaimed <= 1e-12:
            continue
        room = np.where(usable[:, j], np.maximum(demand - share.sum(axis=1), 0.0), 0.0)
        share[:, j] += water_fill(unclaimed, tickets, room)
    return share


def homes_and_tickets(
    problem: Problem, user: IntArray, share: FloatArray, deadline: Deadline = NO_DEADLINE
) -> tuple[IntArray, FloatArray, bool]:
    """(m,) home type and (m,) tickets of every job (module docstring), and whether every
    home was chosen by that rule: once `deadline` passes, the jobs left go to the usable type
    with the largest unmet part of their user's demand at that point."""
    jobs = problem.jobs
    m = jobs.num_jobs
    U, n = share.shape
    s = jobs.scale_factor.astype(np.float64)
    ok = problem.usable & (share[user] > 0)
    alone = ~ok.any(axis=1)  # no share on any type it can use: any usable type
    ok[alone] = problem.usable[alone]
    total = share.sum(axis=1, keepdims=True)
    demand = np.bincount(user, weights=s, minlength=U)[:, None]  # whole devices: exact
    target = np.where(total > 0, share / np.where(total > 0, total, 1.0) * demand, 0.0)
    assigned = np.zeros((U, n))
    order = np.lexsort((np.arange(m), -jobs.throughput.max(axis=1), user))
    home = np.full(m, -1, np.int64)
    done = _greedy_homes(order, user, ok, s, target, assigned, home, deadline)
    if done < m:
        left = order[done:]
        unmet = np.where(ok[left], target[user[left]] - assigned[user[left]], -np.inf)
        home[left] = np.argmax(unmet, axis=1)
    key = user * n + home
    weight = jobs.priority_weight * s
    per_home = np.bincount(key, weights=weight, minlength=U * n)
    held = share[user, home]
    tickets = np.where(held > 0, held * weight / np.where(held > 0, per_home[key], 1.0),
                       NOMINAL_TICKETS)
    return home, np.maximum(tickets, NOMINAL_TICKETS), done == m


def _greedy_homes(
    order: IntArray,
    user: IntArray,
    ok: NDArray[np.bool_],
    s: FloatArray,
    target: FloatArray,
    assigned: FloatArray,
    home: IntArray,
    deadline: Deadline,
) -> int:
    """Home each job of `order` in turn on its `ok` type with the largest target - assigned
    of its user (ties: the lowest type; none: type 0), updating `assigned` and `home`; returns
    how many were homed before the deadline passed (looked at every `HOME_CHECK_EVERY`)."""
    masks, mask_of = np.unique(ok[order], axis=0, return_inverse=True)
    choices = [tuple(int(j) for j in np.flatnonzero(mask)) for mask in masks]
    users = user[order].tolist()
    sizes = s[order].tolist()
    goal = target.tolist()
    got = assigned.tolist()
    chosen: list[int] = []
    for done, (mask, u, size) in enumerate(zip(mask_of.ravel().tolist(), users, sizes,
                                               strict=True)):
        if done % HOME_CHECK_EVERY == 0 and done and deadline.expired():
            break
        best, best_unmet = 0, -math.inf
        t, a = goal[u], got[u]
        for j in choices[mask]:
            unmet = t[j] - a[j]
            if unmet > best_unmet:
                best, best_unmet = j, unmet
        a[best] += size
        chosen.append(best)
    home[order[:len(chosen)]] = chosen
    assigned[:] = got
    return len(chosen)


def equal_split(problem: Problem, compat: Compat) -> FloatArray:
    """Shockwave's baseline: X[i, j] = W[j] / m on every type, rows capped at 1. Cells a job
    cannot use are emptied and columns scaled to capacity (sum_i s_i X[i, j] <= W[j]) unless
    compat is shockwave, which reproduces the baseline as written (it ignores scale factors)."""
    m = problem.jobs.num_jobs
    W = problem.cluster.count.astype(np.float64)
    X = np.repeat((W / max(m, 1))[None, :], m, axis=0)
    if compat is Compat.SHOCKWAVE:
        return np.asarray(X / np.maximum(1.0, X.sum(axis=1, keepdims=True)), np.float64)
    X = np.where(problem.usable, X, 0.0)
    return repair_time_share(X, problem.usable, problem.jobs.scale_factor, W)


def _equal_split_plan(problem: Problem, compat: Compat, started: float) -> Plan:
    X = equal_split(problem, compat)
    m, n = X.shape
    thr = np.einsum("ij,ij->i", problem.jobs.throughput, X)
    W = problem.cluster.count.astype(np.float64)
    excess = (problem.jobs.scale_factor @ X - W) / np.maximum(W, 1.0)
    cert = Certificate(
        termination=Termination.HEURISTIC,
        maximize=True,
        objective=float(thr.sum()),
        solver="closed form",
        formulation="static equal split of every type (Shockwave's gandiva_fair baseline)",
        build_time_s=time.perf_counter() - started,
        max_violation=float(max(0.0, float(np.max(excess, initial=0.0)))),
    )
    return Plan(time_share=X, effective_throughput=thr, normalized_throughput=thr,
                objective_value=thr, job_dual=np.zeros(m), accelerator_prices=np.zeros(n),
                certificate=cert, job_status=(JobStatus.ALLOCATED,) * m,
                job_reason=("",) * m)


def solve_policy(
    problem: Problem,
    parameters: GandivaFairParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Gandiva_fair (module docstring)."""
    started = time.perf_counter()
    if parameters.static_equal_split:
        return _equal_split_plan(problem, compat, started)
    jobs, cluster = problem.jobs, problem.cluster
    m, n = jobs.num_jobs, cluster.num_types
    if m == 0:
        cert = Certificate(Termination.HEURISTIC, True, 0.0, 0.0, solver="closed form",
                           formulation="Gandiva_fair: no jobs")
        return Plan.empty(0, n, cert)
    fair = problem.fairness or FairnessInputs.empty(m)
    W = cluster.count.astype(np.float64)
    names, user, tickets = users_of(problem)
    U = len(names)
    demand = np.bincount(user, weights=jobs.scale_factor.astype(np.float64),
                         minlength=U).astype(np.float64)
    rate = user_rates(problem, user, U)
    share = fair_shares(tickets, demand, rate, W)
    before = np.einsum("uj,uj->u", rate, share)
    # trading leaves time to the homes and a first stride quantum after it
    trading = deadline.leaving(AFTER_TRADING_S_PER_JOB * m)
    exact = exact_trading(share, rate, demand, W, trading, options.threads)
    trades: tuple[Trade, ...] = ()
    complete = True
    if parameters.trading is TradingMode.GREEDY:
        greedy = greedy_trades(share, rate, demand, parameters.trade_price, trading)
        traded, trades, complete = greedy.share, greedy.trades, greedy.complete
    elif parameters.trading is TradingMode.EXACT:
        traded = exact.share
    else:
        traded = share
    after = np.einsum("uj,uj->u", rate, traded)
    # the plan is built from the stride quanta after them
    staged = deadline.leaving(PLAN_S_PER_JOB * m)
    home, job_tickets, homed = homes_and_tickets(problem, user, traded, staged)
    build = time.perf_counter() - started
    schedule = stride_schedule(problem, job_tickets, home, fair.stride_pass,
                               parameters.quanta, staged)
    planned = len(schedule.rounds)
    X = schedule.ran / max(planned, 1)
    thr = np.einsum("ij,ij->i", jobs.throughput, X)
    users = tuple(
        UserShare(names[u], float(tickets[u]), share[u], traded[u], float(before[u]),
                  float(after[u]))
        for u in range(U)
    )
    section = StrideSection(users, trades, schedule.final_pass, tuple(home.tolist()),
                            schedule.migrations, exact.objective)
    cut = Cut(complete, homed, planned, schedule.partial)
    cert = _certificate(parameters, exact, float(after.sum()), options.relative_gap, build,
                        time.perf_counter() - started - build, cut, U, trades,
                        schedule.migrations)
    objective_value = after[user]
    return Plan(time_share=X, effective_throughput=thr, normalized_throughput=thr,
                objective_value=objective_value, job_dual=np.zeros(m),
                accelerator_prices=np.zeros(n), certificate=cert,
                job_status=(JobStatus.ALLOCATED,) * m, job_reason=("",) * m,
                shares=ShareSection(rounds=schedule.rounds), stride=section)


@dataclass(frozen=True)
class Cut:
    """Which stages the deadline cut short."""

    trading_complete: bool
    """Greedy trading reached its fixed point."""
    homed: bool
    """Every job's home was chosen by the greedy rule."""
    planned: int
    """Stride quanta planned."""
    partial: bool
    """The first quantum was cut short."""

    def short(self, quanta: int) -> bool:
        """Any stage was cut short."""
        return (not self.trading_complete or not self.homed or self.partial
                or self.planned < quanta)


def _certificate(
    parameters: GandivaFairParameters,
    exact: ExactTrading,
    objective: float,
    tolerance: float,
    build: float,
    solve_time: float,
    cut: Cut,
    users: int,
    trades: tuple[Trade, ...],
    migrations: int,
) -> Certificate:
    mode = parameters.trading
    formulation = (f"Gandiva_fair: {users} users, {mode.value} trading ({len(trades)} trades), "
                   f"stride over {cut.planned} quanta ({migrations} migrations)")
    bound = exact.bound if math.isfinite(exact.bound) else None
    if mode is TradingMode.EXACT:
        gap = Certificate(Termination.OPTIMAL, True, objective, bound).gap
        ended = termination(exact.status, True, gap, tolerance)
        if ended is Termination.OPTIMAL and cut.short(parameters.quanta):
            ended = Termination.FEASIBLE  # the trades are optimal, the schedule is cut short
    else:
        ended = Termination.HEURISTIC
    detail = f"trading LP: {exact.status.value}, optimum {exact.objective:.6g}"
    if not cut.trading_complete:
        detail += "; greedy trading stopped before its fixed point (limit)"
    if not cut.homed:
        detail += ("; homes of the jobs left at the time limit were their types with the "
                   "largest unmet share")
    if cut.partial:
        detail += ("; stride cut within its first quantum by the time limit: only the gangs "
                   "placed before it run")
    elif cut.planned < parameters.quanta:
        detail += f"; stride cut at {cut.planned} quanta by the time limit"
    return Certificate(
        termination=ended,
        maximize=True,
        objective=objective,
        bound=bound,
        solver=exact.solver or "greedy",
        solver_version=exact.solver_version,
        formulation=formulation,
        build_time_s=build,
        solve_time_s=solve_time,
        model_size=exact.size,
        max_violation=exact.violation if mode is TradingMode.EXACT else 0.0,
        detail=detail,
    )
