"""Waits: suspending a job, waking it, its callbacks and its child jobs.

Every write a lease holder makes here is fenced by its lease token; the writes that
wake a job (an answer, a child's finish, a condition met while suspending) move it to
``queued`` with an outbox row in the same transaction (SQL function ``wake_job``).
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from app.priorities import Route
from app.store import endings, jobs
from app.store.pool import Database, fetch_txn, q, retried
from app.store.records import Job, OutboxRow, Row


@dataclass(frozen=True)
class Suspended:
    """How a suspension ended: ``changed`` False means the lease had moved on."""

    changed: bool
    woken: bool = False  # the condition was met meanwhile: queued again at once
    send_now: bool = False  # a timer due within the delay cap: send its wake-up now
    delay: float = 0.0  # seconds until the wake-up is due, by the database's clock
    cancelled: bool = False  # a cancel asked for while it ran: cancelled, not waiting
    has_parked: bool = False  # its tenant has parked jobs: the freed lease may release one


@retried
async def suspend(
    db: Database,
    job_id: uuid.UUID,
    token: uuid.UUID,
    *,
    wait_kind: str,
    wait_key: str,
    wake_at: dt.datetime | None,
    rule: dict[str, Any] | None,
    cap: float,
    detail: str,
) -> Suspended:
    """running -> waiting, fenced; in the same transaction, woken at once when an answer
    or a child's finish met the condition before the row was locked. A cancel asked for
    while it ran cancels it instead: that end counted (store/endings.py) once committed."""
    ended: list[dict[str, Any]] | None = None  # set when a cancel asked for cancelled it
    async with db.transaction() as conn:
        rows = await fetch_txn(
            conn,
            q("suspend"),
            {
                "id": job_id,
                "token": token,
                "wait_kind": wait_kind,
                "wait_key": wait_key,
                "wake_at": wake_at,
                "rule": Jsonb(rule) if rule is not None else None,
                "cap": cap,
                "detail": detail,
            },
        )
        if not rows:
            return Suspended(changed=False)
        if rows[0]["cancel_requested"]:
            # Cancelled while it ran, before its heartbeat saw it: a job waiting with a
            # cancel asked for would never be woken (nor claimed) again.
            ended = await jobs.cancel_waiting_txn(conn, job_id, detail="cancelled while running")
        else:
            woken = await fetch_txn(conn, q("wake_if_met"), {"id": job_id, "why": detail})
    if ended is not None:
        endings.count(ended)
        return Suspended(changed=True, cancelled=True, has_parked=rows[0]["has_parked"])
    return Suspended(
        changed=True,
        woken=bool(woken and woken[0]["woken"]),
        send_now=rows[0]["send_now"],
        delay=float(rows[0]["delay"] or 0.0),
        has_parked=rows[0]["has_parked"],
    )


async def wake_if_answered(db: Database, job_id: uuid.UUID, *, why: str) -> bool:
    """Wake a waiting job whose answer came (or whose gather is decided); whether it woke."""
    rows = await db.fetch(q("wake_if_met"), {"id": job_id, "why": why})
    return bool(rows and rows[0]["woken"])


async def unsent_of(db: Database, job_id: uuid.UUID) -> list[OutboxRow]:
    """The job's newest outbox row not sent yet (the wake-up a committed write made, to
    send now), as a list of none or one. Older unsent rows are left to the relay: one may
    be sent already and marked a moment later by the API, and a job needs one message."""
    return [OutboxRow.from_row(r) for r in await db.fetch(q("unsent_of_job"), {"id": job_id})]


async def due_wakeups(
    db: Database, *, cap: float, grace: float, limit: int
) -> list[tuple[Route, float]]:
    """Marks and returns (the job's route, delay) for each waiting job whose wake-up must
    be sent now: due within ``cap`` seconds and none sent, or overdue by ``grace`` and lost."""
    rows = await db.fetch(q("due_wakeups"), {"cap": cap, "grace": grace, "limit": limit})
    return [
        (Route.of(row["id"], row["tenant"], row["priority"]), float(row["delay"])) for row in rows
    ]


async def early_wakeup(db: Database, job_id: uuid.UUID, *, cap: float) -> float | None:
    """A wake-up that came early: the delay to re-send it with (0 when it is due by now:
    it raced its due time), or None when the sweeper will send it (further away than the
    cap) or the job no longer waits on a time."""
    row = await db.fetch_one(q("early_wakeup"), {"id": job_id, "cap": cap})
    if row is None or not row["send_now"]:
        return None
    return float(row["delay"])


# --- callbacks -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Callback:
    token_hash: bytes
    job_id: uuid.UUID
    key: str
    state: str
    timeout_seconds: int
    deadline: dt.datetime
    result: Any
    error: str | None
    heartbeats: int
    created_at: dt.datetime
    answered_at: dt.datetime | None
    details: Any  # what the callback asks, for whoever answers (JSON), or None

    @classmethod
    def from_row(cls, row: Row) -> Callback:
        return cls(**{name: row[name] for name in cls.__slots__})


async def open_callback(
    db: Database,
    job_id: uuid.UUID,
    token: uuid.UUID,
    *,
    key: str,
    token_hash: bytes,
    timeout_seconds: int,
    details: Any = None,
) -> tuple[dt.datetime, bytes] | None:
    """Create the job's callback ``key`` once (fenced), with its ``details`` (JSON, or
    None); when it was opened and the hash it was opened with, or None when the lease
    moved on and nothing was created."""
    row = await db.fetch_one(
        q("open_callback"),
        {
            "id": job_id,
            "token": token,
            "key": key,
            "token_hash": token_hash,
            "timeout": timeout_seconds,
            "details": Jsonb(details) if details is not None else None,
        },
    )
    return (row["created_at"], bytes(row["token_hash"])) if row else None


async def callback_of(db: Database, job_id: uuid.UUID, key: str) -> Callback | None:
    row = await db.fetch_one(q("callback_of_job"), {"id": job_id, "key": key})
    return Callback.from_row(row) if row else None


async def callbacks_of(db: Database, job_id: uuid.UUID, *, limit: int = 100) -> list[Callback]:
    """A job's callbacks, oldest first."""
    rows = await db.fetch(q("callbacks_of_job"), {"id": job_id, "limit": limit})
    return [Callback.from_row(row) for row in rows]


