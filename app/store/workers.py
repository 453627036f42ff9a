"""Workers in the database (migration 0026): a process's registration, heartbeat and clean
stop; a Lambda environment's invocations; the list GET /v1/workers reads and the prune
of rows past their retention (docs/explain/design.md#workers)."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass

from app.store.pool import Database, q


@dataclass(frozen=True, slots=True)
class Identity:
    """Who writes the row: fixed for the life of the process (or the environment)."""

    id: str
    name: str
    host: str
    pid: int
    carrier: str
    version: str


@dataclass(frozen=True, slots=True)
class WorkerRow:
    id: str
    name: str
    runtime: str  # process or lambda
    host: str
    pid: int
    carrier: str
    version: str
    started_at: dt.datetime
    last_seen: dt.datetime
    running: int
    invocations: int
    messages: int
    stopped_at: dt.datetime | None
    status: str  # alive, gone, stopped (a process); alive, idle (a Lambda environment)
    seen_ago: float  # seconds since last_seen, by the database's clock


async def beat(db: Database, me: Identity, *, running: int) -> None:
    """Register (the first time) or heartbeat: one UPSERT."""
    await db.fetch(q("worker_beat"), {**asdict(me), "running": running})


async def stopped(db: Database, worker_id: str) -> None:
    """A clean stop."""
    await db.fetch(q("worker_stopped"), {"id": worker_id})


async def lambda_invoked(db: Database, me: Identity, *, messages: int) -> None:
    """One invocation of a Lambda environment, carrying ``messages`` records."""
    await db.fetch(q("lambda_invoked"), {**asdict(me), "messages": messages})


async def listing(db: Database, *, gone_seconds: float, limit: int) -> list[WorkerRow]:
    """The most recently seen first, each with its status against ``gone_seconds``."""
    rows = await db.fetch(q("list_workers"), {"gone": gone_seconds, "limit": limit})
    return [WorkerRow(**r) for r in rows]


async def prune(db: Database, *, keep_seconds: float, limit: int) -> int:
    """Delete up to ``limit`` rows not seen for ``keep_seconds``; answers how many."""
    return len(await db.fetch(q("prune_workers"), {"keep": keep_seconds, "limit": limit}))
