"""The sweeper: stalled leases, unsent outbox rows, lost messages.

Runs on a schedule (EventBridge -> handlers/sweeper.py on AWS, ``tasklease sweep``
locally). Every step is idempotent and safe to run from several places at once
(SKIP LOCKED); a duplicate message it sends is dropped by the claim.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from app import aws_limits, store
from app.config import Settings
from app.services import outbox
from app.states import JobState
from app.transport import Transport, codec

log = logging.getLogger(__name__)

STALL_GRACE_SECONDS = 1.0
SWEEP_LIMIT = 500


@dataclass
class SweepReport:
    stalled: int = 0
    outbox_sent: int = 0
    resent: int = 0
    dead_lettered: int = 0
    stale_dead_letters: int = 0

    def __str__(self) -> str:
        return (
            f"stalled={self.stalled} outbox_sent={self.outbox_sent} resent={self.resent} "
            f"dead_lettered={self.dead_lettered} stale_dead_letters={self.stale_dead_letters}"
        )


async def relay_outbox(settings: Settings, db: store.Database, queue: Transport) -> int:
    """Send outbox rows whose fast-path send did not happen, in batches of 10, through
    the API's send path: a failed send counts an attempt and keeps its error on the row.
    Stops at the first batch with a failure (the queue is likely down: the next sweep
    tries again)."""
    total = 0
    while True:
        async with db.transaction() as conn:
            rows = await store.outbox.take_unsent_txn(
                conn, grace=settings.outbox_grace_seconds, limit=aws_limits.MAX_BATCH
            )
            if not rows:
                return total
            sent = await outbox.send(db, queue, rows, txn=conn)
            total += len(sent)
            if len(sent) < len(rows):
                log.warning("outbox relay: send failed", extra={"count": len(rows) - len(sent)})
                return total


async def sweep_once(settings: Settings, db: store.Database, queue: Transport) -> SweepReport:
    report = SweepReport()
    stalled = await store.leases.mark_stalled(db, grace=STALL_GRACE_SECONDS, limit=SWEEP_LIMIT)
    report.stalled = len(stalled)
    for job_id in stalled:
        log.warning("lease expired with no heartbeat", extra={"job_id": job_id, "state": "stalled"})
    report.outbox_sent = await relay_outbox(settings, db, queue)
    lost = await store.leases.touch_lost(db, age=settings.lost_message_seconds, limit=SWEEP_LIMIT)
    if lost:
        failed = await queue.send_jobs(lost)
        report.resent = len(lost) - len(failed)
        log.info("re-sent messages for waiting jobs", extra={"count": report.resent})
    report.dead_lettered, report.stale_dead_letters = await reconcile_dlq(db, queue)
    return report


# Dead letters the scan has looked at stay hidden this long: one scan sees each once.
DLQ_SCAN_VISIBILITY_SECONDS = 2
DLQ_SCAN_BATCHES = 10


async def reconcile_dlq(db: store.Database, queue: Transport) -> tuple[int, int]:
    """Look at the DLQ: jobs SQS moved there itself (no marker) become dead_lettered
    ("worker never finished"); stale dead letters of finished or redriven jobs are
    deleted. Returns (reconciled, deleted)."""
    reconciled = deleted = 0
    for _ in range(DLQ_SCAN_BATCHES):
        messages = await queue.receive_dead_letters(
            max_messages=aws_limits.MAX_BATCH,
            wait_seconds=0,
            visibility=DLQ_SCAN_VISIBILITY_SECONDS,
        )
        if not messages:
            break
        ids = codec.job_ids(messages)
        if not ids:
            continue
        jobs = {job.id: job for job in await store.jobs.by_ids(db, list(set(ids.values())))}
        to_mark: list[uuid.UUID] = []
        stale: list[str] = []
        for m in messages:
            job_id = ids.get(m["MessageId"])
            job = jobs.get(job_id) if job_id is not None else None
            if job is None:
                continue  # not ours, or unknown: an operator looks at it
            attrs = m.get("MessageAttributes") or {}
            if job.state.terminal:
                stale.append(m["ReceiptHandle"])
            elif codec.ATTR_DEAD_LETTERED_AT in attrs:
                gen = (attrs.get(codec.ATTR_GENERATION) or {}).get("StringValue")
                if gen is not None and gen.isdigit() and int(gen) < job.redrives:
                    stale.append(m["ReceiptHandle"])  # a dead letter from before a redrive
            elif job.state != JobState.DEAD_LETTERED:
                to_mark.append(job.id)
        if to_mark:
            moved = await store.dead_letters.reconcile_moved(db, to_mark)
            reconciled += len(moved)
            for job_id in moved:
                log.warning(
                    "moved to the DLQ by the redrive policy: worker never finished",
                    extra={"job_id": job_id, "state": JobState.DEAD_LETTERED},
                )
        if stale:
            await queue.delete_dead_letters(stale)
            deleted += len(stale)
    return reconciled, deleted
