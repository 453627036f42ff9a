"""Streams: a job's output (progress, emitted data, a streamed answer's chunks), written
fenced by the lease token, and the ordered reads of transitions and output behind
``GET /v1/jobs/{id}/stream`` and ``GET /v1/stream``; ``listen`` follows the channel the
writes notify.

A position in a stream is a ``Position`` (tx, id): migration 0010 says why both.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import psycopg.sql
from psycopg.types.json import Jsonb

from app import errors
from app.store.pool import Database, q
from app.store.records import Row

CHANNEL = "tasklease_stream"


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """A place in a stream: after the row (tx, id). The start of everything is (0, 0)."""

    tx: int
    id: int

    def __str__(self) -> str:
        return f"{self.tx}-{self.id}"


START = Position(0, 0)


@dataclass(frozen=True, slots=True)
class OutputItem:
    """One thing a kind emitted, not yet written."""

    at: dt.datetime
    type: str  # progress | output | chunk
    data: Any
    key: str | None = None
    seq: int | None = None


@dataclass(frozen=True, slots=True)
class StreamEvent:
    position: Position
    job_id: uuid.UUID
    tenant: str
    kind: str
    at: dt.datetime
    attempt: int
    type: str  # transition | progress | output | chunk
    key: str | None
    seq: int | None
    data: Any

    @classmethod
    def from_row(cls, row: Row) -> StreamEvent:
        return cls(
            position=Position(int(str(row["tx"])), int(row["id"])),
            job_id=row["job_id"],
            tenant=row["tenant"],
            kind=row["kind"],
            at=row["at"],
            attempt=row["attempt"],
            type=row["type"],
            key=row["key"],
            seq=row["seq"],
            data=row["data"],
        )


@dataclass(frozen=True, slots=True)
class Tail:
    """A job's state and its last readable row (None: none yet, or not readable yet)."""

    state: str
    last: Position | None
    readable: bool


async def append(
    db: Database, job_id: uuid.UUID, token: uuid.UUID, items: Sequence[OutputItem]
) -> bool:
    """Write ``items`` in one statement if ``token`` still holds the running job's lease;
    False (nothing written) when it does not: a zombie's output is refused. Cancelled
    (nothing written) when the job's cancel was asked for: no output after a cancel."""
    if not items:
        return True
    row = await db.fetch_one(
        q("append_output"),
        {
            "id": job_id,
            "token": token,
            "ats": [i.at for i in items],
            "types": [i.type for i in items],
            "keys": [i.key for i in items],
            "seqs": [i.seq for i in items],
            "datas": [Jsonb(i.data) for i in items],
        },
    )
    if row and row["cancelled"]:
        raise errors.Cancelled()
    return bool(row and row["fenced"])


async def read_job(
    db: Database, job_id: uuid.UUID, after: Position, *, limit: int
) -> list[StreamEvent]:
    rows = await db.fetch(
        q("stream_job"), {"job": job_id, "tx": str(after.tx), "after": after.id, "limit": limit}
    )
    return [StreamEvent.from_row(r) for r in rows]


async def read_all(
    db: Database, tenant: str | None, after: Position, *, limit: int
) -> tuple[list[StreamEvent], Position]:
    """Every job's rows after ``after`` (``tenant``'s, or all tenants' for None), and
    where to read from next: past the last row, or, when fewer than ``limit`` came, up
    to the horizon they were read below (nothing of the tenant's is left below it)."""
    rows = await db.fetch(
        q("stream_tenant"),
        {"tenant": tenant, "tx": str(after.tx), "after": after.id, "limit": limit},
    )
    events = [StreamEvent.from_row(r) for r in rows if r["id"] is not None]
    last = events[-1].position if events else after
    if len(events) < limit and rows:
        last = max(last, Position(int(str(rows[0]["horizon"])), 0))
    return events, last


