"""Where a simulation's snapshots are solved: in this process (`apportion.solver.solve`), or by
a running `apportion serve` (`--server HOST:PORT`), as a real scheduler would call it. Both
return the same `plans.Decision`; the service path sends the snapshot built by
`simulator.wire`, which the service converts back to the same model.

`check_snapshot` runs the service's own validation (`request_to_model`) on a snapshot, so a
workload the policy cannot take (e.g. Shockwave on a cluster of several types) is reported
with the service's field paths before a simulation starts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from apportion.simulator.errors import SimulationError, SimulationInputError
from apportion.simulator.plans import Decision, decision_from_plan, decision_from_response
from apportion.simulator.wire import request_message
from apportion.solver.capabilities import PlanKind
from apportion.solver.model import PolicyRequest, Problem, SolveOptions

CALL_TIMEOUT_S = 600.0
"""Longest wait for one remote solve (s), on top of the request's own time limit."""
MAX_MESSAGE_BYTES = 256 * 1024 * 1024


class Solver(Protocol):
    """Solves one snapshot for the simulation's policy."""

    def __call__(self, problem: Problem, kind: PlanKind) -> Decision: ...

    def close(self) -> None: ...


@dataclass
class InProcessSolver:
    policy: PolicyRequest
    options: SolveOptions

    def __call__(self, problem: Problem, kind: PlanKind) -> Decision:
        from apportion.solver.solve import solve

        return decision_from_plan(solve(problem, self.policy, self.options), problem, kind)

    def close(self) -> None:
        return None


@dataclass
class RemoteSolver:
    """Calls `AllocationService.Solve` on `address` (HOST:PORT) for every snapshot."""

    address: str
    policy: PolicyRequest
    options: SolveOptions
    _channel: Any = field(default=None, repr=False)
    _stub: Any = field(default=None, repr=False)

    def __call__(self, problem: Problem, kind: PlanKind) -> Decision:
        import grpc

        if self._stub is None:
            from apportion.v1 import allocation_service_pb2_grpc as service_grpc

            self._channel = grpc.insecure_channel(
                self.address,
                options=[
                    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ],
            )
            self._stub = service_grpc.AllocationServiceStub(self._channel)
        request = request_message(problem, self.policy, self.options)
        timeout = CALL_TIMEOUT_S + self.options.time_limit_s
        try:
            response = self._stub.Solve(request, timeout=timeout, wait_for_ready=True)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            detail = exc.details() if hasattr(exc, "details") else str(exc)
            raise SimulationError(f"--server {self.address}: {code}: {detail}") from exc
        lease_s = float(getattr(self.policy.parameters, "lease_s", 0.0) or 0.0)
        return decision_from_response(response, problem, kind, lease_s)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
            self._stub = None


def check_snapshot(problem: Problem, policy: PolicyRequest, options: SolveOptions) -> None:
    """Validate `problem` as the service would; `SimulationInputError` lists the violations."""
    from apportion.server.convert import request_to_model
    from apportion.solver.errors import ValidationError

    try:
        request_to_model(request_message(problem, policy, options))
    except ValidationError as exc:
        raise SimulationInputError(
            f"policy {policy.requested_name or policy.name!r} cannot take this workload "
            f"(first snapshot at t={problem.time_s:g} s):\n{exc}"
        ) from exc


def service_reading(problem: Problem, policy: PolicyRequest, options: SolveOptions) -> Problem:
    """`problem` with the device-sharing inputs the service derives from its snapshot (the
    devices from the cluster's nodes, each job's sharing defaults, the groups' measured
    interference): the co-location policies then see in this process what `apportion
    serve` gives them."""
    from apportion.server.convert import request_to_model
    from apportion.solver.errors import ValidationError

    try:
        read, _, _ = request_to_model(request_message(problem, policy, options))
    except ValidationError as exc:
        raise SimulationInputError(
            f"policy {policy.requested_name or policy.name!r} cannot take the snapshot at "
            f"t={problem.time_s:g} s:\n{exc}"
        ) from exc
    return replace(problem, sharing=read.sharing)


@dataclass
class SolveRecord:
    """One solve of a simulation, for the per-round table."""

    round_index: int
    jobs: int
    wall_s: float
    solver_s: float
    termination: str


def timed(solver: Solver, problem: Problem, kind: PlanKind) -> tuple[Decision, float]:
    """The decision and the wall time of the call (s)."""
    started = time.perf_counter()
    decision = solver(problem, kind)
    return decision, time.perf_counter() - started
