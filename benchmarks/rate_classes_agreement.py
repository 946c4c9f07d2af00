"""Rate classes against the job-level LP on many random catalog workloads (makespan and
finish-time fairness with space sharing): the largest relative difference of the objectives,
the statuses, and the time ratio.

    python benchmarks/rate_classes_agreement.py [--seeds 0 120]

Workloads as in `space_sharing.py`: 64, 128 or 256 jobs drawn per seed, rate classes of whole
job types or of about 2, 3 or 6 jobs (`split_classes`). The job-level LP is the partner-cell
LP with one group per demand (HiGHS interior point), run in the same process.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from space_sharing import POLICIES, job_level, split_classes, workload

from apportion.solver.model import PolicyRequest
from apportion.solver.result import Termination
from apportion.solver.solve import solve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs=2, default=[0, 120])
    args = parser.parse_args()
    worst, not_optimal, ours_s, theirs_s, runs = 0.0, 0, 0.0, 0.0, 0
    for seed in range(*args.seeds):
        rng = np.random.default_rng(seed)
        size = int(rng.choice([64, 128, 256]))
        problem = workload(size, seed=seed)
        class_size = int(rng.choice([0, 2, 3, 6]))
        if class_size:
            problem = split_classes(problem, class_size, seed)
        for policy in ("makespan", "ftf"):
            name, params = POLICIES[policy]
            started = time.perf_counter()
            plan = solve(problem, PolicyRequest(name, params))
            ours_s += time.perf_counter() - started
            other, other_s = job_level(problem, name, params)
            theirs_s += other_s
            runs += 1
            a, b = plan.certificate.objective, other.certificate.objective
            diff = abs(a - b) / abs(b) if a is not None and b else float("inf")
            worst = max(worst, diff)
            if plan.certificate.termination is not Termination.OPTIMAL or diff > 1e-6:
                not_optimal += 1
                print(f"seed {seed} jobs {size} class size {class_size} {policy}: "
                      f"{a} vs {b} ({plan.certificate.termination}, "
                      f"{plan.certificate.detail})", flush=True)
    print(f"{runs} solves: largest rel. diff {worst:.1e}, {not_optimal} not optimal or apart "
          f"by more than 1e-6; apportion {ours_s:.1f} s, job-level LP {theirs_s:.1f} s "
          f"({theirs_s / max(ours_s, 1e-9):.1f}x)")


if __name__ == "__main__":
    main()
