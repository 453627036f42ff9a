"""Where a keyed job stands on its key (queries/key_view.sql), for `tasklease jobs show`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from app.store.pool import Database, q


@dataclass(frozen=True)
class KeyPosition:
    holding: int  # other jobs of the key holding it (claimed, not finished)
    queued_ahead: int  # jobs of the key queued before it
    open: int  # the key's unfinished jobs, itself included when unfinished
    recent_claims: int | None  # claims of the key within its rate's period (None: no rate)


async def position(db: Database, job_id: uuid.UUID) -> KeyPosition | None:
    """None: no such job, or it has no key."""
    row = await db.fetch_one(q("key_position"), {"id": job_id})
    if row is None:
        return None
    return KeyPosition(
        holding=int(row["holding"]),
        queued_ahead=int(row["queued_ahead"]),
        open=int(row["open"]),
        recent_claims=None if row["recent_claims"] is None else int(row["recent_claims"]),
    )
