"""The server-side secret: what API keys are hashed with and pagination cursors signed with.

``TASKLEASE_KEY_HASH_SECRET`` when it is set; otherwise the random secret migration 0005
made and PostgreSQL keeps (read once per process). Each use derives its own key from it
(an HMAC of a purpose label), so a key's hash can never pass for a cursor's signature.

A key hash records which secret it was made under (``secret_id``, a fingerprint that
reveals nothing of the secret): a key hashed under the database's secret still verifies
after TASKLEASE_KEY_HASH_SECRET is set, and is re-hashed under the new one then.

One ServerSecret per database pool: ``bind`` it when the pool opens (the API's Runtime
does); ``of`` finds it for code handed only the pool (the job listing's cursors, key
creation). Every process that creates or checks keys needs the same setting: a key
hashed under TASKLEASE_KEY_HASH_SECRET is refused by a process that does not have it.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import weakref
from dataclasses import dataclass

from app import store
from app.settings import config

KEY_HASH = b"tasklease/api-key-hash/v1"
CURSOR = b"tasklease/cursor/v1"
_SECRET_ID = b"tasklease/secret-id/v1"


@functools.lru_cache(maxsize=32)
def derive(secret: bytes, purpose: bytes) -> bytes:
    """The key for one purpose: HMAC-SHA-256(secret, purpose). Kept: every request that
    checks a key asks for the same one (a few secrets and purposes per process)."""
    return hmac.new(secret, purpose, hashlib.sha256).digest()


def secret_id(secret: bytes) -> str:
    """A public fingerprint of a secret (16 hex characters)."""
    return hmac.new(secret, _SECRET_ID, hashlib.sha256).hexdigest()[:16]


@dataclass(frozen=True)
class Secrets:
    """The secret in force, and every secret a stored key hash may have been made under."""

    current: bytes
    known: dict[str, bytes]  # by secret_id

    @property
    def current_id(self) -> str:
        return secret_id(self.current)

    def key(self, purpose: bytes, secret: bytes | None = None) -> bytes:
        return derive(self.current if secret is None else secret, purpose)


class ServerSecret:
    """The configured secret, or the database's, loaded once."""

    def __init__(self, configured: str | None = None) -> None:
        self._configured = configured.encode() if configured else None
        self._loaded: Secrets | None = None
        self._lock = asyncio.Lock()

    async def load(self, db: store.Database) -> Secrets:
        if self._loaded is not None:
            return self._loaded
        async with self._lock:
            if self._loaded is None:
                kept = await store.keys.server_secret(db)
                current = self._configured or kept
                self._loaded = Secrets(
                    current=current, known={secret_id(s): s for s in (kept, current)}
                )
            return self._loaded


_BOUND: weakref.WeakKeyDictionary[store.Database, ServerSecret] = weakref.WeakKeyDictionary()


def bind(db: store.Database, configured: str | None) -> ServerSecret:
    """The server secret for this pool, with the configured secret (None: the database's)."""
    bound = _BOUND[db] = ServerSecret(configured)
    return bound


def of(db: store.Database) -> ServerSecret:
    """The secret bound to this pool; for a pool nobody bound (the CLI's, the migrate
    function's), TASKLEASE_KEY_HASH_SECRET from the environment, else the database's."""
    found = _BOUND.get(db)
    return found if found is not None else bind(db, configured(config.load()))


def configured(settings: config.Settings) -> str | None:
    """TASKLEASE_KEY_HASH_SECRET, or None when it is not set."""
    return settings.key_hash_secret.get_secret_value() if settings.key_hash_secret else None
