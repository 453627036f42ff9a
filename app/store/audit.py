"""Read-only views of the whole store for the local stack and the chaos harness: what
the checker takes as its witnesses, and the counts a run displays. Plain rows out
(ids and enums as text), so the checker needs neither psycopg nor the store's types.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.store.pool import Database, q


async def waiting_job_ids(database: Database) -> list[Any]:
    """Jobs that need a message: used when a queue was created anew (the embedded default)."""
    return [r["id"] for r in await database.fetch(q("waiting_jobs"))]


async def counts_by_state(database: Database) -> dict[str, int]:
    rows = await database.fetch(
        "SELECT state::text AS state, count(*) AS n FROM jobs GROUP BY state"
    )
    return {r["state"]: int(r["n"]) for r in rows}


async def count_in_states(database: Database, ids: Sequence[str], states: Sequence[str]) -> int:
    """How many of the jobs ``ids`` are in one of ``states``."""
    row = await database.fetch_one(
        "SELECT count(*) AS n FROM jobs"
        " WHERE id = ANY(%(ids)s::uuid[]) AND state::text = ANY(%(states)s)",
        {"ids": list(ids), "states": list(states)},
    )
    return int(row["n"]) if row else 0


async def dead_letter_errors(database: Database) -> list[str | None]:
    """The last error of every dead-lettered job."""
    rows = await database.fetch("SELECT last_error FROM jobs WHERE state = 'dead_lettered'")
    return [r["last_error"] for r in rows]


async def transient_dead_letter_ids(database: Database) -> list[Any]:
    """Dead letters whose cause was not a permanent error: the ones a redrive may save."""
    rows = await database.fetch(
        "SELECT id FROM jobs WHERE state = 'dead_lettered'"
        " AND coalesce(last_error, '') NOT LIKE 'permanent:%%'"
    )
    return [r["id"] for r in rows]


async def witnesses(database: Database) -> dict[str, Any]:
    """Every job, event and effect, and the effect rows recorded twice: the checker's input."""
    jobs = await database.fetch(
        "SELECT id::text AS id, state::text AS state, attempt, max_attempts, payload, result,"
        " last_error, redrives FROM jobs"
    )
    events = await database.fetch(
        "SELECT job_id::text AS job_id, at, from_state::text AS from_state,"
        " to_state::text AS to_state, attempt, worker, detail FROM job_events ORDER BY job_id, id"
    )
    effects = await database.fetch(
        "SELECT job_id::text AS job_id, key, attempt, recorded_at FROM effects"
    )
    dup_rows = await database.fetch(
        "SELECT job_id, key FROM effects GROUP BY job_id, key HAVING count(*) > 1"
    )
    return {
        "jobs": jobs,
        "events": events,
        "effects": effects,
        "duplicated_effect_rows": len(dup_rows),
    }
