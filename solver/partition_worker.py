"""A POP worker process (`apportion.solver.partition`): ``python -m
apportion.solver.partition_worker``.

Reads one pickled job from stdin ({"policy", "parameters", "compat", "options", "deadline_at",
"tasks": [(index, sub-problem), ...]}), solves the sub-problems in order with the policy's
formulation and the shared deadline (`Deadline.at` is on the machine's monotonic clock, the
same in every process), and writes one pickled ("ok", index, plan, seconds) or ("error",
index, traceback, seconds) per task to the stdout it was given. Anything else that would
write to file descriptor 1 (a solver library's banner) goes to stderr instead.

A watchdog ends the process `GRACE_S` after the deadline, or as soon as its parent is gone,
so that no worker outlives the request that started it.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time
import traceback
from typing import Any

GRACE_S = 1.0
"""Seconds after the deadline at which the worker ends itself."""
POLL_S = 0.1


def _watchdog(deadline_at: float, parent: int) -> None:
    while True:
        if os.getppid() != parent or time.monotonic() > deadline_at + GRACE_S:
            os._exit(3)
        time.sleep(POLL_S)


def main() -> None:
    parent = os.getppid()
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray writes to fd 1 must not corrupt the result stream
    job: dict[str, Any] = pickle.load(sys.stdin.buffer)
    threading.Thread(target=_watchdog, args=(float(job["deadline_at"]), parent),
                     daemon=True).start()
    from apportion.solver.deadline import Deadline
    from apportion.solver.registry import lookup

    solve = lookup(job["policy"]).load()
    deadline = Deadline(float(job["deadline_at"]))
    for index, problem in job["tasks"]:
        started = time.perf_counter()
        try:
            plan = solve(problem, job["parameters"], job["compat"], job["options"], deadline)
            message: tuple[str, int, Any, float] = (
                "ok", index, plan, time.perf_counter() - started)
        except Exception:
            message = ("error", index, traceback.format_exc(), time.perf_counter() - started)
        pickle.dump(message, out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()
    out.close()


if __name__ == "__main__":
    main()
