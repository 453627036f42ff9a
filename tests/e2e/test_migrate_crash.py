"""`tasklease migrate` SIGKILLed while CREATE INDEX CONCURRENTLY builds an index of an online
part (docs/howto/migrations.md): the file is not recorded, the index is left INVALID, and a
second run drops and builds it again, records the file once and leaves the schema exactly
as an uninterrupted run does."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.crashpoints import Point
from app.store import migrations, schema
from app.tools.stack.stack import Process
from tests.conftest import _url_for, wait_for
from tests.e2e.test_crash_points import died_by_sigkill
from tests.helpers import crash_env
from tests.migrating import FIRST_ONLINE, before, database_at, seed_jobs

pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]


def one(url: str, query: str, *params: Any) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
    return row[0] if row else None


def test_a_migrator_killed_mid_index_build_is_finished_by_the_next_run(
    pg_admin_url: str, pg_template: str, tmp_path: Path
) -> None:
    with database_at(pg_admin_url, before(FIRST_ONLINE)) as url:
        seed_jobs(url, 200)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TASKLEASE_")}
        env["TASKLEASE_DATABASE_URL"] = url
        dbname = psycopg.conninfo.conninfo_to_dict(url)["dbname"]

        # Given a transaction holding a snapshot (on no table): a concurrent index build
        # waits for it before it marks the index valid, so the kill finds it unfinished.
        with psycopg.connect(url) as holder:
            holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            holder.execute("SELECT 1")

            # When a migrator armed at during_online_migration dies in 0024's first build.
            doomed = Process(
                "migrate-doomed",
                [sys.executable, "-m", "app.cli", "migrate"],
                log_path=tmp_path / "doomed.log",
                env=env | crash_env(Point.DURING_ONLINE_MIGRATION),
                new_session=False,
            )
            died_by_sigkill(doomed, "the migrator armed at during_online_migration")
            # Its server session finds its client gone once lock_timeout ends the wait.
            wait_for(
                lambda: (
                    not one(
                        url,
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE datname = %s AND application_name = %s",
                        dbname,
                        migrations.APPLICATION_NAME,
                    )
                ),
                what="the killed migrator's session to end",
            )
            holder.rollback()

        # Then 0024's transactional part is committed, its index INVALID, the file not
        # recorded but marked as under way.
        assert (
            one(
                url,
                "SELECT count(*) FROM information_schema.columns"
                " WHERE table_name = 'jobs' AND column_name = 'rerun_of'",
            )
            == 1
        )
        assert (
            one(
                url,
                "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('jobs_rerun_of')",
            )
            is False
        )
        assert (
            one(url, "SELECT count(*) FROM schema_migrations WHERE version = %s", FIRST_ONLINE) == 0
        )
        assert one(url, "SELECT version FROM schema_migrations_online") == FIRST_ONLINE

        # And a second run finishes it: recorded once, and the schema is exactly what an
        # uninterrupted run makes (valid indexes, nothing left over).
        applied = asyncio.run(migrations.migrate(url))
        assert applied[0] == FIRST_ONLINE
        assert (
            one(url, "SELECT count(*) FROM schema_migrations WHERE version = %s", FIRST_ONLINE) == 1
        )
        assert one(url, "SELECT count(*) FROM schema_migrations_online") == 0
        assert one(url, "SELECT bool_and(indisvalid) FROM pg_index") is True
        assert schema.snapshot(url) == schema.snapshot(_url_for(pg_admin_url, pg_template))
