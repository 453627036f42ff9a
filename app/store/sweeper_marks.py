"""The sweeper's marks: what the database accounts for in the dead-letter queue, and the
claim that lets one sweeper of a deployment at a time look into it, at most so often."""

from __future__ import annotations

import datetime as dt

from app.store.pool import Database, q


async def dlq_accounted(db: Database, *, depth: int, retention: float) -> int:
    """How many DLQ messages the database explains: one per job dead-lettered within
    ``retention`` seconds, plus what the last scan left unexplained (lowered to what the
    queue's ``depth`` leaves room for)."""
    row = await db.fetch_one(q("dlq_accounted"), {"depth": depth, "retention": retention})
    return int(row["accounted"]) if row is not None else 0


SCAN = "dlq_scan"
FULL_LOOK = "dlq_full_look"


async def claim_dlq_scan(db: Database, *, every: float, mark: str = SCAN) -> dt.datetime | None:
    """The right to scan the DLQ now (when) if no sweeper took ``mark`` in the last
    ``every`` seconds; None otherwise."""
    row = await db.fetch_one(q("claim_dlq_scan"), {"every": every, "mark": mark})
    return None if row is None else row["at"]


async def give_back_dlq_scan(db: Database, claimed: dt.datetime, *, mark: str = SCAN) -> None:
    """A claimed scan that did not happen: the next sweep may claim it."""
    await db.fetch(q("give_back_dlq_scan"), {"at": claimed, "mark": mark})


async def dlq_scanned(db: Database, *, unaccounted: int) -> None:
    """What the scan left in the DLQ that no dead-lettered job accounts for."""
    await db.fetch(q("dlq_scanned"), {"unaccounted": unaccounted})
