"""A delivery the claim did not take: an unknown job (to the DLQ), a late duplicate (deleted),
a cancel asked for before it ran, an early wake-up of a waiting job (re-delayed), or a
duplicate of a live lease (left hidden until that lease would expire)."""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from app import errors, metrics, store
from app.services import wakeups
from app.settings.config import Settings
from app.states import FINAL_FOR_NOW, JobState
from app.store import Database
from app.store.records import Job, OutboxRow
from app.transport import Transport, codec
from app.worker import counting

log = logging.getLogger(__name__)

Send = Callable[[list[OutboxRow]], Awaitable[None]]


async def handle(
    settings: Settings,
    db: Database,
    queue: Transport,
    job_id: uuid.UUID,
    record: Mapping[str, Any],
    body: str,
    *,
    send: Send,
) -> bool:
    """A delivery the claim neither claimed, refused nor deferred: why, and what becomes
    of its message (True: delete it; False: leave it)."""
    job = await store.jobs.get(db, job_id)
    if job is None:
        # Not a job of this deployment (another one's queue, or a hand-made message).
        log.warning("message names an unknown job; sent to the DLQ", extra={"job_id": job_id})
        await queue.send_raw_dead_letter(
            body,
            f"unknown job id {job_id}: this deployment's database has no such job",
            attributes=codec.message_attributes(record),
        )
        return True
    state = job.state
    fields = {"job_id": job_id, "kind": job.kind, "state": state}
    if state in FINAL_FOR_NOW:
        # A late duplicate, or the source message of a dead-lettering cut short.
        log.info("late duplicate deleted", extra=fields)
        return True
    if job.cancel_requested:
        done = await store.jobs.cancel_waiting(db, job_id, detail="cancelled before it ran")
        counting.ended(job, "cancelled", done)
        log.info("cancelled before it ran", extra=fields)
        return True
    if state == JobState.WAITING:
        return await _early(settings, db, queue, job, fields, send)
    if state in (JobState.LEASED, JobState.RUNNING) and job.lease_expires_at is not None:
        # A live lease held by another worker: a duplicate delivery. Keep this copy
        # hidden until that lease would expire, so it is the backup if the holder dies.
        remaining = job.lease_expires_at.timestamp() - time.time()
        handle = str(record.get("receiptHandle", ""))
        with contextlib.suppress(errors.QueueError):
            await queue.change_visibility(handle, max(1.0, remaining + 1))
        log.info("duplicate delivery of a leased job left alone", extra=fields)
        return False
    log.warning("job not claimable; message left", extra=fields)
    return False


async def _early(
    settings: Settings,
    db: Database,
    queue: Transport,
    job: Job,
    fields: dict[str, Any],
    send: Send,
) -> bool:
    """A message for a job still waiting: its timer is not due (or it waits for an
    answer). Nothing runs; the message goes, re-sent with the delay left when the due
    time is within SQS's delay cap (else the sweeper sends it when it is)."""
    job_id = job.id
    if await store.waits.wake_if_answered(db, job_id, why="answered, found by a message"):
        # Its answer came but woke nobody (a lost race): this message repairs it.
        metrics.count(metrics.WAKEUPS, path="answered")
        await send(await store.waits.unsent_of(db, job_id))
        log.warning("an answered wait was still waiting: woken", extra=fields)
        return True
    delay = await store.waits.early_wakeup(db, job_id, cap=settings.max_message_delay_seconds)
    if delay is not None:
        await wakeups.send(queue, [(job.route, delay)], path="early")
    log.info("early wake-up re-delayed", extra={**fields, "delay": delay})
    return True
