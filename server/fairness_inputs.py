"""Wire conversion for the long-run fairness family (B1-B3): Themis's auction, Gandiva_fair,
Astraea.

* `fairness_parameters` maps a `Policy.parameters` message (full name) to its converter.
* `fairness_inputs` reads the snapshot's bid tables, leases, stride passes and device-time
  bookkeeping into `FairnessInputs` (validated for every policy: they are snapshot facts).
* `fairness_input_violations` checks what the resolved policy needs beyond them.
* `fill_fairness_response` writes leases, auction outcomes, stride passes, device-time, user
  shares and trades.

Every problem is appended as `Violation(field_path, description)`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from apportion.server.job_wire import JobFields
from apportion.solver.errors import Violation
from apportion.solver.fairness_model import (
    MAX_BUNDLES_PER_JOB,
    BidTable,
    BundleBid,
    FairnessInputs,
    TenantUsage,
)
from apportion.solver.model import Cluster, History, Jobs, PolicyRequest, Problem
from apportion.solver.parameters import (
    MAX_QUANTA,
    AstraeaParameters,
    GandivaFairParameters,
    ThemisAuctionParameters,
    TradingMode,
)
from apportion.solver.result import Plan
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import policy_pb2 as policy_pb
from apportion.v1 import snapshot_pb2 as snapshot_pb

MAX_LEASE_S = 1e9
"""Longest lease accepted (s)."""
MAX_TENANT_USAGE = 100_000
"""Most `Snapshot.tenant_usage` entries."""

_TRADING = {
    policy_pb.TRADING_MODE_UNSPECIFIED: TradingMode.GREEDY,
    policy_pb.TRADING_MODE_GREEDY: TradingMode.GREEDY,
    policy_pb.TRADING_MODE_EXACT: TradingMode.EXACT,
    policy_pb.TRADING_MODE_NONE: TradingMode.NONE,
}


def _lease(msg: Any, path: str, default: float, violations: list[Violation]) -> float:
    lease = msg.lease_s if msg.HasField("lease_s") else default
    if not (math.isfinite(lease) and 0 < lease <= MAX_LEASE_S):
        violations.append(Violation(f"{path}.lease_s",
                                    f"must be finite, > 0 and <= {MAX_LEASE_S:g}, got {lease}"))
        return default
    return float(lease)


def _themis(msg: Any, violations: list[Violation]) -> object:
    p = "policy.themis_auction"
    default = ThemisAuctionParameters()
    knob = msg.fairness_knob if msg.HasField("fairness_knob") else default.fairness_knob
    if not (math.isfinite(knob) and 0 <= knob < 1):
        violations.append(Violation(f"{p}.fairness_knob", f"must be in [0, 1), got {knob}"))
        knob = default.fairness_knob
    return ThemisAuctionParameters(fairness_knob=float(knob),
                                   lease_s=_lease(msg, p, default.lease_s, violations),
                                   divisible_shares=msg.divisible_shares)


def _gandiva_fair(msg: Any, violations: list[Violation]) -> object:
    p = "policy.gandiva_fair"
    default = GandivaFairParameters()
    quanta = msg.quanta if msg.HasField("quanta") else default.quanta
    if not 1 <= quanta <= MAX_QUANTA:
        violations.append(Violation(f"{p}.quanta", f"must be in 1..{MAX_QUANTA}, got {quanta}"))
        quanta = default.quanta
    price = msg.trade_price if msg.HasField("trade_price") else default.trade_price
    if not (math.isfinite(price) and 0 < price < 1):
        violations.append(Violation(f"{p}.trade_price", f"must be in (0, 1), got {price}"))
        price = default.trade_price
    if msg.trading not in _TRADING:
        violations.append(Violation(f"{p}.trading", f"unknown value {msg.trading}"))
    return GandivaFairParameters(
        quanta=int(quanta),
        trading=_TRADING.get(msg.trading, TradingMode.GREEDY),
        trade_price=float(price),
        static_equal_split=msg.static_equal_split,
    )


def _astraea(msg: Any, violations: list[Violation]) -> object:
    return AstraeaParameters(lease_s=_lease(msg, "policy.astraea", AstraeaParameters().lease_s,
                                            violations))


fairness_parameters: dict[str, Callable[[Any, list[Violation]], object]] = {
    policy_pb.ThemisAuctionParameters.DESCRIPTOR.full_name: _themis,
    policy_pb.GandivaFairParameters.DESCRIPTOR.full_name: _gandiva_fair,
    policy_pb.AstraeaParameters.DESCRIPTOR.full_name: _astraea,
}


def _bid_table(
    bids: snapshot_pb.ThemisBids, p: str, cluster: Cluster, scale: int,
    violations: list[Violation],
) -> BidTable | None:
    """One job's bid table (None when it has a problem, which is appended)."""
    before = len(violations)
    types = {name: j for j, name in enumerate(cluster.type_names)}
    nodes = {name: k for k, name in enumerate(cluster.node_names)}
    if not (math.isfinite(bids.rho_without) and bids.rho_without > 0):
        violations.append(Violation(f"{p}.rho_without",
                                    f"must be finite and > 0, got {bids.rho_without}"))
    if not bids.bundles:
        violations.append(Violation(f"{p}.bundles", "must list at least one bundle (omit "
                                                     "themis_bids to derive the bids)"))
    elif len(bids.bundles) > MAX_BUNDLES_PER_JOB:
        violations.append(Violation(f"{p}.bundles", f"at most {MAX_BUNDLES_PER_JOB} bundles, "
                                                     f"got {len(bids.bundles)}"))
    seen: dict[tuple[int, tuple[tuple[int, int], ...]], int] = {}
    out: list[BundleBid] = []
    for b, bundle in enumerate(bids.bundles):
        q = f"{p}.bundles[{b}]"
        j = types.get(bundle.accelerator_type)
        if j is None:
            violations.append(Violation(f"{q}.accelerator_type",
                                        f"unknown accelerator type {bundle.accelerator_type!r}"))
            continue
        if cluster.count[j] < scale:
            violations.append(Violation(f"{q}.accelerator_type",
                                        f"{bundle.accelerator_type!r} has {cluster.count[j]} "
                                        f"devices, the job needs {scale}"))
        if not (math.isfinite(bundle.rho) and bundle.rho > 0):
            violations.append(Violation(f"{q}.rho", f"must be finite and > 0, got {bundle.rho}"))
        placed: list[tuple[int, int]] = []
        for name, devices in sorted(bundle.node_devices.items()):
            field = f'{q}.node_devices["{name}"]'
            k = nodes.get(name)
            if k is None:
                violations.append(Violation(field, f"unknown node {name!r}"))
            elif cluster.node_type[k] != j:
                violations.append(Violation(field, f"node {name!r} holds no "
                                                   f"{bundle.accelerator_type!r}"))
            elif not 0 < devices <= cluster.node_devices[k]:
                violations.append(Violation(field, f"must be in 1..{cluster.node_devices[k]} "
                                                   f"(the node's devices), got {devices}"))
            else:
                placed.append((k, int(devices)))
        if bundle.node_devices and sum(bundle.node_devices.values()) != scale:
            violations.append(Violation(f"{q}.node_devices",
                                        f"must sum to the job's scale factor {scale}, got "
                                        f"{sum(bundle.node_devices.values())}"))
        key = (j, tuple(placed))
        if key in seen:
            violations.append(Violation(q, f"the same bundle as bundles[{seen[key]}]"))
        seen[key] = b
        out.append(BundleBid(j, tuple(placed), float(bundle.rho)))
    if len(violations) > before:
        return None
    return BidTable(float(bids.rho_without), tuple(out))


