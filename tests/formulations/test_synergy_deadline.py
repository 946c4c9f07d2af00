"""Synergy at scale and under a deadline: the base order, the points of each job, TUNE (with
its peer adjustment) and OPT's server assignment choose what their plain statements (a scan
of every server and every placed job) choose; each stage cut by a countdown deadline keeps
what it reached; LP1 and the reshaping MIP are not started when HiGHS could not read its
limit in time; every cut answer is a plan that fits the nodes, says what was cut and is
never called optimal without a bound that proves it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.formulations import synergy
from apportion.formulations.synergy import (
    Placement,
    SynergyInstance,
    _points,
    assign_servers,
    choose_jobs_until,
    fair_point,
    largest_servers,
    peak_value,
    place,
    placed_value,
    solve_shapes,
    synergy_instance,
    tune,
)
from apportion.solver.deadline import Deadline
from apportion.solver.model import Compat, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import BaseOrder, SynergyParameters
from apportion.solver.result import JobStatus, Termination
from apportion.solver.sharing import ResourceGrid, SharingInputs
from apportion.solver.solve import solve
from tests.countdown import CountdownDeadline, ReservingDeadline
from tests.formulations.colocation_cases import grid, multi_type_problem, synergy_problem
from tests.formulations.test_synergy import check_nodes, random_problem

_EPS = 1e-9


def problems(seed: int, m: int, kind: int) -> Problem:
    """One type on 1-3 Philly-like nodes (cores scarce for the grids' best points), or
    several types on small nodes listed in a shuffled order, throughputs in whole numbers
    (ties between types)."""
    if kind == 0:
        return random_problem(seed, m, 1 + seed % 3)
    problem = multi_type_problem(seed, m, running=False)
    sharing = problem.sharing
    assert sharing is not None
    order = np.random.default_rng(seed).permutation(len(problem.cluster.node_names))
    cluster = replace(problem.cluster,
                      node_names=tuple(problem.cluster.node_names[k] for k in order.tolist()),
                      node_type=problem.cluster.node_type[order],
                      node_devices=problem.cluster.node_devices[order])
    sharing = replace(sharing, node_cpus=sharing.node_cpus[order],
                      node_memory_gib=sharing.node_memory_gib[order])
    jobs = replace(problem.jobs, throughput=np.ceil(problem.jobs.throughput))
    return replace(problem, cluster=cluster, sharing=sharing, jobs=jobs)


def scan_choice(problem: Problem, order: BaseOrder) -> tuple[list[int], list[int], list[int]]:
    """The base order as a scan over types per job: (order, chosen, type of each)."""
    jobs = problem.jobs
    grids = (problem.sharing or SharingInputs()).resource_grid
    if order is BaseOrder.REMAINING_SERVICE:
        best = jobs.throughput.max(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            key = np.where((jobs.total_steps > 0) & (best > 0),
                           jobs.remaining_steps / best * jobs.scale_factor, np.inf)
    elif order is BaseOrder.ATTAINED_SERVICE:
        key = problem.history.received_time_s.sum(axis=1) * jobs.scale_factor
    else:
        key = jobs.arrival_time_s
    n = problem.cluster.num_types
    free = np.bincount(problem.cluster.node_type, weights=problem.cluster.node_devices,
                       minlength=n).astype(np.int64)[:n]
    looked, chosen, types = [], [], []
    for i in np.argsort(key, kind="stable").tolist():
        looked.append(i)
        if not grids or grids[i] is None:
            continue
        room = np.nonzero(problem.usable[i] & (free >= jobs.scale_factor[i]))[0]
        if room.size:
            j = int(room[np.argmax(jobs.throughput[i, room])])
            chosen.append(i)
            types.append(j)
            free[j] -= jobs.scale_factor[i]
    return looked, chosen, types


@given(st.integers(0, 10_000), st.integers(1, 14), st.integers(0, 1), st.integers(0, 16),
       st.sampled_from(list(BaseOrder)))
def test_the_base_order_chooses_what_a_scan_chooses_until_the_deadline(
    seed: int, m: int, kind: int, looks: int, order: BaseOrder
) -> None:
    problem = problems(seed, m, kind)
    sharing = problem.sharing
    assert sharing is not None
    grids = list(sharing.resource_grid)
    grids[seed % m] = None  # a job without a profile is passed over
    problem = replace(problem, sharing=replace(sharing, resource_grid=tuple(grids)))
    looked, chosen, types = scan_choice(problem, order)
    args = (problem, order, problem.cluster.node_devices, problem.cluster.node_type)
    got, got_types, unreached = choose_jobs_until(*args)
    assert got.tolist() == chosen and got_types.tolist() == types and unreached.size == 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(synergy, "DEADLINE_CHECK_EVERY", 1)
        cut, cut_types, unreached = choose_jobs_until(*args, CountdownDeadline(checks=looks))
    reached = set(looked[:looks])
    assert unreached.tolist() == looked[looks:]
    assert cut.tolist() == [i for i in chosen if i in reached]
    assert cut_types.tolist() == [j for i, j in zip(chosen, types, strict=True) if i in reached]


@given(st.integers(0, 10_000), st.integers(1, 14), st.integers(0, 1))
def test_every_job_gets_the_points_of_its_grid(seed: int, m: int, kind: int) -> None:
    problem = problems(seed, m, kind)
    sharing = problem.sharing
    assert sharing is not None
    grids = list(sharing.resource_grid)
    grids[-1] = grids[0]  # jobs sharing one grid object share its points
    problem = replace(problem, sharing=replace(sharing, resource_grid=tuple(grids)))
    inst = synergy_instance(problem, SynergyParameters())
    s = inst.shapes
    offset = 0
    for c, i in enumerate(inst.jobs.tolist()):
        grid = problem.sharing.resource_grid[i]  # type: ignore[union-attr]
        assert grid is not None
        cpu, mem, tput, fair, best = _points(grid, fair_point(grid, inst.fair_cpus,
                                                              inst.fair_memory))
        part = slice(offset, offset + cpu.size)
        assert (s.job[part] == c).all()
        assert s.cpus[part].tolist() == cpu.tolist() and s.memory[part].tolist() == mem.tolist()
        assert s.tput[part].tolist() == tput.tolist()
        assert s.fair[c] == offset + fair and s.best[c] == offset + best
        offset += cpu.size
    assert s.job.size == offset


class ScanServers:
    """TUNE's servers as a plain statement: every server looked at for every fit."""

    def __init__(self, inst: SynergyInstance) -> None:
        self.gpus = inst.server_gpus.astype(np.int64).copy()
        self.cpus = inst.server_cpus.astype(np.float64).copy()
        self.memory = inst.server_memory.astype(np.float64).copy()
        self.type = inst.server_type
        self.largest = largest_servers(inst)

    def fit(self, g: int, cpu: float, mem: float, split: bool,
            type_index: int) -> list[tuple[int, int]] | None:
        room = np.minimum(
            self.gpus,
            np.minimum(np.floor(self.cpus / cpu + _EPS) if cpu > 0 else self.gpus,
                       np.floor(self.memory / mem + _EPS) if mem > 0 else self.gpus),
        ).astype(np.int64)
        room[self.type != type_index] = 0
        if g <= self.largest[type_index]:
            ok = np.nonzero(room >= g)[0]
            if ok.size:
                return [(int(ok[np.argmin(self.gpus[ok])]), g)]
            if not split:
                return None
        if room.sum() < g:
            return None
        pieces: list[tuple[int, int]] = []
        left = g
        for s in np.argsort(-room, kind="stable").tolist():
            take = int(min(room[s], left))
            if take <= 0:
                break
            pieces.append((s, take))
            left -= take
            if left == 0:
                return pieces
        return None

    def take(self, pieces: list[tuple[int, int]], cpu: float, mem: float, sign: int = 1) -> None:
        for s, k in pieces:
            self.gpus[s] -= sign * k
            self.cpus[s] -= sign * k * cpu
            self.memory[s] -= sign * k * mem


def scan_place(inst: SynergyInstance, wanted: np.ndarray, order: np.ndarray,
               split: bool) -> Placement:
    """TUNE's placement with peer adjustment scanning every server and every placed job."""
    s = inst.shapes
    servers = ScanServers(inst)
    placement = Placement(np.full(inst.jobs.size, -1, np.int64), [[] for _ in inst.jobs])
    for job in order.tolist():
        g, j = int(inst.gpus[job]), int(inst.job_type[job])
        fair = int(s.fair[job])
        for p in dict.fromkeys([int(wanted[job]), fair]):
            pieces = servers.fit(g, s.cpus[p], s.memory[p], split, j)
            if pieces is not None:
                break
        else:
            p, pieces = fair, None
            for server in np.argsort(-servers.gpus, kind="stable").tolist():
                if servers.type[server] != j or pieces is not None:
                    continue
                if servers.gpus[server] < min(g, servers.largest[j]) and not split:
                    continue
                for other in range(inst.jobs.size):
                    q = int(placement.point[other])
                    of = int(s.fair[other])
                    if q < 0 or q == of or not any(v == server for v, _ in
                                                   placement.pieces[other]):
                        continue
                    if s.cpus[q] <= s.cpus[of] and s.memory[q] <= s.memory[of]:
                        continue
                    servers.take(placement.pieces[other], s.cpus[q], s.memory[q], sign=-1)
                    servers.take(placement.pieces[other], s.cpus[of], s.memory[of])
                    placement.point[other] = of
                    pieces = servers.fit(g, s.cpus[fair], s.memory[fair], split, j)
                    if pieces is not None:
                        break
        if pieces is None:
            continue
        servers.take(pieces, s.cpus[p], s.memory[p])
        placement.point[job] = p
        placement.pieces[job] = pieces
    return placement


@given(st.integers(0, 10_000), st.integers(1, 24), st.integers(0, 1), st.booleans())
def test_tune_places_what_a_scan_of_every_server_and_job_places(
    seed: int, m: int, kind: int, split: bool
) -> None:
    inst = synergy_instance(problems(seed, m, kind), SynergyParameters())
    rng = np.random.default_rng(seed)
    order = rng.permutation(inst.jobs.size)
    for wanted in (inst.shapes.best, inst.shapes.fair):
        got = place(inst, wanted, order, split)
        want = scan_place(inst, wanted, order, split)
        assert got.point.tolist() == want.point.tolist()
        assert got.pieces == want.pieces


def test_peer_adjustment_shrinks_the_first_placed_job_first() -> None:
    """One node of 8 GPUs and 24 cores; CPU-hungry one-GPU jobs: two take 9 cores each, two
    their fair 3, then the fifth fits only after a job above its fair share shrinks: the first
    one placed (job 0), not job 1."""
    hungry = grid(1.0, 0.0)
    problem = synergy_problem([hungry] * 5, [1] * 5, nodes=1)
    inst = synergy_instance(problem, SynergyParameters())
    s = inst.shapes
    placement = tune(inst)
    assert (placement.point >= 0).all()
    assert placement.point[0] == s.fair[0] and placement.point[1] == s.best[1]
    assert s.cpus[s.best[1]] > s.cpus[s.fair[1]]
    want = scan_place(inst, s.best, np.arange(5), False)
    assert placement.point.tolist() == want.point.tolist()


def test_a_server_fits_exactly_its_cores_despite_rounding() -> None:
    """0.3 cores hold three GPUs at 0.1 core each although 0.3 / 0.1 < 3 in floating point."""
    flat = ResourceGrid(np.array([0.1]), np.array([1.0]), np.ones((1, 1)))
    problem = synergy_problem([flat], [3], nodes=1, devices_per_node=3, cpus_per_node=0.3,
                              memory_per_node=3.0)
    inst = synergy_instance(problem, SynergyParameters())
    assert 0.3 / 0.1 < 3
    assert tune(inst).pieces == [[(0, 3)]]


@given(st.integers(0, 10_000), st.integers(1, 24), st.integers(0, 30))
def test_tune_cut_after_k_jobs_is_tune_of_those_jobs(seed: int, m: int, looks: int) -> None:
    """Cut after `looks` jobs, TUNE's placement is what it places for those jobs alone (peer
    adjustment included); the others wait."""
    inst = synergy_instance(random_problem(seed, m, 1 + seed % 2), SynergyParameters())
    order = np.arange(inst.jobs.size)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(synergy, "DEADLINE_CHECK_EVERY", 1)
        cut = place(inst, inst.shapes.best, order, False, CountdownDeadline(checks=looks))
    alone = place(inst, inst.shapes.best, order[:looks], False)
    assert cut.reached == (looks if looks < inst.jobs.size else -1)
    assert cut.point.tolist() == alone.point.tolist() and cut.pieces == alone.pieces


def scan_assign(inst: SynergyInstance, point: np.ndarray) -> list[list[tuple[int, int]]]:
    s = inst.shapes
    free = inst.server_gpus.astype(np.int64).copy()
    cap_cpu = np.maximum(inst.server_cpus, _EPS)
    cap_mem = np.maximum(inst.server_memory, _EPS)
    asked_cpu, asked_mem = np.zeros(free.size), np.zeros(free.size)
    largest = largest_servers(inst)
    g = inst.gpus.astype(np.float64)
    demand = np.maximum(g * s.cpus[point] / cap_cpu.mean(), g * s.memory[point] / cap_mem.mean())
    pieces: list[list[tuple[int, int]]] = [[] for _ in range(inst.jobs.size)]
    for job in np.lexsort((-inst.gpus, -demand)).tolist():
        need, j = int(inst.gpus[job]), int(inst.job_type[job])
        mine = inst.server_type == j
        cpu, mem = float(s.cpus[point[job]]), float(s.memory[point[job]])
        if need <= largest[j]:
            ok = np.nonzero(mine & (free >= need))[0]
            if ok.size == 0:
                continue
            load = np.maximum((asked_cpu[ok] + need * cpu) / cap_cpu[ok],
                              (asked_mem[ok] + need * mem) / cap_mem[ok])
            chosen = [(int(ok[np.lexsort((free[ok], load))[0]]), need)]
        else:
            if free[mine].sum() < need:
                continue
            chosen, left = [], need
            for server in np.argsort(np.where(mine, -free, 1), kind="stable").tolist():
                take = int(min(free[server], left))
                if take <= 0:
                    break
                chosen.append((server, take))
                left -= take
                if left == 0:
                    break
        for server, k in chosen:
            free[server] -= k
            asked_cpu[server] += k * cpu
            asked_mem[server] += k * mem
        pieces[job] = chosen
    return pieces


@given(st.integers(0, 10_000), st.integers(1, 20), st.integers(0, 1), st.integers(0, 20))
def test_servers_go_where_a_scan_sends_them_until_the_deadline(
    seed: int, m: int, kind: int, looks: int
) -> None:
    inst = synergy_instance(problems(seed, m, kind), SynergyParameters())
    shapes = solve_shapes(inst, Deadline.never(), 1e-9)
    assert shapes.objective is not None
    pieces, late = assign_servers(inst, shapes.point)
    assert pieces == scan_assign(inst, shapes.point) and not late.any()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(synergy, "DEADLINE_CHECK_EVERY", 1)
        cut, late = assign_servers(inst, shapes.point, CountdownDeadline(checks=looks))
    assert int(late.sum()) == max(0, inst.jobs.size - looks)
    for c in range(inst.jobs.size):
        assert cut[c] == ([] if late[c] else pieces[c])


@pytest.mark.parametrize("allowance", ["LP1_SETUP_S_PER_NONZERO", "RESHAPE_SETUP_S_PER_NONZERO"])
def test_a_program_that_could_not_read_its_limit_in_time_is_not_started(
    allowance: str,
) -> None:
    """With less time left than HiGHS runs before first reading its limit (any time, by making
    the allowance huge): LP1 or the reshaping is not started, TUNE's plan is kept, the bound
    still holds it (every job at its best point without LP1), and it is not optimal; an
    unbounded deadline starts both."""
    problem = random_problem(7, 14, 1)
    request = PolicyRequest("synergy", SynergyParameters())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(synergy, allowance, 1e9)
        plan = solve(problem, request, SolveOptions(), Deadline.after(3600.0))
        unbounded = solve(problem, request, SolveOptions(), Deadline.never())
    compat = solve(problem, replace(request, compat=Compat.SYNERGY), SolveOptions())
    cert = plan.certificate
    which = "LP1" if allowance.startswith("LP1") else "placement reshaping"
    assert f"{which} was not started" in cert.detail
    assert cert.objective == compat.certificate.objective
    assert cert.bound is not None and cert.objective is not None
    assert cert.objective <= cert.bound
    if cert.termination is Termination.OPTIMAL:  # only when TUNE's plan reaches the bound
        assert cert.objective >= cert.bound - 1e-9
    if which == "LP1":
        inst = synergy_instance(problem, SynergyParameters())
        assert cert.bound == peak_value(inst)
    groups = plan.groups
    assert groups is not None and groups.cpus is not None and groups.memory_gib is not None
    check_nodes(problem, groups.cpus, groups.memory_gib, groups.groups)
    assert "not started" not in unbounded.certificate.detail


@pytest.mark.parametrize("compat", [Compat.NONE, Compat.SYNERGY])
def test_an_expired_deadline_answers_at_once_with_nothing_placed(compat: Compat) -> None:
    problem = random_problem(3, 10, 2)
    plan = solve(problem, PolicyRequest("synergy", SynergyParameters(), compat),
                 SolveOptions(), Deadline(0.0))
    cert = plan.certificate
    assert "base order stopped with 10 job(s) not looked at" in cert.detail
    assert cert.termination is (Termination.FEASIBLE if compat is Compat.NONE
                                else Termination.HEURISTIC)
    assert cert.objective == 0.0
    assert set(plan.job_status) == {JobStatus.DEFERRED}
    assert set(plan.job_reason) == {"not given GPUs before the time limit"}
    if compat is Compat.NONE:
        assert cert.bound is None  # the jobs never looked at are bounded by nothing here


def test_the_stages_before_the_plan_stop_at_its_reserve() -> None:
    """The base order, TUNE and OPT's stages read the deadline that leaves the plan its time:
    with that one past, all stop (the request's own far away); with it passing just after the
    base order, TUNE places nothing."""
    problem = random_problem(4, 10, 2)
    request = PolicyRequest("synergy", SynergyParameters())
    plan = solve(problem, request, SolveOptions(), ReservingDeadline())
    assert "base order stopped" in plan.certificate.detail
    assert plan.certificate.termination is Termination.FEASIBLE
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(synergy, "DEADLINE_CHECK_EVERY", 1)
        # passes after the base order's ten looks
        plan = solve(problem, request, SolveOptions(),
                     ReservingDeadline(share=lambda seconds: CountdownDeadline(checks=10)))
    assert "base order stopped" not in plan.certificate.detail
    assert "TUNE placed 0 of" in plan.certificate.detail


@given(st.integers(0, 10_000), st.integers(2, 16), st.integers(0, 1),
       st.sampled_from([0, 1, 2, 3, 5, 8, 13, 21, 34]))
def test_a_plan_cut_anywhere_fits_the_nodes_and_says_so(seed: int, m: int, kind: int,
                                                        looks: int) -> None:
    problem = problems(seed, m, kind)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(synergy, "DEADLINE_CHECK_EVERY", 1)
        deadline = CountdownDeadline(checks=looks)
        plan = solve(problem, PolicyRequest("synergy", SynergyParameters()), SolveOptions(),
                     deadline)
    groups = plan.groups
    assert groups is not None and groups.cpus is not None and groups.memory_gib is not None
    check_nodes(problem, groups.cpus, groups.memory_gib, groups.groups)
    cert = plan.certificate
    assert cert.objective is not None
    if cert.bound is not None:
        assert cert.objective <= cert.bound + 1e-9
    if "time limit" in cert.detail:
        assert cert.termination is not Termination.OPTIMAL or (
            cert.bound is not None and cert.objective >= cert.bound - 1e-9)
    inst = synergy_instance(problem, SynergyParameters())
    assert placed_value(inst, tune(inst)) >= 0.0
