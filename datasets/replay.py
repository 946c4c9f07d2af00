"""Trace replay for round-based policies on a homogeneous cluster (data.md §4.1, §7).

A small discrete-time simulator: G identical devices, rounds of Delta s starting at the first
arrival. Jobs arrive over time (`ReplayJob.arrival_s`) and become eligible at the first round
boundary at or after their arrival. Each job is an epoch profile: epoch e takes
`epoch_duration_s[e]` s on the job's full gang of `scale_factor` devices. Before every round
the policy names the active jobs that run (their gangs must fit in G); a job that runs
progresses through its epochs by Delta s of its profile (possibly finishing several short
epochs), and a job that completes inside the round finishes at that instant (the JCT uses the
actual finish, not the round's end: data.md §7, Gavel issue #36). No preemption or restart
cost is modelled.

Policies (`RoundPolicy`):
* `ShockwaveRoundPolicy`: Shockwave's planning window through `apportion.solver.solve`,
  re-solved on any arrival or completion and at the latest every 8 rounds (A4.5); a round
  takes the cached plan's row for that round. The reference-finish-time state returned by
  each solve is sent back with the next one, as a client of the stateless service would.
* `GavelRoundPolicy`: a Gavel time-share policy (default `weighted_max_min_fairness`; also
  `themis_finish_time_fairness`, `min_makespan`, `max_sum_throughput`, `isolated`) with
  Gavel's round mechanism (`SolveOptions.schedule_rounds = 1`); the allocation is recomputed
  whenever the job set changes, and the time received since that reset is kept here. Work is
  in standalone seconds (throughput 1, remaining steps = remaining profiled seconds), and
  finish-time fairness's C_i state is sent back with every solve as a client would.
  AlloX is not driven here: it is a non-preemptive matching of 1-device jobs, not a time
  share (multi-device jobs are unservable for it).

Metrics (`ReplayMetrics`, data.md §7): makespan = last finish - first arrival; mean JCT;
finish-time fairness rho_i = JCT_i / (T_exclusive_i * max(1, N_jobs / G)) (Shockwave's
static variant; worst, mean and the fraction above 1.0) and the Themis-style variant with the
contention factor max(1, mean over the job's rounds of active jobs / G); utilization = busy
device-seconds / (G * makespan).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from apportion.solver.model import (
    Compat,
    FloatArray,
    IntArray,
    PolicyRequest,
    Problem,
    ReferenceFinishState,
    SolveOptions,
)
from apportion.solver.parameters import ShockwaveParameters
from apportion.solver.result import Termination
from apportion.solver.solve import solve
from apportion.solver.validation import make_problem

DEFAULT_ROUND_S = 120.0
"""Shockwave's round length Delta (s)."""
RESOLVE_ROUNDS = 8
"""Shockwave re-solves at the latest every 8 rounds (upstream REOPT_ROUNDS)."""


@dataclass(frozen=True)
class ReplayJob:
    """One job of a trace: its arrival, gang and epoch profile."""

    job_id: str
    arrival_s: float
    """Submission time (s, trace clock)."""
    scale_factor: int
    """Devices held while running (gang)."""
    epoch_duration_s: tuple[float, ...]
    """Duration of each epoch on the full gang (s, > 0)."""
    batch_size: tuple[int, ...]
    """Batch size of each epoch (samples), same length."""

    @property
    def standalone_s(self) -> float:
        """T_exclusive: run time alone on its own devices (s)."""
        return float(sum(self.epoch_duration_s))


@dataclass(frozen=True)
class RoundContext:
    """What a policy sees before a round."""

    round_index: int
    now_s: float
    """Start of the round (s, trace clock)."""
    round_s: float
    gpus: int
    jobs: Sequence[ReplayJob]
    active: tuple[int, ...]
    """Indices of the arrived, unfinished jobs, ascending."""
    epochs_done: IntArray
    """(jobs,) completed epochs of every job."""
    work_done_s: FloatArray = field(default_factory=lambda: np.zeros(0))
    """(jobs,) progress of every job in profiled seconds (completed epochs plus the time spent
    in the current one; the job's standalone time when it finishes). Empty = not given."""


class RoundPolicy(Protocol):
    """Chooses the jobs that run in a round (indices into `RoundContext.jobs`)."""

    name: str

    def round_jobs(self, ctx: RoundContext) -> list[int]: ...


