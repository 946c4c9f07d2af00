"""The placement stage against the greedy placers it replaces, same run, same grants.

    python benchmarks/placement.py [--part cluster|patterns|shifts|all] [--seed 0]

* cluster: 1,024 8-GPU nodes in 128 racks of 8 (8,192 devices), 2,048 jobs after a max-min
  fairness plan; the grants of the next round placed by the exact stage (node-level MILP with
  its bound) and by Blox's (consolidated, scattered), Tiresias's, Lucid's and Gavel's placers,
  all judged on the exact stage's objective (placed jobs first, then cost: node crossings 1,
  rack crossings 2, a move 2). Two job-size mixes: Philly-like (powers of two, 1-64 GPUs) and
  any size 1-64 (log-uniform); then the round after, from the first round's devices (moves).
* patterns: MAPA-style placement inside 64 DGX-1 nodes (NVLink hybrid cube-mesh, PCIe
  elsewhere): ring all-reduce jobs of 2-8 GPUs, half bandwidth-sensitive; exact joint packing
  against MAPA's five FIFO policies on the link score (1 = the best pattern for the size).
* shifts: CASSINI time shifts for 64 jobs with communication phases on a 2-tier network (16
  racks of 4 nodes, 100 Gb/s node uplinks, 200 Gb/s rack uplinks): overflow unshifted, after
  the published per-link rotation + traversal, and after the exact MILP.

Times are wall seconds of the placer call on this machine (the policy's own time apart).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

from apportion.datasets.topologies import NodeKind, rack_cluster
from apportion.formulations.placement.cassini import (
    overflow,
    shift_problem,
    solve_shifts,
    traversal_shifts,
)
from apportion.formulations.placement.demands import Grant, round_grants
from apportion.formulations.placement.stage import place_grants
from apportion.formulations.rounds import round_schedule
from apportion.solver.deadline import Deadline
from apportion.solver.model import PolicyRequest, Problem
from apportion.solver.parameters import MaxMinFairnessParameters
from apportion.solver.solve import solve
from apportion.solver.stages import PlacementParameters, PlacementWeights, Placer
from apportion.solver.topology import (
    CommunicationPattern,
    CommunicationPhase,
    PlacementInputs,
    PlacementJobs,
)
from apportion.solver.validation import make_problem

LIMIT_S = 10.0
"""Time limit of each placer call (s): the stage's default when a request sets none."""
PHILLY_SIZES = (1, 2, 4, 8, 16, 32, 64)
PHILLY_MIX = (0.50, 0.15, 0.12, 0.10, 0.06, 0.04, 0.03)
GREEDY = (Placer.BLOX_CONSOLIDATED, Placer.BLOX_SCATTERED, Placer.TIRESIAS_YARN,
          Placer.LUCID_CONSOLIDATE, Placer.GAVEL_SERVERS)
MAPA = (Placer.MAPA_BASELINE, Placer.MAPA_TOPO_AWARE, Placer.MAPA_GREEDY,
        Placer.MAPA_PRESERVE, Placer.MAPA_MIN_SCORE)


def cluster_problem(mix: str, seed: int) -> Problem:
    rng = np.random.default_rng(seed)
    m = 2048
    if mix == "philly":
        sizes = rng.choice(PHILLY_SIZES, m, p=PHILLY_MIX)
    else:
        sizes = np.clip(np.round(np.exp(rng.uniform(0, np.log(64), m))), 1, 64).astype(int)
    generated = rack_cluster(128, 8, 8, "a100")
    problem = make_problem(["a100"], [8192], rng.uniform(0.5, 2.0, (m, 1)), sizes)
    return replace(problem, cluster=generated.cluster)


def row(name: str, seconds: float, placed: int, grants: int, cost: float, extra: str) -> str:
    return f"{name:<18} {seconds:8.3f} {placed:6d}/{grants:<6d} {cost:10.2f}  {extra}"


