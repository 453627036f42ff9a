"""What a job kind's code sees: its job's ids and attempt, its dependencies,
``effect(key, fn)``, ``idempotency_key(key)`` and a logger with the job's fields bound.

``JobContext`` is abstract: where an effect's result is recorded is the runner's
business (the worker's lease-fenced table in app/worker/context.py, or memory in
app/kinds/testing.py). Nothing of the lease or the database is reachable from here.
"""

from __future__ import annotations

import abc
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Generic, TypeVar

from app import bounds, errors

D = TypeVar("D")
T = TypeVar("T")

MAX_EFFECT_KEY = bounds.MAX_EFFECT_KEY_CHARS


class JobLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger that adds the job's fields to every record, beside the call's own extras."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs


class JobContext(abc.ABC, Generic[D]):
    """One attempt of one job, as its kind's code sees it. ``D`` is the kind's deps type."""

    def __init__(
        self,
        *,
        job_id: uuid.UUID,
        kind: str,
        attempt: int,
        deps: D,
        recorded: Mapping[str, Any] | None = None,
        log_fields: Mapping[str, Any] | None = None,
    ) -> None:
        self.job_id = job_id
        self.kind = kind
        self.attempt = attempt
        self.deps = deps
        self._recorded: dict[str, Any] = dict(recorded or {})
        self._replayed: list[str] = []
        self._ran: list[str] = []
        fields = {"job_id": job_id, "kind": kind, "attempt": attempt, **(log_fields or {})}
        self.log = JobLogger(logging.getLogger(f"app.kinds.{kind}"), fields)

    @property
    def replayed(self) -> list[str]:
        """Effects this attempt returned from an earlier attempt's record, in order."""
        return list(self._replayed)

    @property
    def ran(self) -> list[str]:
        """Effects whose function this attempt called, in order."""
        return list(self._ran)

    def idempotency_key(self, key: str) -> str:
        """The key to hand to an outside system that honours one: f"{job_id}:{key}"."""
        return f"{self.job_id}:{key}"

    async def effect(self, key: str, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn`` once for this job, ever, and return its recorded (JSON) result.

        A result recorded by an earlier attempt is returned without calling ``fn``.
        Otherwise ``fn`` runs and its result is recorded; if another attempt recorded
        first, *its* result is returned. A crash between ``fn`` returning and the record
        is the one window this cannot close: pass ``ctx.idempotency_key(key)`` to outside
        systems that take one.
        """
        if not key or len(key) > MAX_EFFECT_KEY:
            raise errors.PermanentError(
                f"effect key must be 1 to {MAX_EFFECT_KEY} characters: {key!r}"
            )
        if key in self._recorded:
            self._replayed.append(key)
            self.log.info("effect replayed", extra={"effect": key})
            return self._recorded[key]  # type: ignore[no-any-return]
        result = await fn()
        self._ran.append(key)
        try:
            # The record holds JSON: what a replay returns is what this attempt returns.
            value = json.loads(json.dumps(result))
        except (TypeError, ValueError) as exc:
            raise errors.PermanentError(
                f"effect {key!r} returned a value that is not JSON"
            ) from exc
        stored = await self._record(key, len(self._recorded), value)
        self._recorded[key] = stored
        self._after_effect(key)
        return stored  # type: ignore[no-any-return]

    @abc.abstractmethod
    async def _record(self, key: str, seq: int, value: Any) -> Any:
        """Record ``value`` as effect ``key`` (the ``seq``-th of the job) and return what
        is recorded under that key now: ``value``, or an earlier record that won."""

    def _after_effect(self, key: str) -> None:
        """Called once an effect is recorded; runners hook crash simulation here."""
