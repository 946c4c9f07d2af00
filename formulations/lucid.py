"""Lucid's pairing step (D8) as a maximum-weight matching.

A waiting job may share the devices of a running job that runs alone when Lucid's four rules
hold and it can use the running job's accelerator type (throughput > 0 there): the same GPU
count, their device memory fits one device (strictly), their sharing scores
sum to at most 2, and the waiting job's priority value (estimated duration x GPUs, smaller =
sooner) is at most twice the running job's. With `pair_pending`, two waiting jobs may also
start together (same rules, the larger priority value at most twice the smaller, both with
the same type of most devices among those each can use).

Edge weight: the pair's predicted benefit, speed(a with b) + speed(b with a) - 1 (the total
relative throughput gained over the running job alone); only positive benefits are edges.
The exact pairing maximizes the total benefit (`apportion.formulations.matching`, bipartite
without pending pairs); Lucid's indolent first fit (compat) pairs each waiting job, in
priority order, with the first running job that obeys the rules. Waiting jobs left unpaired
then start alone in priority order while devices are free.

Scale. Everything about a pair (its type, rules, speeds, benefit) is computed from its two
members, for the pairs asked for only: memory stays linear in the jobs plus the pairs of one
chunk or block, never jobs x jobs. Pairs need the same GPU count, so the candidates split by
GPU count. A snapshot of at most `MAX_VERTICES` jobs is one block (one exact matching over all
its candidates); beyond that, each GPU count whose candidates fit one block is one block, and a
larger one is matched in consecutive blocks of at most `MAX_VERTICES` jobs (waiting and running
jobs each in priority order, block i taking the i-th slice of each), as Muri's buckets are.
Only when every GPU count was one block, each matched exactly, is the pairing proven optimal;
otherwise the plan is feasible and its bound is `blocked_bound` (below).

Under a deadline: Lucid's first fit and the candidate pairs of each block look at the deadline
between batches; a block whose matching could not start and stop in the time left is not
matched (`can_start`); for each GPU count the better of the blocks' matchings and the first fit
is kept; waiting jobs not placed by the deadline wait (their reason says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from apportion.formulations.group_placement import current_nodes, free_devices
from apportion.formulations.group_plans import NO_USABLE_TYPE, ExactRun, compared_plan, solo
from apportion.formulations.matching import MAX_VERTICES, Matching, max_weight_matching
from apportion.formulations.node_pool import NodePool
from apportion.formulations.pair_speeds import SCORE_SPEED, PairSpeeds
from apportion.solver.backends.highs_startup import DENSE_MATCHING, can_start
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.groups import ColocationGroup, GroupSection
from apportion.solver.model import Compat, FloatArray, IntArray, Problem, SolveOptions
from apportion.solver.outcome import ModelSize
from apportion.solver.parameters import LucidParameters
from apportion.solver.result import JobStatus, Plan
from apportion.solver.sharing import SharingInputs

BoolArray = NDArray[np.bool_]

PAIRS_PER_CHUNK = 1 << 18
"""Candidate pairs whose rules and speeds are computed together, with a look at the deadline
before each chunk (and a bound on the temporary arrays)."""
FIRST_FIT_BATCH = 256
"""Waiting jobs of Lucid's first fit whose rules are checked together (one deadline look)."""
FIRST_FIT_WINDOW = 128
"""Free running jobs (in order) each batch of the first fit checks first."""
FIRST_FIT_SCAN = 1024
"""Running jobs in the first chunk of a scan beyond the window (doubling after)."""
PLAN_S_PER_JOB = 2.5e-5
"""Time (s) the pairing leaves, per job, for the running jobs' groups, placing the waiting
jobs and building the plan (measured: 1.6 s for the groups of 45,000 running jobs and 1.0 s
for a plan of 57,000 groups, 100,000 jobs, on a 2-core machine under a load of 8-10)."""
PLAN_SHARE = 0.8
"""At most this share of the time left is held back for them (the pairing improves a plan;
the plan itself must be built)."""
PLAN_S_PER_GROUP = 2e-5
"""Time (s) the placement of waiting jobs leaves, per group made, for building the plan
(measured: 1.0 s for 57,000 groups under a load of 8-10 on 2 cores)."""
PLAN_S_PER_LEFT = 3e-6
"""Time (s) it leaves, per waiting job not looked at, for saying that it waits."""
PLACE_CHECK_EVERY = 512
"""Waiting jobs placed between two looks at the deadline."""
LATE = "not placed before the time limit"


@dataclass(frozen=True)
class LucidInstance:
    """The pairing problem on arrays (m jobs, n accelerator types): every array is (m,) or
    (m, n); a pair's type, rules and speeds come from its two members (`pair_type`,
    `allowed`, `benefit`)."""

    gpus: IntArray
    running: BoolArray
    """(m,) running alone: may take one partner."""
    pending: BoolArray
    """(m,) waiting."""
    memory_gib: FloatArray
    """(m,) device memory per device (GiB)."""
    scores: IntArray
    """(m,) sharing scores (-1 = none: the score rule does not apply)."""
    priority: FloatArray
    """(m,) priority value, smaller = sooner (NaN = unknown: the priority rule does not
    apply)."""
    current_type: IntArray
    """(m,) type index a running job holds (-1 = none)."""
    partner: IntArray
    """(m,) the partner of a running pair that continues (-1 = none)."""
    default_type: IntArray
    """(m,) the type with most devices among those the job can use (-1 = none)."""
    usable: BoolArray
    """(m, n) the job has throughput on the type and it has enough devices."""
    speeds: PairSpeeds
    device_memory_gib: float
    max_score_sum: int = 2
    pair_pending: bool = False

    @property
    def num_jobs(self) -> int:
        return int(self.gpus.size)