@dataclass(frozen=True)
class ReplayMetrics:
    """data.md §7 metrics of one replay (times in s)."""

    makespan_s: float
    avg_jct_s: float
    worst_rho: float
    mean_rho: float
    frac_rho_gt1: float
    """Fraction of jobs with rho > 1.0 (threshold 1.0, as the 120-job summary file)."""
    worst_rho_themis: float
    utilization: float


@dataclass(frozen=True)
class ReplayResult:
    policy: str
    finish_s: FloatArray
    """(jobs,) actual finish times (s)."""
    jct_s: FloatArray
    rho: FloatArray
    rho_themis: FloatArray
    metrics: ReplayMetrics
    rounds: int
    """Rounds simulated (including idle ones skipped between arrivals: not counted)."""
    schedule: tuple[tuple[int, ...], ...] = ()
    """Per simulated round, the jobs that ran (when `keep_schedule`)."""
    wall_s: float = 0.0


def replay_metrics(
    jobs: Sequence[ReplayJob],
    finish_s: FloatArray,
    gpus: int,
    busy_device_s: float,
    contention: FloatArray,
) -> tuple[ReplayMetrics, FloatArray, FloatArray]:
    """(metrics, rho, Themis-style rho) from the finish times; `contention[i]` is the mean
    number of active jobs over the rounds job i was active (for the Themis-style variant)."""
    arrival = np.array([j.arrival_s for j in jobs])
    standalone = np.array([j.standalone_s for j in jobs])
    jct = finish_s - arrival
    makespan = float(finish_s.max() - arrival.min())
    rho = jct / (standalone * max(1.0, len(jobs) / gpus))
    rho_themis = jct / (standalone * np.maximum(1.0, contention / gpus))
    metrics = ReplayMetrics(
        makespan_s=makespan,
        avg_jct_s=float(jct.mean()),
        worst_rho=float(rho.max()),
        mean_rho=float(rho.mean()),
        frac_rho_gt1=float(np.mean(rho > 1.0)),
        worst_rho_themis=float(rho_themis.max()),
        utilization=busy_device_s / (gpus * makespan) if makespan > 0 else 0.0,
    )
    return metrics, rho, rho_themis


def replay(
    jobs: Sequence[ReplayJob],
    gpus: int,
    policy: RoundPolicy,
    round_s: float = DEFAULT_ROUND_S,
    keep_schedule: bool = False,
    max_rounds: int = 1_000_000,
) -> ReplayResult:
    """Run `policy` on `jobs` with `gpus` devices and rounds of `round_s` s until every job
    finishes. Raises ValueError when a policy picks an inactive job or more devices than G,
    and when a job can never run (its gang exceeds G)."""
    started = time.perf_counter()
    m = len(jobs)
    if m == 0:
        raise ValueError("no jobs to replay")
    for j in jobs:
        if j.scale_factor > gpus:
            raise ValueError(f"job {j.job_id} needs {j.scale_factor} devices, cluster has {gpus}")
    durations = [np.asarray(j.epoch_duration_s, np.float64) for j in jobs]
    arrival = np.array([j.arrival_s for j in jobs])
    scale = np.array([j.scale_factor for j in jobs], np.int64)
    t0 = float(arrival.min())
    epochs_done = np.zeros(m, np.int64)
    into_epoch = np.zeros(m)  # s already spent in the current epoch
    work_done = np.zeros(m)  # profiled s of progress
    finish = np.full(m, np.nan)
    contention_sum = np.zeros(m)
    active_rounds = np.zeros(m)
    busy = 0.0
    schedule: list[tuple[int, ...]] = []
    r = 0
    simulated = 0
    while np.isnan(finish).any():
        if simulated >= max_rounds:
            raise RuntimeError(f"replay did not finish within {max_rounds} rounds")
        now = t0 + r * round_s
        unfinished = np.isnan(finish)
        active_mask = unfinished & (arrival <= now + 1e-9)
        if not active_mask.any():
            upcoming = arrival[unfinished].min()
            r = max(r + 1, math.ceil((upcoming - t0) / round_s - 1e-9))
            continue
        active = tuple(int(i) for i in np.flatnonzero(active_mask))
        ctx = RoundContext(
            r, now, round_s, gpus, jobs, active, epochs_done.copy(), work_done.copy()
        )
        chosen = sorted(set(policy.round_jobs(ctx)))
        if any(not active_mask[i] for i in chosen):
            raise ValueError(f"round {r}: policy {policy.name} picked an inactive job")
        if int(scale[chosen].sum()) > gpus:
            raise ValueError(f"round {r}: policy {policy.name} used more than {gpus} devices")
        contention_sum[list(active)] += len(active)
        active_rounds[list(active)] += 1
        for i in chosen:
            budget = round_s
            d = durations[i]
            while budget > 1e-12 and epochs_done[i] < d.size:
                need = d[epochs_done[i]] - into_epoch[i]
                if budget >= need - 1e-12:
                    budget -= need
                    epochs_done[i] += 1
                    into_epoch[i] = 0.0
                else:
                    into_epoch[i] += budget
                    budget = 0.0
            used = round_s - max(budget, 0.0)
            work_done[i] += used
            busy += float(scale[i]) * used
            if epochs_done[i] >= d.size:
                finish[i] = now + used
        if keep_schedule:
            schedule.append(tuple(chosen))
        r += 1
        simulated += 1
    contention = contention_sum / np.maximum(active_rounds, 1.0)
    metrics, rho, rho_themis = replay_metrics(jobs, finish, gpus, busy, contention)
    return ReplayResult(
        policy=policy.name,
        finish_s=finish,
        jct_s=finish - arrival,
        rho=rho,
        rho_themis=rho_themis,
        metrics=metrics,
        rounds=simulated,
        schedule=tuple(schedule),
        wall_s=time.perf_counter() - started,
    )


