"""Search: jobs by the filter of app/services/filters.py, their count, and the next batch
of a bulk action (the store's side of docs/explain/design.md#search-and-bulk)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from typing import Any

from psycopg.types.json import Jsonb

from app.store.pool import Conn, Database, fetch_txn, q
from app.store.records import Job


def _bound(params: Mapping[str, Any]) -> dict[str, Any]:
    payload = params.get("payload")
    return {**params, "payload": Jsonb(payload) if payload is not None else None}


async def page(
    db: Database,
    params: Mapping[str, Any],
    *,
    after: tuple[dt.datetime, uuid.UUID] | None,
    limit: int,
) -> list[Job]:
    """A page of the matching jobs, newest first, after ``after`` (created_at, id)."""
    rows = await db.fetch(
        q("search_jobs"),
        {
            **_bound(params),
            "after_created": after[0] if after else None,
            "after_id": after[1] if after else None,
            "limit": limit,
        },
    )
    return [Job.from_row(row) for row in rows]


async def count(db: Database, params: Mapping[str, Any]) -> int:
    """How many jobs the filter matches now."""
    row = await db.fetch_one(q("search_count"), _bound(params))
    return int(row["n"]) if row else 0


async def batch_txn(
    conn: Conn,
    params: Mapping[str, Any],
    *,
    cursor: uuid.UUID | None,
    made_before: dt.datetime,
    limit: int,
) -> list[uuid.UUID]:
    """Inside the caller's transaction: the next ``limit`` matching jobs after ``cursor``
    by id, made no later than ``made_before``, locked until it commits."""
    rows = await fetch_txn(
        conn,
        q("bulk_batch"),
        {**_bound(params), "cursor": cursor, "made_before": made_before, "limit": limit},
    )
    return [row["id"] for row in rows]
