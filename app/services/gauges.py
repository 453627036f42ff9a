"""Reads what ``GET /metrics`` reports at scrape time (jobs by state and kind, the
oldest queued job's age, the DLQ's depth) into ``metrics.SCRAPED``: one statement and
one GetQueueAttributes, at most once a second however often it is scraped."""

from __future__ import annotations

import logging
import time

from app import errors, metrics, store
from app.transport import Transport

log = logging.getLogger(__name__)

# A scrape within this long of the last read answers the same figures.
CACHE_SECONDS = 1.0

_read_at = -CACHE_SECONDS


async def refresh(db: store.Database, queue: Transport) -> None:
    """Read the figures unless read within CACHE_SECONDS. A database or queue that does
    not answer leaves its figures out of this scrape (it is logged), never fails it.
    (No lock: two scrapes at once may both read, which is harmless.)"""
    global _read_at
    if time.monotonic() - _read_at < CACHE_SECONDS:
        return
    _read_at = time.monotonic()
    jobs: store.gauges.JobGauges | None = None
    dlq: dict[str, int] | None = None
    try:
        await store.gauges.fold(db)  # the appended count changes, into the totals
        jobs = await store.gauges.jobs(db)
    except errors.TaskleaseError as exc:
        log.warning("metrics: jobs by state not read: %s", exc)
    try:
        dlq = await queue.dead_letter_depth()
    except errors.TaskleaseError as exc:
        log.warning("metrics: DLQ depth not read: %s", exc)
    metrics.SCRAPED.set(
        jobs.counts if jobs else None,
        jobs.oldest_queued_seconds if jobs else None,
        dlq,
    )


async def counts_by_kind(db: store.Database, tenant: str | None) -> dict[str, dict[str, int]]:
    """Jobs by kind, then state, for ``tenant`` (None: every tenant), from the counts the
    triggers maintain (migration 0018): the same cost at any size of the history."""
    return await store.gauges.by_kind(db, tenant)
