"""The job context the engine hands a kind: effects recorded in the store, fenced
by the lease token, with the crash points around the record.

A kind sees only ``app.kinds.JobContext``; the lease and the database stay here.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from app import crashpoints, errors, store, tracing
from app.kinds import JobContext
from app.kinds.generate import Usage
from app.kinds.messages import Message
from app.kinds.output import Emitted
from app.kinds.state import too_many_keys
from app.kinds.waits import CallbackStatus, ChildStatus
from app.services import budgets, callbacks, costs, submit
from app.settings import bounds
from app.store.records import OutboxRow
from app.worker.output import OutputBuffer

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
        shapes: Mapping[str, str | None] | None = None,
        version: str | None = None,
        started_version: str | None = None,
        settings: Any = None,
        send: Callable[[list[OutboxRow]], Awaitable[object]] | None = None,
        clock_offset: float = 0.0,
    ) -> None:
        super().__init__(
            job_id=job_id,
            kind=kind,
            attempt=attempt,
            deps=deps,
            recorded=recorded,
            log_fields={"lease_owner": lease_owner},
            shapes=shapes,
            version=version,
            started_version=started_version,
        )
        self._token = lease_token
        self._owner = lease_owner
        self._db = db
        self._settings = settings
        self._send = send
        # The database's clock minus this process's, measured at the claim: a timer the
        # database found due is due here too.
        self._offset = dt.timedelta(seconds=clock_offset)
        self.output = OutputBuffer(db, job_id, lease_token)

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC) + self._offset

    async def _output(self, item: Emitted) -> None:
        # Not kept in memory too: a long streamed answer is written, not held.
        await self.output.add(item)

    async def _reserve(self, budget: str, tokens: int) -> budgets.Held | None:
        if self._settings is None:
            return None
        return await budgets.reserve(self._settings, self._db, self.job_id, budget, tokens)

    async def _settle(self, held: Any, usage: Usage | None) -> None:
        await budgets.settle(self._db, held, usage)

    async def _recorded_chunks(self, key: str) -> list[tuple[int, str]]:
        rows = await store.streams.output_of(self._db, self.job_id, "chunk", key)
        return [(r["seq"], r["data"]["text"]) for r in rows]

    # --- published state -----------------------------------------------------------

    async def _set_state(self, key: str, value: Any) -> None:
        """Written after what the attempt emitted before it (its stream stays in order),
        fenced as the output is: a zombie's state is refused (LeaseLost), and nothing is
        written once the job's cancel was asked for (Cancelled)."""
        await self.output.flush()
        published = await store.state.publish(
            self._db, self.job_id, self._token, key, value, max_keys=bounds.MAX_STATE_KEYS
        )
        if published.cancelled:
            raise errors.Cancelled()
        if not published.fenced:
            raise errors.LeaseLost()
        if not published.room:
            raise too_many_keys(key)
        fields = {**self._fields(key), "version": published.version}
        if published.changed:
            log.info("state published", extra=fields)
        crashpoints.hit(crashpoints.Point.AFTER_STATE_PUBLISHED, **fields)

    # --- callbacks ---------------------------------------------------------------

    async def _callback_token(self, key: str) -> str:
        return await callbacks.token_for(self._db, self.job_id, key)

    async def _open_callback(self, key: str, seconds: float, details: Any) -> dict[str, Any]:
        token = await self._callback_token(key)
        opened = await store.waits.open_callback(
            self._db,
            self.job_id,
            self._token,
            key=key,
            token_hash=callbacks.token_hash(token),
            timeout_seconds=math.ceil(seconds),
            details=details,
        )
        if opened is None:
            raise errors.LeaseLost()
        at, stored = opened
        if stored != callbacks.token_hash(token):
            # Opened under another server secret: the token this process would hand out
            # could never answer it.
            raise errors.PermanentError(
                f"callback {key!r} was opened under another TASKLEASE_KEY_HASH_SECRET: "
                "its token cannot be derived again here"
            )
        return {"opened_at": at.isoformat()}

    async def _callback_status(self, key: str) -> CallbackStatus:
        found = await store.waits.callback_of(self._db, self.job_id, key)
        if found is None:
            raise errors.PermanentError(f"callback {key!r} was never opened")
        return CallbackStatus(found.state, found.deadline, found.result, found.error)  # type: ignore[arg-type]

    async def _time_out_callback(self, key: str) -> CallbackStatus:
        await store.waits.time_out_callback(self._db, self.job_id, key)
        return await self._callback_status(key)

    # --- messages ------------------------------------------------------------------

    async def _take_message(self, topic: str, key: str) -> Message | None:
        held, found = await store.messages.take(
            self._db, self.job_id, self._token, topic=topic, key=key
        )
        if not held:
            raise errors.LeaseLost()
        if found is None:
            return None
        crashpoints.hit(
            crashpoints.Point.AFTER_MESSAGE_TAKEN, **self._fields(key), message_id=found.id
        )
        return Message(found.id, found.topic, found.body, found.created_at)

    # --- children ------------------------------------------------------------------

    async def _spawn(self, key: str, kind: str, payload: Any) -> str:
        try:
            row = submit.validated(self._settings, submit.NewJob(kind, payload))
        except (errors.BadRequest, errors.NotFound) as exc:
            raise errors.PermanentError(f"spawn {key!r}: {exc}") from exc
        # The child counts against its tenant's window and carries its key and its kind's
        # limits per key (the claim holds it to them). Its kind's submit-time policies
        # (if_active reject, drop_new, cancel_active; debounce) do not apply: the parent
        # waits on this very child, and replacing it, refusing it or answering with
        # another job of its key would break that wait (docs/howto/flow-control.md).
        spawned = await store.waits.spawn_child(
            self._db,
            self.job_id,
            self._token,
            key=key,
            row=row,
            limits=submit.limits(self._settings),
            # The child's trace continues from this spawn effect's span: one trace.
            trace_context=tracing.for_new_job(),
        )
        if spawned is None:
            raise errors.LeaseLost()
        if spawned.outbox is not None and self._send is not None:
            # The outbox row commits with the child; the relay sends it if this does not.
            await self._send([spawned.outbox])
        return str(spawned.child_id)

    async def _children(self, ids: list[str]) -> list[ChildStatus]:
        try:
            wanted = [uuid.UUID(i) for i in ids]
        except ValueError as exc:
            raise errors.PermanentError(f"gather: not a job id: {exc}") from exc
        rows = {str(r.id): r for r in await store.waits.children_states(self._db, wanted)}
        out: list[ChildStatus] = []
        for i in ids:
            row = rows.get(i)
            if row is None or row.parent_id != self.job_id:
                raise errors.PermanentError(f"gather: {i} is not a child of this job")
            if row.state == "succeeded":
                out.append(ChildStatus(i, "succeeded", result=row.result))
            elif row.state in ("dead_lettered", "cancelled"):
                out.append(ChildStatus(i, "failed", error=row.last_error or row.state))
            else:
                out.append(ChildStatus(i, "unfinished"))
        return out

    def _fields(self, key: str) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "kind": self.kind,
            "attempt": self.attempt,
            "lease_owner": self._owner,
            "effect": key,
        }

    async def _record(
        self, key: str, seq: int, value: Any, usage: Usage | None = None, *, shape: str
    ) -> Any:
        """A conditional insert fenced by the lease token; if another attempt recorded
        first, *its* result; if neither, the job's cancel was asked for (Cancelled: nothing
        is recorded after a cancel) or the lease moved on (LeaseLost)."""
        crashpoints.hit(crashpoints.Point.INSIDE_EFFECT, **self._fields(key))
        if usage is not None:
            # The chunks are written before the record: a reader of the stream has the
            # whole text once the effect says it is done.
            await self.output.flush()
        recorded = await store.effects.record(
            self._db,
            job_id=self.job_id,
            token=self._token,
            key=key,
            seq=seq,
            result=value,
            usage=None
            if usage is None
            else store.effects.ModelUsage(usage.model, usage.input_tokens, usage.output_tokens),
            shape=shape,
        )
        if recorded is not None:
            log.info("effect recorded", extra=self._fields(key))
            if usage is not None:
                costs.count(self._settings, self.kind, usage)
            return recorded.result
        existing = await store.effects.get(self._db, self.job_id, key)
        if existing is None:
            if await store.cancels.requested(self._db, [(self.job_id, self._token)]):
                raise errors.Cancelled()
            # Not recorded and not ours to record: the lease moved on.
            raise errors.LeaseLost()
        log.warning("effect recorded by another attempt first", extra=self._fields(key))
        return existing.result

    def _after_effect(self, key: str) -> None:
        crashpoints.hit(crashpoints.Point.AFTER_EFFECT, **self._fields(key))
