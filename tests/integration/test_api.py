"""The HTTP API in this process (FastAPI's TestClient) against the test's real database and queue."""

from __future__ import annotations

import base64
import json
import uuid
import warnings
from typing import Any

import pytest

with warnings.catch_warnings():
    # starlette >= 1.10 warns at import that it found httpx rather than httpx2; the lock
    # pins httpx (the project's own HTTP client), and the TestClient works with it.
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

from app.api import create_app
from app.services import outbox
from app.settings.config import Settings
from app.states import JobState
from tests import carrier
from tests.conftest import Stack, bearer, job_row, run, wait_for
from tests.helpers import count, engine_for, queue_depth, receive_records

pytestmark = pytest.mark.integration

TICKET = {"ticket_id": "T-1", "subject": "Refund please", "body": "I was charged twice."}


def client_for(settings: Settings, key: str | None = None) -> TestClient:
    return TestClient(
        create_app(settings), raise_server_exceptions=True, headers=bearer(key) if key else None
    )


def queue_bodies(stack: Stack, *, wait: int = 1) -> list[dict[str, Any]]:
    return [json.loads(m["Body"]) for m in carrier.receive_raw(stack, wait=wait)]


def post(api: TestClient, body: dict[str, Any], **headers: str) -> Any:
    return api.post("/v1/jobs", json=body, headers=headers)


# --- submitting -------------------------------------------------------------------


def test_post_accepts_the_job_writes_job_and_outbox_and_sends_the_claim_check(
    api: TestClient, stack: Stack, sql: Any
) -> None:
    resp = post(api, {"kind": "support.triage", "payload": TICKET})

    assert resp.status_code == 202, resp.text
    job = resp.json()
    assert resp.headers["Location"] == f"/v1/jobs/{job['id']}"
    assert "Idempotent-Replayed" not in resp.headers
    assert job["state"] == JobState.QUEUED
    assert job["kind"] == "support.triage"
    assert job["payload"] == TICKET
    assert job["attempt"] == 0
    assert job["timeout_seconds"] == 300  # the kind's own timeout
    assert job["max_attempts"] == stack.settings.max_attempts

    row = job_row(sql, job["id"])
    assert row["state"] == JobState.QUEUED
    assert row["payload"] == TICKET
    # The answer came once the message was sent; a long-running API marks the row sent
    # a moment later, together with the others sent meanwhile (outbox.SendRecords).
    outbox = wait_for(
        lambda: [
            r
            for r in sql.execute("SELECT * FROM outbox WHERE job_id = %s", (job["id"],))
            if r["sent_at"] is not None
        ],
        timeout=10,
        what="the outbox row marked sent",
    )
    assert len(outbox) == 1
    assert outbox[0]["send_attempts"] == 1
    events = sql.execute(
        "SELECT to_state, attempt FROM job_events WHERE job_id = %s", (job["id"],)
    ).fetchall()
    assert [(e["to_state"], e["attempt"]) for e in events] == [("queued", 0)]
    assert queue_bodies(stack, wait=2) == [{"job_id": job["id"], "v": 1}]


