"""POST /v1/jobs/batch: many jobs in one request, all or none. Each job is the same row,
outbox row and message a single POST /v1/jobs makes; a bad job, a reused key or a limit
refuses the whole batch and writes nothing: no job, no outbox row, no message."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.services import submit as service
from tests.conftest import Stack, bearer, wait_for
from tests.helpers import queue_depth
from tests.integration.conftest import TRICKLE, retry_after, written

pytestmark = pytest.mark.integration

NOOP = {"kind": "demo.noop", "payload": {}}
TRIAGE = {"kind": "support.triage", "payload": {"ticket_id": "T-1", "subject": "s", "body": "b"}}


def post_batch(api: Any, jobs: list[dict[str, Any]], tenant: str = "acme") -> Any:
    if tenant not in api.keys:
        api.keys[tenant] = api.stack.key(tenant)
    return api.client.post("/v1/jobs/batch", json={"jobs": jobs}, headers=bearer(api.keys[tenant]))


def test_a_batch_writes_every_job_with_its_outbox_row_and_message(
    api_with: Any, stack: Stack, sql: Any
) -> None:
    api = api_with()
    jobs = [NOOP, TRIAGE, {**NOOP, "max_attempts": 2, "idempotency_key": "k-1"}]

    resp = post_batch(api, jobs)

    assert resp.status_code == 202, resp.text
    body = resp.json()
    assert [j["kind"] for j in body["jobs"]] == ["demo.noop", "support.triage", "demo.noop"]
    assert [j["state"] for j in body["jobs"]] == ["queued"] * 3
    assert body["jobs"][2]["max_attempts"] == 2
    assert body["replayed"] == []
    assert written(sql) == (3, 3, 3)
    ids = [j["id"] for j in body["jobs"]]
    rows = sql.execute("SELECT id::text, tenant, idempotency_key FROM jobs").fetchall()
    assert {r["id"] for r in rows} == set(ids)
    assert {r["tenant"] for r in rows} == {"acme"}
    # Sent on the fast path: every outbox row is marked sent, one message per job.
    wait_for(
        lambda: (
            sql.execute("SELECT count(*) AS n FROM outbox WHERE sent_at IS NULL").fetchone()["n"]
            == 0
        ),
        what="the outbox rows marked sent",
    )
    assert queue_depth(stack) == 3
    # Each job reads back like one made by POST /v1/jobs, for its own tenant only.
    one = api.client.get(f"/v1/jobs/{ids[1]}", headers=bearer(api.keys["acme"]))
    assert one.status_code == 200 and one.json()["payload"]["ticket_id"] == "T-1"
    post_batch(api, [NOOP], tenant="globex")
    other = api.client.get(f"/v1/jobs/{ids[1]}", headers=bearer(api.keys["globex"]))
    assert other.status_code == 404


@pytest.mark.parametrize(
    ("bad", "status", "names"),
    [
        ({"kind": "no.such.kind", "payload": {}}, 422, "jobs[1]: unknown job kind 'no.such.kind'"),
        (
            {"kind": "support.triage", "payload": {"ticket_id": "T"}},
            422,
            "jobs[1]: invalid payload for kind 'support.triage': payload.subject",
        ),
        ({**NOOP, "max_attempts": 0}, 422, "body.jobs.1.max_attempts"),
        ({**NOOP, "timeout_seconds": 10**9}, 422, "(allowed: 1 to 43200)"),
        ({**NOOP, "surprise": 1}, 422, "body.jobs.1.surprise"),
        ({**NOOP, "payload": {"text": "a\u0000b"}}, 422, "jobs[1]: payload: text must not"),
        ({**NOOP, "idempotency_key": ""}, 422, "body.jobs.1.idempotency_key"),
    ],
)
def test_one_bad_job_refuses_the_whole_batch_naming_it(
    api_with: Any, stack: Stack, sql: Any, bad: dict[str, Any], status: int, names: str
) -> None:
    api = api_with()

    resp = post_batch(api, [NOOP, bad, NOOP])

    assert resp.status_code == status, resp.text
    assert names in resp.json()["detail"]
    assert written(sql) == (0, 0, 0)
    assert queue_depth(stack) == 0


@pytest.mark.parametrize("size", [0, service.MAX_SUBMIT_BATCH + 1])
def test_an_empty_or_oversized_batch_is_422_with_the_allowed_size(
    api_with: Any, sql: Any, size: int
) -> None:
    api = api_with()
    resp = post_batch(api, [NOOP] * size)
    assert resp.status_code == 422, resp.text
    assert "body.jobs" in resp.json()["detail"]
    assert written(sql) == (0, 0, 0)


def test_a_key_used_twice_in_one_batch_is_422(api_with: Any, sql: Any) -> None:
    api = api_with()
    resp = post_batch(api, [{**NOOP, "idempotency_key": "a"}, {**NOOP, "idempotency_key": "a"}])
    assert resp.status_code == 422
    assert "jobs[1]: idempotency_key 'a' is also jobs[0]'s" in resp.json()["detail"]
    assert written(sql) == (0, 0, 0)


def test_replays_are_answered_with_the_earlier_jobs_and_new_jobs_are_written(
    api_with: Any, stack: Stack, sql: Any
) -> None:
    api = api_with()
    single = api.post(**{"Idempotency-Key": "from-single"}).json()
    first = post_batch(api, [{**NOOP, "idempotency_key": "b-1"}]).json()
    assert written(sql)[0] == 2

    again = post_batch(
        api,
        [
            {**NOOP, "idempotency_key": "b-1"},
            {**NOOP, "idempotency_key": "fresh"},
            {**NOOP, "idempotency_key": "from-single"},
        ],
    )

    assert again.status_code == 202, again.text
    body = again.json()
    assert body["replayed"] == [0, 2]
    assert body["jobs"][0]["id"] == first["jobs"][0]["id"]
    assert body["jobs"][2]["id"] == single["id"]
    assert written(sql)[0] == 3  # only "fresh" is new
    # The same keys from another tenant are that tenant's own: new jobs.
    other = post_batch(api, [{**NOOP, "idempotency_key": "b-1"}], tenant="globex")
    assert (
        other.json()["replayed"] == [] and other.json()["jobs"][0]["id"] != first["jobs"][0]["id"]
    )


def test_a_key_reused_with_another_body_refuses_the_whole_batch(
    api_with: Any, stack: Stack, sql: Any
) -> None:
    api = api_with()
    assert post_batch(api, [{**NOOP, "idempotency_key": "k"}]).status_code == 202
    before, depth = written(sql), queue_depth(stack)

    resp = post_batch(
        api, [NOOP, {"kind": "demo.noop", "payload": {"x": 1}, "idempotency_key": "k"}]
    )

    assert resp.status_code == 409, resp.text
    assert "jobs[1]: Idempotency-Key was already used" in resp.json()["detail"]
    assert written(sql) == before  # not even the first, fresh job
    assert queue_depth(stack) == depth


def test_the_rate_limit_counts_every_new_job_of_a_batch(
    api_with: Any, stack: Stack, sql: Any
) -> None:
    api = api_with(rate_limit_per_second=TRICKLE, rate_limit_burst=5)
    assert post_batch(api, [NOOP] * 3).status_code == 202
    before, depth = written(sql), queue_depth(stack)

    refused = post_batch(api, [NOOP] * 3)  # 3 + 3 > 5

    assert refused.status_code == 429, refused.text
    assert "this batch asks for 3" in refused.json()["detail"]
    # Two more fit once the oldest job leaves the window, in just under 5,000 s.
    assert 4900 <= retry_after(refused) <= 5000
    assert written(sql) == before
    assert queue_depth(stack) == depth
    assert post_batch(api, [NOOP] * 2).status_code == 202  # exactly the burst
    assert api.post().status_code == 429


def test_a_batch_larger_than_the_burst_is_422_not_429(api_with: Any, sql: Any) -> None:
    # Waiting would never let it in: the caller must send smaller batches.
    api = api_with(rate_limit_per_second=TRICKLE, rate_limit_burst=2)
    resp = post_batch(api, [NOOP] * 3)
    assert resp.status_code == 422, resp.text
    assert "more than this tenant's burst of 2" in resp.json()["detail"]
    assert written(sql) == (0, 0, 0)


def test_the_in_flight_cap_counts_every_new_job_of_a_batch(
    api_with: Any, stack: Stack, sql: Any
) -> None:
    api = api_with(max_jobs_in_flight=4)
    assert post_batch(api, [NOOP] * 3).status_code == 202

    refused = post_batch(api, [NOOP] * 2)

    assert refused.status_code == 429, refused.text
    assert retry_after(refused) == 5
    assert "limit is 4" in refused.json()["detail"]
    assert written(sql)[0] == 3
    assert post_batch(api, [NOOP]).status_code == 202


def test_a_batch_needs_a_valid_key(api_with: Any, sql: Any) -> None:
    api = api_with()
    for headers in ({}, {"Authorization": "Bearer tlk_000000000000_nottherightsecretatall"}):
        resp = api.client.post("/v1/jobs/batch", json={"jobs": [NOOP]}, headers=headers)
        assert resp.status_code == 401
        assert resp.headers["WWW-Authenticate"].startswith('Bearer realm="tasklease"')
    assert written(sql) == (0, 0, 0)


@pytest.mark.e2e
def test_a_batch_runs_to_completion_on_real_processes(stack: Stack, sql: Any) -> None:
    url = stack.api()
    stack.worker(concurrency=2)
    key = stack.key("acme")

    with httpx.Client(base_url=url, headers=bearer(key), timeout=30) as http:
        resp = http.post("/v1/jobs/batch", json={"jobs": [NOOP] * 25})
    assert resp.status_code == 202, resp.text
    ids = [j["id"] for j in resp.json()["jobs"]]
    wait_for(
        lambda: (
            sql.execute(
                "SELECT count(*) AS n FROM jobs WHERE state = 'succeeded' AND id::text = ANY(%s)",
                (ids,),
            ).fetchone()["n"]
            == 25
        ),
        timeout=60,
        what="the 25 jobs of the batch succeeded",
    )
    events = sql.execute(
        "SELECT count(*) AS n FROM job_events WHERE to_state = 'succeeded'"
    ).fetchone()
    assert events["n"] == 25  # each completed once
