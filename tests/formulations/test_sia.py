"""Sia's goodput ILP (A5, docs/policies/sia.md) proven by independent routes: brute force over every
configuration choice (n <= 5 jobs), the LP relaxation as a bound, CP-SAT as a second exact
solver, feasibility and placement invariants, hand-computed coefficients, the metamorphic
relations of the issue, and bad inputs with field paths through `request_to_model`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st

import apportion
from apportion.formulations.sia import (
    build_instance,
    current_configuration,
    goodput_table,
    job_restart_factor,
    sia_node_caps,
)
from apportion.formulations.sia_configs import (
    SIA_MAX_PROFILED_NODES,
    configuration_set,
    node_caps,
    node_layout,
)
from apportion.formulations.sia_ilp import (
    SiaInstance,
    coefficients,
    lagrangian_bound,
    normalize_goodput,
    objective_of,
    restart_factor,
    solve_cpsat,
    solve_exact,
    solve_highs,
    violations_of,
)
from apportion.server.convert import request_to_model
from apportion.server.pipeline import solve_request
from apportion.solver.backends.status import SolverStatus
from apportion.solver.errors import ValidationError
from apportion.solver.model import (
    Cluster,
    Compat,
    GivenGoodput,
    GivenGoodputs,
    PolicyRequest,
    Problem,
    SolveOptions,
)
from apportion.solver.parameters import SiaParameters
from apportion.solver.result import JobStatus, Termination, relative_gap
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem
from apportion.testing import check_plan, snapshots
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1.allocation_service_pb2 import SolveRequest


def brute_force(instance: SiaInstance) -> float:
    """Optimal F over every choice (None or an allowed configuration per job), vectorized."""
    m = instance.num_jobs
    options = [
        [-1] + [int(c) for c in np.nonzero(instance.allowed[i])[0]]
        if instance.pinned[i] < 0
        else [int(instance.pinned[i])]
        for i in range(m)
    ]
    best = math.inf if not instance.maximize else -math.inf
    for combo in itertools.product(*options):
        choice = np.asarray(combo, np.int64)
        if violations_of(instance, choice):
            continue
        value = objective_of(instance, choice)
        best = max(best, value) if instance.maximize else min(best, value)
    return best


def close(a: float, b: float, rel: float = 1e-6) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1.0)


# --------------------------------------------------------------------------------------------
# random small problems: 1-2 types, 1-3 nodes of 1/2/4 GPUs, 1-5 jobs with given goodputs


def sia_snapshots(max_jobs: int = 5) -> st.SearchStrategy[SolveRequest]:
    """`apportion.testing.snapshots` for Sia, small enough for the brute force: 1-2 types of
    1-3 nodes of 1, 2 or 4 GPUs, 1-5 jobs each with goodputs for 4 in 5 of the shapes, ages
    100-1000 s, some running one of their configurations after a few restarts."""
    return snapshots(
        "sia",
        jobs=st.integers(1, max_jobs),
        types=st.integers(1, 2),
        nodes=True,
        node_size=st.sampled_from([1, 2, 4]),
        node_count=st.integers(1, 3),
        goodputs=st.just(True),
        priority_weight=st.sampled_from([1.0, 1.0, 2.0]),
        age=st.floats(100.0, 1000.0),
        full_gangs=False,
    )


def problems(max_jobs: int = 5) -> st.SearchStrategy[Problem]:
    """`sia_snapshots` validated into the solver's model."""
    return sia_snapshots(max_jobs).map(lambda request: request_to_model(request)[0])


def instance_of(
    problem: Problem, params: SiaParameters, compat: Compat = Compat.NONE
) -> SiaInstance:
    table = goodput_table(problem, params.max_gpus)
    current = current_configuration(problem, table.configs, table.layout)
    restart = job_restart_factor(problem, current >= 0)
    return build_instance(problem, params, compat, table, current, restart)[0]


powers = st.sampled_from([-0.5, -1.0, -2.0, 0.5, 1.0])


@given(sia_snapshots(), powers, st.booleans())
def test_the_answer_on_the_wire_passes_check_plan(request: SolveRequest, p: float,
                                                  round2: bool) -> None:
    """The same clusters through the Python API: `check_plan` checks every configuration
    against its type, the nodes and the job's limits, and recomputes the ILP's objective from
    the reported goodputs and restart factors."""
    parameters = {"fairnessPower": p, "noAllocationPenalty": 1.1 if p < 0 else -1.1,
                  "roundCoefficients": round2}
    solution = apportion.solve(request, parameters=parameters)
    report = check_plan(solution.request, solution)
    assert report.termination == "optimal"
    assert "configurations and their placement" in report.checked
    assert "objective recomputed from the plan (configuration_terms)" in report.checked


