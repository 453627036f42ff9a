"""Workers (docs/explain/design.md#workers): the list GET /v1/workers answers, and the
prune of rows not seen for TASKLEASE_RETAIN_WORKERS_SECONDS (run by the retention prune)."""

from __future__ import annotations

import functools

from app import store
from app.services import batched
from app.settings.config import Settings

# Rows GET /v1/workers answers at most: the most recently seen.
LIST_LIMIT = 500


async def listing(settings: Settings, db: store.Database) -> list[store.workers.WorkerRow]:
    """The most recently seen first, each alive, gone or stopped (idle: a Lambda
    environment not invoked within TASKLEASE_WORKER_GONE_SECONDS)."""
    return await store.workers.listing(
        db, gone_seconds=settings.worker_gone_seconds, limit=LIST_LIMIT
    )


async def prune(settings: Settings, db: store.Database, *, max_batches: int | None) -> int:
    """Delete workers' rows past their retention, TASKLEASE_PRUNE_BATCH_SIZE per statement,
    until none is left or ``max_batches`` ran; answers the rows deleted."""
    return await batched.prune_in_batches(
        functools.partial(store.workers.prune, db),
        keep_seconds=settings.retain_workers_seconds,
        size=settings.prune_batch_size,
        max_batches=max_batches,
    )
