"""Who is calling: API keys per tenant, or the identity API Gateway's authorizer vouched for.

A key reads ``tlk_<id>_<secret>``. The id (12 hex characters) is public: it finds the
row and names the key in ``tasklease keys list`` and ``keys revoke``. The secret is
32 random bytes; only its HMAC-SHA-256 under the server-side secret is stored
(app/services/server_secret.py), and the comparison is constant-time. A guess costs one
HMAC, as a valid key does: a slow hash would protect nothing for secrets this long and
let anyone burn the API's CPU with a public key id. Keys made before migration 0005 hold
a salted scrypt hash; the first successful check re-hashes them with HMAC. Failed checks
are throttled per key id and per client address (app/services/auth_throttle.py).

A process remembers the hashes of keys it has already verified, per key id (with the
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
import logging
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app import errors, store
from app.services import server_secret
from app.services.auth_throttle import AuthThrottle
from app.settings import bounds

log = logging.getLogger(__name__)

PREFIX = "tlk"
# Used with fullmatch: "$" in a Python pattern also matches before a trailing newline,
# which the database's CHECK (same pattern, PostgreSQL semantics) refuses.
KEY_ID = re.compile(r"[0-9a-f]{12}")
TENANT = re.compile(bounds.TENANT_PATTERN)
MAX_KEY_NAME = bounds.MAX_KEY_NAME_CHARS
# How keys made before migration 0005 were hashed (checked once, then re-hashed).
SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}
SCHEME_SCRYPT = "scrypt"
SCHEME_HMAC = "hmac-sha256"
# Verified keys a process remembers (their HMAC, never the secrets).
VERIFIED_CACHE = 4096
DEFAULT_FAILURE_LIMIT = "20/minute"


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


def _scrypt(secret: str, salt: bytes) -> bytes:
    return hashlib.scrypt(secret.encode(), salt=salt, **SCRYPT)


def _hmac(secret: str, server: server_secret.Secrets, under: bytes | None = None) -> bytes:
    """The stored hash of a key's secret, under the current server secret or ``under``."""
    key = server.key(server_secret.KEY_HASH, under)
    return hmac.new(key, secret.encode(), hashlib.sha256).digest()


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
    return await _insert_key(
        db, secrets.token_hex(6), secrets.token_urlsafe(32), tenant, name=name, admin=admin
    )


async def restore_key(db: store.Database, key: str, tenant: str, *, name: str = "") -> NewKey:
    """``key``, given in full (``make run`` keeps its demo key across restarts), stored in
    a database that has no row for its id, hashed as a new key is: the same plaintext key
    then works there."""
    key_id, secret = split_key(key)
    return await _insert_key(db, key_id, secret, tenant, name=name, admin=False)