async def horizon(db: Database) -> Position:
    """Where a stream that starts now begins (nothing that commits later is before it)."""
    row = await db.fetch_one(q("stream_horizon"))
    assert row is not None
    return Position(int(str(row["tx"])), 0)


async def follow(db: Database, hub: uuid.UUID, seconds: float) -> None:
    """Writes to the streams wake listeners for the next ``seconds`` (migration 0031)."""
    await db.fetch(q("stream_hub_follow"), {"hub": hub, "seconds": seconds})


async def leave(db: Database, hub: uuid.UUID) -> None:
    """No more wake-ups on ``hub``'s behalf."""
    await db.fetch(q("stream_hub_leave"), {"hub": hub})


async def tail(db: Database, job_id: uuid.UUID) -> Tail | None:
    row = await db.fetch_one(q("stream_job_tail"), {"job": job_id})
    if row is None:
        return None
    last = None if row["last_id"] is None else Position(int(str(row["last_tx"])), row["last_id"])
    return Tail(state=str(row["state"]), last=last, readable=bool(row["readable"]))


async def output_of(
    db: Database, job_id: uuid.UUID, type_: str, key: str | None = None
) -> list[dict[str, Any]]:
    """The job's output rows of ``type_`` (and ``key``), in order, as dicts."""
    return await db.fetch(q("job_output"), {"job": job_id, "type": type_, "key": key})


# A LISTEN connection only reads, so a connection dropped without a word (a NAT's idle
# timeout, a failover) would look like a quiet channel for ever. TCP keepalives keep a
# NAT's mapping alive and let the kernel notice a dead peer; and every PING_SECONDS the
# connection is asked a SELECT 1, and taken for dead (StoreError: the caller reconnects)
# when no answer comes within PING_TIMEOUT_SECONDS, whatever the kernel thinks.
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 30, 10, 3  # s, s, probes
PING_SECONDS = 30.0
PING_TIMEOUT_SECONDS = 10.0


async def listen(
    url: str, ready: asyncio.Event | None = None, *, channel: str = CHANNEL
) -> AsyncIterator[str]:
    """The payloads notified on ``channel`` (the streams' by default; job ids), from a
    connection of its own, until the caller stops iterating; ``ready`` is set once the
    LISTEN took. Raises StoreError when the connection fails or stops answering (the
    caller reconnects and reads the tables to catch up)."""
    try:
        async with await psycopg.AsyncConnection.connect(
            url,
            autocommit=True,
            keepalives=1,
            keepalives_idle=KEEPALIVE_IDLE,
            keepalives_interval=KEEPALIVE_INTERVAL,
            keepalives_count=KEEPALIVE_COUNT,
        ) as conn:
            await conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
            if ready is not None:
                ready.set()
            while True:
                async for note in conn.notifies(timeout=PING_SECONDS):
                    yield note.payload
                try:
                    async with asyncio.timeout(PING_TIMEOUT_SECONDS):
                        await conn.execute("SELECT 1 AS ok")
                except TimeoutError:
                    raise errors.StoreError(
                        f"PostgreSQL ({channel} listener): no answer to a ping in "
                        f"{PING_TIMEOUT_SECONDS:g} s; the connection is taken for lost"
                    ) from None
    except psycopg.Error as exc:
        raise errors.StoreError(f"PostgreSQL ({channel} listener): {exc}") from exc


@dataclass(frozen=True, slots=True)
class Overview:
    counts: dict[str, int]
    oldest_queued_seconds: float | None


async def overview(db: Database, tenant: str | None) -> Overview:
    """Jobs by state (``tenant``'s, or all for None) and the oldest queued job's age."""
    rows = await db.fetch(q("overview"), {"tenant": tenant})
    counts = {str(r["state"]): int(r["n"]) for r in rows}
    oldest = next((r["oldest_age"] for r in rows if r["state"] == "queued"), None)
    return Overview(counts, None if oldest is None else float(oldest))
