"""A real ``apportion serve`` for the service benchmarks: start it, stop it, find its
processes. Imported by startup.py, service_load.py and time_limits.py (run from benchmarks/)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def start_server(*args: str) -> tuple[subprocess.Popen[str], str, float]:
    """``apportion serve --port 0 ARGS``: (process, address, seconds to its listening line)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "apportion.server.cli", "serve", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    elapsed = time.perf_counter() - started
    if not line.startswith("apportion listening on "):
        process.kill()
        raise RuntimeError(f"server did not start: {line!r}")
    return process, line.rpartition(" ")[2].strip(), elapsed


def stop(process: subprocess.Popen[str]) -> int:
    """SIGTERM, then the exit code (killed after 60 s)."""
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def process_tree() -> tuple[dict[int, list[int]], dict[int, int]]:
    """(children of each pid, resident memory of each pid in KiB) from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        pid = int(entry.name)
        children.setdefault(int(fields["PPid"]), []).append(pid)
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0])
    return children, rss


def descendants(pid: int) -> set[int]:
    children, _ = process_tree()
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by `pid` and its live descendants, and by the
    children they have reaped."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for member in {pid, *descendants(pid)}:
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    return total / ticks


def tree_rss_kib(pid: int) -> tuple[int, int]:
    """(RSS of `pid`, RSS of `pid` and all its descendants), KiB."""
    children, rss = process_tree()
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += rss.get(current, 0)
        todo += children.get(current, [])
    return rss.get(pid, 0), total
