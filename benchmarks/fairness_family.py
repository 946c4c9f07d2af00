"""The fairness, elastic and partitioning family (issue 17): every policy against a reference
computed in the same run, with the ratio.

    python benchmarks/fairness_family.py [--cases NAME ...] [--sizes 64 512 2048] [--seed 0]
                                         [--limit-s 120] [--pop-sizes 100000 1000000]
                                         [--pop-families distinct catalog]

One function per policy (`CASES`: name -> function (sizes, seed) -> rows), each returning
`Row`s; add a policy by adding its function to `CASES`. Times are wall seconds on this machine;
apportion's through `solve()` (validated model in, plan with certificate out). `--limit-s`
caps every solve and every reference of the fairness family (a capped solve is reported with
its termination).

Fairness family (B1-B3):

* themis_first_epoch: Themis's auction when every device is free (the first epoch), with the
  default knob f = 0.8 (the worst 20% bid), and with f = 0 (every job bids) at 64 jobs.
  Reference: the same bids, proportional-fair program and payments written as plain dense
  MILPs for scipy.optimize.milp (HiGHS); the note gives the largest difference of a kept
  fraction c_i.
* themis_steady: Themis in steady state: 90% of the devices held under leases, 10% free, every
  job without a lease bids (f = 0); same reference.
* gandiva_fair: Gandiva_fair, 16 tenants with weights 1-4, 20 stride quanta. Reference: the
  exact trading LP written in cvxpy, timed against apportion's own trading LP; the note gives
  the greedy trades' gap to the LP optimum and the whole policy's time.
* astraea: one Astraea lease after 20 earlier leases. Reference: the exact integer program (max
  of the smallest projected ratio over whole gangs on types, scipy.optimize.milp, capped by
  --limit-s); the note gives the greedy's smallest ratio, the exact one and the bound.

Elastic family (B7-B9):

* optimus, slaq: the policy's greedy (method = greedy, no exact solve) against the exact
  allocation of the same objective (method = exact: dynamic program over devices), on two job
  families: `concave` (Optimus's synchronous speed model: the greedy is provably optimal) and
  `profiled` (goodput measured at 1, 2, 4, 8, 16 devices with superlinear steps: it is not).
* lyra: the knapsack phase by dynamic programming against a plain HiGHS MILP of the same
  multiple-choice knapsack (`elastic_menu.exact` with the DP disabled).
* lyra_reclaim: reclaiming by the greedy against the MILP, growing the loaned nodes until the
  MILP needs more than 10 s (the sizes where the exact part solves in < 10 s are printed).

Partitioning (B10):

* pop: weighted max-min fairness, POP with k = 1, 4, 16 against the exact solve, on distinct-row
  jobs (no aggregation applies) and catalog jobs (it does), at `--pop-sizes`: wall time on this
  machine, POP's own accounting (setup + slowest sub-problem, i.e. one core per sub-problem),
  and the objective ratio.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp

from apportion.datasets.synthetic import catalog_problem, distinct_problem
from apportion.formulations import themis_auction as themis
from apportion.formulations.astraea import tenants_of
from apportion.formulations.elastic_menu import Menu
from apportion.formulations.elastic_menu import exact as exact_menu
from apportion.formulations.elastic_plan import (
    Placement,
    holdings,
    layout_of,
    run_phases,
)
from apportion.formulations.fair_share import water_fill
from apportion.formulations.gandiva_fair import fair_shares, user_rates, users_of
from apportion.formulations.gavel_lp import ftf_data
from apportion.formulations.leases import holding_leases
from apportion.formulations.lyra import lyra as lyra_outcome
from apportion.formulations.lyra import reclaim_instance, remaining_steps
from apportion.formulations.lyra_reclaim import ReclaimInstance, exact_reclaim, greedy_reclaim
from apportion.formulations.node_pool import node_pools
from apportion.formulations.optimus import time_saved
from apportion.formulations.trading import exact_trading
from apportion.solver.deadline import Deadline
from apportion.solver.elastic_model import ElasticInputs, LossHistory, SpeedModel
from apportion.solver.fairness_model import FairnessInputs
from apportion.solver.model import (
    Cluster,
    Compat,
    GivenGoodput,
    GivenGoodputs,
    PolicyRequest,
    Problem,
    SolveOptions,
    Tenant,
)
from apportion.solver.parameters import (
    AstraeaParameters,
    ElasticMethod,
    GandivaFairParameters,
    LyraParameters,
    MaxMinFairnessParameters,
    OptimusParameters,
    SlaqParameters,
    ThemisAuctionParameters,
)
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem

T = TypeVar("T")
GPUS_PER_NODE = 8
RECLAIM_LIMIT_S = 10.0
"""The reclaiming MILP's sizes are grown until it needs more than this (s)."""




