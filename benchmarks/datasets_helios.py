"""Reading speed and peak memory of the trace readers on large synthetic files.

Writes a 3.4 M-row Helios-format `cluster_log.csv` and a 1 M-job PAI job + task table pair
(synthetic, seeded) to a temporary directory, then reads each in a fresh child process and
prints rows/s, wall time and the child's peak resident memory (ru_maxrss).

    python benchmarks/datasets_helios.py                 # 3.4 M Helios rows, 1 M PAI jobs
    python benchmarks/datasets_helios.py --helios-rows 100000 --pai-rows 100000
Targets (issue 8): Helios 3.4 M rows in < 30 s and < 1 GiB.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

BLOCK = 200_000


def write_helios(path: Path, rows: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    origin = datetime(2020, 4, 1, tzinfo=UTC).timestamp()
    states = np.array(["COMPLETED", "CANCELLED", "FAILED", "TIMEOUT"])
    with open(path, "w") as fh:
        fh.write(
            "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,"
            "end_time,duration,queue\n"
        )
        submit = origin
        for first in range(0, rows, BLOCK):
            n = min(BLOCK, rows - first)
            gaps = rng.exponential(4.5, n)
            subs = submit + np.cumsum(np.round(gaps))
            submit = float(subs[-1])
            queue = np.round(rng.exponential(60, n))
            dur = np.round(60 * 10 ** rng.uniform(0, 4, n))
            gpus = rng.choice([0, 1, 2, 4, 8, 16, 32], n, p=[0.2, 0.5, 0.1, 0.1, 0.07, 0.02, 0.01])
            users = rng.integers(0, 2000, n)
            vcs = rng.integers(0, 30, n)
            st = states[rng.choice(4, n, p=[0.7, 0.15, 0.1, 0.05])]

            def fmt(x: np.ndarray) -> list[str]:
                return [datetime.fromtimestamp(v, UTC).strftime("%Y-%m-%d %H:%M:%S") for v in x]

            s1, s2, s3 = fmt(subs), fmt(subs + queue), fmt(subs + queue + dur)
            fh.write(
                "".join(
                    f"{first + k},u{users[k]},vc{vcs[k]},{gpus[k]},{gpus[k] * 6},"
                    f"{max(1, gpus[k] // 8)},{st[k]},{s1[k]},{s2[k]},{s3[k]},{int(dur[k])},"
                    f"{int(queue[k])}\n"
                    for k in range(n)
                )
            )


def write_pai(job_path: Path, task_path: Path, rows: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    types = np.array(["V100", "P100", "T4", "MISC", ""])
    with open(job_path, "w") as jobs, open(task_path, "w") as tasks:
        t = 1.0e6
        for first in range(0, rows, BLOCK):
            n = min(BLOCK, rows - first)
            start = t + np.cumsum(np.round(rng.exponential(3.0, n)))
            t = float(start[-1])
            end = start + np.round(60 * 10 ** rng.uniform(0, 4, n))
            inst = rng.choice([1, 1, 1, 2, 4, 8], n)
            plan_gpu = rng.choice([25, 50, 100, 100, 0], n)
            gtype = types[rng.integers(0, 5, n)]
            jobs.write(
                "".join(
                    f"j{first + k},i{first + k},u{k % 997},Terminated,{start[k]:.0f},{end[k]:.0f}\n"
                    for k in range(n)
                )
            )
            tasks.write(
                "".join(
                    f"j{first + k},worker,{inst[k]},Terminated,{start[k]:.0f},{end[k]:.0f},600,"
                    f"29.3,{plan_gpu[k]},{gtype[k]}\n"
                    for k in range(n)
                )
            )


CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
if sys.argv[1] == "helios":
    from apportion.datasets.helios import read_helios
    table = read_helios(sys.argv[2])
else:
    from apportion.datasets.pai import read_pai
    table = read_pai(sys.argv[2], sys.argv[3])
wall = time.perf_counter() - t0
print(json.dumps({"rows": len(table), "wall_s": wall,
                  "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(kind: str, *paths: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, kind, *map(str, paths)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def baseline_mib() -> float:
    code = (
        "import resource, numpy, apportion.datasets.helios; "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
    )
    return float(
        subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True
        ).stdout
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--helios-rows", type=int, default=3_400_000)
    parser.add_argument("--pai-rows", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        print(f"interpreter + numpy + reader imports: {baseline_mib():.0f} MiB peak RSS")
        if args.helios_rows:
            t0 = time.perf_counter()
            write_helios(d / "cluster_log.csv", args.helios_rows)
            size = (d / "cluster_log.csv").stat().st_size / 2**20
            print(
                f"helios: wrote {args.helios_rows:,} rows ({size:.0f} MiB) in "
                f"{time.perf_counter() - t0:.1f} s"
            )
            r = measure("helios", d / "cluster_log.csv")
            print(
                f"helios: read {r['rows']:,.0f} rows in {r['wall_s']:.1f} s "
                f"({r['rows'] / r['wall_s']:,.0f} rows/s), peak RSS {r['maxrss_mib']:.0f} MiB"
            )
        if args.pai_rows:
            t0 = time.perf_counter()
            write_pai(d / "job.csv", d / "task.csv", args.pai_rows)
            print(f"pai: wrote {args.pai_rows:,} jobs + tasks in {time.perf_counter() - t0:.1f} s")
            r = measure("pai", d / "job.csv", d / "task.csv")
            print(
                f"pai: read {r['rows']:,.0f} jobs (+ {r['rows']:,.0f} tasks) in "
                f"{r['wall_s']:.1f} s ({r['rows'] / r['wall_s']:,.0f} jobs/s), "
                f"peak RSS {r['maxrss_mib']:.0f} MiB"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
