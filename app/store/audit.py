"""Read-only views of the whole store for the local stack and the chaos harness: what
the checker takes as its witnesses, and the counts a run displays. Plain rows out
(ids and enums as text), so the checker needs neither psycopg nor the store's types.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.store.pool import Database, q


async def counts_by_state(database: Database) -> dict[str, int]:
    rows = await database.fetch(q("audit_counts_by_state"))
    return {r["state"]: int(r["n"]) for r in rows}


async def count_in_states(database: Database, ids: Sequence[str], states: Sequence[str]) -> int:
    """How many of the jobs ``ids`` are in one of ``states``."""
    row = await database.fetch_one(
        q("audit_count_in_states"), {"ids": list(ids), "states": list(states)}
    )
    return int(row["n"]) if row else 0


async def count_unfinished(database: Database, final: Sequence[str]) -> int:
    """How many jobs (submitted or spawned) are in none of the ``final`` states."""
    row = await database.fetch_one(q("audit_count_unfinished"), {"states": list(final)})
    return int(row["n"]) if row else 0


async def started_on(database: Database, kind: str, version: str) -> int:
    """How many unfinished jobs of ``kind`` started on its ``version``."""
    row = await database.fetch_one(q("audit_started_on"), {"kind": kind, "version": version})
    return int(row["n"]) if row else 0


async def dead_letter_errors(database: Database) -> list[str | None]:
    """The last error of every dead-lettered job."""
    return [r["last_error"] for r in await database.fetch(q("audit_dead_letter_errors"))]


async def transient_dead_letter_ids(database: Database) -> list[Any]:
    """Dead letters whose cause was not a permanent error: the ones a redrive may save."""
    return [r["id"] for r in await database.fetch(q("audit_transient_dead_letters"))]


async def witnesses(database: Database) -> dict[str, Any]:
    """Every job, event, effect, streamed chunk and callback, the effect rows recorded twice, and the
    database's clock when they were read: the checker's input."""
    now = await database.fetch_one(q("audit_now"))
    return {
        "now": now["now"] if now else None,
        "jobs": await database.fetch(q("audit_jobs")),
        "callbacks": await database.fetch(q("audit_callbacks")),
        "events": await database.fetch(q("audit_events")),
        "effects": await database.fetch(q("audit_effects")),
        "chunks": await database.fetch(q("audit_chunks")),
        "duplicated_effect_rows": len(await database.fetch(q("audit_duplicated_effects"))),
    }


async def waiting_on_carrier(database: Database) -> list[str]:
    """The jobs that need a message on the carrier: queued, retrying or stalled (the
    sweeper re-sends a lost one), or leased or running (the lease holds it); neither
    parked nor asked to cancel."""
    return [r["id"] for r in await database.fetch(q("audit_waiting_on_carrier"))]


# The chaos run's history: finished jobs from 40 days ago that its sweeper prunes
# while the faults run (they are left out of the witnesses: the checker's jobs are the
# run's own).
HISTORY_TENANT = "chaos-history"


async def seed_history(database: Database, n: int) -> int:
    """Write ``n`` finished jobs of 40 days ago with their rows; answers how many."""
    row = await database.fetch_one(q("audit_seed_history"), {"n": n})
    return int(row["n"]) if row else 0


async def history(database: Database) -> tuple[int, int]:
    """(history jobs left, of which partial: some of their rows gone, not all)."""
    row = await database.fetch_one(q("audit_history"))
    return (int(row["left"]), int(row["partial"])) if row else (0, 0)


async def counts_mismatch(database: Database) -> list[dict[str, Any]]:
    """Where the maintained counts by state differ from a scan of jobs (none, always)."""
    return await database.fetch(q("audit_counts_mismatch"))
