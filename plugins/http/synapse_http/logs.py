"""How ``synapse serve`` writes its log: ``text`` lines as it always has, or
``json``, one object a line, for log shippers (``--log-format``).

A JSON line has ``time`` (UTC, ISO 8601), ``level``, ``logger`` and
``message``, then the record's own facts: those Synapse puts on a record as
``record.synapse`` (a worker fault's model, worker, generation and cause; a
request's id, model, status and timings) become top-level keys, and a
traceback is ``exception``.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any

LOG_FORMATS = ("text", "json")
#: the keys every line has; a record's facts never replace them
_BASE = ("time", "level", "logger", "message")


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (a message's newlines are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        doc: dict[str, Any] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        facts = getattr(record, "synapse", None)
        if isinstance(facts, dict):
            doc.update((k, v) for k, v in facts.items() if k not in _BASE)
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["exception"] = record.exc_text
        # default=str: a fact of another type (a path, an enum) is still one line
        return json.dumps(doc, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``synapse: MESSAGE``, as the command has always printed; the command's
    own warnings (logger ``synapse.serve``) say ``warning:`` as the CLI's do."""

    def __init__(self) -> None:
        super().__init__("synapse: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        if record.name == "synapse.serve" and record.levelno >= logging.WARNING:
            return line.replace("synapse: ", "synapse: warning: ", 1)
        return line


def configure_logging(log_format: str) -> None:
    """Every record at INFO and above to stderr, in ``log_format``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    # force: a handler a library installed first would print in its own format
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
