"""Retention (docs/explain/design.md#retention): terminal jobs past their state's retention deleted with
their rows, in batches of TASKLEASE_PRUNE_BATCH_SIZE, one statement each (bounded time and
locks, no long transaction, no table rewrite). The sweeper runs a few batches per pass;
``tasklease prune`` runs until nothing is left."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app import crashpoints, metrics, store
from app.services import batched, charts, workers
from app.settings.config import Settings

log = logging.getLogger(__name__)


@dataclass
class PruneReport:
    """What a prune deleted: rows by state and table, batches run, seconds taken."""

    rows: dict[str, dict[str, int]] = field(default_factory=dict)  # state -> table -> rows
    batches: int = 0
    seconds: float = 0.0
    chart_rows: int = 0  # chart buckets past their width's keep (services/charts.py)
    workers: int = 0  # workers' rows not seen for TASKLEASE_RETAIN_WORKERS_SECONDS
    # bulk operations finished TASKLEASE_RETAIN_BULK_OPERATIONS_SECONDS ago
    bulk_operations: int = 0

    def jobs(self, state: str | None = None) -> int:
        states = [state] if state else list(self.rows)
        return sum(self.rows.get(s, {}).get("jobs", 0) for s in states)

    def add(self, state: str, counts: dict[str, int]) -> None:
        mine = self.rows.setdefault(state, dict.fromkeys(store.retention.TABLES, 0))
        for table, n in counts.items():
            mine[table] += n


async def prune(
    settings: Settings,
    db: store.Database,
    *,
    max_batches: int | None = None,
    on_batch: Callable[[str, dict[str, int]], None] | None = None,
) -> PruneReport:
    """Prune each retained state in turn, oldest finished first, until a batch comes back
    short or ``max_batches`` batches of that state ran (None: until none is left). Each
    batch commits on its own: a crash loses at most the batch in flight, whole."""
    report = PruneReport()
    t0 = time.perf_counter()
    for state, keep in settings.retention().items():
        ran = 0
        while max_batches is None or ran < max_batches:
            counts = await store.retention.prune_batch(
                db,
                state=state,
                keep_seconds=keep,
                replay_window=settings.idempotency_window_seconds,
                dlq_keep=settings.dlq_retention_seconds,
                limit=settings.prune_batch_size,
            )
            ran += 1
            report.batches += 1
            report.add(state, counts)
            for table, n in counts.items():
                metrics.count(metrics.PRUNED, n, table=table, state=state)
            if on_batch is not None:
                on_batch(state, counts)
            if counts["jobs"]:
                crashpoints.hit(
                    crashpoints.Point.AFTER_PRUNE_BATCH, state=state, jobs=counts["jobs"]
                )
            if counts["jobs"] < settings.prune_batch_size:
                break
    report.chart_rows = await charts.prune(
        db, limit=settings.prune_batch_size, max_batches=max_batches
    )
    report.workers = await workers.prune(settings, db, max_batches=max_batches)
    report.bulk_operations = await _prune_bulk(settings, db, max_batches=max_batches)
    report.seconds = time.perf_counter() - t0
    if report.jobs():
        log.info(
            "pruned finished jobs past their retention",
            extra={"count": report.jobs(), "batches": report.batches},
        )
    return report


async def _prune_bulk(settings: Settings, db: store.Database, *, max_batches: int | None) -> int:
    return await batched.prune_in_batches(
        functools.partial(store.bulk.prune, db),
        keep_seconds=settings.retain_bulk_operations_seconds,
        size=settings.prune_batch_size,
        max_batches=max_batches,
    )


async def due(settings: Settings, db: store.Database) -> list[store.retention.Due]:
    """What a prune would delete now, by state (``tasklease prune --dry-run``)."""
    keeps = settings.retention()
    if not keeps:
        return []
    return await store.retention.prunable(
        db,
        keeps,
        replay_window=settings.idempotency_window_seconds,
        dlq_keep=settings.dlq_retention_seconds,
    )
