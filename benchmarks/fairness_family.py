"""The fairness, elastic and partitioning family (B1-B3, B7-B10) at 64, 512 and 2,048 jobs, each
against a reference solved in the same run.

    python benchmarks/fairness_family.py [--cases NAME ...] [--sizes 64 512 2048] [--seed 1]
                                         [--limit-s 120]

Every case is one function `(jobs, seed, limit_s) -> list[Row]` registered in `CASES` with
`@case("name")`; a policy may register several cases (scenarios). To add a policy, write its
function here and register it; nothing else changes. A row reports apportion's wall time
(through `solve()`, validated model in, plan with certificate out), the reference's wall time,
both objectives and the ratio reference / apportion. Timings are wall seconds on this machine;
`--limit-s` caps each solve (a capped solve is reported with its termination).

Cases (B1-B3):

* `themis_first_epoch` — Themis's auction when every device is free (the first epoch), with
  the default knob f = 0.8 (the worst 20% bid) and with f = 0 (every job bids). Reference: the
  same proportional-fair program and payments built as a plain dense MILP for
  scipy.optimize.milp (HiGHS), the brute-force-free way one would write it; rel. diff compares
  the proportional-fair welfare, "max |dc|" the kept fractions.
* `themis_steady` — Themis in steady state: 90% of the devices are held under leases, 10% free,
  every job without a lease bids (f = 0); same reference.
* `gandiva_fair` — Gandiva_fair on 16 tenants with random weights and two speedup classes,
  20 stride quanta; reference: the exact trading LP written in cvxpy (HiGHS); the row gives
  the greedy trades' total throughput against the LP optimum (the heuristic's gap).
* `astraea` — one Astraea lease with long-term state from 20 earlier leases; reference: the
  exact integer program (max of the smallest projected ratio over whole gangs on types,
  scipy.optimize.milp); the row gives the greedy's smallest ratio against the exact one.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp

from apportion.datasets.synthetic import distinct_problem
from apportion.formulations import themis_auction as themis
from apportion.formulations.astraea import tenants_of
from apportion.formulations.fair_share import water_fill
from apportion.formulations.gandiva_fair import fair_shares, user_rates, users_of
from apportion.formulations.gavel_lp import ftf_data
from apportion.formulations.node_pool import node_pools
from apportion.solver.fairness_model import FairnessInputs
from apportion.solver.model import Compat, PolicyRequest, Problem, SolveOptions, Tenant
from apportion.solver.parameters import (
    AstraeaParameters,
    GandivaFairParameters,
    ThemisAuctionParameters,
)
from apportion.solver.solve import solve


@dataclass(frozen=True)
class Row:
    case: str
    jobs: int
    ours_s: float
    reference_s: float | None
    objective: float | None
    reference_objective: float | None
    termination: str
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.reference_s is None or self.ours_s <= 0:
            return None
        return self.reference_s / self.ours_s


Case = Callable[[int, int, float], list[Row]]
CASES: dict[str, Case] = {}
"""Case name -> function (jobs, seed, time limit s) -> rows."""


def case(name: str) -> Callable[[Case], Case]:
    """Register a benchmark case under `name`."""

    def register(function: Case) -> Case:
        CASES[name] = function
        return function

    return register


def timed(function: Callable[[], object]) -> tuple[object, float]:
    started = time.perf_counter()
    value = function()
    return value, time.perf_counter() - started


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
    gain: np.ndarray, bidder: np.ndarray, use: np.ndarray, capacity: np.ndarray,
    exclude: int, limit_s: float,
) -> float:
    """max sum gain z over one bundle per bidder and capacity, dense, scipy milp (HiGHS)."""
    keep = (bidder != exclude) & (gain > 0)
    g, b, u = gain[keep], bidder[keep], use[keep]
    bidders = np.unique(b)
    one = (b[None, :] == bidders[:, None]).astype(float)
    rows = np.vstack([one, u.T])
    upper = np.concatenate([np.ones(bidders.size), capacity])
    if g.size == 0:
        return 0.0
    result = milp(-g, constraints=LinearConstraint(rows, -np.inf, upper),
                  bounds=Bounds(0, 1), integrality=np.ones(g.size),
                  options={"mip_rel_gap": 1e-12, "time_limit": limit_s})
    return float(-result.fun) if result.x is not None else math.nan


def _themis_row(name: str, problem: Problem, knob: float, limit_s: float) -> Row:
    params = ThemisAuctionParameters(fairness_knob=knob)
    plan, ours = timed(lambda: solve(problem, PolicyRequest("themis_auction", params),
                                     SolveOptions(time_limit_s=limit_s)))
    assert hasattr(plan, "auction")
    section = plan.auction  # type: ignore[attr-defined]
    cert = plan.certificate  # type: ignore[attr-defined]
    # the reference: the same bids, built again, solved densely, payments included
    m = problem.jobs.num_jobs
    fair = problem.fairness or FairnessInputs.empty(m)
    data = ftf_data(problem, problem.jobs.throughput, Compat.NONE)
    holding = themis.holding_leases(problem, fair)
    pools = node_pools(problem, holding)
    rho = np.array([themis.lease_rho(data, i, 0.0, params.lease_s) for i in range(m)])
    offered = themis.offered_jobs(rho, np.flatnonzero(~holding), knob)
    bundles = themis._bundles(problem, fair, data, offered, pools, params.lease_s)

    def reference() -> tuple[float, np.ndarray]:
        bids = themis.auction_bids(bundles, offered, rho, problem, pools)
        gain = np.log(bids.value) - np.log(bids.outside[bids.bidder])
        base = float(np.sum(np.log(bids.outside)))
        best = _reference_pf(gain, bids.bidder, bids.use, bids.capacity, -1, limit_s)
        kept = np.full(bids.num_bidders, np.nan)
        welfare = base + best
        for p, i in enumerate(offered):
            outcome = section.outcomes[i]
            if math.isnan(outcome.kept_fraction):
                continue
            others = welfare - (-math.log(outcome.rho_won))
            without = base - math.log(bids.outside[p]) + _reference_pf(
                gain, bids.bidder, bids.use, bids.capacity, p, limit_s)
            kept[p] = min(1.0, math.exp(others - without))
        return welfare, kept

    (ref_welfare, ref_kept), ref_s = timed(reference)  # type: ignore[misc]
    ours_kept = np.array([section.outcomes[i].kept_fraction for i in offered])
    both = ~np.isnan(ours_kept) & ~np.isnan(ref_kept)
    dc = float(np.max(np.abs(ours_kept[both] - ref_kept[both]), initial=0.0))
    winners = int(both.sum())
    return Row(name, m, ours, ref_s, cert.objective, ref_welfare, str(cert.termination),
               f"f={knob:g}, {offered.size} bidders, {winners} winners, max |dc| {dc:.1e}")


@case("themis_first_epoch")
def themis_first_epoch(num_jobs: int, seed: int, limit_s: float) -> list[Row]:
    problem = themis_instance(num_jobs, seed)
    rows = [_themis_row("themis_first_epoch", problem, 0.8, limit_s)]
    if num_jobs <= 64:  # every job bidding on a free cluster: one MILP per winner
        rows.append(_themis_row("themis_first_epoch", problem, 0.0, limit_s))
    return rows


@case("themis_steady")
def themis_steady(num_jobs: int, seed: int, limit_s: float) -> list[Row]:
    problem = with_leases(themis_instance(num_jobs, seed), 0.9, seed)
    return [_themis_row("themis_steady", problem, 0.0, limit_s)]


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


@case("gandiva_fair")
def gandiva_fair(num_jobs: int, seed: int, limit_s: float) -> list[Row]:
    import cvxpy as cp

    problem = tenant_instance(num_jobs, seed)
    params = GandivaFairParameters(quanta=20)
    plan, ours = timed(lambda: solve(problem, PolicyRequest("gandiva_fair", params),
                                     SolveOptions(time_limit_s=limit_s)))
    cert = plan.certificate  # type: ignore[attr-defined]

    def reference() -> float:
        names, user, tickets = users_of(problem)
        demand = np.bincount(user, weights=problem.jobs.scale_factor.astype(float),
                             minlength=len(names))
        rate = user_rates(problem, user, len(names))
        W = problem.cluster.count.astype(float)
        share = fair_shares(tickets, demand, rate, W)
        Y = cp.Variable(share.shape, nonneg=True)
        thr = cp.sum(cp.multiply(rate, Y), axis=1)
        constraints = [thr >= np.sum(rate * share, axis=1), cp.sum(Y, axis=0) <= W,
                       cp.sum(Y, axis=1) <= demand, Y[rate == 0] == 0]
        value = cp.Problem(cp.Maximize(cp.sum(thr)), constraints).solve(solver=cp.HIGHS)
        return float(value)

    ref, ref_s = timed(reference)
    gap = (float(ref) - cert.objective) / float(ref)  # type: ignore[arg-type]
    return [Row("gandiva_fair", num_jobs, ours, ref_s, cert.objective, float(ref),  # type: ignore[arg-type]
                str(cert.termination),
                f"greedy trades vs LP: gap {gap:.2e}; {len(plan.stride.trades)} trades, "  # type: ignore[attr-defined]
                f"{plan.stride.migrations} migrations")]  # type: ignore[attr-defined]


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


def _astraea_exact(problem: Problem, limit_s: float) -> float:
    """max t s.t. (G_u + L sum_{i in u} s_i x_ij) / B_u >= t, sum_i s_i x_ij <= W_j,
    sum_j x_ij <= 1, x binary on usable cells (no node layout, no leases held)."""
    params = AstraeaParameters()
    L = params.lease_s
    m = problem.jobs.num_jobs
    names, tenant, weights = tenants_of(problem)
    fair = problem.fairness or FairnessInputs.empty(m)
    usage = {u.tenant: u for u in fair.tenant_usage}
    consumed = np.array([usage[u].gpu_time_s if u in usage else 0.0 for u in names])
    entitled = np.array([usage[u].entitled_gpu_time_s if u in usage else 0.0 for u in names])
    s = problem.jobs.scale_factor.astype(float)
    demand = np.bincount(tenant, weights=s, minlength=len(names))
    basis = entitled + water_fill(float(problem.cluster.count.sum()), weights, demand) * L
    rows_i, cols_j = np.nonzero(problem.usable)
    k = rows_i.size
    # variables: x (k), t
    cap = sp.csr_matrix((s[rows_i], (cols_j, np.arange(k))), shape=(problem.cluster.num_types,
                                                                     k + 1))
    one = sp.csr_matrix((np.ones(k), (rows_i, np.arange(k))), shape=(m, k + 1))
    ratio = sp.lil_matrix((len(names), k + 1))
    for c in range(k):
        ratio[tenant[rows_i[c]], c] = -L * s[rows_i[c]] / basis[tenant[rows_i[c]]]
    ratio[:, k] = np.ones((len(names), 1))
    A = sp.vstack([cap, one, ratio.tocsr()])
    upper = np.concatenate([problem.cluster.count.astype(float), np.ones(m), consumed / basis])
    cost = np.zeros(k + 1)
    cost[k] = -1.0
    result = milp(cost, constraints=LinearConstraint(A, -np.inf, upper),
                  bounds=Bounds(np.zeros(k + 1), np.concatenate([np.ones(k), [np.inf]])),
                  integrality=np.concatenate([np.ones(k), [0]]),
                  options={"time_limit": limit_s, "mip_rel_gap": 1e-6})
    return float(-result.fun) if result.x is not None else math.nan


@case("astraea")
def astraea(num_jobs: int, seed: int, limit_s: float) -> list[Row]:
    problem = astraea_instance(num_jobs, seed)
    plan, ours = timed(lambda: solve(problem, PolicyRequest("astraea", AstraeaParameters()),
                                     SolveOptions(time_limit_s=limit_s)))
    cert = plan.certificate  # type: ignore[attr-defined]
    exact, ref_s = timed(lambda: _astraea_exact(problem, limit_s))
    note = (f"greedy smallest ratio {cert.objective:.6f} vs exact {exact:.6f}, fractional "
            f"bound {cert.bound:.6f}")
    return [Row("astraea", num_jobs, ours, ref_s, cert.objective, float(exact),  # type: ignore[arg-type]
                str(cert.termination), note)]


# --------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 512, 2048])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--limit-s", type=float, default=120.0)
    args = parser.parse_args()
    print(f"{'case':<20} {'jobs':>6} {'ours s':>9} {'ref s':>9} {'ratio':>7} "
          f"{'objective':>14} {'reference':>14} {'termination':<19} note")
    for name in args.cases:
        for size in args.sizes:
            for row in CASES[name](size, args.seed, args.limit_s):
                ratio = f"{row.ratio:7.2f}" if row.ratio is not None else "      -"
                ref_s = f"{row.reference_s:9.3f}" if row.reference_s is not None else "        -"
                obj = f"{row.objective:14.6g}" if row.objective is not None else " " * 14
                ref = (f"{row.reference_objective:14.6g}"
                       if row.reference_objective is not None else " " * 14)
                print(f"{row.case:<20} {row.jobs:>6} {row.ours_s:9.3f} {ref_s} {ratio} "
                      f"{obj} {ref} {row.termination:<19} {row.note}", flush=True)


if __name__ == "__main__":
    main()
