"""CPU cores and host memory: what resource-shape policies (synergy) allocate beside GPUs.

* Nodes: a node's cores and memory come from the cluster file (`nodes[].cpus`,
  `nodes[].memoryGib`); a node without them gets `DEFAULT_CPUS_PER_GPU` cores and
  `DEFAULT_MEMORY_GIB_PER_GPU` GiB per device (Synergy's Philly-like servers: 8 GPUs, 24
  cores, 500 GiB). A cluster without a node layout is laid out on nodes of
  `DEFAULT_GPUS_PER_NODE` devices per type (last node partial).
* Profiles (`attach_profiles`): per job a `ResourceGrid`, its throughput over cores and GiB per
  GPU relative to its throughput at the GPU-proportional share. `builtin` draws a synthetic
  concave grid per job type (`datasets.colocation_profiles.synthetic_resource_grid`); a path
  reads Synergy's throughput-matrix CSV and gives each job type one of its models (drawn),
  at the job's GPU count when the file has it, else on 1 GPU. Jobs of one type share a grid:
  same `job_type`, else the same gang and throughput row. Draws are seeded by the run's seed
  and the type, so every policy of a run sees the same profiles.
* Speed (`resource_speedup`): a job given c cores and g GiB in all on its d GPUs runs at its
  throughput times grid(c/d, g/d) / grid(fair point), where grid(x, y) is the value at the
  largest grid point within (x, y) on both axes and the fair point is the largest grid point
  within the cluster's GPU-proportional share (the point synergy's fair-share floor uses).
"""

from __future__ import annotations

import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np

from apportion.datasets.cluster import ClusterSpec
from apportion.datasets.colocation_profiles import read_synergy_profiles, synthetic_resource_grid
from apportion.datasets.errors import TraceFormatError
from apportion.datasets.generators import make_cluster
from apportion.formulations.synergy import fair_point
from apportion.simulator.errors import SimulationError, SimulationInputError
from apportion.simulator.workload import Workload
from apportion.solver.model import FloatArray
from apportion.solver.sharing import ResourceGrid

DEFAULT_CPUS_PER_GPU = 3.0
"""Cores per device of a node that does not give its own (Synergy's 24 cores / 8 GPUs)."""
DEFAULT_MEMORY_GIB_PER_GPU = 62.5
"""GiB per device of a node that does not give its own (Synergy's 500 GiB / 8 GPUs)."""
DEFAULT_GPUS_PER_NODE = 8
"""Node size when the cluster has no node layout (Synergy's servers)."""
BUILTIN = "builtin"


def with_host_resources(cluster: ClusterSpec) -> ClusterSpec:
    """`cluster` with every node's cores and memory (module docstring)."""
    if not cluster.nodes:
        laid = make_cluster(cluster.count, gpus_per_node=DEFAULT_GPUS_PER_NODE)
        cluster = replace(cluster, nodes=tuple(
            replace(node, cpus=0.0, memory_gib=0.0) for node in laid.nodes
            if node.devices > 0
        ))
    nodes = tuple(
        replace(
            node,
            cpus=node.cpus if node.cpus > 0 else DEFAULT_CPUS_PER_GPU * node.devices,
            memory_gib=(
                node.memory_gib if node.memory_gib > 0
                else DEFAULT_MEMORY_GIB_PER_GPU * node.devices
            ),
        )
        for node in cluster.nodes
    )
    return replace(cluster, nodes=nodes)


def host_capacity(cluster: ClusterSpec) -> tuple[FloatArray, FloatArray]:
    """(nodes,) cores and (nodes,) GiB of each node, in the cluster's node order."""
    return (np.array([n.cpus for n in cluster.nodes], np.float64),
            np.array([n.memory_gib for n in cluster.nodes], np.float64))


def _type_key(w: Workload, i: int) -> str:
    if w.job_type and w.job_type[i]:
        return w.job_type[i]
    row = ",".join(f"{x:.9g}" for x in w.throughput[i].tolist())
    return f"{int(w.scale_factor[i])}|{row}"


def attach_profiles(w: Workload, source: str, seed: int = 0) -> Workload:
    """`w` with a resource profile per job from `source` ("builtin" or a Synergy
    throughput-matrix CSV; module docstring)."""
    table: dict[str, ResourceGrid] = {}
    models: list[str] = []
    if source != BUILTIN:
        if not Path(source).is_file():
            raise SimulationInputError(
                f"--resource-profiles {source}: no such file (give 'builtin' or Synergy's "
                "throughput-matrix CSV)"
            )
        try:
            table = read_synergy_profiles(source)
        except (TraceFormatError, OSError, UnicodeDecodeError) as exc:
            raise SimulationInputError(f"--resource-profiles: {exc}") from exc
        models = sorted({key.rsplit("_", 1)[0] for key in table})
        if not models:
            raise SimulationInputError(f"--resource-profiles {source}: no profiles in the file")
    grids: dict[str, ResourceGrid] = {}
    out: list[ResourceGrid | None] = []
    for i in range(w.num_jobs):
        key = _type_key(w, i)
        if key not in grids:
            rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
            if not models:
                grids[key] = synthetic_resource_grid(rng)
            else:
                model = models[int(rng.integers(len(models)))]
                gpus = int(w.scale_factor[i])
                found = table.get(f"{model}_{gpus}", table.get(f"{model}_1"))
                if found is None:
                    raise SimulationInputError(
                        f"--resource-profiles {source}: model {model!r} has no profile on "
                        f"{gpus} or 1 GPU"
                    )
                grids[key] = found
        out.append(grids[key])
    return replace(w, resource_grid=tuple(out))


def grid_value(grid: ResourceGrid, cpus_per_gpu: float, memory_gib_per_gpu: float) -> float:
    """The grid's throughput at its largest point within (cores, GiB) per GPU on both axes
    (the lookup synergy's fair point uses); NaN below the grid on either axis."""
    a, b = fair_point(grid, cpus_per_gpu, memory_gib_per_gpu)
    if a < 0 or b < 0:
        return float("nan")
    return float(grid.throughput[a, b])


def resource_speedup(grid: ResourceGrid, cpus: float, memory_gib: float, gpus: int,
                     fair: tuple[float, float], job: str) -> float:
    """A job's speed with `cpus` cores and `memory_gib` GiB in all on `gpus` GPUs over its
    speed at the fair point (module docstring); SimulationError when the allocation is below
    its profile or the fair point has no throughput."""
    base = grid_value(grid, *fair)
    value = grid_value(grid, cpus / gpus, memory_gib / gpus)
    if not base > 0:
        raise SimulationError(f"job {job!r}: its profile has no throughput at the fair share")
    if not value >= 0:
        raise SimulationError(
            f"job {job!r} was given {cpus:g} cores and {memory_gib:g} GiB on {gpus} GPUs, "
            "below every point of its profile"
        )
    return value / base


def nodes_used(devices_on: tuple[tuple[int, int], ...], cpus: float, memory_gib: float,
               gpus: int) -> list[tuple[int, float, float]]:
    """(node, cores, GiB) a grant holds on each of its nodes: its cores and memory spread in
    proportion to its devices there (synergy places cores and memory with each GPU)."""
    return [(k, cpus * d / gpus, memory_gib * d / gpus) for k, d in devices_on]

