"""What a policy reads and produces, declared as data on its registry entry.

Every other part of apportion (conversion and validation, the round schedule, the simulator,
`ListPolicies`) asks these flags instead of keeping its own list of policy names.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class PlanKind(StrEnum):
    """The shape of a policy's answer."""

    TIME_SHARE = "time_share"
    """A time share per job and accelerator type (the fraction of time the job runs there)."""
    QUEUE = "queue"
    """Per-device queues of pending jobs with start and completion times (matching)."""
    CONFIGURATION = "configuration"
    """One configuration per job (type, nodes, devices) placed on nodes."""
    MARKET = "market"
    """Time shares at market-clearing prices with each job's spending."""
    WINDOW = "window"
    """A 0/1 schedule over a planning window of rounds."""
    GROUPS = "groups"
    """Groups of jobs sharing devices for the round, each member with a predicted slowdown
    (a group of one runs alone), with CPU cores and memory per job where the policy
    allocates them (`Plan.groups`)."""


class Objective(StrEnum):
    """What a policy's reported objective is, as a function of its plan (the docs section
    defining it in parentheses). `apportion.testing.check_plan` recomputes the objective of a
    plan from the snapshot and the plan alone, by its own code, for every policy that declares
    one; a policy whose objective is none of these declares None."""

    MIN_LEVEL = "min_level"
    """min_i (s_i / w_i) thr_i(X) / prop_i (A2.1)."""
    FIRST_ROUND_LEVEL = "first_round_level"
    """min_i s_i u_i / weight_i with the first round's effective tenant weights (A2.4)."""
    MIN_NORMALIZED_THROUGHPUT = "min_normalized_throughput"
    """min_i thr_i(X) / prop_i (A1.3)."""
    SUM_THROUGHPUT = "sum_throughput"
    """sum_i thr_i(X), or sum_i thr_i(X) / prop_i when normalized (A2.6)."""
    COST_NORMALIZED_THROUGHPUT = "cost_normalized_throughput"
    """sum_ij T[i,j] / cost_j X[i,j] over the priced types (A2.7)."""
    MAKESPAN = "makespan"
    """max_i R_i / thr_i(X) over the jobs with remaining work, s (A2.8)."""
    MAX_FINISH_TIME_RATIO = "max_finish_time_ratio"
    """max_i w_i rho_i(X), rho_i = (t_i + R_i / thr_i) / (C_i + R_i / iso_i) (A2.5)."""
    TOTAL_THROUGHPUT = "total_throughput"
    """sum_i thr_i(X) in steps/s, pairs at their pair throughputs (A2.10)."""
    TOTAL_FLOW_TIME = "total_flow_time"
    """sum over the queued jobs of completion - arrival, s (A3)."""
    LOG_WELFARE = "log_welfare"
    """sum_i B_i log u_i, u_i = thr_i(X) / prop_i (A4.1)."""
    CONFIGURATION_TERMS = "configuration_terms"
    """sum_i w_i min((r_i G_i)^p, clip) over placed jobs + lambda_n per other job (A5.5)."""
    LOG_INVERSE_RHO = "log_inverse_rho"
    """sum over the bidders of log(1 / rho), rho with the bundle won or without one (B1)."""
    USER_THROUGHPUT = "user_throughput"
    """sum over users of their throughput after trading, in each user's own units (B2); the
    total throughput in steps/s when the plan has no users (a static equal split)."""


class ProblemClass(StrEnum):
    """The kind of optimization behind a policy, which sets its default gap tolerance."""

    LP = "lp"
    MILP = "milp"
    CONIC = "conic"
    HEURISTIC = "heuristic"
    """No optimization, or a greedy rule: the termination is `heuristic`, the bound optional."""


DEFAULT_RELATIVE_GAP: dict[ProblemClass, float] = {
    ProblemClass.LP: 1e-6,
    ProblemClass.MILP: 1e-4,
    ProblemClass.CONIC: 1e-6,
    ProblemClass.HEURISTIC: 1e-6,
}
"""The relative gap (objective vs proven bound, `relative_gap`) within which a plan may be
called optimal, when the request does not set `options.relative_gap`. LPs and conic programs
are solved to about 1e-9 and certified by their duals, so 1e-6 leaves room for the repair of
the duals; MILPs stop at 1e-4 as is usual for branch and bound. A policy may declare its own
(`Capabilities.relative_gap`)."""


