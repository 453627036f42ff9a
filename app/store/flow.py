"""Flow control by key at submission (app/services/flow.py): the keys' locks, their open
jobs, and the note on a running job a newer one replaces."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from app.store.pool import Conn, fetch_txn, q
from app.store.records import Job


async def lock_keys(conn: Conn, tenant: str, keys: Sequence[tuple[str, str]]) -> None:
    """Lock these (kind, key) of the tenant until the caller's transaction ends."""
    await fetch_txn(
        conn,
        q("lock_flow_keys"),
        {"tenant": tenant, "kinds": [k for k, _ in keys], "keys": [key for _, key in keys]},
    )


async def open_jobs(conn: Conn, tenant: str, keys: Sequence[tuple[str, str]]) -> list[Job]:
    """The jobs of these (kind, key) not finished, oldest first."""
    rows = await fetch_txn(
        conn,
        q("open_on_keys"),
        {"tenant": tenant, "kinds": [k for k, _ in keys], "keys": [key for _, key in keys]},
    )
    return [Job.from_row(row) for row in rows]


async def used_idempotency_keys(conn: Conn, tenant: str, keys: Sequence[str]) -> set[str]:
    """Which of these Idempotency-Keys the tenant used already (a replay's)."""
    if not keys:
        return set()
    rows = await fetch_txn(
        conn, q("used_idempotency_keys"), {"tenant": tenant, "idempotency_keys": list(keys)}
    )
    return {row["idempotency_key"] for row in rows}


async def note_cancel_asked(conn: Conn, job_id: uuid.UUID, detail: str) -> None:
    await fetch_txn(conn, q("note_cancel_asked"), {"id": job_id, "detail": detail})
