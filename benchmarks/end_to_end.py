"""The wire side of a solve: bytes, parse, validate + convert, solve and respond, per size.

    python benchmarks/end_to_end.py [--sizes 2048 32768 100000] [--policy NAME] [--repeat 3]

Instances: `apportion.datasets.synthetic` (catalog rows: 26 job types x 4 scale factors on 3
types; distinct: every row drawn independently), written as the snapshot file a client sends
(the proto3 canonical JSON of `SolveRequest`) and as the binary proto. Stages (best of
`--repeat`, wall s, in this process):

* parse json_format: `json_format.Parse` of the file text (the CLI's route before the fast one);
* parse cli: `apportion.server.cli.load_request`, what `apportion solve` does now;
* parse pb: `SolveRequest.FromString` of the binary request (the gRPC server's parse), rows;
* convert: `request_to_model` (validation and conversion to the model), rows;
* col pb / col conv: the same for the request with its jobs in `Snapshot.job_columns`;
* solve: `solve()` on the model (the reference the others are compared with);
* respond: `plan_to_response` with one `JobAllocation` per job, and its bytes (resp MB);
* col resp: with `options.columnar_plan` (`Plan.columns`), and its bytes (col MB).

Ratios printed: convert / solve (rows) and, for the columnar wire, (parse + convert + respond) /
(that + solve).

With `--grpc` the same requests also go to a real `apportion serve --workers 1` on 127.0.0.1
(started once, warmed with each request before timing), best of `--repeat`, wall s at the
client from the call to the decoded response:

* grpc rows: the rows request and plan (the client raises its receive limit to 256 MiB: a
  rows plan for 100,000 jobs exceeds the default 4 MiB);
* grpc col: jobs in `Snapshot.job_columns`, plan in `Plan.columns`, on a channel with gRPC's
  default limits (the plan must fit 4 MiB);
* non-solve: everything but the solve over gRPC with the columnar forms, grpc col - solve
  (the in-process `solve()` above), and its share of grpc col. Target for max-min fairness at
  32,768 and 100,000 jobs: <= 25% or <= 0.3 s;
* same call, share 1: the same from one call alone (its wall time minus the build and solve
  times its response reports), steadier on a busy machine, where the two best-of times above
  may come from calm and busy moments; it counts what the certificate does not book as solve
  time (the plan's assembly) as overhead;
* r non-solve, r share, r call, r share 1: the same four for the rows form
  (`grpc rows` - solve, and from one call alone). The same target applies.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import grpc
import numpy as np
from google.protobuf import json_format
from served import start_server, stop

from apportion.datasets.synthetic import catalog_problem, distinct_problem
from apportion.server.cli import load_request
from apportion.server.convert import plan_to_response, request_to_model
from apportion.solver.model import Problem
from apportion.solver.solve import solve
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import allocation_service_pb2_grpc as service_grpc

ROWS_CLIENT_OPTIONS = [("grpc.max_receive_message_length", 256 << 20),
                       ("grpc.max_send_message_length", 256 << 20)]


def request_of(problem: Problem, policy: str) -> service_pb.SolveRequest:
    """The wire request for a synthetic problem (rows form)."""
    request = service_pb.SolveRequest()
    request.policy.name = policy
    names = problem.cluster.type_names
    for name, count in zip(names, problem.cluster.count.tolist(), strict=True):
        request.snapshot.cluster.accelerator_types.add(name=name, count=count)
    jobs = problem.jobs
    rng = np.random.default_rng(0)
    total = rng.uniform(1e3, 1e5, jobs.num_jobs).tolist()
    for i, job_id in enumerate(jobs.ids):
        job = request.snapshot.jobs.add(id=job_id, scale_factor=int(jobs.scale_factor[i]))
        job.throughput.update(
            {names[j]: float(v) for j, v in enumerate(jobs.throughput[i].tolist()) if v > 0}
        )
        job.progress.total_steps = total[i]
    return request


def columnar(request: service_pb.SolveRequest) -> service_pb.SolveRequest:
    """The same request with every job in `Snapshot.job_columns` and a columnar plan."""
    out = service_pb.SolveRequest()
    out.CopyFrom(request)
    del out.snapshot.jobs[:]
    names = [t.name for t in request.snapshot.cluster.accelerator_types]
    columns = out.snapshot.job_columns
    jobs = request.snapshot.jobs
    columns.ids.extend(job.id for job in jobs)
    columns.throughput_types.extend(names)
    columns.throughput.extend(job.throughput.get(name, 0.0) for job in jobs for name in names)
    columns.scale_factor.extend(job.scale_factor for job in jobs)
    columns.total_steps.extend(job.progress.total_steps for job in jobs)
    out.options.columnar_plan = True
    return out


def best(repeat: int, run: Callable[[], Any]) -> tuple[float, Any]:
    """(best wall time over `repeat` runs, the last result)."""
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
    return min(times), result


def grpc_call_s(address: str, request: service_pb.SolveRequest, repeat: int,
                options: list[tuple[str, int]] | None = None) -> tuple[float, float]:
    """(best wall time (s) of `repeat` Solve calls at the client after one warm-up call, that
    call's wall time minus the build and solve times its response reports)."""
    with grpc.insecure_channel(address, options=options or []) as channel:
        stub = service_grpc.AllocationServiceStub(channel)
        response = stub.Solve(request, timeout=600)
        if response.stats.termination != service_pb.TERMINATION_REASON_OPTIMAL:
            raise RuntimeError(f"not optimal over gRPC: {response.stats.detail}")
        calls = []
        for _ in range(repeat):
            started = time.perf_counter()
            stats = stub.Solve(request, timeout=600).stats
            wall = time.perf_counter() - started
            calls.append((wall, wall - stats.build_time_s - stats.solve_time_s))
    return min(calls)


def measure(request: service_pb.SolveRequest, folder: Path, repeat: int,
            address: str | None = None) -> dict[str, float]:
    """The stage times (s) and sizes (MB) of one request (over gRPC too with `address`)."""
    text = json_format.MessageToJson(request)
    path = folder / "snapshot.json"
    path.write_text(text)
    binary = request.SerializeToString()
    out = {"json MB": len(text) / 1e6, "proto MB": len(binary) / 1e6}
    out["parse json"], _ = best(repeat, lambda: json_format.Parse(text, service_pb.SolveRequest()))
    out["parse cli"], _ = best(repeat, lambda: load_request(str(path)))
    out["parse pb"], _ = best(repeat, lambda: service_pb.SolveRequest.FromString(binary))
    out["convert"], model = best(repeat, lambda: request_to_model(request))
    columns = columnar(request).SerializeToString()
    out["col pb"], by_columns = best(repeat, lambda: service_pb.SolveRequest.FromString(columns))
    out["col conv"], _ = best(repeat, lambda: request_to_model(by_columns))
    problem, policy, options = model
    solve(problem, policy, options)  # first use imports the formulation
    out["solve"], plan = best(repeat, lambda: solve(problem, policy, options))
    out["respond"], response = best(
        repeat, lambda: plan_to_response(plan, problem, policy, 0.0, 0.0)
    )
    out["resp MB"] = response.ByteSize() / 1e6
    out["col resp"], response = best(
        repeat, lambda: plan_to_response(plan, problem, policy, 0.0, 0.0, columnar=True)
    )
    out["col MB"] = response.ByteSize() / 1e6
    wire = out["col pb"] + out["col conv"] + out["col resp"]
    out["conv/solve"] = out["convert"] / out["solve"]
    out["wire/total"] = wire / (wire + out["solve"])
    if address is not None:
        out["grpc rows"], out["r call"] = grpc_call_s(address, request, repeat,
                                                         ROWS_CLIENT_OPTIONS)
        out["grpc col"], out["same call"] = grpc_call_s(address, by_columns, repeat)
        out["non-solve"] = out["grpc col"] - out["solve"]
        out["share"] = out["non-solve"] / out["grpc col"]
        out["share 1"] = out["same call"] / out["grpc col"]
        out["r non-solve"] = out["grpc rows"] - out["solve"]
        out["r share"] = out["r non-solve"] / out["grpc rows"]
        out["r share 1"] = out["r call"] / out["grpc rows"]
    return out


COLUMNS = ("json MB", "proto MB", "parse json", "parse cli", "parse pb", "convert", "col pb",
           "col conv", "solve", "respond", "resp MB", "col resp", "col MB", "conv/solve",
           "wire/total")
GRPC_COLUMNS = ("grpc rows", "grpc col", "non-solve", "share", "same call", "share 1",
                "r non-solve", "r share", "r call", "r share 1")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 32768, 100000])
    parser.add_argument("--families", nargs="+", default=["catalog", "distinct"])
    parser.add_argument("--policy", default="weighted_max_min_fairness")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--grpc", action="store_true",
                        help="also time the calls over gRPC to a real apportion serve")
    args = parser.parse_args()
    columns = COLUMNS + GRPC_COLUMNS if args.grpc else COLUMNS
    print(f"policy {args.policy}; wall s, best of {args.repeat}")
    header = f"{'family':<9}{'jobs':>7}" + "".join(f"{c:>11}" for c in columns)
    print("columnar = jobs in Snapshot.job_columns, plan in Plan.columns")
    print(header)
    print("-" * len(header))
    makers = {"catalog": catalog_problem, "distinct": distinct_problem}
    server, address = (start_server("--workers", "1")[:2] if args.grpc else (None, None))
    try:
        with TemporaryDirectory() as tmp:
            for family in args.families:
                for size in args.sizes:
                    row = measure(request_of(makers[family](size), args.policy), Path(tmp),
                                  args.repeat, address)
                    cells = "".join(
                        f"{row[c]:>10.1f}x" if c == "conv/solve" else
                        f"{row[c]:>11.0%}" if c.endswith(("wire/total", "share", "share 1")) else
                        f"{row[c]:>11.3f}"
                        for c in columns
                    )
                    print(f"{family:<9}{size:>7}{cells}", flush=True)
    finally:
        if server is not None:
            stop(server)


if __name__ == "__main__":
    main()
