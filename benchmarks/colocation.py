"""Co-location and resource-shape policies: the exact solve against the published heuristic,
same instance, same run: time and objective gap.

    python benchmarks/colocation.py [--sizes 64 512 2048] [--policies synergy muri lucid
                                    antman iadeep matching] [--reference-data DIR]

* synergy: Philly-like 8-GPU servers (24 cores, 500 GiB), one server per 8 jobs; jobs of
  1/2/4 GPUs (70/20/10%) with Synergy's profiles (`synergy/synergy_tput_matrices.csv` under
  the reference directory when present, else synthetic concave grids). OPT (LP1 ILP + placement
  reshaping) against TUNE; the gap to LP1's bound is OPT's certificate.
* muri: stage times of Muri's trace (`muri/trace-data/trace1.csv`, 3 resource times as CPU, GPU,
  network) when present, else synthetic; one GPU per 4 jobs. Muri's rounds with the exact
  matching against the same rounds with the greedy matching; the exact set packing where its
  candidate groups are few enough.
* lucid: half the jobs running alone, half waiting, pair speeds from sharing scores; exact
  pairing (bipartite matching) against Lucid's first fit.
* antman: a device per 2 jobs, a third of the jobs opportunistic; the assignment MIP against
  AntMan's least-utilized first fit.
* iadeep: a device per 2 jobs, 3 measured pairs and 1 triple per job, 2 configurations each;
  the set packing against IADeep's greedy.
* matching: the exact maximum-weight matching on a complete graph of `size` vertices with
  random weights (the pair-matching target), against networkx's blossom algorithm (reference,
  sizes up to --networkx-max, default 256: it takes minutes beyond) and the greedy matching.

Objective gap = (exact - heuristic) / exact on the policy's own objective (>= 0). Exact solves
stop at --exact-time-limit (default 60 s): the termination and certified gap then say how far
they got.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from apportion.datasets.colocation_profiles import (
    read_muri_trace,
    read_synergy_profiles,
    synthetic_resource_grid,
    synthetic_stage_times,
)
from apportion.formulations import antman, iadeep, lucid, muri, synergy
from apportion.formulations.matching import greedy_matching, matching_weight, max_weight_matching
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, History, Problem, SolveOptions
from apportion.solver.parameters import (
    AntmanParameters,
    IadeepParameters,
    LucidParameters,
    MuriParameters,
    SynergyParameters,
)
from apportion.solver.result import Plan
from apportion.solver.sharing import (
    GroupInterference,
    JobConfiguration,
    ResourceGrid,
    SharedDevices,
    SharingInputs,
)
from apportion.solver.validation import make_problem

DEFAULT_REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference"
OPTIONS = SolveOptions(relative_gap=1e-4)
EXACT_LIMIT_S = [60.0]


def exact_deadline() -> Deadline:
    return Deadline.after(EXACT_LIMIT_S[0])


def _timed(run: Callable[[], Plan]) -> tuple[float, Plan]:
    started = time.perf_counter()
    plan = run()
    return time.perf_counter() - started, plan


def _row(policy: str, size: int, exact_s: float, exact: Plan, heuristic_s: float,
         heuristic: Plan, note: str = "") -> None:
    e = exact.certificate.objective or 0.0
    h = heuristic.certificate.objective or 0.0
    gap = (e - h) / abs(e) if e else 0.0
    cert = exact.certificate.gap
    certified = f"{cert:.2e}" if cert is not None else "-"
    print(f"{policy:9s} {size:6d}  exact {exact_s:7.3f} s  {exact.certificate.termination.value:9s}"
          f" obj {e:10.4g} (certified gap {certified})  heuristic {heuristic_s:7.3f} s "
          f"obj {h:10.4g}  gap {gap:6.2%}  {note}", flush=True)


def synergy_problem(size: int, reference: Path, seed: int = 0) -> tuple[Problem, str]:
    rng = np.random.default_rng(seed)
    gpus = rng.choice([1, 2, 4], size, p=[0.7, 0.2, 0.1])
    path = reference / "synergy" / "synergy_tput_matrices.csv"
    grids: list[ResourceGrid] = []
    source = "synthetic profiles"
    if path.is_file():
        table = read_synergy_profiles(path)
        models = sorted({key.rsplit("_", 1)[0] for key in table})
        for g in gpus.tolist():
            model = models[int(rng.integers(len(models)))]
            grids.append(table.get(f"{model}_{g}", table[f"{model}_1"]))
        source = "Synergy profiles"
    else:
        grids = [synthetic_resource_grid(rng) for _ in range(size)]
    servers = max(1, size // 8)
    problem = make_problem(["v100"], [servers * 8], np.ones((size, 1)), scale_factor=list(gpus))
    cluster = replace(problem.cluster, node_names=tuple(f"s{k}" for k in range(servers)),
                      node_type=np.zeros(servers, np.int64),
                      node_devices=np.full(servers, 8, np.int64))
    jobs = replace(problem.jobs, arrival_time_s=np.arange(size, dtype=float))
    sharing = SharingInputs(resource_grid=tuple(grids), node_cpus=np.full(servers, 24.0),
                            node_memory_gib=np.full(servers, 500.0))
    return replace(problem, cluster=cluster, jobs=jobs, sharing=sharing), source


def bench_synergy(size: int, reference: Path) -> None:
    problem, source = synergy_problem(size, reference)
    params = SynergyParameters()
    deadline = exact_deadline()
    exact_s, exact = _timed(lambda: synergy.solve_policy(problem, params, Compat.NONE, OPTIONS,
                                                         deadline))
    tune_s, tune = _timed(lambda: synergy.solve_policy(problem, params, Compat.SYNERGY, OPTIONS,
                                                       deadline))
    _row("synergy", size, exact_s, exact, tune_s, tune,
         f"[{source}; bound {exact.certificate.bound:.4g}]")


def muri_problem(size: int, reference: Path, seed: int = 1) -> tuple[Problem, str]:
    rng = np.random.default_rng(seed)
    path = reference / "muri" / "trace-data" / "trace1.csv"
    if path.is_file():
        trace = read_muri_trace(path)
        pick = rng.integers(0, len(trace.ids), size)
        stage = trace.stage_s[pick]
        gpus = trace.gpus[pick]
        remaining = trace.iterations[pick]
        source = "Muri trace1 stage times"
    else:
        stage = synthetic_stage_times(rng, size)
        gpus = rng.choice([1, 2, 4, 8], size, p=[0.5, 0.25, 0.15, 0.1])
        remaining = rng.uniform(1e3, 1e6, size)
        source = "synthetic stage times"
    devices = max(8, int(gpus.sum()) // 4)
    problem = make_problem(["gpu"], [devices], np.ones((size, 1)), scale_factor=list(gpus))
    jobs = replace(problem.jobs, total_steps=np.asarray(remaining, float),
                   steps_done=np.zeros(size))
    return replace(problem, jobs=jobs, sharing=SharingInputs(stage_s=stage)), source


def bench_muri(size: int, reference: Path) -> None:
    problem, source = muri_problem(size, reference)
    inst = muri.muri_instance(problem, MuriParameters(), Compat.NONE)
    started = time.perf_counter()
    exact = muri.matching_groups(inst)
    exact_s = time.perf_counter() - started
    started = time.perf_counter()
    greedy = muri.matching_groups(inst, exact_matching=False)
    greedy_s = time.perf_counter() - started
    gap = (exact.objective - greedy.objective) / exact.objective if exact.objective else 0.0
    proven = all(found.status.value == "optimal" for found in exact.matchings)
    print(f"muri      {size:6d}  exact-matching rounds {exact_s:7.3f} s obj {exact.objective:10.4g}"
          f" ({len(exact.matchings)} matchings, proven {proven})  greedy-matching rounds "
          f"{greedy_s:7.3f} s obj {greedy.objective:10.4g}  gap {gap:6.2%}  [{source}]",
          flush=True)
    candidates = muri.admitted(inst)
    columns = muri.count_candidate_groups(inst, candidates)
    if columns <= muri.MAX_SET_PACKING_COLUMNS:
        started = time.perf_counter()
        packing = muri.exact_groups(inst, incumbent=exact)
        packing_s = time.perf_counter() - started
        gap = ((packing.grouping.objective - exact.objective) / packing.grouping.objective
               if packing.grouping.objective else 0.0)
        print(f"muri      {size:6d}  set packing {packing_s:7.3f} s {packing.status.value} obj "
              f"{packing.grouping.objective:10.4g} ({columns} columns)  matching rounds are "
              f"{gap:6.2%} below it", flush=True)
    else:
        print(f"muri      {size:6d}  set packing skipped: {columns} candidate groups", flush=True)


def lucid_problem(size: int, seed: int = 2) -> Problem:
    rng = np.random.default_rng(seed)
    gpus = rng.choice([1, 2, 4], size, p=[0.7, 0.2, 0.1])
    running = np.arange(size) < size // 2
    devices = int(gpus[running].sum()) + size // 4
    problem = make_problem(["gpu"], [devices], rng.uniform(1, 5, (size, 1)),
                           scale_factor=list(gpus))
    jobs = replace(problem.jobs, total_steps=rng.uniform(1e3, 1e5, size),
                   steps_done=np.zeros(size))
    history: History = replace(
        problem.history,
        current_type=np.where(running, 0, -1).astype(np.int64),
        current_devices=np.where(running, gpus, 0).astype(np.int64),
    )
    sharing = SharingInputs(gpu_memory_gib=rng.uniform(1, 16, size),
                            sharing_score=rng.integers(0, 3, size))
    return replace(problem, jobs=jobs, history=history, sharing=sharing)


def bench_lucid(size: int, reference: Path) -> None:
    problem = lucid_problem(size)
    params = LucidParameters()
    deadline = exact_deadline()
    exact_s, exact = _timed(lambda: lucid.solve_policy(problem, params, Compat.NONE, OPTIONS,
                                                       deadline))
    first_s, first = _timed(lambda: lucid.solve_policy(problem, params, Compat.LUCID, OPTIONS,
                                                       deadline))
    _row("lucid", size, exact_s, exact, first_s, first)


def antman_problem(size: int, seed: int = 3) -> Problem:
    rng = np.random.default_rng(seed)
    devices = max(2, size // 2)
    problem = make_problem(["gpu"], [devices], np.ones((size, 1)))
    opportunistic = rng.random(size) < 1 / 3
    holders = np.nonzero(~opportunistic)[0][:devices]
    holder = np.full(devices, -1, np.int64)
    holder[: holders.size] = holders
    interference = tuple(
        GroupInterference((int(g), int(o)), (float(1 + rng.uniform(0, 0.3)), 1.2))
        for g in holders[: holders.size // 2].tolist()
        for o in rng.choice(np.nonzero(opportunistic)[0], min(3, int(opportunistic.sum())),
                            replace=False).tolist()
    ) if opportunistic.any() else ()
    shared = SharedDevices(
        ids=tuple(f"d{k}" for k in range(devices)),
        type_index=np.zeros(devices, np.int64),
        node=("",) * devices,
        memory_gib=np.full(devices, 32.0),
        used_memory_gib=rng.uniform(4, 24, devices),
        utilization=rng.uniform(0.1, 0.9, devices),
        guaranteed_job=holder,
        slowdown_budget=rng.choice([0.1, 0.3, np.inf], devices),
    )
    sharing = SharingInputs(gpu_memory_gib=rng.uniform(1, 10, size),
                            gpu_utilization=rng.uniform(0.05, 0.5, size),
                            opportunistic=opportunistic, devices=shared,
                            interference=interference)
    jobs = replace(problem.jobs, priority_weight=rng.choice([1.0, 2.0, 4.0], size),
                   arrival_time_s=np.arange(size, dtype=float))
    return replace(problem, jobs=jobs, sharing=sharing)


def bench_antman(size: int, reference: Path) -> None:
    problem = antman_problem(size)
    params = AntmanParameters(slowdown_weight=1.0)
    deadline = exact_deadline()
    exact_s, exact = _timed(lambda: antman.solve_policy(problem, params, Compat.NONE, OPTIONS,
                                                        deadline))
    greedy_s, greedy = _timed(lambda: antman.solve_policy(problem, params, Compat.ANTMAN,
                                                          OPTIONS, deadline))
    _row("antman", size, exact_s, exact, greedy_s, greedy)


def iadeep_problem(size: int, seed: int = 4) -> Problem:
    rng = np.random.default_rng(seed)
    problem = make_problem(["gpu"], [max(1, size // 2)], np.ones((size, 1)))
    configs = tuple(
        (JobConfiguration("b32", 1.0, float(rng.uniform(2, 8))),
         JobConfiguration("b64", float(rng.uniform(1.1, 1.5)), float(rng.uniform(6, 12))))
        for _ in range(size)
    )
    entries: dict[tuple[int, ...], GroupInterference] = {}
    for i in range(size):
        for k in (2, 2, 2, 3):
            others = rng.choice(np.delete(np.arange(size), i), k - 1, replace=False)
            members = tuple(sorted([i, *others.tolist()]))
            chosen = tuple(int(c) for c in rng.integers(0, 2, k))
            slow = tuple(float(1 + rng.uniform(0.1, 1.2)) for _ in members)
            entries.setdefault(members, GroupInterference(members, slow, chosen))
    sharing = SharingInputs(gpu_memory_gib=np.full(size, 4.0), configurations=configs,
                            interference=tuple(entries.values()))
    jobs = replace(problem.jobs, arrival_time_s=rng.permutation(size).astype(float))
    return replace(problem, jobs=jobs, sharing=sharing)


def bench_iadeep(size: int, reference: Path) -> None:
    problem = iadeep_problem(size)
    params = IadeepParameters()
    deadline = exact_deadline()
    exact_s, exact = _timed(lambda: iadeep.solve_policy(problem, params, Compat.NONE, OPTIONS,
                                                        deadline))
    greedy_s, greedy = _timed(lambda: iadeep.solve_policy(problem, params, Compat.IADEEP,
                                                          OPTIONS, deadline))
    _row("iadeep", size, exact_s, exact, greedy_s, greedy)


NETWORKX_MAX = [256]


def bench_matching(size: int, reference: Path) -> None:
    rng = np.random.default_rng(size)
    weight = np.triu(rng.random((size, size)), 1)
    weight = weight + weight.T
    started = time.perf_counter()
    found = max_weight_matching(weight)
    exact_s = time.perf_counter() - started
    started = time.perf_counter()
    greedy = greedy_matching(weight)
    greedy_s = time.perf_counter() - started
    g = matching_weight(weight, greedy)
    note = ""
    if size <= NETWORKX_MAX[0]:
        import networkx as nx

        graph = nx.from_numpy_array(weight)
        started = time.perf_counter()
        pairs = nx.max_weight_matching(graph)
        ref_s = time.perf_counter() - started
        ref = sum(weight[a, b] for a, b in pairs)
        note = (f"networkx {ref_s:7.3f} s obj {ref:.6g} (ratio {ref_s / exact_s:5.1f}x, "
                f"agree {abs(ref - found.objective) <= 1e-9 * ref})")
    print(f"matching  {size:6d}  exact {exact_s:7.3f} s {found.status.value:9s} obj "
          f"{found.objective:10.6g} (bound {found.bound:.6g}, {found.method})  greedy "
          f"{greedy_s:7.3f} s obj {g:10.6g}  gap {(found.objective - g) / found.objective:6.2%}"
          f"  {note}", flush=True)


BENCHES: dict[str, Callable[[int, Path], None]] = {
    "matching": bench_matching,
    "lucid": bench_lucid,
    "muri": bench_muri,
    "synergy": bench_synergy,
    "antman": bench_antman,
    "iadeep": bench_iadeep,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 512, 2048])
    parser.add_argument("--policies", nargs="+", default=list(BENCHES), choices=list(BENCHES))
    parser.add_argument("--reference-data", type=Path, default=DEFAULT_REFERENCE)
    parser.add_argument("--networkx-max", type=int, default=NETWORKX_MAX[0])
    parser.add_argument("--exact-time-limit", type=float, default=EXACT_LIMIT_S[0])
    args = parser.parse_args()
    NETWORKX_MAX[0] = args.networkx_max
    EXACT_LIMIT_S[0] = args.exact_time_limit
    for name in args.policies:
        for size in args.sizes:
            BENCHES[name](size, args.reference_data)


if __name__ == "__main__":
    main()
