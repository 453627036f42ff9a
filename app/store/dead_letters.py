"""Dead-lettered jobs: the operator's list, the redrive's reset, and the sweeper's
reconciliation of messages the queue's redrive policy moved on its own."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from app.store import endings
from app.store.leases import RedriveBudget
from app.store.pool import Conn, Database, fetch_txn, q
from app.store.records import Job, Redriven


async def listing(
    db: Database,
    *,
    tenant: str | None,
    kind: str | None,
    job_ids: Sequence[uuid.UUID] | None,
    limit: int,
) -> list[Job]:
    """Dead-lettered jobs, oldest dead letter first; None filters nothing."""
    rows = await db.fetch(
        q("dead_letters"),
        {
            "tenant": tenant,
            "kind": kind,
            "ids": list(job_ids) if job_ids else None,
            "limit": limit,
        },
    )
    return [Job.from_row(row) for row in rows]


async def reset(
    db: Database,
    job_ids: Sequence[uuid.UUID],
    *,
    with_outbox: bool,
    detail: str,
    redrive: RedriveBudget,
    force: bool = False,
) -> list[Redriven]:
    """Dead-lettered jobs back to queued with a fresh budget and a new generation; with
    ``with_outbox`` each also gets an outbox row to send. A job past its redrive budget
    comes back ``refused`` and unchanged, unless ``force``."""
    rows = await db.fetch(
        q("redrive_reset"),
        _reset_params(job_ids, with_outbox, detail, redrive, force),
    )
    return [Redriven.from_row(row) for row in rows]


async def reset_txn(
    conn: Conn,
    job_ids: Sequence[uuid.UUID],
    *,
    with_outbox: bool,
    detail: str,
    redrive: RedriveBudget,
) -> list[Redriven]:
    """As ``reset`` (never forced), inside the caller's transaction (a bulk redrive's
    batch, whose cursor commits with it)."""
    rows = await fetch_txn(
        conn, q("redrive_reset"), _reset_params(job_ids, with_outbox, detail, redrive, False)
    )
    return [Redriven.from_row(row) for row in rows]


def _reset_params(
    job_ids: Sequence[uuid.UUID],
    with_outbox: bool,
    detail: str,
    redrive: RedriveBudget,
    force: bool,
) -> dict[str, object]:
    return {
        "ids": list(job_ids),
        "with_outbox": with_outbox,
        "detail": detail,
        "redrive_budget": redrive.budget,
        "redrive_window": redrive.window_seconds,
        "force": force,
    }


async def reconcile_moved(db: Database, job_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    """Jobs whose message the redrive policy moved to the DLQ: dead-lettered now, by the
    sweeper. Returns the ones that changed (a live lease or a final state is left)."""
    rows = await db.fetch(q("reconcile_moved"), {"ids": list(job_ids)})
    endings.count(rows)
    return [row["id"] for row in rows]
