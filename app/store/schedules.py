"""The schedules aggregate: create, read, list, pause, resume, delete, and what the sweeper
takes and writes back for a due slot (inside its transaction, with the slot's job)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from app.store.pool import Conn, Database, fetch_txn, q
from app.store.records import Schedule


@dataclass(frozen=True)
class NewSchedule:
    """A validated schedule, as the insert takes it."""

    id: uuid.UUID
    tenant: str
    name: str | None
    cron: str
    timezone: str
    kind: str
    payload: Any
    max_attempts: int | None
    timeout_seconds: int | None
    next_slot: dt.datetime | None


@dataclass(frozen=True)
class Due:
    """A schedule whose next slot is due, locked for the transaction, and the database's
    clock at that moment."""

    schedule: Schedule
    now: dt.datetime


async def insert(db: Database, new: NewSchedule) -> Schedule | None:
    """The schedule written; None when its tenant already has a schedule of that name."""
    row = await db.fetch_one(
        q("insert_schedule"),
        {
            "id": new.id,
            "tenant": new.tenant,
            "name": new.name,
            "cron": new.cron,
            "timezone": new.timezone,
            "kind": new.kind,
            "payload": Jsonb(new.payload),
            "max_attempts": new.max_attempts,
            "timeout_seconds": new.timeout_seconds,
            "next_slot": new.next_slot,
        },
    )
    return Schedule.from_row(row) if row else None


async def get(db: Database, schedule_id: uuid.UUID, tenant: str | None) -> Schedule | None:
    """The schedule if it is ``tenant``'s; a None tenant is the operator's view."""
    row = await db.fetch_one(q("get_schedule"), {"id": schedule_id, "tenant": tenant})
    return Schedule.from_row(row) if row else None


async def page(db: Database, *, tenant: str | None, limit: int) -> list[Schedule]:
    """Newest first."""
    rows = await db.fetch(q("list_schedules"), {"tenant": tenant, "limit": limit})
    return [Schedule.from_row(row) for row in rows]


async def pause(db: Database, schedule_id: uuid.UUID, tenant: str | None) -> Schedule | None:
    row = await db.fetch_one(q("pause_schedule"), {"id": schedule_id, "tenant": tenant})
    return Schedule.from_row(row) if row else None


async def resume(
    db: Database, schedule_id: uuid.UUID, tenant: str | None, *, next_slot: dt.datetime | None
) -> Schedule | None:
    """Enabled again; a paused schedule's next slot becomes ``next_slot``."""
    row = await db.fetch_one(
        q("resume_schedule"), {"id": schedule_id, "tenant": tenant, "next_slot": next_slot}
    )
    return Schedule.from_row(row) if row else None


async def delete(db: Database, schedule_id: uuid.UUID, tenant: str | None) -> bool:
    return bool(await db.fetch(q("delete_schedule"), {"id": schedule_id, "tenant": tenant}))


async def take_due_txn(
    conn: Conn, *, skip: Sequence[uuid.UUID] = (), skip_tenants: Sequence[str] = ()
) -> Due | None:
    """One enabled schedule whose next slot is due, locked for the caller's transaction
    (SKIP LOCKED: several sweepers share the work, never the same schedule), none of
    ``skip`` nor of the tenants in ``skip_tenants``."""
    rows = await fetch_txn(
        conn,
        q("take_due_schedule"),
        {"skip": list(skip), "skip_tenants": list(skip_tenants)},
    )
    if not rows:
        return None
    return Due(schedule=Schedule.from_row(rows[0]), now=rows[0]["db_now"])


async def advance_txn(
    conn: Conn,
    schedule_id: uuid.UUID,
    *,
    next_slot: dt.datetime | None,
    slot: dt.datetime | None,
    job_id: uuid.UUID | None,
    error: str | None,
) -> None:
    """The schedule past its due slot: ``next_slot`` (None: no slot left, and the schedule
    is disabled), the slot made and its job (None: that slot made none), and why not."""
    await fetch_txn(
        conn,
        q("advance_schedule"),
        {"id": schedule_id, "next_slot": next_slot, "slot": slot, "job_id": job_id, "error": error},
    )


async def note_error_txn(conn: Conn, schedule_id: uuid.UUID, error: str) -> None:
    """A due slot left for the next sweep: why, on the row."""
    await fetch_txn(conn, q("note_schedule_error"), {"id": schedule_id, "error": error})
