"""The outbox: messages written with their job, sent after the commit, relayed when not."""

from __future__ import annotations

from collections.abc import Sequence

from app.store.pool import Conn, Database, fetch_txn, q
from app.store.records import OutboxRow


async def record_sends(
    db: Database, *, sent: Sequence[int], failed: Sequence[int], error: str
) -> None:
    """Mark the sent rows sent; count a failed attempt, with its error, on the others."""
    if sent:
        await db.fetch(q("mark_outbox_sent"), {"ids": list(sent)})
    if failed:
        await db.fetch(q("note_outbox_failure"), {"ids": list(failed), "error": error})


async def record_sends_txn(
    conn: Conn, *, sent: Sequence[int], failed: Sequence[int], error: str
) -> None:
    """As record_sends, inside the caller's transaction (the relay holds the rows' locks)."""
    if sent:
        await fetch_txn(conn, q("mark_outbox_sent"), {"ids": list(sent)})
    if failed:
        await fetch_txn(conn, q("note_outbox_failure"), {"ids": list(failed), "error": error})


async def take_unsent_txn(conn: Conn, *, grace: float, limit: int) -> list[OutboxRow]:
    """Rows older than ``grace`` seconds and still unsent, locked for the caller's
    transaction; SKIP LOCKED lets several relays share the work."""
    rows = await fetch_txn(conn, q("take_unsent_outbox"), {"grace": grace, "limit": limit})
    return [OutboxRow.from_row(row) for row in rows]
