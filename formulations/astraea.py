"""Astraea's long-term GPU-time fairness with leases (B3), one lease per call.

Our choices where the source leaves details open (B3 gives only the metric and the two
phases; tested in tests/formulations/test_astraea.py):

* **Tenants** are `jobs[].tenant` (a job without one is its own tenant) with weights
  `snapshot.tenants[].weight` (1 if unlisted).
* **Entitlement.** During a lease of L seconds a tenant with jobs is entitled to
  e_u devices: the cluster's G devices water-filled by weight, capped by the tenant's demand
  d_u = sum of its jobs' scale factors (`fair_share.water_fill`: its weight share of capacity
  while it has demand; what a tenant cannot use goes to the others). Device-time counts every
  type alike (GPU-time is #devices x time).
* **LTGF state**, carried by the client: per tenant the device-time consumed G_u and entitled
  E_u so far (`snapshot.tenant_usage`), per job its consumed device-time g_i
  (`history.jobs[].gpu_time_s`). The plan returns them projected to the end of this lease
  (G_u + a_u L, E_u + e_u L, g_i + s_i L for the jobs that run), to be sent back with the
  next snapshot (measured values may replace them).
* **Leases.** A job whose lease (`history.jobs[].lease_expires_s`) is after time_s keeps its
  current placement; the others are re-decided. New grants are leases of L seconds.
* **Tenant phase, then job phase.** Repeatedly the tenant with the smallest projected ratio
  (G_u + a_u L) / (E_u + e_u L) (a_u its devices so far, leases included) gets its next job:
  inside the tenant, jobs in increasing consumed device-time per unit of priority weight
  (then arrival, then snapshot order), the first one that fits on some type (its fastest type
  with room; a job that fits in one node is placed on one node, `node_pool`); a tenant none of
  whose waiting jobs fits drops out. It stops when nothing fits: work-conserving.

Certificate (a heuristic, `heuristic`): objective = the smallest projected ratio over the
tenants with jobs; bound = the same quantity maximized over fractional device counts
(a_u in [held_u, d_u], sum a_u <= G, no gangs or types), solved exactly: a proven upper bound.
"""

from __future__ import annotations

import heapq
import math
import time

import numpy as np

from apportion.formulations.fair_share import water_fill
from apportion.formulations.leases import holding_leases, keep_leases
from apportion.formulations.node_pool import node_pools
from apportion.solver.deadline import Deadline
from apportion.solver.fairness_model import FairnessInputs, TenantUsage
from apportion.solver.fairness_result import Lease, UsageSection
from apportion.solver.model import Compat, FloatArray, IntArray, Problem, SolveOptions
from apportion.solver.parameters import AstraeaParameters
from apportion.solver.result import Certificate, JobStatus, Plan, Termination


def tenants_of(problem: Problem) -> tuple[list[str], IntArray, FloatArray]:
    """(tenant names, (m,) tenant index per job, (k,) weights); a job without a tenant is its
    own tenant, named by its id."""
    jobs = problem.jobs
    weight = {tenant.name: tenant.weight for tenant in problem.tenants}
    names: list[str] = []
    index: dict[str, int] = {}
    tenant = np.zeros(jobs.num_jobs, np.int64)
    for i, (job_id, name) in enumerate(zip(jobs.ids, jobs.tenant, strict=True)):
        key = name or job_id
        if key not in index:
            index[key] = len(names)
            names.append(key)
        tenant[i] = index[key]
    weights = np.array([weight.get(name, 1.0) for name in names], np.float64)
    return names, tenant, weights


def fractional_bound(
    consumed: FloatArray, basis: FloatArray, held: FloatArray, demand: FloatArray,
    capacity: float, lease_s: float,
) -> float:
    """max t s.t. a_u >= max(held_u, (t basis_u - consumed_u)/L), a_u <= demand_u,
    sum a_u <= capacity: the largest smallest ratio (consumed + a L)/basis with fractional
    devices (exact, on the breakpoints of the piecewise-linear total)."""
    cap = float(np.min((consumed + demand * lease_s) / basis))
    breaks = (consumed + held * lease_s) / basis  # above it, tenant u needs more than held

    def need(t: float) -> float:
        return float(np.sum(np.maximum(held, (t * basis - consumed) / lease_s)))

    if need(cap) <= capacity:
        return cap
    points = np.sort(np.concatenate([breaks[breaks < cap], [cap]]))
    lo = float(np.min(breaks))  # need(t) = sum held <= capacity for t <= min breakpoint
    for t in points:
        if need(float(t)) > capacity:
            hi = float(t)
            break
        lo = float(t)
    else:
        return cap
    # need is linear on [lo, hi]
    f_lo, f_hi = need(lo), need(hi)
    return lo + (capacity - f_lo) * (hi - lo) / (f_hi - f_lo) if f_hi > f_lo else lo


