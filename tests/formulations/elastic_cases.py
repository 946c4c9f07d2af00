"""Problems for the elastic policies (Optimus, SLAQ, Lyra) built directly on the model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from apportion.solver.elastic_model import ElasticInputs, LossHistory, SpeedModel
from apportion.solver.model import GivenGoodput, GivenGoodputs, Problem
from apportion.solver.validation import make_problem


def sync_model(theta0: float, theta1: float, theta3: float, batch: float = 64.0) -> SpeedModel:
    """Optimus's synchronous GPU-only model f(w) = 1/(theta0 M/w + theta1 + theta3 w): time
    per step convex in w, so the time a job saves is concave in its workers."""
    return SpeedModel(True, np.array([theta0, theta1, 0.0, theta3, 0.0]), batch)


def elastic_problem(
    count: Sequence[int],
    remaining: Sequence[float],
    *,
    models: Sequence[SpeedModel | None] | None = None,
    configurations: Sequence[Sequence[GivenGoodput]] | None = None,
    min_devices: Sequence[int] | None = None,
    max_devices: Sequence[int] | None = None,
    nodes: Sequence[tuple[int, int]] = (),
    current: Sequence[tuple[int, tuple[tuple[int, int], ...]] | None] | None = None,
    loaned: Sequence[int] = (),
    reclaim: int = 0,
    histories: Sequence[LossHistory | None] | None = None,
    arrival: Sequence[float] | None = None,
    throughput: np.ndarray | None = None,
) -> Problem:
    """m = len(remaining) jobs on types t0.. with `count` devices; `models[i]` applies on every
    type; `nodes` = (type, devices) per node (must add up to `count`); `current[i]` = (type,
    ((node, devices), ...)) of a running job."""
    m, n = len(remaining), len(count)
    thr = np.ones((m, n)) if throughput is None else throughput
    problem = make_problem([f"t{j}" for j in range(n)], list(count), thr)
    jobs = replace(
        problem.jobs,
        total_steps=np.asarray(remaining, np.float64),
        steps_done=np.zeros(m),
        arrival_time_s=np.asarray(arrival if arrival is not None else np.arange(m), float),
        min_devices=np.asarray(min_devices if min_devices is not None else [1] * m, np.int64),
        max_devices=np.asarray(max_devices if max_devices is not None else [0] * m, np.int64),
        scale_unit=np.ones((m, n), np.int64),
        given_goodput=(GivenGoodputs.of(tuple(tuple(c) for c in configurations)) if configurations
                       else problem.jobs.given_goodput),
    )
    cluster = problem.cluster
    if nodes:
        cluster = replace(
            cluster,
            node_names=tuple(f"node{k}" for k in range(len(nodes))),
            node_type=np.array([t for t, _ in nodes], np.int64),
            node_devices=np.array([d for _, d in nodes], np.int64),
        )
    history = problem.history
    node_devices: tuple[tuple[tuple[int, int], ...], ...] = ()
    if current is not None:
        types = np.array([c[0] if c else -1 for c in current], np.int64)
        held = np.array([sum(d for _, d in c[1]) if c else 0 for c in current], np.int64)
        history = replace(history, current_type=types, current_devices=held,
                          current_nodes=tuple(tuple(v for v, _ in c[1]) if c else ()
                                              for c in current))
        node_devices = tuple(c[1] if c else () for c in current)
    elastic = ElasticInputs(
        loss_history=tuple(histories) if histories is not None else (),
        speed_model=tuple(tuple([model] * n) for model in models) if models is not None else (),
        node_devices=node_devices,
        loaned_nodes=np.asarray(loaned, np.int64),
        reclaim_nodes=reclaim,
    )
    return replace(problem, jobs=jobs, cluster=cluster, history=history, elastic=elastic)
