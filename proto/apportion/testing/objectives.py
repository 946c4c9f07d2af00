"""Each declared objective (`apportion.solver.capabilities.Objective`) recomputed from a
snapshot and a response's plan, written from the definitions in docs/policies, without any
code of the formulations: what `check_plan` compares the certificate's objective with."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from apportion.solver.capabilities import Objective
from apportion.solver.model import Compat, FloatArray, PolicyRequest, Problem, TenantSharing
from apportion.testing.plan_view import PlanView, throughput_under
from apportion.v1 import allocation_service_pb2 as service_pb


class NotDefined(Exception):
    """The objective has no value to compare for this plan (the reason says why)."""


Recompute = Callable[[Problem, PolicyRequest, service_pb.SolveResponse, PlanView], float]


def recompute(
    objective: Objective,
    problem: Problem,
    policy: PolicyRequest,
    response: service_pb.SolveResponse,
    view: PlanView,
) -> float:
    """The objective of the plan in `response`; raises `NotDefined` when it has none."""
    return _RECOMPUTE[objective](problem, policy, response, view)


def maximizes(objective: Objective | None, policy: PolicyRequest, registered: bool) -> bool:
    """The objective's sense for these parameters: the registry's, except where a parameter
    flips it (Sia's power p > 0 maximizes, A5.5)."""
    if objective is Objective.CONFIGURATION_TERMS:
        power = getattr(policy.parameters, "fairness_power", None)
        if power is not None:
            return float(power) > 0
    return registered


# ------------------------------------------------------------------------------ shared terms


def _count(problem: Problem) -> FloatArray:
    return problem.cluster.count.astype(np.float64)


def _proportional(T: FloatArray, W: FloatArray) -> FloatArray:
    """prop_i = sum_j T[i,j] W[j] / sum_j W[j] (A1.3)."""
    return np.asarray(T @ W / W.sum(), dtype=np.float64)


def policy_throughput(problem: Problem, reference_type: str) -> FloatArray:
    """T, or the reference type's column in every type (the agnostic variants, A1.3)."""
    T = problem.jobs.throughput.astype(np.float64)
    if not reference_type:
        return T
    j = problem.cluster.type_names.index(reference_type)
    return np.repeat(T[:, j : j + 1], problem.cluster.num_types, axis=1)


def _agnostic(problem: Problem, agnostic: bool, view: PlanView) -> FloatArray:
    """T, or 1 on every type a job has a throughput for (heterogeneity-agnostic variants)."""
    if not agnostic:
        return problem.jobs.throughput.astype(np.float64)
    if view.pairs:
        raise NotDefined("the agnostic variant with pairs sharing devices has no pair throughput")
    return (problem.jobs.throughput > 0).astype(np.float64)


def _require_jobs(problem: Problem) -> None:
    if problem.jobs.num_jobs == 0:
        raise NotDefined("no jobs")


def _finite(value: float, what: str) -> float:
    if not math.isfinite(value):
        raise NotDefined(f"{what} is not finite")
    return value


# ------------------------------------------------------------------------------ objectives


def min_level(problem: Problem, policy: PolicyRequest, _: object, view: PlanView) -> float:
    """min_i (s_i / w_i) thr_i(X) / prop_i (A2.1)."""
    _require_jobs(problem)
    T = _agnostic(problem, bool(getattr(policy.parameters, "heterogeneity_agnostic", False)), view)
    prop = _proportional(T, _count(problem))
    jobs = problem.jobs
    level = jobs.scale_factor / (jobs.priority_weight * prop) * throughput_under(problem, view, T)
    return float(level.min())


def first_round_weights(problem: Problem) -> FloatArray:
    """(m,) the effective weights of water filling's first round (A2.4): w_i for a job without
    a tenant; E_e w_i / sum of w over e's jobs in fairness mode; E_e for e's oldest job
    (arrival, then id) and 0 for its others in FIFO mode. Unlisted tenants: E = 1, fairness."""
    jobs = problem.jobs
    listed = {tenant.name: tenant for tenant in problem.tenants}
    weight = jobs.priority_weight.astype(np.float64).copy()
    members: dict[str, list[int]] = {}
    for i, name in enumerate(jobs.tenant):
        if name:
            members.setdefault(name, []).append(i)
    for name, idx in members.items():
        tenant = listed.get(name)
        entitlement = tenant.weight if tenant is not None else 1.0
        if tenant is not None and tenant.sharing is TenantSharing.FIFO:
            oldest = min(idx, key=lambda i: (jobs.arrival_time_s[i], jobs.ids[i]))
            weight[idx] = 0.0
            weight[oldest] = entitlement
        else:
            total = float(jobs.priority_weight[idx].sum())
            weight[idx] = entitlement * jobs.priority_weight[idx] / total
    return weight


def first_round_level(problem: Problem, policy: PolicyRequest, _: object, view: PlanView) -> float:
    """min over jobs of positive first-round weight of s_i u_i / weight_i (A2.4)."""
    _require_jobs(problem)
    T = _agnostic(problem, bool(getattr(policy.parameters, "heterogeneity_agnostic", False)), view)
    u = throughput_under(problem, view, T) / _proportional(T, _count(problem))
    weight = first_round_weights(problem)
    rising = weight > 0
    return float(np.min(problem.jobs.scale_factor[rising] * u[rising] / weight[rising]))


def min_normalized_throughput(
    problem: Problem, _: PolicyRequest, __: object, view: PlanView
) -> float:
    """min_i thr_i(X) / prop_i (A1.3)."""
    _require_jobs(problem)
    T = problem.jobs.throughput.astype(np.float64)
    return float(np.min(throughput_under(problem, view, T) / _proportional(T, _count(problem))))


def sum_throughput(problem: Problem, policy: PolicyRequest, _: object, view: PlanView) -> float:
    """sum_i c_i thr_i(X), c_i = 1 or 1 / prop_i (A2.6); raw under compat gavel."""
    params = policy.parameters
    T = policy_throughput(problem, str(getattr(params, "reference_type", "")))
    thr = throughput_under(problem, view, T)
    if str(getattr(params, "normalize", "none")) == "prop" and policy.compat is not Compat.GAVEL:
        thr = thr / _proportional(T, _count(problem))
    return float(thr.sum())


def cost_normalized_throughput(
    problem: Problem, policy: PolicyRequest, _: object, view: PlanView
) -> float:
    """sum_ij T[i,j] / cost_j X[i,j] over the types with a price (A2.7)."""
    T = policy_throughput(problem, str(getattr(policy.parameters, "reference_type", "")))
    cost = problem.cluster.cost_per_hour.astype(np.float64)
    priced = cost > 0
    per_dollar = np.where(priced, 1.0 / np.where(priced, cost, 1.0), 0.0)
    return float(np.sum(T * view.time_share * per_dollar[None, :]))


def makespan(problem: Problem, policy: PolicyRequest, _: object, view: PlanView) -> float:
    """max_i R_i / thr_i(X) over the jobs with remaining work (s) (A2.8); 0 without work."""
    T = policy_throughput(problem, str(getattr(policy.parameters, "reference_type", "")))
    R = np.maximum(problem.jobs.remaining_steps, 0.0)
    active = R > 0
    if not active.any():
        return 0.0
    thr = throughput_under(problem, view, T)[active]
    if np.any(thr <= 0):
        raise NotDefined("a job with work left has no throughput: the makespan is infinite")
    return _finite(float(np.max(R[active] / thr)), "the makespan")


def isolated_throughput(T: FloatArray, s: FloatArray, W: FloatArray) -> FloatArray:
    """iso_i = sum_j T[i,j] X^iso[i,j], X^iso[i,j] = (W_j / m) / s_i with each row divided by
    max(1, its sum), m = the number of rows (A1.3)."""
    m = s.size
    if m == 0:
        return np.zeros(0)
    share = (W[None, :] / m) / s[:, None]
    share = share / np.maximum(1.0, share.sum(axis=1, keepdims=True))
    return np.asarray(np.einsum("ij,ij->i", T, share), dtype=np.float64)


def max_finish_time_ratio(
    problem: Problem, policy: PolicyRequest, _: object, view: PlanView
) -> float:
    """max_i w_i rho_i(X) over the jobs with remaining work (A2.5); 0 without work. C_i is
    updated first from the previous call's state; iso_i uses the jobs with work; weights are 1
    under compat gavel."""
    jobs, history = problem.jobs, problem.history
    T = policy_throughput(problem, str(getattr(policy.parameters, "reference_type", "")))
    R = np.maximum(jobs.remaining_steps, 0.0)
    active = R > 0
    if not active.any():
        return 0.0
    C = history.cumulative_isolated_time_s.astype(np.float64).copy()
    prev_iso, prev_r = history.previous_isolated_throughput, history.previous_remaining_steps
    if prev_iso.size == jobs.num_jobs:
        given = ~np.isnan(prev_iso) & ~np.isnan(prev_r) & (prev_iso > 0)
        C[given] += (prev_r[given] - R[given]) / prev_iso[given]
    s = jobs.scale_factor.astype(np.float64)
    iso = isolated_throughput(T[active], s[active], _count(problem))
    weight = np.ones(active.sum()) if policy.compat is Compat.GAVEL else \
        jobs.priority_weight[active].astype(np.float64)
    thr = throughput_under(problem, view, T)[active]
    if np.any(thr <= 0) or np.any(iso <= 0):
        raise NotDefined("a job with work left has no throughput: its ratio is infinite")
    age = problem.time_s - jobs.arrival_time_s[active]
    rho = (age + R[active] / thr) / (C[active] + R[active] / iso)
    return _finite(float(np.max(weight * rho)), "the largest ratio")


def total_throughput(problem: Problem, _: PolicyRequest, __: object, view: PlanView) -> float:
    """sum_i thr_i(X) in steps/s (A2.10)."""
    return float(throughput_under(problem, view, problem.jobs.throughput).sum())


def total_flow_time(
    problem: Problem, _: PolicyRequest, response: service_pb.SolveResponse, __: PlanView
) -> float:
    """sum over the jobs queued behind a device of completion - arrival (s) (A3)."""
    total = 0.0
    for i, entry in enumerate(response.plan.jobs):
        if entry.HasField("queue") and entry.queue.position >= 1:
            total += entry.queue.completion_time_s - problem.jobs.arrival_time_s[i]
    return total


def log_welfare(problem: Problem, policy: PolicyRequest, _: object, view: PlanView) -> float:
    """sum_i B_i log u_i, u_i = thr_i(X) / prop_i, B_i = 1 or w_i (A4.1)."""
    _require_jobs(problem)
    T = problem.jobs.throughput.astype(np.float64)
    u = np.einsum("ij,ij->i", T, view.time_share) / _proportional(T, _count(problem))
    by_weight = str(getattr(policy.parameters, "budgets", "equal")) == "priority_weight"
    budget = problem.jobs.priority_weight if by_weight else np.ones(problem.jobs.num_jobs)
    if np.any(u <= 0):
        raise NotDefined("a job has no utility: the log-welfare is -inf")
    return float(np.sum(budget * np.log(u)))


def log_welfare_in_steps(problem: Problem, policy: PolicyRequest, view: PlanView) -> float:
    """sum_i B_i log thr_i(X) over the jobs with a usable cell (thr_i in steps/s): the market's
    objective in steps/s (`SolveStats.throughput_objective`, A4.1)."""
    _require_jobs(problem)
    T = problem.jobs.throughput.astype(np.float64)
    W = _count(problem)
    usable = (T > 0) & (problem.jobs.scale_factor[:, None] <= W[None, :]) & (W[None, :] > 0)
    buyers = usable.any(axis=1)
    thr = np.einsum("ij,ij->i", T, view.time_share)[buyers]
    by_weight = str(getattr(policy.parameters, "budgets", "equal")) == "priority_weight"
    budget = problem.jobs.priority_weight if by_weight else np.ones(problem.jobs.num_jobs)
    if np.any(thr <= 0):
        raise NotDefined("a job that can run has no throughput: the objective is -inf")
    return float(np.sum(budget[buyers] * np.log(thr)))


def configuration_terms(
    problem: Problem, policy: PolicyRequest, response: service_pb.SolveResponse, _: PlanView
) -> float:
    """sum over jobs with a configuration of w_i min((r G)^p, clip) (r = 1 when unchanged, G
    its normalized goodput; rounded to 2 decimals when asked or under compat sia), plus
    lambda_n for every job without one (A5.5)."""
    params = policy.parameters
    p = float(params.fairness_power)  # type: ignore[attr-defined]
    penalty = float(params.no_allocation_penalty)  # type: ignore[attr-defined]
    clip = float(getattr(params, "coefficient_clip", math.inf))
    rounded = bool(getattr(params, "round_coefficients", False)) or policy.compat is Compat.SIA
    total = 0.0
    for i, entry in enumerate(response.plan.jobs):
        if not entry.HasField("configuration"):
            total += penalty
            continue
        chosen = entry.configuration
        factor = 1.0 if chosen.unchanged else chosen.restart_factor
        value = (factor * chosen.normalized_goodput) ** p
        if rounded:
            value = round(value, 2)
        total += float(problem.jobs.priority_weight[i]) * min(value, clip)
    return total


def log_inverse_rho(
    problem: Problem, _: PolicyRequest, response: service_pb.SolveResponse, __: PlanView
) -> float:
    """sum over the jobs offered the devices of log(1 / rho), rho with the bundle each won, or
    without one (B1)."""
    del problem
    total = 0.0
    for entry in response.plan.jobs:
        outcome = entry.auction
        if entry.HasField("auction") and outcome.offered:
            rho = outcome.rho_won if outcome.HasField("rho_won") else outcome.rho_without
            total += -math.log(rho)
    return total


def user_throughput(
    problem: Problem, _: PolicyRequest, response: service_pb.SolveResponse, __: PlanView
) -> float:
    """sum over users of their throughput after trading (B2); a plan without users (the static
    equal split) reports its total throughput instead."""
    if not response.plan.user_shares:
        return total_throughput(problem, _, None, __)
    return float(sum(user.throughput_after for user in response.plan.user_shares))


_RECOMPUTE: dict[Objective, Recompute] = {
    Objective.MIN_LEVEL: min_level,
    Objective.FIRST_ROUND_LEVEL: first_round_level,
    Objective.MIN_NORMALIZED_THROUGHPUT: min_normalized_throughput,
    Objective.SUM_THROUGHPUT: sum_throughput,
    Objective.COST_NORMALIZED_THROUGHPUT: cost_normalized_throughput,
    Objective.MAKESPAN: makespan,
    Objective.MAX_FINISH_TIME_RATIO: max_finish_time_ratio,
    Objective.TOTAL_THROUGHPUT: total_throughput,
    Objective.TOTAL_FLOW_TIME: total_flow_time,
    Objective.LOG_WELFARE: log_welfare,
    Objective.CONFIGURATION_TERMS: configuration_terms,
    Objective.LOG_INVERSE_RHO: log_inverse_rho,
    Objective.USER_THROUGHPUT: user_throughput,
}