def pair_type(inst: LucidInstance, a: IntArray, b: IntArray) -> IntArray:
    """The type index two jobs share (-1 = none; `a`, `b` broadcast): the running member's, a
    continuing pair's, or for two waiting jobs (`pair_pending`) their common default type."""
    cur = inst.current_type
    ra, rb = inst.running[a], inst.running[b]
    later = np.maximum(a, b)
    t = np.where(ra & rb, cur[later], np.where(ra, cur[a], np.where(rb, cur[b], -1)))
    qa = (inst.partner[a] == b) & (cur[a] >= 0)  # a continuing pair shares its holder's type
    qb = (inst.partner[b] == a) & (cur[b] >= 0)
    t = np.where(qa & qb, cur[later], np.where(qa, cur[a], np.where(qb, cur[b], t)))
    if inst.pair_pending:
        both = inst.pending[a] & inst.pending[b] & (inst.default_type[a] == inst.default_type[b])
        t = np.where(both, inst.default_type[a], t)
    return np.asarray(t, np.int64)


def allowed(inst: LucidInstance, a: IntArray, b: IntArray) -> BoolArray:
    """The pairs (a, b) (broadcast) that obey Lucid's rules (module docstring); symmetric. The
    pair's type is looked at only for pairs that pass the other rules."""
    a, b = np.broadcast_arrays(a, b)
    ok = _member_rules(inst, a, b)
    pa, pb = a[ok], b[ok]
    t = pair_type(inst, pa, pb)
    safe = np.maximum(t, 0)
    ok[ok] = (t >= 0) & inst.usable[pa, safe] & inst.usable[pb, safe]
    return ok


def _member_rules(inst: LucidInstance, a: IntArray, b: IntArray) -> BoolArray:
    """Every rule but the shared type: kind (a waiting job with one running alone, or two
    waiting jobs with `pair_pending`), GPU count, memory, scores, priority values."""
    pending_first = inst.pending[a] & inst.running[b]
    running_first = inst.running[a] & inst.pending[b]
    pp = inst.pending[a] & inst.pending[b] if inst.pair_pending else False
    kind = pending_first | running_first | pp
    same = inst.gpus[a] == inst.gpus[b]
    memory = inst.memory_gib[a] + inst.memory_gib[b] < inst.device_memory_gib
    sa, sb = inst.scores[a], inst.scores[b]
    score = (sa < 0) | (sb < 0) | (sa + sb <= inst.max_score_sum)
    pa, pb = inst.priority[a], inst.priority[b]
    with np.errstate(invalid="ignore"):
        unknown = np.isnan(pa) | np.isnan(pb)
        rule_pr = pending_first & (pa <= 2 * pb)
        rule_rp = running_first & (pb <= 2 * pa)
        rule_pp = np.fmax(pa, pb) <= 2 * np.fmin(pa, pb)
    prio = unknown | rule_pr | rule_rp | (pp & rule_pp)
    return np.asarray(kind & same & memory & score & prio & (a != b))


def pair_speed(inst: LucidInstance, a: IntArray, b: IntArray) -> FloatArray:
    """Speed of a while sharing with b (relative to a alone; NaN = unknown)."""
    return inst.speeds.speed(a, b, pair_type(inst, a, b))


def benefit(inst: LucidInstance, a: IntArray, b: IntArray,
            ok: BoolArray | None = None) -> FloatArray:
    """speed(a, b) + speed(b, a) - 1 of the pairs (broadcast): where `ok` (default: the pairs
    are `allowed`) and the speeds are known, else 0."""
    t = pair_type(inst, a, b)
    total = inst.speeds.speed(a, b, t) + inst.speeds.speed(b, a, t) - 1.0
    ok = allowed(inst, a, b) if ok is None else ok
    return np.asarray(np.where(ok & np.isfinite(total), total, 0.0))


def benefit_of(inst: LucidInstance, mate: IntArray) -> float:
    """Total predicted benefit of a pairing (a pair outside the edge set counts its own,
    possibly negative, benefit; unknown speeds count 0)."""
    a = np.nonzero(mate > np.arange(mate.size))[0]
    if not a.size:
        return 0.0
    return float(benefit(inst, a, mate[a], np.ones(a.size, bool)).sum())