def params_for(p: float, round2: bool = False, pin: bool = False) -> SiaParameters:
    return SiaParameters(
        fairness_power=p,
        no_allocation_penalty=1.1 if p < 0 else -1.1,
        round_coefficients=round2,
        pin_running=pin,
    )


@given(problems(), powers, st.booleans(), st.booleans())
def test_ilp_matches_brute_force_and_is_feasible(
    problem: Problem, p: float, round2: bool, pin: bool
) -> None:
    instance = instance_of(problem, params_for(p, round2, pin))
    result = solve_highs(instance, relative_gap=1e-9)
    if result.status == "infeasible":
        assert brute_force(instance) in (math.inf, -math.inf)
        return
    assert result.status == "optimal" and result.objective is not None
    assert violations_of(instance, result.choice) == []
    assert close(result.objective, objective_of(instance, result.choice), 1e-12)
    assert close(result.objective, brute_force(instance))
    assert result.bound is not None and close(result.bound, result.objective, 1e-6)


@given(problems(), powers, st.booleans())
def test_fast_path_within_gap_of_brute_force(problem: Problem, p: float, pin: bool) -> None:
    """solve_exact (LP bound + rounding, MIP only when needed) is optimal within 1e-4 and its
    bound is a true bound on the brute-force optimum."""
    instance = instance_of(problem, params_for(p, pin=pin))
    result = solve_exact(instance, relative_gap=1e-4)
    exact = brute_force(instance)
    if result.status == "infeasible":
        assert exact in (math.inf, -math.inf)
        return
    assert result.objective is not None and result.bound is not None
    assert violations_of(instance, result.choice) == []
    assert close(result.objective, exact, 1.1e-4)
    slack = 1e-7 * max(1.0, abs(exact))
    if instance.maximize:
        assert result.bound >= exact - slack
    else:
        assert result.bound <= exact + slack


@given(problems(), powers, st.booleans())
def test_lp_relaxation_bounds_the_ilp(problem: Problem, p: float, pin: bool) -> None:
    instance = instance_of(problem, params_for(p, pin=pin))
    ilp = solve_highs(instance, relative_gap=1e-9)
    lp = solve_highs(instance, relax=True)
    if ilp.objective is None or lp.objective is None:
        return
    slack = 1e-7 * max(1.0, abs(ilp.objective))
    if instance.maximize:
        assert lp.objective >= ilp.objective - slack
    else:
        assert lp.objective <= ilp.objective + slack
    if lp.model_size.variables == 0:  # no job has an allowed configuration: no LP point
        return
    # A5.7(4): at most (number of types) jobs are fractional in a basic LP optimum is not
    # guaranteed for HiGHS's returned point after presolve, but the LP point is feasible:
    assert lp.fractional is not None
    assert np.all(lp.fractional.sum(axis=1) <= 1 + 1e-7)


@given(problems(), powers, st.booleans())
def test_lagrangian_bound_is_weak_duality_and_matches_the_lp(
    problem: Problem, p: float, pin: bool
) -> None:
    """L(prices) bounds the ILP for the returned prices and reaches the LP relaxation value."""
    instance = instance_of(problem, params_for(p, pin=pin))
    dual = lagrangian_bound(instance)
    lp = solve_highs(instance, relax=True)
    if dual is None:
        assert lp.status == "infeasible"
        return
    if lp.objective is None:
        return
    value, prices, _ = dual
    assert np.all(prices >= 0)
    sign = -1.0 if instance.maximize else 1.0
    pinned = instance.pinned >= 0
    fixed = float(
        (
            instance.weight[pinned] * instance.coefficient[pinned, instance.pinned[pinned]]
            - instance.no_allocation_penalty
        ).sum()
    )
    bound = instance.no_allocation_penalty * instance.num_jobs + sign * (value + sign * fixed)
    exact = brute_force(instance)
    slack = 1e-7 * max(1.0, abs(exact))
    if instance.maximize:
        assert bound >= exact - slack
    else:
        assert bound <= exact + slack
    assert close(bound, lp.objective, 1e-6)


@given(problems(), powers)
def test_cp_sat_agrees_with_highs(problem: Problem, p: float) -> None:
    """With 2-decimal coefficients (compat rounding) CP-SAT on costs x100 is exact."""
    instance = instance_of(problem, params_for(p, round2=True))
    highs = solve_highs(instance, relative_gap=1e-9)
    cpsat = solve_cpsat(instance, scale=100.0)
    assert highs.status == cpsat.status
    if highs.objective is not None and cpsat.objective is not None:
        assert close(highs.objective, cpsat.objective, 1e-9)


