"""Who is calling: API keys per tenant, or the identity API Gateway's authorizer vouched for.

A key reads ``tlk_<id>_<secret>``. The id (12 hex characters) is public: it finds the
row and names the key in ``tasklease keys list`` and ``keys revoke``. The secret is
32 random bytes; only a salted scrypt hash of it is stored, and the comparison is
constant-time. Checking scrypt on every request would cost tens of milliseconds, so a
process remembers the digests of secrets it has already verified, per key id (with the
key's tenant and scope, which never change). A revoked key still stops working at once:
every request reads the key's row, either on its own (``verify``) or, for a submission,
inside the statement that writes the jobs (``verify(defer_revocation=True)``: the
insert checks the key and refuses to write for a revoked one), which saves a round trip
on the hottest route.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app import bounds, errors, store

PREFIX = "tlk"
# Used with fullmatch: "$" in a Python pattern also matches before a trailing newline,
# which the database's CHECK (same pattern, PostgreSQL semantics) refuses.
KEY_ID = re.compile(r"[0-9a-f]{12}")
TENANT = re.compile(bounds.TENANT_PATTERN)
MAX_KEY_NAME = bounds.MAX_KEY_NAME_CHARS
# scrypt's interactive-login cost (RFC 7914 §2): about 50 ms and 16 MiB per check.
SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}
# Verified secrets a process remembers (as SHA-256 digests, never the secrets).
VERIFIED_CACHE = 4096


@dataclass(frozen=True)
class Principal:
    """The caller: its tenant, whether it may act across tenants, and how it proved it."""

    tenant: str
    admin: bool = False
    key_id: str | None = None
    via: Literal["api_key", "authorizer", "operator"] = "api_key"
    # The key was verified from this process's memory and its revocation not yet read:
    # only a statement that checks ``key_id`` itself (the submission's insert) may act
    # for this caller, and nothing may be read for it before that statement ran.
    revocation_pending: bool = False

    @property
    def scope(self) -> str | None:
        """The tenant the caller's reads are limited to; None for an admin (every tenant)."""
        return None if self.admin else self.tenant


class Unauthorized(errors.TaskleaseError):
    """A valid API key is required: send Authorization: Bearer <key>."""

    def __init__(self, message: str | None = None, *, error: str | None = None) -> None:
        super().__init__(message)
        # RFC 6750 §3.1: "invalid_token" when a token was sent but is not good.
        self.error = error


class Forbidden(errors.TaskleaseError):
    """This operation needs an admin key."""


