"""What a job kind's code sees: its job, its attempt, and ``effect(key, fn)``."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from psycopg.types.json import Jsonb

from app import crashpoints, errors
from app.store.pool import Database, q

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class Services:
    """Long-lived clients a job kind may use, built once per process."""

    model: Any
    http: Any
    webhook_url: str | None


@dataclass
class JobContext:
    job_id: uuid.UUID
    kind: str
    attempt: int
    lease_token: uuid.UUID
    lease_owner: str
    db: Database
    services: Services
    recorded: dict[str, Any] = field(default_factory=dict)
    replayed: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)

    def idempotency_key(self, key: str) -> str:
        """The key to hand to an outside system that honours one: f"{job_id}:{key}"."""
        return f"{self.job_id}:{key}"

    def _fields(self, key: str) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "kind": self.kind,
            "attempt": self.attempt,
            "lease_owner": self.lease_owner,
            "effect": key,
        }

    async def effect(self, key: str, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn`` once for this job, ever, and return its recorded (JSON) result.

        A result recorded by an earlier attempt is returned without calling ``fn``.
        Otherwise ``fn`` runs and its result is recorded by a conditional insert fenced by
        the lease token; if another attempt recorded first, *its* result is returned. A
        crash between ``fn`` returning and the insert is the one window this cannot close:
        pass ``ctx.idempotency_key(key)`` to outside systems that take one.
        """
        if not key or len(key) > 200:
            raise errors.PermanentError(f"effect key must be 1 to 200 characters: {key!r}")
        if key in self.recorded:
            self.replayed.append(key)
            log.info("effect replayed", extra=self._fields(key))
            return self.recorded[key]  # type: ignore[no-any-return]
        result = await fn()
        try:
            encoded = Jsonb(json.loads(json.dumps(result)))
        except (TypeError, ValueError) as exc:
            raise errors.PermanentError(
                f"effect {key!r} returned a value that is not JSON"
            ) from exc
        crashpoints.hit(crashpoints.Point.INSIDE_EFFECT, **self._fields(key))
        params = {
            "id": self.job_id,
            "token": self.lease_token,
            "key": key,
            "seq": len(self.recorded),
            "result": encoded,
        }
        rows = await self.db.fetch(q("record_effect"), params)
        if rows:
            stored = rows[0]["result"]
            self.ran.append(key)
            log.info("effect recorded", extra=self._fields(key))
        else:
            existing = await self.db.fetch_one(q("get_effect"), {"id": self.job_id, "key": key})
            if existing is None:
                # Not recorded and not ours to record: the lease moved on.
                raise errors.LeaseLost()
            stored = existing["result"]
            log.warning("effect recorded by another attempt first", extra=self._fields(key))
        self.recorded[key] = stored
        crashpoints.hit(crashpoints.Point.AFTER_EFFECT, **self._fields(key))
        return stored  # type: ignore[no-any-return]
