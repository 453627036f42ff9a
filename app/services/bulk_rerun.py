"""A bulk re-run's batch (app/services/bulk.py, ``OUTSIDE``): each job re-run through the
submit path, which admits and commits on its own, keyed by the operation and the job, so
a batch run a second time finds the re-runs it made and makes none again."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from app import errors, store
from app.services import reruns
from app.settings.config import Settings
from app.store.bulk import BulkOperation, Counts
from app.transport import Transport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rerun:
    """What a re-run batch needs beyond the batch: the operation, and where to submit."""

    settings: Settings
    db: store.Database
    queue: Transport
    op: BulkOperation


# A re-run's pause when a tenant's limit refuses one, at most (its Retry-After, else 1 s).
MAX_PAUSE_SECONDS = 5.0


async def rerun_batch(ids: Sequence[uuid.UUID], r: Rerun) -> tuple[Counts, int]:
    """Each job re-run as POST /v1/jobs/{id}/rerun does, keyed ``bulk:<operation>:<job>``
    (found, not made again, when this batch runs a second time). Answers the counts and
    how many of ``ids`` it looked at: fewer than all when the tenant's limits refused
    one (the rest wait for the next batch)."""
    done = skipped = failed = 0
    by = f"bulk operation {r.op.id} ({r.op.caller})"
    for i, job_id in enumerate(ids):
        try:
            await reruns.rerun(
                r.settings,
                r.db,
                r.queue,
                job_id,
                scope=r.op.tenant,
                by=by,
                idempotency_key=f"bulk:{r.op.id}:{job_id}",
            )
            done += 1
        except errors.TooManyRequests as exc:
            log.info("bulk re-run %s paused by the tenant's limits: %s", r.op.id, exc)
            await asyncio.sleep(min(MAX_PAUSE_SECONDS, exc.retry_after))
            return Counts(done=done, skipped=skipped, failed=failed), i
        except (errors.NotFound, errors.Conflict):
            skipped += 1  # pruned, or no longer finished (redriven meanwhile)
        except errors.BadRequest as exc:  # its kind is gone, or its payload no longer fits
            log.warning("bulk re-run %s: job %s refused: %s", r.op.id, job_id, exc)
            failed += 1
    return Counts(done=done, skipped=skipped, failed=failed), len(ids)
