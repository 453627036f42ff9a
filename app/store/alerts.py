"""Outgoing alerts (migration 0028): the rows the delivery loop takes and marks, the
threshold conditions, the tenants' webhooks. The alerts of a job's transitions are
written by a trigger on job_events, and a tenant's budget alert by the refused
reservation's statement (model_limits.sql): always in the event's own transaction."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from psycopg.types.json import Jsonb

from app.store.pool import Conn, Database, fetch_txn, q


@dataclass(frozen=True)
class DueAlert:
    """An alert still to deliver, with its tenant's webhook (None: the tenant has none)."""

    id: int
    dedup_key: str
    type: str
    tenant: str | None
    job_id: uuid.UUID | None
    detail: dict[str, Any]
    created_at: dt.datetime
    delivered: tuple[str, ...]
    attempts: int
    tenant_url: str | None = None
    tenant_secret: str | None = field(default=None, repr=False)


async def take_due_txn(conn: Conn, *, limit: int) -> list[DueAlert]:
    """Due undelivered alerts, locked for the caller's transaction (SKIP LOCKED)."""
    rows = await fetch_txn(conn, q("take_due_alerts"), {"limit": limit})
    return [
        DueAlert(
            id=r["id"],
            dedup_key=r["dedup_key"],
            type=r["type"],
            tenant=r["tenant"],
            job_id=r["job_id"],
            detail=dict(r["detail"] or {}),
            created_at=r["created_at"],
            delivered=tuple(r["delivered"] or ()),
            attempts=r["attempts"],
            tenant_url=r["tenant_url"],
            tenant_secret=r["tenant_secret"],
        )
        for r in rows
    ]


async def record_delivery_txn(
    conn: Conn,
    alert_id: int,
    *,
    took: Sequence[str],
    done: bool,
    error: str | None,
    backoff: float,
    max_attempts: int,
) -> None:
    """One attempt's outcome: ``took`` the destinations that accepted it; ``done`` none is
    left (delivered); else the error, the next attempt after ``backoff`` seconds, or given
    up at ``max_attempts``."""
    await fetch_txn(
        conn,
        q("record_alert_delivery"),
        {
            "id": alert_id,
            "took": list(took),
            "done": done,
            "error": error,
            "backoff": backoff,
            "max_attempts": max_attempts,
        },
    )


async def listing(
    db: Database, *, tenant: str | None, type_: str | None, limit: int
) -> list[dict[str, Any]]:
    return await db.fetch(q("list_alerts"), {"tenant": tenant, "type": type_, "limit": limit})


async def condition(
    db: Database, name: str, *, type_: str, over: bool, value: float, detail: dict[str, object]
) -> int | None:
    """Record whether a threshold condition is over now; the id of the alert written
    when it has just crossed, else None."""
    row = await db.fetch_one(
        q("alert_condition"),
        {"name": name, "type": type_, "over": over, "value": value, "detail": Jsonb(detail)},
    )
    return int(row["id"]) if row else None


async def dead_lettered_total(db: Database) -> int:
    row = await db.fetch_one(q("dead_lettered_total"))
    return int(row["n"]) if row else 0


async def oldest_queued(db: Database) -> tuple[float, uuid.UUID] | None:
    """The oldest queued job's age in seconds and its id; None when none is queued."""
    row = await db.fetch_one(q("oldest_queued_age"))
    return None if row is None else (float(row["age"]), row["id"])


async def prune(db: Database, *, keep_seconds: float, limit: int) -> int:
    rows = await db.fetch(q("prune_alerts"), {"keep": keep_seconds, "limit": limit})
    return len(rows)


async def set_tenant_webhook(db: Database, tenant: str, url: str, secret: str) -> dict[str, Any]:
    row = await db.fetch_one(
        q("set_tenant_alert_webhook"), {"tenant": tenant, "url": url, "secret": secret}
    )
    assert row is not None  # an upsert answers its row
    return row


async def clear_tenant_webhook(db: Database, tenant: str) -> bool:
    return bool(await db.fetch(q("clear_tenant_alert_webhook"), {"tenant": tenant}))


async def tenant_webhooks(db: Database) -> list[dict[str, Any]]:
    return await db.fetch(q("list_tenant_alert_webhooks"))
