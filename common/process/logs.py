"""The processes' logs on stderr: plain text, or one JSON object a line (``--log-format json``) for log
collectors (design.md "Command line").

A JSON line has ``ts`` (Unix seconds), ``level`` (lower case), ``logger``, ``msg`` and, when an exception
is logged, ``exc`` (its traceback as one string). Python's own warnings are logged too, so nothing but
log lines reaches stderr once logging is set up (a flag error before that is the one line of the CLI).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any, Final

TEXT: Final = "text"
JSON: Final = "json"
FORMATS: Final = (TEXT, JSON)
# The levels ``--log-level`` takes (any case), lowest first.
LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """Structured logs: one JSON object a line (ts, level, logger, msg, and exc when there is one)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure(fmt: str, level: str) -> None:
    """Every log record of the process to stderr at ``level`` and above, as ``fmt`` (:data:`TEXT` or
    :data:`JSON`); values checked already (:class:`~common.process.flags.LogOptions`)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == JSON else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.captureWarnings(True)
