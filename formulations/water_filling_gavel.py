"""Gavel's bottleneck test for water filling, reproduced under `compat: gavel` (A2.4, C1).

After each round's LP Gavel decides which jobs freeze with a MILP over binaries z_i (1 = job i
can still rise by 0.01%):

    maximize   sum_i z_i
    subject to base constraints;  u_i(X) >= f_i (frozen),  u_i(X) >= r_i (the others);
               M z_i       >= u_i(X) - 1.0001 r_i + 1e-5      (z_i = 0: u_i <= 1.0001 r_i - 1e-5)
               M (1 - z_i) >= 1.0001 r_i - u_i(X)             (z_i = 1: u_i >= 1.0001 r_i)
               z_i = 0 for frozen jobs and jobs of weight 0

with r_i the running value (u units; f_i for frozen jobs) and M = max_ij s_i T[i,j] / prop_i.
Every active job of positive weight with z_i = 0 freezes. Quirks kept on purpose (they are
Gavel's behaviour): the 0.01% / 1e-5 threshold freezes a job that could still rise by less
than that; the rows apply to frozen and waiting jobs too, so a frozen value below 0.1 (or a
waiting FIFO job at 0) makes the MILP infeasible, and Gavel then freezes every active job.
Gavel solves it with GLPK_MI; HiGHS here. Our default freezes on LP duals instead (exact).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.formulations.water_filling_rounds import RoundModel, relaxed
from apportion.solver.backends.highs import INFINITY, HighsSettings, LinearModel, solve_highs
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import Deadline
from apportion.solver.model import FloatArray

GAVEL_SLACK = 1.0001
"""A job "can rise" when it reaches 1.0001 times its running value (Gavel's `slack`)."""
GAVEL_OFFSET = 1e-5
"""Gavel's epsilon: a job that cannot rise stays 1e-5 below 1.0001 times its running value."""


@dataclass(frozen=True)
class GavelFreeze:
    status: SolverStatus
    """The MILP's (INFEASIBLE: Gavel then freezes every active job)."""
    frozen: NDArray[np.bool_]
    """(G,) rows to freeze now: the rising rows that cannot rise by 0.01% (all of them when
    the MILP is infeasible; none when it failed otherwise)."""
    solve_time_s: float


def gavel_freeze(model: RoundModel, running: FloatArray, rising: NDArray[np.bool_],
                 big_m: float, deadline: Deadline) -> GavelFreeze:
    """Gavel's MILP over the rows of `model` (module docstring): `running` r_g (u units, the
    frozen value for frozen rows), `rising` the rows whose z may be 1 (active, weight > 0),
    `big_m` = max_g s_g cap_g. Each row's z_g counts once per job of its group (one job per
    group under compat)."""
    u, resources, rhs = model.u, model.resources, model.rhs
    G, V = u.shape
    K = resources.shape[0]
    z = sp.identity(G, format="csr") * big_m
    matrix = sp.vstack([
        sp.hstack([u, -z]),  # u - M z <= 1.0001 r - 1e-5
        sp.hstack([-u, z]),  # -u + M z <= M - 1.0001 r
        sp.hstack([-u, sp.csr_matrix((G, G))]),  # -u <= -r (relaxed as in the rounds)
        sp.hstack([resources, sp.csr_matrix((K, G))]),
    ], format="csc")
    upper = np.concatenate([GAVEL_SLACK * running - GAVEL_OFFSET,
                            big_m - GAVEL_SLACK * running, -relaxed(running), rhs])
    lower = np.full(upper.size, -INFINITY)
    if model.equalities:
        lower[upper.size - model.equalities:] = rhs[K - model.equalities:]
    milp = LinearModel(
        cost=np.concatenate([np.zeros(V), model.cells.k]),
        matrix=matrix,
        row_lower=lower,
        row_upper=upper,
        col_lower=np.zeros(V + G),
        col_upper=np.concatenate([np.full(V, INFINITY), np.where(rising, 1.0, 0.0)]),
        integer=np.concatenate([np.zeros(V, dtype=bool), np.ones(G, dtype=bool)]),
        maximize=True,
    )
    result = solve_highs(milp, HighsSettings(mip_rel_gap=0.0, seed=0), deadline)
    status, elapsed = result.status, result.solve_time_s
    if status is SolverStatus.OPTIMAL:
        frozen = rising & ~(np.round(result.x[V:]) > 0)
    elif status is SolverStatus.INFEASIBLE:
        frozen = rising.copy()
    else:
        frozen = np.zeros(G, dtype=bool)
    return GavelFreeze(status, frozen, elapsed)
