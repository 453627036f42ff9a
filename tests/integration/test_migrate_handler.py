"""The migrate function is also the operator's way to make and revoke keys on AWS."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.test_handlers import (  # lambda_env: the function's environment
    FakeLambdaContext,
    cold_start,
    lambda_env,  # noqa: F401 - a fixture, used by name
)

# The Lambda handlers run on SQS only (a function on the Redis carrier fails at cold start).
pytestmark = [pytest.mark.integration, pytest.mark.sqs_only]


@pytest.fixture
def migrate(lambda_env: dict[str, str]) -> Iterator[types.ModuleType]:  # noqa: F811 - the fixture
    import sys

    module = cold_start("handlers.migrate")
    yield module
    sys.modules.pop("handlers.migrate", None)
    from handlers import runtime

    runtime.loop().close()  # the process's loop, as Lambda would keep it; a later test makes anew
    asyncio.set_event_loop(None)


def test_no_action_applies_the_migrations_idempotently(migrate: types.ModuleType) -> None:
    assert migrate.handler({}, FakeLambdaContext()) == {"applied": []}  # the template is migrated


def test_create_key_returns_the_key_once_and_stores_only_its_hash(
    migrate: types.ModuleType, sql: Any
) -> None:
    made = migrate.handler(
        {"action": "create_key", "tenant": "acme", "name": "billing"}, FakeLambdaContext()
    )
    assert made["key"].startswith(f"tlk_{made['key_id']}_")
    assert (made["tenant"], made["name"], made["admin"], made["revoked_at"]) == (
        "acme",
        "billing",
        False,
        None,
    )
    secret = made["key"].split("_", 2)[2]
    row = sql.execute("SELECT * FROM api_keys WHERE id = %s", (made["key_id"],)).fetchone()
    assert secret.encode() not in bytes(row["secret_hash"]) and secret not in str(row)

    listed = migrate.handler({"action": "list_keys", "tenant": "acme"}, FakeLambdaContext())
    assert [k["key_id"] for k in listed["keys"]] == [made["key_id"]]
    assert "key" not in listed["keys"][0]

    revoked = migrate.handler(
        {"action": "revoke_key", "key_id": made["key_id"]}, FakeLambdaContext()
    )
    assert revoked["revoked_at"] is not None


@pytest.mark.parametrize(
    ("event", "says"),
    [
        ({"action": "explode"}, "unknown action 'explode'"),
        ({"action": "create_key"}, "needs a string 'tenant'"),
        ({"action": "create_key", "tenant": "no spaces allowed"}, "tenant 'no spaces allowed'"),
        ({"action": "create_key", "tenant": "acme", "admin": "yes"}, "'admin' must be"),
        ({"action": "revoke_key"}, "needs a string 'key_id'"),
        ({"action": "revoke_key", "key_id": "0123456789ab"}, "no key 0123456789ab"),
    ],
)
def test_a_bad_event_is_an_error_naming_what_is_wrong_and_writes_nothing(
    migrate: types.ModuleType, sql: Any, event: dict[str, Any], says: str
) -> None:
    answer = migrate.handler(event, FakeLambdaContext())
    assert says in answer["error"]
    assert sql.execute("SELECT count(*) AS n FROM api_keys").fetchone()["n"] == 0
