"""Migrations applied while jobs are submitted and claimed (docs/howto/migrations.md): every
migration from FIRST_ONLINE on, each in turn, under a load whose sessions wait at most
lock_timeout = 1 s for a lock (a statement blocked longer fails); a batched backfill under
that load; and the runner giving up its place in the lock queue when the load holds a lock,
then trying again."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Iterator
from typing import LiteralString

import psycopg
import pytest

from app import errors
from app.store import migrations, sql
from tests.conftest import wait_for
from tests.migrating import FIRST_ONLINE, before, database_at, seed_jobs, versions

pytestmark = pytest.mark.integration

# The bound: a statement of the load that waits longer than this for a lock fails.
LOAD_LOCK_TIMEOUT = "1s"

SUBMIT: LiteralString = (
    "INSERT INTO jobs (id, kind, payload, max_attempts, timeout_seconds, request_hash)"
    " VALUES (gen_random_uuid(), 'demo.noop', '{\"load\": true}', 1, 60, 'h')"
)
CLAIM: LiteralString = (
    "UPDATE jobs SET state = 'leased', attempt = attempt + 1, lease_owner = 'load',"
    " lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute',"
    " updated_at = now()"
    " WHERE id = (SELECT id FROM jobs WHERE state = 'queued' LIMIT 1 FOR UPDATE SKIP LOCKED)"
)


class Load:
    """Sessions submitting and claiming jobs in a loop, each statement its own transaction,
    until stopped; counts the statements done and keeps every failure."""

    def __init__(self, url: str, statements: tuple[LiteralString, ...]) -> None:
        self.url = url
        self.done = 0
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(s,)) for s in statements]

    def _run(self, statement: LiteralString) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"SET lock_timeout = '{LOAD_LOCK_TIMEOUT}'")
            while not self._stop.is_set():
                try:
                    conn.execute(statement)
                except psycopg.Error as exc:
                    with self._lock:
                        self.failures.append(f"{statement[:40]}...: {exc}")
                    continue
                with self._lock:
                    self.done += 1

    def goes_on(self, what: str) -> None:
        """Wait until the load has done 20 more statements."""
        mark = self.done
        wait_for(lambda: self.done >= mark + 20, what=f"the load to go on {what}")

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()


@pytest.fixture
def database(pg_admin_url: str) -> Iterator[str]:
    """A database just before FIRST_ONLINE, with jobs to index."""
    with database_at(pg_admin_url, before(FIRST_ONLINE)) as url:
        seed_jobs(url, 5000)
        yield url


def test_each_migration_from_the_first_online_one_applies_under_load(database: str) -> None:
    # Every migration from FIRST_ONLINE on, a new one included as soon as it is written.
    every = versions()
    pending = every[every.index(FIRST_ONLINE) :]
    with Load(database, (SUBMIT, SUBMIT, CLAIM, CLAIM)) as load:
        load.goes_on("before the migrations")
        for version in pending:
            assert asyncio.run(migrations.migrate(database, upto=version)) == [version]
            load.goes_on(f"after {version}")
    assert load.failures == [], "a statement of the load waited past the bound or failed"
    with psycopg.connect(database) as conn:
        row = conn.execute("SELECT bool_and(indisvalid) FROM pg_index").fetchone()
    assert row == (True,)


def test_two_runners_at_once_take_turns_and_apply_each_migration_once(database: str) -> None:
    # Two cold starts at once: one applies the pending migrations, the other waits for it
    # (the advisory lock) and then finds them done.
    async def both() -> list[list[str]]:
        return list(
            await asyncio.gather(migrations.migrate(database), migrations.migrate(database))
        )

    first, second = asyncio.run(both())
    every = versions()
    assert sorted([first, second]) == [[], every[every.index(FIRST_ONLINE) :]]
    with psycopg.connect(database) as conn:
        rows = conn.execute("SELECT count(*), count(DISTINCT version) FROM schema_migrations")
        assert rows.fetchone() == (len(every), len(every))


def test_a_migration_gives_way_to_a_held_lock_and_tries_again(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=migrations.__name__)
    with psycopg.connect(database) as holder:
        # Given a transaction that holds a lock on jobs (what a long read does).
        holder.execute("LOCK TABLE jobs IN ACCESS SHARE MODE")

        # When the runner has too few tries, it stops, names the migration and the way out,
        # and records nothing.
        with pytest.raises(errors.StoreError, match=rf"migration {FIRST_ONLINE}: .*2 tries"):
            asyncio.run(migrations.migrate(database, lock_tries=2))
        assert holder.execute("SELECT count(*) FROM schema_migrations_online").fetchone() == (0,)
        assert holder.execute(
            "SELECT count(*) FROM schema_migrations WHERE version >= %s", (FIRST_ONLINE,)
        ).fetchone() == (0,)

        # And with its tries, it waits out the lock: retries until the holder commits.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            run = pool.submit(asyncio.run, migrations.migrate(database, upto=FIRST_ONLINE))
            try:
                wait_for(
                    lambda: sum("lock not available" in r.message for r in caplog.records) >= 3,
                    what="the runner to retry",
                )
                # The load is not queued behind it: the runner's lock request, which queues
                # a submission behind it, lasts lock_timeout (300 ms), not until the holder
                # commits, so each submission waits less than the load's bound.
                with psycopg.connect(database, autocommit=True) as load:
                    load.execute(f"SET lock_timeout = '{LOAD_LOCK_TIMEOUT}'")
                    for _ in range(10):
                        load.execute(SUBMIT)
                assert not run.done()
            finally:
                holder.commit()
            assert run.result(timeout=60) == [FIRST_ONLINE]


BACKFILL = """
ALTER TABLE jobs ADD COLUMN load_mark text;
-- tasklease: no-transaction
UPDATE jobs SET load_mark = 'filled'
WHERE id IN (SELECT id FROM jobs WHERE load_mark IS NULL LIMIT 300);
"""


def test_a_batched_backfill_runs_under_load_until_no_row_is_left(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a migration that adds a column and fills it in batches of 300 (5,000 jobs).
    every = sql.migrations()
    monkeypatch.setattr(sql, "migrations", lambda: [*every, ("9999_backfill", BACKFILL)])
    asyncio.run(migrations.migrate(database, upto=every[-1][0]))

    # When it runs while jobs are claimed (new jobs would be filled by the new code).
    with Load(database, (CLAIM, CLAIM)) as load:
        load.goes_on("before the backfill")
        assert asyncio.run(migrations.migrate(database)) == ["9999_backfill"]
        load.goes_on("after the backfill")

    # Then every row is filled, and no claim waited past the bound.
    assert load.failures == []
    with psycopg.connect(database) as conn:
        row = conn.execute("SELECT count(*) FILTER (WHERE load_mark IS NULL) FROM jobs").fetchone()
    assert row == (0,)
