"""Water filling with space sharing (Gavel's `max_min_fairness_water_filling_packed`,
formulations.md A2.4 over the pair variables of A2.2).

The progressive filling of `apportion.formulations.water_filling` (levels, tenant weights,
freezing on positive level-row duals, frozen rows at (1 - FROZEN_SLACK) of their value), run
on the group formulation of `apportion.formulations.space_sharing`: each job's normalized
throughput u_i counts its time alone and in pairs, a pair holds its devices once.

Groups. Jobs are grouped as in `space_sharing.make_groups`, with the tenant added to the key;
a job of a FIFO tenant is a group of its own (FIFO weights single out one job). Jobs of a group
then have equal effective weights in every round, and since the rows of frozen jobs are
imposed group by group the per-job round LP is invariant under permuting a group's jobs: by
the averaging argument of A2.3 its optimum is attained by a symmetric plan, which is a plan of
the group LP. A group whose level row has a positive multiplier cannot rise in any optimum of
the group LP; if one of its jobs could rise in a per-job optimum, averaging that optimum over
the group's permutations would raise the whole group, a contradiction. So freezing whole
groups is exactly the per-job water filling.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.formulations.lp import LPResult, solve_lp
from apportion.formulations.max_min_fairness import level_coefficients
from apportion.formulations.space_sharing import (
    PackedLP,
    build_cells,
    level_dual,
    level_entries,
    make_groups,
    plan_of,
    realize,
    resource_entries,
    scaled,
    split_raw,
)
from apportion.formulations.water_filling import (
    FROZEN_SLACK,
    FreezeRound,
    effective_weights,
    filling_termination,
    newly_frozen,
    rounds_detail,
)
from apportion.solver.deadline import Deadline
from apportion.solver.model import (
    Compat,
    FloatArray,
    Problem,
    SolveOptions,
    SolverPreference,
    TenantSharing,
)
from apportion.solver.parameters import WaterFillingParameters
from apportion.solver.result import Certificate, JobStatus, ModelSize, Plan


def _group_key(problem: Problem) -> FloatArray:
    """(m, 2): tenant code, and the job's index + 1 for jobs of FIFO tenants (else 0)."""
    jobs = problem.jobs
    m = jobs.num_jobs
    names = sorted(set(jobs.tenant))
    code = {name: c for c, name in enumerate(names)}
    fifo = {t.name for t in problem.tenants if t.sharing is TenantSharing.FIFO}
    tenant = np.array([code[name] for name in jobs.tenant], dtype=np.float64)
    own = np.array([i + 1.0 if name in fifo else 0.0 for i, name in enumerate(jobs.tenant)])
    return np.column_stack([tenant, own]) if m else np.zeros((0, 2))


def _round_lp(
    unit: PackedLP,
    level_scale: FloatArray,
    active: NDArray[np.bool_],
    frozen: NDArray[np.bool_],
    frozen_value: FloatArray,
    time_limit_s: float,
) -> tuple[LPResult, sp.csc_matrix, FloatArray, FloatArray, int, ModelSize]:
    """max t s.t. t <= level_scale_g u_g (active), u_g >= (1 - FROZEN_SLACK) f_g (frozen),
    and the resource rows; `unit` has levels u_g (normalized throughput). Rows: [active levels
    (A), frozen (F), resources (equalities last)]. Returns (result, A, b, c, equalities,
    size)."""
    G = unit.k.size
    t_col = unit.num_vars - 1
    act = np.flatnonzero(active)
    frz = np.flatnonzero(frozen)
    A, F = act.size, frz.size
    row = np.full(G, -1)
    row[act] = np.arange(A)
    row[frz] = A + np.arange(F)
    group, col, val = level_entries(unit)
    keep = row[group] >= 0
    coef = np.where(active[group], level_scale[group], 1.0) * val
    rows, cols, vals, rhs, equalities = resource_entries(unit, A + F)
    rows += [row[group[keep]], np.arange(A)]
    cols += [col[keep], np.full(A, t_col)]
    vals += [-coef[keep], np.ones(A)]
    matrix = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                           shape=(A + F + rhs.size, t_col + 1))
    b = np.concatenate([np.zeros(A), -(1 - FROZEN_SLACK) * frozen_value[frz], rhs])
    c = np.zeros(t_col + 1)
    c[t_col] = 1.0
    result = solve_lp(c, matrix, b, SolverPreference.CLARABEL, time_limit_s,
                      equalities=equalities)
    if result.status in ("error", "infeasible"):
        # as in water_filling: degenerate late rounds, simplex copes (vertex duals are exact)
        slow = solve_lp(c, matrix, b, SolverPreference.HIGHS, time_limit_s,
                        equalities=equalities)
        result = replace(slow, solve_time_s=slow.solve_time_s + result.solve_time_s)
    size = ModelSize(matrix.shape[1], matrix.shape[0], int(matrix.nnz), 0)
    return result, matrix, b, c, equalities, size


