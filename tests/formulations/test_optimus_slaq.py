"""Optimus (B8) and SLAQ (B9): the greedy's gap to the exact allocation of the same objective
(zero when gains are concave, reported otherwise), remaining work from loss curves, capacity
and placement."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import apportion
from apportion.formulations.loss_curve import CurveForm, LossCurve
from apportion.formulations.optimus import optimus
from apportion.formulations.slaq import slaq
from apportion.solver.deadline import Deadline
from apportion.solver.elastic_model import LossHistory
from apportion.solver.model import GivenGoodput, PolicyRequest, Problem, SolveOptions
from apportion.solver.parameters import ElasticMethod, OptimusParameters, SlaqParameters
from apportion.solver.result import JobStatus, Plan, Termination
from apportion.solver.solve import solve
from apportion.testing import check_plan

from .elastic_cases import elastic_problem, sync_model

OPTIONS = SolveOptions(relative_gap=1e-6)
NEVER = Deadline.never()


def check_capacity(problem: Problem, plan: Plan) -> None:
    """Devices per type and per node within the cluster; each job's nodes hold its devices."""
    use = np.zeros(problem.cluster.num_types, np.int64)
    per_node: dict[str, int] = {}
    assert plan.configurations is not None
    for i, choice in enumerate(plan.configurations.choices):
        if choice is None:
            assert plan.job_status[i] is not JobStatus.ALLOCATED
            continue
        use[choice.type_index] += choice.devices
        if problem.cluster.node_names:
            assert sum(d for _, d in choice.node_devices) == choice.devices
        for node, d in choice.node_devices:
            per_node[node] = per_node.get(node, 0) + d
    assert np.all(use <= problem.cluster.count)
    names = problem.cluster.node_names
    for node, d in per_node.items():
        assert d <= problem.cluster.node_devices[names.index(node)]


@st.composite
def concave_jobs(draw: st.DrawFn) -> Problem:
    """GPU-only Optimus models f(w) = 1/(a/w + b + c w) on one type: Q/f is convex in w, so
    the time saved is concave and every step adds one device."""
    m = draw(st.integers(1, 6))
    models = [sync_model(draw(st.floats(1e-3, 1e-1)), draw(st.floats(0.0, 1.0)),
                         draw(st.floats(0.0, 5e-2))) for _ in range(m)]
    remaining = draw(st.lists(st.floats(10.0, 1e5), min_size=m, max_size=m))
    gpus = draw(st.integers(m, 4 * m + 4))
    return elastic_problem([gpus], remaining, models=models,
                           max_devices=draw(st.lists(st.integers(0, 8), min_size=m, max_size=m)))


@given(concave_jobs())
def test_optimus_greedy_gap_is_zero_for_concave_gains(problem: Problem) -> None:
    """[derived, B8] the marginal-gain greedy is optimal for separable concave gains on one
    resource: the plan's objective equals the exact optimum (its bound)."""
    out = optimus(problem, OptimusParameters(), OPTIONS, NEVER)
    cert = out.certificate
    assert cert.termination is Termination.HEURISTIC
    assert cert.bound is not None and cert.objective is not None
    assert cert.objective == pytest.approx(cert.bound, rel=1e-9)
    assert out.exact_objective == pytest.approx(cert.objective, rel=1e-9)


def powers_of_two(jobs: int, speeds: list[list[float]]) -> list[list[GivenGoodput]]:
    return [[GivenGoodput(0, 1, 2 ** k, s) for k, s in enumerate(row)] for row in speeds[:jobs]]


def test_optimus_reports_the_gap_on_non_concave_speeds() -> None:
    """Job 0 speeds up only at 4 devices (superlinear); the greedy's first step, worth little
    per device, goes to job 1, and job 0 never reaches 4. The bound is the exact optimum, and
    method = exact returns it as optimal."""
    configs = powers_of_two(2, [[1.0, 1.05, 8.0], [1.0, 1.6, 1.7]])
    problem = elastic_problem([5], [1000.0, 1000.0], configurations=configs)
    greedy_out = optimus(problem, OptimusParameters(), OPTIONS, NEVER)
    exact_out = optimus(problem, OptimusParameters(method=ElasticMethod.EXACT), OPTIONS, NEVER)
    g, e = greedy_out.certificate, exact_out.certificate
    assert e.termination is Termination.OPTIMAL
    assert e.objective == pytest.approx(1000 / 8.0 + 1000 / 1.0)
    assert g.bound == pytest.approx(e.objective)
    assert g.objective is not None and g.objective > e.objective * 1.1
    assert g.gap is not None and g.gap > 0.1


