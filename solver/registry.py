"""The policy registry: name, aliases, parameter type, required inputs, description.

The CLI, the server and `ListPolicies` all read it. Importing this module is cheap: the
formulation behind a policy is imported only when it is solved.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

from apportion.solver import parameters as _params
from apportion.solver.capabilities import (
    Capabilities,
    Objective,
    PlanKind,
    ProblemClass,
    Quantity,
    Reporting,
)
from apportion.solver.deadline import Deadline
from apportion.solver.errors import ValidationError, Violation
from apportion.solver.model import Compat, Problem, SolveOptions
from apportion.solver.parameters import (
    AlloxParameters,
    CostThroughputParameters,
    FinishTimeFairnessParameters,
    MaxMinFairnessParameters,
    MaxSumThroughputParameters,
    MinMakespanParameters,
    NoParameters,
    TiresiasParameters,
    WaterFillingParameters,
)
from apportion.solver.result import Plan

SolveFunction = Callable[[Problem, Any, Compat, SolveOptions, Deadline], Plan]
"""(problem, parameters, compat, options, deadline) -> plan. `parameters` is an instance of the
policy's `parameters_type` (checked by `solve()`), `options.relative_gap` is resolved, and the
formulation must answer by `deadline` (solver limits from `deadline.solver_limit_s()`, loops
checking `deadline.expired()`)."""

ROUND_SCHEDULE_ENTRY = "apportion.formulations.rounds:round_schedule"
"""The round mechanism (A2.11) applied to time-share plans when `options.schedule_rounds > 0`
(policies with `Capabilities.round_schedule`)."""


PLACEMENT_STAGE_ENTRY = "apportion.formulations.placement.stage:apply_placement"
"""The placement stage (which devices) applied after the policy when `policy.placement` is
set (policies with `Capabilities.placement_stage`)."""

ADMISSION_STAGE_ENTRY = "apportion.formulations.placement.admission:admit_and_solve"
"""The admission stage applied around the policy when `policy.admission` is set."""


def load_entry(entry_point: str) -> Any:
    """The object named by a "module:attribute" entry point, imported on first use."""
    module_name, _, attribute = entry_point.partition(":")
    return getattr(importlib.import_module(module_name), attribute)

InputCheck = Callable[[Any], list[Violation]]
"""(request context, `apportion.server.request_context.RequestContext`) -> the violations of
what the policy needs beyond the general snapshot rules and its capabilities."""


@dataclass(frozen=True)
class PolicySpec:
    name: str
    """Canonical name."""
    description: str
    parameters_type: type
    """Dataclass of the parameters (NoParameters when none)."""
    parameters_message: str
    """Full proto name of the parameter message, "" when none."""
    parameters_field: str
    """Name of the `Policy.parameters` oneof field carrying them, "" when none."""
    required_inputs: tuple[str, ...]
    maximize: bool
    entry_point: str
    """"module:function" implementing SolveFunction, imported lazily."""
    capabilities: Capabilities
    """What the policy reads and what its plan holds (`apportion.solver.capabilities`)."""
    reporting: Reporting
    """How its objective and each job's value read (names and units for tables, clients)."""
    aliases: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    """Alias name -> parameter values the alias forces."""
    input_check: str = ""
    """"module:function" implementing InputCheck, imported lazily (it lives with the wire
    conversion, which `solver` does not import); "" = none beyond the general rules."""

    score_entry_point: str = ""
    """"module:function" evaluating a time share X on the whole problem, (problem,
    parameters, compat, X) -> `TimeShareScore`; set on partitionable policies (POP reports
    the partitioned plan with the whole problem's normalizers)."""

    packed_entry_point: str = ""
    """"module:function" solving the policy with space sharing (pairs of jobs sharing devices),
    used when the parameters set `space_sharing` and the snapshot has pair throughputs; "" =
    the policy has no space-sharing form."""

    def load(self, problem: Problem | None = None, parameters: object = None) -> SolveFunction:
        """The function that solves `problem` with `parameters`: the space-sharing entry point
        when they ask for space sharing and the snapshot has co-location data and jobs."""
        entry = self.entry_point
        if (
            self.packed_entry_point
            and problem is not None
            and getattr(parameters, "space_sharing", False)
            and problem.colocations is not None
            and problem.jobs.num_jobs > 0
        ):
            entry = self.packed_entry_point
        function: SolveFunction = load_entry(entry)
        return function

    def load_input_check(self) -> InputCheck | None:
        """The policy's input check, None when it declares none."""
        if not self.input_check:
            return None
        check: InputCheck = load_entry(self.input_check)
        return check


