"""How fast an elastic job trains with each allocation it can get (B7, B8, B9).

A job's options on an accelerator type are its *states*, smallest first: a number of workers
w (each holding `unit` devices of the type, the job's `Elasticity.scale_unit`) and, in
Optimus's parameter-server form, a number of parameter servers p (each holding devices of the
model's parameter-server type). The training speed (steps/s, the job's own unit of progress)
of each state comes from, in order:

1. the job's Optimus speed model on the type (`SpeedModel`, B8): every worker count whose
   devices lie within the job's elasticity range, and 1..max parameter servers;
2. its per-configuration goodput on the type (`Jobs.given_goodput`): the device counts listed
   (the entry with the fewest nodes; placement packs a job onto the fewest servers), read as
   progress per second;
3. its throughput at `scale_factor` devices: a rigid job with that one state, when the
   elasticity range admits it.

Without any, the job cannot use the type. The elasticity range is [min_devices, max_devices]
(`Jobs.min_devices`/`max_devices`; 0 = up to the policy's `max_devices` and the type's count).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apportion.solver.elastic_model import SpeedModel
from apportion.solver.model import FloatArray, IntArray, Problem

MAX_WORKER_STATES = 256
"""Most worker counts offered per job and type."""
MAX_STATES = 1024
"""Most states per job and type (worker counts x parameter-server counts): the menu size
bound."""


@dataclass(frozen=True)
class TypeOptions:
    """A job's states on one accelerator type, state 0 = its base (smallest)."""

    type_index: int
    devices: IntArray
    """(S,) devices of the type held (workers x unit)."""
    workers: IntArray
    """(S,) workers."""
    parameter_servers: IntArray
    """(S,) parameter servers (0 in the GPU-only form)."""
    parameter_server_type: int
    """Type index of the parameter servers' devices, -1 = none."""
    parameter_server_devices: IntArray
    """(S,) devices of `parameter_server_type` held."""
    speed: FloatArray
    """(S,) training speed (steps/s)."""
    unit: int
    """Devices per worker."""
    worker_axis: int
    """Worker counts per parameter-server count: state = p_index * worker_axis + w_index."""
    source: str
    """"speed model", "configurations" or "throughput"."""

    @property
    def num_states(self) -> int:
        return int(self.devices.size)

    def moves(self) -> list[tuple[int, int]]:
        """One more worker, or one more parameter server, from every state."""
        out: list[tuple[int, int]] = []
        rows = self.num_states // self.worker_axis
        for p in range(rows):
            for w in range(self.worker_axis):
                s = p * self.worker_axis + w
                if w + 1 < self.worker_axis:
                    out.append((s, s + 1))
                if p + 1 < rows:
                    out.append((s, s + self.worker_axis))
        return out


def optimus_speed(model: SpeedModel, parameter_servers: IntArray | FloatArray,
                  workers: IntArray | FloatArray) -> FloatArray:
    """Optimus's speed f(p, w) in steps/s (`SpeedModel`); p is ignored in the GPU-only form."""
    theta = model.theta
    w = np.asarray(workers, np.float64)
    p = np.maximum(np.asarray(parameter_servers, np.float64), 1.0)
    per_ps = w / p if model.has_parameter_servers else np.zeros_like(w)
    ps = p if model.has_parameter_servers else np.zeros_like(w)
    if model.synchronous:
        step = (theta[0] * model.batch_size / w + theta[1] + theta[2] * per_ps
                + theta[3] * w + theta[4] * ps)
        return np.asarray(1.0 / step, np.float64)
    step = theta[0] + theta[1] * per_ps + theta[2] * w + theta[3] * ps
    return np.asarray(w / step, np.float64)


def device_range(problem: Problem, i: int, j: int, default_max: int) -> tuple[int, int, int]:
    """(lo, hi, unit): the devices of type j job i accepts and its devices per worker."""
    jobs = problem.jobs
    unit = int(jobs.scale_unit[i, j]) if jobs.scale_unit.size else 1
    lo = int(jobs.min_devices[i]) if jobs.min_devices.size else 1
    top = int(jobs.max_devices[i]) if jobs.max_devices.size else 0
    hi = min(top if top > 0 else default_max, int(problem.cluster.count[j]))
    return max(lo, 1), hi, max(unit, 1)


