"""Co-location (space-sharing) inputs: `Snapshot.colocations` and `type_colocations` into
`Colocations`, with field-path validation (A1.1, docs/policies/common.md: only pairs with equal
scale factors; an unordered pair listed once; at most MAX_COLOCATIONS entries each)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from apportion.solver import limits
from apportion.solver.errors import Violation, echo, key
from apportion.solver.model import Cluster, Colocations, FloatArray, IntArray, Jobs
from apportion.solver.validation import RATE_RULE, rate_ok
from apportion.v1 import snapshot_pb2 as snapshot_pb


def _row(values: Mapping[str, float], type_index: dict[str, int], n: int, path: str,
         violations: list[Violation]) -> FloatArray:
    """(n,) throughputs (steps/s) from a per-type map: known types, finite values >= 0."""
    row = np.zeros(n)
    for name, value in values.items():
        field = f"{path}{key(name)}"
        if name not in type_index:
            violations.append(Violation(field, f"unknown accelerator type {echo(name)}"))
        elif not rate_ok(value):
            violations.append(Violation(field, f"{RATE_RULE} steps/s, got {value}"))
        else:
            row[type_index[name]] = value
    return row


def colocations(
    msg: snapshot_pb.Snapshot, cluster: Cluster, jobs: Jobs, violations: list[Violation]
) -> Colocations | None:
    """The snapshot's pair throughputs, or None when it gives none."""
    if not msg.colocations and not msg.type_colocations:
        return None
    for name in ("colocations", "type_colocations"):
        if len(getattr(msg, name)) > limits.MAX_COLOCATIONS:
            got = len(getattr(msg, name))
            violations.append(Violation(f"snapshot.{name}",
                                        f"{got} entries is more than {limits.MAX_COLOCATIONS}"))
            return None
    n = cluster.num_types
    type_index = {name: j for j, name in enumerate(cluster.type_names)}
    job_index = jobs.row
    pair_a: list[int] = []
    pair_b: list[int] = []
    rows_a: list[FloatArray] = []
    rows_b: list[FloatArray] = []
    seen: dict[frozenset[str], int] = {}
    for k, entry in enumerate(msg.colocations):
        p = f"snapshot.colocations[{k}]"
        ia, ib = job_index.get(entry.job_a), job_index.get(entry.job_b)
        ok = True
        for name, idx, job_id in (("job_a", ia, entry.job_a), ("job_b", ib, entry.job_b)):
            if idx is None:
                violations.append(Violation(f"{p}.{name}", f"unknown job {echo(job_id)}"))
                ok = False
        row_a = _row(entry.throughput_a, type_index, n, f"{p}.throughput_a", violations)
        row_b = _row(entry.throughput_b, type_index, n, f"{p}.throughput_b", violations)
        if not ok or ia is None or ib is None:
            continue
        key = frozenset((entry.job_a, entry.job_b))
        if ia == ib:
            violations.append(Violation(f"{p}.job_b", "a job cannot share devices with itself"))
        elif jobs.scale_factor[ia] != jobs.scale_factor[ib]:
            violations.append(Violation(
                f"{p}.job_b",
                f"scale factor {jobs.scale_factor[ib]} differs from job_a's "
                f"{jobs.scale_factor[ia]}: only jobs with equal scale factors can share",
            ))
        elif key in seen:
            violations.append(Violation(p, f"pair listed twice (first at [{seen[key]}])"))
        else:
            seen[key] = k
            pair_a.append(ia)
            pair_b.append(ib)
            rows_a.append(row_a)
            rows_b.append(row_b)
    type_a: list[str] = []
    type_b: list[str] = []
    type_rows_a: list[FloatArray] = []
    type_rows_b: list[FloatArray] = []
    seen_types: dict[frozenset[str], int] = {}
    for k, tentry in enumerate(msg.type_colocations):
        p = f"snapshot.type_colocations[{k}]"
        row_a = _row(tentry.throughput_a, type_index, n, f"{p}.throughput_a", violations)
        row_b = _row(tentry.throughput_b, type_index, n, f"{p}.throughput_b", violations)
        missing = [name for name in ("type_a", "type_b") if not getattr(tentry, name)]
        for name in missing:
            violations.append(Violation(f"{p}.{name}", "must be non-empty"))
        tkey = frozenset((tentry.type_a, tentry.type_b))
        if missing:
            continue
        if tkey in seen_types:
            first = seen_types[tkey]
            violations.append(Violation(p, f"type pair listed twice (first at [{first}])"))
            continue
        seen_types[tkey] = k
        type_a.append(tentry.type_a)
        type_b.append(tentry.type_b)
        type_rows_a.append(row_a)
        type_rows_b.append(row_b)
    return Colocations(
        job_a=np.array(pair_a, dtype=np.int64),
        job_b=np.array(pair_b, dtype=np.int64),
        throughput_a=_matrix(rows_a, n),
        throughput_b=_matrix(rows_b, n),
        type_a=tuple(type_a),
        type_b=tuple(type_b),
        type_throughput_a=_matrix(type_rows_a, n),
        type_throughput_b=_matrix(type_rows_b, n),
    )


def _matrix(rows: list[FloatArray], n: int) -> FloatArray:
    """(len(rows), n), also for no rows or no types."""
    return np.array(rows, dtype=np.float64).reshape(len(rows), n)


def history_partners(msg: snapshot_pb.Snapshot, jobs: Jobs, violations: list[Violation]
                     ) -> IntArray:
    """(m,) `history.jobs[].colocated_with` as job indices (-1 = none). The partner must be
    another known job with the same scale factor that names this job back (or names no
    one)."""
    if not any(entry.colocated_with for entry in msg.history.jobs):
        return np.full(jobs.num_jobs, -1, np.int64)
    job_index = jobs.row
    partner = np.full(jobs.num_jobs, -1, np.int64)
    paths: dict[int, str] = {}
    for k, entry in enumerate(msg.history.jobs):
        if not entry.colocated_with:
            continue
        p = f"snapshot.history.jobs[{k}].colocated_with"
        i, j = job_index.get(entry.job_id), job_index.get(entry.colocated_with)
        if i is None:
            continue  # the unknown job_id is reported with its own field path
        if j is None:
            violations.append(Violation(p, f"unknown job {echo(entry.colocated_with)}"))
        elif j == i:
            violations.append(Violation(p, "a job cannot be paired with itself"))
        elif jobs.scale_factor[i] != jobs.scale_factor[j]:
            violations.append(Violation(
                p, f"{echo(entry.colocated_with)} has scale factor {jobs.scale_factor[j]}, "
                   f"{echo(entry.job_id)} {jobs.scale_factor[i]}: pairs need equal scale factors"))
        else:
            partner[i] = j
            paths[i] = p
    for a in range(jobs.num_jobs):
        b = int(partner[a])
        if b >= 0 and int(partner[b]) not in (-1, a):
            violations.append(Violation(
                paths[a], f"{echo(jobs.ids[b])} is paired with {echo(jobs.ids[int(partner[b])])}, "
                          f"not with {echo(jobs.ids[a])}"))
    named = partner.copy()
    for a in range(jobs.num_jobs):
        b = int(named[a])
        if b >= 0 and named[b] == -1:
            partner[b] = a  # one side named the pair: it holds for both
    return partner
