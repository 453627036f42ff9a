"""The HTTP API given odd input (issue 13, items 11, 13, 14, 16, 17): ambiguous
credentials, a body that repeats a key, a tenant filter, a body nested past what the
parser reads, compressed or not JSON, and empty query parameters. The API in this
process (FastAPI's TestClient) against the test's real database and SQS server."""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any

import pytest

from app.states import JobState
from tests.conftest import bearer, job_row
from tests.integration.conftest import NOOP, written
from tests.integration.test_api_waits import APPROVAL, handle_once, token_of
from tests.integration.test_handlers import (  # noqa: F401 (fixtures)
    FakeLambdaContext,
    api_handler,
    event,
    lambda_env,
)

# What this module checks does not depend on the carrier: it runs on moto only.
pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]


def _nested(levels: int) -> str:
    """A JSON payload of ``levels`` nested objects and arrays."""
    return (
        '{"a":' * (levels // 2)
        + "[" * (levels - levels // 2)
        + "]" * (levels - levels // 2)
        + "}" * (levels // 2)
    )


def test_two_authorization_headers_are_400(api_with: Any, sql: Any) -> None:
    """Issue 13 item 11: with two Authorization headers the first won (valid then revoked
    was 200, A then B was tenant A). Ambiguous credentials are 400, in every shape a
    request can carry them: two headers, or two joined with a comma in one (how API
    Gateway's HTTP API hands repeated headers to Mangum)."""
    api = api_with()
    acme, globex, gone = api.stack.key("acme"), api.stack.key("globex"), api.stack.key("gone")
    sql.execute("UPDATE api_keys SET revoked_at = now() WHERE tenant = 'gone'")
    alone = api.client.get("/v1/me", headers=bearer(acme))
    assert alone.status_code == 200, alone.text

    for first, second in ((acme, gone), (acme, globex), (gone, acme)):
        for headers in (
            [("Authorization", f"Bearer {first}"), ("Authorization", f"Bearer {second}")],
            [("Authorization", f"Bearer {first}, Bearer {second}")],
        ):
            for method, path in (("GET", "/v1/me"), ("POST", "/v1/jobs")):
                resp = api.client.request(method, path, headers=headers, json=NOOP)

                assert resp.status_code == 400, (headers, resp.text)
                assert "more than one Authorization header" in resp.json()["detail"]
                assert 'error="invalid_request"' in resp.headers["WWW-Authenticate"]
    assert written(sql) == (0, 0, 0)


@pytest.mark.sqs_only  # the Lambda handlers run on SQS only
def test_two_keys_joined_by_api_gateway_are_400_through_the_lambda_handler(
    api_handler: Any,  # noqa: F811 (the fixture imported above)
    stack: Any,
    sql: Any,
) -> None:
    """Issue 13 item 11, as it arrives on Lambda: API Gateway's HTTP API (payload v2)
    joins a repeated header's values with commas, and Mangum hands the API one header."""
    good, gone = stack.key("acme"), stack.key("gone")
    sql.execute("UPDATE api_keys SET revoked_at = now() WHERE tenant = 'gone'")
    request = event("apigw_v2_post_job.json")
    joined = f"Bearer {good},Bearer {gone}"
    request = {**request, "headers": {**request["headers"], "authorization": joined}}

    response = api_handler.handler(request, FakeLambdaContext(29))

    assert response["statusCode"] == 400, response
    assert "more than one Authorization header" in json.loads(response["body"])["detail"]
    assert written(sql) == (0, 0, 0)


@pytest.mark.parametrize(
    ("path", "body", "key", "where"),
    [
        pytest.param(
            "/v1/jobs",
            '{"kind": "demo.noop", "kind": "support.triage", "payload": {}}',
            "kind",
            None,
            id="top-level",
        ),
        pytest.param(
            "/v1/jobs",
            '{"kind": "demo.noop", "payload": {"a": {"b": 1, "b": 2}}}',
            "b",
            "payload.a",
            id="in-the-payload",
        ),
        pytest.param(
            "/v1/jobs/batch",
            '{"jobs": [{"kind": "demo.noop", "payload": {}},'
            ' {"kind": "demo.noop", "payload": {}, "\\u0070ayload": {"x": 1}}]}',
            "payload",
            "jobs.1",
            id="in-a-batch-spelled-otherwise",
        ),
    ],
)
def test_a_body_with_a_repeated_key_is_400_and_writes_nothing(
    api_with: Any, sql: Any, path: str, body: str, key: str, where: str | None
) -> None:
    """Issue 13 item 13: {"kind":"demo.noop","kind":"support.triage",…} ran a
    support.triage job (the last value won; a gateway reading the first would disagree).
    A key repeated in any object of the body is 400 naming the key and where it is, and
    nothing is written."""
    api = api_with()
    key_ = api.stack.key("acme")

    resp = api.client.post(
        path, content=body, headers={**bearer(key_), "Content-Type": "application/json"}
    )

    assert resp.status_code == 400, resp.text
    detail = resp.json()["detail"]
    assert f'repeats the key "{key}"' in detail, detail
    if where:
        assert f"in {where}:" in detail, detail
    assert written(sql) == (0, 0, 0)


def test_an_admin_listing_ignored_the_tenant_filter_and_jobs_did_not_say_whose(
    api_with: Any,
) -> None:
    """Issue 13 item 14: GET /v1/jobs?tenant=T with an admin key returned every tenant's
    jobs, and a job's JSON did not say whose it was. An admin narrows to one tenant;
    every job shows its tenant; a tenant key naming another tenant is 403, its own
    tenant is its usual listing."""
    api = api_with()
    for tenant in ("acme", "globex", "globex"):
        assert api.post(tenant).status_code == 202
    admin = bearer(api.stack.key("ops", admin=True))

    everyone = api.client.get("/v1/jobs", headers=admin).json()["items"]
    assert sorted(j["tenant"] for j in everyone) == ["acme", "globex", "globex"]
    one = api.client.get("/v1/jobs", params={"tenant": "globex"}, headers=admin)
    assert one.status_code == 200, one.text
    assert [j["tenant"] for j in one.json()["items"]] == ["globex", "globex"]
    single = api.client.get(f"/v1/jobs/{everyone[0]['id']}", headers=admin).json()
    assert single["tenant"] == everyone[0]["tenant"]

    acme = bearer(api.keys["acme"])
    other = api.client.get("/v1/jobs", params={"tenant": "globex"}, headers=acme)
    assert other.status_code == 403, other.text
    assert "own tenant" in other.json()["detail"]
    own = api.client.get("/v1/jobs", params={"tenant": "acme"}, headers=acme)
    assert [j["tenant"] for j in own.json()["items"]] == ["acme"]


def test_odd_bodies_got_a_400_about_parsing_or_a_422_about_dictionaries(
    api_with: Any, sql: Any
) -> None:
    """Issue 13 item 16: JSON nested 2,000 levels and a gzip body both got 400 "There
    was an error parsing the body", text/plain a 422 about dictionaries. Nesting past
    what the parser reads is the 422 a payload nested 101 levels gets; an unsupported
    Content-Encoding is 415; a Content-Type other than JSON is 415 naming
    application/json. Nothing is written."""
    api = api_with()
    key = bearer(api.stack.key("acme"))
    as_json = {**key, "Content-Type": "application/json"}

    def with_payload(levels: int) -> str:
        return '{"kind": "demo.noop", "payload": ' + _nested(levels) + "}"

    at_101 = api.client.post("/v1/jobs", content=with_payload(101), headers=as_json)
    assert at_101.status_code == 422, at_101.text
    deep = api.client.post("/v1/jobs", content=with_payload(2000), headers=as_json)
    assert deep.status_code == 422, deep.text
    assert deep.json() == at_101.json()
    batch = '{"jobs": [' + with_payload(2000) + "]}"
    deep_batch = api.client.post("/v1/jobs/batch", content=batch, headers=as_json)
    assert deep_batch.status_code == 422, deep_batch.text
    assert "payload: must not nest" in deep_batch.json()["detail"]
    elsewhere = '{"kind": ' + "[" * 2000 + "]" * 2000 + ', "payload": {}}'
    odd = api.client.post("/v1/jobs", content=elsewhere, headers=as_json)
    assert odd.status_code == 422, odd.text
    assert odd.json()["detail"].startswith("body.kind."), odd.text

    zipped = api.client.post(
        "/v1/jobs",
        content=gzip.compress(json.dumps(NOOP).encode()),
        headers={**as_json, "Content-Encoding": "gzip"},
    )
    assert zipped.status_code == 415, zipped.text
    assert "Content-Encoding gzip" in zipped.json()["detail"]
    assert zipped.headers["Accept-Encoding"] == "identity"

    for media in ("text/plain", "application/x-www-form-urlencoded", "application/xml"):
        plain = api.client.post(
            "/v1/jobs", content=json.dumps(NOOP), headers={**key, "Content-Type": media}
        )
        assert plain.status_code == 415, plain.text
        assert media in plain.json()["detail"]
        assert "application/json" in plain.json()["detail"]

    assert written(sql) == (0, 0, 0)
    charset = {**key, "Content-Type": "application/json; charset=utf-8"}
    assert api.client.post("/v1/jobs", content=json.dumps(NOOP), headers=charset).is_success


def test_an_empty_query_parameter_filtered_for_an_empty_value(api_with: Any) -> None:
    """Issue 13 item 17: ?kind= filtered for jobs whose kind is "" (none). A filter sent
    with an empty value is ignored, as if it was not sent: kind, state, tenant, cursor,
    limit, on GET /v1/jobs and GET /v1/dead-letters alike."""
    api = api_with()
    assert api.post("acme").status_code == 202
    assert api.post("acme").status_code == 202
    key = bearer(api.keys["acme"])
    unfiltered = api.client.get("/v1/jobs", headers=key).json()
    assert len(unfiltered["items"]) == 2

    for name in ("kind", "state", "tenant", "cursor", "limit"):
        resp = api.client.get(f"/v1/jobs?{name}=", headers=key)
        assert resp.status_code == 200, (name, resp.text)
        assert resp.json() == unfiltered, name
    both = api.client.get("/v1/jobs?kind=&state=queued", headers=key)
    assert both.json() == unfiltered
    letters = api.client.get("/v1/dead-letters?kind=&limit=", headers=key)
    assert letters.status_code == 200, letters.text


def test_a_json_body_without_a_content_type_is_read_as_json(api: Any, stack: Any, sql: Any) -> None:
    """Issue 30 item 7: the middleware reads a body without a Content-Type as JSON, but
    FastAPI's check of the content type refused it with 422 ("body: Input should be a
    valid dictionary"): on POST /v1/jobs and on POST /v1/callbacks/{token}. A Content-Type
    that is not JSON is still 415 (test_odd_bodies_got_a_400_about_parsing_…)."""
    job = api.post("/v1/jobs", content=json.dumps(APPROVAL))
    assert "content-type" not in job.request.headers
    assert job.status_code == 202, job.text
    asyncio.run(handle_once(stack))
    assert job_row(sql, job.json()["id"])["state"] == JobState.WAITING
    token = token_of(stack, job.json()["id"])

    answer = api.post(
        f"/v1/callbacks/{token}", content=b'{"result": {"ok": 1}}', headers={"Authorization": ""}
    )
    assert "content-type" not in answer.request.headers
    assert answer.status_code == 200, answer.text
    assert job_row(sql, job.json()["id"])["state"] == JobState.QUEUED
    batch = api.post("/v1/jobs/batch", content=json.dumps({"jobs": [NOOP]}))
    assert batch.status_code == 202, batch.text


@pytest.mark.sqs_only  # the Lambda handlers run on SQS only
def test_a_json_body_without_a_content_type_through_api_gateway_is_202(
    api_handler: Any,  # noqa: F811 (the fixture imported above)
    stack: Any,
    sql: Any,
) -> None:
    """Issue 30 item 7, as API Gateway's HTTP API (payload v2) hands Mangum an event whose
    caller sent no Content-Type."""
    request = event("apigw_v2_post_job.json")
    headers = {k: v for k, v in request["headers"].items() if k != "content-type"}
    request = {**request, "headers": {**headers, "authorization": f"Bearer {stack.key()}"}}

    response = api_handler.handler(request, FakeLambdaContext(29))

    assert response["statusCode"] == 202, response
    assert job_row(sql, json.loads(response["body"])["id"])["kind"] == "support.triage"
