"""``make run``'s API key, kept from run to run (issue 30, item 6).

Each start used to revoke the previous run's key and make a new one, so the exported
``TASKLEASE_API_KEY`` and every open web-view tab got 401 after a restart. Now the key
is kept in ``<data dir>/api-key`` (mode 0600, beside the database that holds its hash)
and used again while it still proves the demo tenant: the database keeps only its HMAC,
as for any key. A database that has no row for it (a new one: ``pgdata`` deleted, or
another TASKLEASE_DATABASE_URL) gets the same key put back. ``--new-key`` (or a kept key
that was revoked, or no longer matches) makes a new one and revokes the earlier ones.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from app import store
from app.services import auth
from app.tools.stack import state

FILE_NAME = "api-key"
DEMO_TENANT = "demo"
DEMO_KEY_NAME = "make run"


@dataclass(frozen=True)
class DevKey:
    key: str
    note: str  # what to tell the user beside it: kept, put back or new, and why
    kept: bool = False  # the previous run's key


def path(data_dir: Path) -> Path:
    return data_dir / FILE_NAME


def demo_key(database_url: str, data_dir: Path, *, new: bool = False) -> DevKey:
    """The demo tenant's key for this run: the kept one unless ``new``; kept for the next."""
    kept = None if new else _read(path(data_dir))
    found = asyncio.run(_demo_key(database_url, kept, new=new))
    state.write_private(path(data_dir), found.key + "\n")
    return found


async def _demo_key(database_url: str, kept: str | None, *, new: bool) -> DevKey:
    async with store.connect(database_url, min_size=1, max_size=1) as database:
        if kept is not None:
            found = await _kept(database, kept)
            if found is not None:
                return found
        earlier = await _live_keys(database)
        for key_id in earlier:
            await auth.revoke_key(database, key_id)
        made = await auth.create_key(database, DEMO_TENANT, name=DEMO_KEY_NAME)
        if new:
            why = "a new key (--new-key): the previous one is revoked"
        elif kept is not None:
            why = "a new key: the kept one was revoked or does not match this database"
        else:
            why = "a new key: the previous one is revoked" if earlier else ""
        return DevKey(made.key, why)


async def _kept(database: store.Database, kept: str) -> DevKey | None:
    """The kept key, if it still proves the demo tenant, or put back in a database that
    does not know it; None when it was revoked or does not match."""
    try:
        key_id, _ = auth.split_key(kept)
        if await store.keys.secret(database, key_id) is None:
            await auth.restore_key(database, kept, DEMO_TENANT, name=DEMO_KEY_NAME)
            return DevKey(
                kept, "the same key as the previous run (put back in a new database)", True
            )
        caller = await auth.KeyVerifier(database).verify(kept)
    except auth.Unauthorized:
        return None
    if caller.tenant != DEMO_TENANT or caller.admin:
        return None
    return DevKey(kept, "the same key as the previous run", True)


async def _live_keys(database: store.Database) -> list[str]:
    """The ids of the earlier runs' demo keys still in force."""
    return [
        row["id"]
        for row in await auth.list_keys(database, DEMO_TENANT)
        if row["name"] == DEMO_KEY_NAME and row["revoked_at"] is None
    ]


def _read(target: Path) -> str | None:
    try:
        return target.read_text().strip() or None
    except OSError:
        return None