async def time_out_callback(db: Database, job_id: uuid.UUID, key: str) -> None:
    await db.fetch(q("time_out_callback"), {"id": job_id, "key": key})


@dataclass(frozen=True)
class Answer:
    job_id: uuid.UUID
    key: str
    woken: bool


@retried
async def answer_callback(
    db: Database, token_hash: bytes, *, state: str, result: Any, error: str | None
) -> Answer | None:
    """The first answer to a pending callback before its deadline; None when there is
    none such (unknown, answered already or expired: ``callback_by_token`` tells)."""
    async with db.transaction() as conn:
        await fetch_txn(conn, q("lock_job_of_callback"), {"token_hash": token_hash})
        rows = await fetch_txn(
            conn,
            q("answer_callback"),
            {
                "token_hash": token_hash,
                "state": state,
                "result": Jsonb(result) if state == "succeeded" else None,
                "error": error,
            },
        )
    row = rows[0] if rows else None
    if row is None:
        return None
    return Answer(job_id=row["job_id"], key=row["key"], woken=bool(row["woken"]))


async def heartbeat_callback(db: Database, token_hash: bytes) -> dt.datetime | None:
    """Push a pending callback's deadline by its timeout; the new deadline, or None."""
    row = await db.fetch_one(q("heartbeat_callback"), {"token_hash": token_hash})
    return row["deadline"] if row else None


