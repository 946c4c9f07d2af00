"""Load on a real `apportion serve`: many concurrent clients, a share of bad requests.

    python benchmarks/service_load.py [--clients 200] [--duration 20] [--workers 2]
                                      [--max-pending 256] [--bad-share 0.1]

Starts ``apportion serve`` on 127.0.0.1 and runs `--clients` concurrent callers (grpc.aio,
one process, 8 channels) for `--duration` seconds; each caller sends one request after
another: the 4-job and the 32-job example snapshots, or (with probability `--bad-share`) a bad
request (NaN throughput, unknown policy, a 100 KB policy name, bytes that are not a request).
Prints latency percentiles (all calls and successful solves), calls/s, the status counts, and
the resident memory of the server (its process, and with its fork server and workers) before
and after. Reference in the same run: the same good requests solved in process, one after
another (`solve_request`).

The clients share the machine's cores with the server: on a 2-core machine the figures are a
lower bound of what the server alone would sustain.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import random
import statistics
import time
from pathlib import Path

import grpc
import grpc.aio
from google.protobuf import json_format
from served import start_server, stop, tree_rss_kib

from apportion.server.pipeline import solve_request
from apportion.v1 import allocation_service_pb2 as service_pb

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
METHOD = "/apportion.v1.AllocationService/Solve"
CHANNELS = 8


def example(name: str) -> service_pb.SolveRequest:
    return json_format.Parse((EXAMPLES / name).read_text(), service_pb.SolveRequest())


def good_requests() -> dict[str, bytes]:
    return {
        "4 jobs": example("four_jobs.json").SerializeToString(),
        "32 jobs": example("cluster_32_jobs.json").SerializeToString(),
    }


def bad_requests() -> dict[str, bytes]:
    nan = example("four_jobs.json")
    nan.snapshot.jobs[0].throughput["v100"] = float("nan")
    unknown = example("four_jobs.json")
    unknown.policy.name = "no_such_policy"
    huge = example("four_jobs.json")
    huge.policy.name = "x" * 100_000
    return {
        "NaN throughput": nan.SerializeToString(),
        "unknown policy": unknown.SerializeToString(),
        "100 KB policy name": huge.SerializeToString(),
        "not a request": b"\xff" * 64,
    }


async def run_clients(
    address: str, clients: int, duration_s: float, bad_share: float, seed: int
) -> tuple[list[tuple[str, str, float]], float]:
    """Every call as (request kind, status name, latency s), and the wall time of the run."""
    good, bad = good_requests(), bad_requests()
    channels = [grpc.aio.insecure_channel(address) for _ in range(CHANNELS)]
    calls = [ch.unary_unary(METHOD) for ch in channels]
    results: list[tuple[str, str, float]] = []
    rng = random.Random(seed)
    started = time.perf_counter()
    end = started + duration_s

    async def client(k: int) -> None:
        call = calls[k % CHANNELS]
        while time.perf_counter() < end:
            pool = bad if rng.random() < bad_share else good
            kind = rng.choice(list(pool))
            sent = time.perf_counter()
            try:
                await call(pool[kind], timeout=60)
                status = "OK"
            except grpc.aio.AioRpcError as error:
                status = error.code().name
            results.append((kind, status, time.perf_counter() - sent))

    await asyncio.gather(*(client(k) for k in range(clients)))
    wall = time.perf_counter() - started
    for channel in channels:
        await channel.close()
    return results, wall


def in_process_reference(repeat: int = 20) -> dict[str, float]:
    """Mean seconds of `solve_request` per good request, in this process."""
    out = {}
    for kind, data in good_requests().items():
        request = service_pb.SolveRequest.FromString(data)
        solve_request(request)  # warm
        started = time.perf_counter()
        for _ in range(repeat):
            solve_request(service_pb.SolveRequest.FromString(data))
        out[kind] = (time.perf_counter() - started) / repeat
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-pending", type=int, default=256)
    parser.add_argument("--bad-share", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    reference = in_process_reference()
    process, address, _ = start_server(
        "--workers", str(args.workers), "--max-pending", str(args.max_pending)
    )
    try:
        time.sleep(1.0)
        before = tree_rss_kib(process.pid)
        results, wall = asyncio.run(
            run_clients(address, args.clients, args.duration, args.bad_share, args.seed)
        )
        after = tree_rss_kib(process.pid)
        alive = process.poll() is None
    finally:
        code = stop(process)

    latencies = [r[2] for r in results]
    solved = [r[2] for r in results if r[1] == "OK"]
    statuses = collections.Counter(r[1] for r in results)
    by_kind = collections.Counter((r[0], r[1]) for r in results)
    print(f"{args.clients} clients, {args.duration:g} s, {args.workers} workers, "
          f"--max-pending {args.max_pending}, bad share {args.bad_share:g}")
    print(f"calls: {len(results)} in {wall:.1f} s = {len(results) / wall:.1f} calls/s")
    print(f"latency all calls:  p50 {percentile(latencies, 0.5) * 1e3:.1f} ms  "
          f"p99 {percentile(latencies, 0.99) * 1e3:.1f} ms  max {max(latencies) * 1e3:.1f} ms")
    if solved:
        print(f"latency solved:     p50 {percentile(solved, 0.5) * 1e3:.1f} ms  "
              f"p99 {percentile(solved, 0.99) * 1e3:.1f} ms  mean "
              f"{statistics.fmean(solved) * 1e3:.1f} ms")
    print("statuses: " + ", ".join(f"{name} {count}" for name, count in statuses.most_common()))
    for (kind, status), count in sorted(by_kind.items()):
        print(f"    {kind:<20} {status:<20} {count}")
    print(f"server RSS before: {before[0] / 1024:.0f} MiB (with fork server and workers "
          f"{before[1] / 1024:.0f} MiB); after: {after[0] / 1024:.0f} MiB "
          f"({after[1] / 1024:.0f} MiB)")
    print(f"server alive through the run: {alive}; exit code after SIGTERM: {code}")
    print("reference, in process, one after another: " + ", ".join(
        f"{kind} {seconds * 1e3:.1f} ms" for kind, seconds in reference.items()))


if __name__ == "__main__":
    main()
