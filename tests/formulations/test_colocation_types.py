"""The co-location policies on clusters of several accelerator types: every group on one type
its members can use (throughput > 0, enough devices), within each type's devices and each
node's, in the exact mode and the compat heuristic; and the exact optima over those types
against brute force on tiny instances (IADeep's set packing from the snapshot's own inputs,
Muri's set packing with a type per group, Synergy's shape ILP over the jobs chosen per type)."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations.muri import (
    MURI_OVERHEAD,
    MuriInstance,
    admitted,
    exact_groups,
    matching_groups,
)
from apportion.formulations.synergy import solve_shapes, synergy_instance
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import (
    AntmanParameters,
    IadeepParameters,
    LucidParameters,
    MuriParameters,
    SynergyParameters,
)
from apportion.solver.result import JobStatus, Termination
from apportion.solver.sharing import SharingInputs
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem
from tests.formulations.colocation_cases import (
    check_groups_on_types,
    grid,
    multi_type_problem,
)
from tests.formulations.test_muri import groups_value, partitions
from tests.formulations.test_synergy import brute_force as shape_brute_force
from tests.formulations.test_synergy import check_nodes

POLICIES = {
    "synergy": (SynergyParameters(), PolicyRequest("synergy", SynergyParameters(),
                                                   Compat.SYNERGY)),
    "muri": (MuriParameters(exact_groups=True), PolicyRequest("muri", MuriParameters(),
                                                              Compat.MURI)),
    "antman": (AntmanParameters(), PolicyRequest("antman", AntmanParameters(), Compat.ANTMAN)),
    "lucid": (LucidParameters(pair_pending=True),
              PolicyRequest("lucid", LucidParameters(pair_pending=True), Compat.LUCID)),
    "iadeep": (IadeepParameters(), PolicyRequest("iadeep", IadeepParameters(), Compat.IADEEP)),
}
"""Per policy: the parameters of its exact solve and the request of its compat heuristic."""

TOL = 1e-7


@given(st.sampled_from(sorted(POLICIES)), st.integers(0, 10_000), st.integers(1, 8))
def test_groups_stay_on_one_usable_type_within_its_devices(name: str, seed: int,
                                                             m: int) -> None:
    problem = multi_type_problem(seed, m)
    params, heuristic = POLICIES[name]
    exact = solve(problem, PolicyRequest(name, params), SolveOptions())
    compat = solve(problem, heuristic, SolveOptions())
    nowhere = ~problem.usable.any(axis=1) & ~problem.history.running()
    for plan in (exact, compat):
        check_groups_on_types(problem, plan, same_gang=name != "antman")
        for i in np.nonzero(nowhere)[0].tolist():
            assert plan.job_status[i] is JobStatus.UNSERVABLE, (i, plan.job_reason[i])
    cert = exact.certificate
    assert cert.objective is not None
    assert compat.certificate.termination is Termination.HEURISTIC
    if cert.bound is not None:
        assert cert.objective <= cert.bound + TOL * max(1.0, abs(cert.bound))
    groups = exact.groups
    assert groups is not None and groups.heuristic_objective is not None
    assert groups.heuristic_objective <= cert.objective + TOL * max(1.0, abs(cert.objective))
    if name == "synergy":
        for plan in (exact, compat):
            section = plan.groups
            assert section is not None and section.cpus is not None
            assert section.memory_gib is not None
            check_nodes(problem, section.cpus, section.memory_gib, section.groups)


# ------------------------------------------------------------------ iadeep against brute force


def iadeep_brute_force(problem: Problem, params: IadeepParameters) -> float:
    """The best packing, built from the snapshot alone: units are a job alone in one of its
    configurations or a listed group, each on a type every member has throughput on and whose
    devices hold its gang and its memory; at most each type's devices, each job once."""
    sharing = problem.sharing
    assert sharing is not None and sharing.devices is not None
    jobs, n = problem.jobs, problem.cluster.num_types
    shared = sharing.devices
    devices = [int((shared.type_index == j).sum()) for j in range(n)]
    room = [float((shared.memory_gib - shared.used_memory_gib)[shared.type_index == j].min())
            if devices[j] else 0.0 for j in range(n)]
    cap = params.max_slowdown if params.max_slowdown > 0 else math.inf

    def can(i: int, j: int) -> bool:
        return bool(jobs.throughput[i, j] > 0) and int(jobs.scale_factor[i]) <= devices[j]

    units: list[tuple[frozenset[int], int, int, float]] = []  # members, type, devices, value
    for i in range(jobs.num_jobs):
        for j in range(n):
            for conf in sharing.configurations[i]:
                if can(i, j) and conf.gpu_memory_gib <= room[j] + 1e-9:
                    units.append((frozenset([i]), j, int(jobs.scale_factor[i]),
                                  float(jobs.priority_weight[i] * conf.throughput)))
    for entry in sharing.interference:
        confs = [sharing.configurations[i][c]
                 for i, c in zip(entry.jobs, entry.configurations, strict=True)]
        memory = sum(conf.gpu_memory_gib for conf in confs)
        value = sum(float(jobs.priority_weight[i]) * conf.throughput / s
                    for i, conf, s in zip(entry.jobs, confs, entry.slowdown, strict=True))
        for j in range(n):
            if all(can(i, j) for i in entry.jobs) and memory <= room[j] + 1e-9 and \
                    max(entry.slowdown) <= cap:
                units.append((frozenset(entry.jobs), j, int(jobs.scale_factor[entry.jobs[0]]),
                              value))

    def best(left: frozenset[int], free: tuple[int, ...]) -> float:
        if not left:
            return 0.0
        first = min(left)
        top = best(left - {first}, free)  # the first job left out
        for members, j, size, value in units:
            if first in members and members <= left and free[j] >= size:
                after = tuple(f - size if t == j else f for t, f in enumerate(free))
                top = max(top, value + best(left - members, after))
        return top

    return best(frozenset(range(jobs.num_jobs)), tuple(devices))


