"""The job context the engine hands a kind: effects recorded in the store, fenced
by the lease token, with the crash points around the record.

A kind sees only ``app.kinds.JobContext``; the lease and the database stay here.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from app import crashpoints, errors, store
from app.kinds import JobContext

log = logging.getLogger(__name__)


class LeasedContext(JobContext[Any]):
    """One attempt under a live lease: only the lease holder records an effect."""

    def __init__(
        self,
        *,
        job_id: uuid.UUID,
        kind: str,
        attempt: int,
        deps: Any,
        lease_token: uuid.UUID,
        lease_owner: str,
        db: store.Database,
        recorded: Mapping[str, Any],
    ) -> None:
        super().__init__(
            job_id=job_id,
            kind=kind,
            attempt=attempt,
            deps=deps,
            recorded=recorded,
            log_fields={"lease_owner": lease_owner},
        )
        self._token = lease_token
        self._owner = lease_owner
        self._db = db

    def _fields(self, key: str) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "kind": self.kind,
            "attempt": self.attempt,
            "lease_owner": self._owner,
            "effect": key,
        }

    async def _record(self, key: str, seq: int, value: Any) -> Any:
        """A conditional insert fenced by the lease token; if another attempt recorded
        first, *its* result; if neither, the lease moved on: LeaseLost."""
        crashpoints.hit(crashpoints.Point.INSIDE_EFFECT, **self._fields(key))
        recorded = await store.effects.record(
            self._db, job_id=self.job_id, token=self._token, key=key, seq=seq, result=value
        )
        if recorded is not None:
            log.info("effect recorded", extra=self._fields(key))
            return recorded.result
        existing = await store.effects.get(self._db, self.job_id, key)
        if existing is None:
            # Not recorded and not ours to record: the lease moved on.
            raise errors.LeaseLost()
        log.warning("effect recorded by another attempt first", extra=self._fields(key))
        return existing.result

    def _after_effect(self, key: str) -> None:
        crashpoints.hit(crashpoints.Point.AFTER_EFFECT, **self._fields(key))
