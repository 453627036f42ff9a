"""Whether a JSON value from a caller can be stored and served back (a payload, a
callback's result, a message's body): the checks PostgreSQL's text and jsonb and
pydantic's serializer would otherwise fail on, said as a clear reason."""

from __future__ import annotations

import math
from typing import Any

# Nesting a payload may have: pydantic serializes at most 255 levels, and no real payload
# comes near this.
MAX_PAYLOAD_DEPTH = 100


def unstorable(value: Any) -> str | None:
    """Why this text or JSON value cannot be stored and served back, or None: PostgreSQL's
    text and jsonb refuse the NUL character, a lone surrogate (what JSON's "\\ud800"
    escape decodes to) has no UTF-8 form, jsonb has no NaN or Infinity (Python's JSON
    parser reads both), and pydantic serializes no more than 255 levels of nesting."""
    todo = [(value, 0)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "text must not contain the NUL character (\\u0000)"
            if not item.isascii():
                try:
                    item.encode()
                except UnicodeEncodeError:
                    return "text must be valid Unicode (a lone surrogate has no UTF-8 form)"
        elif isinstance(item, float) and not math.isfinite(item):
            return "numbers must be finite (JSON has no NaN or Infinity)"
        elif isinstance(item, dict | list):
            if depth >= MAX_PAYLOAD_DEPTH:
                return f"must not nest objects and arrays deeper than {MAX_PAYLOAD_DEPTH} levels"
            inner = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            todo.extend((x, depth + 1) for x in inner)
    return None
