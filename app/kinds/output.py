"""What a kind streams while it runs (``ctx.progress``, ``ctx.emit``, a streamed model
answer's chunks): the item a runner writes, and the bounds on it."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from app import errors
from app.storable import unstorable

MAX_NOTE_CHARS = 500
# One emitted item, as JSON: a stream is for pieces of output, not for results.
MAX_EMIT_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Emitted:
    """One streamed item: ``type`` is progress, output or chunk; a chunk has the effect's
    ``key`` and its place ``seq`` in that effect's text."""

    at: dt.datetime
    type: str
    data: Any
    key: str | None = None
    seq: int | None = None


def check_emitted(data: Any) -> Any:
    """``data`` as the JSON a reader will get; PermanentError when it is not JSON or too big."""
    return checked_json(data, "emit", MAX_EMIT_BYTES)


def checked_json(data: Any, what: str, max_bytes: int) -> Any:
    """``data`` as the JSON a reader will get; PermanentError (saying ``what``) when it is
    not JSON, could not be stored, or is more than ``max_bytes`` as JSON."""
    try:
        # No NaN or Infinity: PostgreSQL's jsonb refuses them, as the API does.
        text = json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise errors.PermanentError(f"{what}: data must be a JSON value") from exc
    problem = unstorable(data)
    if problem:
        raise errors.PermanentError(f"{what}: {problem}")
    if len(text.encode()) > max_bytes:
        raise errors.PermanentError(f"{what}: data is more than {max_bytes} bytes as JSON")
    return json.loads(text)
