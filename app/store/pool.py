"""PostgreSQL: the connection pool, the one executor, and migrations.

The aggregate modules beside this one (jobs, leases, effects, outbox, ...) run the
named queries through ``Database.fetch`` or, inside a caller's transaction,
``fetch_txn``; nothing above the store runs SQL.
"""

from __future__ import annotations

import contextlib
import functools
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, LiteralString, ParamSpec, TypeVar

import psycopg
import psycopg.sql
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from app import errors, metrics
from app.store import admission, sql

# Runs of one statement that lost a deadlock before the error is the caller's.
DEADLOCK_TRIES = 3

Conn = psycopg.AsyncConnection[DictRow]
T = TypeVar("T")
P = ParamSpec("P")

# A statement is prepared on each connection the first time it runs there. When a
# migration then changes the columns it returns (a column added to a table it reads with
# `*`), PostgreSQL refuses that prepared statement with this error, on that connection,
# for as long as it lives (an autocommit connection never rolls back, so psycopg never
# forgets it). So a process that was running when a migration ran (a rolling deploy,
# docs/howto/upgrade.md) renews its pool's connections and runs the statement again.
STALE_PLAN = "cached plan must not change result type"


class StalePlan(errors.StoreError):
    """A statement prepared before a migration changed what it returns; the pool's
    connections were renewed, so running it again succeeds."""


def ensure_database(admin_url: str, name: str) -> None:
    """Create the database ``name`` on the server at ``admin_url`` unless it exists (the
    embedded default's first start). Synchronous: it runs before any loop does."""
    try:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if found.fetchone() is None:
                conn.execute(
                    psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name))
                )
    except psycopg.OperationalError as exc:
        raise errors.StoreError(
            f"cannot connect to PostgreSQL at {redact(admin_url)}: {exc}"
        ) from exc


def redact(url: str) -> str:
    """A database URL safe to print: the password replaced."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<unparseable database URL>"
    if info.get("password"):
        info["password"] = "***"  # noqa: S105 - a mask, not a secret
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})


# A connection back in the pool for less than this is handed out unchecked: it just
# worked. One idle longer is pinged first (the server or a proxy may have dropped it).
# This spares a round trip per checkout under load, where the ping was half of them.
CHECK_IDLE_SECONDS = 5.0
# (Noted by Database.connection() on the way back, not by the pool's reset callback: the
# pool returns a connection through a worker task when it has one, which is slower.)
_returned_at: weakref.WeakKeyDictionary[Conn, float] = weakref.WeakKeyDictionary()


async def _check_if_idle(conn: Conn) -> None:
    returned = _returned_at.get(conn)
    if returned is None or time.monotonic() - returned > CHECK_IDLE_SECONDS:
        metrics.count(metrics.PG_ROUND_TRIPS)
        await AsyncConnectionPool.check_connection(conn)


class Database:
    """An async pool and the named queries it runs."""

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10) -> None:
        self.url = url
        # What this pool last counted of each tenant's admission limits (store/admission.py).
        self.admission = admission.Counts()
        self.pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            open=False,
            kwargs={"row_factory": dict_row, "autocommit": True},
            check=_check_if_idle,
            name="tasklease",
        )

    async def open(self, *, wait: bool = True, wait_seconds: float = 30.0) -> None:
        try:
            await self.pool.open(wait=wait, timeout=wait_seconds)
        except Exception as exc:
            raise errors.StoreError(
                f"cannot connect to PostgreSQL at {redact(self.url)}: {exc}"
            ) from exc

    async def close(self) -> None:
        await self.pool.close()

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        try:
            async with self.pool.connection() as conn:
                try:
                    yield conn
                finally:
                    _returned_at[conn] = time.monotonic()
        except psycopg.OperationalError as exc:
            raise errors.StoreError(f"PostgreSQL: {exc}") from exc
        except psycopg.errors.FeatureNotSupported as exc:
            if STALE_PLAN not in str(exc):
                raise
            # Every connection of the pool may hold such plans: all are replaced (one in
            # use when it comes back), so the statement run again gets a fresh one.
            await self.pool.drain()
            raise StalePlan(f"PostgreSQL: {exc} (the pool's connections were renewed)") from exc

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Conn]:
        async with self.connection() as conn, conn.transaction():
            yield conn

    async def fetch(
        self, query: LiteralString, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """One statement in its own transaction. A deadlock victim is run again (its
        statement rolled back whole): two batches finishing children of the same parents
        in different orders lock those parents in different orders (the trigger that
        wakes a parent). So is a statement whose plan a migration made stale (StalePlan)."""

        async def run() -> list[dict[str, Any]]:
            async with self.connection() as conn:
                return await fetch_txn(conn, query, params)

        return await _again_if_lost(run)

    async def transact(self, work: Callable[[Conn], Awaitable[T]]) -> T:
        """``work`` in one transaction; a deadlock victim is run again whole (as ``fetch``)."""

        async def run() -> T:
            async with self.transaction() as conn:
                return await work(conn)

        return await _again_if_lost(run)

    async def fetch_after_lock(
        self,
        lock: LiteralString,
        query: LiteralString,
        params: Mapping[str, Any],
    ) -> list[dict[str, Any]]:
        """``lock`` (a statement that takes transaction-scoped advisory locks) then
        ``query``, in one transaction sent as one pipeline: one round trip, as ``fetch``.
        ``query`` takes its snapshot after the locks are held, so it sees what the
        transaction that held them before committed. Both take ``params``. A deadlock
        victim or a stale plan is run again (as ``fetch``)."""

        async def run() -> list[dict[str, Any]]:
            async with self.connection() as conn:
                return await _pipelined(conn, lock, query, params)

        return await _again_if_lost(run)

    async def fetch_one(
        self, query: LiteralString, params: Mapping[str, Any] | None = None
    ) -> dict[str, Any] | None:
        rows = await self.fetch(query, params)
        return rows[0] if rows else None

    async def ping(self) -> None:
        await self.fetch("SELECT 1 AS ok")


@contextlib.asynccontextmanager
async def connect(
    url: str, *, min_size: int = 1, max_size: int = 10, wait_seconds: float = 30.0
) -> AsyncIterator[Database]:
    """An open pool for the block, closed after it however the block ends."""
    database = Database(url, min_size=min_size, max_size=max_size)
    await database.open(wait_seconds=wait_seconds)
    try:
        yield database
    finally:
        await database.close()


def _has_rows(cur: psycopg.AsyncCursor[DictRow] | psycopg.AsyncRawCursor[DictRow]) -> bool:
    """The statement returns rows. Not ``cur.description``: that builds a Column for each
    of the result's columns every time it is read (45 for a job), and dict_row reads it
    again for the names (issue 37's profile: 5 % of the API's CPU)."""
    result = cur.pgresult
    return result is not None and result.status == psycopg.pq.ExecStatus.TUPLES_OK


async def _execute(
    conn: Conn, query: LiteralString, params: Mapping[str, Any]
) -> psycopg.AsyncCursor[DictRow] | psycopg.AsyncRawCursor[DictRow]:
    """``query``, prepared on ``conn``. A named query (app/store/sql) runs in its ``$n``
    form on a raw cursor, so psycopg does not parse its placeholders on every call."""
    raw = sql.positional.get(query)
    if raw is None:
        return await conn.execute(query, params, prepare=True)
    text, names = raw
    try:
        values = [params[name] for name in names]
    except KeyError as exc:
        raise psycopg.ProgrammingError(f"query parameter missing: {exc.args[0]}") from None
    cur = psycopg.AsyncRawCursor(conn, row_factory=conn.row_factory)
    return await cur.execute(text, values, prepare=True)


async def fetch_txn(
    conn: Conn, query: LiteralString, params: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Run one named query on the caller's connection (and so inside its transaction)."""
    metrics.count(metrics.PG_ROUND_TRIPS)
    try:
        cur = await _execute(conn, query, params or {})
        return list(await cur.fetchall()) if _has_rows(cur) else []
    except psycopg.OperationalError as exc:
        raise errors.StoreError(f"PostgreSQL: {exc}") from exc


