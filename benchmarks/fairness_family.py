"""The fairness, elastic and partitioning family (issue 17): every policy against a reference
computed in the same run, with the ratio.

    python benchmarks/fairness_family.py [--cases NAME ...] [--sizes 64 512 2048] [--seed 0]
                                         [--limit-s 120]

One function per policy (`CASES`: name -> function (sizes, seed) -> rows), each returning
`Row`s; add a policy by adding its function to `CASES`. Times are wall seconds on this machine;
apportion's through `solve()` (validated model in, plan with certificate out). `--limit-s`
caps every solve and every reference (a capped solve is reported with its termination).

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
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp

from apportion.datasets.synthetic import distinct_problem
from apportion.formulations import themis_auction as themis
from apportion.formulations.astraea import tenants_of
from apportion.formulations.fair_share import water_fill
from apportion.formulations.gandiva_fair import fair_shares, user_rates, users_of
from apportion.formulations.gavel_lp import ftf_data
from apportion.formulations.leases import holding_leases
from apportion.formulations.node_pool import node_pools
from apportion.formulations.trading import exact_trading
from apportion.solver.fairness_model import FairnessInputs
from apportion.solver.model import Compat, PolicyRequest, Problem, SolveOptions, Tenant
from apportion.solver.parameters import (
    AstraeaParameters,
    GandivaFairParameters,
    ThemisAuctionParameters,
)
from apportion.solver.solve import solve

T = TypeVar("T")


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
        ratio = self.reference_seconds / self.seconds if self.seconds > 0 else float("nan")
        gap = float("nan")
        if self.objective is not None and self.reference_objective is not None:
            gap = abs(self.objective - self.reference_objective) / max(
                abs(self.reference_objective), 1e-12)
        obj = f"{self.objective:.6g}" if self.objective is not None else "-"
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


CASES: dict[str, Callable[[list[int], int], list[Row] | Iterator[Row]]] = {
    "themis_first_epoch": themis_first_epoch,
    "themis_steady": themis_steady,
    "gandiva_fair": gandiva_fair,
    "astraea": astraea,
}


def main() -> None:
    global REFERENCE_LIMIT_S
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 512, 2048])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit-s", type=float, default=REFERENCE_LIMIT_S)
    args = parser.parse_args()
    REFERENCE_LIMIT_S = args.limit_s
    print(HEADER)
    print("-" * len(HEADER))
    for name in args.cases:
        for row in CASES[name](args.sizes, args.seed):
            print(row.line(), flush=True)


if __name__ == "__main__":
    main()
