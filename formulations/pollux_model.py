"""Pollux's goodput model (A5.1, docs/policies/sia.md), pure numpy, no solver.

Units: times in seconds, batch sizes in samples, throughput in samples/s (examples/s),
goodput in useful samples/s (throughput x statistical efficiency, dimensionless in (0, 1]).

Notation: m = per-GPU (atomic) batch, s = gradient-accumulation steps, K = replicas (GPUs),
N = nodes, M = global batch = K * m * (s + 1), M0 = baseline batch.

Differences from adaptdl: the network time is exactly 0 at K = 1 (adaptdl uses 1e-8), and the
batch-size search also offers an exhaustive integer grid (`best_goodput_exhaustive`) that the
sampled search (`best_goodput`, Pollux's 50 geometric samples) is tested against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from apportion.solver.model import FloatArray, PerfParams, PolluxJobModel


@dataclass(frozen=True)
class GradParams:
    """Gradient statistics measured at the baseline batch M0."""

    sqr: float
    """|E g|^2, squared norm of the mean gradient (> 0)."""
    var: float
    """tr(Sigma), trace of the per-sample gradient covariance scaled to M0 (>= 0)."""


@dataclass(frozen=True)
class BatchLimits:
    """Batch-size limits of one job (samples)."""

    init_batch_size: int
    """Baseline global batch M0 (> 0)."""
    max_batch_size: int = 0
    """Largest global batch (0 = M0)."""
    min_local_batch_size: int = 0
    """Smallest atomic (per-GPU) batch (0 = 1)."""
    max_local_batch_size: int = 0
    """Largest atomic batch (0 = max_batch_size)."""
    accumulation: bool = True
    """Gradient accumulation allowed."""

    @property
    def max_global(self) -> int:
        return max(self.max_batch_size, self.init_batch_size)

    @property
    def min_local(self) -> int:
        return max(self.min_local_batch_size, 1)

    @property
    def max_local(self) -> int:
        return self.max_local_batch_size or self.max_global


@dataclass(frozen=True)
class BestGoodput:
    """The goodput-maximizing batch at one (N, K)."""

    goodput: float
    """Useful samples/s (0 = no valid batch)."""
    throughput: float
    """Samples/s."""
    efficiency: float
    """Statistical efficiency in (0, 1]."""
    atomic_batch: int
    """Per-GPU batch m (samples)."""
    accumulation_steps: int
    """s >= 0."""


def compute_time(theta: PerfParams, atomic_batch: FloatArray | float) -> FloatArray:
    """T_c = alpha_c + beta_c * m (s per micro-step)."""
    return np.asarray(theta.alpha_c + theta.beta_c * np.asarray(atomic_batch, np.float64))


def network_time(
    theta: PerfParams, nodes: FloatArray | int, replicas: FloatArray | int
) -> FloatArray:
    """T_n (s): alpha_n + beta_n*max(K-2,0) across nodes, alpha_r + beta_r*max(K-2,0) within
    one node, 0 for a single replica."""
    n = np.asarray(nodes, np.float64)
    k = np.asarray(replicas, np.float64)
    extra = np.maximum(k - 2.0, 0.0)
    multi = theta.alpha_n + theta.beta_n * extra
    single = theta.alpha_r + theta.beta_r * extra
    return np.asarray(np.where(k <= 1, 0.0, np.where(n > 1, multi, single)))


def optimizer_time(theta: PerfParams, t_compute: FloatArray, t_network: FloatArray) -> FloatArray:
    """T_o = (T_c^gamma + T_n^gamma)^(1/gamma) (s)."""
    g = theta.gamma
    return np.asarray((t_compute**g + t_network**g) ** (1.0 / g))


def throughput(
    theta: PerfParams,
    nodes: FloatArray | int,
    replicas: FloatArray | int,
    atomic_batch: FloatArray | float,
    accumulation_steps: FloatArray | int,
) -> FloatArray:
    """Samples/s: M / (s*T_c + T_o) with M = K*m*(s+1)."""
    k = np.asarray(replicas, np.float64)
    m = np.asarray(atomic_batch, np.float64)
    s = np.asarray(accumulation_steps, np.float64)
    t_c = compute_time(theta, m)
    t_o = optimizer_time(theta, t_c, network_time(theta, nodes, replicas))
    return np.asarray(k * m * (s + 1.0) / (s * t_c + t_o))


def efficiency(grad: GradParams, init_batch_size: int, batch: FloatArray | float) -> FloatArray:
    """EFFICIENCY(M) = (var + sqr) / (var + (M/M0)*sqr) = (phi + M0)/(phi + M), in (0, 1] for
    M >= M0 (phi = M0*var/sqr, the gradient noise scale)."""
    scale = np.asarray(batch, np.float64) / float(init_batch_size)
    return np.asarray((grad.var + grad.sqr) / (grad.var + scale * grad.sqr))


def noise_scale(grad: GradParams, init_batch_size: int) -> float:
    """phi = M0 * var / sqr (samples)."""
    return float(init_batch_size) * grad.var / grad.sqr


def goodput(
    theta: PerfParams,
    grad: GradParams,
    init_batch_size: int,
    nodes: FloatArray | int,
    replicas: FloatArray | int,
    atomic_batch: FloatArray | float,
    accumulation_steps: FloatArray | int,
) -> FloatArray:
    """GOODPUT = throughput x efficiency(K*m*(s+1)) (useful samples/s)."""
    k = np.asarray(replicas, np.float64)
    m = np.asarray(atomic_batch, np.float64)
    s = np.asarray(accumulation_steps, np.float64)
    thr = throughput(theta, nodes, replicas, atomic_batch, accumulation_steps)
    return np.asarray(thr * efficiency(grad, init_batch_size, k * m * (s + 1.0)))


def _best_of(
    theta: PerfParams,
    grad: GradParams,
    limits: BatchLimits,
    nodes: int,
    replicas: int,
    atomic: np.ndarray,
    accum: np.ndarray,
) -> BestGoodput:
    valid = (atomic >= limits.min_local) & (atomic <= limits.max_local)
    if not valid.any():
        return BestGoodput(0.0, 0.0, 0.0, 0, 0)
    atomic, accum = atomic[valid], accum[valid]
    values = goodput(theta, grad, limits.init_batch_size, nodes, replicas, atomic, accum)
    best = int(np.argmax(values))
    m, s = int(atomic[best]), int(accum[best])
    thr = float(throughput(theta, nodes, replicas, m, s))
    eff = float(efficiency(grad, limits.init_batch_size, replicas * m * (s + 1)))
    return BestGoodput(float(values[best]), thr, eff, m, s)


def best_goodput(
    theta: PerfParams, grad: GradParams, limits: BatchLimits, nodes: int, replicas: int
) -> BestGoodput:
    """Pollux's batch-size optimizer: 50 global batches geometrically spaced in
    [max(M0, K*m_min), M_max], atomic batch and accumulation steps derived from the limits
    (s >= 1 for a single replica above M0), the best valid one returned."""
    if nodes < 1 or replicas < nodes:
        raise ValueError(f"need 1 <= nodes <= replicas, got nodes={nodes}, replicas={replicas}")
    m0 = limits.init_batch_size
    low = max(m0, limits.min_local * replicas)
    high = limits.max_global
    if low > high:
        return BestGoodput(0.0, 0.0, 0.0, 0, 0)
    batch = np.geomspace(low, high, 50)
    local = batch / replicas
    eps = 1e-8
    if limits.accumulation:
        accum = np.ceil(local / limits.max_local - eps) - 1
        if replicas == 1:
            accum = np.where(local > m0 + eps, np.maximum(accum, 1), accum)
        accum = accum.astype(np.int64)
        atomic = np.ceil(local / (accum + 1) - eps).astype(np.int64)
    else:
        accum = np.zeros(local.shape, np.int64)
        atomic = (np.full(local.shape, m0) if replicas == 1 else np.ceil(local - eps)).astype(
            np.int64
        )
    return _best_of(theta, grad, limits, nodes, replicas, atomic, accum)


def best_goodput_exhaustive(
    theta: PerfParams,
    grad: GradParams,
    limits: BatchLimits,
    nodes: int,
    replicas: int,
) -> BestGoodput:
    """The exact maximum over every integer (m, s) with m in [m_min, m_max], global batch in
    [M0, M_max] (s = 0 unless accumulation is allowed). For tests and small limits only."""
    m0, high = limits.init_batch_size, limits.max_global
    atomic_list: list[int] = []
    accum_list: list[int] = []
    max_s = high // max(replicas * limits.min_local, 1) if limits.accumulation else 0
    for s in range(0, max_s + 1):
        lo = max(limits.min_local, math.ceil(m0 / (replicas * (s + 1))))
        hi = min(limits.max_local, high // (replicas * (s + 1)))
        for m in range(lo, hi + 1):
            atomic_list.append(m)
            accum_list.append(s)
    return _best_of(
        theta,
        grad,
        limits,
        nodes,
        replicas,
        np.asarray(atomic_list, np.int64),
        np.asarray(accum_list, np.int64),
    )


def job_inputs(model: PolluxJobModel) -> tuple[GradParams, BatchLimits]:
    """A snapshot job's gradient statistics and batch limits, as the optimizer takes them."""
    limits = BatchLimits(model.init_batch_size, model.max_batch_size,
                         model.min_local_batch_size, model.max_local_batch_size)
    return GradParams(model.grad_sqr, model.grad_var), limits


