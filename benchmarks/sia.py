"""Sia's goodput ILP: apportion against a plain cvxpy boolean model of the same ILP, same run.

    python benchmarks/sia.py [--sizes 64 512 2048] [--reference-solver HIGHS]
                             [--inputs auto|profiles|synthetic] [--reference-data DIR]

Cluster: 2,048 GPUs of 3 types laid out like Sia's x32 cluster (aws: 192 nodes x 4 GPUs,
dgx-ext: 64 x 8, rtx: 96 x 8); configurations as in A5.2 (docs/policies/sia.md) with a 64-GPU cap
and Sia's per-type node caps (aws 16, dgx-ext 2, rtx 3 nodes: 29 configurations). A third of the
jobs run already (random configuration, 0-3 restarts, ages 0-3 h). p = -0.5, lambda_n = 1.1.

Goodput per (job, configuration), `--inputs`:
* `profiles` (default `auto`: when `../shared/reference` is present): Sia's per-type profiles
  (T2.3, docs/datasets.md, `traces/sia_profiles/`) fitted into Pollux models per (application, type)
  (`apportion.datasets.sia_models`, A5.1); each job draws its application from Sia's x32
  workload (`sia/workloads_scale/scale_32x_workload-1.csv`: mostly cifar10, some bert,
  deepspeech2, yolov3, imagenet) and an epoch (gradient statistics of that epoch); its goodput
  row is the Pollux best goodput over batch sizes at every configuration (fit and goodput
  evaluation are timed apart, not in "apportion s").
* `synthetic` (the fallback): concave rows, goodput = speed[type] * GPUs^a * 0.9^(nodes - 1),
  a in [0.5, 0.95].

apportion: `solve_policy` end to end (goodput table, normalization, restart factors,
coefficients, LP bound + rounding, HiGHS branch and cut when the rounding is not within the
gap, placement on nodes). Reference: the coefficient matrix computed by apportion, written as
one cvxpy boolean matrix variable (sum over rows <= 1, per-type capacity, disallowed cells
fixed to 0), solved with the same solver (HiGHS, relative gap 1e-4); its time is model build +
solve. Ratio = reference / apportion. Objectives must agree within the gap.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import cvxpy as cp
import numpy as np

from apportion.datasets.sia import read_sia_workload
from apportion.datasets.sia_models import AppProfiles, read_profile_library
from apportion.formulations.pollux_model import best_goodput, job_inputs
from apportion.formulations.sia import (
    build_instance,
    current_configuration,
    goodput_table,
    job_restart_factor,
    sia_node_caps,
)
from apportion.formulations.sia_configs import (
    SIA_MAX_PROFILED_NODES,
    Configuration,
    configuration_set,
    node_caps,
    node_layout,
)
from apportion.formulations.sia_ilp import SiaInstance
from apportion.solver.model import (
    Cluster,
    Compat,
    GivenGoodput,
    GivenGoodputs,
    PerfParams,
    PolicyRequest,
    Problem,
    SolveOptions,
)
from apportion.solver.parameters import SiaParameters
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem

TYPES = ("aws", "dgx-ext", "rtx")
NODES = ((192, 4), (64, 8), (96, 8))
REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference"

GoodputRow = Callable[[np.random.Generator, tuple[Configuration, ...]], list[float]]


def synthetic_rows() -> GoodputRow:
    """Synthetic concave goodput rows (module docstring)."""

    def row(rng: np.random.Generator, configs: tuple[Configuration, ...]) -> list[float]:
        speed = rng.uniform(0.5, 3.0, 3)
        a = rng.uniform(0.5, 0.95)
        return [float(speed[c.type_index] * c.devices**a * 0.9 ** (c.nodes - 1)) for c in configs]

    return row


def profile_rows(library: dict[str, AppProfiles], workload: Path) -> GoodputRow:
    """Pollux goodput rows of jobs drawn from a Sia workload (module docstring); rows are cached
    per (application, epoch)."""
    apps = [a for a in read_sia_workload(workload).column("job_type").tolist() if a in library]
    cache: dict[tuple[str, int], list[float]] = {}

    def row(rng: np.random.Generator, configs: tuple[Configuration, ...]) -> list[float]:
        app = library[apps[int(rng.integers(0, len(apps)))]]
        epochs = app.validation[app.init_batch_size].grad_sqr.size
        epoch = int(rng.integers(0, epochs))
        if (app.name, epoch) not in cache:
            model = app.job_model(TYPES, epoch)
            grad, limits = job_inputs(model)
            cache[(app.name, epoch)] = [
                best_goodput(
                    PerfParams(*map(float, model.perf_params[c.type_index])),
                    grad,
                    limits,
                    c.nodes,
                    c.devices,
                ).goodput
                for c in configs
            ]
        return cache[(app.name, epoch)]

    return row


def sia_problem(num_jobs: int, seed: int = 0, rows: GoodputRow | None = None) -> Problem:
    """The instance described in the module docstring (synthetic rows by default)."""
    rows = rows or synthetic_rows()
    rng = np.random.default_rng(seed)
    node_type: list[int] = []
    node_devices: list[int] = []
    for t, (count, size) in enumerate(NODES):
        node_type += [t] * count
        node_devices += [size] * count
    counts = [count * size for count, size in NODES]
    cluster = Cluster(
        type_names=TYPES,
        count=np.asarray(counts, np.int64),
        cost_per_hour=np.ones(3),
        node_names=tuple(f"node{k}" for k in range(len(node_type))),
        node_type=np.asarray(node_type, np.int64),
        node_devices=np.asarray(node_devices, np.int64),
    )
    caps = node_caps(TYPES, SIA_MAX_PROFILED_NODES)
    configs = configuration_set(node_layout(cluster), 3, 64, max_nodes_per_type=caps)
    base = make_problem(TYPES, counts, np.ones((num_jobs, 3)))
    given = []
    current_type = np.full(num_jobs, -1, np.int64)
    current_devices = np.zeros(num_jobs, np.int64)
    for i in range(num_jobs):
        values = rows(rng, configs)
        given.append(
            tuple(
                GivenGoodput(c.type_index, c.nodes, c.devices, v)
                for c, v in zip(configs, values, strict=True)
                if v > 0
            )
        )
        if rng.random() < 1 / 3:
            c = configs[int(rng.integers(0, len(configs)))]
            current_type[i], current_devices[i] = c.type_index, c.devices
    jobs = replace(
        base.jobs,
        given_goodput=GivenGoodputs.of(given),
        arrival_time_s=-rng.uniform(0, 3 * 3600, num_jobs),
        restart_penalty_s=np.full(num_jobs, 30.0),
    )
    history = replace(
        base.history,
        restarts=rng.integers(0, 4, num_jobs).astype(np.int64),
        current_type=current_type,
        current_devices=current_devices,
    )
    return Problem(cluster=cluster, jobs=jobs, history=history, time_s=0.0)


def instance_of(problem: Problem, params: SiaParameters) -> SiaInstance:
    table = goodput_table(
        problem, params.max_gpus, sia_node_caps(problem, params.max_nodes_per_type, Compat.NONE)
    )
    current = current_configuration(problem, table.configs, table.layout)
    restart = job_restart_factor(problem, current >= 0)
    return build_instance(problem, params, Compat.NONE, table, current, restart)[0]


def reference(instance: SiaInstance, solver: str) -> tuple[float, float]:
    """Plain cvxpy boolean model; returns (objective, wall seconds of build + solve)."""
    started = time.perf_counter()
    m, c = instance.coefficient.shape
    coef = np.where(instance.allowed, instance.coefficient, 0.0) * instance.weight[:, None]
    x = cp.Variable((m, c), boolean=True)
    objective = cp.sum(cp.multiply(coef, x)) + instance.no_allocation_penalty * (m - cp.sum(x))
    constraints = [cp.sum(x, axis=1) <= 1]
    for t in range(instance.capacity.size):
        cols = np.nonzero(instance.config_type == t)[0]
        constraints.append(
            cp.sum(x[:, cols] @ instance.config_devices[cols]) <= instance.capacity[t]
        )
    blocked = ~instance.allowed
    if blocked.any():
        constraints.append(cp.multiply(blocked.astype(float), x) == 0)
    problem = cp.Problem(
        cp.Maximize(objective) if instance.maximize else cp.Minimize(objective), constraints
    )
    if solver == "HIGHS":
        problem.solve(solver=cp.HIGHS, mip_rel_gap=1e-4)
    else:
        problem.solve(solver=solver)
    return float(problem.value), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 512, 2048])
    parser.add_argument("--reference-solver", default="HIGHS")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--inputs",
        choices=("auto", "profiles", "synthetic"),
        default="auto",
        help="goodput rows: Sia's profiles (auto = when the reference data is present)",
    )
    parser.add_argument("--reference-data", type=Path, default=REFERENCE)
    args = parser.parse_args()
    # Sia's own per-type node caps on Sia's clusters (by its type names; the default only
    # under compat sia, given explicitly here so the solve and the reference match)
    params = SiaParameters(max_nodes_per_type=tuple(sorted(
        (name, cap) for name, cap in SIA_MAX_PROFILED_NODES.items() if name in TYPES)))
    profiles = args.reference_data / "traces" / "sia_profiles"
    workload = args.reference_data / "sia" / "workloads_scale" / "scale_32x_workload-1.csv"
    use_profiles = args.inputs == "profiles" or (
        args.inputs == "auto" and profiles.is_dir() and workload.is_file()
    )
    rows: GoodputRow = synthetic_rows()
    if use_profiles:
        started = time.perf_counter()
        library = read_profile_library(profiles, types=TYPES)
        for app in library.values():
            for t in TYPES:
                app.perf_params(t)
        rows = profile_rows(library, workload)
        print(
            f"inputs: Sia profiles {profiles} ({', '.join(library)}; read + fit "
            f"{time.perf_counter() - started:.2f} s), applications from {workload.name}"
        )
    else:
        print("inputs: synthetic goodput rows")
    print(
        f"{'jobs':>6} {'configs':>7} {'goodput s':>9} {'apportion s':>12} {'reference s':>12} "
        f"{'ratio':>7} {'objective':>12} {'reference obj':>14} {'rel diff':>9} {'gap':>9}  how"
    )
    for size in args.sizes:
        started = time.perf_counter()
        problem = sia_problem(size, args.seed, rows)
        rows_s = time.perf_counter() - started
        started = time.perf_counter()
        plan = solve(
            problem, PolicyRequest("sia", params, Compat.NONE), SolveOptions(threads=args.threads)
        )
        ours = time.perf_counter() - started
        instance = instance_of(problem, params)
        ref_obj, ref_time = reference(instance, args.reference_solver)
        cert = plan.certificate
        assert cert.objective is not None
        agree = abs(cert.objective - ref_obj) / max(abs(ref_obj), 1e-12)
        print(
            f"{size:>6} {instance.coefficient.shape[1]:>7} {rows_s:>9.2f} {ours:>12.3f} "
            f"{ref_time:>12.3f} {ref_time / ours:>7.1f} {cert.objective:>12.4f} "
            f"{ref_obj:>14.4f} {agree:>9.1e} {cert.gap or 0.0:>9.1e}  {cert.detail}"
        )


if __name__ == "__main__":
    main()