@given(st.integers(0, 10_000), st.integers(1, 5))
def test_iadeep_set_packing_over_types_matches_brute_force(seed: int, m: int) -> None:
    problem = multi_type_problem(seed, m, running=False)
    params = IadeepParameters(max_slowdown=2.0)
    plan = solve(problem, PolicyRequest("iadeep", params), SolveOptions(relative_gap=1e-9))
    assert plan.certificate.termination is Termination.OPTIMAL
    assert plan.certificate.objective is not None
    expected = iadeep_brute_force(problem, params)
    assert abs(plan.certificate.objective - expected) <= 1e-6 * max(1.0, expected)
    check_groups_on_types(problem, plan)


# ------------------------------------------------------------------ muri against brute force


@st.composite
def typed_muri_instances(draw: st.DrawFn, max_jobs: int = 6) -> MuriInstance:
    """Muri instances on two or three types, each job without throughput on some."""
    m = draw(st.integers(1, max_jobs))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    stage = rng.random((m, 4)) * rng.choice([0.1, 1.0, 3.0], (m, 4))
    stage[:, 2] += 0.05
    n = int(rng.integers(2, 4))
    capacity = rng.integers(1, 4, n).astype(np.int64)
    return MuriInstance(
        stage_s=stage,
        gpus=np.minimum(rng.choice([1, 2], m, p=[0.7, 0.3]), capacity.max()).astype(np.int64),
        priority=rng.random(m),
        weight=rng.choice([1.0, 2.0], m),
        cluster_gpus=int(capacity.sum()),
        max_group_size=draw(st.integers(1, 4)),
        overhead=draw(st.sampled_from([(1.0, 1.0, 1.0, 1.0), MURI_OVERHEAD])),
        type_gpus=capacity,
        usable=rng.random((m, n)) >= 0.35,
    )


def muri_brute_force(inst: MuriInstance) -> float:
    """Every set of disjoint groups of admitted jobs of one GPU count, each on a type all its
    members can use (`usable`, GPUs within the type), within every type's GPUs."""
    assert inst.usable is not None and inst.type_gpus is not None
    capacity = inst.type_gpus
    best = 0.0
    for chosen in partitions(admitted(inst).tolist(), inst.max_group_size):
        if any(len({int(inst.gpus[i]) for i in g}) > 1 for g in chosen):
            continue
        options = [[j for j in range(capacity.size)
                    if all(inst.usable[i, j] for i in g) and inst.gpus[g[0]] <= capacity[j]]
                   for g in chosen]
        if any(not o for o in options):
            continue
        fits = False
        for types in itertools.product(*options):
            use = np.zeros(capacity.size, np.int64)
            for g, j in zip(chosen, types, strict=True):
                use[j] += int(inst.gpus[g[0]])
            if (use <= capacity).all():
                fits = True
                break
        if fits:
            best = max(best, groups_value(inst, chosen))
    return best


def check_typed_grouping(inst: MuriInstance, grouping_types: np.ndarray,
                         groups: tuple[tuple[int, ...], ...], running: np.ndarray) -> None:
    """Every group (running or not) has a type all its members can use; running groups are on
    one such type, within every type's GPUs."""
    assert inst.usable is not None and inst.type_gpus is not None
    use = np.zeros(inst.type_gpus.size, np.int64)
    for g, members in enumerate(groups):
        assert inst.usable[list(members)].all(axis=0).any()
        if not running[g]:
            continue
        j = int(grouping_types[g])
        assert all(inst.usable[i, j] for i in members)
        use[j] += int(inst.gpus[members[0]])
    assert (use <= inst.type_gpus).all()


