"""Lambda entry point for the operator's database work (the database is private on AWS).

- ``{}`` (or any event without "action"): apply the migrations. Invoke it once after
  each deploy: ``aws lambda invoke --function-name <prefix>-migrate out.json``. Safe to
  run concurrently and again: applied migrations are skipped.
- ``{"action": "create_key", "tenant": "acme", "name": "billing", "admin": false}``:
  a new API key, returned once in the response (never logged).
- ``{"action": "revoke_key", "key_id": "0123456789ab"}``: revoke a key.
- ``{"action": "list_keys", "tenant": "acme"}``: key ids, tenants and scopes.

Only principals allowed to invoke this function can do these: it is the operator's
console for a database nobody else can reach.
"""

from __future__ import annotations

from typing import Any

from app import errors, store
from app.services import auth
from app.transport import secrets
from handlers import runtime

settings = runtime.load_settings()
settings.need("database_url")


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "key_id": row["id"],
        "tenant": row["tenant"],
        "name": row["name"],
        "admin": row["admin"],
        "created_at": row["created_at"].isoformat(),
        "revoked_at": row["revoked_at"].isoformat() if row["revoked_at"] else None,
    }


async def _keys(event: dict[str, Any]) -> dict[str, Any]:
    action = event["action"]
    async with store.connect(secrets.database_url(settings), min_size=1, max_size=1) as database:
        if action == "create_key":
            tenant, name, admin = event.get("tenant"), event.get("name", ""), event.get("admin")
            if not isinstance(tenant, str) or not isinstance(name, str):
                raise errors.BadRequest("create_key needs a string 'tenant' (and 'name', if any)")
            if admin is not None and not isinstance(admin, bool):
                raise errors.BadRequest("create_key: 'admin' must be true or false")
            made = await auth.create_key(database, tenant, name=name, admin=bool(admin))
            return {"key": made.key, **_public(made.row)}
        if action == "revoke_key":
            key_id = event.get("key_id")
            if not isinstance(key_id, str):
                raise errors.BadRequest("revoke_key needs a string 'key_id'")
            return _public(await auth.revoke_key(database, key_id))
        tenant = event.get("tenant")
        if tenant is not None and not isinstance(tenant, str):
            raise errors.BadRequest("list_keys: 'tenant' must be a string")
        return {"keys": [_public(r) for r in await auth.list_keys(database, tenant)]}


ACTIONS = ("create_key", "revoke_key", "list_keys")


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    action = event.get("action") if isinstance(event, dict) else None
    if action is None:
        applied = runtime.run(lambda: store.migrate(secrets.database_url(settings)))
        return {"applied": applied}
    if action not in ACTIONS:
        return {
            "error": f"unknown action {action!r}; known: migrate (no action), {', '.join(ACTIONS)}"
        }
    try:
        return runtime.run(lambda: _keys(event))
    except (errors.BadRequest, errors.NotFound) as exc:
        return {"error": str(exc)}