def check_tenant(tenant: str) -> str:
    if not TENANT.fullmatch(tenant):
        raise errors.BadRequest(
            f"tenant {tenant!r} is not valid: 1 to 63 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return tenant


def _hash(secret: str, salt: bytes) -> bytes:
    return hashlib.scrypt(secret.encode(), salt=salt, **SCRYPT)


def split_key(key: str) -> tuple[str, str]:
    """(id, secret) of a key, or Unauthorized when it is not shaped like one of ours."""
    parts = key.split("_", 2)
    if (
        len(parts) != 3
        or parts[0] != PREFIX
        or not KEY_ID.fullmatch(parts[1])
        or len(parts[2]) < 16
    ):
        raise Unauthorized("the API key is malformed", error="invalid_token")
    return parts[1], parts[2]


@dataclass(frozen=True)
class NewKey:
    key: str  # shown once
    row: dict[str, Any]


async def create_key(
    db: store.Database, tenant: str, *, name: str = "", admin: bool = False
) -> NewKey:
    check_tenant(tenant)
    if len(name) > MAX_KEY_NAME:
        raise errors.BadRequest(f"key name must be at most {MAX_KEY_NAME} characters")
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_bytes(16)
    made = await store.keys.create(
        db,
        key_id=key_id,
        tenant=tenant,
        name=name,
        admin=admin,
        salt=salt,
        secret_hash=_hash(secret, salt),
    )
    return NewKey(key=f"{PREFIX}_{key_id}_{secret}", row=made.to_dict())


async def create_key_at(
    database_url: str, tenant: str, *, name: str = "", admin: bool = False
) -> str:
    """A new key, for a process that has no pool open (make run, chaos, bench, tests)."""
    async with store.connect(database_url, min_size=1, max_size=1) as database:
        return (await create_key(database, tenant, name=name, admin=admin)).key


async def list_keys(db: store.Database, tenant: str | None = None) -> list[dict[str, Any]]:
    return [key.to_dict() for key in await store.keys.listing(db, tenant)]


async def revoke_key(db: store.Database, key_id: str) -> dict[str, Any]:
    if not KEY_ID.fullmatch(key_id):
        raise errors.BadRequest(f"{key_id!r} is not a key id (12 hex characters)")
    revoked = await store.keys.revoke(db, key_id)
    if revoked is None:
        raise errors.NotFound(f"no key {key_id}")
    return revoked.to_dict()


def invalid_key() -> Unauthorized:
    # The same answer for an unknown, a wrong and a revoked key.
    return Unauthorized("the API key is not valid", error="invalid_token")


@dataclass(frozen=True)
class _Verified:
    digest: bytes  # SHA-256 of the secret, never the secret
    tenant: str
    admin: bool


class KeyVerifier:
    """Checks bearer keys against the database; remembers secrets it has verified."""

    def __init__(self, db: store.Database) -> None:
        self.db = db
        self._verified: collections.OrderedDict[str, _Verified] = collections.OrderedDict()

    async def verify(self, key: str, *, defer_revocation: bool = False) -> Principal:
        """The caller a key proves, or Unauthorized. With ``defer_revocation`` a key this
        process verified before is answered from memory, marked ``revocation_pending``:
        the caller's own statement must then check the key (see insert_jobs)."""
        key_id, secret = split_key(key)
        digest = hashlib.sha256(secret.encode()).digest()
        known = self._verified.get(key_id)
        if known is not None and not hmac.compare_digest(known.digest, digest):
            known = None  # another secret under a known id: scrypt decides below
        if known is not None and defer_revocation:
            self._verified.move_to_end(key_id)
            return Principal(
                tenant=known.tenant, admin=known.admin, key_id=key_id, revocation_pending=True
            )
        row = await store.keys.secret(self.db, key_id)
        if row is None or row.revoked_at is not None:
            raise invalid_key()
        if known is not None:
            self._verified.move_to_end(key_id)
        elif hmac.compare_digest(
            # Off the event loop: scrypt takes tens of milliseconds by design.
            await asyncio.to_thread(_hash, secret, row.salt),
            row.secret_hash,
        ):
            self._verified[key_id] = _Verified(digest, row.tenant, row.admin)
            if len(self._verified) > VERIFIED_CACHE:
                self._verified.popitem(last=False)
        else:
            raise invalid_key()
        return Principal(tenant=row.tenant, admin=row.admin, key_id=key_id)


def bearer(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header."""
    if not authorization:
        raise Unauthorized()
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized(
            "the Authorization header must be 'Bearer <key>'", error="invalid_request"
        )
    return token.strip()


def _dig(doc: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(doc, Mapping):
            return None
        doc = doc.get(part)
    return doc


def from_authorizer(
    event: Mapping[str, Any] | None, *, tenant_field: str, admin_field: str | None
) -> Principal:
    """The caller as API Gateway's authorizer described it in the request context.

    ``tenant_field`` and ``admin_field`` are dotted paths under
    ``requestContext.authorizer``: ``lambda.tenant`` for a Lambda authorizer's context,
    ``jwt.claims.tenant`` for a JWT authorizer's claim. No event (not behind API
    Gateway) or no tenant there is 401: this mode never falls back to trusting headers.
    """
    if event is None:
        raise Unauthorized("no API Gateway request context: this deployment trusts its authorizer")
    authorizer = _dig(event, "requestContext.authorizer")
    tenant = _dig(authorizer, tenant_field)
    if not isinstance(tenant, str) or not TENANT.fullmatch(tenant):
        raise Unauthorized(f"the authorizer gave no valid tenant at {tenant_field}")
    admin_value = _dig(authorizer, admin_field) if admin_field else None
    admin = admin_value is True or (
        isinstance(admin_value, str) and admin_value.lower() in ("true", "1", "yes")
    )
    return Principal(tenant=tenant, admin=admin, via="authorizer")
