"""The figures ``GET /metrics`` reads at scrape time: one statement across every tenant,
from the counts migration 0018 maintains; and the fold that keeps those cheap."""

from __future__ import annotations

from dataclasses import dataclass

from app.store.pool import Database, q


@dataclass(frozen=True, slots=True)
class JobGauges:
    counts: dict[tuple[str, str], int]  # (state, kind) -> jobs
    oldest_queued_seconds: float | None  # None: no job is queued


async def jobs(db: Database) -> JobGauges:
    rows = await db.fetch(q("gauges_jobs_by_state_and_kind"))
    counts = {(str(r["state"]), str(r["kind"])): int(r["n"]) for r in rows}
    queued = [
        float(r["oldest_age"])
        for r in rows
        if r["state"] == "queued" and r["oldest_age"] is not None
    ]
    return JobGauges(counts, max(queued) if queued else None)


async def fold(db: Database) -> int:
    """Fold the appended count changes into the totals (one folder at a time; a fold
    another one runs is skipped, not waited for). Answers the rows folded."""
    row = await db.fetch_one(q("fold_job_counts"))
    return int(row["folded"]) if row else 0


async def by_kind(db: Database, tenant: str | None) -> dict[str, dict[str, int]]:
    """Jobs by kind, then state (``tenant``'s, or every tenant's for None), from the
    maintained counts: only the states a kind has jobs in."""
    rows = await db.fetch(q("counts_by_kind"), {"tenant": tenant})
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        out.setdefault(str(r["kind"]), {})[str(r["state"])] = int(r["n"])
    return out