REFERENCE_LIMIT_S = 120.0
"""Time limit of every solve and reference (s); `--limit-s` sets it."""


@dataclass(frozen=True)
class Row:
    policy: str
    family: str
    jobs: int
    method: str
    seconds: float
    objective: float | None
    reference: str
    reference_seconds: float
    reference_objective: float | None
    note: str = ""

    def line(self) -> str:
        obj = f"{self.objective:.6g}" if self.objective is not None else "-"
        if self.reference == "-":  # no reference for this row
            return (f"{self.policy:13s} {self.family:9s} {self.jobs:>8d} {self.method:>10s} "
                    f"{self.seconds:9.3f} {'-':>12s} {'-':>9s} {'-':>9s} {obj:>12s} "
                    f"{'-':>12s} {'-':>9s}  {self.note}")
        ratio = self.reference_seconds / self.seconds if self.seconds > 0 else float("nan")
        gap = float("nan")
        if self.objective is not None and self.reference_objective is not None:
            gap = abs(self.objective - self.reference_objective) / max(
                abs(self.reference_objective), 1e-12)
        ref = f"{self.reference_objective:.6g}" if self.reference_objective is not None else "-"
        return (f"{self.policy:13s} {self.family:9s} {self.jobs:>8d} {self.method:>10s} "
                f"{self.seconds:9.3f} {self.reference:>12s} {self.reference_seconds:9.3f} "
                f"{ratio:8.2f}x {obj:>12s} {ref:>12s} {gap:9.2e}  {self.note}")


HEADER = (f"{'policy':13s} {'family':9s} {'jobs':>8s} {'method':>10s} {'seconds':>9s} "
          f"{'reference':>12s} {'ref. s':>9s} {'ref/ours':>9s} {'objective':>12s} "
          f"{'ref. obj':>12s} {'rel. diff':>9s}  note")


def timed(function: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, float]:
    """function(*args, **kwargs) and its wall seconds."""
    started = time.perf_counter()
    value = function(*args, **kwargs)
    return value, time.perf_counter() - started


def limited() -> SolveOptions:
    return SolveOptions(time_limit_s=REFERENCE_LIMIT_S)


# --------------------------------------------------------------------------------------------
# Themis (B1)


def themis_instance(num_jobs: int, seed: int) -> Problem:
    """Distinct-row jobs on 0.75 devices per job, remaining work 60 * 10^U(1.5, 3) s on the
    k80, arrivals in the last hour."""
    base = distinct_problem(num_jobs, seed)
    rng = np.random.default_rng(seed + 1)
    k80 = base.jobs.throughput[:, 2]
    jobs = replace(base.jobs, total_steps=60.0 * 10 ** rng.uniform(1.5, 3.0, num_jobs) * k80,
                   arrival_time_s=rng.uniform(0.0, 3600.0, num_jobs))
    return replace(base, jobs=jobs, time_s=3600.0)