def test_optimus_remaining_work_from_the_loss_curve() -> None:
    """Q = steps until the fitted excess over the asymptote is 1% of its first value, minus the
    last reported step: (0 + 200)/0.01 - 200 - 1000 for l(k) = 0.5 + 30/(k + 200)."""
    truth = LossCurve(CurveForm.INVERSE, 30.0, 200.0, 0.5, 0.0)
    steps = np.linspace(0.0, 1000.0, 20)
    history = LossHistory(steps, truth.loss(steps))
    problem = elastic_problem([4], [0.0, 500.0], models=[sync_model(0.01, 0.1, 0.0)] * 2,
                              histories=[history, None])
    out = optimus(problem, OptimusParameters(), OPTIONS, NEVER)
    assert out.remaining_steps is not None
    assert out.remaining_steps[0] == pytest.approx(200 / 0.01 - 200 - 1000, rel=1e-4)
    assert out.remaining_steps[1] == 500.0
    converged = LossHistory(steps, np.full(steps.size, 0.2))
    done = elastic_problem([4], [0.0], models=[sync_model(0.01, 0.1, 0.0)],
                           histories=[converged])
    assert optimus(done, OptimusParameters(), OPTIONS, NEVER).settled.status == (
        JobStatus.FINISHED,)


def test_optimus_places_on_fewest_servers_and_keeps_current_nodes() -> None:
    """Most free node first; a running job keeps its node (no migration)."""
    models = [sync_model(0.05, 0.0, 0.0)] * 2  # linear speed-up: every device helps
    problem = elastic_problem(
        [12], [1e4, 1e4], models=models, max_devices=[4, 4], nodes=[(0, 4), (0, 8)],
        current=[None, (0, ((0, 2),))],
    )
    plan = solve(problem, PolicyRequest("optimus", OptimusParameters()), OPTIONS)
    check_capacity(problem, plan)
    assert plan.configurations is not None
    first, second = plan.configurations.choices
    assert second is not None and dict(second.node_devices) == {"node0": 4}
    assert first is not None and dict(first.node_devices) == {"node1": 4}


def test_parameter_server_form_allocates_both_task_kinds() -> None:
    """Optimus's asynchronous model with parameter servers on a second (CPU) type: the greedy
    adds parameter servers while the per-server term dominates; the MILP bounds it."""
    from apportion.solver.elastic_model import SpeedModel

    model = SpeedModel(False, np.array([0.05, 0.2, 0.001, 0.002]), 0.0,
                       parameter_server_type=1, parameter_server_devices=2,
                       max_parameter_servers=4)
    problem = elastic_problem([8, 16], [1e4, 1e4], models=[model, model],
                              max_devices=[8, 8], throughput=np.array([[1.0, 0.0]] * 2))
    out = optimus(problem, OptimusParameters(), OPTIONS, NEVER)
    plan_ps = [int(o.parameter_servers[s]) for o, s in
               ((out.settled.options[i], out.settled.state[i]) for i in range(2)) if o]
    assert all(p >= 1 for p in plan_ps) and max(plan_ps) > 1
    cert = out.certificate
    assert cert.bound is not None and cert.objective is not None
    assert cert.objective >= cert.bound - 1e-9  # minimize: never below the optimum
    assert "MILP" in cert.detail


def curve_history(scale: float, shape: float, upto: float) -> LossHistory:
    steps = np.linspace(0.0, upto, 12)
    return LossHistory(steps, LossCurve(CurveForm.INVERSE, scale, shape, 0.1, 0.0).loss(steps))


@given(st.lists(st.tuples(st.floats(1.0, 50.0), st.floats(50.0, 5000.0)), min_size=1,
                max_size=5), st.integers(0, 12))
def test_slaq_greedy_gap_is_zero_for_concave_gains(curves: list[tuple[float, float]],
                                                   extra: int) -> None:
    """The predicted reduction l(k) - l(k + f(w) h) is concave in w (l convex decreasing, f
    concave): the greedy equals the exact allocation (B9 test as for Optimus)."""
    m = len(curves)
    histories = [curve_history(a, b, 500.0) for a, b in curves]
    problem = elastic_problem([m + extra], [0.0] * m, models=[sync_model(0.02, 0.1, 0.01)] * m,
                              histories=histories)
    out = slaq(problem, SlaqParameters(horizon_s=600.0), OPTIONS, NEVER)
    cert = out.certificate
    assert cert.bound is not None and cert.objective is not None
    assert cert.objective == pytest.approx(cert.bound, rel=1e-9, abs=1e-12)


def test_slaq_values_are_normalized_predicted_reductions() -> None:
    """One job, 2 devices: value = (l(k) - l(k + f(2) h)) / (max loss - min loss)."""
    history = curve_history(20.0, 100.0, 400.0)
    model = sync_model(0.02, 0.1, 0.0)
    problem = elastic_problem([2], [0.0], models=[model], histories=[history],
                              max_devices=[2])
    out = slaq(problem, SlaqParameters(horizon_s=100.0, recency_decay=1.0), OPTIONS, NEVER)
    curve = LossCurve(CurveForm.INVERSE, 20.0, 100.0, 0.1, 0.0)
    speed = 1.0 / (0.02 * 64 / 2 + 0.1)
    expected = (curve.loss(400.0) - curve.loss(400.0 + speed * 100.0)) / (
        history.loss.max() - history.loss.min())
    assert out.loss_reduction is not None
    assert out.loss_reduction[0] == pytest.approx(float(expected), rel=1e-4)


