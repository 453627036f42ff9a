"""`make run`'s demo key across restarts (issue 30, item 6), on a real PostgreSQL: kept
and used again, replaced on --new-key or once revoked, and put back, the same plaintext
key, in a database that never had it. The end-to-end side (a restarted `make run`, its
API answering the kept key) is tests/e2e/test_make_run_restart.py."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from app import store
from app.services import auth
from app.tools.stack import dev_key
from tests.conftest import cloned_database, run

pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]


async def _tenant(database_url: str, key: str) -> str | None:
    """The tenant the key proves in this database, or None when it is refused."""
    async with store.connect(database_url, min_size=1, max_size=1) as database:
        try:
            return (await auth.KeyVerifier(database).verify(key)).tenant
        except auth.Unauthorized:
            return None


def tenant(database_url: str, key: str) -> str | None:
    return run(_tenant(database_url, key))  # type: ignore[no-any-return]


async def _revoke(database_url: str, key: str) -> None:
    async with store.connect(database_url, min_size=1, max_size=1) as database:
        await auth.revoke_key(database, auth.split_key(key)[0])


def test_the_key_is_kept_across_runs_until_new_key_or_a_revocation(
    database_url: str, tmp_path: Path
) -> None:
    first = dev_key.demo_key(database_url, tmp_path)
    assert first.note == ""  # the first run: nothing to say
    kept = dev_key.path(tmp_path)
    assert kept.read_text().strip() == first.key
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert tenant(database_url, first.key) == "demo"

    again = dev_key.demo_key(database_url, tmp_path)
    assert again.key == first.key
    assert again.note == "the same key as the previous run"
    assert tenant(database_url, first.key) == "demo"

    renewed = dev_key.demo_key(database_url, tmp_path, new=True)
    assert renewed.key != first.key
    assert renewed.note == "a new key (--new-key): the previous one is revoked"
    assert tenant(database_url, first.key) is None
    assert tenant(database_url, renewed.key) == "demo"
    assert kept.read_text().strip() == renewed.key

    # An operator revoked the kept key (`tasklease keys revoke`): the next run respects it.
    run(_revoke(database_url, renewed.key))
    replaced = dev_key.demo_key(database_url, tmp_path)
    assert replaced.key != renewed.key
    assert "the kept one was revoked" in replaced.note
    assert tenant(database_url, renewed.key) is None
    assert tenant(database_url, replaced.key) == "demo"


def test_a_new_database_gets_the_kept_key_back(
    database_url: str, pg_admin_url: str, pg_template: str, tmp_path: Path
) -> None:
    """pgdata deleted (or another TASKLEASE_DATABASE_URL): the same key works there too."""
    first = dev_key.demo_key(database_url, tmp_path)
    with cloned_database(pg_admin_url, pg_template) as fresh:
        assert tenant(fresh, first.key) is None
        found = dev_key.demo_key(fresh, tmp_path)
        assert found.key == first.key
        assert found.note == "the same key as the previous run (put back in a new database)"
        assert tenant(fresh, first.key) == "demo"
        # and a key file that is not a key at all is replaced, not trusted
        dev_key.path(tmp_path).write_text("not a key\n")
        other = dev_key.demo_key(fresh, tmp_path)
        assert other.key.startswith("tlk_") and other.key != first.key
        assert tenant(fresh, first.key) is None  # the earlier make-run key is revoked