async def _pipelined(
    conn: Conn, lock: LiteralString, query: LiteralString, params: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """BEGIN, ``lock``, ``query``, COMMIT sent together (psycopg's transaction block
    would wait for BEGIN and COMMIT on their own round trips); rolled back on an error."""
    metrics.count(metrics.PG_ROUND_TRIPS)
    try:
        async with conn.pipeline():
            await conn.execute("BEGIN")
            await _execute(conn, lock, params)
            cur = await _execute(conn, query, params)
            await conn.execute("COMMIT")
        return list(await cur.fetchall()) if _has_rows(cur) else []
    except psycopg.Error as exc:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE and not conn.closed:
            with contextlib.suppress(psycopg.Error):
                await conn.execute("ROLLBACK")
        if isinstance(exc, psycopg.OperationalError):
            raise errors.StoreError(f"PostgreSQL: {exc}") from exc
        raise


async def _again_if_lost(run: Callable[[], Awaitable[T]]) -> T:
    """``run()``, run again when it lost a deadlock or met a stale plan (its transaction
    rolled back whole either way), up to DEADLOCK_TRIES runs in all."""
    for attempt in range(1, DEADLOCK_TRIES + 1):
        try:
            return await run()
        except errors.StoreError as exc:
            again = isinstance(exc, StalePlan) or isinstance(
                exc.__cause__, psycopg.errors.DeadlockDetected
            )
            if attempt == DEADLOCK_TRIES or not again:
                raise
    raise AssertionError("unreachable")


def retried(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """A store function of one transaction (or one statement) on a connection of its own,
    with nothing outside the database done before it commits: run again whole when it lost
    a deadlock or met a stale plan, as ``Database.fetch`` and ``transact`` are."""

    @functools.wraps(fn)
    async def again(*args: P.args, **kwargs: P.kwargs) -> T:
        return await _again_if_lost(lambda: fn(*args, **kwargs))

    return again


def q(name: str) -> LiteralString:
    """The named query's text (the aggregate modules' one way to name a statement)."""
    return sql.queries[name]


async def migrate(url: str, *, upto: str | None = None) -> list[str]:
    """Apply every migration not yet applied, in order; returns the versions applied
    (the runner: app/store/migrations.py)."""
    from app.store import migrations  # it imports this module

    return await migrations.migrate(url, upto=upto)