def with_leases(problem: Problem, held_fraction: float, seed: int) -> Problem:
    """`problem` with random jobs holding leases (on their fastest type with room) until
    `held_fraction` of every type's devices is held."""
    rng = np.random.default_rng(seed + 2)
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    target = np.floor(problem.cluster.count * held_fraction).astype(np.int64)
    held = np.zeros(n, np.int64)
    current = np.full(m, -1, np.int64)
    devices = np.zeros(m, np.int64)
    s = problem.jobs.scale_factor
    for i in rng.permutation(m):
        for j in np.argsort(-problem.jobs.throughput[i]):
            if held[j] + s[i] <= target[j] and problem.usable[i, j]:
                current[i], devices[i] = j, s[i]
                held[j] += s[i]
                break
    history = replace(problem.history, current_type=current, current_devices=devices)
    fair = FairnessInputs.empty(m)
    expires = np.where(current >= 0, problem.time_s + 300.0, 0.0)
    return replace(problem, history=history, fairness=replace(fair, lease_expires_s=expires))


def _reference_pf(
    gain: np.ndarray, bidder: np.ndarray, use: np.ndarray, capacity: np.ndarray, exclude: int,
) -> float:
    """max sum gain z over one bundle per bidder and capacity, dense, scipy milp (HiGHS)."""
    keep = (bidder != exclude) & (gain > 0)
    g, b, u = gain[keep], bidder[keep], use[keep]
    if g.size == 0:
        return 0.0
    bidders = np.unique(b)
    one = (b[None, :] == bidders[:, None]).astype(float)
    rows = np.vstack([one, u.T])
    upper = np.concatenate([np.ones(bidders.size), capacity])
    result = milp(-g, constraints=LinearConstraint(rows, -np.inf, upper),
                  bounds=Bounds(0, 1), integrality=np.ones(g.size),
                  options={"mip_rel_gap": 1e-12, "time_limit": REFERENCE_LIMIT_S})
    return float(-result.fun) if result.x is not None else math.nan


def _themis_row(family: str, problem: Problem, knob: float) -> Row:
    params = ThemisAuctionParameters(fairness_knob=knob)
    plan, ours = timed(solve, problem, PolicyRequest("themis_auction", params), limited())
    section, cert = plan.auction, plan.certificate
    assert section is not None
    # the reference: the same bids built again, solved densely, payments included
    m = problem.jobs.num_jobs
    fair = problem.fairness or FairnessInputs.empty(m)
    data = ftf_data(problem, problem.jobs.throughput, Compat.NONE)
    holding = holding_leases(problem, fair)
    pools = node_pools(problem, holding)
    rho = np.array([themis.lease_rho(data, i, 0.0, params.lease_s) for i in range(m)])
    offered = themis.offered_jobs(rho, np.flatnonzero(~holding), knob)
    bundles = themis._bundles(problem, fair, data, offered, pools, params.lease_s)

    def reference() -> tuple[float, np.ndarray]:
        bids = themis.auction_bids(bundles, offered, rho, problem, pools)
        gain = np.log(bids.value) - np.log(bids.outside[bids.bidder])
        base = float(np.sum(np.log(bids.outside)))
        welfare = base + _reference_pf(gain, bids.bidder, bids.use, bids.capacity, -1)
        kept = np.full(bids.num_bidders, np.nan)
        for p, i in enumerate(offered):
            outcome = section.outcomes[i]
            if math.isnan(outcome.kept_fraction):
                continue
            others = welfare + math.log(outcome.rho_won)
            without = base - math.log(bids.outside[p]) + _reference_pf(
                gain, bids.bidder, bids.use, bids.capacity, p)
            kept[p] = min(1.0, math.exp(others - without))
        return welfare, kept

    (ref_welfare, ref_kept), ref_s = timed(reference)
    ours_kept = np.array([section.outcomes[i].kept_fraction for i in offered])
    both = ~np.isnan(ours_kept) & ~np.isnan(ref_kept)
    dc = float(np.max(np.abs(ours_kept[both] - ref_kept[both]), initial=0.0))
    return Row("themis", family, m, f"f={knob:g}", ours, cert.objective, "dense MILPs", ref_s,
               ref_welfare, f"{cert.termination}; {offered.size} bidders, {int(both.sum())} "
                            f"winners, max |dc| {dc:.1e}")