def test_a_long_running_api_answers_once_sent_and_marks_the_rows_sent_together_later(
    stack: Stack, sql: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A linger longer than the test: the marks wait for the API to stop.
    monkeypatch.setattr(outbox.SendRecords, "LINGER_SECONDS", 600)
    with client_for(stack.settings, stack.key()) as api:
        ids = [post(api, {"kind": "demo.noop", "payload": {}}).json()["id"] for _ in range(3)]
        assert len(queue_bodies(stack, wait=2)) == 3  # sent before each answer
        unsent = sql.execute("SELECT count(*) AS n FROM outbox WHERE sent_at IS NULL")
        assert unsent.fetchone()["n"] == 3  # ... and not yet marked
    # Stopping marks what is pending.
    rows = sql.execute("SELECT sent_at FROM outbox WHERE job_id = ANY(%s::uuid[])", (ids,))
    assert [r["sent_at"] is not None for r in rows] == [True] * 3


def test_post_honours_max_attempts_and_timeout_from_the_request(api: TestClient, sql: Any) -> None:
    resp = post(api, {"kind": "demo.noop", "payload": {}, "max_attempts": 3, "timeout_seconds": 42})
    assert resp.status_code == 202, resp.text
    row = job_row(sql, resp.json()["id"])
    assert (row["max_attempts"], row["timeout_seconds"]) == (3, 42)


def test_the_same_idempotency_key_and_body_replays_the_first_job(
    api: TestClient, stack: Stack, sql: Any
) -> None:
    body = {"kind": "support.triage", "payload": TICKET}
    first = post(api, body, **{"Idempotency-Key": "order-42"})
    second = post(api, body, **{"Idempotency-Key": "order-42"})

    assert first.status_code == second.status_code == 202
    assert second.json()["id"] == first.json()["id"]
    assert second.headers["Idempotent-Replayed"] == "true"
    assert second.headers["Location"] == first.headers["Location"]
    assert count(sql, "jobs") == 1
    assert count(sql, "outbox") == 1
    assert queue_bodies(stack, wait=2) == [{"job_id": first.json()["id"], "v": 1}]


def test_the_same_idempotency_key_with_another_body_is_a_conflict_that_changes_nothing(
    api: TestClient, sql: Any
) -> None:
    first = post(
        api, {"kind": "support.triage", "payload": TICKET}, **{"Idempotency-Key": "order-43"}
    )
    before = job_row(sql, first.json()["id"])

    other = post(
        api,
        {"kind": "support.triage", "payload": {**TICKET, "subject": "Another"}},
        **{"Idempotency-Key": "order-43"},
    )

    assert other.status_code == 409
    assert "Idempotency-Key" in other.json()["detail"]
    assert count(sql, "jobs") == 1
    assert count(sql, "outbox") == 1
    assert job_row(sql, first.json()["id"]) == before


def test_different_idempotency_keys_make_different_jobs(api: TestClient, sql: Any) -> None:
    body = {"kind": "demo.noop", "payload": {}}
    a = post(api, body, **{"Idempotency-Key": "k-a"})
    b = post(api, body, **{"Idempotency-Key": "k-b"})
    assert a.json()["id"] != b.json()["id"]
    assert count(sql, "jobs") == 2


@pytest.mark.parametrize(
    ("body", "mentions"),
    [
        ({"kind": "no.such.kind", "payload": {}}, "no.such.kind"),
        (
            {"kind": "support.triage", "payload": {"ticket_id": "T-1", "body": "b"}},
            "payload.subject",
        ),
        ({"kind": "demo.sleep", "payload": {"seconds": -1}}, "payload.seconds"),
        ({"kind": "demo.noop", "payload": {}, "max_attempts": 0}, "max_attempts"),
        ({"kind": "demo.noop", "payload": {}, "max_attempts": 1000}, "max_attempts"),
        # Within the model's range but not below the queue's maxReceiveCount (20).
        ({"kind": "demo.noop", "payload": {}, "max_attempts": 50}, "max_attempts"),
        ({"kind": "demo.noop", "payload": {}, "timeout_seconds": 0}, "timeout_seconds"),
        ({"kind": "demo.noop", "payload": {}, "timeout_seconds": 43201}, "timeout_seconds"),
        ({"kind": "demo.noop"}, "payload"),
        ({"kind": "demo.noop", "payload": []}, "payload"),
        ({"kind": "demo.noop", "payload": {}, "priority": 1}, "priority"),
        ({"payload": {}}, "kind"),
    ],
)
def test_bad_input_is_a_422_naming_the_problem_and_writes_nothing(
    api: TestClient, stack: Stack, sql: Any, body: dict[str, Any], mentions: str
) -> None:
    resp = post(api, body)
    assert resp.status_code == 422, resp.text
    assert mentions in json.dumps(resp.json()["detail"])
    assert count(sql, "jobs") == 0
    assert count(sql, "outbox") == 0
    assert queue_depth(stack) == 0


def test_malformed_json_is_a_400_and_writes_nothing(api: TestClient, sql: Any) -> None:
    resp = api.post(
        "/v1/jobs",
        content=b'{"kind": "demo.noop", "payload": ',
        headers={"content-type": "application/json"},
    )
    assert resp.status_code == 400
    assert resp.json()["detail"].startswith("the body is not valid JSON")
    assert count(sql, "jobs") == 0


def test_an_idempotency_key_longer_than_200_characters_is_refused(
    api: TestClient, sql: Any
) -> None:
    resp = post(api, {"kind": "demo.noop", "payload": {}}, **{"Idempotency-Key": "k" * 201})
    assert resp.status_code == 422
    assert count(sql, "jobs") == 0


# --- reading ----------------------------------------------------------------------


def test_get_returns_the_job(api: TestClient) -> None:
    job = post(api, {"kind": "demo.noop", "payload": {"x": 1}}).json()
    resp = api.get(f"/v1/jobs/{job['id']}")
    assert resp.status_code == 200
    # The one job's answer adds its children, its model usage, the jobs re-run or
    # forked from it and its standing on its key (none: no key) to the job as every
    # route answers it.
    no_usage = {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0, "models": []}
    more = {
        "children": [],
        "children_count": 0,
        "usage": no_usage,
        "reruns": [],
        "key_status": None,
    }
    assert resp.json() == {**job, **more}
    assert job["parent_id"] is None and job["waiting_for"] is None


def test_get_of_an_unknown_job_is_404(api: TestClient) -> None:
    missing = uuid.uuid4()
    resp = api.get(f"/v1/jobs/{missing}")
    assert resp.status_code == 404
    assert str(missing) in resp.json()["detail"]
    assert api.get(f"/v1/jobs/{missing}/events").status_code == 404
    assert api.get(f"/v1/jobs/{missing}/effects").status_code == 404


def test_get_of_a_job_id_that_is_not_a_uuid_is_422(api: TestClient) -> None:
    resp = api.get("/v1/jobs/not-a-uuid")
    assert resp.status_code == 422
    assert resp.json()["detail"].startswith("path.job_id: ")


def test_list_filters_by_state_and_kind(api: TestClient, sql: Any) -> None:
    noop_a = post(api, {"kind": "demo.noop", "payload": {}}).json()["id"]
    noop_b = post(api, {"kind": "demo.noop", "payload": {}}).json()["id"]
    cancelled_noop = post(api, {"kind": "demo.noop", "payload": {}}).json()["id"]
    post(api, {"kind": "demo.sleep", "payload": {}})
    sql.execute("UPDATE jobs SET state = 'cancelled' WHERE id = %s", (cancelled_noop,))

    resp = api.get("/v1/jobs", params={"state": "queued", "kind": "demo.noop"})

    assert resp.status_code == 200
    page = resp.json()
    assert sorted(j["id"] for j in page["items"]) == sorted([noop_a, noop_b])
    assert all(j["state"] == "queued" and j["kind"] == "demo.noop" for j in page["items"])
    assert page["next_cursor"] is None
    cancelled = api.get("/v1/jobs", params={"state": "cancelled"}).json()["items"]
    assert [j["id"] for j in cancelled] == [cancelled_noop]
    assert len(api.get("/v1/jobs").json()["items"]) == 4


def test_list_with_an_unknown_state_is_422(api: TestClient) -> None:
    assert api.get("/v1/jobs", params={"state": "exploded"}).status_code == 422


def test_cursor_pagination_walks_every_job_once_newest_first(api: TestClient) -> None:
    created = [post(api, {"kind": "demo.noop", "payload": {"n": i}}).json()["id"] for i in range(5)]
    pages: list[list[str]] = []
    cursor: str | None = None
    for _ in range(10):
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        resp = api.get("/v1/jobs", params=params)
        assert resp.status_code == 200, resp.text
        pages.append([j["id"] for j in resp.json()["items"]])
        cursor = resp.json()["next_cursor"]
        if cursor is None:
            break

    assert [len(p) for p in pages] == [2, 2, 1]
    walked = [job_id for page in pages for job_id in page]
    assert walked == list(reversed(created))  # no duplicates, no gaps, newest first


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "a",
        base64.urlsafe_b64encode(b"\xff\xfe\xfd").decode(),
        base64.urlsafe_b64encode(b"yesterday|not-a-uuid").decode(),
        base64.urlsafe_b64encode(b"no separator").decode(),
    ],
)
def test_a_cursor_this_api_did_not_return_is_422(api: TestClient, cursor: str) -> None:
    resp = api.get("/v1/jobs", params={"cursor": cursor})
    assert resp.status_code == 422
    assert "cursor" in resp.json()["detail"]


