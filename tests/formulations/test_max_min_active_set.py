"""Weighted max-min fairness above `SAMPLE_CLASSES` classes: prices from the Lagrangian dual,
then the active set (`max_min_fairness._active_set`), checked on congested instances with
ties, types without devices and both compat modes against the independent cvxpy reference,
with the returned duals re-checked as a certificate; the price search's own answer where its
bounds meet; and every place a deadline can cut the method.

The active set is forced on 60-250 job instances by patching `SAMPLE_CLASSES` (and the closed
form for uncongested instances, which has its own test), as in `test_max_min_fairness`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from unittest import mock

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

import apportion.formulations.max_min_fairness as mmf
from apportion.solver.model import Compat, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import MaxMinFairnessParameters
from apportion.solver.result import Plan, Termination
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem
from tests.countdown import CountdownDeadline

from .reference_max_min import Instance, dual_objective, reference_optimum

Array = NDArray[np.float64]
OPT_REL = 1e-6
FEAS_TOL = 1e-7


@dataclass(frozen=True)
class CongestedSpec:
    """Seeded instance (a falsifying example prints the numbers that rebuild it): m jobs on
    n types with 0-12 devices each (some types none), throughputs over three decades with a
    third of the cells unusable, a fifth of the jobs copies of others (ties between jobs and
    between their patterns), weights 1 or 2, scale factors 1-4; Gavel compat (cells with
    s_i > W_j usable) one time in four."""

    seed: int
    m: int
    n: int

    def build(self) -> tuple[Instance, Compat]:
        rng = np.random.default_rng(self.seed)
        m, n = self.m, self.n
        W = rng.integers(0, 13, n).astype(np.float64)
        W[rng.integers(0, n)] = max(W.max(), 2.0)
        T = np.exp(rng.uniform(math.log(0.1), math.log(100.0), (m, n)))
        T[rng.random((m, n)) < 1 / 3] = 0.0
        present = np.nonzero(W > 0)[0]
        T[np.arange(m), rng.choice(present, m)] = np.exp(rng.uniform(0.0, 2.0, m))
        copies = rng.random(m) < 0.2
        T[copies] = T[rng.integers(0, m, int(copies.sum()))]
        s = np.ones(m)
        for i in range(m):
            usable = [c for c in (1.0, 2.0, 4.0) if np.any((T[i] > 0) & (c <= W))]
            s[i] = rng.choice(usable)
        w = rng.choice([1.0, 2.0], m)
        compat = Compat.GAVEL if rng.random() < 0.25 else Compat.NONE
        return Instance(T, W, s, w), compat


CONGESTED = st.builds(CongestedSpec, seed=st.integers(0, 2**32 - 1), m=st.integers(60, 250),
                      n=st.integers(2, 6))


def level_coefficients(inst: Instance, compat: Compat) -> Array:
    """a[i,j] = s_i T[i,j] / (w_i prop_i) (A2.1) on usable cells: T > 0, and s_i <= W[j]
    unless Gavel compat (A1.2 B4)."""
    prop = inst.T @ inst.W / inst.W.sum()
    usable = inst.T > 0
    if compat is not Compat.GAVEL:
        usable &= inst.s[:, None] <= inst.W[None, :]
    return np.where(usable, (inst.s / (inst.w * prop))[:, None] * inst.T, 0.0)


def to_problem(inst: Instance) -> Problem:
    return make_problem([f"t{j}" for j in range(inst.n)], inst.W.astype(np.int64), inst.T,
                        scale_factor=inst.s.astype(np.int64), priority_weight=inst.w)


def solve_forced(inst: Instance, compat: Compat, deadline: CountdownDeadline | None = None,
                 sample_classes: int = 20) -> Plan:
    request = PolicyRequest("weighted_max_min_fairness", MaxMinFairnessParameters(),
                            compat=compat)
    with mock.patch.object(mmf, "SAMPLE_CLASSES", sample_classes), \
            mock.patch.object(mmf, "_solve_uncongested", lambda lp: None):
        return solve(to_problem(inst), request, SolveOptions(), deadline)


def check_plan(inst: Instance, a: Array, plan: Plan, t_star: float) -> None:
    """Feasible (B1-B4 on the usable cells of `a`), its objective the recomputed minimum
    level and never above t*, its bound the dual objective of its own (y, pi), never below
    t*; OPTIMAL only with a gap within the tolerance, then equal to t*."""
    X = plan.time_share
    assert X.min() >= 0.0 and np.all(X.sum(axis=1) <= 1 + FEAS_TOL)
    assert np.all(inst.s @ X <= inst.W + FEAS_TOL * np.maximum(1.0, inst.W))
    assert np.all(X[a <= 0] == 0.0)
    cert = plan.certificate
    levels = np.einsum("ij,ij->i", a, X)
    assert cert.objective is not None
    assert math.isclose(cert.objective, float(levels.min()), rel_tol=1e-9, abs_tol=1e-12)
    assert cert.objective <= t_star * (1 + OPT_REL)
    if cert.bound is not None:
        y, pi = plan.job_dual, plan.accelerator_prices
        assert y.min() >= 0.0 and pi.min() >= 0.0
        bound, _ = dual_objective(a, inst.s, inst.W, y, pi)
        assert math.isclose(cert.bound, bound, rel_tol=1e-9)
        assert bound >= t_star * (1 - OPT_REL)
    if cert.termination is Termination.OPTIMAL:
        assert cert.gap is not None and cert.gap <= OPT_REL
        assert math.isclose(cert.objective, t_star, rel_tol=OPT_REL)


@given(spec=CONGESTED)
def test_active_set_on_congested_instances_with_ties(spec: CongestedSpec) -> None:
    inst, compat = spec.build()
    a = level_coefficients(inst, compat)
    t_star = reference_optimum(a, inst.s, inst.W).t
    plan = solve_forced(inst, compat)
    assert plan.certificate.termination is Termination.OPTIMAL, plan.certificate
    assert "active set" in plan.certificate.formulation, plan.certificate.formulation
    check_plan(inst, a, plan, t_star)


def test_bounds_met_by_the_price_search() -> None:
    """t* = min_i max_j a[i,j] (every row can reach the bottleneck row's best level) although
    every row on its own best type does not fit, so the closed form declines: the price
    search's bounds meet at u_min and its recovered plan is the answer."""
    # rows alternate between "best on type 0" (a = [2, 1.9]) and the bottleneck (a = [1, 0.9])
    m = 60
    a = np.tile(np.array([[2.0, 1.9], [1.0, 0.9]]), (m // 2, 1))
    lp = mmf.LevelProblem(a, np.ones(m), np.array([m / 2, m / 2 * 0.6]), np.ones(m))
    assert mmf._solve_uncongested(lp) is None
    with mock.patch.object(mmf, "SAMPLE_CLASSES", 2):
        sol = mmf.solve_levels(lp)
    assert sol.status.solved and "bounds met" in sol.method, sol.method
    cert = mmf.certify(a, np.ones(m), lp.W, sol.X, sol.y / lp.k, sol.pi)
    assert cert.max_violation <= FEAS_TOL
    assert math.isclose(cert.objective, 1.0, rel_tol=1e-9)
    assert cert.bound is not None and math.isclose(cert.bound, 1.0, rel_tol=1e-9)


def test_every_deadline_cut_leaves_a_feasible_plan_with_a_valid_bound() -> None:
    """Cut after 0, 1, 2, ... looks at the deadline (price search, reduced LPs, exchange
    columns): the plan is always feasible with a proven bound, and says `optimal` only when
    its gap proves it; with enough looks the method finishes."""
    inst, compat = CongestedSpec(seed=7, m=240, n=4).build()
    a = level_coefficients(inst, compat)
    t_star = reference_optimum(a, inst.s, inst.W).t
    seen = set()
    for checks in range(0, 40):
        plan = solve_forced(inst, compat, CountdownDeadline(checks=checks))
        cert = plan.certificate
        seen.add(cert.termination)
        assert cert.termination in (Termination.OPTIMAL, Termination.FEASIBLE,
                                    Termination.NO_SOLUTION), cert
        if cert.termination is not Termination.NO_SOLUTION:
            check_plan(inst, a, plan, t_star)
        searched = re.search(r"(\d+) price evaluations, gap ([0-9.e+-]+)", cert.formulation)
        if cert.termination is Termination.FEASIBLE and searched:
            # never worse than what the price search had proven when time ran out (the
            # formulation prints that gap to two digits)
            assert cert.gap is not None and cert.gap <= 1.1 * float(searched.group(2)) + 1e-9
    assert Termination.FEASIBLE in seen and Termination.OPTIMAL in seen, seen


def test_types_without_devices_get_prices_that_certify() -> None:
    """Gavel compat keeps the cells of a type without devices usable (a > 0) though no job can
    have time there: the certificate needs that type priced high enough for every job's dual
    constraint, at no cost to the bound (W_j = 0)."""
    rng = np.random.default_rng(3)
    m = 80
    T = np.exp(rng.uniform(0.0, 3.0, (m, 3)))
    T[:, 1] *= 10.0  # the type without devices would be every job's best
    inst = Instance(T, np.array([6.0, 0.0, 9.0]), np.ones(m), rng.choice([1.0, 2.0], m))
    for compat in (Compat.GAVEL, Compat.NONE):
        a = level_coefficients(inst, compat)
        t_star = reference_optimum(a, inst.s, inst.W).t
        plan = solve_forced(inst, compat)
        assert plan.certificate.termination is Termination.OPTIMAL, plan.certificate
        assert np.all(plan.time_share[:, 1] == 0.0)
        check_plan(inst, a, plan, t_star)
