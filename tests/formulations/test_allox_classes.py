"""AlloX's LP over job classes (jobs with identical processing-time rows) proven against routes
that know nothing of classes: a plain dictionary of rows for the classes themselves, brute
force over every assignment and order (n <= 7) and Gavel's per-device per-position Hungarian
matrix for the optimum, an independent replay of the schedule for feasibility, and the dual
certificate checked slot by slot.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from apportion.formulations.allox import Matching, solve_matching
from apportion.solver.row_classes import identical_rows
from tests.formulations.test_allox import Devices, assert_rel, brute_force, explicit_hungarian

Array = NDArray[np.float64]


@st.composite
def repeated_rows(draw: st.DrawFn) -> Array:
    """(N, H) processing times drawn from a few distinct rows, with rows that share their
    first entries but differ later and infinite entries (not allowed)."""
    H = draw(st.integers(1, 4))
    value = st.sampled_from([1.0, 2.0, 2.5, np.inf])
    pool = draw(st.lists(st.lists(value, min_size=H, max_size=H), min_size=1, max_size=5))
    picks = draw(st.lists(st.integers(0, len(pool) - 1), min_size=1, max_size=30))
    return np.array([pool[k] for k in picks], dtype=np.float64)


@given(repeated_rows())
def test_classes_of_rows_with_blocked_arcs(P: Array) -> None:
    """AlloX's rows hold inf (not allowed); the classes are still exactly the distinct rows,
    in order of their first appearance."""
    first, job_class, sizes = identical_rows(P)
    assert np.array_equal(sizes, np.bincount(job_class))
    seen: dict[tuple[float, ...], int] = {}
    for i, row in enumerate(map(tuple, P.tolist())):
        seen.setdefault(row, i)
    assert first.tolist() == sorted(seen.values())
    for i, row in enumerate(map(tuple, P.tolist())):
        assert first[job_class[i]] == seen[row]


@st.composite
def instances_with_identical_jobs(draw: st.DrawFn, max_jobs: int = 7,
                                  max_devices: int = 3) -> Devices:
    """Devices as in test_allox, but every job's work and speeds are copied from one of at
    most three job templates (arrival times stay distinct): many identical rows."""
    G = draw(st.integers(1, max_devices))
    types = draw(st.lists(st.integers(0, 1), min_size=G, max_size=G))
    taus = draw(st.lists(st.sampled_from([0.0, 0.0, 2.5, 7.0]), min_size=G, max_size=G))
    templates = draw(st.lists(
        st.tuples(st.sampled_from([1.0, 4.0, 9.0]),
                  st.lists(st.sampled_from([0.0, 0.5, 1.0, 3.0]), min_size=2, max_size=2)),
        min_size=1, max_size=3))
    picks = draw(st.lists(st.integers(0, len(templates) - 1), min_size=1, max_size=max_jobs))
    work = np.array([templates[k][0] for k in picks])
    thr = np.array([templates[k][1] for k in picks])[:, types]
    thr[~(thr > 0).any(axis=1), 0] = 1.0  # every job can run somewhere
    with np.errstate(divide="ignore"):
        p = np.where(thr > 0, work[:, None] / np.where(thr > 0, thr, 1), np.inf)
    a = -np.array(draw(st.lists(st.floats(0.0, 20.0), min_size=len(picks),
                                max_size=len(picks))))
    return Devices(p=p, tau=np.array(taus), a=a)


def check_matching(P: Array, tau: Array, W: NDArray[np.int64], a: Array,
                   result: Matching) -> None:
    """Independently of how the matching was found: every job on an allowed group, each
    group's machines run their jobs back to back from tau in the reported order, the objective
    is the schedule's total flow time, and the bound is the dual objective of the reported
    (u, v), dual feasible on every slot (v = 0 beyond the reported positions)."""
    N, H = P.shape
    assert np.all(np.isfinite(P[np.arange(N), result.group]))
    assert np.all((result.machine >= 0) & (result.machine < W[result.group]))
    for h in range(H):
        for machine in range(int(W[h])):
            mine = np.flatnonzero((result.group == h) & (result.machine == machine))
            clock = tau[h]
            for i in mine[np.argsort(result.start[mine], kind="stable")]:
                assert_rel(result.start[i], clock, what="no gap, no overlap")
                clock += P[i, h]
                assert_rel(result.completion[i], clock, what="completion")
    assert_rel(result.objective, float(np.sum(result.completion - a)), what="objective")
    assert result.bound is not None
    slots = N + 1
    bound = float(result.u.sum())
    scale = max(abs(result.objective), 1.0)
    for h in range(H):
        v = np.zeros(slots)
        v[: result.v[h].size] = result.v[h][:slots]
        assert np.all(v <= 0)
        bound += float(W[h] * v.sum())
        k = np.arange(1, slots + 1)
        for i in np.flatnonzero(np.isfinite(P[:, h])):
            cost = tau[h] - a[i] + k * P[i, h]
            assert np.all(result.u[i] + v <= cost + 1e-9 * scale), "dual feasibility"
    assert_rel(bound, result.bound, what="bound = dual objective of (u, v)")
    assert result.bound <= result.objective + 1e-9 * scale


@given(instances_with_identical_jobs())
def test_classes_keep_the_brute_force_optimum(inst: Devices) -> None:
    P, tau, W = inst.grouped()
    result = solve_matching(P, tau, W, inst.a)
    assert result.status == "optimal"
    check_matching(P, tau, W, inst.a, result)
    expected = brute_force(inst)
    assert_rel(result.objective, expected, what="matching vs brute force")
    assert result.bound is not None
    assert_rel(result.bound, expected, what="bound vs brute force")


@given(instances_with_identical_jobs(max_jobs=40, max_devices=6))
def test_classes_keep_the_hungarian_optimum(inst: Devices) -> None:
    P, tau, W = inst.grouped()
    result = solve_matching(P, tau, W, inst.a)
    check_matching(P, tau, W, inst.a, result)
    assert_rel(result.objective, explicit_hungarian(inst), what="matching vs Hungarian")


def test_identical_jobs_make_one_row_of_the_lp() -> None:
    """60 copies of one job and 2 others on two groups: the LP has 3 job rows, 3 x slots
    columns at most, and the optimum of the 62-job problem."""
    work = np.r_[np.full(60, 10.0), 3.0, 30.0]
    speed = np.array([2.0, 1.0])
    devices = Devices(p=work[:, None] / np.repeat(speed, [2, 3])[None, :],
                      tau=np.zeros(5), a=-np.linspace(0.0, 5.0, work.size))
    P, tau, W = devices.grouped()
    result = solve_matching(P, tau, W, devices.a)
    assert result.classes == 3
    assert result.constraints - 3 == result.variables // 3  # 3 rows, one column per slot each
    check_matching(P, tau, W, devices.a, result)
    assert_rel(result.objective, explicit_hungarian(devices), what="matching vs Hungarian")
    assert result.bound is not None
    assert_rel(result.bound, result.objective, what="bound")