@given(problems(), powers)
def test_plan_capacity_one_config_and_placement(problem: Problem, p: float) -> None:
    plan = solve(problem, PolicyRequest("sia", params_for(p), Compat.NONE), SolveOptions())
    cert = plan.certificate
    assert cert.termination is Termination.OPTIMAL
    m, n = problem.jobs.num_jobs, problem.cluster.num_types
    used = np.zeros(n, np.int64)
    per_node = np.zeros(len(problem.cluster.node_names), np.int64)
    index = {name: k for k, name in enumerate(problem.cluster.node_names)}
    for i in range(m):
        choice = plan.configurations.choices[i]
        assert (plan.time_share[i] > 0).sum() <= 1
        if choice is None:
            assert plan.time_share[i].sum() == 0
            continue
        used[choice.type_index] += choice.devices
        # node_devices never empty: equal power-of-two node sizes make BFD always succeed
        assert choice.placed, plan.job_reason[i]
        assert sum(d for _, d in choice.node_devices) == choice.devices
        assert len(choice.node_devices) == choice.nodes
        for name, d in choice.node_devices:
            k = index[name]
            assert problem.cluster.node_type[k] == choice.type_index
            per_node[k] += d
            if choice.nodes > 1:
                assert d == problem.cluster.node_devices[k]  # whole nodes
        assert choice.goodput > 0  # never a ZERO_ALLOC_GAIN configuration
    assert np.all(used <= problem.cluster.count)
    assert np.all(per_node <= problem.cluster.node_devices)


def test_unallocated_condition_holds() -> None:
    """A5.5: every unallocated job has no valid configuration with A < lambda_n that fits in
    the GPUs left free (else adding it would lower the objective)."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        m = 6
        thr = rng.uniform(1, 10, (m, 2))
        problem = make_problem(["a", "b"], [2, 1], thr)
        params = SiaParameters()
        instance = instance_of(problem, params)
        result = solve_highs(instance, relative_gap=1e-9)
        used = np.zeros(2, np.int64)
        for c in result.choice:
            if c >= 0:
                used[instance.config_type[c]] += instance.config_devices[c]
        free = instance.capacity - used
        for i in np.nonzero(result.choice < 0)[0]:
            for c in np.nonzero(instance.allowed[i])[0]:
                if instance.coefficient[i, c] * instance.weight[i] < instance.no_allocation_penalty:
                    assert instance.config_devices[c] > free[instance.config_type[c]]


# --------------------------------------------------------------------------------------------
# coefficients by hand


def test_restart_factor_hand_computed() -> None:
    r = restart_factor(
        np.asarray([10.0, 100.0, 100.0, 100.0]),
        np.asarray([0, 0, 2, 5]),
        np.asarray([30.0, 30.0, 30.0, 30.0]),
    )
    assert r[0] == 1.0  # age < delta
    assert math.isclose(r[1], 100 / 130)
    assert math.isclose(r[2], 40 / 130)
    assert r[3] == 0.0


def test_coefficients_hand_computed() -> None:
    raw = np.asarray([[2.0, 8.0, 0.0], [5.0, 0.0, 20.0]])
    g = normalize_goodput(raw)
    assert np.allclose(g, [[1.0, 4.0, 0.0], [1.0, 0.0, 4.0]])
    a, allowed = coefficients(g, np.asarray([0.25, 1.0]), np.asarray([1, -1]), -0.5)
    # job 0 runs on config 1 (kept: no restart factor); config 0 scaled by r = 0.25
    assert math.isclose(a[0, 0], 0.25**-0.5) and math.isclose(a[0, 1], 0.5)
    assert allowed.tolist() == [[True, True, False], [True, False, True]]
    assert math.isclose(a[1, 2], 0.5)
    rounded, _ = coefficients(np.asarray([[3.0]]), np.ones(1), np.asarray([-1]), -0.5, True)
    assert rounded[0, 0] == 0.58
    clipped, _ = coefficients(g, np.zeros(2), np.asarray([-1, -1]), -0.5)
    assert clipped[0, 0] == 3000.0


def test_configuration_set_matches_sia_shapes() -> None:
    cluster = Cluster(
        type_names=("big", "small"),
        count=np.asarray([24, 16], np.int64),
        cost_per_hour=np.ones(2),
        node_names=tuple(f"n{k}" for k in range(7)),
        node_type=np.asarray([0, 0, 0, 1, 1, 1, 1], np.int64),
        node_devices=np.asarray([8, 8, 8, 4, 4, 4, 4], np.int64),
    )
    shapes = [
        (c.type_index, c.nodes, c.devices) for c in configuration_set(node_layout(cluster), 2, 64)
    ]
    assert shapes == [
        (0, 1, 1),
        (0, 1, 2),
        (0, 1, 4),
        (0, 1, 8),
        (0, 2, 16),
        (0, 3, 24),
        (1, 1, 1),
        (1, 1, 2),
        (1, 1, 4),
        (1, 2, 8),
        (1, 3, 12),
        (1, 4, 16),
    ]
    capped = configuration_set(node_layout(cluster), 2, 8)
    assert max(c.devices for c in capped) == 8


def sia_cluster(scale: int) -> Cluster:
    """Sia's simulated cluster (T3.3, docs/datasets.md) times `scale`: 6 x aws (4 GPUs), 2 x dgx-ext
    (8), 3 x rtx (8) nodes per unit of scale."""
    nodes = (("aws", 6 * scale, 4), ("dgx-ext", 2 * scale, 8), ("rtx", 3 * scale, 8))
    node_type = np.concatenate([np.full(k, t, np.int64) for t, (_, k, _) in enumerate(nodes)])
    node_devices = np.concatenate([np.full(k, g, np.int64) for _, k, g in nodes])
    return Cluster(
        type_names=tuple(name for name, _, _ in nodes),
        count=np.asarray([k * g for _, k, g in nodes], np.int64),
        cost_per_hour=np.ones(3),
        node_names=tuple(f"n{k}" for k in range(node_type.size)),
        node_type=node_type,
        node_devices=node_devices,
    )


@pytest.mark.parametrize(
    ("scale", "per_type"),
    [
        # 64 GPUs: aws 1,2,4 + 2..6 nodes; dgx-ext 1,2,4,8 + 2 nodes; rtx 1,2,4,8 + 2,3 nodes.
        (1, (8, 5, 6)),
        # 2,048 GPUs: aws 1,2,4 + 2..16 nodes (64-GPU cap = the node cap); dgx-ext capped at
        # 2 nodes, rtx at 3 although 64 and 96 nodes exist.
        (32, (18, 5, 6)),
    ],
)
def test_per_type_node_caps_give_sias_configuration_counts(
    scale: int, per_type: tuple[int, int, int]
) -> None:
    """A5.2: n_c <= min(nodes of t, cluster_max_physical_nnodes[t]) gives Sia's 19 and 29."""
    cluster = sia_cluster(scale)
    caps = node_caps(cluster.type_names, SIA_MAX_PROFILED_NODES)
    assert caps == (16, 2, 3)
    configs = configuration_set(node_layout(cluster), 3, 64, max_nodes_per_type=caps)
    assert len(configs) == {1: 19, 32: 29}[scale]
    assert tuple(sum(c.type_index == t for c in configs) for t in range(3)) == per_type
    layout = node_layout(cluster)
    for c in configs:
        assert c.nodes <= min(caps[c.type_index], int((cluster.node_type == c.type_index).sum()))
        assert c.devices <= 64
        if c.nodes > 1:
            assert c.devices == c.nodes * layout.gpus_per_node(c.type_index)
    # Without caps the x32 cluster has 40: dgx-ext and rtx reach 8 nodes (64 GPUs).
    if scale == 32:
        assert len(configuration_set(node_layout(cluster), 3, 64)) == 40


