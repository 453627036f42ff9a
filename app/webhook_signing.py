"""Signed webhooks as the Standard Webhooks specification has them
(https://www.standardwebhooks.com): the headers ``webhook-id``, ``webhook-timestamp``
(Unix seconds) and ``webhook-signature`` (``v1,<base64 HMAC-SHA256>`` of
``<id>.<timestamp>.<body>``), under a secret written ``whsec_<base64 key>``.

The alerts sign with it (app/services/alerts.py); a receiver verifies with
``tasklease.webhooks.verify_webhook``. Standard library only: the public package imports it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from typing import Any

PREFIX = "whsec_"
# The spec's bounds on the key: 24 to 64 random bytes.
MIN_KEY_BYTES = 24
MAX_KEY_BYTES = 64
# How far a webhook's timestamp may be from the receiver's clock (replay protection).
DEFAULT_TOLERANCE_SECONDS = 300


class WebhookVerificationError(ValueError):
    """The delivery is not one signed with this secret: a header missing, a timestamp too
    old or too new, or no signature that matches."""


def new_secret() -> str:
    """A fresh secret, ``whsec_`` and 32 random bytes in base64."""
    return PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def secret_key(secret: str) -> bytes:
    """The key of a ``whsec_<base64>`` secret; ValueError saying what is wrong."""
    if not secret.startswith(PREFIX):
        raise ValueError("a webhook secret starts with 'whsec_' (then base64)")
    try:
        key = base64.b64decode(secret[len(PREFIX) :], validate=True)
    except binascii.Error as exc:
        raise ValueError("a webhook secret is 'whsec_' then base64: this is not base64") from exc
    if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
        raise ValueError(
            f"a webhook secret's key is {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes; "
            f"this one is {len(key)} (make one with `tasklease alerts new-secret`)"
        )
    return key


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: ``v1,<base64 HMAC-SHA256 of id.timestamp.body>``."""
    content = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def sign(secret: str, msg_id: str, body: bytes, *, now: float | None = None) -> dict[str, str]:
    """The three headers of a delivery of ``body`` with the id ``msg_id``, signed now."""
    timestamp = int(time.time() if now is None else now)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, msg_id, timestamp, body),
    }


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> Any:
    """The delivery's JSON body when ``headers`` (any case) carry a valid signature of
    ``body`` (the bytes as received) under ``secret``; WebhookVerificationError if not."""
    lower = {k.lower(): v for k, v in headers.items()}
    msg_id = lower.get("webhook-id")
    stamp = lower.get("webhook-timestamp")
    given = lower.get("webhook-signature")
    if not msg_id or not stamp or not given:
        raise WebhookVerificationError(
            "missing header: webhook-id, webhook-timestamp and webhook-signature are needed"
        )
    try:
        timestamp = int(stamp)
    except ValueError as exc:
        raise WebhookVerificationError("webhook-timestamp is not a whole number") from exc
    clock = time.time() if now is None else now
    if abs(clock - timestamp) > tolerance_seconds:
        raise WebhookVerificationError(
            f"webhook-timestamp is {clock - timestamp:.0f} s from now, past the "
            f"{tolerance_seconds:.0f} s tolerance"
        )
    raw = body.encode() if isinstance(body, str) else body
    try:
        expected = signature(secret, msg_id, timestamp, raw).split(",", 1)[1]
    except ValueError as exc:
        raise WebhookVerificationError(str(exc)) from exc
    for candidate in given.split():
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return json.loads(raw)
    raise WebhookVerificationError("no signature matches: the body or the secret differ")
