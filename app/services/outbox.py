"""The one outbox send path: send the messages of committed outbox rows, then record
what happened to each row (sent, or one more failed attempt with its error).

The API's fast path (``OutboxSender``, or ``send`` for a caller without one), a redrive
and the sweeper's relay all go through ``send``; the relay passes its transaction so
the rows it locked are recorded inside it. A long-running API records its sent rows a
moment later, many at once (``SendRecords``), not before each answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Sequence
from typing import Any

from app import batching, crashpoints, errors, metrics, store, tracing
from app.priorities import Priority, Route
from app.settings import aws_limits
from app.store.records import OutboxRow
from app.transport import Transport

log = logging.getLogger(__name__)

# What a row's last_error says when SQS refused its message or could not be reached
# (SendMessageBatch's per-entry failures carry no more than that for our purpose).
SEND_FAILED = "send failed"


async def send(
    db: store.Database,
    queue: Transport,
    rows: Sequence[OutboxRow],
    *,
    txn: store.Conn | None = None,
    records: SendRecords | None = None,
) -> set[int]:
    """Send the messages for these outbox rows and record each row's outcome (inside
    ``txn`` when given; the sent rows through ``records`` when given). Returns the ids
    of the rows sent."""
    if not rows:
        return set()
    failed = set(
        await queue.send_jobs(
            await routes(db, rows), traces={str(row.job_id): row.trace_context for row in rows}
        )
    )
    sent = [row.id for row in rows if str(row.job_id) not in failed]
    unsent = [row.id for row in rows if str(row.job_id) in failed]
    if unsent:
        log.warning("send failed; the outbox relay will retry", extra={"count": len(unsent)})
    if records is not None:
        records.add(sent)
        sent_now: list[int] = []
    else:
        sent_now = sent
    if sent_now:
        crashpoints.hit(crashpoints.Point.BEFORE_SENDS_RECORDED, count=len(sent_now))
    if txn is None:
        await store.outbox.record_sends(db, sent=sent_now, failed=unsent, error=SEND_FAILED)
    else:
        await store.outbox.record_sends_txn(txn, sent=sent_now, failed=unsent, error=SEND_FAILED)
    return set(sent)


async def send_wake_up(
    db: store.Database,
    queue: Transport,
    job_id: uuid.UUID,
    *,
    path: str,
    span: str,
    attributes: dict[str, Any],
) -> None:
    """Send the message of a job a committed write woke (an answer, a message to it),
    counted under ``path``, with a ``span`` in the job's trace. Its outbox row committed
    with the write: the relay sends it if this cannot."""
    metrics.count(metrics.WAKEUPS, path=path)
    rows = await store.waits.unsent_of(db, job_id)
    for row in rows[:1]:
        tracing.job_event(span, job_id, row.trace_context, **attributes)
    try:
        await send(db, queue, rows)
    except errors.QueueError as exc:
        log.warning("wake-up not sent (the outbox relay will): %s", exc, extra={"job_id": job_id})


async def routes(db: store.Database, rows: Sequence[OutboxRow]) -> list[Route]:
    """Where each row's message goes: from the row where its query read the job's tenant
    and priority, else looked up (one statement for the rest). A row whose job is gone
    (deleted by hand) keeps the normal queue, where the worker dead-letters it."""
    missing = [row.job_id for row in rows if row.route is None]
    found = await store.jobs.routes(db, missing) if missing else {}
    return [
        row.route or found.get(row.job_id) or Route(row.job_id, "", Priority.NORMAL) for row in rows
    ]


class SendRecords:
    """A long-running API's sent outbox rows, marked sent a moment after their sends, all
    the rows sent meanwhile in one statement: a request answers once its message is
    sent, without waiting for the mark's commit, and the database commits a mark per
    ``LINGER_SECONDS`` instead of one per SendMessageBatch. A row whose mark never
    came (the process died first) is sent again by the relay after its grace, and the
    worker takes the second message for what it is: one more delivery of a job that
    runs once. A Lambda's API records before it answers (its process may be frozen
    right after, and a duplicate message per request is a cost)."""

    LINGER_SECONDS = 0.1
    MAX_PENDING = 1000  # marked at once past this many

    def __init__(self, db: store.Database) -> None:
        self.db = db
        self._pending: list[int] = []
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._wake = asyncio.Event()  # set: mark now (MAX_PENDING reached, or closing)

    def add(self, ids: Sequence[int]) -> None:
        self._pending.extend(ids)
        if len(self._pending) >= self.MAX_PENDING:
            self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while self._pending:
            if len(self._pending) < self.MAX_PENDING and not self._closing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.LINGER_SECONDS)
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Mark the rows sent so far (a failed mark is left to the relay: logged)."""
        ids, self._pending = self._pending, []
        if not ids:
            return
        crashpoints.hit(crashpoints.Point.BEFORE_SENDS_RECORDED, count=len(ids))
        try:
            await store.outbox.record_sends(self.db, sent=ids, failed=[], error=SEND_FAILED)
        except errors.TaskleaseError as exc:
            log.warning(
                "sent messages not marked sent (the relay sends them again): %s",
                exc,
                extra={"count": len(ids)},
            )
        except Exception:  # a background task: nobody else would see it
            log.exception(
                "sent messages not marked sent (the relay sends them again)",
                extra={"count": len(ids)},
            )

    async def close(self) -> None:
        """Mark what is pending now, a mark under way finished first (the API stops)."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        await self.flush()


class OutboxSender:
    """The API's post-commit sends: concurrent requests' messages gathered into one
    SendMessageBatch and one statement that records their outbox rows (or, with
    ``records``, into the next of its statements). A request still waits for its own
    message to be sent before it answers (a Lambda's process may be frozen right after
    the answer); a lone request is sent at once."""

    def __init__(
        self, db: store.Database, queue: Transport, records: SendRecords | None = None
    ) -> None:
        self.db = db
        self.queue = queue
        self.records = records
        self.batcher: batching.Batcher[OutboxRow, bool] = batching.Batcher(
            self._flush, max_size=aws_limits.MAX_BATCH, max_in_flight=2
        )

    async def send(self, row: OutboxRow) -> bool:
        """True when the row's message was sent; False leaves it to the outbox relay."""
        return await self.batcher.submit(row)

    async def close(self) -> None:
        if self.records is not None:
            await self.records.close()

    async def _flush(self, rows: list[OutboxRow]) -> list[bool]:
        sent = await send(self.db, self.queue, rows, records=self.records)
        return [row.id in sent for row in rows]
