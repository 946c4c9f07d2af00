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

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from apportion.formulations.lp import new_highs
from apportion.formulations.water_filling_rounds import RoundModel, relaxed
from apportion.solver.deadline import Deadline
from apportion.solver.model import FloatArray

GAVEL_SLACK = 1.0001
"""A job "can rise" when it reaches 1.0001 times its running value (Gavel's `slack`)."""
GAVEL_OFFSET = 1e-5
"""Gavel's epsilon: a job that cannot rise stays 1e-5 below 1.0001 times its running value."""


@dataclass(frozen=True)
class GavelFreeze:
    status: str
    """The MILP's: "optimal", "infeasible" (Gavel then freezes every active job),
    "time_limit", "error"."""
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
    import highspy

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
    lower = np.full(upper.size, -highspy.kHighsInf)
    if model.equalities:
        lower[upper.size - model.equalities:] = rhs[K - model.equalities:]
    lp = highspy.HighsLp()
    lp.num_col_ = V + G
    lp.num_row_ = matrix.shape[0]
    lp.col_cost_ = np.concatenate([np.zeros(V), model.cells.k])
    lp.col_lower_ = np.zeros(V + G)
    lp.col_upper_ = np.concatenate([np.full(V, highspy.kHighsInf), np.where(rising, 1.0, 0.0)])
    lp.row_lower_ = lower
    lp.row_upper_ = upper
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = matrix.indptr
    lp.a_matrix_.index_ = matrix.indices
    lp.a_matrix_.value_ = matrix.data
    lp.integrality_ = [highspy.HighsVarType.kContinuous] * V + [highspy.HighsVarType.kInteger] * G
    highs = new_highs(0, deadline.solver_limit_s())
    highs.setOptionValue("mip_rel_gap", 0.0)
    highs.setOptionValue("random_seed", 0)
    highs.passModel(lp)
    started = time.perf_counter()
    highs.run()
    elapsed = time.perf_counter() - started
    status = {
        highspy.HighsModelStatus.kOptimal: "optimal",
        highspy.HighsModelStatus.kInfeasible: "infeasible",
        highspy.HighsModelStatus.kTimeLimit: "time_limit",
    }.get(highs.getModelStatus(), "error")
    if status == "optimal":
        values = np.asarray(highs.getSolution().col_value, dtype=np.float64)
        frozen = rising & ~(np.round(values[V:]) > 0)
    elif status == "infeasible":
        frozen = rising.copy()
    else:
        frozen = np.zeros(G, dtype=bool)
    return GavelFreeze(status, frozen, elapsed)
