"""Deadlines of whole runs (migration 0022): the jobs past theirs end dead-lettered,
"deadline passed", their children cancelled by the cancelling trigger in the same
statement (docs/explain/design.md#deadlines). Each end is counted once, after the commit
(store/endings.py), with the children it cancelled."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from app.states import JobState
from app.store import endings
from app.store.leases import Finished
from app.store.pool import Database, q

REASON = "deadline passed"


@dataclass(frozen=True, slots=True)
class Expired:
    """A job the sweeper ended at its deadline, and the parent its end may have woken."""

    id: uuid.UUID
    parent_id: uuid.UUID | None


async def expire_unheld(db: Database, *, limit: int) -> list[Expired]:
    """End up to ``limit`` jobs past their deadline that no live lease holds (a batch,
    SKIP LOCKED: several sweepers share the work)."""
    rows = await endings.cancelling(db, q("expire_unheld"), {"limit": limit, "reason": REASON})
    return [Expired(row["id"], row["parent_id"]) for row in rows]


async def expire_held(
    db: Database, job_id: uuid.UUID, token: uuid.UUID, *, from_state: JobState
) -> Finished | None:
    """End the job this lease token holds, its deadline passed; None when the token no
    longer holds it (another writer ended it, or the lease moved on)."""
    params = {"id": job_id, "token": token, "reason": REASON, "from_state": from_state.value}
    rows = await endings.cancelling(db, q("expire_held"), params)
    return Finished(has_parked=bool(rows[0]["has_parked"])) if rows else None


async def past(
    db: Database, *, grace: float, limit: int = 100
) -> list[tuple[uuid.UUID, str, dt.datetime]]:
    """Unfinished jobs past their deadline by more than ``grace`` seconds (none, after a
    drain: the invariant)."""
    rows = await db.fetch(q("past_deadline"), {"grace": grace, "limit": limit})
    return [(row["id"], row["state"], row["deadline"]) for row in rows]