def type_options(problem: Problem, i: int, j: int, default_max: int,
                 entries: list[tuple[int, int, int, float]] | None = None
                 ) -> TypeOptions | None:
    """Job i's states on type j (module docstring), None when it cannot use the type.
    `entries`: job i's given goodputs (`GivenGoodputs.entries`), when already read."""
    count = int(problem.cluster.count[j])
    if count <= 0:
        return None
    model = problem.elastic.model(i, j) if problem.elastic is not None else None
    lo, hi, unit = device_range(problem, i, j, default_max)
    if model is not None:
        first = -(-lo // unit)
        servers = (
            np.arange(1, model.max_parameter_servers + 1, dtype=np.int64)
            if model.has_parameter_servers else np.zeros(1, np.int64)
        )
        most = min(MAX_WORKER_STATES, MAX_STATES // servers.size)
        workers = np.arange(first, hi // unit + 1, dtype=np.int64)[:most]
        if workers.size == 0:
            return None
        p_grid = np.repeat(servers, workers.size)
        w_grid = np.tile(workers, servers.size)
        ps_devices = p_grid * model.parameter_server_devices if model.has_parameter_servers else (
            np.zeros_like(p_grid))
        return TypeOptions(
            j, w_grid * unit, w_grid, p_grid, model.parameter_server_type, ps_devices,
            optimus_speed(model, p_grid, w_grid), unit, workers.size, "speed model",
        )
    if entries is None:
        entries = problem.jobs.given_goodput.entries(i)
    rows = [(nodes, gpus, goodput) for t, nodes, gpus, goodput in entries
            if t == j and lo <= gpus <= hi and gpus % unit == 0 and goodput > 0]
    if rows:
        best: dict[int, tuple[int, float]] = {}
        for nodes, gpus, goodput in rows:
            held = best.get(gpus)
            if held is None or nodes < held[0]:
                best[gpus] = (nodes, goodput)
        devices = np.array(sorted(best), np.int64)[:MAX_WORKER_STATES]
        speed = np.array([best[int(d)][1] for d in devices], np.float64)
        zeros = np.zeros_like(devices)
        return TypeOptions(j, devices, devices // unit, zeros, -1, zeros, speed, unit,
                           devices.size, "configurations")
    scale = int(problem.jobs.scale_factor[i])
    throughput = float(problem.jobs.throughput[i, j])
    if throughput > 0 and scale <= count and lo <= scale <= hi:  # within its elasticity
        one = np.array([scale], np.int64)
        zero = np.zeros(1, np.int64)
        return TypeOptions(j, one, np.array([max(scale // unit, 1)]), zero, -1, zero,
                           np.array([throughput]), max(min(unit, scale), 1), 1, "throughput")
    return None


def job_entries(problem: Problem, i: int) -> list[tuple[int, int, int, float]]:
    """Job i's given goodputs as (type index, nodes, devices, goodput), read from the columns'
    slices (`GivenGoodputs.entries` without making Python lists of every job's columns: a
    policy under a deadline may read few jobs)."""
    given = problem.jobs.given_goodput
    if not len(given):
        return []
    first, end = int(given.start[i]), int(given.start[i + 1])
    if first == end:
        return []
    return list(zip(given.type_index[first:end].tolist(), given.nodes[first:end].tolist(),
                    given.devices[first:end].tolist(), given.goodput[first:end].tolist(),
                    strict=True))


def job_options(problem: Problem, i: int, default_max: int) -> list[TypeOptions]:
    """Job i's states on every type it can use, in type order."""
    out = []
    entries = job_entries(problem, i)  # read once for every type
    for j in range(problem.cluster.num_types):
        options = type_options(problem, i, j, default_max, entries)
        if options is not None:
            out.append(options)
    return out


def thinned(options: TypeOptions, most_workers: int) -> TypeOptions:
    """`options` with at most `most_workers` worker counts per parameter-server count: the
    smallest, the largest and geometrically spaced ones between (for menus too large to hold;
    the base state stays state 0)."""
    axis = options.worker_axis
    if axis <= most_workers:
        return options
    keep = np.unique(np.round(np.geomspace(1, axis, max(most_workers, 2))).astype(np.int64) - 1)
    rows = options.num_states // axis
    index = (np.arange(rows)[:, None] * axis + keep[None, :]).ravel()
    return TypeOptions(
        options.type_index, options.devices[index], options.workers[index],
        options.parameter_servers[index], options.parameter_server_type,
        options.parameter_server_devices[index], options.speed[index], options.unit,
        int(keep.size), options.source,
    )
