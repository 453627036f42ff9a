"""A process that was running when a migration changed a table keeps working
(docs/howto/upgrade.md): a statement prepared before the migration that reads the table
with `*` is refused by PostgreSQL ("cached plan must not change result type") on every
connection that prepared it, for as long as it lives; the store renews the pool's
connections and runs the statement again, once."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from app import store
from app.store import pool
from app.store.jobs import Limits, NewRow

pytestmark = pytest.mark.integration

READ = "SELECT * FROM tenant_limits ORDER BY tenant"
LIMITS = Limits(rate_per_second=100.0, burst=100, max_in_flight=100)


async def read_in_transaction(conn: pool.Conn) -> list[dict[str, Any]]:
    return await pool.fetch_txn(conn, READ)


@pytest.mark.asyncio
async def test_statements_prepared_before_a_column_was_added_run_again_on_fresh_connections(
    database_url: str, sql: Any
) -> None:
    sql.execute("INSERT INTO tenant_limits (tenant, burst) VALUES ('acme', 5)")
    async with store.connect(database_url, min_size=2, max_size=2) as db:
        # Given both connections of the pool prepared the statements (two at once)...
        async with db.connection() as one, db.connection() as two:
            for conn in (one, two):
                await pool.fetch_txn(conn, READ)
        before = await db.fetch(READ)
        assert [r["burst"] for r in before] == [5] and "note" not in before[0]
        assert [r["burst"] for r in await db.transact(read_in_transaction)] == [5]

        # ...when a migration (another session) adds a column to the table they read,
        sql.execute("ALTER TABLE tenant_limits ADD COLUMN note text DEFAULT 'new'")

        # then each still answers, with the new column, through fetch and transact alike.
        assert [(r["burst"], r["note"]) for r in await db.fetch(READ)] == [(5, "new")]
        again = await db.transact(read_in_transaction)
        assert [(r["burst"], r["note"]) for r in again] == [(5, "new")]
        assert [r["note"] for r in await db.fetch(READ)] == ["new"]


@pytest.mark.asyncio
async def test_another_feature_not_supported_error_is_not_taken_for_a_stale_plan(
    database_url: str,
) -> None:
    async with store.connect(database_url, min_size=1, max_size=1) as db:
        # The same SQLSTATE, about the statement itself: raised as it is, never run again.
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="not allowed with aggregate"):
            await db.fetch("SELECT count(*) FROM tenant_limits FOR UPDATE")
        assert await db.fetch("SELECT 1 AS ok") == [{"ok": 1}]


@pytest.mark.asyncio
async def test_a_submission_after_a_column_was_added_to_jobs_is_written(
    database_url: str, sql: Any
) -> None:
    """What 0.1.0's API answered 500 to after migration 0024 (its jobs.insert prepared
    before it): this release's insert runs on a renewed connection."""

    async def submit(db: store.Database) -> uuid.UUID:
        row = NewRow(uuid.uuid4(), "demo.noop", {}, 3, 60, None, "hash")
        written = await store.jobs.insert(db, [row], tenant="acme", limits=LIMITS, key_id=None)
        assert [j.id for j in written.jobs] == [row.id]
        return row.id

    async with store.connect(database_url, min_size=1, max_size=1) as db:
        await submit(db)
        sql.execute("ALTER TABLE jobs ADD COLUMN added_later text")
        after = await submit(db)
    assert sql.execute("SELECT state FROM jobs WHERE id = %s", (after,)).fetchone()["state"] == (
        "queued"
    )