_POLICIES: tuple[PolicySpec, ...] = (
    PolicySpec(
        name="weighted_max_min_fairness",
        description=(
            "Heterogeneity-aware max-min fairness of normalized throughput with priority weights "
            "and scale factors (Gavel's LAS, A2.1, docs/policies/gavel.md): maximize the smallest "
            "level s_i/w_i * throughput_i(X)/proportional_share_i. Exact LP optimum with a dual "
            "certificate."
        ),
        reporting=Reporting(Quantity("smallest level"), Quantity("level")),
        parameters_type=MaxMinFairnessParameters,
        parameters_message="apportion.v1.MaxMinFairnessParameters",
        parameters_field="max_min_fairness",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "jobs[].throughput",
            "jobs[].scale_factor",
            "jobs[].priority_weight",
            "colocations[] or type_colocations[] with jobs[].job_type (space_sharing)",
        ),
        maximize=True,
        entry_point="apportion.formulations.max_min_fairness:solve_policy",
        score_entry_point="apportion.formulations.time_share_scores:score_max_min",
        packed_entry_point="apportion.formulations.space_sharing:solve_packed",
        capabilities=Capabilities(
            PlanKind.TIME_SHARE,
            ProblemClass.LP,
            uses_colocations=True,
            round_schedule=True,
            partitionable=True,
            objective=Objective.MIN_LEVEL,
        ),
        aliases={
            "max_min_fairness_perf": {"heterogeneity_agnostic": False},
            "max_min_fairness": {"heterogeneity_agnostic": True},
            "las": {"heterogeneity_agnostic": False},
            "max_min_fairness_packed": {"heterogeneity_agnostic": False, "space_sharing": True},
        },
    ),
    PolicySpec(
        name="hierarchical_max_min_fairness",
        description=(
            "Lexicographic (water-filling) max-min fairness of weighted normalized throughput "
            "with hierarchical tenants (A2.4, docs/policies/gavel.md): maximize the smallest "
            "level, freeze the jobs that cannot rise (identified by LP duals), raise the rest, "
            "until every job is frozen. Tenant weights from snapshot.tenants; within a tenant, "
            "weighted fairness or FIFO. Exact, with the freeze levels as certificate."
        ),
        reporting=Reporting(Quantity("smallest level"), Quantity("level")),
        parameters_type=WaterFillingParameters,
        parameters_message="apportion.v1.WaterFillingParameters",
        parameters_field="water_filling",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "jobs[].throughput",
            "jobs[].scale_factor",
            "jobs[].priority_weight",
            "jobs[].tenant",
            "tenants[]",
            "colocations[] or type_colocations[] with jobs[].job_type (space_sharing)",
        ),
        maximize=True,
        entry_point="apportion.formulations.water_filling:solve_policy",
        score_entry_point="apportion.formulations.time_share_scores:score_water_filling",
        packed_entry_point="apportion.formulations.packed_water_filling:solve_packed_water_filling",
        capabilities=Capabilities(
            PlanKind.TIME_SHARE,
            ProblemClass.LP,
            reads_tenants=True,
            uses_colocations=True,
            round_schedule=True,
            partitionable=True,
            objective=Objective.FIRST_ROUND_LEVEL,
        ),
        aliases={
            "max_min_fairness_water_filling_perf": {"heterogeneity_agnostic": False},
            "max_min_fairness_water_filling": {"heterogeneity_agnostic": True},
            "max_min_fairness_water_filling_packed": {
                "heterogeneity_agnostic": False,
                "space_sharing": True,
            },
        },
    ),
    PolicySpec(
        name="isolated",
        description=(
            "Gavel's isolated baseline (A1.3, docs/policies/common.md): a static 1/m share of "
            "every accelerator type, cells a job cannot use left idle. No optimization."
        ),
        reporting=Reporting(Quantity("smallest level"), Quantity("level")),
        parameters_type=NoParameters,
        parameters_message="",
        parameters_field="",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "jobs[].throughput",
            "jobs[].scale_factor",
        ),
        maximize=True,
        entry_point="apportion.formulations.isolated:solve_policy",
        capabilities=Capabilities(
            PlanKind.TIME_SHARE,
            ProblemClass.HEURISTIC,
            round_schedule=True,
            objective=Objective.MIN_NORMALIZED_THROUGHPUT,
        ),
    ),
    PolicySpec(
        name="allox",
        description=(
            "AlloX (A3, docs/policies/allox.md): non-preemptive min-cost matching of pending jobs "
            "to (device, k-th-from-last position) slots, minimizing total job completion time "
            "sum (C_i - a_i); running jobs keep their devices until busy_until_s. Exact: a "
            "transportation LP over (device group, position) slots with a dual certificate. "
            "Outputs per-device queues, jobs to start now and predicted completion times."
        ),
        reporting=Reporting(
            Quantity("total completion time", "s"),
            Quantity("completion time", "s"),
        ),
        parameters_type=AlloxParameters,
        parameters_message="apportion.v1.AlloxParameters",
        parameters_field="allox",
        required_inputs=(
            "time_s",
            "cluster.accelerator_types[].count",
            "jobs[].throughput",
            "jobs[].arrival_time_s",
            "jobs[].progress.total_steps",
            "jobs[].progress.steps_done",
            "history.jobs[].current",
        ),
        maximize=False,
        entry_point="apportion.formulations.allox:solve_policy",
        capabilities=Capabilities(
            PlanKind.QUEUE,
            ProblemClass.LP,
            needs_remaining_work=True,
            needs_history=True,
            relative_gap=1e-9,
            objective=Objective.TOTAL_FLOW_TIME,
        ),
        # Gavel registers it under the same name, "allox" (alpha = 1 by default).
    ),
    PolicySpec(
        name="max_sum_throughput",
        description=(
            "Max-sum-throughput (A2.6, docs/policies/gavel.md): maximize the total (optionally "
            "proportional-share normalized) throughput sum_i thr_i(X). Exact LP with a dual "
            "certificate (capacity prices pi_j, job budgets sigma_i)."
        ),
        reporting=Reporting(
            Quantity("total throughput", "steps/s, or normalized"),
            Quantity("throughput term", "steps/s, or normalized"),
        ),
        parameters_type=MaxSumThroughputParameters,
        parameters_message="apportion.v1.MaxSumThroughputParameters",
        parameters_field="max_sum_throughput",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "jobs[].throughput",
            "jobs[].scale_factor",
            "colocations[] or type_colocations[] with jobs[].job_type (space_sharing)",
        ),
        maximize=True,
        entry_point="apportion.formulations.gavel_lp:solve_max_sum_throughput",
        score_entry_point="apportion.formulations.time_share_scores:score_max_sum",
        packed_entry_point="apportion.formulations.packed_gavel:solve_max_sum_throughput_packed",
        input_check="apportion.server.gavel_inputs:check_gavel_lp",
        capabilities=Capabilities(
            PlanKind.TIME_SHARE,
            ProblemClass.LP,
            uses_colocations=True,
            round_schedule=True,
            partitionable=True,
            objective=Objective.SUM_THROUGHPUT,
        ),
        aliases={"max_sum_throughput_perf": {}},
    ),
    PolicySpec(
        name="cost_normalized_throughput",
        description=(
            "Cost-normalized throughput (A2.7, docs/policies/gavel.md): maximize sum_ij "
            "throughput/cost_per_hour * X (steps/s per $/h), optionally with soft lexicographic "
            "SLO rows thr_i >= R_i/SLO_i (shortfall minimized first, unmet SLOs reported). "
            "Exact LP stages with a dual certificate of the last stage."
        ),
        reporting=Reporting(
            Quantity("throughput per cost", "steps/s per $/h"),
            Quantity("throughput per cost", "steps/s per $/h"),
        ),
        parameters_type=CostThroughputParameters,
        parameters_message="apportion.v1.CostThroughputParameters",
        parameters_field="cost_throughput",
        required_inputs=(
            "time_s",
            "cluster.accelerator_types[].count",
            "cluster.accelerator_types[].cost_per_hour",
            "jobs[].throughput",
            "jobs[].scale_factor",
            "jobs[].deadline_s (SLO rows)",
            "jobs[].progress (SLO rows)",
        ),
        maximize=True,
        entry_point="apportion.formulations.gavel_lp:solve_cost_throughput",
        score_entry_point="apportion.formulations.time_share_scores:score_cost",
        input_check="apportion.server.gavel_inputs:check_gavel_lp",
        capabilities=Capabilities(
            PlanKind.TIME_SHARE,
            ProblemClass.LP,
            round_schedule=True,
            partitionable=True,
            objective=Objective.COST_NORMALIZED_THROUGHPUT,
        ),
        aliases={
            "max_sum_throughput_normalized_by_cost_perf": {"use_slos": False},
            "max_sum_throughput_normalized_by_cost_perf_SLOs": {"use_slos": True},
        },
    ),
    PolicySpec(
        name="min_makespan",
        description=(
            "Minimum makespan (A2.8, docs/policies/gavel.md) as one LP in z = 1/makespan: a static "
            "allocation under which the last job finishes as early as possible. Objective: the "
            "makespan (s), bound from the LP dual."
        ),
        reporting=Reporting(Quantity("makespan", "s"), Quantity("finish time", "s")),
        parameters_type=MinMakespanParameters,
        parameters_message="apportion.v1.MinMakespanParameters",
        parameters_field="min_makespan",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "jobs[].throughput",
            "jobs[].scale_factor",
            "jobs[].progress",
            "colocations[] or type_colocations[] with jobs[].job_type (space_sharing)",
        ),
        maximize=False,
        entry_point="apportion.formulations.gavel_lp:solve_min_makespan",
        score_entry_point="apportion.formulations.time_share_scores:score_makespan",
        packed_entry_point="apportion.formulations.packed_gavel:solve_min_makespan_packed",
        input_check="apportion.server.gavel_inputs:check_gavel_lp",
        capabilities=Capabilities(
            PlanKind.TIME_SHARE,
            ProblemClass.LP,
            needs_remaining_work=True,
            uses_colocations=True,
            round_schedule=True,
            partitionable=True,
            objective=Objective.MAKESPAN,
        ),
        aliases={
            "min_total_duration_perf": {},
            "min_total_duration": {"reference_type": "v100"},
            "min_total_duration_packed": {"space_sharing": True},
        },
    ),
    PolicySpec(
        name="themis_finish_time_fairness",
        description=(
            "Finish-time fairness (Themis rho as Gavel defines it, A2.5, docs/policies/gavel.md): "
            "minimize the largest weighted rho_i = (t_i + R_i/thr_i)/(C_i + R_i/iso_i). Exact "
            "via z-LPs whose duals prove the lower bound; returns the updated state C_i."
        ),
        reporting=Reporting(Quantity("largest rho"), Quantity("rho")),
        parameters_type=FinishTimeFairnessParameters,
        parameters_message="apportion.v1.FinishTimeFairnessParameters",
        parameters_field="finish_time_fairness",
        required_inputs=(
            "time_s",
            "cluster.accelerator_types[].count",
            "jobs[].throughput",
            "jobs[].scale_factor",
            "jobs[].priority_weight",
            "jobs[].arrival_time_s",
            "jobs[].progress",
            "history.jobs[].cumulative_isolated_time_s",
            "colocations[] or type_colocations[] with jobs[].job_type (space_sharing)",
        ),
        maximize=False,
        entry_point="apportion.formulations.gavel_lp:solve_finish_time_fairness",
        score_entry_point="apportion.formulations.time_share_scores:score_finish_time_fairness",
        packed_entry_point="apportion.formulations.packed_gavel:solve_finish_time_fairness_packed",
        input_check="apportion.server.gavel_inputs:check_gavel_lp",
        capabilities=Capabilities(
            PlanKind.TIME_SHARE,
            ProblemClass.LP,
            needs_remaining_work=True,
            needs_history=True,
            uses_colocations=True,
            round_schedule=True,
            partitionable=True,
            objective=Objective.MAX_FINISH_TIME_RATIO,
        ),
        aliases={
            "finish_time_fairness_perf": {},
            "finish_time_fairness": {"reference_type": "v100"},
            "finish_time_fairness_packed": {"space_sharing": True},
        },
    ),
    PolicySpec(
        name="fifo",
        description=(
            "Gavel's FIFO baseline (A2.10, docs/policies/gavel.md): running jobs keep their type; "
            "the queue head (earliest arrival) takes a random type with enough free devices "
            "(seeded); the first job that does not fit stops the queue. Heuristic."
        ),
        reporting=Reporting(Quantity("total throughput", "steps/s"), None),
        parameters_type=NoParameters,
        parameters_message="",
        parameters_field="",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "jobs[].throughput",
            "jobs[].scale_factor",
            "jobs[].arrival_time_s",
            "history.jobs[].current",
        ),
        maximize=True,
        entry_point="apportion.formulations.fifo:solve_fifo",
        capabilities=Capabilities(
            PlanKind.TIME_SHARE,
            ProblemClass.HEURISTIC,
            needs_history=True,
            objective=Objective.TOTAL_THROUGHPUT,
        ),
    ),
    PolicySpec(
        name="fifo_perf",
        description=(
            "Gavel's heterogeneity-aware FIFO (A2.10, docs/policies/gavel.md): recomputed each "
            "call; the queue head takes the fastest type with enough free devices; no skipping. "
            "Heuristic."
        ),
        reporting=Reporting(Quantity("total throughput", "steps/s"), None),
        parameters_type=NoParameters,
        parameters_message="",
        parameters_field="",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "jobs[].throughput",
            "jobs[].scale_factor",
            "jobs[].arrival_time_s",
        ),
        maximize=True,
        entry_point="apportion.formulations.fifo:solve_fifo_perf",
        capabilities=Capabilities(
            PlanKind.TIME_SHARE,
            ProblemClass.HEURISTIC,
            objective=Objective.TOTAL_THROUGHPUT,
        ),
    ),
    PolicySpec(
        name="fifo_packed",
        description=(
            "Gavel's FIFO with space sharing (A2.10, docs/policies/gavel.md): fifo_perf, then each "
            "queued job shares the devices of the scheduled single job (same scale factor) "
            "whose pair has the largest combined normalized throughput, if above 1.5. "
            "Heuristic."
        ),
        reporting=Reporting(Quantity("total throughput", "steps/s"), None),
        parameters_type=NoParameters,
        parameters_message="",
        parameters_field="",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "jobs[].throughput",
            "jobs[].scale_factor",
            "jobs[].arrival_time_s",
            "colocations[] or type_colocations[] with jobs[].job_type",
        ),
        maximize=True,
        entry_point="apportion.formulations.fifo:solve_fifo_packed",
        capabilities=Capabilities(
            PlanKind.TIME_SHARE,
            ProblemClass.HEURISTIC,
            uses_colocations=True,
            objective=Objective.TOTAL_THROUGHPUT,
        ),
    ),
    PolicySpec(
        name="gandiva",
        description=(
            "Gavel's reimplementation of Gandiva's packing (A2.10, docs/policies/gavel.md): when "
            "jobs ask for more devices than the cluster has, jobs are paired at random (pairs kept "
            "across calls through history.jobs[].colocated_with while their combined "
            "normalized throughput stays >= 1 on every usable type) and every combination "
            "gets an equal share of every type; otherwise the isolated allocation. Heuristic."
        ),
        reporting=Reporting(Quantity("total throughput", "steps/s"), None),
        parameters_type=NoParameters,
        parameters_message="",
        parameters_field="",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "jobs[].throughput",
            "jobs[].scale_factor",
            "colocations[] or type_colocations[] with jobs[].job_type",
            "history.jobs[].colocated_with",
        ),
        maximize=True,
        entry_point="apportion.formulations.gandiva:solve_policy",
        capabilities=Capabilities(
            PlanKind.TIME_SHARE,
            ProblemClass.HEURISTIC,
            needs_history=True,
            uses_colocations=True,
            objective=Objective.TOTAL_THROUGHPUT,
        ),
    ),
    PolicySpec(
        name="fisher_market",
        description=(
            "Heterogeneity-aware Fisher market (Eisenberg-Gale program, A4.1, "
            "docs/policies/market.md): jobs buy device-time on each accelerator type with budgets "
            "B_i: equal (1 each, the default and alias eisenberg_gale, which ignores priority "
            "weights) or the priority weights (budgets: BUDGET_SOURCE_PRIORITY_WEIGHT, alias "
            "fisher_market_weighted); maximize sum_i B_i log(throughput_i / proportional_share_i) "
            "under capacity, time budgets (none with uncapped: the plain market with devices "
            "as goods) and scale factors. Exact conic solve (Clarabel, "
            "exponential cones) with an independent Lagrangian-dual bound; returns the "
            "equilibrium price of every type and each job's spending, and the objective "
            "also with throughputs in steps/s (stats.throughput_objective)."
        ),
        reporting=Reporting(Quantity("Nash welfare"), Quantity("B log u")),
        parameters_type=_params.FisherMarketParameters,
        parameters_message="apportion.v1.FisherMarketParameters",
        parameters_field="fisher_market",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "jobs[].throughput",
            "jobs[].scale_factor",
            "jobs[].priority_weight (budgets with BUDGET_SOURCE_PRIORITY_WEIGHT)",
        ),
        maximize=True,
        entry_point="apportion.formulations.fisher_market:solve_policy",
        capabilities=Capabilities(
            PlanKind.MARKET,
            ProblemClass.CONIC,
            objective=Objective.LOG_WELFARE,
        ),
        aliases={
            "eisenberg_gale": {},
            "fisher_market_weighted": {"budgets": _params.BudgetSource.PRIORITY_WEIGHT},
        },
    ),
    PolicySpec(
        name="shockwave",
        description=(
            "Shockwave's planning-window program (A4.2-A4.5, docs/policies/market.md) on a "
            "homogeneous cluster: a T-round 0/1 plan maximizing the Nash-welfare log of epoch "
            "progress minus a makespan regularizer, under a finish-time-fairness guard, with the "
            "prioritized fallback and the ranking MILP when the guard is infeasible, then a "
            "work-conserving fill. HiGHS MIP, lambda formulation (no SOS2 binaries). Returns "
            "the T-round schedule, round 0 as the plan, and the updated reference finish times."
        ),
        reporting=Reporting(Quantity("welfare"), Quantity("welfare term")),
        parameters_type=_params.ShockwaveParameters,
        parameters_message="apportion.v1.ShockwaveParameters",
        parameters_field="shockwave",
        required_inputs=(
            "time_s",
            "round_duration_s",
            "cluster.accelerator_types[].count",
            "jobs[].scale_factor",
            "jobs[].arrival_time_s",
            "jobs[].progress.epochs_done",
            "jobs[].progress.total_epochs",
            "jobs[].epoch_profile",
            "history.jobs[].reference_finish_time_s",
            "history.jobs[].reference_estimate_s (and the other reference_* state fields)",
            "jobs[].throughput (the plan's effective throughput)",
        ),
        maximize=True,
        entry_point="apportion.formulations.shockwave:solve_policy",
        input_check="apportion.server.market_inputs:check_shockwave",
        capabilities=Capabilities(
            PlanKind.WINDOW,
            ProblemClass.MILP,
            needs_history=True,
            reads_epoch_profiles=True,
            relative_gap=1e-3,
        ),
    ),
    PolicySpec(
        name="sia",
        description=(
            "Sia's heterogeneity-aware goodput ILP (A5, docs/policies/sia.md): choose at most one "
            "(type, nodes, GPUs) configuration per job within per-type capacity, minimizing "
            "sum_i w_i (r_i G_i)^p + lambda_n per unallocated job (p < 0; maximized for p > 0), "
            "G = goodput normalized by the job's smallest, r = restart factor off the current "
            "configuration. Goodput from jobs[].configurations, a Pollux model, or throughput. "
            "Exact MILP (HiGHS) with best bound and gap; chosen configurations placed on nodes."
        ),
        reporting=Reporting(Quantity("Sia objective"), Quantity("objective term")),
        parameters_type=_params.SiaParameters,
        parameters_message="apportion.v1.SiaParameters",
        parameters_field="sia",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "cluster.nodes",
            "jobs[].configurations | jobs[].pollux | jobs[].throughput",
            "jobs[].elasticity",
            "jobs[].arrival_time_s",
            "jobs[].restart_penalty_s",
            "history.jobs[].restarts",
            "history.jobs[].current",
        ),
        maximize=False,
        entry_point="apportion.formulations.sia:solve_policy",
        input_check="apportion.server.sia_inputs:check_configuration_policy",
        capabilities=Capabilities(
            PlanKind.CONFIGURATION,
            ProblemClass.MILP,
            needs_history=True,
            reads_configurations=True,
            objective=Objective.CONFIGURATION_TERMS,
        ),
    ),
    PolicySpec(
        name="optimus",
        description=(
            "Optimus (EuroSys'18, B8): every job starts at its smallest allocation in order, "
            "then one worker (or parameter server) at a time goes to the job whose predicted "
            "remaining time Q/f drops most per dominant share of the devices added. Q from "
            "the job's loss history (fitted 1/(b0 k + b1) + b2, non-negative least squares) or "
            "its progress; f from its Optimus speed model, configurations or throughput. "
            "Greedy (heuristic) with the exact allocation of the same objective (dynamic "
            "program / MILP) as bound, or method = exact."
        ),
        reporting=Reporting(Quantity("total remaining time", "s"), Quantity("remaining time", "s")),
        parameters_type=_params.OptimusParameters,
        parameters_message="apportion.v1.OptimusParameters",
        parameters_field="optimus",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "cluster.nodes",
            "jobs[].speed_model | jobs[].configurations | jobs[].throughput",
            "jobs[].loss_history | jobs[].progress",
            "jobs[].elasticity",
            "jobs[].arrival_time_s",
            "history.jobs[].current",
            "history.jobs[].node_devices",
        ),
        maximize=False,
        entry_point="apportion.formulations.optimus:solve_policy",
        capabilities=Capabilities(
            PlanKind.CONFIGURATION,
            ProblemClass.MILP,
            needs_history=True,
            reads_configurations=True,
            reads_loss_history=True,
        ),
    ),
    PolicySpec(
        name="slaq",
        description=(
            "SLAQ (SoCC'17, B9): every job starts at its smallest allocation in order, then "
            "one device at a time goes to the job with the largest predicted normalized loss "
            "reduction over the horizon (loss curve fitted to its recent-weighted history). "
            "Greedy (heuristic) with the exact allocation of the same objective as bound, or "
            "method = exact."
        ),
        reporting=Reporting(Quantity("loss reduction"), Quantity("loss reduction")),
        parameters_type=_params.SlaqParameters,
        parameters_message="apportion.v1.SlaqParameters",
        parameters_field="slaq",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "cluster.nodes",
            "round_duration_s",
            "jobs[].loss_history",
            "jobs[].speed_model | jobs[].configurations | jobs[].throughput",
            "jobs[].elasticity",
            "jobs[].arrival_time_s",
            "history.jobs[].current",
            "history.jobs[].node_devices",
        ),
        maximize=True,
        entry_point="apportion.formulations.slaq:solve_policy",
        capabilities=Capabilities(
            PlanKind.CONFIGURATION,
            ProblemClass.MILP,
            needs_history=True,
            reads_configurations=True,
            reads_loss_history=True,
        ),
    ),
    PolicySpec(
        name="lyra",
        description=(
            "Lyra (EuroSys'23, B7): gives back the k loaned servers the inference cluster asks "
            "for with the fewest preempted jobs (greedy with the MILP's bound, or MILP), then "
            "base demands in order on training servers, then extra workers to elastic jobs as "
            "a multiple-choice knapsack solved exactly by dynamic programming (predicted "
            "completion-time reduction), placed on loaned servers first."
        ),
        reporting=Reporting(
            Quantity("total completion time", "s"), Quantity("completion time", "s")
        ),
        parameters_type=_params.LyraParameters,
        parameters_message="apportion.v1.LyraParameters",
        parameters_field="lyra",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "cluster.nodes",
            "inference.loaned_nodes",
            "inference.reclaim_nodes",
            "jobs[].speed_model | jobs[].configurations | jobs[].throughput",
            "jobs[].elasticity",
            "jobs[].progress",
            "jobs[].arrival_time_s",
            "history.jobs[].current",
            "history.jobs[].node_devices",
        ),
        maximize=False,
        entry_point="apportion.formulations.lyra:solve_policy",
        capabilities=Capabilities(
            PlanKind.CONFIGURATION,
            ProblemClass.MILP,
            needs_history=True,
            reads_configurations=True,
            reads_inference=True,
        ),
    ),
    PolicySpec(
        name="pollux",
        description=(
            "Pollux's cluster objective (B4, OSDI'21 artifact version): "
            "maximize the p-mean of (speedup + 1e-3) over jobs, speedup = goodput / goodput at "
            "the job's fair share of GPUs, times the restart factor off the current "
            "configuration. Solved exactly as an ILP over Sia's configurations (Pollux uses a "
            "genetic algorithm); objective and bound reported as fitness."
        ),
        reporting=Reporting(Quantity("fitness"), Quantity("objective term")),
        parameters_type=_params.PolluxParameters,
        parameters_message="apportion.v1.PolluxParameters",
        parameters_field="pollux",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "cluster.nodes",
            "jobs[].configurations | jobs[].pollux | jobs[].throughput",
            "jobs[].elasticity",
            "jobs[].arrival_time_s",
            "jobs[].restart_penalty_s",
            "history.jobs[].restarts",
            "history.jobs[].current",
        ),
        maximize=True,
        entry_point="apportion.formulations.pollux:solve_policy",
        input_check="apportion.server.sia_inputs:check_configuration_policy",
        capabilities=Capabilities(
            PlanKind.CONFIGURATION,
            ProblemClass.MILP,
            needs_history=True,
            reads_configurations=True,
        ),
    ),
    PolicySpec(
        name="themis_auction",
        description=(
            "Themis's partial-allocation auction (B1), one epoch: jobs without a lease are "
            "ranked by finish-time ratio rho and the worst (1 - f) fraction bid for the free "
            "devices with rho per bundle (from jobs[].themis_bids, or derived from throughput "
            "and remaining work over the lease); the proportional-fair bundles (maximize "
            "sum log 1/rho) are solved exactly by MILP, each winner keeps the fraction c_i of "
            "its bundle under a lease (hidden payment, one exact program per winner), and the "
            "withheld and unsold device-time goes to the other jobs (leftover allocation)."
        ),
        reporting=Reporting(Quantity("sum log 1/rho"), Quantity("log 1/rho")),
        parameters_type=_params.ThemisAuctionParameters,
        parameters_message="apportion.v1.ThemisAuctionParameters",
        parameters_field="themis_auction",
        required_inputs=(
            "time_s",
            "cluster.accelerator_types[].count",
            "cluster.nodes",
            "jobs[].themis_bids | (jobs[].throughput, jobs[].progress, jobs[].arrival_time_s)",
            "jobs[].scale_factor",
            "jobs[].priority_weight",
            "history.jobs[].cumulative_isolated_time_s",
            "history.jobs[].current",
            "history.jobs[].lease_expires_s",
            "history.jobs[].lease_time_share",
        ),
        maximize=True,
        entry_point="apportion.formulations.themis_auction:solve_policy",
        capabilities=Capabilities(
            PlanKind.TIME_SHARE,
            ProblemClass.MILP,
            needs_history=True,
            round_schedule=True,
            relative_gap=1e-6,
            objective=Objective.LOG_INVERSE_RHO,
        ),
    ),
    PolicySpec(
        name="gandiva_fair",
        description=(
            "Gandiva_fair (B2): users (tenants) hold tickets (tenant weights); the cluster is "
            "water-filled among users by tickets up to their demand and spread over the types; "
            "users with high speedup on fast types buy fast share from users with low speedup "
            "(greedy trades, individually rational; the exact trading LP is its bound); jobs "
            "are scheduled by gang-aware stride scheduling per quantum with placement on "
            "nodes. Returns the quanta as rounds, the shares before and after trading and the "
            "stride passes to send back. Alias gandiva_fair_equal_split: Shockwave's static "
            "equal split of every type."
        ),
        reporting=Reporting(
            Quantity("total throughput", "steps/s"),
            Quantity("user share", "devices"),
        ),
        parameters_type=_params.GandivaFairParameters,
        parameters_message="apportion.v1.GandivaFairParameters",
        parameters_field="gandiva_fair",
        required_inputs=(
            "round_duration_s",
            "cluster.accelerator_types[].count",
            "cluster.nodes",
            "jobs[].throughput",
            "jobs[].scale_factor",
            "jobs[].priority_weight",
            "jobs[].tenant",
            "tenants[]",
            "history.jobs[].stride_pass",
            "history.jobs[].current",
        ),
        maximize=True,
        entry_point="apportion.formulations.gandiva_fair:solve_policy",
        capabilities=Capabilities(
            PlanKind.TIME_SHARE,
            ProblemClass.HEURISTIC,
            reads_tenants=True,
            needs_history=True,
            round_schedule=True,
            objective=Objective.USER_THROUGHPUT,
        ),
        aliases={"gandiva_fair_equal_split": {"static_equal_split": True}},
    ),
    PolicySpec(
        name="astraea",
        description=(
            "Astraea (B3): long-term GPU-time fairness with leases. Each tenant is entitled to "
            "its weight share of the devices while it has demand (water-filling); the tenant "
            "with the smallest ratio of consumed to entitled device-time (accumulated in "
            "snapshot.tenant_usage, projected to the lease end) gets its next job, inside a "
            "tenant the job with the least consumed device-time per weight, until nothing "
            "fits. Jobs with an unexpired lease keep their placement. Returns the leases and "
            "the updated bookkeeping; the bound is the fractional max-min ratio."
        ),
        reporting=Reporting(Quantity("smallest ratio"), Quantity("tenant ratio")),
        parameters_type=_params.AstraeaParameters,
        parameters_message="apportion.v1.AstraeaParameters",
        parameters_field="astraea",
        required_inputs=(
            "time_s",
            "cluster.accelerator_types[].count",
            "cluster.nodes",
            "jobs[].throughput",
            "jobs[].scale_factor",
            "jobs[].priority_weight",
            "jobs[].tenant",
            "jobs[].arrival_time_s",
            "tenants[]",
            "tenant_usage[]",
            "history.jobs[].gpu_time_s",
            "history.jobs[].current",
            "history.jobs[].lease_expires_s",
        ),
        maximize=True,
        entry_point="apportion.formulations.astraea:solve_policy",
        capabilities=Capabilities(
            PlanKind.TIME_SHARE,
            ProblemClass.HEURISTIC,
            reads_tenants=True,
            needs_history=True,
            round_schedule=True,
        ),
    ),
    PolicySpec(
        name="tiresias",
        description=(
            "Tiresias (D1): discretized 2D-LAS or 2D-Gittins priority queues by attained "
            "service (executed time x devices, or time), optional starvation knob, admission "
            "in priority order: skip-fit on device counts (exactly the lexicographically best "
            "admitted set) or exact lexicographic admission under placement constraints "
            "(consolidated skewed jobs, spans, pins) by placement checks. Admitted jobs get "
            "time share 1 on their type; queues, ranks, Gittins indices and the state to send "
            "back are in JobAllocation.admission."
        ),
        reporting=Reporting(Quantity("admitted jobs"), Quantity("admitted")),
        parameters_type=TiresiasParameters,
        parameters_message="apportion.v1.TiresiasParameters",
        parameters_field="tiresias",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "jobs[].throughput",
            "jobs[].scale_factor",
            "jobs[].arrival_time_s",
            "history.jobs[].current",
            "history.jobs[].executed_time_s",
            "history.jobs[].waiting_time_s",
            "jobs[].communication.tensor_skew (consolidation)",
        ),
        maximize=True,
        entry_point="apportion.formulations.tiresias:solve_policy",
        capabilities=Capabilities(
            PlanKind.TIME_SHARE,
            ProblemClass.MILP,
            needs_history=True,
            round_schedule=True,
        ),
        aliases={
            "tiresias_las": {"mode": _params.TiresiasMode.LAS},
            "tiresias_gittins": {"mode": _params.TiresiasMode.GITTINS},
        },
    ),
)