def test_sia_policy_applies_the_node_caps_by_type_name_only_under_compat_sia() -> None:
    """Under `compat: sia` the default caps are Sia's by type name (its own clusters' types);
    without it a type that happens to be named like one of them (a user's "rtx") is not
    capped; explicit caps apply either way; () switches them off; unknown names uncapped."""
    cluster = sia_cluster(32)
    problem = make_problem(cluster.type_names, cluster.count.tolist(), np.ones((2, 3)))
    problem = replace(problem, cluster=cluster)
    assert sia_node_caps(problem, None, Compat.SIA) == (16, 2, 3)
    assert sia_node_caps(problem, None, Compat.NONE) == (0, 0, 0)
    assert sia_node_caps(problem, (), Compat.SIA) == (0, 0, 0)
    for compat in (Compat.NONE, Compat.SIA):
        assert sia_node_caps(problem, (("rtx", 4),), compat) == (0, 0, 4)
    renamed = replace(problem, cluster=replace(cluster, type_names=("t4", "a100", "2080ti")))
    assert sia_node_caps(renamed, None, Compat.SIA) == (0, 0, 0)
    table = goodput_table(problem, 64, sia_node_caps(problem, None, Compat.SIA))
    assert len(table.configs) == 29
    assert len(goodput_table(problem, 64).configs) == 40


# --------------------------------------------------------------------------------------------
# metamorphic relations


@given(problems(), powers, st.integers(0, 4), st.integers(-3, 3))
def test_scaling_a_goodput_row_leaves_the_decision(
    problem: Problem, p: float, job: int, exponent: int
) -> None:
    """Normalization: multiplying a job's goodput row by c = 2^k gives bit-identical
    coefficients, hence the same ILP and the same decision (also with round2)."""
    i = job % problem.jobs.num_jobs
    c = 2.0**exponent
    given = list(problem.jobs.given_goodput)
    given[i] = tuple(replace(g, goodput=g.goodput * c) for g in given[i])
    scaled = replace(problem, jobs=replace(problem.jobs, given_goodput=GivenGoodputs.of(given)))
    for round2 in (False, True):
        params = params_for(p, round2)
        a, b = instance_of(problem, params), instance_of(scaled, params)
        assert np.array_equal(a.coefficient, b.coefficient)
        ra, rb = solve_highs(a, relative_gap=1e-9), solve_highs(b, relative_gap=1e-9)
        assert np.array_equal(ra.choice, rb.choice)


