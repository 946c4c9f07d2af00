"""Does a policy's solve keep its deadline in process? The solve alone, without the service.

    python benchmarks/solve_deadline.py [--policies sia pollux] [--jobs 100000 32768]
                                        [--limits 0.3 0.5 1 2] [--repeat 2]

For each policy and size: the time_limits benchmark's seeded snapshot, validated once, then
`solve()` with a deadline `limit` seconds after the solve starts (`repeat` times per limit, in
rotation). Printed: the wall seconds, the excess over the limit (the goal: at most 0.1 s, what
is left of the service's 1.1 x limit + 0.2 s once 100,000 jobs are converted), the termination
and the certificate's relative gap. Reference in the same run: the same solve with a deadline
already past (the work that cannot be cut: goodput table, coefficients, one plan read off the
bound at zero prices, placement).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from time_limits import snapshot

from apportion.server.convert import request_to_model
from apportion.solver.deadline import Deadline
from apportion.solver.model import PolicyRequest, Problem, SolveOptions
from apportion.solver.registry import lookup
from apportion.solver.result import Plan, relative_gap
from apportion.solver.solve import solve


def timed(problem: Problem, policy: PolicyRequest, options: SolveOptions, limit: float
          ) -> tuple[float, Plan]:
    """Wall seconds and plan of one solve due `limit` s after it starts (0 = already past)."""
    started = time.monotonic()
    plan = solve(problem, policy, replace(options, time_limit_s=0.0), Deadline(started + limit))
    return time.monotonic() - started, plan


def row(name: str, jobs: int, label: str, limit: float, wall: float, plan: Plan) -> str:
    cert = plan.certificate
    gap = relative_gap(cert.objective, cert.bound)
    over = f"{wall - limit:+7.3f}" if limit > 0 else "       "
    flag = "OVER" if limit > 0 and wall - limit > 0.1 else ""
    return (f"{name:8} {jobs:7d} {label:>9} {wall:7.3f} {over} {flag:4} "
            f"{cert.termination.value:12} {'-' if gap is None else f'{gap:.1e}':>8}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--policies", nargs="+", default=["sia", "pollux"])
    parser.add_argument("--jobs", type=int, nargs="+", default=[100_000, 32_768])
    parser.add_argument("--limits", type=float, nargs="+", default=[0.3, 0.5, 1.0, 2.0])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    print(f"{'policy':8} {'jobs':>7} {'limit s':>9} {'wall s':>7} {'over s':>7} {'':4} "
          f"{'termination':12} {'gap':>8}")
    for name in args.policies:
        spec = lookup(name)
        spec.load()
        for jobs in args.jobs:
            request = snapshot(spec, jobs)
            data = request.SerializeToString()
            problem, policy, options = request_to_model(request, Deadline.never(), data)
            print(row(name, jobs, "past", 0.0, *timed(problem, policy, options, 0.0)),
                  flush=True)
            for _ in range(args.repeat):
                for limit in args.limits:
                    wall, plan = timed(problem, policy, options, limit)
                    print(row(name, jobs, f"{limit:g}", limit, wall, plan), flush=True)


if __name__ == "__main__":
    main()