def _single_type_problem(ctx: RoundContext, index: Sequence[int]) -> Problem:
    """One accelerator type "gpu" with G devices and the jobs `index` (throughput 1: the
    policies used here only compare a job with itself on one type)."""
    k = len(index)
    jobs = ctx.jobs
    base = make_problem(
        ["gpu"],
        [ctx.gpus],
        np.ones((k, 1)),
        scale_factor=[jobs[i].scale_factor for i in index],
        ids=[jobs[i].job_id for i in index],
    )
    return replace(
        base,
        jobs=replace(base.jobs, arrival_time_s=np.array([jobs[i].arrival_s for i in index])),
        time_s=ctx.now_s,
        round_duration_s=ctx.round_s,
    )


@dataclass
class ShockwaveRoundPolicy:
    """Shockwave through `apportion.solver.solve`, re-solved on any job-set change and at the
    latest every `resolve_rounds` rounds (or when the cached window runs out)."""

    parameters: ShockwaveParameters = field(default_factory=ShockwaveParameters)
    options: SolveOptions = field(default_factory=SolveOptions)
    compat: Compat = Compat.NONE
    """Compat.SHOCKWAVE = upstream's absolute-timestamp guard and rho (A4.3)."""
    resolve_rounds: int = RESOLVE_ROUNDS
    name: str = "shockwave"
    solves: int = 0
    solve_time_s: float = 0.0
    branches: dict[str, int] = field(default_factory=dict)
    _ids: tuple[int, ...] = ()
    _plan: np.ndarray | None = None
    _solved_at: int = 0
    _state: dict[int, tuple[float, float, float, float, int]] = field(default_factory=dict)

    def round_jobs(self, ctx: RoundContext) -> list[int]:
        offset = ctx.round_index - self._solved_at
        if (
            self._plan is None
            or ctx.active != self._ids
            or offset >= self.resolve_rounds
            or offset >= self._plan.shape[0]
        ):
            self._resolve(ctx)
            offset = 0
        assert self._plan is not None
        return [i for i, run in zip(self._ids, self._plan[offset], strict=True) if run]

    def _resolve(self, ctx: RoundContext) -> None:
        index = ctx.active
        jobs = [ctx.jobs[i] for i in index]
        base = _single_type_problem(ctx, index)
        state = ReferenceFinishState.empty(len(index))
        for row, i in enumerate(index):
            if i in self._state:
                est, when, avg, weight, count = self._state[i]
                state.estimate_s[row] = est
                state.estimate_time_s[row] = when
                state.earlier_average_s[row] = avg
                state.earlier_weight_s[row] = weight
                state.job_count[row] = count
        problem = replace(
            base,
            jobs=replace(
                base.jobs,
                epochs_done=ctx.epochs_done[list(index)].astype(np.int64),
                total_epochs=np.array([len(j.epoch_duration_s) for j in jobs], np.int64),
                epoch_duration_s=tuple(np.asarray(j.epoch_duration_s, np.float64) for j in jobs),
                epoch_batch_size=tuple(np.asarray(j.batch_size, np.int64) for j in jobs),
            ),
            history=replace(base.history, reference_state=state),
        )
        started = time.perf_counter()
        request = PolicyRequest("shockwave", self.parameters, self.compat)
        plan = solve(problem, request, self.options)
        self.solve_time_s += time.perf_counter() - started
        self.solves += 1
        cert = plan.certificate
        branch = "fallback" if "fallback" in cert.formulation else "guarded"
        if cert.termination not in (Termination.OPTIMAL, Termination.FEASIBLE):
            branch = f"no plan ({cert.termination})"
        self.branches[branch] = self.branches.get(branch, 0) + 1
        window = plan.window
        if window is not None:
            out = window.reference_state
            for row, i in enumerate(index):
                if not math.isnan(out.estimate_s[row]):
                    self._state[i] = (
                        float(out.estimate_s[row]),
                        float(out.estimate_time_s[row]),
                        float(out.earlier_average_s[row]),
                        float(out.earlier_weight_s[row]),
                        int(out.job_count[row]),
                    )
        assert window is not None
        self._plan = window.schedule
        self._ids = tuple(index)
        self._solved_at = ctx.round_index


