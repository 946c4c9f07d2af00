"""What a policy's input check reads (`PolicySpec.input_check`)."""

from __future__ import annotations

from dataclasses import dataclass

from apportion.solver.model import PolicyRequest, Problem, SolveOptions
from apportion.solver.registry import PolicySpec
from apportion.solver.validation import JobPaths
from apportion.v1 import allocation_service_pb2 as service_pb


@dataclass(frozen=True)
class RequestContext:
    """One request after conversion: the model, the resolved policy and its registry entry,
    the options, and the wire request (for field paths that index its lists)."""

    problem: Problem
    policy: PolicyRequest
    spec: PolicySpec
    options: SolveOptions
    request: service_pb.SolveRequest
    paths: JobPaths
    """The field path of each job's entries (`snapshot.jobs[i]` or `snapshot.job_columns`)."""