def cluster_part(seed: int) -> None:
    print("cluster: 1,024 x 8-GPU nodes in 128 racks, 2,048 jobs after max-min fairness")
    for mix in ("philly", "any"):
        problem = cluster_problem(mix, seed)
        started = time.perf_counter()
        plan = solve(problem, PolicyRequest("weighted_max_min_fairness",
                                            MaxMinFairnessParameters()))
        policy_s = time.perf_counter() - started
        rounds = round_schedule(problem, plan.time_share, 2)
        first, second = round_grants(rounds[0].grants), round_grants(rounds[1].grants)
        print(f"\n[{mix} sizes] max-min plan {policy_s:.3f} s; round 0: {len(first)} grants, "
              f"{sum(g.devices for g in first)} devices; round 1: {len(second)} grants")
        print(f"{'placer':<18} {'seconds':>8} {'placed':>13} {'cost':>10}  certificate")
        exact_cost = None
        previous = None
        for placer in (Placer.EXACT, *GREEDY):
            parameters = PlacementParameters(placer=placer)
            started = time.perf_counter()
            placed = place_grants(problem, first, parameters, deadline=Deadline.after(LIMIT_S))
            seconds = time.perf_counter() - started
            result = placed.result
            score = result.score
            if placer is Placer.EXACT:
                exact_cost = score.cost
                previous = placed.devices_of()
                extra = (f"{result.termination.value}, bound {result.bound:.2f}, gap "
                         f"{result.gap:.2g}" if result.bound is not None else "")
            else:
                assert exact_cost is not None
                extra = f"cost - exact {score.cost - exact_cost:+.2f}"
            print(row(placer.value, seconds, score.placed, len(first), score.cost, extra))
        print("round 1 from round 0's exact devices (moves priced at 2):")
        for placer in (Placer.EXACT, Placer.TIRESIAS_YARN, Placer.GAVEL_SERVERS):
            parameters = PlacementParameters(placer=placer)
            started = time.perf_counter()
            placed = place_grants(problem, second, parameters, previous,
                                  deadline=Deadline.after(LIMIT_S))
            seconds = time.perf_counter() - started
            score = placed.result.score
            moves = int(score.moved.sum())
            extra = f"{moves} moved"
            if placer is Placer.EXACT and placed.result.bound is not None:
                extra += (f", {placed.result.termination.value}, gap "
                          f"{placed.result.gap:.2g}")
            print(row(placer.value, seconds, score.placed, len(second), score.cost, extra))


def patterns_part(seed: int) -> None:
    print("\npatterns: 64 DGX-1 nodes, each with its own queue of ring all-reduce jobs of 2-6 "
          "GPUs (MAPA schedules one server), half bandwidth-sensitive, 0-2 GPUs already busy")
    rng = np.random.default_rng(seed)
    generated = rack_cluster(8, 8, 8, "v100", kind=NodeKind.DGX1)
    topo = generated.topology
    sizes: list[int] = []
    pins: list[int] = []
    busy = np.zeros(topo.num_devices, dtype=bool)
    for v in range(64):
        taken = int(rng.integers(0, 3))
        busy[topo.node_devices[v][rng.permutation(8)[:taken]]] = True
        room = 8 - taken
        while room >= 2:
            size = int(rng.choice([2, 3, 4, 6]))
            if size > room:
                break
            sizes.append(size)
            pins.append(int(topo.node_domain[v]))
            room -= size
    m = len(sizes)
    problem = make_problem(["v100"], [512], np.ones((m, 1)), sizes)
    inputs = replace(PlacementJobs.defaults(m),
                     pattern=(CommunicationPattern.RING_ALLREDUCE,) * m,
                     bandwidth_sensitive=rng.random(m) < 0.5,
                     pinned_domain=np.asarray(pins, np.int64))
    problem = replace(problem, cluster=generated.cluster, placement=PlacementInputs(inputs))
    grants = [Grant((i,), 0, int(s)) for i, s in enumerate(sizes)]
    weights = PlacementWeights(crossing={}, free_domain={}, link_score=1.0)
    print(f"{m} jobs, {sum(sizes)} GPUs, {int(busy.sum())} GPUs busy; objective: link score")
    print(f"{'placer':<18} {'seconds':>8} {'placed':>13} {'link score':>10}  ideal   certificate")
    for placer in (Placer.EXACT, *MAPA):
        started = time.perf_counter()
        placed = place_grants(problem, grants, PlacementParameters(placer=placer,
                                                                   weights=weights),
                              occupied=busy, deadline=Deadline.after(LIMIT_S))
        seconds = time.perf_counter() - started
        result = placed.result
        score = result.score
        on = score.link_score[[bool(d) for d in result.assignment.devices]]
        extra = f"{result.termination.value}, gap {result.gap:.2g}" if result.bound is not None \
            else ""
        print(f"{placer.value:<18} {seconds:8.3f} {score.placed:6d}/{m:<6d} "
              f"{on.mean():10.4f}  {int(np.sum(on >= 1 - 1e-9)):5d}   {extra}")