@dataclass
class GavelRoundPolicy:
    """A Gavel time-share policy with Gavel's round mechanism (one round at a time).

    The allocation X is recomputed (one `solve` with `schedule_rounds = 1`, whose first round
    is used) whenever the job set changes; the time each job received since that reset is kept
    here, and every later round is the next round of the mechanism on the cached X
    (`apportion.formulations.rounds.round_schedule`, what `solve` would return for the same
    snapshot).

    Work model: one accelerator type with throughput 1 for every job, so work is measured in
    profiled seconds ("standalone seconds"): `total_steps` = the job's standalone time (s),
    `steps_done` = its progress so far (s), remaining steps = remaining standalone time. The
    policies that read remaining work (`themis_finish_time_fairness`, `min_makespan`) see it
    exactly; the others ignore it. Finish-time fairness's C_i state is carried as a client of
    the stateless service would: each snapshot sends the previous response's
    `cumulative_isolated_time_s`, `isolated_throughput` and `remaining_steps` (as
    `previous_isolated_throughput` / `previous_remaining_steps`; NaN for jobs new to the call),
    and the service applies A2.5's update C_i += (R_prev - R_now) / iso_prev."""

    policy: str = "weighted_max_min_fairness"
    parameters: object = None
    name: str = "max_min_fairness"
    solves: int = 0
    solve_time_s: float = 0.0
    solve_rounds: list[int] = field(default_factory=list)
    """Round indices at which X was recomputed (one solve each)."""
    isolated_time_s: dict[int, float] = field(default_factory=dict)
    """FTF state C_i (s) per job (trace index), from the last response that included the job
    (finish-time fairness only)."""
    allocation: FloatArray | None = None
    """(active jobs, 1) the time shares X of the last recompute, rows in `RoundContext.active`
    order at that round; None before the first round."""
    _ids: tuple[int, ...] = ()
    _received: dict[int, float] = field(default_factory=dict)
    _elapsed: float = 0.0
    _colocated: tuple[tuple[int, int, int, float], ...] = ()
    _ftf: dict[int, tuple[float, float]] = field(default_factory=dict)
    """Per job, (iso_i steps/s, R_i steps) of the last response that included it."""

    def _problem(self, ctx: RoundContext, index: Sequence[int]) -> Problem:
        """The snapshot: remaining work in standalone seconds, FTF state, round bookkeeping."""
        base = _single_type_problem(ctx, index)
        total = np.array([ctx.jobs[i].standalone_s for i in index])
        done = (
            np.minimum(ctx.work_done_s[list(index)], total)
            if ctx.work_done_s.size
            else np.zeros(len(index))
        )
        nan = float("nan")
        previous = [self._ftf.get(i, (nan, nan)) for i in index]
        return replace(
            base,
            jobs=replace(base.jobs, total_steps=total, steps_done=done),
            history=replace(
                base.history,
                received_time_s=np.array([[self._received.get(i, 0.0)] for i in index]),
                elapsed_since_reset_s=self._elapsed,
                cumulative_isolated_time_s=np.array(
                    [self.isolated_time_s.get(i, 0.0) for i in index]
                ),
                previous_isolated_throughput=np.array([p[0] for p in previous]),
                previous_remaining_steps=np.array([p[1] for p in previous]),
            ),
        )

    def round_jobs(self, ctx: RoundContext) -> list[int]:
        from apportion.formulations.rounds import round_schedule
        from apportion.solver.registry import lookup

        index = ctx.active
        if index != self._ids or self.allocation is None:
            self._ids = index
            self._received = {i: 0.0 for i in index}
            self._elapsed = 0.0
            problem = self._problem(ctx, index)
            parameters = (
                self.parameters
                if self.parameters is not None
                else lookup(self.policy).parameters_type()
            )
            started = time.perf_counter()
            plan = solve(
                problem, PolicyRequest(self.policy, parameters), SolveOptions(schedule_rounds=1)
            )
            self.solve_time_s += time.perf_counter() - started
            self.solves += 1
            self.solve_rounds.append(ctx.round_index)
            shares = plan.shares
            if not shares.rounds:
                raise RuntimeError(
                    f"round {ctx.round_index}: {self.policy} returned no round schedule "
                    f"({plan.certificate.termination}: {plan.certificate.detail})"
                )
            self.allocation = plan.time_share
            self._colocated = shares.colocated
            if shares.cumulative_isolated_time_s is not None:
                assert shares.isolated_throughput is not None
                assert shares.remaining_steps is not None
                for row, i in enumerate(index):
                    self.isolated_time_s[i] = float(shares.cumulative_isolated_time_s[row])
                    self._ftf[i] = (
                        float(shares.isolated_throughput[row]),
                        float(shares.remaining_steps[row]),
                    )
            grants = shares.rounds[0].grants
        else:
            rounds = round_schedule(self._problem(ctx, index), self.allocation, 1, self._colocated)
            grants = rounds[0].grants if rounds else ()
        chosen = [index[g.job] for g in grants]
        for i in chosen:
            self._received[i] += ctx.round_s
        self._elapsed += ctx.round_s
        return chosen