@given(typed_muri_instances())
def test_muri_set_packing_over_types_matches_brute_force(inst: MuriInstance) -> None:
    exact = exact_groups(inst, relative_gap=1e-9)
    assert exact.status is SolverStatus.OPTIMAL and exact.bound is not None
    expected = muri_brute_force(inst)
    assert abs(exact.grouping.objective - expected) <= 1e-6 * max(1.0, expected)
    assert abs(exact.bound - expected) <= 1e-6 * max(1.0, expected)
    check_typed_grouping(inst, exact.grouping.type_index, exact.grouping.groups,
                         exact.grouping.running)
    heuristic = matching_groups(inst)
    check_typed_grouping(inst, heuristic.type_index, heuristic.groups, heuristic.running)
    assert heuristic.objective <= exact.grouping.objective + 1e-9


# ------------------------------------------------------------------ synergy's choice and bound


@given(st.integers(0, 10_000), st.integers(1, 3))
def test_synergy_chooses_jobs_per_type_and_bounds_them_by_brute_force(seed: int,
                                                                      m: int) -> None:
    problem = multi_type_problem(seed, m, running=False)
    inst = synergy_instance(problem, SynergyParameters())
    jobs, cluster = problem.jobs, problem.cluster
    # chosen jobs run on a type they can use, within its GPUs
    use = np.zeros(cluster.num_types, np.int64)
    for i, j in zip(inst.jobs.tolist(), inst.job_type.tolist(), strict=True):
        assert jobs.throughput[i, j] > 0
        use[j] += int(jobs.scale_factor[i])
    assert (use <= cluster.count).all()
    # every job left out had no type it can use with its GPUs free (base order: all who fit)
    for i in sorted(set(range(m)) - set(inst.jobs.tolist())):
        free = cluster.count - use
        assert not (problem.usable[i] & (free >= jobs.scale_factor[i])).any()
    shapes = solve_shapes(inst, Deadline.never(), 1e-9)
    assert shapes.objective is not None
    expected = shape_brute_force(problem) if inst.jobs.size else 0.0
    assert abs(shapes.objective - expected) <= 1e-6 * max(1.0, expected)
    plan = solve(problem, PolicyRequest("synergy", SynergyParameters()),
                 SolveOptions(relative_gap=1e-9))
    cert = plan.certificate
    assert cert.objective is not None and cert.bound is not None
    assert cert.objective <= expected + 1e-6 and cert.bound >= expected - 1e-6
    check_groups_on_types(problem, plan)


def test_synergy_keeps_a_gang_on_one_type_it_can_use() -> None:
    """v100 on two 1-device nodes, p100 on one 2-device node; a 2-GPU job without throughput
    on p100 runs on the two v100 nodes, never on the p100 node (which alone fits its gang), and
    a second such job waits."""
    problem = make_problem(["v100", "p100"], [2, 2], np.array([[2.0, 0.0], [1.0, 0.0]]),
                           scale_factor=[2, 2])
    cluster = replace(problem.cluster, node_names=("v100-a", "v100-b", "p100-a"),
                      node_type=np.array([0, 0, 1]), node_devices=np.array([1, 1, 2]))
    sharing = SharingInputs(resource_grid=(grid(0.5, 0.2),) * 2,
                            node_cpus=np.array([3.0, 3.0, 6.0]),
                            node_memory_gib=np.array([62.5, 62.5, 125.0]))
    problem = replace(problem, cluster=cluster, sharing=sharing)
    for compat in (Compat.NONE, Compat.SYNERGY):
        plan = solve(problem, PolicyRequest("synergy", SynergyParameters(), compat),
                     SolveOptions())
        check_groups_on_types(problem, plan)
        groups = plan.groups
        assert groups is not None and len(groups.groups) == 1
        assert sorted(groups.groups[0].node_devices) == [("v100-a", 1), ("v100-b", 1)]
        assert plan.job_status[1] is JobStatus.DEFERRED


def test_muri_merges_only_jobs_sharing_a_type() -> None:
    """Jobs 0 and 2 run only on type 0, job 1 only on type 1, one GPU each: 0 and 1 interleave
    best (GPU-heavy with CPU-heavy) but share no type, so Muri merges 0 with 2 and all three
    run."""
    stage = np.array([[0.1, 0.1, 2.0, 0.1], [0.1, 2.0, 0.1, 0.1], [0.1, 0.1, 1.5, 0.1]])
    inst = MuriInstance(stage_s=stage, gpus=np.ones(3, np.int64), priority=np.arange(3.0),
                        weight=np.ones(3), cluster_gpus=2, type_gpus=np.array([1, 1]),
                        usable=np.array([[True, False], [False, True], [True, False]]))
    grouping = matching_groups(inst)
    check_typed_grouping(inst, grouping.type_index, grouping.groups, grouping.running)
    assert sorted(i for g, members in enumerate(grouping.groups) if grouping.running[g]
                  for i in members) == [0, 1, 2]