@given(problems(), powers, st.integers(0, 4))
def test_more_restarts_never_make_a_change_more_attractive(
    problem: Problem, p: float, job: int
) -> None:
    """If keeping a running job's configuration is optimal with Q restarts, it stays optimal
    with Q + 1 (r_i can only fall, so every other configuration only gets worse)."""
    running = np.nonzero(problem.history.current_type >= 0)[0]
    if running.size == 0:
        return
    i = int(running[job % running.size])
    params = params_for(p)

    def stay_optimal(prob: Problem) -> tuple[bool, float]:
        inst = instance_of(prob, params)
        free = brute_force(inst)
        current = current_configuration(
            prob, goodput_table(prob, 64).configs, node_layout(prob.cluster)
        )
        if current[i] < 0 or not inst.allowed[i, current[i]]:
            return False, free
        pinned = inst.pinned.copy()
        pinned[i] = current[i]
        stay = brute_force(replace(inst, pinned=pinned))
        return close(stay, free, 1e-12), free

    before, _ = stay_optimal(problem)
    restarts = problem.history.restarts.copy()
    restarts[i] += 1
    more = replace(problem, history=replace(problem.history, restarts=restarts))
    after, _ = stay_optimal(more)
    if before:
        assert after


@given(problems(), st.sampled_from([-0.5, -1.0]))
def test_adding_gpus_never_increases_the_objective(problem: Problem, p: float) -> None:
    """A5.7(5), p < 0: an extra node of an existing type only adds options (and capacity)."""
    cluster = problem.cluster
    t = int(cluster.node_type[0])
    size = int(cluster.node_devices[0])
    bigger = replace(
        cluster,
        count=cluster.count + np.eye(cluster.num_types, dtype=np.int64)[t] * size,
        node_names=(*cluster.node_names, "extra"),
        node_type=np.append(cluster.node_type, t),
        node_devices=np.append(cluster.node_devices, size),
    )
    params = params_for(p)
    small = solve_highs(instance_of(problem, params), relative_gap=1e-9)
    large = solve_highs(instance_of(replace(problem, cluster=bigger), params), relative_gap=1e-9)
    assert small.objective is not None and large.objective is not None
    assert large.objective <= small.objective + 1e-9 * max(1.0, abs(small.objective))


@given(problems(), st.sampled_from([-0.5, -1.0]))
def test_previous_allocation_irrelevant_when_r_is_one(problem: Problem, p: float) -> None:
    """With r_i = 1 for all jobs (ages below delta) the optimum does not depend on history."""
    young = replace(
        problem,
        jobs=replace(
            problem.jobs, arrival_time_s=np.full(problem.jobs.num_jobs, problem.time_s - 1.0)
        ),
    )
    fresh = replace(
        young, history=replace(young.history, current_type=np.full(young.jobs.num_jobs, -1))
    )
    params = params_for(p)
    a = solve_highs(instance_of(young, params), relative_gap=1e-9)
    b = solve_highs(instance_of(fresh, params), relative_gap=1e-9)
    assert a.objective is not None and b.objective is not None
    assert close(a.objective, b.objective, 1e-9)


def test_single_job_gets_largest_goodput_that_fits() -> None:
    problem = make_problem(["a"], [4], [[1.0]])
    given = (tuple(GivenGoodput(0, 1, d, g) for d, g in [(1, 1.0), (2, 1.7), (4, 3.0)]),)
    problem = replace(problem, jobs=replace(problem.jobs, given_goodput=GivenGoodputs.of(given)))
    plan = solve(problem, PolicyRequest("sia", SiaParameters(), Compat.NONE), SolveOptions())
    choice = plan.configurations.choices[0]
    assert choice is not None and choice.devices == 4


def test_compat_sia_keeps_invalid_cells_but_never_picks_them() -> None:
    rng = np.random.default_rng(0)
    problem = make_problem(["a", "b"], [4, 2], rng.uniform(1, 5, (5, 2)), [1, 2, 1, 2, 1])
    inst = instance_of(problem, SiaParameters(), Compat.SIA)
    assert inst.allowed.all()
    plan = solve(problem, PolicyRequest("sia", SiaParameters(), Compat.SIA), SolveOptions())
    for choice in plan.configurations.choices:
        assert choice is None or choice.goodput > 0