@dataclass(frozen=True)
class Capabilities:
    """What a policy reads from a snapshot and what its plan holds."""

    plan_kind: PlanKind
    problem_class: ProblemClass
    reads_tenants: bool = False
    """Reads `snapshot.tenants` and `jobs[].tenant` (tenant weights and sharing modes)."""
    needs_remaining_work: bool = False
    """Every job needs `progress.total_steps > steps_done` (a remaining amount of work)."""
    needs_history: bool = False
    """Reads `history` (current placements, accumulated state)."""
    uses_colocations: bool = False
    """Reads pair throughputs (`colocations`, `type_colocations` with `jobs[].job_type`): always
    for packing heuristics, with `space_sharing` set for the LP policies."""
    reads_epoch_profiles: bool = False
    """Reads `jobs[].epoch_profile` and epoch progress (planning-window policies)."""
    reads_configurations: bool = False
    """Reads per-configuration goodput (`jobs[].configurations`, `jobs[].pollux`, elasticity)."""
    reads_loss_history: bool = False
    """Reads `jobs[].loss_history` (fitted loss curves: optimus, slaq)."""
    reads_inference: bool = False
    """Reads `snapshot.inference` (servers loaned by an inference cluster, reclaiming: lyra)
    and `history.jobs[].node_devices`."""
    round_schedule: bool = False
    """Its time-share plan can be turned into rounds (`options.schedule_rounds`): Gavel's round
    mechanism, unless the policy returns rounds of its own (Gandiva_fair's stride quanta)."""
    partitionable: bool = False
    """`options.partitions = k` may split its jobs and capacity into k sub-problems solved in
    parallel (POP, `apportion.solver.partition`); its `score` entry point evaluates a time
    share on the whole problem."""
    reads_resource_profiles: bool = False
    """Reads CPU/memory throughput grids (`resource_profiles`, `jobs[].resource_profile`) and
    the nodes' CPUs and memory."""
    reads_stage_times: bool = False
    """Reads per-iteration stage times (`jobs[].stage_times`)."""
    reads_device_sharing: bool = False
    """Reads `jobs[].sharing` (device memory, utilization, service class, sharing score,
    configurations), `shared_devices` and `interference`."""
    relative_gap: float | None = None
    """The policy's own default gap tolerance; None = `DEFAULT_RELATIVE_GAP[problem_class]`."""
    placement_stage: bool = True
    """Its plan can be followed by the placement stage (`policy.placement`): it grants devices
    per job (time shares through the round schedule, queues, configurations, windows)."""
    admission_stage: bool = True
    """It can be preceded by the admission stage (`policy.admission`)."""
    objective: Objective | None = None
    """What its reported objective is (`Objective`); None = none of the listed definitions,
    so checkers verify the certificate's consistency but cannot recompute its value."""

    @property
    def combines_with(self) -> tuple[str, ...]:
        """The stages a request may combine with this policy (`PolicyInfo.combines_with`)."""
        stages = []
        if self.admission_stage:
            stages.append("admission")
        if self.placement_stage:
            stages.append("placement")
        if self.round_schedule:
            stages.append("round_schedule")
        return tuple(stages)

    @property
    def default_relative_gap(self) -> float:
        """The gap tolerance used when the request sets none."""
        if self.relative_gap is not None:
            return self.relative_gap
        return DEFAULT_RELATIVE_GAP[self.problem_class]


@dataclass(frozen=True)
class Quantity:
    """A number a policy reports, as tables and clients should label it."""

    name: str
    """Short name, e.g. "level", "rho", "completion time"."""
    unit: str = ""
    """Unit, e.g. "s", "steps/s"; "" = dimensionless."""

    def heading(self) -> str:
        """`name (unit)`, or the name alone when dimensionless."""
        return f"{self.name} ({self.unit})" if self.unit else self.name


@dataclass(frozen=True)
class Reporting:
    """How a policy's numbers read: its objective (`SolveStats.objective`) and each job's
    value in it (`JobAllocation.objective_value`)."""

    objective: Quantity
    job_value: Quantity | None
    """None: the job's value is its effective throughput, already a column of its own."""