def solve_packed_water_filling(
    problem: Problem,
    params: WaterFillingParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Water filling with space sharing; see the module docstring."""
    started = time.perf_counter()
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    unit_problem = replace(problem, jobs=replace(problem.jobs, priority_weight=np.ones(m)))
    a, prop, thr = level_coefficients(unit_problem, params.heterogeneity_agnostic, compat)
    groups = make_groups(problem, _group_key(problem))
    rep = groups.rep
    u_scale = np.divide(1.0, prop[rep], out=np.zeros(rep.size), where=prop[rep] > 0)
    unit = scaled(build_cells(problem, groups, np.where(a > 0, thr, 0.0)), u_scale)
    G = rep.size
    s = problem.jobs.scale_factor[rep].astype(np.float64)
    frozen = np.zeros(G, dtype=bool)
    frozen_value = np.zeros(G)
    group_level = np.zeros(G)
    rounds: list[FreezeRound] = []
    raw = split_raw(unit, np.zeros(0))
    solve_time = 0.0
    status = "optimal"
    size = ModelSize()
    first_bound: float | None = None
    first_scale = np.zeros(G)
    prices = np.zeros(n)
    while not frozen.all():
        weight = effective_weights(problem, frozen[groups.group])[rep]
        active = ~frozen & (weight > 0)
        remaining = 0.0
        if options.time_limit_s > 0:
            remaining = options.time_limit_s - (time.perf_counter() - started)
            if remaining <= 0:
                status = "time_limit"
                break
        level_scale = np.divide(s, weight, out=np.zeros(G), where=weight > 0)
        result, matrix, b, c, equalities, size = _round_lp(unit, level_scale, active, frozen,
                                                            frozen_value, remaining)
        solve_time += result.solve_time_s
        status = result.status
        if status != "optimal" or not result.x.size:
            break
        raw = split_raw(unit, result.x)
        t = float(result.x[-1])
        duals = np.zeros(G)
        duals[active] = np.maximum(result.row_dual[:int(active.sum())], 0.0)
        if not rounds:  # round 1 is max-min fairness with space sharing (no frozen rows)
            first_scale = level_scale
            lp1 = scaled(unit, level_scale, active)
            dual = level_dual(lp1, matrix, b, c, result.row_dual, equalities)
            first_bound = dual.bound if dual is not None else None
            prices = dual.pi if dual is not None else prices
        newly = newly_frozen(duals, active)
        frozen_value[newly] = t / level_scale[newly]
        group_level[newly] = t
        frozen |= newly
        rounds.append(FreezeRound(t, np.flatnonzero(newly[groups.group])))
    plan, u_jobs = realize(problem, groups, unit, raw)
    termination = filling_termination(status, rounds)
    first_level: float | None = None
    if rounds:
        levels = first_scale[groups.group] * u_jobs
        first_level = float(np.min(levels[first_scale[groups.group] > 0]))
    cert = Certificate(
        termination=termination,
        maximize=True,
        objective=first_level,
        bound=first_bound,
        solver="clarabel",
        formulation=(f"water filling with space sharing (A2.4 over A2.2/A2.3 groups); "
                     f"{len(rounds)} LP rounds, {G} groups"),
        build_time_s=time.perf_counter() - started - solve_time,
        solve_time_s=solve_time,
        model_size=size,
        detail=rounds_detail(rounds),
    )
    return plan_of(plan, problem, normalized_throughput=u_jobs,
                   objective_value=group_level[groups.group], job_dual=np.zeros(m),
                   accelerator_prices=prices, certificate=cert,
                   job_status=(JobStatus.ALLOCATED,) * m, job_reason=("",) * m)