_SHARING_POLICIES: tuple[PolicySpec, ...] = (
    PolicySpec(
        name="synergy",
        description=(
            "Synergy OPT (B5): jobs get GPUs in base order, then one point of their CPU/memory "
            "throughput grid each, at or above their fair-share point, maximizing total "
            "normalized throughput within the cluster's CPUs and memory (ILP, HiGHS), placed "
            "on nodes (consolidated, reshaped exactly per node); bound = the ILP optimum. "
            "compat synergy: TUNE (best point, fair share, peer adjustment)."
        ),
        reporting=Reporting(
            Quantity("total normalized throughput"), Quantity("normalized throughput")
        ),
        parameters_type=_params.SynergyParameters,
        parameters_message="apportion.v1.SynergyParameters",
        parameters_field="synergy",
        required_inputs=(
            "jobs[].throughput",
            "cluster.nodes (devices, cpus, memory_gib)",
            "jobs[].scale_factor",
            "jobs[].resource_profile | resource_profiles[] with jobs[].job_type",
            "jobs[].arrival_time_s",
        ),
        maximize=True,
        entry_point="apportion.formulations.synergy:solve_policy",
        capabilities=Capabilities(
            PlanKind.GROUPS,
            ProblemClass.MILP,
            reads_resource_profiles=True,
            placement_stage=False,
            admission_stage=False,
        ),
        aliases={"synergy_opt": {}},
    ),
    PolicySpec(
        name="muri",
        description=(
            "Muri (B6): jobs admitted in base order (Muri-S: remaining service, Muri-L: "
            "attained service) are grouped by up to 4 of one GPU count to interleave their "
            "storage, CPU, GPU and network stages: rounds of maximum-weight matching (exact, "
            "certified) on the used ratio until they fit, as Muri does; or, with exact_groups, "
            "the set packing maximizing the running jobs' relative throughput (HiGHS MIP) "
            "with the matching's objective beside it."
        ),
        reporting=Reporting(Quantity("total relative throughput"), Quantity("relative throughput")),
        parameters_type=_params.MuriParameters,
        parameters_message="apportion.v1.MuriParameters",
        parameters_field="muri",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "jobs[].stage_times",
            "jobs[].scale_factor",
            "jobs[].progress (remaining service)",
            "history.jobs[].received_time_s (attained service)",
        ),
        maximize=True,
        entry_point="apportion.formulations.muri:solve_policy",
        capabilities=Capabilities(
            PlanKind.GROUPS,
            ProblemClass.MILP,
            needs_history=True,
            reads_stage_times=True,
            placement_stage=False,
            admission_stage=False,
        ),
        aliases={
            "muri_s": {"order": _params.BaseOrder.REMAINING_SERVICE},
            "muri_l": {"order": _params.BaseOrder.ATTAINED_SERVICE},
        },
    ),
    PolicySpec(
        name="lucid",
        description=(
            "Lucid's pairing (D8): waiting jobs share the devices of running jobs that run "
            "alone under Lucid's four rules (GPU count, memory, sharing scores, priority), "
            "chosen as a maximum-weight matching on the predicted gain (exact, certified); "
            "compat lucid: Lucid's indolent first fit. Unpaired waiting jobs start alone in "
            "estimated GPU-time order."
        ),
        reporting=Reporting(Quantity("total pairing benefit"), Quantity("relative throughput")),
        parameters_type=_params.LucidParameters,
        parameters_message="apportion.v1.LucidParameters",
        parameters_field="lucid",
        required_inputs=(
            "cluster.accelerator_types[].count",
            "jobs[].scale_factor",
            "jobs[].sharing (gpu_memory_gib, sharing_score)",
            "colocations[] or type_colocations[] (pair speeds; optional)",
            "jobs[].throughput and progress (estimated duration)",
            "history.jobs[].current and colocated_with",
        ),
        maximize=True,
        entry_point="apportion.formulations.lucid:solve_policy",
        capabilities=Capabilities(
            PlanKind.GROUPS,
            ProblemClass.LP,
            needs_history=True,
            uses_colocations=True,
            reads_device_sharing=True,
            relative_gap=1e-6,
            placement_stage=False,
            admission_stage=False,
        ),
        aliases={"affine_pair": {}},
    ),
    PolicySpec(
        name="antman",
        description=(
            "AntMan (D7): resource-guaranteed jobs keep whole devices (waiting ones take free "
            "devices in arrival order); opportunistic one-device jobs fill the spare memory "
            "and compute of devices without slowing their guaranteed job beyond its budget, "
            "as a generalized assignment MIP (exact, HiGHS); compat antman: AntMan's "
            "least-utilized first fit."
        ),
        reporting=Reporting(Quantity("opportunistic value"), Quantity("relative throughput")),
        parameters_type=_params.AntmanParameters,
        parameters_message="apportion.v1.AntmanParameters",
        parameters_field="antman",
        required_inputs=(
            "shared_devices[]",
            "jobs[].sharing (opportunistic, gpu_memory_gib, gpu_utilization)",
            "jobs[].scale_factor",
            "jobs[].priority_weight",
            "jobs[].arrival_time_s",
            "interference[] (guaranteed job's slowdown; optional)",
        ),
        maximize=True,
        entry_point="apportion.formulations.antman:solve_policy",
        capabilities=Capabilities(
            PlanKind.GROUPS,
            ProblemClass.MILP,
            reads_device_sharing=True,
            placement_stage=False,
            admission_stage=False,
        ),
        aliases={"opportunistic_pack": {}},
    ),
    PolicySpec(
        name="iadeep",
        description=(
            "IADeep (D9): jobs share devices in groups listed in interference, each member "
            "with a configuration; set packing over (group, configuration) columns maximizing "
            "the jobs' relative throughput within the devices and their memory (exact, HiGHS "
            "MIP); compat iadeep: IADeep's per-arrival least-interference greedy."
        ),
        reporting=Reporting(Quantity("total relative throughput"), Quantity("relative throughput")),
        parameters_type=_params.IadeepParameters,
        parameters_message="apportion.v1.IadeepParameters",
        parameters_field="iadeep",
        required_inputs=(
            "interference[] (groups, configurations, slowdowns)",
            "jobs[].sharing (gpu_memory_gib, configurations)",
            "jobs[].priority_weight",
            "jobs[].arrival_time_s",
            "shared_devices[] (optional)",
        ),
        maximize=True,
        entry_point="apportion.formulations.iadeep:solve_policy",
        capabilities=Capabilities(
            PlanKind.GROUPS,
            ProblemClass.MILP,
            reads_device_sharing=True,
            placement_stage=False,
            admission_stage=False,
        ),
        aliases={"colocate_groups": {}},
    ),
)