async def callback_by_token(db: Database, token_hash: bytes) -> tuple[Callback, str] | None:
    """The callback with this token hash and its job's tenant."""
    row = await db.fetch_one(q("callback_by_token"), {"token_hash": token_hash})
    return (Callback.from_row(row), str(row["tenant"])) if row else None


# --- children --------------------------------------------------------------------


@dataclass(frozen=True)
class Spawned:
    child_id: uuid.UUID
    # Set when this call made the child with a message to send (not parked).
    outbox: OutboxRow | None


async def spawn_child(
    db: Database,
    parent_id: uuid.UUID,
    token: uuid.UUID,
    *,
    key: str,
    row: jobs.NewRow,
    limits: jobs.Limits,
    trace_context: str | None = None,
) -> Spawned | None:
    """Create the child (``row``, as the submit path validated it) once per (parent,
    key), fenced by the parent's lease; None when the lease moved on and no child exists
    under that key. The child carries its key and its limits per key; past its tenant's
    window on the queue (``limits``' defaults unless tenant_limits says otherwise) it is
    written parked, with no message to send. ``trace_context``: the traceparent the
    child's trace continues from (the parent's spawning span)."""
    rows = await db.fetch(
        q("spawn_child"),
        {
            "id": parent_id,
            "token": token,
            "key": key,
            "child": row.id,
            "kind": row.kind,
            "payload": Jsonb(row.payload),
            "max_attempts": row.max_attempts,
            "timeout": row.timeout_seconds,
            "request_hash": row.request_hash,
            "trace_context": trace_context,
            "flow_key": row.flow_key,
            "key_concurrency": row.key_concurrency,
            "key_rate": row.key_rate,
            "key_rate_seconds": row.key_rate_seconds,
            "max_running": limits.max_running,
            "window_per_slot": limits.window_per_slot,
        },
    )
    made = [r for r in rows if r["made"]]
    if made:
        if made[0]["id"] is None:  # parked: a lease's end releases it
            return Spawned(made[0]["job_id"], None)
        box = OutboxRow(
            id=made[0]["id"],
            job_id=made[0]["job_id"],
            trace_context=trace_context,
            tenant=made[0]["tenant"],
            priority=made[0]["priority"],
        )
        return Spawned(made[0]["job_id"], box)
    if rows:
        return Spawned(rows[0]["job_id"], None)
    return None


@dataclass(frozen=True)
class ChildRow:
    id: uuid.UUID
    parent_id: uuid.UUID | None
    state: str
    result: Any
    last_error: str | None


async def children_states(db: Database, ids: list[uuid.UUID]) -> list[ChildRow]:
    rows = await db.fetch(q("children_states"), {"ids": ids})
    return [
        ChildRow(r["id"], r["parent_id"], str(r["state"]), r["result"], r["last_error"])
        for r in rows
    ]


async def children_of(db: Database, job_id: uuid.UUID, *, limit: int = 100) -> list[Job]:
    rows = await db.fetch(q("children_of"), {"id": job_id, "limit": limit})
    return [Job.from_row(row) for row in rows]


async def count_children(db: Database, job_id: uuid.UUID) -> int:
    row = await db.fetch_one(q("count_children"), {"id": job_id})
    return int(row["n"]) if row else 0


# --- the sweeper's backstops -------------------------------------------------------


async def cancel_orphans(db: Database, *, limit: int) -> list[uuid.UUID]:
    """Cancel children left unfinished under a cancelled parent (those under a live lease
    are asked to stop); the ends counted, with what the cancels cancelled below them."""
    return [
        row["id"] for row in await endings.cancelling(db, q("cancel_orphans"), {"limit": limit})
    ]


async def wake_answered(db: Database, *, grace: float, limit: int) -> list[uuid.UUID]:
    """Wake waiting jobs whose answer came but which still wait past ``grace``."""
    rows = await db.fetch(q("stuck_waits"), {"grace": grace, "limit": limit})
    return [row["id"] for row in rows if row["woken"]]