def bootstrap_best(
    theta_source: PerfParams,
    grad: GradParams,
    limits: BatchLimits,
    source_gpus_per_node: int,
    gpus: int,
    seed_throughput_target: float,
    seed_throughput_source: float,
) -> BestGoodput:
    """Cross-type bootstrapping (A5.3, docs/policies/sia.md): the goodput (useful samples/s) on a
    type t without a throughput model, at `gpus` GPUs, projected from a type s with model
    `theta_source`: the best goodput on s at the same replica count with the nodes recomputed
    as ceil(gpus / G_s), times the ratio of the job's 1-GPU throughputs (samples/s) on t and
    on s at their largest profiled local batch (1-GPU seed profiles); the batch is the one
    chosen on s. Zero goodput when either seed throughput is missing (<= 0)."""
    if gpus < 1 or source_gpus_per_node < 1:
        raise ValueError(f"need gpus >= 1 and G_s >= 1, got {gpus}, {source_gpus_per_node}")
    if seed_throughput_target <= 0 or seed_throughput_source <= 0:
        return BestGoodput(0.0, 0.0, 0.0, 0, 0)
    nodes = -(-gpus // source_gpus_per_node)
    best = best_goodput(theta_source, grad, limits, nodes, gpus)
    ratio = seed_throughput_target / seed_throughput_source
    return replace(best, goodput=best.goodput * ratio, throughput=best.throughput * ratio)


def bootstrap_goodput(
    theta_source: PerfParams,
    grad: GradParams,
    limits: BatchLimits,
    source_gpus_per_node: int,
    gpus: int,
    seed_throughput_target: float,
    seed_throughput_source: float,
) -> float:
    """The goodput of `bootstrap_best` (useful samples/s). Which source type to use when
    several have a model is not specified by the notes; the caller chooses."""
    return bootstrap_best(theta_source, grad, limits, source_gpus_per_node, gpus,
                          seed_throughput_target, seed_throughput_source).goodput