def themis_first_epoch(sizes: list[int], seed: int) -> Iterator[Row]:
    for m in sizes:
        problem = themis_instance(m, seed)
        yield _themis_row("first", problem, 0.8)
        if m <= 64:  # every job bidding on a free cluster: one MILP per winner
            yield _themis_row("first", problem, 0.0)


def themis_steady(sizes: list[int], seed: int) -> Iterator[Row]:
    for m in sizes:
        yield _themis_row("steady", with_leases(themis_instance(m, seed), 0.9, seed), 0.0)


# --------------------------------------------------------------------------------------------
# Gandiva_fair (B2)


def tenant_instance(num_jobs: int, seed: int, tenants: int = 16) -> Problem:
    """Distinct-row jobs in `tenants` tenants with weights 1-4."""
    base = distinct_problem(num_jobs, seed)
    rng = np.random.default_rng(seed + 3)
    names = [f"tenant{k}" for k in range(tenants)]
    owner = tuple(names[k] for k in rng.integers(0, tenants, num_jobs))
    listed = tuple(Tenant(name, float(rng.integers(1, 5))) for name in names)
    return replace(base, jobs=replace(base.jobs, tenant=owner), tenants=listed,
                   round_duration_s=60.0)


def _trading_inputs(problem: Problem) -> tuple[np.ndarray, ...]:
    names, user, tickets = users_of(problem)
    demand = np.bincount(user, weights=problem.jobs.scale_factor.astype(float),
                         minlength=len(names)).astype(float)
    rate = user_rates(problem, user, len(names))
    W = problem.cluster.count.astype(float)
    return fair_shares(tickets, demand, rate, W), rate, demand, W


def _cvxpy_trading(share: np.ndarray, rate: np.ndarray, demand: np.ndarray,
                   W: np.ndarray) -> float:
    import cvxpy as cp

    Y = cp.Variable(share.shape, nonneg=True)
    thr = cp.sum(cp.multiply(rate, Y), axis=1)
    constraints = [thr >= np.sum(rate * share, axis=1), cp.sum(Y, axis=0) <= W,
                   cp.sum(Y, axis=1) <= demand, Y[rate == 0] == 0]
    return float(cp.Problem(cp.Maximize(cp.sum(thr)), constraints).solve(solver=cp.HIGHS))


def gandiva_fair(sizes: list[int], seed: int) -> Iterator[Row]:
    _cvxpy_trading(*_trading_inputs(tenant_instance(16, seed)))  # cvxpy's first call, untimed
    for m in sizes:
        problem = tenant_instance(m, seed)
        plan, whole = timed(solve, problem, PolicyRequest(
            "gandiva_fair", GandivaFairParameters(quanta=20)), limited())
        cert, stride = plan.certificate, plan.stride
        assert stride is not None and cert.objective is not None
        share, rate, demand, W = _trading_inputs(problem)
        exact, ours = timed(exact_trading, share, rate, demand, W)
        ref, ref_s = timed(_cvxpy_trading, share, rate, demand, W)
        gap = (ref - cert.objective) / ref
        yield Row("gandiva_fair", "tenants16", m, "LP", ours, exact.objective, "cvxpy LP",
                  ref_s, ref, f"greedy trades' gap to the LP {gap:.2e} ({len(stride.trades)} "
                              f"trades); whole policy {whole:.3f} s ({cert.termination}, "
                              f"{stride.migrations} migrations in 20 quanta)")


# --------------------------------------------------------------------------------------------
# Astraea (B3)


