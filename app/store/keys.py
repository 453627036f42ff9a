"""API keys: their rows (a salted hash, never the secret), listing and revocation."""

from __future__ import annotations

from app.store.pool import Database, q
from app.store.records import ApiKey, KeySecret


async def create(
    db: Database,
    *,
    key_id: str,
    tenant: str,
    name: str,
    admin: bool,
    salt: bytes,
    secret_hash: bytes,
) -> ApiKey:
    row = await db.fetch_one(
        q("insert_api_key"),
        {
            "id": key_id,
            "tenant": tenant,
            "name": name,
            "admin": admin,
            "salt": salt,
            "secret_hash": secret_hash,
        },
    )
    if row is None:  # pragma: no cover - an INSERT ... RETURNING answers its row
        raise RuntimeError("insert_api_key returned no row")
    return ApiKey.from_row(row)


async def secret(db: Database, key_id: str) -> KeySecret | None:
    """What verifying the key needs, or None for an unknown id."""
    row = await db.fetch_one(q("api_key"), {"id": key_id})
    return KeySecret.from_row(row) if row else None


async def listing(db: Database, tenant: str | None = None) -> list[ApiKey]:
    """A tenant's keys, or every tenant's for None; by tenant, then oldest first."""
    return [ApiKey.from_row(row) for row in await db.fetch(q("list_api_keys"), {"tenant": tenant})]


async def revoke(db: Database, key_id: str) -> ApiKey | None:
    """Revoke the key (revoking twice keeps the first time); None for an unknown id."""
    row = await db.fetch_one(q("revoke_api_key"), {"id": key_id})
    return ApiKey.from_row(row) if row else None
