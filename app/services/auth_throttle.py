"""Failed API key checks, counted per key id and per client address in this process.

Over ``TASKLEASE_AUTH_FAILURE_LIMIT`` (a moving window, default 20 a minute) a key id or
an address is answered 429 with Retry-After, without looking the key up, until the
oldest failure leaves the window. Only failures count: a key this process has verified
is never refused by the throttle (see KeyVerifier). The counts live in this process's
memory (docs/explain/design.md#api-keys says why not in PostgreSQL).
"""

from __future__ import annotations

import math
import time

import limits
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from app import errors

BY_KEY = "key"
BY_ADDRESS = "address"


class AuthThrottle:
    def __init__(self, rate: str) -> None:
        self.items = limits.parse_many(rate)
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    def _subjects(self, key_id: str | None, address: str | None) -> list[tuple[str, str]]:
        found = [(BY_KEY, key_id)] if key_id else []
        return found + ([(BY_ADDRESS, address)] if address else [])

    def check(self, key_id: str | None, address: str | None) -> None:
        """TooManyRequests when the key id or the address used up its failures."""
        for kind, subject in self._subjects(key_id, address):
            for item in self.items:
                if not self._limiter.test(item, kind, subject):
                    reset = self._limiter.get_window_stats(item, kind, subject).reset_time
                    raise errors.TooManyRequests(
                        f"too many failed API key checks for this {kind}; try again later",
                        retry_after=math.ceil(reset - time.time()),
                    )

    def failed(self, key_id: str | None, address: str | None) -> None:
        """Count one failed check against the key id (None: no such key) and the address."""
        for kind, subject in self._subjects(key_id, address):
            for item in self.items:
                self._limiter.hit(item, kind, subject)
