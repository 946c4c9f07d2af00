"""`check_plan(request, response)`: verify a plan's feasibility and its certificate from the
snapshot and the response alone, by code independent of the formulation that produced them
(docs/testing.md lists every check).

The request is validated as the server validates it (`apportion.server.convert`), so the
checker reads the same defaults (scale factor 1, weight 1, ...); everything else, the plan's
arrays, feasibility and the objective's value, is computed here from the wire messages.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from apportion.server.convert import request_to_model
from apportion.server.python_api import RequestLike, Solution, as_request
from apportion.solver.capabilities import Objective, PlanKind
from apportion.solver.model import Compat, PolicyRequest, Problem, SolveOptions
from apportion.solver.registry import PolicySpec, lookup
from apportion.testing.columns import expand_columns
from apportion.testing.objectives import (
    NotDefined,
    log_welfare_in_steps,
    maximizes,
    policy_throughput,
    recompute,
)
from apportion.testing.plan_view import WITH_PLAN, PlanView, pair_throughput, read_plan
from apportion.v1 import allocation_service_pb2 as service_pb

FEASIBILITY_TOLERANCE = 1e-6
"""Default slack of every feasibility check, relative to the row's size (at least 1)."""
OBJECTIVE_TOLERANCE = 1e-6
"""Default relative difference allowed between the reported and the recomputed objective."""


@dataclass(frozen=True)
class Failure:
    """One check that failed: where (a field path in the response or request) and why."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class PlanCheckError(AssertionError):
    """The plan or its certificate is wrong; `failures` lists every failed check."""

    def __init__(self, policy: str, failures: list[Failure]) -> None:
        self.policy = policy
        self.failures: tuple[Failure, ...] = tuple(failures)
        lines = "\n".join(f"  {failure}" for failure in self.failures)
        super().__init__(f"{len(self.failures)} check(s) failed for policy {policy!r}:\n{lines}")


@dataclass(frozen=True)
class PlanReport:
    """What `check_plan` verified (it raises `PlanCheckError` instead when a check fails)."""

    policy: str
    """The canonical policy name."""
    termination: str
    """The response's termination, e.g. "optimal"."""
    objective: float | None
    """The certificate's objective."""
    recomputed_objective: float | None
    """The objective recomputed from the plan; None when the policy declares no definition
    (`Capabilities.objective`) or the plan has none (see `not_checked`)."""
    checked: tuple[str, ...]
    """The checks that ran and passed."""
    not_checked: tuple[str, ...] = field(default_factory=tuple)
    """What could not be checked, and why."""


def check_plan(
    request: RequestLike,
    response: service_pb.SolveResponse | Solution,
    *,
    feasibility_tolerance: float = FEASIBILITY_TOLERANCE,
    objective_tolerance: float = OBJECTIVE_TOLERANCE,
) -> PlanReport:
    """Verify `response` (a `SolveResponse` or an `apportion.Solution`) as an answer to
    `request` (anything `apportion.solve` accepts). Raises `PlanCheckError` listing every
    failed check, `apportion.ValidationError` when the request is invalid; returns a
    `PlanReport` saying what was checked."""
    message = as_request(request)
    answer = response.response if isinstance(response, Solution) else response
    problem, policy, options = request_to_model(message)
    spec = lookup(policy.name)
    shape: list[tuple[str, str]] = []
    answer = expand_columns(answer, problem, shape)  # a columnar plan as its JobAllocations
    if shape:
        raise PlanCheckError(spec.name, [Failure(path, text) for path, text in shape])
    checker = _Checker(problem, policy, options, spec, answer, feasibility_tolerance,
                       objective_tolerance)
    return checker.run()


_TERMINATION_NAMES = {
    value: name.removeprefix("TERMINATION_REASON_").lower()
    for name, value in service_pb.TerminationReason.items()
}


