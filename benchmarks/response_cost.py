"""What writing a plan's response costs per job, by plan kind (the figures behind the service's
response reserve, `server/pipeline.py` RESPONSE_RESERVE).

    python benchmarks/response_cost.py [--jobs 100000] [--kinds queue time_share ...]

For one policy of each plan kind: the time_limits benchmark's seeded snapshot (smaller where
that benchmark builds it smaller), solved in process with a time limit (`POLICY`), then the response
written as the service writes it (`plan_response(...).serialize()`), best of 3; for the queue
and configuration plans also as they were written before (a message per queue entry, per
configuration and per elastic section), the reference. Printed: the
wall seconds, wall and CPU microseconds per job (the CPU time does not grow when other work
shares the cores) and, as the reference in the same run, the per-job reserve the pipeline
holds back for that kind and the ratio of the wall time to it (above 1 = the reserve is
short at this load).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from time_limits import snapshot

from apportion.server.convert import request_to_model
from apportion.server.pipeline import RESPONSE_RESERVE
from apportion.server.response import plan_response
from apportion.solver.capabilities import PlanKind
from apportion.solver.deadline import NO_DEADLINE, Deadline
from apportion.solver.model import PolicyRequest, Problem
from apportion.solver.registry import lookup
from apportion.solver.result import Plan
from apportion.solver.solve import solve

POLICY = {
    PlanKind.TIME_SHARE: ("weighted_max_min_fairness", 100_000, 3.0),
    PlanKind.QUEUE: ("allox", 100_000, 3.0),
    PlanKind.MARKET: ("fisher_market", 100_000, 3.0),
    PlanKind.CONFIGURATION: ("optimus", 100_000, 3.0),
    PlanKind.WINDOW: ("shockwave", 8_192, 30.0),
    PlanKind.GROUPS: ("iadeep", 100_000, 3.0),
}
"""A policy of each kind, its size (the time_limits benchmark's) and the solve's limit (s):
Shockwave's window needs longer to have a plan."""


def measure(kind: PlanKind, jobs: int | None) -> None:
    name, size, limit_s = POLICY[kind]
    size = jobs if jobs is not None else size
    spec = lookup(name)
    request = snapshot(spec, size)
    serialized = request.SerializeToString()
    problem, policy, options = request_to_model(request, NO_DEADLINE, serialized)
    spec.load()
    plan = solve(problem, policy, replace(options, time_limit_s=0.0), Deadline.after(limit_s))
    wall = cpu = float("inf")
    for _ in range(3):
        started, started_cpu = time.perf_counter(), time.process_time()
        plan_response(plan, problem, policy, 0.0, limit_s).serialize()
        wall = min(wall, time.perf_counter() - started)
        cpu = min(cpu, time.process_time() - started_cpu)
    reserve = RESPONSE_RESERVE[kind]
    print(f"{kind.value:<14} {name:<26} {size:>7} jobs  wall {wall:6.3f} s"
          f" {wall / size * 1e6:5.2f} us/job  cpu {cpu / size * 1e6:5.2f} us/job"
          f"  reserve {reserve * 1e6:5.2f} us/job  wall/reserve {wall / size / reserve:4.2f}"
          f"  ({plan.certificate.termination.value})", flush=True)
    reference = {PlanKind.QUEUE: _queue_messages,
                 PlanKind.CONFIGURATION: _configuration_messages}.get(kind)
    if reference is not None:
        wall = min(reference(plan, problem, policy, limit_s) for _ in range(3))
        print(f"{'':<14} {'(a message per entry)':<26} {size:>7} jobs  wall {wall:6.3f} s"
              f" {wall / size * 1e6:5.2f} us/job", flush=True)


def _configuration_messages(plan: Plan, problem: Problem, policy: PolicyRequest,
                            limit_s: float) -> float:
    """The wall time of a configuration plan's response written the way it was before its
    configurations and elastic section were written with the allocations' records: a
    `ConfigurationChoice` and an `ElasticAllocation` message per job (the reference builder
    of the test that compares the two)."""
    if plan.configurations is None:
        return float("nan")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.server.test_elastic_wire import reference

    started = time.perf_counter()
    reference(plan, problem, policy).SerializeToString()
    return time.perf_counter() - started


def _queue_messages(plan: Plan, problem: Problem, policy: PolicyRequest, limit_s: float
                    ) -> float:
    """The wall time of the queue plan's response written the way it was before its records
    were written as bytes: a `QueueAssignment` message per job and a `DeviceQueue` per device
    (the reference builders of the test that compares the two)."""
    queues = plan.queues
    assert queues is not None
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.server.test_queue_wire import device_queues_built, queue_built

    names, ids = list(problem.cluster.type_names), list(problem.jobs.ids)
    started = time.perf_counter()
    message = plan_response(replace(plan, queues=None), problem, policy, 0.0, limit_s).message()
    queue_built(queues, names, ids, message.plan.jobs)
    message.plan.MergeFrom(device_queues_built(queues, names, ids))
    message.SerializeToString()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None, help="every kind at this size")
    parser.add_argument("--kinds", nargs="*", default=[kind.value for kind in POLICY])
    args = parser.parse_args()
    for kind in args.kinds:
        measure(PlanKind(kind), args.jobs)


if __name__ == "__main__":
    main()
