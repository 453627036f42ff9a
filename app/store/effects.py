"""A job's recorded side effects: each recorded once, fenced by the lease token."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from app.store.pool import Database, q
from app.store.records import Effect


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """What a model effect used: the model that answered and the tokens it reported."""

    model: str
    input_tokens: int | None
    output_tokens: int | None


async def record(
    db: Database,
    *,
    job_id: uuid.UUID,
    token: uuid.UUID,
    key: str,
    seq: int,
    result: Any,
    usage: ModelUsage | None = None,
    shape: str | None = None,
) -> Effect | None:
    """Record ``result`` (a JSON value) under ``key`` (with a model call's ``usage``, in
    the same insert; ``shape``: what kind of step it is); returns the effect as stored, or None when the insert was refused
    (another attempt recorded first, or the lease moved on)."""
    rows = await db.fetch(
        q("record_effect"),
        {
            "id": job_id,
            "token": token,
            "key": key,
            "seq": seq,
            "result": Jsonb(result),
            "model": usage.model if usage else None,
            "input_tokens": usage.input_tokens if usage else None,
            "output_tokens": usage.output_tokens if usage else None,
            "shape": shape,
        },
    )
    return Effect.from_row(rows[0]) if rows else None


async def get(db: Database, job_id: uuid.UUID, key: str) -> Effect | None:
    row = await db.fetch_one(q("get_effect"), {"id": job_id, "key": key})
    return Effect.from_row(row) if row else None


async def of_job(db: Database, job_id: uuid.UUID) -> list[Effect]:
    """Every effect the job recorded, in the order it recorded them."""
    return [Effect.from_row(row) for row in await db.fetch(q("job_effects"), {"id": job_id})]


async def job_usage(db: Database, job_id: uuid.UUID) -> list[dict[str, Any]]:
    """The job's model effects by model: calls, input_tokens, output_tokens."""
    return await db.fetch(q("job_usage"), {"id": job_id})


async def usage_totals(
    db: Database, *, tenant: str | None, since: dt.date, until: dt.date
) -> list[dict[str, Any]]:
    """Model effects by tenant, kind, UTC day and model for days ``since`` to ``until``
    (both included); every tenant's when ``tenant`` is None."""
    return await db.fetch(q("usage_totals"), {"tenant": tenant, "since": since, "until": until})
