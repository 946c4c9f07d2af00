"""Synergy (B5): LP1 against brute force on full grids, the floors and capacities, LP1's
relaxation, TUNE's invariants, flat profiles, node feasibility of every plan, and the
reference profiles when present."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.datasets.colocation_profiles import read_synergy_profiles
from apportion.formulations.synergy import (
    SynergyInstance,
    fair_point,
    placed_value,
    solve_shapes,
    synergy_instance,
    tune,
)
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import SynergyParameters
from apportion.solver.result import JobStatus, Termination
from apportion.solver.sharing import ResourceGrid
from apportion.solver.solve import solve
from tests.formulations.colocation_cases import grid, synergy_problem

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "synergy"
PROFILES = REFERENCE / "synergy_tput_matrices.csv"

GAINS = st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 0.6))


def brute_force(problem: Problem) -> float:
    """LP1 by enumerating every grid point of every job (all 15 points of each)."""
    inst = synergy_instance(problem, SynergyParameters())
    sharing = problem.sharing
    assert sharing is not None
    grids = [sharing.resource_grid[i] for i in inst.jobs.tolist()]
    cpus, memory = inst.server_cpus.sum(), inst.server_memory.sum()
    best = -np.inf
    options = []
    for c, g in enumerate(grids):
        assert g is not None
        a, b = fair_point(g, inst.fair_cpus, inst.fair_memory)
        floor = g.throughput[a, b]
        points = [(g.cpus_per_gpu[x], g.memory_gib_per_gpu[y], g.throughput[x, y])
                  for x in range(g.cpus_per_gpu.size) for y in range(g.memory_gib_per_gpu.size)
                  if g.throughput[x, y] >= floor - 1e-12]
        options.append([(inst.gpus[c] * cpu, inst.gpus[c] * mem, inst.weight[c] * t)
                        for cpu, mem, t in points])
    for combo in itertools.product(*options):
        if sum(p[0] for p in combo) <= cpus + 1e-9 and sum(p[1] for p in combo) <= memory + 1e-9:
            best = max(best, sum(p[2] for p in combo))
    return float(best)


@given(st.lists(GAINS, min_size=1, max_size=3), st.lists(st.sampled_from([1, 2]), min_size=3,
                                                          max_size=3))
def test_lp1_matches_brute_force(gains: list[tuple[float, float]], gpus: list[int]) -> None:
    grids = [grid(cpu, mem) for cpu, mem in gains]
    problem = synergy_problem(grids, gpus[: len(grids)], nodes=1, devices_per_node=4,
                              cpus_per_node=12.0, memory_per_node=250.0)
    inst = synergy_instance(problem, SynergyParameters())
    shapes = solve_shapes(inst, Deadline.never(), 1e-9)
    assert shapes.objective is not None
    assert abs(shapes.objective - brute_force(problem)) <= 1e-6
    check_shapes(inst, shapes.point)
    relaxed = solve_shapes(inst, Deadline.never(), 1e-9, relax=True)
    assert relaxed.objective is not None and relaxed.objective >= shapes.objective - 1e-9


def check_shapes(inst: SynergyInstance, point: np.ndarray) -> None:
    """One point per job, floors held, totals within the cluster."""
    s = inst.shapes
    assert (point >= 0).all() and (s.job[point] == np.arange(inst.jobs.size)).all()
    assert (s.tput[point] >= s.tput[s.fair] - 1e-12).all()
    assert (inst.gpus * s.cpus[point]).sum() <= inst.server_cpus.sum() + 1e-9
    assert (inst.gpus * s.memory[point]).sum() <= inst.server_memory.sum() + 1e-9


def check_nodes(problem: Problem, plan_cpus: np.ndarray, plan_memory: np.ndarray,
                groups: tuple) -> None:
    """Per node: GPUs, cores and memory of the jobs placed there within the node's."""
    sharing = problem.sharing
    assert sharing is not None
    names = {name: k for k, name in enumerate(problem.cluster.node_names)}
    gpus = np.zeros(len(names))
    cpus = np.zeros(len(names))
    memory = np.zeros(len(names))
    for group in groups:
        job = group.members[0]
        total = sum(d for _, d in group.node_devices)
        assert total == group.devices == problem.jobs.scale_factor[job]
        for node, devices in group.node_devices:
            gpus[names[node]] += devices
            cpus[names[node]] += plan_cpus[job] * devices / total
            memory[names[node]] += plan_memory[job] * devices / total
    assert (gpus <= problem.cluster.node_devices).all()
    assert (cpus <= sharing.node_cpus + 1e-9).all()
    assert (memory <= sharing.node_memory_gib + 1e-9).all()


def random_problem(seed: int, m: int, nodes: int) -> Problem:
    rng = np.random.default_rng(seed)
    grids = [grid(float(rng.uniform(0, 1)), float(rng.uniform(0, 0.6))) for _ in range(m)]
    gpus = list(rng.choice([1, 2, 4], m, p=[0.6, 0.3, 0.1]))
    return synergy_problem(grids, gpus, nodes)


