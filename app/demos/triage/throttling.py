"""A provider's throttle as ``errors.Throttled``: a ``429``, or a ``503`` with
``Retry-After``, is retried after the provider's delay without using an attempt.

The delay is ``retry-after-ms`` (milliseconds, as OpenAI's and Azure's APIs send it) or
``Retry-After`` (seconds, or an HTTP-date, RFC 9110 section 10.2.3); None when absent or
unreadable (the worker then uses TASKLEASE_THROTTLE_DELAY_SECONDS, jittered).
"""

from __future__ import annotations

import datetime as dt
import email.utils
from collections.abc import Mapping

from app import errors


def retry_after(headers: Mapping[str, str], now: dt.datetime | None = None) -> float | None:
    """Seconds the provider asks to wait, from its headers; None when it says nothing."""
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = lowered.get("retry-after-ms", "").strip()
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after", "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        at = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=dt.UTC)
    return max(0.0, (at - (now or dt.datetime.now(dt.UTC))).total_seconds())


def check(status: int, headers: Mapping[str, str], *, provider: str, model: str) -> None:
    """Raise ``Throttled`` for a 429, or a 503 that says when to come back."""
    delay = retry_after(headers)
    if status == 429 or (status == 503 and delay is not None):
        raise errors.Throttled(
            f"{provider} throttled the call ({status})"
            + ("" if delay is None else f", retry after {delay:g} s"),
            provider=provider,
            model=model,
            status=status,
            delay=delay,
        )