def synthetic_jobs(num_jobs: int = 120, seed: int = 0, span_s: float = 5000.0) -> list[ReplayJob]:
    """A seeded stand-in for the 120-job Shockwave trace (data.md §2.2/§3.2) when the
    reference profiles are absent: gangs 1/2/4 in the trace's proportions (92/20/8 of 120),
    arrivals uniform over `span_s`, 20-200 epochs per job in up to three batch-size regimes,
    epoch durations that shrink as the batch size grows (standalone time about 600-12,000 s)."""
    rng = np.random.default_rng(seed)
    out: list[ReplayJob] = []
    arrivals = np.sort(rng.uniform(0.0, span_s, num_jobs))
    arrivals[0] = 0.0
    for k in range(num_jobs):
        epochs = int(rng.integers(20, 200))
        regimes = rng.choice([16, 32, 64, 128], size=int(rng.integers(1, 4)), replace=False)
        regimes.sort()
        cut = np.sort(rng.integers(0, epochs, size=regimes.size - 1))
        bs = np.array([regimes[int(np.searchsorted(cut, e, side="right"))] for e in range(epochs)])
        per_epoch = float(rng.uniform(10.0, 60.0))
        durations = per_epoch * (1.0 + 32.0 / bs)
        out.append(
            ReplayJob(
                job_id=f"job{k}",
                arrival_s=float(arrivals[k]),
                scale_factor=int(rng.choice([1, 2, 4], p=[92 / 120, 20 / 120, 8 / 120])),
                epoch_duration_s=tuple(float(d) for d in durations),
                batch_size=tuple(int(b) for b in bs),
            )
        )
    return out


def jobs_from_profiles(profiles: Sequence[object]) -> list[ReplayJob]:
    """`ReplayJob`s from `apportion.datasets.shockwave.EpochProfile` objects (trace order)."""
    from apportion.datasets.shockwave import EpochProfile

    out = []
    for p in profiles:
        assert isinstance(p, EpochProfile)
        out.append(
            ReplayJob(
                job_id=str(p.job_id),
                arrival_s=p.arrival_s,
                scale_factor=p.scale_factor,
                epoch_duration_s=p.duration_every_epoch_s,
                batch_size=p.bs_every_epoch,
            )
        )
    return out
