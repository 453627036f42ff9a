"""A job's recorded side effects: each recorded once, fenced by the lease token."""

from __future__ import annotations

import uuid
from typing import Any

from psycopg.types.json import Jsonb

from app.store.pool import Database, q
from app.store.records import Effect


async def record(
    db: Database, *, job_id: uuid.UUID, token: uuid.UUID, key: str, seq: int, result: Any
) -> Effect | None:
    """Record ``result`` (a JSON value) under ``key``; returns the effect as stored, or None
    when the insert was refused (another attempt recorded first, or the lease moved on)."""
    rows = await db.fetch(
        q("record_effect"),
        {"id": job_id, "token": token, "key": key, "seq": seq, "result": Jsonb(result)},
    )
    return Effect.from_row(rows[0]) if rows else None


async def get(db: Database, job_id: uuid.UUID, key: str) -> Effect | None:
    row = await db.fetch_one(q("get_effect"), {"id": job_id, "key": key})
    return Effect.from_row(row) if row else None


async def of_job(db: Database, job_id: uuid.UUID) -> list[Effect]:
    """Every effect the job recorded, in the order it recorded them."""
    return [Effect.from_row(row) for row in await db.fetch(q("job_effects"), {"id": job_id})]