def astraea_instance(num_jobs: int, seed: int, history_leases: int = 20) -> Problem:
    """`tenant_instance` with the state of `history_leases` earlier Astraea leases."""
    problem = tenant_instance(num_jobs, seed)
    m = problem.jobs.num_jobs
    fair = FairnessInputs.empty(m)
    params = AstraeaParameters()
    for step in range(history_leases):
        current = replace(problem, fairness=fair, time_s=step * params.lease_s)
        usage = solve(current, PolicyRequest("astraea", params)).usage
        assert usage is not None
        fair = replace(fair, gpu_time_s=usage.job_gpu_time_s, tenant_usage=usage.tenants)
    return replace(problem, fairness=fair, time_s=history_leases * params.lease_s)


def _astraea_exact(problem: Problem) -> float:
    """max t s.t. (G_u + L sum_{i in u} s_i x_ij) / B_u >= t, sum_i s_i x_ij <= W_j,
    sum_j x_ij <= 1, x binary on usable cells (no node layout, no leases held)."""
    L = AstraeaParameters().lease_s
    m = problem.jobs.num_jobs
    names, tenant, weights = tenants_of(problem)
    fair = problem.fairness or FairnessInputs.empty(m)
    usage = {u.tenant: u for u in fair.tenant_usage}
    consumed = np.array([usage[u].gpu_time_s if u in usage else 0.0 for u in names])
    entitled = np.array([usage[u].entitled_gpu_time_s if u in usage else 0.0 for u in names])
    s = problem.jobs.scale_factor.astype(float)
    demand = np.bincount(tenant, weights=s, minlength=len(names)).astype(np.float64)
    basis = entitled + water_fill(float(problem.cluster.count.sum()), weights, demand) * L
    rows_i, cols_j = np.nonzero(problem.usable)
    k = rows_i.size
    cap = sp.csr_matrix((s[rows_i], (cols_j, np.arange(k))),
                        shape=(problem.cluster.num_types, k + 1))
    one = sp.csr_matrix((np.ones(k), (rows_i, np.arange(k))), shape=(m, k + 1))
    ratio = np.zeros((len(names), k + 1))
    ratio[tenant[rows_i], np.arange(k)] = -L * s[rows_i] / basis[tenant[rows_i]]
    ratio[:, k] = 1.0
    A = sp.vstack([cap, one, sp.csr_matrix(ratio)])
    upper = np.concatenate([problem.cluster.count.astype(float), np.ones(m), consumed / basis])
    cost = np.zeros(k + 1)
    cost[k] = -1.0
    result = milp(cost, constraints=LinearConstraint(A, -np.inf, upper),
                  bounds=Bounds(np.zeros(k + 1), np.concatenate([np.ones(k), [np.inf]])),
                  integrality=np.concatenate([np.ones(k), [0]]),
                  options={"time_limit": REFERENCE_LIMIT_S, "mip_rel_gap": 1e-6})
    return float(-result.fun) if result.x is not None else math.nan


def astraea(sizes: list[int], seed: int) -> Iterator[Row]:
    for m in sizes:
        problem = astraea_instance(m, seed)
        plan, ours = timed(solve, problem, PolicyRequest("astraea", AstraeaParameters()),
                           limited())
        cert = plan.certificate
        exact, ref_s = timed(_astraea_exact, problem)
        capped = " (capped by --limit-s)" if ref_s >= REFERENCE_LIMIT_S else ""
        yield Row("astraea", "tenants16", m, "greedy", ours, cert.objective, "exact MILP",
                  ref_s, exact, f"smallest ratio: greedy {cert.objective:.6f}, exact "
                                f"{exact:.6f}{capped}, fractional bound {cert.bound:.6f}")


# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# Elastic family (B7-B9) and POP (B10)