def solve_policy(
    problem: Problem,
    parameters: AstraeaParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """One Astraea lease (module docstring). `compat` is ignored (no upstream code)."""
    del compat
    started = time.perf_counter()
    jobs, cluster, hist = problem.jobs, problem.cluster, problem.history
    m, n = jobs.num_jobs, cluster.num_types
    L = parameters.lease_s
    fair = problem.fairness or FairnessInputs.empty(m)
    names, tenant, weights = tenants_of(problem)
    k = len(names)
    usage = {entry.tenant: entry for entry in fair.tenant_usage}
    consumed = np.array([usage[u].gpu_time_s if u in usage else 0.0 for u in names])
    entitled = np.array([usage[u].entitled_gpu_time_s if u in usage else 0.0 for u in names])
    s = jobs.scale_factor.astype(np.int64)
    demand = np.bincount(tenant, weights=s.astype(np.float64), minlength=k).astype(np.float64)
    G = float(cluster.count.sum())
    share = water_fill(G, weights, demand)
    basis = entitled + share * L
    holding = holding_leases(problem, fair)
    X = np.zeros((m, n))
    leases = keep_leases(problem, fair, holding, X)
    allocated = np.bincount(tenant[holding], weights=s[holding].astype(np.float64),
                            minlength=k).astype(np.float64)
    node_names = cluster.node_names
    held = allocated.copy()
    pools = node_pools(problem, holding)
    largest = [pool.largest_node for pool in pools]
    T = jobs.throughput
    usable = problem.usable
    attained = fair.gpu_time_s / jobs.priority_weight
    waiting: list[list[int]] = [[] for _ in range(k)]
    for w in np.lexsort((np.arange(m), jobs.arrival_time_s, attained)):
        if not holding[w]:
            waiting[tenant[w]].append(int(w))

    def ratio(u: int) -> float:
        return float((consumed[u] + allocated[u] * L) / basis[u]) if basis[u] > 0 else math.inf

    running = hist.running(m)
    current_type = np.where(running, hist.current_type, -1) if running.any() else np.full(m, -1)
    current_nodes = list(hist.current_nodes)
    heap = [(ratio(u), u) for u in range(k) if waiting[u]]
    heapq.heapify(heap)
    while heap:
        if deadline.expired():
            break
        _, u = heapq.heappop(heap)
        for pos, i in enumerate(list(waiting[u])):
            placed = False
            for j in np.argsort(-T[i], kind="stable"):
                if not usable[i, j]:
                    continue
                prev = current_nodes[i] if current_type[i] == j else ()
                taken = pools[j].take(int(s[i]), prev, single_node=s[i] <= largest[j])
                if taken is None:
                    continue
                X[i, j] = 1.0
                leases[i] = Lease(int(j), int(s[i]), tuple(node_names[q] for q in taken),
                                  problem.time_s + L, 1.0, kept=False)
                allocated[u] += s[i]
                placed = True
                break
            if placed:
                del waiting[u][pos]
                if waiting[u]:
                    heapq.heappush(heap, (ratio(u), u))
                break
    build = time.perf_counter() - started
    after = np.array([ratio(u) for u in range(k)])
    bound = fractional_bound(consumed, basis, held, demand, G, L) if k else 0.0
    runs = X.sum(axis=1) > 0
    job_gpu = fair.gpu_time_s + np.where(runs, s * L * X.sum(axis=1), 0.0)
    tenants = [TenantUsage(names[u], float(consumed[u] + allocated[u] * L),
                           float(basis[u])) for u in range(k)]
    tenants += [entry for entry in fair.tenant_usage if entry.tenant not in set(names)]
    section = UsageSection(tuple(leases), job_gpu, tuple(tenants), share)
    objective = float(after.min()) if k else 0.0
    cert = Certificate(
        termination=Termination.HEURISTIC,
        maximize=True,
        objective=objective,
        bound=bound,
        solver="greedy",
        formulation=(f"Astraea: {k} tenants, {int(runs.sum())} of {m} jobs run the "
                     f"{L:g} s lease, tenant phase by long-term GPU-time ratio then job "
                     "phase by attained GPU-time"),
        build_time_s=build,
        detail="fractional bound on the smallest ratio" + (
            "; stopped by the time limit" if heap and deadline.expired() else ""),
    )
    thr = np.einsum("ij,ij->i", T, X)
    reasons = tuple("" if runs[i] else "waiting: no room for its tenant this lease"
                    for i in range(m))
    return Plan(time_share=X, effective_throughput=thr, normalized_throughput=thr,
                objective_value=after[tenant] if m else np.zeros(0), job_dual=np.zeros(m),
                accelerator_prices=np.zeros(n), certificate=cert,
                job_status=(JobStatus.ALLOCATED,) * m, job_reason=reasons, usage=section)
