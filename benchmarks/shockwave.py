"""Shockwave's planning window: apportion against a plain cvxpy model, same run, same solver.

    python benchmarks/shockwave.py [--threads 2] [--repeat 1]

The reference builds the program as upstream does (`dynamic_eisenberg_gale_scheduling`): one
scalar cvxpy variable per x[i,t], per-job breakpoint weights mu and SOS2 indicators z, the
guarded attempt, and when it is infeasible the prioritized fallback and the ranking MILP, each
a fresh cvxpy model, solved with HiGHS through cvxpy (the same open MILP solver apportion
calls directly). Both use apportion's inputs (remaining-time predictions, guard levels,
priorities), so the programs are identical; times are wall seconds of the whole re-solve.

Instances: the 120-job profiles of ../shared/reference/shockwave/profiles_120jobs.json.gz when
present (else a seeded generator), with seeded progress:
* 120 jobs, G = 32, T = 20, kappa = 1e-3, lambda = 12 (config_tacc_32gpus);
* 200 jobs (profiles resampled), G = 256, T = 20, kappa = 1e5, lambda = 5 (256-GPU config).
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import cvxpy as cp
import numpy as np

import apportion.formulations.shockwave as sw
from apportion.solver.model import Compat, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import ShockwaveParameters
from apportion.solver.solve import solve

PROFILES = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "reference"
    / "shockwave"
    / "profiles_120jobs.json.gz"
)


def load_profiles() -> list[dict[str, object]]:
    if PROFILES.exists():
        with gzip.open(PROFILES, "rt") as handle:
            data: list[dict[str, object]] = json.load(handle)
        return data
    rng = np.random.default_rng(7)
    generated: list[dict[str, object]] = []
    for k in range(120):
        epochs = int(rng.integers(5, 60))
        bs = np.repeat(rng.choice([16, 32, 64, 128], 3), int(np.ceil(epochs / 3)))[:epochs]
        generated.append(
            {
                "arrival_s": float(k * 60),
                "scale_factor": int(rng.choice([1, 1, 2, 4])),
                "bs_every_epoch": bs.tolist(),
                "duration_every_epoch_s": (30.0 + 400.0 * 32.0 / bs).tolist(),
            }
        )
    return generated


def instance(num_jobs: int, gpus: int, seed: int) -> Problem:
    profiles = load_profiles()
    rng = np.random.default_rng(seed)
    pick = (
        np.arange(num_jobs)
        if num_jobs <= len(profiles)
        else rng.integers(0, len(profiles), num_jobs)
    )
    chosen = [profiles[int(k)] for k in pick]
    durations = [list(map(float, p["duration_every_epoch_s"])) for p in chosen]  # type: ignore[call-overload]
    batches = [list(map(int, p["bs_every_epoch"])) for p in chosen]  # type: ignore[call-overload]
    done = [int(rng.integers(0, len(d))) for d in durations]
    arrival = [float(p["arrival_s"]) for p in chosen]  # type: ignore[arg-type]
    scale = [int(p["scale_factor"]) for p in chosen]  # type: ignore[call-overload]
    now = max(arrival) + 600.0
    return sw.window_problem(gpus, scale, durations, batches, done, arrival, None, now, 120.0)


def reference_window(
    inp: sw.WindowInputs, pi: np.ndarray, guard: np.ndarray | None, gap: float, threads: int
) -> tuple[str, np.ndarray | None, float]:
    """Upstream-style model: scalar variables, SOS2 indicators. (status, x (T, n), objective)."""
    n, T = inp.n, inp.T
    b = sw.BREAKPOINTS
    logb = sw.LOG_BREAKPOINTS
    K = b.size
    x = [[cp.Variable(boolean=True) for _ in range(T)] for _ in range(n)]
    p = [cp.Variable(nonneg=True) for _ in range(n)]
    mu = [[cp.Variable(nonneg=True) for _ in range(K)] for _ in range(n)]
    z = [[cp.Variable(boolean=True) for _ in range(K)] for _ in range(n)]
    rem = [cp.Variable(nonneg=True) for _ in range(n)]
    makespan = cp.Variable()
    cons = []
    for t in range(T):
        cons.append(sum(int(inp.s[i]) * x[i][t] for i in range(n)) <= inp.G)
    ell = []
    for i in range(n):
        cons.append(float(inp.delta[i]) * p[i] <= inp.round_s * sum(x[i]))
        cons.append(
            sum(float(b[k]) * mu[i][k] for k in range(K))
            == (float(inp.e[i]) + p[i]) / float(inp.E[i])
        )
        cons.append(sum(mu[i]) == 1)
        for k in range(K):
            cons.append(mu[i][k] <= z[i][k])
        cons.append(sum(z[i]) <= 2)
        for k in range(K):
            for k2 in range(k + 2, K):
                cons.append(z[i][k] + z[i][k2] <= 1)
        cons.append(rem[i] >= float(inp.P[i]) - float(inp.delta[i]) * p[i])
        cons.append(makespan >= rem[i])
        if guard is not None:
            cons.append(rem[i] <= float(guard[i]))
        ell.append(float(pi[i]) * sum(float(logb[k]) * mu[i][k] for k in range(K)))
    objective = cp.Maximize(sum(ell) / (n * T) - inp.kappa * makespan)
    problem = cp.Problem(objective, cons)
    problem.solve(
        solver=cp.HIGHS,
        mip_rel_gap=gap,
        time_limit=15.0,
        threads=threads,
    )
    if problem.status not in ("optimal", "optimal_inaccurate"):
        return str(problem.status), None, float("nan")
    plan = np.array([[x[i][t].value > 0.5 for i in range(n)] for t in range(T)])
    return "optimal", plan, float(problem.value)


def reference_rank(
    rounds: np.ndarray, s: np.ndarray, pi: np.ndarray, G: int, T: int, threads: int
) -> None:
    n = s.size
    x = [[cp.Variable(boolean=True) for _ in range(T)] for _ in range(n)]
    cons = [sum(int(s[i]) * x[i][t] for i in range(n)) <= G for t in range(T)]
    cons += [sum(x[i]) == int(rounds[i]) for i in range(n)]
    terms = [
        float(pi[i]) / int(rounds[i]) * sum((t + 1) * x[i][t] for t in range(T))
        for i in range(n)
        if rounds[i] > 0
    ]
    cp.Problem(cp.Minimize(sum(terms)), cons).solve(solver=cp.HIGHS, threads=threads)


def reference_round(problem: Problem, params: ShockwaveParameters, threads: int) -> float:
    """Upstream's sequence on the reference model; returns the fallback/guarded objective."""
    n = problem.jobs.num_jobs
    state = sw.prepare(problem, params, Compat.NONE, np.arange(n))
    inp = state.inputs
    status, plan, value = reference_window(inp, np.ones(n), state.guard, 1e-3, threads)
    if status == "optimal":
        return value
    pi = sw.priorities(state.rho, inp.P, inp.round_s, params.fairness_exponent, params.rho_max)
    status, plan, value = reference_window(inp, pi, None, 1e-3, threads)
    if plan is not None:
        reference_rank(plan.sum(axis=0), inp.s, pi, inp.G, inp.T, threads)
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    cases = [
        (
            "120 jobs, 32 GPUs",
            120,
            32,
            ShockwaveParameters(makespan_weight=1e-3, fairness_exponent=12.0),
        ),
        (
            "200 jobs, 256 GPUs",
            200,
            256,
            ShockwaveParameters(makespan_weight=1e5, fairness_exponent=5.0),
        ),
    ]
    print(f"profiles: {'reference' if PROFILES.exists() else 'generated'}; threads {args.threads}")
    header = f"{'case':<20} {'seed':>4} {'ours s':>8} {'ref s':>8} {'ratio':>7}"
    header += "  objective (ours / ref), branch, gap"
    print(header)
    for label, num_jobs, gpus, params in cases:
        for seed in args.seeds:
            problem = instance(num_jobs, gpus, seed)
            started = time.perf_counter()
            plan = solve(
                problem, PolicyRequest("shockwave", params), SolveOptions(threads=args.threads)
            )
            ours = time.perf_counter() - started
            started = time.perf_counter()
            ref_value = reference_round(problem, params, args.threads)
            ref = time.perf_counter() - started
            cert = plan.certificate
            branch = "fallback" if "fallback" in cert.formulation else "guarded"
            print(
                f"{label:<20} {seed:>4} {ours:>8.2f} {ref:>8.2f} {ref / ours:>6.1f}x  "
                f"{cert.objective:.6g} / {ref_value:.6g}, {branch}, gap {cert.gap:.2e}"
            )


if __name__ == "__main__":
    main()
