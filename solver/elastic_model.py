"""The inputs of the elastic policies (Optimus B8, SLAQ B9, Lyra B7), as part of the validated
model (`Problem.elastic`).

Built by `apportion.server.elastic_inputs` from the snapshot (validated there) or by tests;
every per-job tuple is aligned with `Problem.jobs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from apportion.solver.arrays import FloatArray, IntArray


@dataclass(frozen=True)
class LossHistory:
    """A job's reported training loss: at least 3 points, steps >= 0 and strictly increasing,
    losses finite and >= 0."""

    steps: FloatArray
    """(k,) step (iteration) of each point, the job's own unit."""
    loss: FloatArray
    """(k,) training loss at that step."""


@dataclass(frozen=True)
class SpeedModel:
    """Optimus's training-speed model of one job on one accelerator type (B8), steps/s with p
    parameter servers and w workers:

    asynchronous  f(p, w) = w / (theta0 + theta1 w/p + theta2 w + theta3 p)
    synchronous   f(p, w) = 1 / (theta0 M/w + theta1 + theta2 w/p + theta3 w + theta4 p)

    The GPU-only form has no parameter servers (`parameter_server_type` = -1): the terms in p
    are then 0 (validated)."""

    synchronous: bool
    theta: FloatArray
    """(4,) asynchronous or (5,) synchronous coefficients, finite and >= 0 (s-based)."""
    batch_size: float = 0.0
    """M, the global batch of a synchronous step (samples, > 0 when synchronous)."""
    parameter_server_type: int = -1
    """Accelerator type index whose devices a parameter server holds; -1 = no parameter
    servers (GPU-only form)."""
    parameter_server_devices: int = 1
    """Devices of `parameter_server_type` per parameter server (>= 1)."""
    max_parameter_servers: int = 1
    """Most parameter servers the job can use (>= 1 with parameter servers)."""

    @property
    def has_parameter_servers(self) -> bool:
        return self.parameter_server_type >= 0


@dataclass(frozen=True)
class ElasticInputs:
    """Per-job loss histories, speed models and current per-node holdings, and the inference
    cluster's loaned servers (Lyra)."""

    loss_history: tuple[LossHistory | None, ...] = ()
    """Per job, its loss history (None = none). Empty = none for any job."""
    speed_model: tuple[tuple[SpeedModel | None, ...], ...] = ()
    """Per job, per accelerator type, its speed model (None = none). Empty = none."""
    node_devices: tuple[tuple[tuple[int, int], ...], ...] = ()
    """Per job, (node index, devices) it holds now (empty = not running or not known)."""
    loaned_nodes: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Node indices the inference cluster has loaned to training (Lyra)."""
    reclaim_nodes: int = 0
    """How many loaned nodes the inference cluster asks back now (0 <= k <= loaned)."""

    def history(self, i: int) -> LossHistory | None:
        return self.loss_history[i] if self.loss_history else None

    def model(self, i: int, j: int) -> SpeedModel | None:
        return self.speed_model[i][j] if self.speed_model else None

    def held(self, i: int) -> tuple[tuple[int, int], ...]:
        return self.node_devices[i] if self.node_devices else ()

    def take(self, index: IntArray) -> ElasticInputs:
        """The inputs of the jobs `index`, in that order (the loaned nodes unchanged)."""
        picked = index.tolist()
        return ElasticInputs(
            loss_history=tuple(self.loss_history[i] for i in picked) if self.loss_history
            else (),
            speed_model=tuple(self.speed_model[i] for i in picked) if self.speed_model else (),
            node_devices=tuple(self.node_devices[i] for i in picked) if self.node_devices
            else (),
            loaned_nodes=self.loaned_nodes,
            reclaim_nodes=self.reclaim_nodes,
        )
