"""Charts over time (migration 0027): the fold of the rows the jobs' triggers append into
chart_buckets, one window's rows at one width, and the prune of old buckets."""

from __future__ import annotations

import datetime as dt
from typing import Any

from app.store.pool import Database, q

WIDTHS = (60, 900, 3600)  # seconds: the hour's, the day's and the week's chart


async def fold(db: Database) -> int:
    """Fold the appended changes into every width (one folder at a time; a fold another
    one runs is skipped, not waited for). Answers the rows folded."""
    row = await db.fetch_one(q("fold_chart_deltas"))
    return int(row["folded"]) if row else 0


async def rows(
    db: Database, *, width: int, since: dt.datetime, tenant: str | None, kind: str | None
) -> list[dict[str, Any]]:
    """{at, kind, series, bucket, n} from ``since`` on, folded and not, at ``width``."""
    return await db.fetch(
        q("chart_rows"), {"width": width, "since": since, "tenant": tenant, "kind": kind}
    )


async def prune(db: Database, *, width: int, keep_seconds: int, limit: int) -> int:
    """Delete up to ``limit`` of the width's buckets older than ``keep_seconds``."""
    row = await db.fetch_one(
        q("prune_chart_buckets"), {"width": width, "keep": keep_seconds, "limit": limit}
    )
    return int(row["deleted"]) if row else 0
