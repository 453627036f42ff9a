"""Retention in the database: one batch of a state's oldest finished jobs deleted with
their rows in every other table, in one statement, and what a prune would delete now
(docs/explain/design.md#retention)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from app.store.pool import Database, q

# The tables a prune deletes from, in the order they are reported.
TABLES = (
    "jobs",
    "job_events",
    "job_output",
    "effects",
    "outbox",
    "callbacks",
    "job_messages",
    "published_state",
)


@dataclass(frozen=True, slots=True)
class Due:
    """A state's jobs past their retention now: ``due``, of which ``held`` are kept for
    now (an Idempotency-Key in its replay window, an unfinished parent or child)."""

    state: str
    due: int
    held: int
    oldest: dt.datetime | None


async def prune_batch(
    db: Database,
    *,
    state: str,
    keep_seconds: float,
    replay_window: float,
    dlq_keep: float,
    limit: int,
) -> dict[str, int]:
    """Delete up to ``limit`` of ``state``'s jobs finished more than ``keep_seconds``
    ago (and not held), with their rows; answers the rows deleted by table. Nothing
    while another prune runs (one at a time)."""
    params = {"state": state, "keep": keep_seconds, "replay_window": replay_window}
    row = await db.fetch_one(q("prune_jobs"), params | {"dlq_keep": dlq_keep, "limit": limit})
    assert row is not None  # one row of counts, always
    return {table: int(row[table]) for table in TABLES}


async def prunable(
    db: Database, keeps: dict[str, float], *, replay_window: float, dlq_keep: float
) -> list[Due]:
    """For each state in ``keeps`` (state -> seconds kept): what a prune would find."""
    rows = await db.fetch(
        q("prunable"),
        {
            "states": list(keeps),
            "keeps": list(keeps.values()),
            "replay_window": replay_window,
            "dlq_keep": dlq_keep,
        },
    )
    return [Due(str(r["state"]), int(r["due"]), int(r["held"]), r["oldest"]) for r in rows]
