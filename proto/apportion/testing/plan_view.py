"""A response's plan read back into arrays aligned with the validated snapshot, by code of its
own (not `apportion.server.convert`): what `check_plan` verifies."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apportion.solver.model import FloatArray, IntArray, Problem
from apportion.v1 import allocation_service_pb2 as service_pb

WITH_PLAN = frozenset(
    {
        service_pb.TERMINATION_REASON_OPTIMAL,
        service_pb.TERMINATION_REASON_OPTIMAL_INACCURATE,
        service_pb.TERMINATION_REASON_FEASIBLE,
        service_pb.TERMINATION_REASON_HEURISTIC,
    }
)
"""Terminations whose response carries a plan."""


@dataclass(frozen=True)
class Pair:
    """A `Plan.colocated` entry: jobs a and b share s devices of type j for `share` of the
    time."""

    a: int
    b: int
    type_index: int
    share: float
    path: str


@dataclass(frozen=True)
class Group:
    """A `Plan.groups` entry: jobs sharing `devices` devices of one type for the round."""

    members: tuple[int, ...]
    type_index: int
    devices: int
    path: str


@dataclass(frozen=True)
class PlanView:
    """The plan of a response over the snapshot's m jobs and n types."""

    time_share: FloatArray
    """(m, n) X[i,j] as sent (0 where the map has no entry)."""
    devices: IntArray
    """(m,) devices a job holds while it runs: its configuration's devices when it has one,
    else its scale factor."""
    status: tuple[int, ...]
    """Per job, `JobStatus` value."""
    pairs: tuple[Pair, ...]
    effective_throughput: FloatArray
    objective_value: FloatArray
    prices: FloatArray
    """(n,) `Plan.accelerator_prices` (0 when absent)."""
    groups: tuple[Group, ...] = ()
    """Groups of jobs sharing devices (co-location policies); a job in one holds its devices."""


def read_plan(
    response: service_pb.SolveResponse, problem: Problem, failures: list[tuple[str, str]]
) -> PlanView | None:
    """The plan as arrays; None when the job list does not match the snapshot's (reported in
    `failures` as (field path, message))."""
    jobs, cluster = problem.jobs, problem.cluster
    m, n = jobs.num_jobs, cluster.num_types
    entries = list(response.plan.jobs)
    ids = [entry.job_id for entry in entries]
    if ids != list(jobs.ids):
        failures.append(
            ("plan.jobs", f"must list the snapshot's {m} jobs in its order, lists {len(ids)}: "
                          f"{_first_difference(ids, list(jobs.ids))}")
        )
        return None
    type_index = {name: j for j, name in enumerate(cluster.type_names)}
    X = np.zeros((m, n))
    devices = jobs.scale_factor.astype(np.int64).copy()
    for i, entry in enumerate(entries):
        for name, value in entry.time_share.items():
            j = type_index.get(name)
            if j is None:
                failures.append((f"plan.jobs[{i}].time_share[\"{name}\"]",
                                 "is not an accelerator type of the cluster"))
            else:
                X[i, j] = value
        if entry.HasField("configuration"):
            devices[i] = entry.configuration.devices
    job_index = {job_id: i for i, job_id in enumerate(jobs.ids)}
    pairs: list[Pair] = []
    for k, shared in enumerate(response.plan.colocated):
        path = f"plan.colocated[{k}]"
        a, b = job_index.get(shared.job_a), job_index.get(shared.job_b)
        j = type_index.get(shared.accelerator_type)
        if a is None or b is None or j is None:
            failures.append((path, "names an unknown job or accelerator type"))
            continue
        pairs.append(Pair(a, b, j, shared.time_share, path))
    prices = np.array([response.plan.accelerator_prices.get(name, 0.0)
                       for name in cluster.type_names])
    groups: list[Group] = []
    for k, group in enumerate(response.plan.groups):
        path = f"plan.groups[{k}]"
        members = [job_index.get(job_id) for job_id in group.job_ids]
        j = type_index.get(group.accelerator_type)
        if j is None or any(i is None for i in members):
            failures.append((path, "names an unknown job or accelerator type"))
            continue
        found = tuple(i for i in members if i is not None)
        for i in found:
            devices[i] = group.devices
        groups.append(Group(found, j, group.devices, path))
    return PlanView(
        time_share=X,
        devices=devices,
        status=tuple(entry.status for entry in entries),
        pairs=tuple(pairs),
        effective_throughput=np.array([entry.effective_throughput for entry in entries]),
        objective_value=np.array([entry.objective_value for entry in entries]),
        prices=prices,
        groups=tuple(groups),
    )


def _first_difference(got: list[str], want: list[str]) -> str:
    for k, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            return f"entry {k} is {a!r}, the snapshot's job {k} is {b!r}"
    return "the lists differ in length"


def pair_throughput(problem: Problem, a: int, b: int, j: int) -> tuple[float, float]:
    """(thr of a, thr of b) while a and b share devices of type j (steps/s), from the
    snapshot's job pairs, else its job-type pairs (two jobs of the same type both get the mean
    of the entry's two rates); (0, 0) when neither lists them."""
    col = problem.colocations
    if col is None:
        return 0.0, 0.0
    for p in range(col.job_a.size):
        x, y = int(col.job_a[p]), int(col.job_b[p])
        if (x, y) == (a, b):
            return float(col.throughput_a[p, j]), float(col.throughput_b[p, j])
        if (x, y) == (b, a):
            return float(col.throughput_b[p, j]), float(col.throughput_a[p, j])
    kinds = problem.jobs.job_type
    if not kinds:
        return 0.0, 0.0
    ta, tb = kinds[a], kinds[b]
    if not (ta and tb):
        return 0.0, 0.0
    for q, (x_type, y_type) in enumerate(zip(col.type_a, col.type_b, strict=True)):
        rate_x, rate_y = float(col.type_throughput_a[q, j]), float(col.type_throughput_b[q, j])
        if x_type == y_type == ta == tb:  # two jobs of one type: each gets the mean
            return (rate_x + rate_y) / 2, (rate_x + rate_y) / 2
        if (x_type, y_type) == (ta, tb):
            return rate_x, rate_y
        if (x_type, y_type) == (tb, ta):
            return rate_y, rate_x
    return 0.0, 0.0


def throughput_under(problem: Problem, view: PlanView, T: FloatArray) -> FloatArray:
    """(m,) thr_i(X) with per-job throughputs T (steps/s): alone on the time not shared, at the
    pair throughput on the time shared with another job (A2.2)."""
    X = view.time_share.copy()
    thr = np.zeros(problem.jobs.num_jobs)
    for pair in view.pairs:
        ta, tb = pair_throughput(problem, pair.a, pair.b, pair.type_index)
        X[pair.a, pair.type_index] -= pair.share
        X[pair.b, pair.type_index] -= pair.share
        thr[pair.a] += ta * pair.share
        thr[pair.b] += tb * pair.share
    return np.asarray(thr + np.einsum("ij,ij->i", T, X), dtype=np.float64)
