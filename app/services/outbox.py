"""The one outbox send path: send the messages of committed outbox rows, then record
what happened to each row (sent, or one more failed attempt with its error).

The API's fast path (``OutboxSender``, or ``send`` for a caller without one), a redrive
and the sweeper's relay all go through ``send``; the relay passes its transaction so
the rows it locked are recorded inside it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

from app import batching, errors, metrics, store, tracing
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
) -> set[int]:
    """Send the messages for these outbox rows and record each row's outcome (inside
    ``txn`` when given). Returns the ids of the rows sent."""
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
    if txn is None:
        await store.outbox.record_sends(db, sent=sent, failed=unsent, error=SEND_FAILED)
    else:
        await store.outbox.record_sends_txn(txn, sent=sent, failed=unsent, error=SEND_FAILED)
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


class OutboxSender:
    """The API's post-commit sends: concurrent requests' messages gathered into one
    SendMessageBatch and one statement that records their outbox rows. A request
    still waits for its own message to be sent before it answers (a Lambda's process
    may be frozen right after the answer); a lone request is sent at once."""

    def __init__(self, db: store.Database, queue: Transport) -> None:
        self.db = db
        self.queue = queue
        self.batcher: batching.Batcher[OutboxRow, bool] = batching.Batcher(
            self._flush, max_size=aws_limits.MAX_BATCH, max_in_flight=2
        )

    async def send(self, row: OutboxRow) -> bool:
        """True when the row's message was sent; False leaves it to the outbox relay."""
        return await self.batcher.submit(row)

    async def _flush(self, rows: list[OutboxRow]) -> list[bool]:
        sent = await send(self.db, self.queue, rows)
        return [row.id in sent for row in rows]
