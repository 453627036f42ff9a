"""TASKLEASE_AUTH_MODE=authorizer through the Lambda handler (Mangum), fed API Gateway
HTTP API (payload v2) events in the shape AWS sends after a Lambda authorizer said yes.

The caller is whoever requestContext.authorizer names; a Bearer header is never an
identity in this mode, not even a valid key of ours.

No asyncio.run() on the main thread in this module: Mangum runs each invocation on the
main thread's event loop (see the api_handler fixture in test_handlers.py).
"""

from __future__ import annotations

import copy
import json
import types
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from app.api import create_app
from app.states import JobState
from tests.conftest import Stack, bearer, job_row
from tests.helpers import close_api_handler
from tests.integration.test_handlers import FakeLambdaContext, cold_start, event

with warnings.catch_warnings():
    # starlette >= 1.10 warns at import that it found httpx rather than httpx2 (see test_api.py).
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

# The Lambda handlers run on SQS only (a function on the Redis carrier fails at cold start).
pytestmark = [pytest.mark.integration, pytest.mark.sqs_only]

FIXTURE = "apigw_v2_post_job_lambda_authorizer.json"
NOOP = {"kind": "demo.noop", "payload": {}}
CHALLENGE = 'Bearer realm="tasklease"'


@pytest.fixture
def handler(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """handlers.api cold-started with the function's environment, in authorizer mode."""
    env = {k: v for k, v in stack.env.items() if k.startswith(("TASKLEASE_", "AWS_"))}
    env["TASKLEASE_AUTH_MODE"] = "authorizer"
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("TASKLEASE_AUTHORIZER_TENANT_FIELD", raising=False)
    monkeypatch.delenv("TASKLEASE_AUTHORIZER_ADMIN_FIELD", raising=False)
    module = cold_start("handlers.api")
    assert module.settings.auth_mode == "authorizer"
    yield module
    close_api_handler(module)


def invoke(handler: types.ModuleType, request: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
    response = handler.handler(request, FakeLambdaContext(29))
    headers = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    body = json.loads(response["body"]) if response.get("body") else None
    return response["statusCode"], body, headers


def as_get(request: dict[str, Any], path: str, query: str = "") -> dict[str, Any]:
    """The same caller's GET: what API Gateway sends for it (no body, no content headers)."""
    get = copy.deepcopy(request)
    get["rawPath"] = path
    get["rawQueryString"] = query
    get["requestContext"]["http"]["method"] = "GET"
    get["requestContext"]["http"]["path"] = path
    for name in ("content-length", "content-type", "idempotency-key"):
        get["headers"].pop(name, None)
    get.pop("body", None)
    return get


def with_context(request: dict[str, Any], **context: Any) -> dict[str, Any]:
    changed = copy.deepcopy(request)
    changed["requestContext"]["authorizer"]["lambda"] = context
    return changed


def without_authorizer(request: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(request)
    del changed["requestContext"]["authorizer"]
    return changed


def with_header(request: dict[str, Any], name: str, value: str) -> dict[str, Any]:
    changed = copy.deepcopy(request)
    changed["headers"][name] = value
    return changed


def count_jobs(sql: Any) -> int:
    return int(sql.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"])


def test_the_fixture_is_a_lambda_authorizer_event_as_aws_sends_it() -> None:
    request = event(FIXTURE)
    assert request["version"] == "2.0"
    assert request["requestContext"]["authorizer"] == {
        "lambda": {"tenant": "globex", "admin": False}
    }
    # The authorizer's identity source is passed through to the integration too.
    assert request["headers"]["authorization"].startswith("Bearer ")
    assert int(request["headers"]["content-length"]) == len(request["body"].encode())


def test_the_job_belongs_to_the_tenant_the_authorizer_named(
    handler: types.ModuleType, stack: Stack, sql: Any
) -> None:
    request = event(FIXTURE)

    status, job, headers = invoke(handler, request)

    assert status == 202, job
    assert headers["location"] == f"/v1/jobs/{job['id']}"
    row = job_row(sql, job["id"])
    assert row["tenant"] == "globex"
    assert row["idempotency_key"] == "apigw-authorizer-fixture-1"
    assert row["state"] == JobState.QUEUED
    assert count_jobs(sql) == 1

    status, me, _ = invoke(handler, as_get(request, "/v1/me"))
    assert (status, me) == (
        200,
        {"tenant": "globex", "admin": False, "key_id": None, "via": "authorizer"},
    )
    # The tenant reads its job; another tenant the authorizer vouches for does not see it.
    status, read, _ = invoke(handler, as_get(request, f"/v1/jobs/{job['id']}"))
    assert (status, read["id"]) == (200, job["id"])
    other = with_context(request, tenant="acme", admin=False)
    status, hidden, _ = invoke(handler, as_get(other, f"/v1/jobs/{job['id']}"))
    assert (status, hidden) == (404, {"detail": f"no job {job['id']}"})
    status, page, _ = invoke(handler, as_get(other, "/v1/jobs"))
    assert (status, page["items"]) == (200, [])


def test_without_the_authorizer_context_the_request_is_401_and_writes_nothing(
    handler: types.ModuleType, sql: Any
) -> None:
    request = without_authorizer(event(FIXTURE))

    status, body, headers = invoke(handler, request)

    assert status == 401, body
    assert headers["www-authenticate"].startswith(CHALLENGE)
    assert "lambda.tenant" in body["detail"]
    assert count_jobs(sql) == 0
    # Nor is a context without a usable tenant an identity.
    for context in ({}, {"tenant": ""}, {"tenant": "../acme"}, {"admin": True}):
        status, _, _ = invoke(handler, with_context(event(FIXTURE), **context))
        assert status == 401, context
    assert count_jobs(sql) == 0


def test_a_bearer_key_is_not_trusted_in_authorizer_mode(
    handler: types.ModuleType, stack: Stack, sql: Any
) -> None:
    # A valid admin key of ours, which api_key mode would accept.
    key = stack.key("acme", admin=True)
    bare = with_header(without_authorizer(event(FIXTURE)), "authorization", f"Bearer {key}")

    status, _, _ = invoke(handler, bare)
    assert status == 401
    status, _, _ = invoke(handler, as_get(bare, "/v1/me"))
    assert status == 401
    assert count_jobs(sql) == 0

    # With the authorizer's context, the context decides: globex, not admin, not acme.
    both = with_header(event(FIXTURE), "authorization", f"Bearer {key}")
    status, job, _ = invoke(handler, both)
    assert status == 202, job
    assert job_row(sql, job["id"])["tenant"] == "globex"
    status, me, _ = invoke(handler, as_get(both, "/v1/me"))
    assert me == {"tenant": "globex", "admin": False, "key_id": None, "via": "authorizer"}
    status, _, _ = invoke(handler, as_get(both, "/v1/dead-letters", "tenant=acme"))
    assert status == 403


def test_an_authorizer_that_says_admin_gives_operator_scope(
    handler: types.ModuleType, sql: Any
) -> None:
    status, job, _ = invoke(handler, event(FIXTURE))
    assert status == 202
    operator = with_context(event(FIXTURE), tenant="ops", admin=True)

    status, me, _ = invoke(handler, as_get(operator, "/v1/me"))
    assert me == {"tenant": "ops", "admin": True, "key_id": None, "via": "authorizer"}
    status, read, _ = invoke(handler, as_get(operator, f"/v1/jobs/{job['id']}"))
    assert (status, read["id"]) == (200, job["id"])
    status, dead, _ = invoke(handler, as_get(operator, "/v1/dead-letters", "tenant=globex"))
    assert (status, dead) == (200, [])


def test_in_authorizer_mode_a_server_not_behind_api_gateway_refuses_everyone(
    stack: Stack, sql: Any
) -> None:
    """uvicorn, or anything else with no API Gateway event: 401, even with a valid key."""
    key = stack.key("acme", admin=True)
    with TestClient(create_app(stack.with_settings(auth_mode="authorizer"))) as client:
        post = client.post("/v1/jobs", json=NOOP, headers=bearer(key))
        me = client.get("/v1/me", headers=bearer(key))
    assert post.status_code == me.status_code == 401
    assert "API Gateway" in me.json()["detail"]
    assert count_jobs(sql) == 0
