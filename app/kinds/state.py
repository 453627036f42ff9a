"""State a kind publishes (``ctx.set_state``): the checks a key and a value pass before
any runner writes them, against the bounds of app/settings/bounds.py."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app import errors
from app.settings import bounds
from app.storable import unstorable


@dataclass(frozen=True, slots=True)
class Published:
    """A key's value as a runner holds it: ``version`` counts its changes (1: the first)."""

    value: Any
    version: int
    attempt: int


def checked(key: Any, value: Any) -> Any:
    """``value`` as the JSON a reader will get; PermanentError (naming the bound) when
    the key or the value cannot be published."""
    if not isinstance(key, str) or not 1 <= len(key) <= bounds.MAX_STATE_KEY_CHARS:
        raise errors.PermanentError(
            f"set_state: key must be text of 1 to {bounds.MAX_STATE_KEY_CHARS} characters "
            f"(MAX_STATE_KEY_CHARS), not {str(key)[:50]!r}"
        )
    if unstorable(key):
        raise errors.PermanentError(f"set_state {key[:50]!r}: the key {unstorable(key)}")
    try:
        # No NaN or Infinity: PostgreSQL's jsonb refuses them, as the API does.
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise errors.PermanentError(f"set_state {key[:50]!r}: value must be a JSON value") from exc
    problem = unstorable(value)
    if problem:
        raise errors.PermanentError(f"set_state {key[:50]!r}: {problem}")
    size = len(text.encode())
    if size > bounds.MAX_STATE_VALUE_BYTES:
        raise errors.PermanentError(
            f"set_state {key[:50]!r}: value is {size} bytes as JSON, more than "
            f"{bounds.MAX_STATE_VALUE_BYTES} (MAX_STATE_VALUE_BYTES)"
        )
    return json.loads(text)


def too_many_keys(key: str) -> errors.PermanentError:
    return errors.PermanentError(
        f"set_state {key[:50]!r}: the job already has {bounds.MAX_STATE_KEYS} keys "
        "(MAX_STATE_KEYS); set one of them instead"
    )
