"""Deadlines of whole runs: the checks at submission, and the sweeper's pass that ends the
jobs past theirs that no worker holds (docs/explain/design.md#deadlines).

A job's deadline is an absolute time (``deadline``) or seconds from its submission by the
database's clock (``deadline_seconds``); neither: its kind's default, if it has one. Past
it, whatever the job is doing, it ends dead-lettered, "deadline passed", its children
cancelled: the sweeper ends the ones no live lease holds, a worker the ones it holds (at
the claim, and while they run: app/worker/leases.py).
"""

from __future__ import annotations

import datetime as dt
import logging
import math

from app import crashpoints, errors, metrics, store
from app.services import outbox
from app.settings import bounds
from app.states import JobState
from app.transport import Transport

log = logging.getLogger(__name__)


def checked(
    deadline: dt.datetime | None, seconds: float | None, default: float | None
) -> tuple[dt.datetime | None, float | None]:
    """(deadline, deadline_seconds) to store: the request's, else the kind's ``default``;
    BadRequest naming the field when both are given, one is past or further than
    bounds.MAX_DEADLINE_SECONDS, or a deadline has no time zone."""
    most = bounds.MAX_DEADLINE_SECONDS
    if deadline is not None and seconds is not None:
        raise errors.BadRequest("give deadline or deadline_seconds, not both")
    if seconds is not None and not (math.isfinite(seconds) and 0 < seconds <= most):
        raise errors.BadRequest(
            f"deadline_seconds must be more than 0 and at most {most} (366 days), not {seconds}"
        )
    if deadline is None:
        return None, seconds if seconds is not None else default
    if deadline.tzinfo is None or deadline.utcoffset() is None:
        raise errors.BadRequest(
            "deadline needs a time zone (ISO 8601 with Z or an offset, e.g. 2026-12-24T18:00:00Z)"
        )
    now = dt.datetime.now(dt.UTC)
    if deadline <= now:
        raise errors.BadRequest(f"deadline {deadline.isoformat()} is past")
    if deadline > now + dt.timedelta(seconds=most):
        raise errors.BadRequest("deadline must be at most 366 days from now")
    return deadline, None


def hashed(deadline: dt.datetime | None, seconds: float | None) -> str | float | None:
    """The deadline as an Idempotency-Key's request binds it (None: not asked for)."""
    return deadline.astimezone(dt.UTC).isoformat() if deadline is not None else seconds


async def sweep(db: store.Database, queue: Transport, *, limit: int) -> int:
    """End the jobs past their deadline that no live lease holds, a batch at a time (at
    most ``limit``); a parent their end woke gets its message now. How many ended."""
    expired = await store.deadlines.expire_unheld(db, limit=limit)
    for job in expired:
        log.warning(
            "deadline passed: ended by the sweeper",
            extra={"job_id": job.id, "state": JobState.DEAD_LETTERED},
        )
    metrics.count(metrics.DEAD_LETTERS, len(expired), by="deadline")
    if expired:
        crashpoints.hit(crashpoints.Point.AFTER_DEADLINE_SWEPT, count=len(expired))
    parents = {job.parent_id for job in expired if job.parent_id is not None}
    for parent in parents:
        rows = await store.waits.unsent_of(db, parent)
        if rows:  # a failed send stays in the outbox: the relay sends it
            await outbox.send(db, queue, rows)
    return len(expired)
