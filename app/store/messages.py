"""Messages to a job: stored in order per job and topic, the job waiting on the topic
woken in the same transaction, each consumed once by a receive (its effect key marks it).
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from app.store.pool import Database, fetch_txn, q, retried
from app.store.records import Row


@dataclass(frozen=True, slots=True)
class Message:
    id: int
    job_id: uuid.UUID
    topic: str
    body: Any
    idempotency_key: str | None
    request_hash: str
    created_at: dt.datetime
    consumed_at: dt.datetime | None
    consumed_by: str | None  # the receive's effect key

    @classmethod
    def from_row(cls, row: Row) -> Message:
        return cls(**{name: row[name] for name in cls.__slots__})


@dataclass(frozen=True)
class Sending:
    """What a send found and did: the job's state and how many messages it had; the
    message stored now (``created``), or the Idempotency-Key's earlier one; None when
    refused (the job in one of ``refuse_states``, or at ``most`` messages)."""

    job_state: str
    messages: int
    message: Message | None
    created: bool = False
    woken: bool = False  # the message woke the job (it waited on the topic)


@retried
async def send(
    db: Database,
    job_id: uuid.UUID,
    *,
    scope: str | None,
    topic: str,
    body: Any,
    idempotency_key: str | None,
    request_hash: str,
    refuse_states: frozenset[str],
    most: int,
) -> Sending | None:
    """Store a message to the job (in ``scope``'s tenant, or any for None) and wake the
    job if it waits on ``topic``, in one transaction; None when there is no such job."""
    async with db.transaction() as conn:
        rows = await fetch_txn(conn, q("lock_job_for_message"), {"id": job_id, "scope": scope})
        if not rows:
            return None
        state, count = str(rows[0]["state"]), int(rows[0]["messages"])
        if idempotency_key is not None:
            found = await fetch_txn(
                conn, q("message_by_key"), {"id": job_id, "key": idempotency_key}
            )
            if found:
                return Sending(state, count, Message.from_row(found[0]))
        if state in refuse_states or count >= most:
            return Sending(state, count, None)
        made = await fetch_txn(
            conn,
            q("insert_message"),
            {
                "id": job_id,
                "topic": topic,
                "body": Jsonb(body),
                "key": idempotency_key,
                "request_hash": request_hash,
            },
        )
    row = made[0]
    return Sending(state, count, Message.from_row(row), created=True, woken=bool(row["woken"]))


async def take(
    db: Database, job_id: uuid.UUID, token: uuid.UUID, *, topic: str, key: str
) -> tuple[bool, Message | None]:
    """Fenced by the lease: (held, the message receive ``key`` consumed, now or before);
    held False when the lease moved on, message None when the topic has none unread."""
    row = await db.fetch_one(
        q("take_message"), {"id": job_id, "token": token, "topic": topic, "key": key}
    )
    if row is None or not row["held"]:
        return False, None
    return True, (Message.from_row(row) if row["id"] is not None else None)


async def of_job(db: Database, job_id: uuid.UUID, *, limit: int) -> list[Message]:
    """A job's messages, oldest first."""
    rows = await db.fetch(q("messages_of_job"), {"id": job_id, "limit": limit})
    return [Message.from_row(row) for row in rows]