def _tenant_usage(msg: snapshot_pb.Snapshot, violations: list[Violation]
                  ) -> tuple[TenantUsage, ...]:
    if len(msg.tenant_usage) > MAX_TENANT_USAGE:
        violations.append(Violation("snapshot.tenant_usage",
                                    f"at most {MAX_TENANT_USAGE} entries, got "
                                    f"{len(msg.tenant_usage)}"))
        return ()
    out: list[TenantUsage] = []
    first: dict[str, int] = {}
    for k, entry in enumerate(msg.tenant_usage):
        p = f"snapshot.tenant_usage[{k}]"
        ok = True
        if not entry.tenant:
            violations.append(Violation(f"{p}.tenant", "must be non-empty"))
            ok = False
        elif entry.tenant in first:
            violations.append(Violation(f"{p}.tenant", f"duplicate tenant {entry.tenant!r} "
                                                       f"(first at [{first[entry.tenant]}])"))
            ok = False
        else:
            first[entry.tenant] = k
        for name in ("gpu_time_s", "entitled_gpu_time_s"):
            value = getattr(entry, name)
            if not (math.isfinite(value) and value >= 0):
                violations.append(Violation(f"{p}.{name}", f"must be finite and >= 0, got "
                                                           f"{value}"))
                ok = False
        if ok:
            out.append(TenantUsage(entry.tenant, entry.gpu_time_s, entry.entitled_gpu_time_s))
    return tuple(out)