def test_jobs_beyond_the_cluster_wait_and_unknown_work_gets_the_base() -> None:
    problem = elastic_problem([2], [100.0, 0.0, 50.0], models=[sync_model(0.01, 0.1, 0.0)] * 3,
                              min_devices=[1, 1, 2])
    out = optimus(problem, OptimusParameters(), OPTIONS, NEVER)
    status = out.settled.status
    assert status[0] is JobStatus.ALLOCATED and status[1] is JobStatus.ALLOCATED
    assert "unknown" in out.settled.reason[1]
    assert status[2] is JobStatus.DEFERRED and "waiting" in out.settled.reason[2]


@pytest.mark.parametrize("policy", ["optimus", "slaq", "lyra"])
def test_a_deadline_already_passed_still_gives_a_feasible_plan(policy: str) -> None:
    """Every loop reads the deadline: with it already passed, the plan keeps what was admitted
    and placed (within capacity) and says how it ended, without raising."""
    from apportion.solver.parameters import LyraParameters

    steps = np.linspace(0.0, 500.0, 6)
    history = LossHistory(steps, 0.2 + 10.0 / (steps + 50.0))
    problem = elastic_problem([16], [1e4] * 6, models=[sync_model(0.02, 0.1, 0.0)] * 6,
                              histories=[history] * 6, nodes=[(0, 8), (0, 8)])
    parameters = {"optimus": OptimusParameters(), "slaq": SlaqParameters(),
                  "lyra": LyraParameters()}[policy]
    plan = solve(problem, PolicyRequest(policy, parameters),
                 SolveOptions(time_limit_s=1e-9))
    assert plan.certificate.termination in (Termination.HEURISTIC, Termination.OPTIMAL,
                                            Termination.OPTIMAL_INACCURATE,
                                            Termination.FEASIBLE, Termination.NO_SOLUTION)
    check_capacity(problem, plan)


def test_menus_beyond_the_cell_limit_are_thinned(monkeypatch: pytest.MonkeyPatch) -> None:
    """A menu too large to hold keeps each job's smallest and largest worker counts and
    geometrically spaced ones between; the plan stays within capacity."""
    from apportion.formulations import elastic_plan

    monkeypatch.setattr(elastic_plan, "MENU_CELL_LIMIT", 40)
    problem = elastic_problem([64], [1e4] * 4, models=[sync_model(0.05, 0.0, 0.0)] * 4,
                              max_devices=[32] * 4)
    out = optimus(problem, OptimusParameters(), OPTIONS, NEVER)
    for i in range(4):
        held = out.settled.held(i)
        assert held is not None
        options, _ = held
        assert 2 <= options.num_states <= 10 and options.devices[0] == 1
        assert options.devices[-1] == 32
    assert sum(int(o.devices[s]) for o, s in filter(None, map(out.settled.held, range(4)))) <= 64


def test_an_admission_stage_before_optimus_keeps_each_jobs_inputs() -> None:
    """Load-based admission defers the last arrival; the elastic inputs (loss history of job
    2) follow the admitted jobs, and the elastic section is laid out over every job."""
    from apportion.formulations.placement.admission import restrict_jobs
    from apportion.solver.stages import AdmissionMode, AdmissionParameters

    steps = np.linspace(0.0, 400.0, 5)
    history = LossHistory(steps, 0.3 + 20.0 / (steps + 100.0))
    problem = elastic_problem([2], [1e4, 2e4, 0.0], models=[sync_model(0.02, 0.1, 0.0)] * 3,
                              histories=[None, None, history], arrival=[9.0, 0.0, 1.0])
    policy = PolicyRequest("optimus", OptimusParameters(),
                           admission=AdmissionParameters(AdmissionMode.LOAD_BASED, 1.0))
    plan = solve(problem, policy, OPTIONS)
    assert plan.job_status[0] is JobStatus.DEFERRED
    assert plan.configurations is not None and plan.configurations.choices[0] is None
    section = plan.configurations.elastic
    assert section is not None and section.workers[0] == 0
    alone = optimus(restrict_jobs(problem, np.array([1, 2])), OptimusParameters(), OPTIONS,
                    NEVER)
    assert section.remaining_steps is not None and alone.remaining_steps is not None
    assert np.allclose(section.remaining_steps[1:], alone.remaining_steps)
    assert section.remaining_steps[2] > 0  # from the loss curve, not the unknown progress


@pytest.mark.parametrize("name", ["optimus", "slaq", "lyra"])
def test_a_rigid_job_gets_no_more_devices_than_its_elasticity_allows(name: str) -> None:
    """Regression (found by apportion.testing's registry-wide check_plan test): a job known
    only by its throughput at a gang of 2 whose elasticity allows 1 device got 2."""
    request = {"snapshot": {
        "cluster": {"acceleratorTypes": [{"name": "k80", "count": 2}]},
        "jobs": [{"id": "a", "scaleFactor": 2, "throughput": {"k80": 1.0},
                  "progress": {"totalSteps": 1000.0}, "elasticity": {"maxDevices": 1}}],
    }}
    solution = apportion.solve(request, name)
    check_plan(solution.request, solution)
    job = solution.job("a")
    assert not job.HasField("configuration") and "elasticity" in job.reason