class _Checker:
    def __init__(
        self,
        problem: Problem,
        policy: PolicyRequest,
        options: SolveOptions,
        spec: PolicySpec,
        response: service_pb.SolveResponse,
        feasibility_tolerance: float,
        objective_tolerance: float,
    ) -> None:
        self.problem = problem
        self.policy = policy
        self.options = options
        self.spec = spec
        self.response = response
        self.stats = response.stats
        self.tol = feasibility_tolerance
        self.obj_tol = objective_tolerance
        self.failures: list[Failure] = []
        self.checked: list[str] = []
        self.not_checked: list[str] = []
        self.recomputed: float | None = None
        cluster = problem.cluster
        self.W = cluster.count.astype(np.float64)
        self.type_index = {name: j for j, name in enumerate(cluster.type_names)}
        self.job_index = {job_id: i for i, job_id in enumerate(problem.jobs.ids)}
        self.node_index = {name: k for k, name in enumerate(cluster.node_names)}
        self.maximize = maximizes(spec.capabilities.objective, policy, spec.maximize)

    # ------------------------------------------------------------------ driver

    def fail(self, path: str, message: str) -> None:
        self.failures.append(Failure(path, message))

    def section(self, name: str, check: Any, *args: Any) -> None:
        """Run one group of checks; it counts as checked when it added no failure."""
        before = len(self.failures)
        check(*args)
        if len(self.failures) == before:
            self.checked.append(name)

    def run(self) -> PlanReport:
        stats = self.stats
        termination = _TERMINATION_NAMES.get(stats.termination, str(stats.termination))
        self.section("policy and sense", self.check_header)
        self.section("certificate", self.check_certificate)
        if stats.termination in WITH_PLAN:
            plan_failures: list[tuple[str, str]] = []
            view = read_plan(self.response, self.problem, plan_failures)
            for path, text in plan_failures:
                self.fail(path, text)
            if view is not None:
                self.check_plan_sections(view)
                self.check_objective(view)
                self.check_throughput_objective(view)
        else:
            self.section("no plan without a feasible answer", self.check_no_plan)
        if self.failures:
            raise PlanCheckError(self.spec.name, self.failures)
        objective = stats.objective if stats.HasField("objective") else None
        return PlanReport(self.spec.name, termination, objective, self.recomputed,
                          tuple(self.checked), tuple(self.not_checked))

    def check_plan_sections(self, view: PlanView) -> None:
        kind = self.spec.capabilities.plan_kind
        self.section("time shares in [0, 1], rows summing to at most 1", self.check_shares, view)
        if self.policy.compat is Compat.GAVEL:
            self.not_checked.append("usable cells: compat gavel allows any cell (A1.2)")
        else:
            self.section("only usable cells", self.check_usable, view)
        self.section("capacity of every type (pairs hold devices once)", self.check_capacity,
                     view)
        if view.pairs:
            self.section("pairs sharing devices", self.check_pairs, view)
        if view.groups:
            self.section("groups sharing devices", self.check_groups, view)
        if kind in (PlanKind.TIME_SHARE, PlanKind.MARKET):
            self.section("effective throughput = throughput x time share",
                         self.check_throughput, view)
        if self.response.plan.rounds:
            self.section("rounds: gangs, capacity, one grant per job", self.check_rounds, view)
        if self.response.plan.device_queues or kind is PlanKind.QUEUE:
            self.section("device queues and predicted times", self.check_queues, view)
        if kind is PlanKind.CONFIGURATION:
            self.section("configurations and their placement", self.check_configurations, view)
        if kind is PlanKind.MARKET:
            self.section("prices and spending", self.check_market, view)
        if any(entry.HasField("lease") for entry in self.response.plan.jobs):
            self.section("leases", self.check_leases)
        if self.response.plan.user_shares or self.response.plan.trades:
            self.section("user shares and trades", self.check_user_shares)

    # ------------------------------------------------------------------ header and certificate

    def check_header(self) -> None:
        if self.stats.policy != self.spec.name:
            self.fail("stats.policy", f"is {self.stats.policy!r}, the request's policy is "
                                      f"{self.spec.name!r}")
        if self.stats.maximize != self.maximize:
            self.fail("stats.maximize", f"is {self.stats.maximize}, the policy "
                      f"{'maximizes' if self.maximize else 'minimizes'}")

    def tolerance(self) -> float:
        """The gap within which the plan may be called optimal."""
        return self.options.relative_gap or self.spec.capabilities.default_relative_gap

    def check_certificate(self) -> None:
        stats = self.stats
        objective = stats.objective if stats.HasField("objective") else None
        bound = stats.best_bound if stats.HasField("best_bound") else None
        optimal = stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
        if optimal and (objective is None or bound is None):
            self.fail("stats", "an optimal plan needs an objective and a proven bound")
        for name, value in (("objective", objective), ("best_bound", bound)):
            if value is not None and not math.isfinite(value) and optimal:
                self.fail(f"stats.{name}", f"is {value} in an optimal plan")
        if objective is None or bound is None:
            if stats.HasField("relative_gap"):
                self.fail("stats.relative_gap", "is set without both an objective and a bound")
            return
        if not (math.isfinite(objective) and math.isfinite(bound)):
            return
        slack = self.obj_tol * max(abs(objective), abs(bound), 1.0)
        if self.maximize and objective > bound + slack:
            self.fail("stats.best_bound", f"{bound!r} is below the objective {objective!r} "
                      "of a maximization: not a bound")
        if not self.maximize and objective < bound - slack:
            self.fail("stats.best_bound", f"{bound!r} is above the objective {objective!r} "
                      "of a minimization: not a bound")
        if not stats.HasField("relative_gap"):
            self.fail("stats.relative_gap", "is missing although objective and bound are set")
            return
        gap = stats.relative_gap
        widest = abs(objective - bound) / max(abs(objective), abs(bound), 1e-12)
        if not (0 <= gap <= widest * (1 + 1e-9) + 1e-15):
            self.fail("stats.relative_gap", f"{gap!r} is not |objective - bound| over a scale "
                      f"at least max(|objective|, |bound|) (that gives {widest!r})")
        tolerance = self.tolerance()
        if optimal and gap > tolerance * (1 + 1e-9):
            self.fail("stats.termination", f"optimal with a gap of {gap:.3g}, above the "
                      f"tolerance {tolerance:.3g}")

    def check_no_plan(self) -> None:
        if self.response.plan.jobs:
            name = _TERMINATION_NAMES.get(self.stats.termination, "?")
            self.fail("plan.jobs", f"a plan is given with termination {name}")

    # ------------------------------------------------------------------ time shares

    def slack(self, size: float | np.ndarray) -> Any:
        return self.tol * np.maximum(1.0, np.abs(size))

    def check_shares(self, view: PlanView) -> None:
        share = view.time_share
        names = self.problem.cluster.type_names
        # an uncapped market lets a job hold several gangs: shares above 1, no time budget
        budget = math.inf if getattr(self.policy.parameters, "uncapped", False) else 1.0
        bad = ~np.isfinite(share) | (share < -self.tol) | (share > budget + self.tol)
        for i, j in zip(*np.nonzero(bad), strict=True):
            self.fail(f'plan.jobs[{i}].time_share["{names[j]}"]',
                      f"{float(share[i, j])!r} is not a fraction of time in [0, {budget:g}]")
        rows = share.sum(axis=1)
        for i in np.flatnonzero(rows > budget + self.tol):
            self.fail(f"plan.jobs[{i}].time_share", f"sums to {float(rows[i])!r} > 1")

    def check_usable(self, view: PlanView) -> None:
        share = view.time_share
        kind = self.spec.capabilities.plan_kind
        fits = view.devices[:, None] <= self.W[None, :]
        reference = str(getattr(self.policy.parameters, "reference_type", "") or "")
        rates = policy_throughput(self.problem, reference)  # agnostic variants: a copied column
        own_devices = kind is PlanKind.CONFIGURATION or bool(view.groups)
        usable = fits if own_devices else fits & (rates > 0)  # own goodput or resource models
        names = self.problem.cluster.type_names
        for i, j in zip(*np.nonzero((share > self.tol) & ~usable), strict=True):
            why = ("the gang does not fit the type" if not fits[i, j]
                   else "the job has no throughput there")
            self.fail(f'plan.jobs[{i}].time_share["{names[j]}"]',
                      f"{float(share[i, j])!r} on a cell the job cannot use: {why}")

    def check_capacity(self, view: PlanView) -> None:
        grouped = np.zeros(self.problem.jobs.num_jobs, dtype=bool)
        use = np.zeros(self.problem.cluster.num_types)
        for group in view.groups:  # a group holds its devices once
            grouped[list(group.members)] = True
            use[group.type_index] += group.devices
        use += view.devices[~grouped].astype(np.float64) @ view.time_share[~grouped]
        for pair in view.pairs:
            use[pair.type_index] -= self.problem.jobs.scale_factor[pair.a] * pair.share
        names = self.problem.cluster.type_names
        for j in np.flatnonzero(use > self.W + self.slack(self.W)):
            self.fail(f'plan (type "{names[j]}")',
                      f"uses {float(use[j])!r} devices on average, the type has {int(self.W[j])}")

    def check_pairs(self, view: PlanView) -> None:
        jobs = self.problem.jobs
        shared = np.zeros_like(view.time_share)
        for pair in view.pairs:
            a, b, j = pair.a, pair.b, pair.type_index
            if a == b:
                self.fail(pair.path, "pairs a job with itself")
                continue
            if jobs.scale_factor[a] != jobs.scale_factor[b]:
                self.fail(pair.path, "pairs jobs of different scale factors")
            if not (-self.tol <= pair.share <= 1 + self.tol):
                self.fail(pair.path, f"time_share {pair.share!r} is not in [0, 1]")
            if pair.share > self.tol and pair_throughput(self.problem, a, b, j) == (0.0, 0.0):
                self.fail(pair.path, "the snapshot gives this pair no throughput on the type")
            shared[a, j] += pair.share
            shared[b, j] += pair.share
        over = shared > view.time_share + self.tol
        for i, j in zip(*np.nonzero(over), strict=True):
            self.fail(f"plan.jobs[{i}].time_share",
                      f"the job's shared time on type {j} ({float(shared[i, j])!r}) exceeds its "
                      f"time share there ({float(view.time_share[i, j])!r})")

    def check_groups(self, view: PlanView) -> None:
        cluster = self.problem.cluster
        entries = list(self.response.plan.jobs)
        seen: dict[int, int] = {}
        for k, (group, message) in enumerate(zip(view.groups, self.response.plan.groups,
                                                   strict=True)):
            j = group.type_index
            if not 1 <= group.devices <= cluster.count[j]:
                self.fail(f"{group.path}.devices", f"{group.devices} devices of a type with "
                          f"{int(cluster.count[j])}")
            if len(set(group.members)) != len(group.members) or not group.members:
                self.fail(f"{group.path}.job_ids", "must name distinct jobs")
            if len(message.slowdown) not in (0, len(group.members)):
                self.fail(f"{group.path}.slowdown", "needs one value per member")
            for i in group.members:
                if i in seen:
                    self.fail(group.path, f"job {self.problem.jobs.ids[i]!r} is also in "
                              f"plan.groups[{seen[i]}]")
                seen[i] = k
                row = view.time_share[i]
                if abs(row[j] - 1.0) > self.tol or row.sum() > 1 + self.tol:
                    self.fail(f"plan.jobs[{i}].time_share",
                              "a group member must have time share 1 on its group's type")
                if entries[i].HasField("group") and entries[i].group != k:
                    self.fail(f"plan.jobs[{i}].group", f"is {entries[i].group}, the job is in "
                              f"group {k}")
            if message.node_devices:
                total = 0
                for name, count in message.node_devices.items():
                    nid = self.node_index.get(name)
                    if nid is None or cluster.node_type[nid] != j or count > \
                            cluster.node_devices[nid]:
                        self.fail(f'{group.path}.node_devices["{name}"]',
                                  "is not a node of the type with that many devices")
                    total += count
                if total != group.devices:
                    self.fail(f"{group.path}.node_devices", f"places {total} devices, the "
                              f"group has {group.devices}")

    def check_throughput(self, view: PlanView) -> None:
        from apportion.testing.plan_view import throughput_under

        expected = throughput_under(self.problem, view, self.problem.jobs.throughput)
        got = view.effective_throughput
        wrong = np.abs(got - expected) > 1e-7 * np.maximum(1.0, np.abs(expected))
        for i in np.flatnonzero(wrong):
            self.fail(f"plan.jobs[{i}].effective_throughput",
                      f"{float(got[i])!r}, the time shares give {float(expected[i])!r}")

    # ------------------------------------------------------------------ rounds

    def check_rounds(self, view: PlanView) -> None:
        jobs = self.problem.jobs
        cluster = self.problem.cluster
        kind = self.spec.capabilities.plan_kind
        for r, scheduled in enumerate(self.response.plan.rounds):
            path = f"plan.rounds[{r}]"
            seen: dict[int, int] = {}
            partner: dict[int, tuple[int, int, int]] = {}
            used = np.zeros(cluster.num_types)
            for g, grant in enumerate(scheduled.grants):
                gp = f"{path}.grants[{g}]"
                i = self.job_index.get(grant.job_id)
                j = self.type_index.get(grant.accelerator_type)
                if i is None or j is None:
                    self.fail(gp, "names an unknown job or accelerator type")
                    continue
                if i in seen:
                    self.fail(gp, f"job {grant.job_id!r} is granted twice in the round")
                seen[i] = g
                if grant.devices != view.devices[i]:
                    self.fail(f"{gp}.devices", f"{grant.devices}, the job's gang is "
                              f"{view.devices[i]}")
                if grant.devices > cluster.count[j]:
                    self.fail(f"{gp}.devices", "more than the type has")
                for k, node in enumerate(grant.nodes):
                    nid = self.node_index.get(node)
                    if nid is None or cluster.node_type[nid] != j:
                        self.fail(f"{gp}.nodes[{k}]", f"{node!r} is not a node of the type")
                first_or_share = kind is PlanKind.TIME_SHARE or r == 0
                if first_or_share and view.time_share[i, j] <= 0:
                    self.fail(gp, f"grants a type on which job {grant.job_id!r} has no "
                              "time share")
                if grant.colocated_with:
                    other = self.job_index.get(grant.colocated_with)
                    if other is None:
                        self.fail(f"{gp}.colocated_with", "unknown job")
                        continue
                    partner[i] = (other, j, grant.devices)
                    if other < i and partner.get(other, (-1,))[0] == i:
                        continue  # the pair's devices are counted once, with its first grant
                used[j] += grant.devices
            for i, (other, j, devices) in partner.items():
                if partner.get(other) != (i, j, devices):
                    self.fail(path, f"job {jobs.ids[i]!r} shares devices with "
                              f"{jobs.ids[other]!r}, whose grant does not match")
            for t in np.flatnonzero(used > cluster.count):
                self.fail(path, f"grants {int(used[t])} devices of type "
                          f"{cluster.type_names[t]!r}, which has {int(cluster.count[t])}")

    # ------------------------------------------------------------------ queues

    def check_queues(self, view: PlanView) -> None:
        del view
        problem, jobs = self.problem, self.problem.jobs
        entries = list(self.response.plan.jobs)
        placed: Counter[int] = Counter()
        time_s = problem.time_s
        for q, queue in enumerate(self.response.plan.device_queues):
            path = f"plan.device_queues[{q}]"
            j = self.type_index.get(queue.accelerator_type)
            if j is None or not 0 <= queue.device < problem.cluster.count[j]:
                self.fail(path, "names a device that the cluster does not have")
                continue
            if queue.running_job_id:
                holder = self.job_index.get(queue.running_job_id)
                if holder is None or not entries[holder].queue.running:
                    self.fail(f"{path}.running_job_id", "is not a running job of the plan")
            start = queue.free_at_s
            for k, job_id in enumerate(queue.job_ids):
                i = self.job_index.get(job_id)
                if i is None:
                    self.fail(f"{path}.job_ids[{k}]", "unknown job")
                    continue
                placed[i] += 1
                place = entries[i].queue
                jp = f"plan.jobs[{i}].queue"
                if (place.accelerator_type != queue.accelerator_type
                        or list(place.devices) != [queue.device] or place.position != k + 1):
                    self.fail(jp, f"does not say device {queue.device} of "
                              f"{queue.accelerator_type!r}, position {k + 1}")
                rate = jobs.throughput[i, j]
                remaining = max(float(jobs.remaining_steps[i]), 0.0)
                finish = start + (remaining / rate if rate > 0 else math.inf)
                if not _close(place.start_time_s, start) or not _close(
                        place.completion_time_s, finish):
                    self.fail(jp, f"runs {place.start_time_s!r}-{place.completion_time_s!r}, "
                              f"the queue gives {start!r}-{finish!r}")
                starts_now = k == 0 and queue.free_at_s <= time_s + 1e-9
                if place.start_now != starts_now:
                    self.fail(f"{jp}.start_now", f"is {place.start_now}, expected {starts_now}")
                start = finish
        for i, entry in enumerate(entries):
            queued = entry.HasField("queue") and entry.queue.position >= 1
            if queued and placed[i] != 1:
                self.fail(f"plan.jobs[{i}].queue", f"appears in {placed[i]} device queues")
            elif not queued and placed[i]:
                self.fail(f"plan.jobs[{i}].queue", "is queued on a device but says it is not")

    # ------------------------------------------------------------------ configurations

    def check_configurations(self, view: PlanView) -> None:
        problem, jobs, cluster = self.problem, self.problem.jobs, self.problem.cluster
        per_type = np.zeros(cluster.num_types)
        per_node = np.zeros(len(cluster.node_names))
        for i, entry in enumerate(self.response.plan.jobs):
            if not entry.HasField("configuration"):
                if view.time_share[i].sum() > self.tol:
                    self.fail(f"plan.jobs[{i}].time_share", "is set without a configuration")
                continue
            chosen = entry.configuration
            path = f"plan.jobs[{i}].configuration"
            j = self.type_index.get(chosen.accelerator_type)
            if j is None:
                self.fail(f"{path}.accelerator_type", "unknown accelerator type")
                continue
            if not 1 <= chosen.nodes <= chosen.devices:
                self.fail(path, f"{chosen.devices} devices on {chosen.nodes} nodes")
            per_type[j] += chosen.devices
            low = int(jobs.min_devices[i]) if jobs.min_devices.size else 1
            high = int(jobs.max_devices[i]) if jobs.max_devices.size else 0
            if chosen.devices < max(low, 1) or (high and chosen.devices > high):
                self.fail(f"{path}.devices", f"{chosen.devices} is outside the job's "
                          f"elasticity [{low}, {high or 'no limit'}]")
            row = view.time_share[i]
            if abs(row[j] - 1.0) > self.tol or row.sum() > 1 + self.tol:
                self.fail(f"plan.jobs[{i}].time_share", "must be 1 on the configuration's type")
            if chosen.unchanged:
                hist = problem.history
                running = hist.current_type.size and hist.current_type[i] == j
                if not running or hist.current_devices[i] != chosen.devices:
                    self.fail(f"{path}.unchanged", "the job does not run this configuration now")
            if chosen.placed and chosen.node_devices:
                total = 0
                for name, devices in chosen.node_devices.items():
                    k = self.node_index.get(name)
                    if k is None or cluster.node_type[k] != j:
                        self.fail(f'{path}.node_devices["{name}"]', "is not a node of the type")
                        continue
                    per_node[k] += devices
                    total += devices
                if total != chosen.devices or len(chosen.node_devices) != chosen.nodes:
                    self.fail(f"{path}.node_devices", f"places {total} devices on "
                              f"{len(chosen.node_devices)} nodes, the configuration has "
                              f"{chosen.devices} on {chosen.nodes}")
        for t in np.flatnonzero(per_type > cluster.count):
            self.fail("plan.jobs[].configuration", f"{int(per_type[t])} devices of type "
                      f"{cluster.type_names[t]!r}, which has {int(cluster.count[t])}")
        for v in np.flatnonzero(per_node > cluster.node_devices):
            self.fail("plan.jobs[].configuration.node_devices",
                      f"node {cluster.node_names[v]!r} holds {int(cluster.node_devices[v])} "
                      f"devices, {int(per_node[v])} are placed on it")

    # ------------------------------------------------------------------ market

    def check_market(self, view: PlanView) -> None:
        jobs = self.problem.jobs
        prices = view.prices
        for j in np.flatnonzero(~np.isfinite(prices) | (prices < -self.tol)):
            name = self.problem.cluster.type_names[j]
            self.fail(f'plan.accelerator_prices["{name}"]', f"{float(prices[j])!r} is not a price")
        by_weight = str(getattr(self.policy.parameters, "budgets", "equal")) == "priority_weight"
        budget = jobs.priority_weight if by_weight else np.ones(jobs.num_jobs)
        spent = jobs.scale_factor * (view.time_share @ prices)
        scale = max(1.0, float(budget.sum()))
        for i, entry in enumerate(self.response.plan.jobs):
            if not entry.HasField("spending"):
                continue
            if abs(entry.spending - spent[i]) > 1e-6 * max(scale, abs(spent[i])):
                self.fail(f"plan.jobs[{i}].spending", f"{entry.spending!r}, the prices and "
                          f"time shares give {float(spent[i])!r}")
            if entry.spending > budget[i] + 10 * self.obj_tol * scale:
                self.fail(f"plan.jobs[{i}].spending", f"{entry.spending!r} is over the budget "
                          f"{float(budget[i])!r}")
        if self.stats.termination == service_pb.TERMINATION_REASON_OPTIMAL:
            idle = self.W - jobs.scale_factor @ view.time_share
            waste = prices * np.maximum(idle, 0.0)
            for t in np.flatnonzero(waste > self.obj_tol * scale * 10):
                name = self.problem.cluster.type_names[t]
                self.fail(f'plan.accelerator_prices["{name}"]', f"{float(prices[t])!r} > 0 "
                          f"although {float(idle[t])!r} devices stay idle (the market does not "
                          "clear)")

    # ------------------------------------------------------------------ leases and users

    def check_leases(self) -> None:
        problem, cluster = self.problem, self.problem.cluster
        held = np.zeros(cluster.num_types)
        fairness = problem.fairness
        for i, entry in enumerate(self.response.plan.jobs):
            if not entry.HasField("lease"):
                continue
            lease, path = entry.lease, f"plan.jobs[{i}].lease"
            j = self.type_index.get(lease.accelerator_type)
            if j is None:
                self.fail(f"{path}.accelerator_type", "unknown accelerator type")
                continue
            if lease.devices != problem.jobs.scale_factor[i]:
                self.fail(f"{path}.devices", f"{lease.devices}, the job's gang is "
                          f"{problem.jobs.scale_factor[i]}")
            held[j] += lease.devices
            if not 0 < lease.time_share <= 1 + self.tol:
                self.fail(f"{path}.time_share", f"{lease.time_share!r} is not in (0, 1]")
            if lease.expires_s < problem.time_s - 1e-9:
                self.fail(f"{path}.expires_s", "the lease ended before the snapshot's time")
            for k, node in enumerate(lease.nodes):
                nid = self.node_index.get(node)
                if nid is None or cluster.node_type[nid] != j:
                    self.fail(f"{path}.nodes[{k}]", f"{node!r} is not a node of the type")
            if lease.kept:
                expires = fairness.lease_expires_s[i] if fairness is not None else math.nan
                if not expires > problem.time_s:
                    self.fail(f"{path}.kept", "the history gives the job no unexpired lease")
        for t in np.flatnonzero(held > cluster.count):
            self.fail("plan.jobs[].lease", f"{int(held[t])} devices of type "
                      f"{cluster.type_names[t]!r} are leased, it has {int(cluster.count[t])}")

    def check_user_shares(self) -> None:
        plan = self.response.plan
        cluster = self.problem.cluster
        users = {user.user for user in plan.user_shares}
        totals: dict[str, np.ndarray] = {"fair_share": np.zeros(cluster.num_types),
                                          "traded_share": np.zeros(cluster.num_types)}
        for u, user in enumerate(plan.user_shares):
            path = f"plan.user_shares[{u}]"
            for name, total in totals.items():
                shares: Mapping[str, float] = getattr(user, name)
                for type_name, value in shares.items():
                    j = self.type_index.get(type_name)
                    if j is None or value < -self.tol:
                        self.fail(f'{path}.{name}["{type_name}"]', "unknown type or negative")
                    else:
                        total[j] += value
            before, after = user.throughput_before, user.throughput_after
            if after < before - self.tol * max(1.0, abs(before)):
                self.fail(f"{path}.throughput_after", f"{after!r} is below its throughput "
                          f"before trading {before!r}: the trades are not individually rational")
        for name, total in totals.items():
            for t in np.flatnonzero(total > self.W + self.slack(self.W)):
                self.fail(f"plan.user_shares[].{name}", f"{float(total[t])!r} devices of type "
                          f"{cluster.type_names[t]!r}, which has {int(self.W[t])}")
        for k, trade in enumerate(plan.trades):
            known = (trade.buyer in users and trade.seller in users
                     and trade.fast_type in self.type_index and trade.slow_type in self.type_index)
            if not known or trade.fast_devices < 0 or not trade.price > 0:
                self.fail(f"plan.trades[{k}]", "unknown user or type, or a negative amount")

    # ------------------------------------------------------------------ objective

    def check_objective(self, view: PlanView) -> None:
        objective = self.spec.capabilities.objective
        stats = self.stats
        if objective is None:
            self.not_checked.append("objective value: the policy declares no definition")
            return
        if not stats.HasField("objective"):
            self.not_checked.append("objective value: the response reports none")
            return
        try:
            value = recompute(objective, self.problem, self.policy, self.response, view)
        except NotDefined as exc:
            self.not_checked.append(f"objective value: {exc}")
            return
        self.recomputed = value
        reported = stats.objective
        if abs(value - reported) > self.obj_tol * max(abs(value), abs(reported), 1.0):
            self.fail("stats.objective", f"{reported!r}, but the plan's {objective.value} is "
                      f"{value!r}")
        else:
            self.checked.append(f"objective recomputed from the plan ({objective.value})")

    def check_throughput_objective(self, view: PlanView) -> None:
        """`stats.throughput_objective` (the objective in steps/s) recomputed from the plan, and
        its bound the certificate's bound moved by the same constant."""
        stats = self.stats
        if not stats.HasField("throughput_objective"):
            if stats.HasField("throughput_best_bound"):
                self.fail("stats.throughput_best_bound", "is set without throughput_objective")
            return
        objective = self.spec.capabilities.objective
        if objective is not Objective.LOG_WELFARE:
            self.fail("stats.throughput_objective", f"is set, but the policy's objective "
                      f"({objective.value if objective else 'none'}) has no steps/s form")
            return
        try:
            value = log_welfare_in_steps(self.problem, self.policy, view)
        except NotDefined as exc:
            self.not_checked.append(f"objective in steps/s: {exc}")
            return
        reported = stats.throughput_objective
        before = len(self.failures)
        if abs(value - reported) > self.obj_tol * max(abs(value), abs(reported), 1.0):
            self.fail("stats.throughput_objective", f"{reported!r}, but the plan's objective "
                      f"in steps/s is {value!r}")
        if stats.HasField("throughput_best_bound") != stats.HasField("best_bound"):
            self.fail("stats.throughput_best_bound", "set where best_bound is not, or not set "
                      "where it is")
        elif stats.HasField("best_bound") and stats.HasField("objective"):
            shift = stats.best_bound - stats.objective
            moved = stats.throughput_best_bound - reported
            if abs(moved - shift) > self.obj_tol * max(abs(shift), abs(reported), 1.0):
                self.fail("stats.throughput_best_bound", f"is {moved!r} from throughput_objective"
                          f", best_bound is {shift!r} from objective (the same shift)")
        if len(self.failures) == before:
            self.checked.append("objective in steps/s recomputed from the plan")


def _close(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b)) + 1e-6