def fairness_inputs(
    msg: snapshot_pb.Snapshot, cluster: Cluster, jobs: Jobs, history: History,
    violations: list[Violation], present: JobFields,
) -> FairnessInputs | None:
    """The snapshot's B1-B3 inputs (validated), None when it gives none. `present`: which
    `msg.jobs` may set `themis_bids`."""
    m = jobs.num_jobs
    bidders = [(i, job) for i, job in present.setting(snapshot_pb.Job.THEMIS_BIDS_FIELD_NUMBER)
               if job.HasField("themis_bids")]
    given = (msg.tenant_usage or bidders or any(
        e.lease_expires_s or e.HasField("lease_time_share") or e.HasField("stride_pass")
        or e.gpu_time_s for e in msg.history.jobs))
    if not given:
        return None
    fair = FairnessInputs.empty(m)
    bids: list[BidTable | None] = [None] * m
    for i, job in bidders:
        bids[i] = _bid_table(job.themis_bids, f"snapshot.jobs[{i}].themis_bids", cluster,
                             int(jobs.scale_factor[i]), violations)
    index = jobs.row
    running = history.running(m)
    for k, entry in enumerate(msg.history.jobs):
        p = f"snapshot.history.jobs[{k}]"
        row = index.get(entry.job_id)
        if row is None:
            continue  # reported by the general history rules
        i = row
        expires = entry.lease_expires_s
        if not (math.isfinite(expires) and expires >= 0):
            violations.append(Violation(f"{p}.lease_expires_s",
                                        f"must be finite and >= 0, got {expires}"))
        elif expires > msg.time_s and not running[i]:
            violations.append(Violation(f"{p}.lease_expires_s",
                                        "a lease after snapshot.time_s needs the job's current "
                                        "placement (history.jobs[].current)"))
        else:
            fair.lease_expires_s[i] = expires
        if entry.HasField("lease_time_share"):
            share = entry.lease_time_share
            if not (math.isfinite(share) and 0 < share <= 1):
                violations.append(Violation(f"{p}.lease_time_share",
                                            f"must be in (0, 1], got {share}"))
            else:
                fair.lease_time_share[i] = share
        if entry.HasField("stride_pass"):
            if not math.isfinite(entry.stride_pass):
                violations.append(Violation(f"{p}.stride_pass", "must be finite"))
            else:
                fair.stride_pass[i] = entry.stride_pass
        if not (math.isfinite(entry.gpu_time_s) and entry.gpu_time_s >= 0):
            violations.append(Violation(f"{p}.gpu_time_s",
                                        f"must be finite and >= 0, got {entry.gpu_time_s}"))
        else:
            fair.gpu_time_s[i] = entry.gpu_time_s
    return FairnessInputs(
        bids=tuple(bids),
        lease_expires_s=fair.lease_expires_s,
        lease_time_share=fair.lease_time_share,
        stride_pass=fair.stride_pass,
        gpu_time_s=fair.gpu_time_s,
        tenant_usage=_tenant_usage(msg, violations),
    )


