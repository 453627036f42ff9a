"""A database of its own part-way through the migrations, for the tests of the runner
(tests/integration/test_migrations_online.py, tests/e2e/test_migrate_crash.py)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator

import psycopg

from app.store import migrations
from app.store.migration_files import FIRST_ONLINE
from tests.conftest import _url_for

__all__ = ["FIRST_ONLINE", "before", "database_at", "seed_jobs", "versions"]


def versions() -> list[str]:
    return [version for version, _ in migrations.migration_files.sql.migrations()]


def before(version: str) -> str:
    """The migration just before ``version``."""
    every = versions()
    return every[every.index(version) - 1]


@contextlib.contextmanager
def database_at(admin_url: str, upto: str) -> Iterator[str]:
    """A new database migrated by the runner up to ``upto``; dropped afterwards."""
    name = f"tasklease_mig_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _url_for(admin_url, name)
    try:
        asyncio.run(migrations.migrate(url, upto=upto))
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def seed_jobs(url: str, n: int) -> None:
    """``n`` queued jobs, written as the schema before FIRST_ONLINE takes them."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO jobs (id, kind, payload, max_attempts, timeout_seconds, request_hash)"
            " SELECT gen_random_uuid(), 'demo.noop', jsonb_build_object('i', g), 1, 60, 'h'"
            " FROM generate_series(1, %s) g",
            (n,),
        )