@given(st.integers(0, 10_000), st.integers(1, 24), st.integers(1, 3))
def test_plans_fit_the_nodes_and_tune_keeps_its_invariants(seed: int, m: int,
                                                           nodes: int) -> None:
    problem = random_problem(seed, m, nodes)
    inst = synergy_instance(problem, SynergyParameters())
    heuristic = tune(inst)
    s = inst.shapes
    for c in np.nonzero(heuristic.point >= 0)[0].tolist():
        p = int(heuristic.point[c])
        fair, best = int(s.fair[c]), int(s.best[c])
        # never below the fair share, never beyond what the job asked for
        assert s.tput[p] >= s.tput[fair] - 1e-12
        assert s.cpus[p] >= min(s.cpus[fair], s.cpus[best]) - 1e-12
        assert s.memory[p] >= min(s.memory[fair], s.memory[best]) - 1e-12
    shapes = solve_shapes(inst, Deadline.never(), 1e-9)
    assert shapes.objective is not None and shapes.bound is not None
    assert placed_value(inst, heuristic) <= shapes.bound + 1e-9
    for compat in (Compat.NONE, Compat.SYNERGY):
        plan = solve(problem, PolicyRequest("synergy", SynergyParameters(), compat),
                     SolveOptions())
        groups = plan.groups
        assert groups is not None and groups.cpus is not None and groups.memory_gib is not None
        check_nodes(problem, groups.cpus, groups.memory_gib, groups.groups)
        cert = plan.certificate
        assert cert.objective is not None
        if compat is Compat.NONE:
            assert cert.bound is not None and cert.objective <= cert.bound + 1e-9
            assert abs(cert.bound - shapes.bound) <= 1e-6 * max(1.0, shapes.bound) or \
                cert.bound == cert.objective
            assert groups.heuristic_objective is not None
            assert cert.objective >= groups.heuristic_objective - 1e-9
        else:
            assert cert.termination is Termination.HEURISTIC


def test_flat_profiles_make_tune_the_proportional_allocation() -> None:
    flat = ResourceGrid(np.array([1.0, 3.0, 6.0]), np.array([20.0, 62.5]), np.ones((3, 2)))
    problem = synergy_problem([flat] * 11, [1, 2, 1, 4, 1, 1, 2, 1, 1, 2, 4], nodes=2)
    plan = solve(problem, PolicyRequest("synergy", SynergyParameters(), Compat.SYNERGY),
                 SolveOptions())
    placed = [i for i, s in enumerate(plan.job_status) if s is JobStatus.ALLOCATED]
    assert placed == list(range(10))  # 16 GPUs: the last job does not fit
    assert plan.certificate.objective == len(placed)
    exact = solve(problem, PolicyRequest("synergy", SynergyParameters()), SolveOptions())
    assert exact.certificate.termination is Termination.OPTIMAL
    assert exact.certificate.objective == len(placed)


def test_cpu_hungry_jobs_get_more_cores_within_the_node() -> None:
    hungry = grid(1.0, 0.0)
    indifferent = ResourceGrid(hungry.cpus_per_gpu, hungry.memory_gib_per_gpu,
                               np.ones_like(hungry.throughput))
    problem = synergy_problem([hungry, indifferent, indifferent, indifferent], [1, 1, 1, 1],
                              nodes=1, devices_per_node=4, cpus_per_node=12.0,
                              memory_per_node=250.0)
    plan = solve(problem, PolicyRequest("synergy", SynergyParameters()), SolveOptions())
    assert plan.certificate.termination is Termination.OPTIMAL
    groups = plan.groups
    assert groups is not None and groups.cpus is not None
    # the indifferent jobs give their cores away: 1 each, the hungry one takes 9
    assert groups.cpus.tolist() == [9.0, 1.0, 1.0, 1.0]
    assert groups.groups[0].slowdown[0] < 1


@pytest.mark.skipif(not PROFILES.is_file(), reason="shared/reference/synergy not present")
def test_reference_profiles_lp1_against_brute_force_on_45_points() -> None:
    grids = read_synergy_profiles(PROFILES)
    assert all(g.throughput.shape == (9, 5) for k, g in grids.items() if k.endswith("_1"))
    chosen = [grids[k] for k in ("res18_1", "alexnet_1", "gnmt_1", "transformer_1")]
    problem = synergy_problem(chosen, [1, 1, 1, 1], nodes=1, devices_per_node=4,
                              cpus_per_node=12.0, memory_per_node=250.0)
    inst = synergy_instance(problem, SynergyParameters())
    shapes = solve_shapes(inst, Deadline.never(), 1e-9)
    assert shapes.objective is not None
    assert abs(shapes.objective - brute_force(problem)) <= 1e-6


def test_the_fair_share_floor_binds() -> None:
    """Without the floor the modest job would give its cores to the hungry one (3.5 > 2): the
    floor keeps it at its fair-share throughput."""
    cpus = np.array([1.0, 3.0, 5.0])
    memory = np.array([62.5])
    hungry = ResourceGrid(cpus, memory, np.array([[0.3], [1.0], [3.0]]))
    modest = ResourceGrid(cpus, memory, np.array([[0.5], [1.0], [1.0]]))
    problem = synergy_problem([hungry, modest], [1, 1], nodes=1, devices_per_node=2,
                              cpus_per_node=6.0, memory_per_node=125.0)
    for compat in (Compat.NONE, Compat.SYNERGY):
        plan = solve(problem, PolicyRequest("synergy", SynergyParameters(), compat),
                     SolveOptions())
        groups = plan.groups
        assert groups is not None and groups.cpus is not None
        assert groups.cpus[1] >= 3.0
        assert plan.objective_value[1] >= 1.0
    inst = synergy_instance(problem, SynergyParameters())
    shapes = solve_shapes(inst, Deadline.never(), 1e-9)
    assert shapes.objective == 2.0