def fairness_input_violations(problem: Problem, policy: PolicyRequest) -> list[Violation]:
    """Themis's auction derives a job's bids from its remaining work: a job without
    `themis_bids` needs progress.total_steps > 0; with divisible shares no job may bring a bid
    table."""
    params = policy.parameters
    if not isinstance(params, ThemisAuctionParameters):
        return []
    fair = problem.fairness
    jobs = problem.jobs
    out = []
    for i in range(jobs.num_jobs):
        has_table = fair is not None and fair.bids[i] is not None
        if params.divisible_shares and has_table:
            out.append(Violation(f"snapshot.jobs[{i}].themis_bids",
                                 "not used with divisible_shares (bidders value time shares by "
                                 "their throughput)"))
        if jobs.total_steps[i] <= 0 and (params.divisible_shares or not has_table):
            out.append(Violation(f"snapshot.jobs[{i}].progress.total_steps",
                                 "must be > 0: themis_auction derives the bids of a job without "
                                 "themis_bids from its remaining work"))
    return out


def fairness_job_doubles(plan: Plan) -> list[tuple[str, NDArray[np.float64]]]:
    """(`JobAllocation` field, per-job values; NaN = unset) of the stride passes (a pass
    that is not finite is not written) and the device-time, written with the allocations'
    records."""
    out: list[tuple[str, NDArray[np.float64]]] = []
    if plan.stride is not None:
        passes = np.asarray(plan.stride.stride_pass, np.float64)
        out.append(("stride_pass", np.where(np.isfinite(passes), passes, np.nan)))
    if plan.usage is not None:
        out.append(("gpu_time_s", np.asarray(plan.usage.job_gpu_time_s, np.float64)))
    return out


def fill_fairness_response(plan: Plan, problem: Problem, out: service_pb.Plan) -> None:
    """Auction outcomes, user shares, trades and tenants' usage (the per-job stride passes and
    device-time: `fairness_job_doubles`; the leases: `lease_wire`)."""
    if plan.auction is None and plan.stride is None and plan.usage is None:
        return
    names = problem.cluster.type_names
    entries = list(out.jobs)
    if plan.auction is not None:
        for i, outcome in enumerate(plan.auction.outcomes):
            auction = entries[i].auction
            auction.SetInParent()
            auction.offered = outcome.offered
            if not math.isnan(outcome.rho_without):
                auction.rho_without = outcome.rho_without
            if not math.isnan(outcome.kept_fraction):
                auction.rho_won = outcome.rho_won
                auction.kept_fraction = outcome.kept_fraction
                auction.bundle = outcome.bundle
    if plan.stride is not None:
        stride = plan.stride
        for user in stride.users:
            out.user_shares.add(
                user=user.user, tickets=user.tickets,
                fair_share={names[j]: float(v) for j, v in enumerate(user.fair_share) if v > 0},
                traded_share={names[j]: float(v) for j, v in enumerate(user.traded_share)
                              if v > 0},
                throughput_before=user.throughput_before, throughput_after=user.throughput_after,
            )
        for trade in stride.trades:
            out.trades.add(buyer=stride.users[trade.buyer].user,
                           seller=stride.users[trade.seller].user,
                           fast_type=names[trade.fast_type], slow_type=names[trade.slow_type],
                           fast_devices=trade.fast_devices, price=trade.price)
    if plan.usage is not None:
        for usage in plan.usage.tenants:
            out.tenant_usage.add(tenant=usage.tenant, gpu_time_s=usage.gpu_time_s,
                                 entitled_gpu_time_s=usage.entitled_gpu_time_s)