def test_pinned_infeasible_is_a_termination_not_an_exception() -> None:
    problem = make_problem(["a"], [2], [[1.0], [1.0], [1.0]])
    history = replace(
        problem.history,
        current_type=np.zeros(3, np.int64),
        current_devices=np.ones(3, np.int64),
    )
    problem = replace(problem, history=history)
    plan = solve(
        problem, PolicyRequest("sia", SiaParameters(pin_running=True), Compat.NONE), SolveOptions()
    )
    assert plan.certificate.termination is Termination.INFEASIBLE
    assert all(s is JobStatus.DEFERRED for s in plan.job_status)


# --------------------------------------------------------------------------------------------
# requests: end to end and bad inputs


CLUSTER = {
    "acceleratorTypes": [{"name": "a100", "count": 16}, {"name": "t4", "count": 4}],
    "nodes": [
        {"name": "n1", "acceleratorType": "a100", "devices": 8},
        {"name": "n2", "acceleratorType": "a100", "devices": 8},
        {"name": "n3", "acceleratorType": "t4", "devices": 4},
    ],
}
"""16 A100 on two 8-GPU nodes, 4 T4 on one node (canonical JSON of the snapshot's cluster)."""


def _request(
    extra_jobs: list[dict[str, object]] | None = None,
    policy: dict[str, object] | None = None,
    history: list[dict[str, object]] | None = None,
) -> service_pb.SolveRequest:
    body = {
        "snapshot": {
            "timeS": 1000,
            "cluster": CLUSTER,
            "jobs": [
                {
                    "id": "j1",
                    "configurations": [
                        {"acceleratorType": "a100", "nodes": 1, "devices": 1, "goodput": 10},
                        {"acceleratorType": "a100", "nodes": 2, "devices": 16, "goodput": 90},
                    ],
                },
                {
                    "id": "j2",
                    "pollux": {
                        "perfParams": {
                            "t4": {
                                "alphaC": 0.05,
                                "betaC": 0.004,
                                "alphaN": 0.3,
                                "betaN": 0.01,
                                "alphaR": 0.1,
                                "betaR": 0.005,
                                "gamma": 1.5,
                            }
                        },
                        "gradSqr": 1,
                        "gradVar": 10,
                        "initBatchSize": 32,
                        "maxBatchSize": 512,
                        "minLocalBatchSize": 4,
                        "maxLocalBatchSize": 128,
                    },
                },
                *(extra_jobs or []),
            ],
            "history": {"jobs": history or []},
        },
        "policy": policy or {"name": "sia"},
    }
    return json_format.ParseDict(body, service_pb.SolveRequest())


def test_end_to_end_request() -> None:
    response = solve_request(
        _request(
            history=[
                {
                    "jobId": "j1",
                    "restarts": 1,
                    "current": {"acceleratorType": "a100", "devices": 16, "nodes": ["n1", "n2"]},
                }
            ]
        )
    )
    assert response.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    j1, j2 = response.plan.jobs
    assert j1.configuration.devices == 16 and j1.configuration.unchanged
    assert dict(j1.configuration.node_devices) == {"n1": 8, "n2": 8}
    assert j2.configuration.accelerator_type == "t4" and j2.configuration.placed
    assert j2.configuration.atomic_batch_size > 0
    assert response.stats.HasField("best_bound") and response.stats.relative_gap <= 1e-4


def _violations(request: service_pb.SolveRequest) -> dict[str, str]:
    with pytest.raises(ValidationError) as info:
        request_to_model(request)
    return {v.field: v.description for v in info.value.violations}


@pytest.mark.parametrize(
    ("job", "path"),
    [
        (
            {
                "id": "b",
                "configurations": [
                    {"acceleratorType": "a100", "nodes": 1, "devices": 1, "goodput": -1}
                ],
            },
            "snapshot.jobs[2].configurations[0].goodput",
        ),
        (
            {
                "id": "b",
                "configurations": [
                    {"acceleratorType": "a100", "nodes": 1, "devices": 1, "goodput": "NaN"}
                ],
            },
            "snapshot.jobs[2].configurations[0].goodput",
        ),
        (
            {
                "id": "b",
                "configurations": [
                    {"acceleratorType": "h100", "nodes": 1, "devices": 1, "goodput": 1}
                ],
            },
            "snapshot.jobs[2].configurations[0].accelerator_type",
        ),
        (
            {
                "id": "b",
                "configurations": [
                    {"acceleratorType": "a100", "nodes": 1, "devices": 16, "goodput": 1}
                ],
            },
            "snapshot.jobs[2].configurations[0].devices",
        ),
        (
            {
                "id": "b",
                "configurations": [
                    {"acceleratorType": "t4", "nodes": 2, "devices": 8, "goodput": 1}
                ],
            },
            "snapshot.jobs[2].configurations[0].nodes",
        ),
        (
            {
                "id": "b",
                "throughput": {"a100": 1},
                "elasticity": {"minDevices": 8, "maxDevices": 4},
            },
            "snapshot.jobs[2].elasticity.min_devices",
        ),
        (
            {"id": "b", "throughput": {"a100": 1}, "restartPenaltyS": -1},
            "snapshot.jobs[2].restart_penalty_s",
        ),
        (
            {"id": "b", "throughput": {"a100": 1}, "arrivalTimeS": 2000},
            "snapshot.jobs[2].arrival_time_s",
        ),
        (
            {"id": "b", "pollux": {"gradSqr": 0, "initBatchSize": 32}},
            "snapshot.jobs[2].pollux.grad_sqr",
        ),
    ],
)
def test_bad_job_inputs(job: dict[str, object], path: str) -> None:
    assert path in _violations(_request([job]))