def shifts_part(seed: int) -> None:
    print("\nshifts: 64 jobs with communication phases, 16 racks x 4 nodes of 8 GPUs, "
          "node uplinks 100 Gb/s, rack uplinks 200 Gb/s")
    rng = np.random.default_rng(seed)
    generated = rack_cluster(16, 4, 8, "a100", node_uplink_gbps=100.0, rack_uplink_gbps=200.0)
    m = 64
    sizes = rng.choice([3, 5, 6, 10, 12], m, p=[0.2, 0.2, 0.2, 0.2, 0.2])
    problem = make_problem(["a100"], [512], np.ones((m, 1)), sizes)
    iteration = rng.choice([0.4, 0.6, 0.8, 1.2], m)
    start = rng.uniform(0.0, 0.5, m)
    phases = tuple((CommunicationPhase(float(a), float(a + 0.4), float(g)),)
                   for a, g in zip(start, rng.uniform(40, 90, m), strict=True))
    inputs = replace(PlacementJobs.defaults(m), phases=phases, iteration_time_s=iteration)
    problem = replace(problem, cluster=generated.cluster, placement=PlacementInputs(inputs))
    grants = [Grant((i,), 0, int(s)) for i, s in enumerate(sizes)]
    placed = place_grants(problem, grants, PlacementParameters(placer=Placer.TIRESIAS_YARN))
    devices = placed.devices_of()
    shifts = shift_problem(generated.topology, devices, phases, iteration, 0.1, 2.4)
    zero = tuple(0 for _ in shifts.jobs)
    print(f"{len(devices)} of {m} jobs placed ({int(sizes.sum())} GPUs) by Tiresias's placer; "
          f"{len(shifts.jobs)} share {shifts.capacity.size} uplinks; common period "
          f"{shifts.period * 0.1:.1f} s in 0.1 s slots")
    print(f"unshifted overflow   {overflow(shifts, zero):10.2f} Gb")
    started = time.perf_counter()
    found, consistent = traversal_shifts(shifts)
    seconds = time.perf_counter() - started
    text = f"{overflow(shifts, found):10.2f} Gb" if found is not None else "inconsistent (loop)"
    print(f"per-link traversal   {text}  ({seconds:.3f} s)")
    started = time.perf_counter()
    result = solve_shifts(shifts, Deadline.after(60.0))
    seconds = time.perf_counter() - started
    print(f"exact shift MILP     {result.overflow:10.2f} Gb  bound "
          f"{result.bound if result.bound is not None else float('nan'):.2f}, "
          f"{result.termination.value} ({seconds:.3f} s)")
    del consistent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--part", default="all", choices=["cluster", "patterns", "shifts", "all"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.part in ("cluster", "all"):
        cluster_part(args.seed)
    if args.part in ("patterns", "all"):
        patterns_part(args.seed)
    if args.part in ("shifts", "all"):
        shifts_part(args.seed)


if __name__ == "__main__":
    main()