def test_list_limit_outside_1_to_200_is_422(api: TestClient) -> None:
    assert api.get("/v1/jobs", params={"limit": 0}).status_code == 422
    assert api.get("/v1/jobs", params={"limit": 201}).status_code == 422


def test_events_and_effects_show_the_run_of_a_job(api: TestClient, stack: Stack, sql: Any) -> None:
    job_id = post(api, {"kind": "support.triage", "payload": TICKET}).json()["id"]

    async def work() -> dict[str, Any]:
        async with engine_for(stack.settings) as engine:
            return await engine.handle({"Records": await receive_records(engine)}, None)

    assert run(work()) == {"batchItemFailures": []}

    events = api.get(f"/v1/jobs/{job_id}/events")
    assert events.status_code == 200
    timeline = [(e["from_state"], e["to_state"], e["attempt"], e["worker"]) for e in events.json()]
    assert timeline == [
        (None, "queued", 0, None),
        ("queued", "leased", 1, "test-engine"),
        ("leased", "running", 1, "test-engine"),
        ("running", "succeeded", 1, "test-engine"),
    ]
    stamps = [e["at"] for e in events.json()]
    assert stamps == sorted(stamps)

    effects = api.get(f"/v1/jobs/{job_id}/effects")
    assert effects.status_code == 200
    recorded = effects.json()
    assert [(e["key"], e["seq"], e["attempt"], e["worker"]) for e in recorded] == [
        ("triage", 0, 1, "test-engine"),
        ("post", 1, 1, "test-engine"),
    ]
    assert recorded[0]["result"]["category"] == "billing"
    assert recorded[1]["result"] == {"delivered": False, "reason": "no webhook configured"}

    job = api.get(f"/v1/jobs/{job_id}").json()
    assert job["state"] == "succeeded"
    assert job["result"]["category"] == "billing"
    assert job["finished_at"] is not None