def test_bad_parameters_and_history() -> None:
    bad_p = _violations(_request(policy={"name": "sia", "sia": {"fairnessPower": 0}}))
    assert "undefined" in bad_p["policy.sia.fairness_power"]
    sign = _violations(_request(policy={"name": "sia", "sia": {"noAllocationPenalty": -1}}))
    assert "policy.sia.no_allocation_penalty" in sign
    gone = _violations(
        _request(history=[{"jobId": "j1", "current": {"acceleratorType": "a100", "devices": 12}}])
    )
    assert "snapshot.history.jobs[0].current" in gone


def test_running_job_beyond_a_node_cap_is_reported() -> None:
    """Under compat sia, Sia's rtx cap is 3 nodes (A5.2): on 4 rtx nodes a running job on all
    4 (32 GPUs) no longer has a configuration, while 3 nodes (24 GPUs) do; without compat
    sia the type name caps nothing."""

    def request(devices: int) -> service_pb.SolveRequest:
        body = {
            "snapshot": {
                "timeS": 1000,
                "cluster": {
                    "acceleratorTypes": [{"name": "rtx", "count": 32}],
                    "nodes": [
                        {"name": f"r{k}", "acceleratorType": "rtx", "devices": 8} for k in range(4)
                    ],
                },
                "jobs": [
                    {
                        "id": "j1",
                        "configurations": [
                            {"acceleratorType": "rtx", "nodes": 1, "devices": 8, "goodput": 8},
                            {"acceleratorType": "rtx", "nodes": 3, "devices": 24, "goodput": 20},
                        ],
                    }
                ],
                "history": {
                    "jobs": [
                        {"jobId": "j1", "current": {"acceleratorType": "rtx", "devices": devices}}
                    ]
                },
            },
            "policy": {"name": "sia", "compat": "COMPAT_SIA"},
        }
        return json_format.ParseDict(body, service_pb.SolveRequest())

    capped = _violations(request(32))
    assert "per-type node caps" in capped["snapshot.history.jobs[0].current"]
    uncapped = request(32)
    uncapped.policy.compat = 0  # COMPAT_UNSPECIFIED: no caps by type name
    assert solve_request(uncapped).stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    response = solve_request(request(24))
    assert response.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    assert response.plan.jobs[0].configuration.devices == 24


def test_placement_failure_is_reported() -> None:
    """Unequal node sizes (3 + 1 GPUs): two 2-GPU configurations fit the type's total but not
    the nodes; the second one is reported as not placed, with a reason."""
    base = make_problem(["a"], [4], [[1.0], [1.0]])
    cluster = replace(
        base.cluster,
        node_names=("big", "small"),
        node_type=np.asarray([0, 0], np.int64),
        node_devices=np.asarray([3, 1], np.int64),
    )
    given = tuple((GivenGoodput(0, 1, 1, 1.0), GivenGoodput(0, 1, 2, 1.9)) for _ in range(2))
    problem = replace(base, cluster=cluster,
                      jobs=replace(base.jobs, given_goodput=GivenGoodputs.of(given)))
    plan = solve(problem, PolicyRequest("sia", SiaParameters(), Compat.NONE), SolveOptions())
    chosen = [c for c in plan.configurations.choices if c is not None]
    assert sorted(c.devices for c in chosen) == [2, 2]
    choices = plan.configurations.choices
    failed = [i for i, c in enumerate(choices) if c is not None and not c.placed]
    assert len(failed) == 1
    assert plan.job_reason[failed[0]].startswith("placement failed")
    assert "placement failed" in plan.certificate.detail


def tied_instance(seed: int) -> SiaInstance:
    """60 jobs of 3 kinds (identical rows: ties at any dual prices) over 2 types x 3 sizes."""
    rng = np.random.default_rng(seed)
    kinds = rng.uniform(0.2, 1.0, (3, 6))
    kind = np.repeat(np.arange(3), 20)
    coef = kinds[kind] * np.array([1.0, 1.8, 3.2, 1.2, 2.1, 3.9])[None, :]
    return SiaInstance(
        config_type=np.array([0, 0, 0, 1, 1, 1]), config_devices=np.array([1, 2, 4, 1, 2, 4]),
        capacity=np.array([30, 25]), coefficient=coef, allowed=np.ones_like(coef, bool),
        weight=np.ones(60), no_allocation_penalty=0.0, maximize=True, pinned=np.full(60, -1))


