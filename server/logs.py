"""The server's log on stderr: text for a person, or JSON (one object per line) for a log
collector (``apportion serve --log-format json``).

A JSON line has ``time`` (UTC, ISO 8601), ``level``, ``logger`` and ``message``, the fields a
record was given as ``extra`` (``request_id``, ``method``, ``policy``, ``code``,
``latency_s``, ``termination``, ...) and ``traceback`` when there is one. Every Solve and
ListPolicies call is logged once when it ends (``message`` "call"), with the request id that
its reply carries in the ``apportion-request-id`` header and, for INTERNAL, in its message.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CALL_FIELDS = ("request_id", "method", "policy", "code", "latency_s", "termination",
               "solve_time_s", "detail")
"""Fields a call record may carry (`extra`); shown in text lines too."""
_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None)))


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RESERVED and key not in entry and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """The usual text line, followed by the call fields a record carries (``key=value``)."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = [f"{key}={getattr(record, key)}" for key in CALL_FIELDS if hasattr(record, key)]
        if not fields:
            return text
        first, newline, rest = text.partition("\n")
        return f"{first} {' '.join(fields)}{newline}{rest}"


def configure(log_format: str = "text") -> None:
    """Send INFO and above to stderr in `log_format` ("text" or "json")."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