_POLICIES = _POLICIES + _SHARING_POLICIES

_BY_NAME: dict[str, PolicySpec] = {}
for _spec in _POLICIES:
    _BY_NAME[_spec.name] = _spec
    for _alias in _spec.aliases:
        _BY_NAME[_alias] = _spec


def policies() -> tuple[PolicySpec, ...]:
    """All registered policies, canonical order."""
    return _POLICIES


def known_names() -> list[str]:
    """Every accepted name (canonical names and aliases), sorted."""
    return sorted(_BY_NAME)


def lookup(name: str, field_path: str = "policy.name") -> PolicySpec:
    """The policy registered under `name` (canonical or alias); ValidationError otherwise."""
    spec = _BY_NAME.get(name)
    if spec is None:
        what = "is required" if not name else f"unknown policy {name!r}"
        raise ValidationError(
            [Violation(field_path, f"{what}; known policies: {', '.join(known_names())}")]
        )
    return spec


def resolve_parameters(spec: PolicySpec, requested_name: str, parameters: object | None) -> object:
    """The parameters to solve with: the given ones (or defaults), with the alias's forced
    values applied."""
    params = spec.parameters_type() if parameters is None else parameters
    forced = spec.aliases.get(requested_name)
    if forced:
        params = replace(cast(Any, params), **forced)
    return params
