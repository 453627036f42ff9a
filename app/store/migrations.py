"""The migration runner (docs/howto/migrations.md).

Each file (app/store/migration_files.py reads and checks them) is applied once, in order,
under a session advisory lock: two runners at once (two Lambda cold starts) take turns, and
the second finds the work done (it polls for the lock: see _take_turn). A file's
transactional part commits in one transaction with a row in ``schema_migrations_online``
when the file has an online part; the online statements then run one at a time in
autocommit; the file is recorded in ``schema_migrations`` (and its online row deleted) in
one transaction only once all of it ran. A run killed in the online part leaves the online row: the next run skips the
transactional part and runs the online statements again (each is safe to run twice; an
index a killed build left INVALID is dropped first, then built again).

Every statement runs with ``lock_timeout``: a migration that cannot take a lock in time
gives up its place in the lock queue (so the load queued behind it goes on) and is tried
again after a backoff, up to ``lock_tries`` times.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable

import psycopg
import psycopg.errors
import psycopg.sql

from app import crashpoints, errors
from app.crashpoints import Point
from app.store import migration_files
from app.store.migration_files import Migration, OnlineStatement
from app.store.pool import redact

log = logging.getLogger(__name__)

# Serialises concurrent `migrate` runs (several workers starting at once).
_MIGRATION_LOCK = 0x7461736B6C65  # "taskle"

# How long one statement of a migration waits for a lock before it gives up its place in
# the queue (the load queued behind it waits at most about this long), and how many times
# it is tried, with the backoff between tries doubling from BACKOFF_SECONDS up to the cap.
LOCK_TIMEOUT_MS = 300
LOCK_TRIES = 20
BACKOFF_SECONDS = 0.05
BACKOFF_CAP_SECONDS = 2.0

APPLICATION_NAME = "tasklease-migrate"

AConn = psycopg.AsyncConnection[tuple[object, ...]]


async def migrate(
    url: str,
    *,
    upto: str | None = None,
    lock_timeout_ms: int = LOCK_TIMEOUT_MS,
    lock_tries: int = LOCK_TRIES,
) -> list[str]:
    """Apply every migration not yet applied, in order (only those up to the version
    ``upto``, when given); returns the versions applied."""
    if lock_timeout_ms < 1 or lock_tries < 1:
        raise ValueError(
            f"migrate: lock_timeout_ms ({lock_timeout_ms}) and lock_tries ({lock_tries}) "
            "must be at least 1"
        )
    pending = migration_files.load()  # a bad file fails here, before anything is applied
    if upto is not None:
        if upto not in {m.version for m in pending}:
            raise ValueError(f"migrate(upto={upto!r}): no such migration")
        pending = [m for m in pending if m.version <= upto]
    try:
        conn = await psycopg.AsyncConnection.connect(
            url, autocommit=True, application_name=APPLICATION_NAME
        )
    except psycopg.OperationalError as exc:
        raise errors.StoreError(f"cannot connect to PostgreSQL at {redact(url)}: {exc}") from exc
    applied: list[str] = []
    async with conn:
        await _take_turn(conn)
        try:
            await conn.execute(
                psycopg.sql.SQL("SET lock_timeout = {}").format(
                    psycopg.sql.Literal(f"{int(lock_timeout_ms)}ms")
                )
            )
            runner = _Runner(conn, url, lock_tries)
            done, online_pending = await runner.bookkeeping()
            for m in pending:
                if m.version in done:
                    continue
                await runner.apply(m, started=m.version in online_pending)
                applied.append(m.version)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK,))
    return applied


async def _take_turn(conn: AConn) -> None:
    """The advisory lock, taken by polling rather than by waiting in pg_advisory_lock: a
    runner waiting in a statement holds a snapshot, and the other runner's CREATE INDEX
    CONCURRENTLY waits for every older snapshot to end, while it holds the lock: a deadlock.
    Between polls this session holds no snapshot."""
    delay = BACKOFF_SECONDS
    said = False
    while True:
        cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (_MIGRATION_LOCK,))
        row = await cur.fetchone()
        if row is not None and row[0]:
            return
        if not said:
            log.info("another migrate run holds the migration lock; waiting for it to end")
            said = True
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)


class _Runner:
    def __init__(self, conn: AConn, url: str, lock_tries: int) -> None:
        self.conn = conn
        self.url = url
        self.lock_tries = lock_tries

    async def bookkeeping(self) -> tuple[set[str], set[str]]:
        """The versions applied, and those whose online part is under way."""
        await self.conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        await self.conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations_online ("
            " version text PRIMARY KEY, started_at timestamptz NOT NULL DEFAULT now())"
        )
        cur = await self.conn.execute("SELECT version FROM schema_migrations")
        done = {str(row[0]) for row in await cur.fetchall()}
        cur = await self.conn.execute("SELECT version FROM schema_migrations_online")
        return done, {str(row[0]) for row in await cur.fetchall()}

    async def apply(self, m: Migration, *, started: bool) -> None:
        if not m.online:
            await self._retrying(m, "its transaction", lambda: self._transaction(m, record=True))
            return
        if started:
            log.info("migration %s: its online part was cut short; running it again", m.version)
        else:
            await self._retrying(m, "its transaction", lambda: self._transaction(m, record=False))
        for statement in m.online:
            await self._retrying(m, statement.text, functools.partial(self._online, m, statement))
        await self._retrying(m, "its record", lambda: self._record(m))

    async def _transaction(self, m: Migration, *, record: bool) -> None:
        async with self.conn.transaction():
            if m.transactional:
                await self.conn.execute(m.transactional)
            if record:
                await self.conn.execute(
                    "INSERT INTO schema_migrations (version) VALUES (%s)", (m.version,)
                )
            else:
                await self.conn.execute(
                    "INSERT INTO schema_migrations_online (version) VALUES (%s)", (m.version,)
                )

    async def _record(self, m: Migration) -> None:
        async with self.conn.transaction():
            await self.conn.execute(
                "DELETE FROM schema_migrations_online WHERE version = %s", (m.version,)
            )
            await self.conn.execute(
                "INSERT INTO schema_migrations (version) VALUES (%s)", (m.version,)
            )

    async def _online(self, m: Migration, statement: OnlineStatement) -> None:
        if statement.index is not None:
            cur = await self.conn.execute(
                "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%s)",
                (statement.index,),
            )
            row = await cur.fetchone()
            if row is not None and not row[0]:
                log.info("migration %s: dropping INVALID index %s", m.version, statement.index)
                name = psycopg.sql.Identifier(*statement.index.split("."))
                await self.conn.execute(
                    psycopg.sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(name)
                )
            if Point.DURING_ONLINE_MIGRATION.value in crashpoints.ARMED:
                await self._die_while_building(m, statement)
        if not statement.batched:
            await self.conn.execute(statement.text)
            return
        batches = rows = 0
        while (cur := await self.conn.execute(statement.text)).rowcount > 0:
            batches, rows = batches + 1, rows + cur.rowcount
            if batches % 100 == 0:
                log.info("migration %s: backfill at %d rows, %d batches", m.version, rows, batches)

    async def _die_while_building(self, m: Migration, statement: OnlineStatement) -> None:
        """Tests only (the crash point armed): start the build, wait until its INVALID
        index is in the catalog (seen from a second connection), then die there."""
        assert statement.index is not None
        build = asyncio.ensure_future(self.conn.execute(statement.text))
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as watcher:
            while not build.done():
                cur = await watcher.execute(
                    "SELECT to_regclass(%s) IS NOT NULL", (statement.index,)
                )
                row = await cur.fetchone()
                if row is not None and row[0]:
                    crashpoints.hit(
                        Point.DURING_ONLINE_MIGRATION, migration=m.version, index=statement.index
                    )
                await asyncio.sleep(0.01)
        await build  # it finished before the poll saw it: nothing to kill inside

    async def _retrying(self, m: Migration, what: str, step: Callable[[], Awaitable[None]]) -> None:
        delay = BACKOFF_SECONDS
        for attempt in range(1, self.lock_tries + 1):
            try:
                await step()
                return
            except psycopg.errors.LockNotAvailable as exc:
                if attempt == self.lock_tries:
                    raise errors.StoreError(
                        f"migration {m.version}: {_what(what)} could not take its locks in "
                        f"{self.lock_tries} tries (each waits lock_timeout; the load holds "
                        f"them): run `tasklease migrate` again at a quieter time ({exc})"
                    ) from exc
                log.info(
                    "migration %s: lock not available for %s (try %d of %d); again in %.2f s",
                    m.version,
                    _what(what),
                    attempt,
                    self.lock_tries,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_CAP_SECONDS)
            except psycopg.Error as exc:
                raise errors.StoreError(f"migration {m.version}: {_what(what)}: {exc}") from exc


def _what(what: str) -> str:
    return what if what.startswith("its ") else repr(" ".join(what.split())[:120])
