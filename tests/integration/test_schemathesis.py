"""The OpenAPI document against the running API: schemathesis generates requests for
every operation, sends them over HTTP to a real API process (real PostgreSQL, moto's SQS
server) and checks every answer against what the document promises: no 5xx, a
documented status code, the documented content type, a body matching the documented
schema.

Where the document comes from: schemathesis' fixture-based loader
(``schemathesis.pytest.from_fixture``), which would read /openapi.json from the server
the fixtures start, does not run on the pytest this project locks (schemathesis 4.32.5
reads and writes ``request.node._nodeid``, which pytest 9.2 no longer has: every test
fails with AttributeError). So the tests are generated at collection from the document
``app.api`` builds, and ``test_the_live_document_is_the_one_the_requests_are_generated_from``
fails if the running server serves anything else.

A server that cannot start fails the tests in CI (tests/conftest.py: unavailable()).
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
import schemathesis

from app import api
from app.settings.config import Settings
from app.states import JobState
from app.tools.stack import embedded
from app.transport import codec
from app.worker import event_source_mapping as eventsource
from tests import carrier
from tests.conftest import Stack, bearer
from tests.helpers import QUEUE_ARN, engine_for

# What this module checks does not depend on the carrier: it runs on moto only.
pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]

# Bounded and repeatable: at most this many generated requests per operation and mode,
# the same ones on every run (derandomized, a fixed seed, no example database).
MAX_EXAMPLES = 30
SEED = 20261202
# What every answer is checked for (schemathesis' names).
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
)
# High enough that 429 (documented, and tested in tests/integration/test_api.py) never
# masks what the generated requests reach.
UNLIMITED = {
    "TASKLEASE_RATE_LIMIT_PER_SECOND": "100000",
    "TASKLEASE_RATE_LIMIT_BURST": "1000000",
    # The anonymous run sends an unknown key on purpose, many times from one address.
    "TASKLEASE_AUTH_FAILURE_LIMIT": "100000/minute",
}
# Placeholders: building the document opens no connection.
DOCUMENT = api.create_app(
    Settings(database_url="postgresql://unused", queue_url="http://unused", dlq_url="http://unused")
).openapi()


def load(*, max_examples: int, mode: str = "all") -> Any:
    return schemathesis.openapi.from_dict(
        DOCUMENT,
        config=schemathesis.Config.from_dict(
            {
                "seed": SEED,
                "generation": {
                    "mode": mode,
                    "max-examples": max_examples,
                    "deterministic": True,
                    "database": "none",
                    # The Authorization header is the test's to set (a real key, or none).
                    "with-security-parameters": False,
                },
                "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
            }
        ),
    )


schema = load(max_examples=MAX_EXAMPLES)
# What an admin key may do that a tenant's key is refused (403): run those with both.
# Fewer examples: a redrive of the whole DLQ waits a second for its last, empty receive.
admin_schema = load(max_examples=10).include(
    path_regex=r"^/v1/(dead-letters|workers|alerts/webhooks)"
)
# Positive data only: with a body that is not JSON the answer is 400 before any key is
# looked at (FastAPI parses the body first), which is right but not what this run is about.
anonymous_schema = load(max_examples=8, mode="positive").include(
    path_regex=r"^/v1/(jobs|jobs/\{job_id\}|me)$"
)


@pytest.fixture(scope="module")
def api_url(module_stack: Stack) -> str:
    module_stack.env.update(UNLIMITED)
    return module_stack.api()


@pytest.fixture(scope="module")
def tenant_key(module_stack: Stack) -> str:
    return module_stack.key("fuzz")


@pytest.fixture(scope="module")
def admin_key(module_stack: Stack) -> str:
    return module_stack.key("ops", admin=True)


def test_the_live_document_is_the_one_the_requests_are_generated_from(api_url: str) -> None:
    live = httpx.get(f"{api_url}/openapi.json", timeout=30)
    assert live.status_code == 200
    assert live.json() == DOCUMENT


def bounded(case: schemathesis.Case) -> schemathesis.Case:
    """A stream route answers a long poll here, at once: its Server-Sent Events never end
    for a tenant, and a long poll waits up to 20 s by default (tests/integration/
    test_streams.py covers both). A generated ``after`` is kept: a bad one must be 422."""
    if case.path.endswith("/stream"):
        case.query = {**(case.query or {}), "wait": 0}
        case.query.setdefault("after", "0")
    return case


@schema.parametrize()
def test_every_operation_answers_as_documented(
    case: schemathesis.Case, api_url: str, tenant_key: str
) -> None:
    response = bounded(case).call_and_validate(base_url=api_url, headers=bearer(tenant_key))
    assert response.status_code != 401, "a valid key was refused"


@admin_schema.parametrize()
def test_admin_operations_answer_an_admin_key_as_documented(
    case: schemathesis.Case, api_url: str, admin_key: str
) -> None:
    response = bounded(case).call_and_validate(base_url=api_url, headers=bearer(admin_key))
    assert response.status_code not in (401, 403), "an admin key was refused"


NOT_A_KEY = {
    "no header": {},
    "another scheme": {"Authorization": "Basic dXNlcjpwYXNz"},
    "not one of our keys": {"Authorization": "Bearer nope"},
    "an unknown key": bearer("tlk_000000000000_" + "x" * 43),
}


@anonymous_schema.parametrize()
def test_without_a_valid_key_the_answer_is_a_documented_401(
    case: schemathesis.Case, api_url: str
) -> None:
    for what, headers in NOT_A_KEY.items():
        response = bounded(case).call_and_validate(base_url=api_url, headers=headers)
        assert response.status_code == 401, what
        assert response.headers["www-authenticate"][0].startswith("Bearer"), what
        assert response.json()["detail"], what


async def _run_to_the_end(settings: Settings, job_id: str) -> dict[str, Any]:
    """Run one job with the engine, from a record shaped as Lambda sends one."""
    async with engine_for(settings) as engine:
        message = {
            "MessageId": str(uuid.uuid4()),
            "ReceiptHandle": f"handle-{job_id}",
            "Body": codec.body_for(job_id),
        }
        record = eventsource.to_record(message, queue_arn=QUEUE_ARN, region="us-east-1")
        return await engine.handle({"Records": [record]}, None)


@pytest.mark.asyncio
async def test_real_jobs_answer_every_job_route_as_documented(
    module_stack: Stack, api_url: str, tenant_key: str
) -> None:
    """Generated job ids are nearly all 404s: here jobs that exist, in the states whose
    answers carry bodies (events, effects, a dead letter), go through every job route."""

    def submitted(kind: str, payload: dict[str, Any]) -> str:
        answer = schema["/v1/jobs"]["POST"].Case(body={"kind": kind, "payload": payload})
        response = answer.call_and_validate(base_url=api_url, headers=bearer(tenant_key))
        assert response.status_code == 202, response.text
        return str(response.json()["id"])

    done = submitted("demo.sleep", {"seconds": 0, "steps": 2})
    dead = submitted("demo.flaky", {"permanent": True})
    waiting = submitted("demo.noop", {})
    for job_id in (done, dead):
        assert await _run_to_the_end(module_stack.settings, job_id) == {"batchItemFailures": []}

    def call(method: str, path: str, job_id: str | None = None, **query: Any) -> Any:
        operation = schema[path][method]
        case = operation.Case(
            path_parameters={"job_id": job_id} if job_id else None, query=query or None
        )
        return case.call_and_validate(base_url=api_url, headers=bearer(tenant_key))

    job = call("GET", "/v1/jobs/{job_id}", done).json()
    assert job["state"] == JobState.SUCCEEDED
    assert [e["to_state"] for e in call("GET", "/v1/jobs/{job_id}/events", done).json()][-1] == (
        JobState.SUCCEEDED
    )
    assert [e["key"] for e in call("GET", "/v1/jobs/{job_id}/effects", done).json()] == [
        "step-0",
        "step-1",
    ]
    assert call("POST", "/v1/jobs/{job_id}/cancel", done).status_code == 409
    assert call("POST", "/v1/jobs/{job_id}/redrive", done).status_code == 409
    listed = call("GET", "/v1/dead-letters").json()
    assert dead in [j["id"] for j in listed]
    assert call("GET", "/v1/jobs", state="dead_lettered", limit=1).json()["items"]
    assert call("POST", "/v1/jobs/{job_id}/redrive", dead).status_code == 202
    cancelled = call("POST", "/v1/jobs/{job_id}/cancel", waiting).json()
    assert cancelled["state"] == JobState.CANCELLED
    assert call("GET", "/v1/me").json()["tenant"] == "fuzz"


DEEP: list[Any] = []
for _ in range(300):  # pydantic serializes at most 255 levels
    DEEP = [DEEP]
JSON = {"Content-Type": "application/json"}

# Input the API cannot store or serve back: each was a 500 (the NUL in a tenant filter was
# found by the generated requests above; the rest are its kin). Each is now a documented
# 422 naming the field.
UNSTORABLE = [
    pytest.param("GET", "/v1/jobs", {"params": {"kind": "a\x00b"}}, "kind", id="NUL in a filter"),
    pytest.param(
        "GET", "/v1/dead-letters", {"params": {"kind": "a\x00b"}}, "kind", id="NUL in kind"
    ),
    pytest.param(
        "GET", "/v1/dead-letters", {"params": {"tenant": "a\x00b"}}, "tenant", id="NUL in tenant"
    ),
    pytest.param(
        "POST",
        "/v1/dead-letters/redrive",
        {"json": {"kind": "a\x00b"}},
        "kind",
        id="NUL in a body",
    ),
    pytest.param(
        "POST",
        "/v1/dead-letters/redrive",
        {"content": b'{"kind": "\\ud800"}', "headers": JSON},
        "kind",
        id="lone surrogate",
    ),
    pytest.param(
        "POST",
        "/v1/dead-letters/redrive",
        {"json": {"tenant": "acme\n"}},
        "tenant",
        id="a tenant no key can have",
    ),
    pytest.param(
        "POST",
        "/v1/jobs",
        {"json": {"kind": "demo.noop", "payload": {"note": "a\x00b"}}},
        "payload",
        id="NUL in a payload",
    ),
    pytest.param(
        "POST",
        "/v1/jobs",
        {"content": b'{"kind": "demo.noop", "payload": {"\\ud800": 1}}', "headers": JSON},
        "payload",
        id="lone surrogate in a payload key",
    ),
    pytest.param(
        "POST",
        "/v1/jobs",
        {"content": b'{"kind": "demo.noop", "payload": {"n": 1e400}}', "headers": JSON},
        "payload",
        id="Infinity in a payload",
    ),
    pytest.param(
        "POST",
        "/v1/jobs",
        {"content": b'{"kind": "demo.noop", "payload": {"n": NaN}}', "headers": JSON},
        "payload",
        id="NaN in a payload",
    ),
    pytest.param(
        "POST",
        "/v1/jobs",
        {"json": {"kind": "demo.noop", "payload": {"deep": DEEP}}},
        "payload",
        id="a payload nested 300 deep",
    ),
]


@pytest.mark.parametrize(("method", "path", "request_kw", "field"), UNSTORABLE)
def test_input_the_api_cannot_store_is_a_documented_422(
    api_url: str, admin_key: str, method: str, path: str, request_kw: dict[str, Any], field: str
) -> None:
    with httpx.Client(base_url=api_url, headers=bearer(admin_key), timeout=30) as client:
        response = client.request(method, path, **request_kw)
    schema[path][method].validate_response(response)
    assert response.status_code == 422, response.text
    assert field in response.json()["detail"]


def test_not_ready_is_answered_as_documented(module_stack: Stack) -> None:
    """/readyz's 503, from an API whose queue does not exist (the database is fine)."""
    port = embedded.free_port()
    proc = module_stack.spawn(
        "api",
        "--port",
        str(port),
        env=carrier.broken_env(module_stack),
        name="api-not-ready",
    )
    embedded.wait_for_http(f"http://127.0.0.1:{port}/healthz", timeout=30, proc=proc)
    response = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=30)
    schema["/readyz"]["GET"].validate_response(response)
    assert response.status_code == 503
    assert response.json()["status"] == "not ready"
    assert response.json()["database"] == "ok"
    assert response.json()["queue"].startswith("unreachable")
