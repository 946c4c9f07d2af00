"""Seeded generators: Gavel-style workloads and throughput tables, clusters, pair throughputs,
Shockwave-style per-epoch profiles and Sia-style goodputs. Same arguments, same output.

The numbers are synthetic (the project ships no copy of upstream tables); their structure
follows T2.1-T2.3 and T3.1, docs/datasets.md: 26 job templates (7 model families x batch sizes);
ResNet-18/50, Transformer and LM also at scale factors 2/4/8; k80 slowest, p100 2-7x k80,
v100 1-1.5x p100 (with exceptions, e.g. Recommendation can be slower on v100); multi-GPU jobs
scale sub-linearly; co-location gives a combined normalized throughput around 1.1 (0-2).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence

import numpy as np

from apportion.datasets.cluster import ClusterSpec, NodeSpec
from apportion.datasets.shockwave import EpochProfile
from apportion.datasets.table import JobTable
from apportion.datasets.throughput import JobKey, ThroughputTable

FAMILIES: dict[str, tuple[tuple[int, ...], float]] = {
    # family: (batch sizes, k80 steps/s at the smallest batch size)
    "ResNet-18": ((16, 32, 64, 128, 256), 4.8),
    "ResNet-50": ((16, 32, 64, 128), 2.3),
    "Transformer": ((16, 32, 64, 128, 256), 5.5),
    "LM": ((5, 10, 20, 40, 80), 25.0),
    "Recommendation": ((512, 1024, 2048, 4096, 8192), 33.0),
    "A3C": ((4,), 3.4),
    "CycleGAN": ((1,), 0.5),
}
DISTRIBUTED = ("ResNet-18", "ResNet-50", "Transformer", "LM")
SCALE_FACTORS = (1, 2, 4, 8)
GAVEL_SCALE_PROBABILITIES = (0.70, 0.10, 0.15, 0.05)
DEFAULT_TYPES = ("v100", "p100", "k80")
BUILTIN_SEED = 20240801

# Relative single-GPU speed of known accelerator types (k80 = 1); unknown names get a
# deterministic speed from their name.
TYPE_SPEED = {
    "k80": 1.0,
    "t4": 2.2,
    "p100": 3.5,
    "quad": 3.5,
    "rtx": 4.0,
    "2080ti": 4.0,
    "v100": 4.5,
    "v100m16": 4.5,
    "v100m32": 4.6,
    "a10": 5.0,
    "g2": 4.0,
    "g3": 5.0,
    "a100": 9.0,
    "a100-80gb": 9.5,
    "dgx": 9.0,
    "dgx-ext": 9.0,
    "aws": 2.2,
    "azure": 4.5,
    "h800": 14.0,
    "h100": 15.0,
    "misc": 2.0,
}


def job_type_name(family: str, batch_size: int) -> str:
    return f"{family} (batch size {batch_size})"


def templates() -> list[str]:
    """The 26 job-type names (Gavel's catalogue)."""
    return [job_type_name(f, b) for f, (sizes, _) in FAMILIES.items() for b in sizes]


def type_speed(name: str) -> float:
    key = name.lower()
    if key in TYPE_SPEED:
        return TYPE_SPEED[key]
    return 1.0 + (zlib.crc32(key.encode()) % 1000) / 100.0  # 1-11, stable across runs


def throughput_table(
    types: Sequence[str] = DEFAULT_TYPES,
    seed: int = 0,
    *,
    pairs: bool = False,
    scale_factors: Sequence[int] = SCALE_FACTORS,
) -> ThroughputTable:
    """A synthetic Gavel-schema table: 26 templates x scale factors (83 keys with the default
    `scale_factors`) on `types`. Distributed families get a row at every scale factor of
    `scale_factors`; a row does not depend on which other scale factors are asked for."""
    rng = np.random.default_rng(seed)
    isolated: dict[JobKey, dict[str, float]] = {}
    for family, (sizes, base) in FAMILIES.items():
        # per family: how much each type's speed-up is dampened or amplified
        tilt = {t: float(rng.lognormal(0.0, 0.35)) for t in types}
        efficiency = float(rng.uniform(0.6, 0.95))
        for b_idx, batch in enumerate(sizes):
            steps = base / (1.6**b_idx) * float(rng.lognormal(0.0, 0.1))
            scales = scale_factors if family in DISTRIBUTED else (1,)
            for s in scales:
                row = {}
                for t in types:
                    speed = max(type_speed(t) ** 0.85 * tilt[t], 0.3)
                    row[t] = round(steps * speed * s * efficiency ** math.log2(s), 6)
                isolated[(job_type_name(family, batch), s)] = row
    table = ThroughputTable(tuple(types), isolated)
    return pair_throughputs(table, seed=seed + 1) if pairs else table


def builtin_throughputs(
    types: Sequence[str] = DEFAULT_TYPES, extra_scale_factors: Sequence[int] = ()
) -> ThroughputTable:
    """The project's own small synthetic table (fixed seed), usable for any type names; with
    rows at `extra_scale_factors` too (e.g. the exact GPU counts of a trace), the other rows
    unchanged."""
    scales = sorted({*SCALE_FACTORS, *(int(s) for s in extra_scale_factors if s >= 1)})
    return throughput_table(types, seed=BUILTIN_SEED, scale_factors=scales)


def pair_throughputs(
    table: ThroughputTable, seed: int = 0, scale_factors: Sequence[int] = (1,)
) -> ThroughputTable:
    """Add co-location throughputs for every ordered pair of keys with the same scale factor
    (in `scale_factors`): each job keeps a fraction of its isolated throughput; the two
    fractions sum to about 1.1 (clipped to [0.05, 2])."""
    rng = np.random.default_rng(seed)
    pairs: dict[str, dict[tuple[JobKey, JobKey], tuple[float, float]]] = {}
    for s in scale_factors:
        keys = table.job_keys(s)
        for ia, a in enumerate(keys):
            for b in keys[ia:]:
                for t in table.types:
                    ta, tb = table.isolated[a].get(t, 0.0), table.isolated[b].get(t, 0.0)
                    combined = float(np.clip(rng.normal(1.11, 0.3), 0.05, 2.0))
                    share = float(rng.uniform(0.3, 0.7))
                    fa, fb = min(combined * share, 1.0), min(combined * (1 - share), 1.0)
                    pairs.setdefault(t, {})[(a, b)] = (round(ta * fa, 6), round(tb * fb, 6))
                    pairs[t][(b, a)] = (round(tb * fb, 6), round(ta * fa, 6))
    return ThroughputTable(table.types, table.isolated, pairs)


def reference_throughput(table: ThroughputTable, key: JobKey, reference: str = "v100") -> float:
    """Steps/s used to turn a duration into steps: `reference` type, else the fastest type."""
    row = table.isolated.get(key, {})
    if row.get(reference, 0.0) > 0:
        return float(row[reference])
    return max((v for v in row.values() if v > 0), default=0.0)


def gavel_workload(
    num_jobs: int,
    *,
    seed: int = 0,
    table: ThroughputTable | None = None,
    jobs_per_hour: float = 0.0,
    scale_probabilities: Sequence[float] = GAVEL_SCALE_PROBABILITIES,
    multi_priority: bool = False,
    slo: bool = False,
    num_tenants: int = 0,
) -> JobTable:
    """Gavel's synthetic generator (T3.1, docs/datasets.md): job type uniform over the templates
    that exist at the drawn scale factor; duration 60*10^U(1.5,3) s w.p. 0.8 else 60*10^U(3,4);
    total_steps = duration x reference (v100) throughput; Poisson arrivals with mean
    inter-arrival 3600/jobs_per_hour s (0 = all at time 0); 20% weight 5 if `multi_priority`;
    SLO factor 1.2/2/10 if `slo`; tenants "t0".. drawn uniformly if `num_tenants`."""
    rng = np.random.default_rng(seed)
    tbl = table or builtin_throughputs()
    scale = rng.choice(SCALE_FACTORS, size=num_jobs, p=np.asarray(scale_probabilities))
    job_types, steps_per_s = [], np.zeros(num_jobs)
    for k, s in enumerate(scale):
        keys = tbl.job_keys(int(s))
        key = keys[int(rng.integers(len(keys)))]
        job_types.append(key[0])
        steps_per_s[k] = reference_throughput(tbl, key)
    long = rng.random(num_jobs) >= 0.8
    exponent = np.where(long, rng.uniform(3.0, 4.0, num_jobs), rng.uniform(1.5, 3.0, num_jobs))
    duration = np.round(60.0 * 10.0**exponent)
    arrival: np.ndarray
    if jobs_per_hour > 0:
        arrival = np.round(np.cumsum(rng.exponential(3600.0 / jobs_per_hour, num_jobs)))
        arrival -= arrival[0] if num_jobs else 0
    else:
        arrival = np.zeros(num_jobs)
    weight = np.where(rng.random(num_jobs) < 0.2, 5.0, 1.0) if multi_priority else np.ones(num_jobs)
    slo_factor = rng.choice([1.2, 2.0, 10.0], size=num_jobs) if slo else np.full(num_jobs, np.nan)
    tenant = (
        np.array([f"t{i}" for i in rng.integers(0, num_tenants, num_jobs)]) if num_tenants else None
    )
    return JobTable.from_columns(
        [f"job-{k}" for k in range(num_jobs)],
        arrival_s=arrival,
        start_s=arrival,
        duration_s=duration,
        gpus=scale.astype(np.float64),
        total_steps=np.round(duration * steps_per_s),
        priority_weight=weight,
        slo_factor=slo_factor,
        job_type=job_types,
        tenant=tenant,
        source="generated",
    )


def make_cluster(
    counts: Mapping[str, int] | None = None,
    *,
    total: int = 0,
    mix: Mapping[str, float] | None = None,
    gpus_per_node: int | Mapping[str, int] = 8,
    cpus_per_node: float = 64.0,
    memory_gib_per_node: float = 512.0,
) -> ClusterSpec:
    """A cluster from explicit `counts`, or `total` devices split by `mix` (fractions,
    largest-remainder rounding), laid out on nodes of `gpus_per_node` (last node partial)."""
    if counts is None:
        if not mix or total <= 0:
            raise ValueError("give counts, or total > 0 and a type mix")
        weights = np.array(list(mix.values()), dtype=np.float64)
        exact = total * weights / weights.sum()
        base = np.floor(exact).astype(int)
        order = np.argsort(-(exact - base), kind="stable")
        base[order[: total - int(base.sum())]] += 1
        counts = dict(zip(mix, (int(c) for c in base), strict=True))
    nodes = []
    for t, count in counts.items():
        per = gpus_per_node if isinstance(gpus_per_node, int) else gpus_per_node.get(t, 8)
        for n in range(math.ceil(count / per)):
            nodes.append(
                NodeSpec(
                    f"{t}-{n}", t, min(per, count - n * per), cpus_per_node, memory_gib_per_node
                )
            )
    return ClusterSpec(tuple(counts), tuple(int(c) for c in counts.values()), tuple(nodes))


def shockwave_profiles(
    workload: JobTable, *, seed: int = 0, samples_per_epoch: int = 50_000
) -> list[EpochProfile]:
    """Per-epoch profiles for each job of `workload` (its duration split into epochs).
    Modes: static (constant batch size), gns (batch size doubles a few times), accordion
    (alternates between the base and 4x batch size). Larger batches make epochs shorter."""
    rng = np.random.default_rng(seed)
    modes = workload.column("mode")
    job_types = workload.column("job_type")
    out = []
    for k in range(len(workload)):
        mode = str(modes[k]) or str(rng.choice(["static", "gns", "accordion"], p=[0.1, 0.45, 0.45]))
        epochs = int(rng.integers(5, 60))
        base_bs = int(rng.choice([16, 32, 64, 128]))
        if mode == "gns":
            cuts = np.sort(rng.integers(1, epochs, size=2))
            bs = [base_bs * 2 ** int(np.searchsorted(cuts, e, side="right")) for e in range(epochs)]
        elif mode == "accordion":
            bs = [base_bs * (4 if (e // 5) % 2 else 1) for e in range(epochs)]
        else:
            bs = [base_bs] * epochs
        total = workload.duration_s[k] if np.isfinite(workload.duration_s[k]) else 3600.0
        rel = np.array([(base_bs / b) ** 0.5 for b in bs])
        durations = np.maximum(rel * total / rel.sum(), 1e-3)
        out.append(
            EpochProfile(
                job_id=k,
                arrival_s=float(np.nan_to_num(workload.arrival_s[k])),
                job_type=str(job_types[k]),
                mode=mode,
                scale_factor=int(max(1, np.nan_to_num(workload.gpus[k], nan=1.0))),
                num_epochs=epochs,
                num_samples_per_epoch=samples_per_epoch,
                bs_every_epoch=tuple(bs),
                duration_every_epoch_s=tuple(round(float(d), 6) for d in durations),
                mem_every_epoch_mb=tuple(float(1000 + b * 20) for b in bs),
                util_every_epoch=tuple(float(min(100, 40 + b / 4)) for b in bs),
            )
        )
    return out


def sia_goodputs(
    cluster: ClusterSpec, *, seed: int = 0, max_gpus: int = 16, base: float | None = None
) -> list[tuple[str, int, int, float]]:
    """Sia-style goodput table of one job: (type, nodes, gpus, goodput samples/s) for gpus
    = 1, 2, 4, ... up to `max_gpus` and the type's count; sub-linear scaling, a penalty for
    spanning nodes and a statistical-efficiency factor that falls with the batch size."""
    return goodput_rows(cluster.types, cluster.counts, node_devices_per_type(cluster),
                        seed=seed, max_gpus=max_gpus, base=base)


def node_devices_per_type(cluster: ClusterSpec) -> dict[str, int]:
    """Devices of each type's largest node (8 for a type without nodes)."""
    per_node = {t: 0 for t in cluster.types}
    for node in cluster.nodes:
        per_node[node.accelerator_type] = max(node.devices, per_node[node.accelerator_type])
    return {t: n or 8 for t, n in per_node.items()}


def goodput_rows(
    types: Sequence[str], counts: Sequence[int], per_node: Mapping[str, int], *,
    seed: int = 0, max_gpus: int = 16, base: float | None = None,
) -> list[tuple[str, int, int, float]]:
    """`sia_goodputs` of a cluster with `types`, their `counts` and devices per node
    `per_node` (`node_devices_per_type`): a snapshot builder computes these once for all
    its jobs."""
    rng = np.random.default_rng(seed)
    rate = base if base is not None else float(rng.lognormal(math.log(200.0), 0.5))
    out = []
    for t, count in zip(types, counts, strict=True):
        speed = type_speed(t) ** 0.8 * float(rng.lognormal(0.0, 0.2))
        gpus = 1
        while gpus <= min(max_gpus, count):
            nodes = math.ceil(gpus / per_node[t])
            scaling = gpus ** float(rng.uniform(0.75, 0.95)) * (0.85 if nodes > 1 else 1.0)
            efficiency = 1.0 / (1.0 + 0.04 * (gpus - 1))
            out.append((t, nodes, gpus, round(rate * speed * scaling * efficiency, 6)))
            gpus *= 2
    return out
