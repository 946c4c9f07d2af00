"""A progress line on stderr for command-line work that takes more than a few seconds.

Shown only when the stream is a terminal (never in a pipe, a file or a test's captured
output), only after `SHOW_AFTER_S`, updated every second, and erased when the work ends, so
that the output a user reads or pipes is the same with or without it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

SHOW_AFTER_S = 3.0
"""Seconds of work before the progress line appears."""
UPDATE_EVERY_S = 1.0


@contextmanager
def progress(
    label: str,
    stream: TextIO | None = None,
    show_after_s: float = SHOW_AFTER_S,
    update_every_s: float = UPDATE_EVERY_S,
) -> Iterator[None]:
    """While the block runs: after `show_after_s` seconds, ``label... N s`` on `stream`
    (default stderr) if it is a terminal, rewritten in place every `update_every_s` seconds;
    erased when the block ends."""
    out = sys.stderr if stream is None else stream
    if not out.isatty():
        yield
        return
    done = threading.Event()
    started = time.monotonic()
    width = 0

    def show() -> None:
        nonlocal width
        if done.wait(show_after_s):
            return
        while not done.is_set():
            text = f"{label}... {time.monotonic() - started:.0f} s"
            out.write("\r" + text.ljust(width))
            out.flush()
            width = max(width, len(text))
            done.wait(update_every_s)

    thread = threading.Thread(target=show, name="progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if width:
            out.write("\r" + " " * width + "\r")
            out.flush()
