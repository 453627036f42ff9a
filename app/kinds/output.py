"""What a kind streams while it runs (``ctx.progress``, ``ctx.emit``, a streamed model
answer's chunks): the item a runner writes, and the bounds on it."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from app import errors

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
    try:
        text = json.dumps(data)
    except (TypeError, ValueError) as exc:
        raise errors.PermanentError("emit: data must be a JSON value") from exc
    if len(text.encode()) > MAX_EMIT_BYTES:
        raise errors.PermanentError(f"emit: data is more than {MAX_EMIT_BYTES} bytes as JSON")
    return json.loads(text)