def _priority(problem: Problem) -> FloatArray:
    """Estimated remaining duration x GPUs (s x GPUs): remaining steps over the best
    throughput; NaN when the remaining work is unknown."""
    jobs = problem.jobs
    best = jobs.throughput.max(axis=1) if jobs.throughput.size else np.zeros(jobs.num_jobs)
    known = (jobs.total_steps > 0) & (best > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        duration = np.where(known, jobs.remaining_steps / best, np.nan)
    return np.asarray(duration * jobs.scale_factor, np.float64)


def instance(problem: Problem, params: LucidParameters) -> LucidInstance:
    """The pairing instance of a snapshot (arrays of the jobs only)."""
    jobs, hist = problem.jobs, problem.history
    m = jobs.num_jobs
    sharing = problem.sharing or SharingInputs()
    running_any, partner = _running_with_partners(problem)
    usable = np.asarray(problem.usable, bool).reshape(m, problem.cluster.num_types)
    # the first type with most devices among those each job can use
    counts = np.where(usable, problem.cluster.count[None, :], -1)
    default_type = np.where(usable.any(axis=1), np.argmax(counts, axis=1), -1) if m else \
        np.zeros(0, np.int64)
    scores = sharing.scores(m)
    return LucidInstance(
        gpus=jobs.scale_factor,
        running=running_any & (partner < 0),
        pending=~running_any,
        memory_gib=sharing.gpu_memory(m),
        scores=scores,
        priority=_priority(problem),
        current_type=np.asarray(hist.current_type, np.int64),
        partner=partner,
        default_type=np.asarray(default_type, np.int64),
        usable=usable,
        speeds=PairSpeeds(problem, scores),
        device_memory_gib=params.device_memory_gib,
        max_score_sum=params.max_score_sum,
        pair_pending=params.pair_pending,
    )


def _running_with_partners(problem: Problem) -> tuple[BoolArray, IntArray]:
    """((m,) running, (m,) partner index or -1). A pair's shared devices may be reported on
    one member only (`history.colocated_with` names the other): its partner runs too."""
    hist = problem.history
    m = problem.jobs.num_jobs
    running = hist.running(m)
    given = hist.colocated_with
    partner = np.full(m, -1, np.int64)
    holders = np.nonzero(running & (given >= 0))[0]
    partner[holders] = given[holders]
    partner[given[holders]] = holders
    running = running.copy()
    running[given[holders]] = True
    return np.asarray(running, bool), partner


def _priority_order(inst: LucidInstance, jobs: IntArray) -> IntArray:
    """`jobs` by priority value (unknown last), ties in job order."""
    key = np.where(np.isnan(inst.priority[jobs]), np.inf, inst.priority[jobs])
    return jobs[np.argsort(key, kind="stable")]


# Lucid's first fit ----------------------------------------------------------------------------

@dataclass(frozen=True)
class FirstFit:
    mate: IntArray
    """(m,) partner, -1 = none."""
    cut: bool = False
    """The deadline stopped it: waiting jobs after the last batch were not paired."""


def first_fit(inst: LucidInstance, deadline: Deadline = NO_DEADLINE) -> FirstFit:
    """Lucid's indolent binder: each waiting job in priority order takes the first running job
    (in job order) still alone that obeys the rules. GPU counts are independent; within one,
    the waiting jobs are checked in batches against a window of the first free running jobs
    (the first free one that fits is in the window when any in it fits), the rest scanned in
    chunks only for a job that fits none of the window and that some free running job could
    fit rule by rule (`_FreeRunners`). The deadline is read before each batch."""
    m = inst.num_jobs
    mate = np.full(m, -1, np.int64)
    waiting = _priority_order(inst, np.nonzero(inst.pending)[0])
    runners = np.nonzero(inst.running)[0]
    for g in sorted(set(inst.gpus[waiting].tolist())):
        runs = _Runners(inst, runners[inst.gpus[runners] == g])
        if not runs.jobs.size:
            continue
        free = np.ones(runs.jobs.size, bool)
        queue = waiting[inst.gpus[waiting] == g]
        for first in range(0, queue.size, FIRST_FIT_BATCH):
            if deadline.expired():
                return FirstFit(mate, cut=True)
            window = np.flatnonzero(free)[:FIRST_FIT_WINDOW]
            if not window.size:
                break
            may_fit = _FreeRunners(inst, runs.jobs[free])
            batch = queue[first:first + FIRST_FIT_BATCH]
            fits = runs.fits(batch, window)
            open_ = np.ones(window.size, bool)
            for row, p in enumerate(batch.tolist()):
                hits = np.flatnonzero(fits[row] & open_)
                if hits.size:
                    k = int(hits[0])
                    open_[k] = False
                    at = int(window[k])
                elif not may_fit.any_for(p):
                    continue
                else:
                    at = runs.first_after(p, free, int(window[-1]) + 1)
                    if at < 0:
                        continue
                free[at] = False
                r = int(runs.jobs[at])
                mate[p], mate[r] = r, p
    return FirstFit(mate)


class _Runners:
    """The running jobs alone of one GPU count (in job order) with what the rules read of them,
    for the pairs of waiting jobs with them: `fits` is `allowed` on those pairs (a waiting job
    and a running one alone share the running job's type)."""

    def __init__(self, inst: LucidInstance, jobs: IntArray) -> None:
        self.inst = inst
        self.jobs = jobs
        self.memory = inst.memory_gib[jobs]
        self.scores = inst.scores[jobs]
        self.priority = inst.priority[jobs]
        held = inst.current_type[jobs]
        self.held = np.maximum(held, 0)
        self.on_own_type = (held >= 0) & inst.usable[jobs, self.held]

    def fits(self, waiting: IntArray, at: IntArray) -> BoolArray:
        """(len(waiting), len(at)) the rules of the waiting jobs with the running jobs at
        positions `at`."""
        inst = self.inst
        memory = inst.memory_gib[waiting][:, None] + self.memory[at] < inst.device_memory_gib
        s, sr = inst.scores[waiting][:, None], self.scores[at]
        score = (s < 0) | (sr < 0) | (s + sr <= inst.max_score_sum)
        p, pr = inst.priority[waiting][:, None], self.priority[at]
        with np.errstate(invalid="ignore"):
            prio = np.isnan(p) | np.isnan(pr) | (p <= 2 * pr)
        typed = self.on_own_type[at] & inst.usable[waiting[:, None], self.held[at]]
        return np.asarray(memory & score & prio & typed)

    def first_after(self, p: int, free: BoolArray, start: int) -> int:
        """Position of the first free running job from `start` that fits `p`, -1 = none
        (chunks of doubling size)."""
        size = FIRST_FIT_SCAN
        one = np.array([p])
        while start < self.jobs.size:
            stop = min(self.jobs.size, start + size)
            where = start + np.flatnonzero(free[start:stop])
            if where.size:
                ok = np.flatnonzero(self.fits(one, where)[0])
                if ok.size:
                    return int(where[ok[0]])
            start, size = stop, 2 * size
        return -1


class _FreeRunners:
    """What the free running jobs of a GPU count offer, rule by rule: a waiting job that no
    free running job fits on one rule fits none (and fewer free jobs fit no more)."""

    def __init__(self, inst: LucidInstance, free: IntArray) -> None:
        self.inst = inst
        priority = inst.priority[free]
        self.max_priority = float("inf") if np.isnan(priority).any() or not free.size \
            else float(priority.max())
        self.min_memory = float(inst.memory_gib[free].min(initial=np.inf))
        scores = inst.scores[free]
        self.min_score = float("-inf") if (scores < 0).any() else float(scores.min(initial=0))
        held = inst.current_type[free]
        self.types = np.zeros(inst.usable.shape[1], bool)
        ok = (held >= 0) & inst.usable[free, np.maximum(held, 0)]
        self.types[held[ok]] = True

    def any_for(self, p: int) -> bool:
        inst = self.inst
        priority = float(inst.priority[p])
        score = int(inst.scores[p])
        return bool(
            (math.isnan(priority) or priority <= 2 * self.max_priority)
            and float(inst.memory_gib[p]) + self.min_memory < inst.device_memory_gib
            and (score < 0 or score + self.min_score <= inst.max_score_sum)
            and (inst.usable[p] & self.types).any()
        )


# The exact pairing in blocks ------------------------------------------------------------------

@dataclass(frozen=True)
class Block:
    """Jobs matched together: one GPU count's candidates or a slice of them (`gpus` 0: every
    job of a snapshot within one block)."""

    gpus: int
    jobs: IntArray
    """Ascending job indices."""


def candidate_blocks(inst: LucidInstance) -> list[Block]:
    """The blocks of the module docstring: every job in one block when there are at most
    `MAX_VERTICES`, else per GPU count with a candidate pair, one block when its waiting and
    running jobs fit, else consecutive slices of both in priority order."""
    m = inst.num_jobs
    if m <= MAX_VERTICES:
        return [Block(0, np.arange(m, dtype=np.int64))]
    out: list[Block] = []
    for g in np.unique(inst.gpus[inst.pending]).tolist():
        of_g = inst.gpus == g
        waiting = _priority_order(inst, np.nonzero(inst.pending & of_g)[0])
        runs = _priority_order(inst, np.nonzero(inst.running & of_g)[0])
        if not runs.size and not (inst.pair_pending and waiting.size > 1):
            continue
        size = waiting.size + runs.size
        count = 1 if size <= MAX_VERTICES else math.ceil(size / (MAX_VERTICES - 2))
        for part_w, part_r in zip(np.array_split(waiting, count), np.array_split(runs, count),
                                  strict=True):
            out.append(Block(int(g), np.sort(np.concatenate([part_w, part_r]))))
    return out


def block_edges(inst: LucidInstance, jobs: IntArray, deadline: Deadline = NO_DEADLINE
                ) -> tuple[IntArray, IntArray, FloatArray] | None:
    """The candidate pairs (a, b, benefit) inside a block with a positive benefit (a waiting;
    two waiting jobs once, a < b), in chunks of `PAIRS_PER_CHUNK`; None when the deadline
    passed first."""
    waiting = jobs[inst.pending[jobs]]
    partners = jobs[inst.running[jobs] | (inst.pending[jobs] & inst.pair_pending)]
    found_a: list[IntArray] = []
    found_b: list[IntArray] = []
    found_w: list[FloatArray] = []
    rows = max(1, PAIRS_PER_CHUNK // max(1, partners.size))
    for first in range(0, waiting.size if partners.size else 0, rows):
        if deadline.expired():
            return None
        a = waiting[first:first + rows, None]
        b = partners[None, :]
        ok = allowed(inst, a, b) & ~(inst.pending[b] & (b <= a))
        ia, ib = np.nonzero(ok)
        pa, pb = a[ia, 0], partners[ib]
        w = benefit(inst, pa, pb, np.ones(pa.size, bool))
        keep = w > 0
        found_a.append(pa[keep])
        found_b.append(pb[keep])
        found_w.append(w[keep])
    if not found_a:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    return np.concatenate(found_a), np.concatenate(found_b), np.concatenate(found_w)


def best_benefit_bounds(inst: LucidInstance) -> FloatArray:
    """(m,) beta_u >= 0: at least the benefit of job u's best candidate pair, from u's own
    data and per-class extremes only (linear in the jobs, types and colocations).

    speed(u, v) is a default from the scores (at most SCORE_SPEED[score_u], a partner's score
    being >= 0), a type-pair rate over u's throughput alone on the pair's type (at most the
    best rate of u's job type with any job type on a type u can use, over u's throughput
    there), or an explicit pair's rate; speed(v, u) likewise, with v's throughput at least the
    smallest of v's job type on that type. benefit(u, v) = speed(u, v) + speed(v, u) - 1 is at
    most the sum of the two maxima minus 1; 0 for a job that is neither waiting nor running
    alone, or that has no job of its GPU count in the other role (or, with pending pairs,
    waiting) whose memory fits beside its own."""
    m = inst.num_jobs
    speeds = inst.speeds
    throughput = speeds.problem.jobs.throughput
    s = inst.scores
    default = np.where((s >= 0) & (s <= 2), np.asarray(SCORE_SPEED)[np.clip(s, 0, 2)], -np.inf)
    out = default.copy()
    into = default.copy()
    runs_on = inst.usable & (throughput > 0)
    if speeds.problem.colocations is not None and speeds.table is not None:
        table = np.where(np.isnan(speeds.table), -np.inf, speeds.table)  # (C, C, n)
        code = speeds.job_code
        coded = code >= 0
        cu = np.maximum(code, 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(runs_on & coded[:, None], table.max(axis=1)[cu] / throughput,
                             -np.inf)
            out = np.maximum(out, ratio.max(axis=1, initial=-np.inf))
            # (C, n) least throughput of each job type on each type
            slowest = np.full((table.shape[0], table.shape[2]), np.inf)
            np.minimum.at(slowest, code[coded], np.where(runs_on, throughput, np.inf)[coded])
            best_in = (table / slowest[:, None, :]).max(axis=0)  # (C, n): over partner class
            rate_in = np.where(runs_on & coded[:, None], best_in[cu], -np.inf)
            into = np.maximum(into, rate_in.max(axis=1, initial=-np.inf))
    if speeds.pair_key.size:
        x, y = np.divmod(speeds.pair_key, max(m, 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(runs_on[x], speeds.pair_rates / throughput[x], -np.inf)
        best = ratio.max(axis=1, initial=-np.inf)
        np.maximum.at(out, x, best)
        np.maximum.at(into, y, best)
    beta = np.maximum(0.0, np.nan_to_num(out + into - 1.0, nan=0.0, neginf=0.0))
    fits = np.zeros(m, bool)
    for g in np.unique(inst.gpus).tolist():
        of_g = inst.gpus == g
        lightest_run = inst.memory_gib[inst.running & of_g].min(initial=np.inf)
        lightest_wait = inst.memory_gib[inst.pending & of_g].min(initial=np.inf)
        room = inst.device_memory_gib - inst.memory_gib
        partner_light = np.where(inst.running, lightest_wait, np.where(
            inst.pending, min(lightest_run, lightest_wait if inst.pair_pending else np.inf),
            np.inf))
        fits |= of_g & (partner_light < room)
    return np.asarray(np.where(fits, beta, 0.0))


def side_sum(inst: LucidInstance, beta: FloatArray, jobs: IntArray) -> float:
    """A bound on any pairing of `jobs` (`blocked_bound`): every pair has a waiting member, and
    without pending pairs exactly one, so a pairing's benefit is at most the sum of beta over
    its waiting jobs, over its running jobs, and half the sum over all."""
    waiting = float(beta[jobs[inst.pending[jobs]]].sum())
    half = 0.5 * float(beta[jobs].sum())
    if inst.pair_pending:
        return min(waiting, half)
    return min(waiting, float(beta[jobs[inst.running[jobs]]].sum()), half)


@dataclass(frozen=True)
class BlockedPairing:
    """The exact pairing of each block, with a bound on the best pairing of the instance."""

    mate: IntArray
    objective: float
    bound: float
    status: SolverStatus
    blocks: int
    single: Matching | None
    """The one matching of a snapshot within one block (its certificate is the plan's)."""
    matchings: tuple[Matching, ...]
    detail: str = ""


def blocked_bound(inst: LucidInstance, blocks: list[Block], block_bounds: list[float],
                  beta: FloatArray) -> float:
    """A valid upper bound on the best pairing's benefit from each block's bound U_b.

    Proof. Pairs need one GPU count, so the best pairing is the sum of the best per GPU count
    g. Take a pairing M of g's candidates V_g, cut into blocks B_1..B_k. Its pairs inside
    block b form a pairing of b: at most U_b (the block matching's proven bound, or
    `side_sum` over b when it was not matched). Each pair (u, v) has benefit at most
    min(beta_u, beta_v) (`best_benefit_bounds`), so the pairs across blocks, distinct pairs
    with distinct members, total at most `side_sum` over V_g, S_g. Hence M's benefit is at
    most sum_b U_b + S_g, and (S_g bounding all of M) at most S_g: the bound is
    sum_g min(sum_b U_b + S_g, S_g), which is sum_b U_b when g is one block."""
    total = 0.0
    for g in sorted({block.gpus for block in blocks}):
        mine = [k for k, block in enumerate(blocks) if block.gpus == g]
        inside = sum(block_bounds[k] for k in mine)
        if len(mine) == 1:
            total += inside
            continue
        across = side_sum(inst, beta, np.concatenate([blocks[k].jobs for k in mine]))
        total += min(inside + across, across)
    return total


def match_blocks(inst: LucidInstance, deadline: Deadline = NO_DEADLINE, threads: int = 0,
                 fallback: IntArray | None = None, blocks: list[Block] | None = None
                 ) -> BlockedPairing:
    """The maximum-weight matching of each block (module docstring), the blocks' pairs, and
    `blocked_bound`. A block is not matched once the deadline has passed or when its matching
    could not start and stop in the time left; `fallback` (a pairing, e.g. the first fit)
    replaces the blocks' pairs of a GPU count whose benefit it beats. `blocks`: the
    `candidate_blocks` of `inst` when already known."""
    m = inst.num_jobs
    mate = np.full(m, -1, np.int64)
    blocks = candidate_blocks(inst) if blocks is None else blocks
    beta = best_benefit_bounds(inst)
    bounds: list[float] = []
    matchings: list[Matching] = []
    statuses: list[SolverStatus] = []
    skipped = 0
    objective = 0.0
    for block in blocks:
        found = None if skipped else _match_block(inst, block.jobs, deadline, threads)
        if found is None:
            skipped += 1
            bounds.append(side_sum(inst, beta, block.jobs))
            continue
        matchings.append(found)
        statuses.append(found.status)
        local = found.mate
        paired = np.nonzero(local >= 0)[0]
        mate[block.jobs[paired]] = block.jobs[local[paired]]
        objective += found.objective
        if found.status is SolverStatus.OPTIMAL and found.bound is not None:
            bounds.append(found.bound)
        else:
            bounds.append(min(math.inf if found.bound is None else found.bound,
                              side_sum(inst, beta, block.jobs)))
    bound = blocked_bound(inst, blocks, bounds, beta)
    split = len(blocks) != len({block.gpus for block in blocks})
    notes: list[str] = []
    if skipped:
        notes.append(f"time limit: {skipped} of {len(blocks)} block(s) not matched")
    if fallback is not None:
        replaced = _keep_better(inst, mate, fallback)
        if replaced:
            notes.append(f"Lucid's first fit kept for GPU count(s) {replaced} (better than the "
                         "blocks' matchings)")
            objective = benefit_of(inst, mate)
    if skipped or SolverStatus.TIME_LIMIT in statuses:
        status = SolverStatus.TIME_LIMIT
    elif any(s is not SolverStatus.OPTIMAL for s in statuses):
        status = next(s for s in statuses if s is not SolverStatus.OPTIMAL)
    elif split:
        status = SolverStatus.ITERATION_LIMIT
    else:
        status = SolverStatus.OPTIMAL
    single = matchings[0] if m <= MAX_VERTICES and matchings else None
    if single is not None:
        detail = (f"matching: {single.lp_runs} LP runs, {single.cuts} odd-set cuts, "
                  f"{single.columns} edges priced in, {single.method}")
    else:
        runs = sum(found.lp_runs for found in matchings)
        cuts = sum(found.cuts for found in matchings)
        detail = (f"matching in {len(blocks)} block(s) of at most {MAX_VERTICES} jobs over "
                  f"{len({b.gpus for b in blocks})} GPU count(s), {len(matchings)} matched "
                  f"({runs} LP runs, {cuts} odd-set cuts)")
        if split:
            detail += ("; pairs across blocks of one GPU count not considered (bound: the "
                       "blocks' bounds plus the jobs' best benefits)")
    return BlockedPairing(mate, objective, bound, status, len(blocks), single,
                          tuple(matchings), "; ".join([detail, *notes]))


def _match_block(inst: LucidInstance, jobs: IntArray, deadline: Deadline, threads: int
                 ) -> Matching | None:
    """The exact matching of one block; None when the deadline passed or the matching could
    not start and stop in the time left."""
    if deadline.expired():
        return None
    edges = block_edges(inst, jobs, deadline)
    if edges is None:
        return None
    a, b, w = edges
    n = jobs.size
    if not w.size:
        return Matching(np.full(n, -1, np.int64), 0.0, 0.0, SolverStatus.OPTIMAL,
                        method="no edge")
    if not can_start(deadline, DENSE_MATCHING, ModelSize(variables=n, nonzeros=w.size)):
        return None
    weight = np.zeros((n, n))
    ia, ib = np.searchsorted(jobs, a), np.searchsorted(jobs, b)
    weight[ia, ib] = w
    weight[ib, ia] = w
    return max_weight_matching(weight, deadline, threads)


def _keep_better(inst: LucidInstance, mate: IntArray, fallback: IntArray) -> list[int]:
    """Per GPU count, `fallback`'s pairs in place of `mate`'s where their benefit is higher
    (in place); the GPU counts replaced."""
    counts, of_job = np.unique(inst.gpus, return_inverse=True)

    def per_count(pairing: IntArray) -> FloatArray:
        a = np.nonzero(pairing > np.arange(pairing.size))[0]
        values = benefit(inst, a, pairing[a], np.ones(a.size, bool))
        return np.asarray(np.bincount(of_job[a], values, minlength=counts.size), np.float64)

    have, other = per_count(mate), per_count(fallback)
    replaced = []
    for g, value, old in zip(counts.tolist(), other.tolist(), have.tolist(), strict=True):
        if value > old + 1e-9 * max(1.0, abs(value)):
            of_g = inst.gpus == g
            mate[of_g] = fallback[of_g]
            replaced.append(g)
    return replaced


# The plan -------------------------------------------------------------------------------------

def solve_policy(
    problem: Problem,
    params: LucidParameters,
    compat: Compat,
    options: SolveOptions,
    deadline: Deadline,
) -> Plan:
    """Lucid's pairing (exact, or first fit with compat lucid), then exclusive starts."""
    m = problem.jobs.num_jobs
    before_plan = deadline.leaving(PLAN_S_PER_JOB * m, PLAN_SHARE)
    inst = instance(problem, params)
    heuristic = FirstFit(np.full(m, -1, np.int64))
    blocks = candidate_blocks(inst) if params.sharing and compat is not Compat.LUCID else []
    if params.sharing:  # half the time for the first fit when a block's matching could start
        smallest = min((block.jobs.size for block in blocks), default=0)
        matchable = blocks and can_start(before_plan, DENSE_MATCHING, ModelSize(smallest))
        heuristic = first_fit(inst, before_plan.child(0.5) if matchable else before_plan)
    heuristic_value = benefit_of(inst, heuristic.mate)
    notes = ["time limit: Lucid's first fit stopped before every waiting job was looked at"
             ] if heuristic.cut else []
    exact: ExactRun | None = None
    mate = heuristic.mate
    if compat is not Compat.LUCID:
        if params.sharing:
            pairing = match_blocks(inst, before_plan, options.threads, heuristic.mate, blocks)
        else:
            pairing = BlockedPairing(
                np.full(m, -1, np.int64), 0.0, 0.0, SolverStatus.OPTIMAL, 0, None, (),
                "matching: 0 LP runs, 0 odd-set cuts, 0 edges priced in, no edge")
        mate = pairing.mate
        formulation = "maximum-weight matching (degree LP + odd-set cuts, HiGHS)"
        if m > MAX_VERTICES and pairing.blocks:
            formulation = ("maximum-weight matching per GPU count in blocks (degree LP + "
                           "odd-set cuts, HiGHS)")
        exact = ExactRun(
            pairing.objective, pairing.bound, pairing.status, formulation,
            sum(found.solve_time_s for found in pairing.matchings),
            detail="; ".join([pairing.detail, *notes]),
        )
    groups, job_status, reasons, late = _groups(problem, inst, mate, params, compat, deadline)
    if late:
        note = f"time limit: {late} waiting job(s) not placed"
        if exact is not None:
            exact = ExactRun(exact.objective, exact.bound, SolverStatus.TIME_LIMIT,
                             exact.formulation, exact.solve_time_s,
                             detail=f"{exact.detail}; {note}")
        notes.append(note)
    return compared_plan(problem, GroupSection(tuple(groups)), job_status, reasons,
                         "lucid_first_fit", heuristic_value, exact, options.relative_gap,
                         detail="; ".join(notes))


def _groups(
    problem: Problem,
    inst: LucidInstance,
    mate: IntArray,
    params: LucidParameters,
    compat: Compat,
    deadline: Deadline = NO_DEADLINE,
) -> tuple[list[ColocationGroup], list[JobStatus], list[str], int]:
    """Running jobs keep their devices (with their partner, if any); waiting jobs (with their
    partner) start in priority order while devices are free, until the time left is what the
    plan of the groups made needs (`PLAN_S_PER_GROUP`): those not looked at by then wait. The
    last value: how many waiting jobs the deadline left."""
    jobs, hist = problem.jobs, problem.history
    m = jobs.num_jobs
    status = [JobStatus.ALLOCATED] * m
    reasons = [""] * m
    groups: list[ColocationGroup] = []
    partner = inst.partner
    other = np.where(partner >= 0, partner, mate)
    paired = np.nonzero(other >= 0)[0]
    speed_to = np.ones(m)
    speed_from = np.ones(m)
    speed_to[paired] = _valid(pair_speed(inst, paired, other[paired]))
    speed_from[paired] = _valid(pair_speed(inst, other[paired], paired))
    slow_to, slow_from = 1 / speed_to, 1 / speed_from
    holding = np.nonzero((inst.running | (partner >= 0)) & (hist.current_type >= 0))[0]
    devices_held = np.where(hist.current_devices > 0, hist.current_devices, jobs.scale_factor)
    placed_nodes = bool(hist.current_nodes)
    taken = [False] * m
    for a, b, j, devices in zip(holding.tolist(), other[holding].tolist(),
                                hist.current_type[holding].tolist(),
                                devices_held[holding].tolist(), strict=True):
        if taken[a]:
            continue
        nodes = current_nodes(problem, a) if placed_nodes else ()
        if b >= 0:
            groups.append(ColocationGroup((a, b), (float(slow_to[a]), float(slow_from[a])), j,
                                          devices, nodes))
            taken[a] = taken[b] = True
        else:
            groups.append(solo(a, j, devices, nodes))
            taken[a] = True
    done = np.array(taken, bool)
    pools = _Pools(problem)
    waiting = _priority_order(inst, np.nonzero(inst.pending & ~done)[0])
    shared = np.full(m, -1, np.int64)
    with_mate = waiting[mate[waiting] >= 0]
    shared[with_mate] = pair_type(inst, with_mate, mate[with_mate])
    stop = compat is Compat.LUCID and not params.sharing
    blocked = False
    late = 0
    for count, p in enumerate(waiting.tolist()):
        if count % PLACE_CHECK_EVERY == 0 and (
                deadline.expired() or deadline.remaining()
                < PLAN_S_PER_GROUP * len(groups) + PLAN_S_PER_LEFT * (waiting.size - count)):
            left = np.zeros(m, bool)
            left[waiting[count:]] = True
            left[mate[left & (mate >= 0)]] = True
            rest = np.flatnonzero(left & ~done)
            for k in rest.tolist():
                status[k], reasons[k] = JobStatus.DEFERRED, LATE
            done[rest] = True
            late = int(rest.size)
            break
        if done[p]:
            continue
        q = int(mate[p])
        members = (p,) if q < 0 else (p, q)
        devices = int(jobs.scale_factor[p])
        usable = inst.usable[p] if q < 0 else inst.usable[p] & inst.usable[q]
        types = np.nonzero(usable)[0]
        if q >= 0 and shared[p] >= 0:
            types = shared[p:p + 1]
        if types.size == 0:
            for i in members:
                status[i], reasons[i] = JobStatus.UNSERVABLE, NO_USABLE_TYPE
                done[i] = True
            continue
        placed = None if blocked else pools.place(types, devices)
        if placed is None:
            for i in members:
                status[i] = JobStatus.DEFERRED
                reasons[i] = "no free devices of a usable type this round"
                done[i] = True
            blocked = stop
            continue
        j, nodes = placed
        if q < 0:
            groups.append(solo(p, j, devices, nodes))
        else:
            groups.append(ColocationGroup((p, q), (float(slow_to[p]), float(slow_from[p])), j,
                                          devices, nodes))
        done[list(members)] = True
    return groups, status, reasons, late


class _Pools:
    """`place_group` for many groups in turn: the same types and nodes from the same free
    devices (`free_devices`), each type's nodes kept sorted by free devices (`NodePool`: the
    fullest node that holds the group, else the emptiest nodes first, ties in node order), so
    a placement costs a bisection instead of a scan of every node."""

    def __init__(self, problem: Problem) -> None:
        self.cluster = problem.cluster
        self.free = free_devices(problem)
        self.names = self.cluster.node_names
        self.node_free = self.free.per_node.tolist()
        self.pools: dict[int, NodePool] = {}
        """Each type's pool, made when a group first asks for the type."""

    def pool(self, j: int) -> NodePool:
        if j not in self.pools:
            free = self.free
            nodes = np.flatnonzero(self.cluster.node_type == j) if self.names else \
                np.zeros(0, np.int64)
            total = int(free.per_type[j])
            if self.names:  # a type needs the devices free both in total and on its nodes
                total = min(total, int(free.per_node[nodes].sum()))
            self.pools[j] = NodePool(nodes.tolist(), free.per_node[nodes].tolist(), total)
        return self.pools[j]

    def place(self, types: IntArray, devices: int
              ) -> tuple[int, tuple[tuple[str, int], ...]] | None:
        """The first type in `types` with `devices` free and the (node, devices) taken."""
        for j in types.tolist():
            taken = self.pool(j).take(devices)
            if taken is None:
                continue
            pieces = []
            left = devices
            for k in taken:  # what the pool took from each node: the most it could, in order
                use = min(self.node_free[k], left)
                self.node_free[k] -= use
                left -= use
                pieces.append((self.names[k], use))
            return j, tuple(pieces)
        return None


def _valid(speed: FloatArray) -> FloatArray:
    """A predicted speed, or 1 where it is unknown or not positive."""
    return np.where(np.isfinite(speed) & (speed > 0), speed, 1.0)
