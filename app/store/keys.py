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
    secret_hash: bytes,
    hash_secret_id: str,
) -> ApiKey:
    """A key hashed with HMAC-SHA-256 under the server secret ``hash_secret_id`` names."""
    row = await db.fetch_one(
        q("insert_api_key"),
        {
            "id": key_id,
            "tenant": tenant,
            "name": name,
            "admin": admin,
            "secret_hash": secret_hash,
            "hash_secret_id": hash_secret_id,
        },
    )
    if row is None:  # pragma: no cover - an INSERT ... RETURNING answers its row
        raise RuntimeError("insert_api_key returned no row")
    return ApiKey.from_row(row)


async def secret(db: Database, key_id: str) -> KeySecret | None:
    """What verifying the key needs, or None for an unknown id."""
    row = await db.fetch_one(q("api_key"), {"id": key_id})
    return KeySecret.from_row(row) if row else None


async def rehash(
    db: Database, key_id: str, *, old_hash: bytes, secret_hash: bytes, hash_secret_id: str
) -> None:
    """Store the key's hash under the current server secret, if ``old_hash`` is still there."""
    await db.fetch(
        q("rehash_api_key"),
        {
            "id": key_id,
            "old_hash": old_hash,
            "secret_hash": secret_hash,
            "hash_secret_id": hash_secret_id,
        },
    )


async def server_secret(db: Database) -> bytes:
    """The server-side secret kept in PostgreSQL (made by migration 0005)."""
    row = await db.fetch_one(q("server_secret"), {})
    if row is None:
        raise RuntimeError("no server_secret row: run `tasklease migrate`")
    return bytes(row["secret"])


async def listing(db: Database, tenant: str | None = None) -> list[ApiKey]:
    """A tenant's keys, or every tenant's for None; by tenant, then oldest first."""
    return [ApiKey.from_row(row) for row in await db.fetch(q("list_api_keys"), {"tenant": tenant})]


async def revoke(db: Database, key_id: str) -> ApiKey | None:
    """Revoke the key (revoking twice keeps the first time); None for an unknown id."""
    row = await db.fetch_one(q("revoke_api_key"), {"id": key_id})
    return ApiKey.from_row(row) if row else None