# --- health -----------------------------------------------------------------------


def test_healthz_is_200(api: TestClient) -> None:
    resp = api.get("/healthz")
    assert resp.status_code == 200
    assert resp.json() == {"status": "ok"}


def test_readyz_is_200_when_the_database_and_the_queue_answer(api: TestClient) -> None:
    resp = api.get("/readyz")
    assert resp.status_code == 200
    assert resp.json() == {"status": "ready", "database": "ok", "queue": "ok"}


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_head_on_a_health_route_answers_as_get_without_a_body(api: TestClient, path: str) -> None:
    """Issue 30 item 8: uptime checkers send HEAD, and HEAD /healthz was 405."""
    head = api.head(path)
    assert head.status_code == api.get(path).status_code == 200, head.text
    assert head.content == b""


def test_readyz_is_503_when_the_queue_does_not_exist(stack: Stack) -> None:
    broken = carrier.broken_settings(stack)  # on Redis a missing stream is made: no server
    with client_for(broken) as api:
        resp = api.get("/readyz")
        head = api.head("/readyz")
    assert head.status_code == 503 and head.content == b""
    assert resp.status_code == 503
    body = resp.json()
    assert body["status"] == "not ready"
    assert body["database"] == "ok"
    assert body["queue"].startswith("unreachable")
