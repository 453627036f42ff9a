"""Migrations applied to a database that already holds jobs (what an upgrade does), on a
real PostgreSQL: the schema up to 0002 with rows written as the earlier version wrote
them, then every later migration through the store's own runner."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from app.store import pool, sql
from tests.conftest import _url_for

pytestmark = pytest.mark.integration


@pytest.fixture
def old_database(pg_admin_url: str) -> Iterator[str]:
    """A database at migration 0002, as the earlier version left it."""
    name = f"tasklease_m_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _url_for(pg_admin_url, name)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE schema_migrations ("
                " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            for version, body in sql.migrations()[:2]:
                conn.execute(body)
                conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (version,))
        yield url
    finally:
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_an_upgrade_counts_past_runs_and_keeps_recent_redrives_in_the_budget(
    old_database: str,
) -> None:
    """Issue 13 item 1 (review): migration 0003 filled `runs` but not the redrive log, so
    a job a tool was looping got a fresh budget at the upgrade."""
    looped, fresh = uuid.uuid4(), uuid.uuid4()
    with psycopg.connect(old_database, autocommit=True) as conn:
        for job_id in (looped, fresh):
            conn.execute(
                "INSERT INTO jobs (id, kind, payload, state, max_attempts, timeout_seconds,"
                " request_hash) VALUES (%s, 'demo.noop', '{}', 'dead_lettered', 1, 60, 'h')",
                (job_id,),
            )
        events: list[tuple[Any, ...]] = [
            # Three starts, two redrives an hour ago and one two days ago.
            (looped, "leased", "running", "3 hours"),
            (looped, "dead_lettered", "queued", "2 days"),
            (looped, "leased", "running", "2 hours"),
            (looped, "dead_lettered", "queued", "1 hour"),
            (looped, "leased", "running", "50 minutes"),
            (looped, "dead_lettered", "queued", "40 minutes"),
        ]
        for job_id, from_state, to_state, ago in events:
            conn.execute(
                "INSERT INTO job_events (job_id, at, from_state, to_state, attempt)"
                " VALUES (%s, now() - %s::interval, %s, %s, 1)",
                (job_id, ago, from_state, to_state),
            )

    applied = asyncio.run(pool.migrate(old_database))
    assert applied == [version for version, _ in sql.migrations()[2:]]

    with psycopg.connect(old_database, row_factory=dict_row) as conn:
        rows = {
            r["id"]: r
            for r in conn.execute(
                "SELECT id, runs, redriven_at, redrives_within(redriven_at, 86400) AS recent"
                " FROM jobs"
            ).fetchall()
        }
    assert (rows[looped]["runs"], rows[looped]["recent"]) == (3, 2)
    assert (rows[fresh]["runs"], rows[fresh]["redriven_at"]) == (0, [])
