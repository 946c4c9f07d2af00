"""Exit codes and the input error of the `apportion` command line, in a module of their own so
that every subcommand module raises the one class `cli.run` catches (also when the CLI runs
as `python -m apportion.server.cli`, whose module is then `__main__`)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_INVALID_INPUT = 2
EXIT_INTERNAL = 3


class InputError(Exception):
    """The input cannot be used (unreadable file, malformed JSON, ...). Exit code 2."""