@settings(max_examples=15)
@given(seed=st.integers(0, 10**6))
def test_priced_plans_with_ties_are_certified_optima(seed: int) -> None:
    """With many identical jobs the plan read off the dual prices overloads a type; whatever
    route solve_exact takes (regret plan, restricted LP or MIP over the near-tied columns, or
    the full MIP), its plan is within 1e-4 of HiGHS's exact optimum (gap 0) and its bound
    bounds it."""
    instance = tied_instance(seed)
    result = solve_exact(instance, relative_gap=1e-4)
    exact = solve_highs(instance, relative_gap=0.0)
    assert result.objective is not None and exact.objective is not None
    assert not violations_of(instance, result.choice)
    assert result.objective >= exact.objective * (1 - 1e-4)
    assert result.bound is not None and result.bound >= exact.objective * (1 - 1e-9)


@pytest.mark.parametrize("seed", [5, 10, 15])
def test_priced_routes_end_certified(seed: int) -> None:
    """Fixed tied instances that the cheaper routes of the Lagrangian path used to settle (a
    price plan, a regret plan, a restricted LP): whichever route settles them, the answer is
    feasible, optimal within the requested gap by its own bound, and the bound is valid
    against HiGHS's exact optimum (the outcome, not the route, is what is promised)."""
    instance = tied_instance(seed)
    result = solve_exact(instance, relative_gap=1e-4)
    exact = solve_highs(instance, relative_gap=0.0)
    assert result.status is SolverStatus.OPTIMAL
    assert result.objective is not None and result.bound is not None
    assert exact.objective is not None
    assert not violations_of(instance, result.choice)
    assert relative_gap(result.objective, result.bound) <= 1e-4
    assert result.bound >= exact.objective * (1 - 1e-9)  # maximized: a valid upper bound
    assert result.objective >= exact.objective * (1 - 1e-4)


def test_node_caps_through_the_wire() -> None:
    """policy.sia.max_nodes_per_type caps multi-node configurations by type name (j1's 2-node
    a100 configuration disappears with a cap of 1); no_node_caps lifts Sia's table; bad caps
    are field-path errors."""
    uncapped = solve_request(_request(policy={"name": "sia", "sia": {"noNodeCaps": True}}))
    assert uncapped.plan.jobs[0].configuration.devices == 16
    capped = solve_request(
        _request(policy={"name": "sia", "sia": {"maxNodesPerType": {"a100": 1}}}))
    assert capped.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
    assert capped.plan.jobs[0].configuration.devices == 1
    bad = _violations(_request(policy={"name": "sia", "sia": {
        "maxNodesPerType": {"a100": 0, "h100": 2}, "noNodeCaps": True}}))
    assert {'policy.sia.max_nodes_per_type["a100"]', 'policy.sia.max_nodes_per_type["h100"]',
            "policy.sia.max_nodes_per_type"} <= set(bad)


def _restart_request(restarts: int) -> service_pb.SolveRequest:
    """One job running on 1 A100 since t = 900 (age 100 s at t = 1000); 2 A100s would give it
    1.2x the goodput. Restart factor r = max(100 - 30 Q, 0) / 130 (A5.4)."""
    body = {
        "snapshot": {
            "timeS": 1000,
            "cluster": CLUSTER,
            "jobs": [{
                "id": "j",
                "arrivalTimeS": 900,
                "configurations": [
                    {"acceleratorType": "a100", "nodes": 1, "devices": 1, "goodput": 10},
                    {"acceleratorType": "a100", "nodes": 1, "devices": 2, "goodput": 12},
                ],
            }],
            "history": {"jobs": [{
                "jobId": "j", "restarts": restarts,
                "current": {"acceleratorType": "a100", "devices": 1, "nodes": ["n1"]},
            }]},
        },
        "policy": {"name": "sia"},
    }
    return json_format.ParseDict(body, service_pb.SolveRequest())


def test_the_restart_factor_keeps_a_young_job_where_it_runs() -> None:
    """A young running job stays on its 1 GPU: the 2-GPU configuration's 1.2x goodput, times
    r = 100/130 = 0.77, is worth less than the current one (1.2 r = 0.92 < 1); a plan that
    ignored the restart factor would move it. With a restart already counted the factor is
    smaller still (70/130), and the job stays as well."""
    for restarts in (0, 1):
        response = solve_request(_restart_request(restarts))
        assert response.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
        chosen = response.plan.jobs[0].configuration
        assert chosen.devices == 1 and chosen.unchanged
        assert chosen.restart_factor == pytest.approx((100 - 30 * restarts) / 130)
