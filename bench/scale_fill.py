"""The scale phase's history (bench/scale_fill.sql): run step by step, then VACUUM
(ANALYZE), as autovacuum would have done on a database a year old. Also the test of the
query plans fills its database with it (fewer jobs)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

FILL_SQL = Path(__file__).with_name("scale_fill.sql")
_STEP = re.compile(r"^-- step: (\w+)\s*$", re.MULTILINE)
TABLES = ("jobs", "job_events", "effects", "outbox")


def steps() -> list[tuple[str, str]]:
    parts = _STEP.split(FILL_SQL.read_text())
    return list(zip(parts[1::2], (p.strip() for p in parts[2::2]), strict=True))


def fill(
    url: str,
    jobs: int,
    tenant: str,
    on_step: Callable[[str, float], None] = lambda name, s: None,
    *,
    first: int = 1,
    dead_every: int = 1000,
    cancel_every: int = 20,
    waiting: int = 0,
) -> dict[str, float]:
    """Fill the database at ``url`` with ``jobs`` historical jobs numbered from ``first``
    (a second fill adds to a first; ``tenant`` has half of them); the seconds each step
    took. 1 in ``dead_every`` is dead-lettered, 1 in ``cancel_every`` cancelled, the last
    ``waiting`` still waiting. Migration 0018's statement triggers count them in
    job_counts' deltas."""
    took: dict[str, float] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT set_config('fill.jobs', %s, false)", (str(jobs),))
        conn.execute("SELECT set_config('fill.tenant', %s, false)", (tenant,))
        for name, value in (
            ("first", first),
            ("dead_every", dead_every),
            ("cancel_every", cancel_every),
            ("waiting", waiting),
        ):
            conn.execute("SELECT set_config(%s, %s, false)", (f"fill.{name}", str(value)))
        for name, body in [*steps(), ("vacuum_analyze", "")]:
            t = time.monotonic()
            if body:
                with conn.transaction():
                    conn.execute(body.encode())
            else:
                for table in TABLES:
                    conn.execute(f"VACUUM (ANALYZE) {table}".encode())
            took[name] = round(time.monotonic() - t, 1)
            on_step(name, took[name])
    return took
