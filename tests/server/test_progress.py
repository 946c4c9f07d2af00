"""The progress line: only on a terminal, only after its delay, erased at the end."""

from __future__ import annotations

import io
import time

from apportion.server.progress import progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _wait_for_output(stream: io.StringIO, timeout_s: float = 30.0) -> None:
    give_up = time.monotonic() + timeout_s
    while not stream.getvalue() and time.monotonic() < give_up:
        time.sleep(0.01)


def test_shown_on_a_terminal_after_its_delay_and_erased() -> None:
    terminal = FakeTerminal()
    with progress("solving 3 jobs", terminal, show_after_s=0.0, update_every_s=0.01):
        _wait_for_output(terminal)
    text = terminal.getvalue()
    assert text.startswith("\rsolving 3 jobs... ")
    last = text.rsplit("\r", 2)
    assert last[-1] == "" and last[-2].strip() == ""  # ends by blanking the line


def test_nothing_before_the_delay() -> None:
    terminal = FakeTerminal()
    with progress("solving", terminal, show_after_s=3600.0):
        pass
    assert terminal.getvalue() == ""


def test_nothing_when_not_a_terminal() -> None:
    pipe = io.StringIO()
    with progress("solving", pipe, show_after_s=0.0, update_every_s=0.01):
        time.sleep(0.05)
    assert pipe.getvalue() == ""
