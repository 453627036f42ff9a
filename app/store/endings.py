"""Every job's end counted once, where it is written (tasklease_jobs_completed_total).

A job ends (succeeded, dead_lettered, cancelled) by one of the store's statements: a
worker's finish or batch of successes, a cancel (the API's, the CLI's, a worker's of a job
asked to stop before it ran or as it suspended), the sweeper's dead-lettering of what the
redrive policy moved and its cancelling of orphans. Each such statement returns the rows it
ended (``kind``, ``created_at``, ``to_state``) and ``cascade`` where a cancel may have
cancelled the job's children too: the database's trigger (jobs_cancel_children) does that
in the same transaction, and ``below`` reads them back before it commits. Those functions
hand their rows to ``count`` after the commit, the one place that counts an end. A
statement whose lease was lost (fenced) returns no row, so nothing is counted twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, LiteralString

from app import metrics
from app.states import FINAL_FOR_NOW
from app.store.pool import Conn, Database, fetch_txn, q

FINAL = frozenset(s.value for s in FINAL_FOR_NOW)


async def below(conn: Conn, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Inside the ending statement's transaction: the descendants of ``rows`` marked
    ``cascade`` that the cancelling trigger cancelled."""
    roots = [row["id"] for row in rows if row.get("cascade")]
    return await fetch_txn(conn, q("cancelled_below"), {"ids": roots}) if roots else []


async def cancelling(
    db: Database, query: LiteralString, params: dict[str, Any]
) -> list[dict[str, Any]]:
    """Run a cancelling statement and read back what its trigger cancelled, in one
    transaction; count every end after the commit. Returns the statement's own rows."""

    async def work(conn: Conn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        rows = await fetch_txn(conn, query, params)
        return rows, await below(conn, rows)

    rows, cascaded = await db.transact(work)
    count([*rows, *cascaded])
    return rows


def count(rows: Iterable[dict[str, Any]]) -> None:
    """Count each row that is a job's end, once by job id."""
    seen: set[uuid.UUID] = set()
    for row in rows:
        if row["to_state"] in FINAL and row["id"] not in seen:
            seen.add(row["id"])
            metrics.ended(row["kind"], row["to_state"], row["created_at"])
