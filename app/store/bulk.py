"""Bulk operations (migration 0025): a cancel or redrive of every job a filter matches,
run in batches under a lease; each batch's cursor and counts commit with its actions."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from psycopg.types.json import Jsonb

from app.store.pool import Conn, Database, fetch_txn, q


@dataclass(frozen=True)
class BulkOperation:
    id: uuid.UUID
    tenant: str | None
    action: str
    filter: dict[str, Any]
    caller: str
    state: str
    total: int
    done: int
    skipped: int
    failed: int
    batches: int
    cursor: uuid.UUID | None
    last_error: str | None
    lease_token: uuid.UUID | None
    created_at: dt.datetime
    updated_at: dt.datetime
    finished_at: dt.datetime | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> BulkOperation:
        return cls(**{k: row[k] for k in cls.__dataclass_fields__})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Counts:
    """What one batch did: acted on, skipped (nothing to do), failed (refused)."""

    done: int = 0
    skipped: int = 0
    failed: int = 0


async def create(
    db: Database,
    *,
    tenant: str | None,
    action: str,
    filter_: dict[str, Any],
    caller: str,
    total: int,
    token: uuid.UUID,
    lease_seconds: float,
) -> BulkOperation:
    row = await db.fetch_one(
        q("bulk_create"),
        {
            "id": uuid.uuid4(),
            "tenant": tenant,
            "action": action,
            "filter": Jsonb(filter_),
            "caller": caller,
            "total": total,
            "token": token,
            "lease_seconds": lease_seconds,
        },
    )
    assert row is not None
    return BulkOperation.from_row(row)


async def get(db: Database, op_id: uuid.UUID, *, tenant: str | None) -> BulkOperation | None:
    row = await db.fetch_one(q("bulk_get"), {"id": op_id, "tenant": tenant})
    return BulkOperation.from_row(row) if row else None


async def listing(db: Database, *, tenant: str | None, limit: int) -> list[BulkOperation]:
    rows = await db.fetch(q("bulk_list"), {"tenant": tenant, "limit": limit})
    return [BulkOperation.from_row(row) for row in rows]


async def take_over(
    db: Database, *, token: uuid.UUID, lease_seconds: float, limit: int
) -> list[BulkOperation]:
    """Unfinished operations whose runner died (lease expired), now held by ``token``."""
    rows = await db.fetch(
        q("bulk_take_over"), {"token": token, "lease_seconds": lease_seconds, "limit": limit}
    )
    return [BulkOperation.from_row(row) for row in rows]


async def hold_txn(
    conn: Conn, op_id: uuid.UUID, *, token: uuid.UUID, lease_seconds: float
) -> BulkOperation | None:
    """Inside a batch's transaction: the operation locked and its lease renewed, or None
    when this runner no longer holds it."""
    rows = await fetch_txn(
        conn, q("bulk_hold"), {"id": op_id, "token": token, "lease_seconds": lease_seconds}
    )
    return BulkOperation.from_row(rows[0]) if rows else None


async def advance_txn(
    conn: Conn, op_id: uuid.UUID, *, token: uuid.UUID, cursor: uuid.UUID, counts: Counts
) -> None:
    await fetch_txn(
        conn,
        q("bulk_advance"),
        {"id": op_id, "token": token, "cursor": cursor, **asdict(counts)},
    )


async def finish(
    db: Database, op_id: uuid.UUID, *, token: uuid.UUID, error: str | None = None
) -> BulkOperation | None:
    row = await db.fetch_one(
        q("bulk_finish"),
        {"id": op_id, "token": token, "state": "failed" if error else "done", "error": error},
    )
    return BulkOperation.from_row(row) if row else None


async def prune(db: Database, *, keep_seconds: float, limit: int) -> int:
    """Delete up to ``limit`` operations finished ``keep_seconds`` ago; answers how many."""
    return len(await db.fetch(q("bulk_prune"), {"keep": keep_seconds, "limit": limit}))