async def _insert_key(
    db: store.Database, key_id: str, secret: str, tenant: str, *, name: str, admin: bool
) -> NewKey:
    check_tenant(tenant)
    if len(name) > MAX_KEY_NAME:
        raise errors.BadRequest(f"key name must be at most {MAX_KEY_NAME} characters")
    server = await server_secret.of(db).load(db)
    made = await store.keys.create(
        db,
        key_id=key_id,
        tenant=tenant,
        name=name,
        admin=admin,
        secret_hash=_hmac(secret, server),
        hash_secret_id=server.current_id,
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


async def tenant_of(db: store.Database, key: str) -> str | None:
    """The tenant of a live key, by its id (the secret is not checked: an operator command,
    which has the database, picks its default tenant this way); None for an unknown,
    revoked or malformed key."""
    try:
        key_id, _ = split_key(key)
    except Unauthorized:
        return None
    for k in await store.keys.listing(db):
        if k.id == key_id and k.revoked_at is None:
            return k.tenant
    return None


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
    digest: bytes  # HMAC of the secret under the current server secret, never the secret
    tenant: str
    admin: bool


class KeyVerifier:
    """Checks bearer keys against the database; remembers keys it has verified; throttles
    failed checks per key id and per client address."""

    def __init__(
        self,
        db: store.Database,
        *,
        secret: server_secret.ServerSecret | None = None,
        failure_limit: str = DEFAULT_FAILURE_LIMIT,
    ) -> None:
        self.db = db
        self.secret = secret or server_secret.of(db)
        self.throttle = AuthThrottle(failure_limit)
        self._verified: collections.OrderedDict[str, _Verified] = collections.OrderedDict()

    def for_client(self, address: str | None) -> ClientKeys:
        """This verifier for one request's client address (what the throttle counts)."""
        return ClientKeys(self, address)

    async def verify(
        self, key: str, *, defer_revocation: bool = False, client: str | None = None
    ) -> Principal:
        """The caller a key proves, or Unauthorized (TooManyRequests once the key id or
        the client address failed too often). With ``defer_revocation`` a key this
        process verified before is answered from memory, marked ``revocation_pending``:
        the caller's own statement must then check the key (see insert_jobs)."""
        key_id, secret = split_key(key)
        server = await self.secret.load(self.db)
        digest = _hmac(secret, server)
        known = self._verified.get(key_id)
        if known is not None and not hmac.compare_digest(known.digest, digest):
            known = None  # another secret under a known id: the row decides below
        if known is not None and defer_revocation:
            self._verified.move_to_end(key_id)
            return Principal(
                tenant=known.tenant, admin=known.admin, key_id=key_id, revocation_pending=True
            )
        throttled: errors.TooManyRequests | None = None
        if known is None:
            # Over the limit, a wrong key is 429; a right one still passes (checking it
            # costs one HMAC, no more than refusing it), so an attacker who knows a
            # public key id cannot lock its owner out.
            try:
                self.throttle.check(key_id, client)
            except errors.TooManyRequests as exc:
                throttled = exc
        row = await store.keys.secret(self.db, key_id)
        if row is None or row.revoked_at is not None:
            self.throttle.failed(key_id if row else None, client)
            raise throttled or invalid_key()
        if known is not None:
            self._verified.move_to_end(key_id)
        elif throttled is not None and row.scheme != SCHEME_HMAC:
            raise throttled  # a scrypt check is the cost the throttle is there to spare
        elif await self._matches(row, secret, digest, server):
            self._verified[key_id] = _Verified(digest, row.tenant, row.admin)
            if len(self._verified) > VERIFIED_CACHE:
                self._verified.popitem(last=False)
        else:
            self.throttle.failed(key_id, client)
            raise throttled or invalid_key()
        return Principal(tenant=row.tenant, admin=row.admin, key_id=key_id)

    async def _matches(
        self,
        row: store.records.KeySecret,
        secret: str,
        digest: bytes,
        server: server_secret.Secrets,
    ) -> bool:
        """Whether ``secret`` is the key's; a key hashed the old way (scrypt, or under
        another server secret) is re-hashed under the current secret when it matches."""
        if row.scheme == SCHEME_HMAC:
            under = server.known.get(row.hash_secret_id or "")
            if under is None:
                log.warning(
                    "key %s was hashed under a server secret this process does not have "
                    "(TASKLEASE_KEY_HASH_SECRET changed?)",
                    row.id,
                )
                return False
            ok = hmac.compare_digest(_hmac(secret, server, under), row.secret_hash)
            if not ok or row.hash_secret_id == server.current_id:
                return ok
        elif row.salt is None or not hmac.compare_digest(
            # Off the event loop: scrypt takes tens of milliseconds by design.
            await asyncio.to_thread(_scrypt, secret, row.salt),
            row.secret_hash,
        ):
            return False
        await store.keys.rehash(
            self.db,
            row.id,
            old_hash=row.secret_hash,
            secret_hash=digest,
            hash_secret_id=server.current_id,
        )
        return True


@dataclass(frozen=True)
class ClientKeys:
    """A KeyVerifier for one client address: what the API's routes are handed."""

    verifier: KeyVerifier
    address: str | None

    async def verify(self, key: str, *, defer_revocation: bool = False) -> Principal:
        return await self.verifier.verify(
            key, defer_revocation=defer_revocation, client=self.address
        )


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