def elastic_problem(num_jobs: int, family: str, seed: int = 0, loaned_share: float = 0.0,
                    running_share: float = 0.0) -> Problem:
    """`num_jobs` elastic jobs on one GPU type with 2 GPUs per job on 8-GPU nodes, each
    accepting 1-16 GPUs; remaining steps 1e3-1e5; a 12-point inverse loss history each.
    `concave`: Optimus synchronous speed models; `profiled`: goodput at 1, 2, 4, 8, 16 GPUs
    with a superlinear step for a third of the jobs. `loaned_share` of the nodes are loaned
    by inference; `running_share` of the jobs run now on 1-4 GPUs of one or two nodes."""
    rng = np.random.default_rng(seed)
    m = num_jobs
    nodes = max(2, (2 * m) // GPUS_PER_NODE)
    problem = make_problem(["gpu"], [nodes * GPUS_PER_NODE], np.ones((m, 1)))
    jobs = replace(
        problem.jobs,
        total_steps=rng.uniform(1e3, 1e5, m),
        arrival_time_s=rng.uniform(0, 1e4, m),
        min_devices=np.ones(m, np.int64),
        max_devices=np.full(m, 16, np.int64),
        scale_unit=np.ones((m, 1), np.int64),
    )
    models: tuple[tuple[SpeedModel | None, ...], ...] = ()
    if family == "concave":
        models = tuple(
            (SpeedModel(True, np.array([rng.uniform(0.002, 0.02), rng.uniform(0.01, 0.2), 0.0,
                                        rng.uniform(0.0, 0.004), 0.0]), 128.0),)
            for _ in range(m))
    else:
        goodput = []
        for _ in range(m):
            base = rng.uniform(0.5, 5.0)
            efficiency = rng.uniform(0.6, 0.95, 4).cumprod()
            speeds = base * np.array([1, 2, 4, 8, 16]) * np.concatenate([[1.0], efficiency])
            if rng.random() < 1 / 3:  # communication-bound until a whole node
                speeds[1:3] *= 0.5
            goodput.append(tuple(GivenGoodput(0, 1 if d <= GPUS_PER_NODE else 2, d, float(v))
                                 for d, v in zip((1, 2, 4, 8, 16), speeds, strict=True)))
        jobs = replace(jobs, given_goodput=GivenGoodputs.of(goodput))
    steps = np.linspace(0.0, 2000.0, 12)
    histories = tuple(LossHistory(steps, 0.1 + a / (steps + b)) for a, b in zip(
        rng.uniform(1.0, 50.0, m), rng.uniform(50.0, 3000.0, m), strict=True))
    cluster = Cluster(("gpu",), np.array([nodes * GPUS_PER_NODE]), np.ones(1),
                      tuple(f"n{v}" for v in range(nodes)), np.zeros(nodes, np.int64),
                      np.full(nodes, GPUS_PER_NODE, np.int64))
    loaned = rng.choice(nodes, size=int(loaned_share * nodes), replace=False)
    history = problem.history
    held: list[tuple[tuple[int, int], ...]] = [()] * m
    if running_share > 0:
        free = np.full(nodes, GPUS_PER_NODE)
        current = np.full(m, -1, np.int64)
        devices = np.zeros(m, np.int64)
        for i in rng.choice(m, size=int(running_share * m), replace=False):
            want = int(rng.integers(1, 5))
            spots = rng.permutation(nodes)[:2]
            pairs = []
            for v in spots:
                take = min(want, int(free[v]))
                if take:
                    pairs.append((int(v), take))
                    free[v] -= take
                    want -= take
            if pairs:
                held[i] = tuple(pairs)
                current[i] = 0
                devices[i] = sum(d for _, d in pairs)
        history = replace(history, current_type=current, current_devices=devices,
                          current_nodes=tuple(tuple(v for v, _ in h) for h in held))
    elastic = ElasticInputs(histories, models, tuple(held), np.sort(loaned).astype(np.int64),
                            0)
    return replace(problem, cluster=cluster, jobs=jobs, history=history, elastic=elastic)


def _greedy_vs_exact(policy: str, parameters_of: Callable[[ElasticMethod], object],
                     sizes: list[int], seed: int) -> list[Row]:
    rows = []
    for family in ("concave", "profiled"):
        for m in sizes:
            problem = elastic_problem(m, family, seed)
            greedy, g_s = timed(solve, problem, PolicyRequest(
                policy, parameters_of(ElasticMethod.GREEDY)))
            best, e_s = timed(solve, problem, PolicyRequest(
                policy, parameters_of(ElasticMethod.EXACT)))
            g_cert, e_cert = greedy.certificate, best.certificate
            rows.append(Row(policy, family, m, "greedy", g_s, g_cert.objective, "exact (DP)",
                            e_s, e_cert.objective, f"exact: {e_cert.termination}"))
    return rows


def optimus_case(sizes: list[int], seed: int) -> list[Row]:
    return _greedy_vs_exact(
        "optimus", lambda method: OptimusParameters(method=method, exact_gap=False), sizes,
        seed)


def slaq_case(sizes: list[int], seed: int) -> list[Row]:
    return _greedy_vs_exact(
        "slaq", lambda method: SlaqParameters(method=method, exact_gap=False, horizon_s=600.0),
        sizes, seed)


def knapsack(problem: Problem) -> Menu:
    """Lyra's phase-2 knapsack of `problem` (no reclaiming)."""
    layout = layout_of(problem)
    remaining = remaining_steps(problem)
    placement = Placement(layout, layout.node_devices.copy(), partial(holdings, problem))
    phases = run_phases(problem, 64, problem.cluster.count, placement,
                        lambda i, o: time_saved(float(remaining[i]), o), ElasticMethod.GREEDY,
                        Deadline.never(), 1e-9, with_exact=False)
    return phases.menu


def lyra_case(sizes: list[int], seed: int) -> list[Row]:
    """Lyra's plan (its DP), then the same knapsack by a plain HiGHS MILP."""
    rows = []
    for family in ("concave", "profiled"):
        for m in sizes:
            problem = elastic_problem(m, family, seed, loaned_share=0.25, running_share=0.3)
            out, ours = timed(lyra_outcome, problem, LyraParameters(),
                               SolveOptions(relative_gap=1e-9), Deadline.never())
            cert = out.certificate
            menu = knapsack(problem)
            dp, dp_s = timed(exact_menu, menu, problem.cluster.count)
            milp, milp_s = timed(exact_menu, menu, problem.cluster.count, relative_gap=1e-9,
                                  cell_limit=-1)
            dp_value = dp.allocation.objective if dp.allocation else None
            milp_value = milp.allocation.objective if milp.allocation else None
            rows.append(Row("lyra", family, m, "plan", ours, cert.objective, "-", 0.0, None,
                            f"{cert.termination}"))
            rows.append(Row("lyra-knapsack", family, m, "DP", dp_s, dp_value, "HiGHS MILP",
                            milp_s, milp_value, f"milp: {milp.status}"))
    return rows


def spread_instance(loaned_nodes: int, seed: int) -> ReclaimInstance:
    """Two jobs per loaned node, each on 1-6 nodes with 1-4 devices on each; 40% inelastic,
    the others able to lose a random part of their devices; a quarter of the nodes asked
    back."""
    rng = np.random.default_rng(seed)
    m = 2 * loaned_nodes
    held = np.zeros((m, loaned_nodes), np.int64)
    for i in range(m):
        span = min(int(rng.integers(1, 7)), loaned_nodes)
        nodes = rng.choice(loaned_nodes, size=span, replace=False)
        held[i, nodes] = rng.integers(1, 5, size=span)
    total = held.sum(axis=1)
    slack = np.where(rng.random(m) < 0.4, 0, rng.integers(0, np.maximum(total, 1)))
    return ReclaimInstance(held, slack.astype(np.int64), loaned_nodes // 4)


def packed_instance(loaned_nodes: int, seed: int) -> ReclaimInstance:
    """The elastic workload with every node loaned, 60% of the jobs running on 1-4 devices
    of one or two nodes."""
    m = loaned_nodes * GPUS_PER_NODE // 2
    problem = elastic_problem(m, "concave", seed, loaned_share=1.0, running_share=0.6)
    assert problem.elastic is not None
    problem = replace(problem, elastic=replace(problem.elastic,
                                               loaned_nodes=np.arange(loaned_nodes),
                                               reclaim_nodes=loaned_nodes // 4))
    return reclaim_instance(problem, 64)


def lyra_reclaim_case(sizes: list[int], seed: int) -> Iterator[Row]:
    """Greedy against the MILP, loaned nodes x 2 per step until the MILP needs more than 10 s
    (or 1,024 nodes)."""
    for family, make in (("packed", packed_instance), ("spread", spread_instance)):
        loaned_nodes = 8
        while True:
            instance = make(loaned_nodes, seed)
            greedy, g_s = timed(greedy_reclaim, instance)
            best, e_s = timed(exact_reclaim, instance, Deadline.after(3 * RECLAIM_LIMIT_S))
            value = float(best.cost) if best is not None else None
            bound = best.bound if best is not None else None
            status = best.status if best is not None else "no incumbent"
            yield Row("lyra-reclaim", family, instance.held.shape[0], f"{loaned_nodes} nodes",
                      g_s, float(greedy.cost), "MILP", e_s, value,
                      f"k = {instance.count}, MILP {status}, bound {bound}")
            if e_s > RECLAIM_LIMIT_S or loaned_nodes >= 1024:
                break
            loaned_nodes *= 2


def pop_case(sizes: list[int], seed: int, families: tuple[str, ...] = ("distinct", "catalog")
             ) -> Iterator[Row]:
    """Max-min fairness, POP-k against the exact solve: distinct rows (no aggregation applies)
    and Gavel-like catalog rows (aggregation into classes does)."""
    policy = PolicyRequest("weighted_max_min_fairness", MaxMinFairnessParameters())
    makers = {"distinct": distinct_problem, "catalog": catalog_problem}
    for family in families:
        for m in sizes:
            problem = makers[family](m, seed=seed)
            exact, e_s = timed(solve, problem, policy)
            e_cert = exact.certificate
            for k in (1, 4, 16):
                plan, p_s = timed(solve, problem, policy, SolveOptions(partitions=k, seed=seed))
                cert = plan.certificate
                report = plan.shares.partition
                pop_time = report.pop_time_s if report is not None else p_s
                yield Row("pop-max-min", family, m, f"POP-{k}", p_s, cert.objective, "exact",
                          e_s, e_cert.objective,
                          f"POP time (setup + slowest) {pop_time:.2f} s, "
                          f"{report.workers if report else 1} worker(s)")


CASES: dict[str, Callable[[list[int], int], list[Row] | Iterator[Row]]] = {
    "themis_first_epoch": themis_first_epoch,
    "themis_steady": themis_steady,
    "gandiva_fair": gandiva_fair,
    "astraea": astraea,
    "optimus": optimus_case,
    "slaq": slaq_case,
    "lyra": lyra_case,
    "lyra_reclaim": lyra_reclaim_case,
    "pop": pop_case,
}


def main() -> None:
    global REFERENCE_LIMIT_S
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 512, 2048])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit-s", type=float, default=REFERENCE_LIMIT_S)
    parser.add_argument("--pop-sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--pop-families", nargs="+", default=["distinct", "catalog"],
                        choices=["distinct", "catalog"])
    args = parser.parse_args()
    REFERENCE_LIMIT_S = args.limit_s
    print(HEADER)
    print("-" * len(HEADER))
    for name in args.cases:
        if name == "pop":
            rows = pop_case(args.pop_sizes, args.seed, tuple(args.pop_families))
        else:
            rows = iter(CASES[name](args.sizes, args.seed))
        for row in rows:
            print(row.line(), flush=True)


if __name__ == "__main__":
    main()
