"""How fast `apportion serve` starts and replaces a worker.

    python benchmarks/startup.py [--repeat 5] [--workers 2]

* listening: seconds from launching ``apportion serve --workers N --port 0`` to its
  ``apportion listening on`` line (every worker ready). Target: < 2 s with 2 workers.
* respawn: a server with one worker; the worker is killed (SIGKILL) and small requests are
  sent until one succeeds; the figure is the time from the kill to that success (the
  replacement's start-up, plus one small solve of a few milliseconds). Target: < 1 s.

References in the same run: a bare interpreter (``python -c pass``) and one interpreter
importing everything a worker loads (`apportion.server.workers.solve_modules`). The CPU time
the server's processes used until listening is printed too: on a busy machine it says more
than the wall time.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import grpc
from served import descendants, start_server, stop, tree_cpu_s

from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import allocation_service_pb2_grpc as service_grpc

WORKER_NAME = b"apportion-solve"


def small_request() -> service_pb.SolveRequest:
    request = service_pb.SolveRequest()
    request.snapshot.cluster.accelerator_types.add(name="v100", count=2)
    for k in range(3):
        job = request.snapshot.jobs.add(id=f"j{k}")
        job.throughput["v100"] = 1.0 + k
    request.policy.name = "weighted_max_min_fairness"
    return request


def workers_of(server: subprocess.Popen[str]) -> set[int]:
    """Worker processes: named apportion-solve (fork server) or spawned by multiprocessing
    with the worker entry point (the older spawn pool)."""
    found = set()
    for pid in descendants(server.pid):
        try:
            comm = Path(f"/proc/{pid}/comm").read_bytes().strip()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if comm == WORKER_NAME or b"spawn_main" in cmdline:
            found.add(pid)
    return found


def respawn_s(address: str, server: subprocess.Popen[str]) -> float:
    """Kill the only worker; seconds until a small request succeeds again."""
    request = small_request()
    with grpc.insecure_channel(address) as channel:
        stub = service_grpc.AllocationServiceStub(channel)
        stub.Solve(request, timeout=60)  # warm: the worker is idle and ready
        (worker,) = workers_of(server)
        killed = time.perf_counter()
        os.kill(worker, signal.SIGKILL)
        while True:
            try:
                stub.Solve(request, timeout=60)
                return time.perf_counter() - killed
            except grpc.RpcError:
                if time.perf_counter() - killed > 60:
                    raise


def interpreter_s(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - started


def summary(values: list[float]) -> str:
    return (f"median {statistics.median(values):.3f} s  min {min(values):.3f}  "
            f"max {max(values):.3f}  (n={len(values)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    bare = [interpreter_s("pass") for _ in range(args.repeat)]
    preload = [
        interpreter_s(
            "import importlib\n"
            "from apportion.server.workers import solve_modules\n"
            "for m in solve_modules(): importlib.import_module(m)\n"
        )
        for _ in range(args.repeat)
    ]
    listening, listening_cpu = [], []
    for _ in range(args.repeat):
        process, _address, elapsed = start_server("--workers", str(args.workers))
        listening.append(elapsed)
        listening_cpu.append(tree_cpu_s(process.pid))
        stop(process)
    respawns = []
    process, address, _ = start_server("--workers", "1")
    try:
        for _ in range(args.repeat):
            respawns.append(respawn_s(address, process))
    finally:
        stop(process)

    print(f"reference: bare interpreter              {summary(bare)}")
    print(f"reference: interpreter + worker imports  {summary(preload)}")
    print(f"listening with {args.workers} workers               {summary(listening)}"
          "   target < 2 s")
    print(f"worker respawn (kill -> next success)    {summary(respawns)}   target < 1 s")
    print(f"CPU time of the server's processes until listening: {summary(listening_cpu)}"
          f" (on {os.cpu_count()} CPUs; load average now {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
