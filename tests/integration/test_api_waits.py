"""The API of waits, over HTTP in this process against real PostgreSQL and SQS: answering a
callback by its token (no API key), its heartbeat, what a waiting job shows (waiting_for,
parent, children, callbacks), and delayed submission (run_at, delay_seconds) on both
submit routes, with the wake-ups a delay past SQS's cap leaves to the sweeper."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from typing import Any

import pytest

from app.services import callbacks, wakeups
from app.states import JobState
from tests.conftest import Stack, bearer, job_row
from tests.helpers import count, engine_for, receive_records

pytestmark = pytest.mark.integration

NOOP = {"kind": "demo.noop", "payload": {}}
APPROVAL = {"kind": "demo.approval", "payload": {"timeout_seconds": 600}}
FINISHED = ("succeeded", "dead_lettered", "cancelled")


async def handle_once(stack: Stack, *, wait: int = 2) -> int:
    """One receive of the job queue, handled by an engine in this process."""
    async with engine_for(stack.settings) as engine:
        records = await receive_records(engine, wait=wait)
        if records:
            await engine.handle({"Records": records}, None)
        return len(records)


async def drain(stack: Stack, sql: Any, job_ids: list[Any], *, deadline: float = 20) -> None:
    end = time.monotonic() + deadline
    async with engine_for(stack.settings) as engine:
        while time.monotonic() < end:
            if all(job_row(sql, j)["state"] in FINISHED for j in job_ids):
                return
            records = await receive_records(engine, wait=1)
            if records:
                await engine.handle({"Records": records}, None)
    pytest.fail(f"jobs not finished in {deadline:.0f} s: {[job_row(sql, j) for j in job_ids]}")


def submit(api: Any, body: dict[str, Any], **headers: str) -> dict[str, Any]:
    resp = api.post("/v1/jobs", json=body, headers=headers)
    assert resp.status_code == 202, resp.text
    return dict(resp.json())


def token_of(stack: Stack, job_id: Any, key: str = "approve") -> str:
    from app import store

    async def derive() -> str:
        assert stack.settings.database_url is not None
        async with store.connect(stack.settings.database_url, min_size=1, max_size=1) as db:
            return await callbacks.token_for(db, uuid.UUID(str(job_id)), key)

    return asyncio.run(derive())


def waiting_approval(api: Any, stack: Stack, sql: Any) -> tuple[str, str]:
    """A demo.approval job waiting for its callback, and the callback's token."""
    job_id = submit(api, APPROVAL)["id"]
    asyncio.run(handle_once(stack))
    assert job_row(sql, job_id)["state"] == JobState.WAITING
    return job_id, token_of(stack, job_id)


# --- callbacks ----------------------------------------------------------------------


def test_a_callback_answered_by_its_token_wakes_the_job_once_without_an_api_key(
    api: Any, stack: Stack, sql: Any
) -> None:
    job_id, token = waiting_approval(api, stack, sql)

    # The waiting job shows what it waits for, and its callback (never the token).
    job = api.get(f"/v1/jobs/{job_id}").json()
    assert job["state"] == "waiting"
    assert job["waiting_for"]["kind"] == "callback"
    assert job["waiting_for"]["key"] == "approve"
    assert job["waiting_for"]["until"] is not None and job["waiting_for"]["rule"] is None
    listed = api.get("/v1/jobs", params={"state": "waiting"}).json()["items"]
    assert [j["id"] for j in listed] == [job_id]
    (cb,) = api.get(f"/v1/jobs/{job_id}/callbacks").json()
    assert (cb["key"], cb["state"], cb["heartbeats"], cb["answered_at"]) == (
        "approve",
        "pending",
        0,
        None,
    )
    assert token not in str(cb) and "token" not in " ".join(cb)
    # What it asks, as the kind gave it (wait_for_callback's details), for whoever answers.
    assert cb["details"] == {"asks": "approve this demo job", "on_timeout": "escalate"}

    # A heartbeat pushes the deadline, with no Authorization header at all.
    beat = api.post(f"/v1/callbacks/{token}/heartbeat", headers={"Authorization": ""})
    assert beat.status_code == 200, beat.text
    assert dt.datetime.fromisoformat(beat.json()["deadline"]) >= dt.datetime.fromisoformat(
        cb["deadline"]
    )
    assert api.get(f"/v1/jobs/{job_id}/callbacks").json()[0]["heartbeats"] == 1

    anonymous = {"Authorization": ""}
    first = api.post(f"/v1/callbacks/{token}", json={"result": {"ok": 1}}, headers=anonymous)
    assert first.status_code == 200, first.text
    assert first.json() == {
        "job_id": job_id,
        "key": "approve",
        "callback_state": "succeeded",
        "job_woken": True,
        "state": "succeeded",  # deprecated: callback_state
        "woken": True,  # deprecated: job_woken
    }
    assert job_row(sql, job_id)["state"] == JobState.QUEUED

    again = api.post(f"/v1/callbacks/{token}", json={"result": {"ok": 2}}, headers=anonymous)
    assert again.status_code == 409 and "already answered" in again.json()["detail"]
    late_beat = api.post(f"/v1/callbacks/{token}/heartbeat", headers=anonymous)
    assert late_beat.status_code == 409

    asyncio.run(drain(stack, sql, [job_id]))
    row = job_row(sql, job_id)
    assert row["state"] == JobState.SUCCEEDED
    assert row["result"] == {"approved": True, "answer": {"ok": 1}}
    (cb,) = api.get(f"/v1/jobs/{job_id}/callbacks").json()
    assert cb["state"] == "succeeded" and cb["result"] == {"ok": 1} and cb["answered_at"]


def test_a_callback_s_answer_names_its_fields_as_the_callback_s_and_the_job_s(api: Any) -> None:
    """Issue 30 item 10: ``{"state": "succeeded", "woken": true}`` read as "the job
    succeeded"; it is the callback's state. ``callback_state`` and ``job_woken`` say it,
    and the old names are kept, marked deprecated in the OpenAPI document."""
    schema = api.get("/openapi.json").json()["components"]["schemas"]["CallbackAnswered"]
    fields = schema["properties"]
    assert set(schema["required"]) >= {"callback_state", "job_woken"}
    assert "callback" in fields["callback_state"]["description"]
    assert "job" in fields["job_woken"]["description"]
    for old, new in (("state", "callback_state"), ("woken", "job_woken")):
        assert fields[old].get("deprecated") is True, old
        assert new in fields[old]["description"], old
    assert not any(fields[f].get("deprecated") for f in ("job_id", "key", "callback_state"))


def test_a_callback_answered_with_an_api_key_by_its_job_and_key_wakes_the_job_once(
    api: Any, stack: Stack, sql: Any
) -> None:
    """The web view's Approve: POST /v1/jobs/{id}/callbacks/{key} with the tenant's key, the
    same body and answers as the token route; another tenant's job is 404 and unchanged."""
    job_id, _ = waiting_approval(api, stack, sql)
    route = f"/v1/jobs/{job_id}/callbacks/approve"

    other = api.post(route, json={"result": 1}, headers=bearer(stack.key("globex")))
    assert other.status_code == 404 and other.json() == {"detail": f"no job {job_id}"}
    unknown = api.post(f"/v1/jobs/{job_id}/callbacks/nope", json={"result": 1})
    assert unknown.status_code == 404, unknown.text
    both = api.post(route, json={"result": 1, "error": "no"})
    assert both.status_code == 422, both.text
    assert api.get(f"/v1/jobs/{job_id}/callbacks").json()[0]["state"] == "pending"
    assert job_row(sql, job_id)["state"] == JobState.WAITING

    first = api.post(route, json={"result": {"ok": "ui"}})
    assert first.status_code == 200, first.text
    assert first.json() == {
        "job_id": job_id,
        "key": "approve",
        "callback_state": "succeeded",
        "job_woken": True,
        "state": "succeeded",
        "woken": True,
    }
    again = api.post(route, json={"error": "too late"})
    assert again.status_code == 409 and "already answered" in again.json()["detail"]

    asyncio.run(drain(stack, sql, [job_id]))
    assert job_row(sql, job_id)["result"] == {"approved": True, "answer": {"ok": "ui"}}


def test_a_callback_rejected_with_an_api_key_fails_the_job(
    api: Any, stack: Stack, sql: Any
) -> None:
    job_id, _ = waiting_approval(api, stack, sql)
    resp = api.post(f"/v1/jobs/{job_id}/callbacks/approve", json={"error": "rejected in the UI"})
    assert resp.status_code == 200 and resp.json()["callback_state"] == "failed", resp.text
    asyncio.run(drain(stack, sql, [job_id]))
    row = job_row(sql, job_id)
    assert row["state"] == JobState.DEAD_LETTERED and "rejected in the UI" in row["last_error"]


def test_an_error_answer_fails_the_callback_also_behind_an_authorizer(
    api: Any, api_with: Any, stack: Stack, sql: Any
) -> None:
    """Under TASKLEASE_AUTH_MODE=authorizer (API Gateway checked the caller) the callback
    routes still need no identity: their route has no authorizer, and the token is it."""
    job_id, token = waiting_approval(api, stack, sql)
    behind = api_with(auth_mode="authorizer").client
    assert behind.get("/v1/jobs").status_code == 401  # no authorizer context: no caller
    resp = behind.post(f"/v1/callbacks/{token}", json={"error": "rejected by Sam"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["callback_state"] == "failed" and resp.json()["job_woken"] is True
    (cb,) = api.get(f"/v1/jobs/{job_id}/callbacks").json()
    assert (cb["state"], cb["error"], cb["result"]) == ("failed", "rejected by Sam", None)


def test_unknown_and_expired_tokens_are_the_same_404(api: Any, stack: Stack, sql: Any) -> None:
    job_id, token = waiting_approval(api, stack, sql)
    unknown = callbacks.TOKEN_PREFIX + "A" * 43
    answers = [
        api.post(f"/v1/callbacks/{unknown}", json={"result": 1}),
        api.post(f"/v1/callbacks/{unknown}/heartbeat"),
        api.post(f"/v1/callbacks/{'x' * callbacks.MAX_TOKEN_CHARS}", json={"result": 1}),
    ]
    # Past its deadline (not yet marked), then marked timed out: expired either way.
    sql.execute("UPDATE callbacks SET deadline = now() - interval '1 second'")
    answers += [
        api.post(f"/v1/callbacks/{token}", json={"result": 1}),
        api.post(f"/v1/callbacks/{token}/heartbeat"),
    ]
    sql.execute("UPDATE callbacks SET state = 'timed_out', answered_at = now()")
    answers += [
        api.post(f"/v1/callbacks/{token}", json={"result": 1}),
        api.post(f"/v1/callbacks/{token}/heartbeat"),
    ]
    details = {(a.status_code, a.json()["detail"]) for a in answers}
    assert details == {(404, "no such callback, or it is past its deadline")}, details
    too_long = api.post(
        f"/v1/callbacks/{'x' * (callbacks.MAX_TOKEN_CHARS + 1)}", json={"result": 1}
    )
    assert too_long.status_code == 422 and "token" in too_long.json()["detail"]
    assert job_row(sql, job_id)["state"] == JobState.WAITING


BAD_ANSWERS = [
    ({}, "give result"),
    ({"result": 1, "error": "no"}, "not both"),
    ({"error": ""}, "body.error"),
    ({"error": "   "}, "non-empty"),
    ({"error": 7}, "body.error"),
    ({"result": 1, "extra": True}, "body.extra"),
    ({"result": "a\u0000b"}, "NUL"),
    ({"error": "x" * (callbacks.MAX_ERROR_CHARS + 1)}, "body.error"),
]


def test_a_bad_answer_is_422_naming_the_field_and_changes_nothing(
    api: Any, stack: Stack, sql: Any
) -> None:
    job_id, token = waiting_approval(api, stack, sql)
    for body, named in BAD_ANSWERS:
        resp = api.post(f"/v1/callbacks/{token}", json=body)
        assert resp.status_code == 422, (body, resp.text)
        assert named in resp.json()["detail"], (body, resp.json())
    not_json = api.post(
        f"/v1/callbacks/{token}", content=b"{nope", headers={"Content-Type": "application/json"}
    )
    assert not_json.status_code == 400
    (cb,) = api.get(f"/v1/jobs/{job_id}/callbacks").json()
    assert cb["state"] == "pending"
    assert job_row(sql, job_id)["state"] == JobState.WAITING
    # null is an answer like any other JSON.
    assert api.post(f"/v1/callbacks/{token}", json={"result": None}).status_code == 200


def test_a_jobs_callbacks_are_its_tenants_only(api: Any, stack: Stack, sql: Any) -> None:
    job_id, _ = waiting_approval(api, stack, sql)
    other = bearer(stack.key("globex"))
    admin = bearer(stack.key("ops", admin=True))
    assert api.get(f"/v1/jobs/{job_id}/callbacks", headers=other).status_code == 404
    assert api.get(f"/v1/jobs/{job_id}", headers=other).status_code == 404
    assert len(api.get(f"/v1/jobs/{job_id}/callbacks", headers=admin).json()) == 1
    assert api.get(f"/v1/jobs/{uuid.uuid4()}/callbacks").status_code == 404
    no_key = api.get(f"/v1/jobs/{job_id}/callbacks", headers={"Authorization": ""})
    assert no_key.status_code == 401


# --- children -----------------------------------------------------------------------


def test_a_parent_shows_its_children_and_its_gather_and_a_child_its_parent(
    api: Any, stack: Stack, sql: Any
) -> None:
    body = {
        "kind": "demo.fanout",
        "payload": {"children": 3, "at_least": 2, "tolerate": 1, "child_seconds": 60},
    }
    parent = submit(api, body)["id"]
    asyncio.run(handle_once(stack))
    job = api.get(f"/v1/jobs/{parent}").json()
    assert job["state"] == "waiting", job
    assert job["waiting_for"]["kind"] == "children"
    assert job["waiting_for"]["rule"] == {"need": 2, "all": False, "tolerate": 1, "count": 3}
    assert job["children_count"] == 3 and len(job["children"]) == 3
    assert {c["kind"] for c in job["children"]} == {"demo.nap"}
    child = api.get(f"/v1/jobs/{job['children'][0]['id']}").json()
    assert child["parent_id"] == parent
    assert child["children"] == [] and child["children_count"] == 0
    assert api.get(f"/v1/jobs/{parent}/callbacks").json() == []


# --- delayed submission ---------------------------------------------------------------


def test_a_delayed_job_waits_on_its_timer_and_runs_after_its_delay(
    api: Any, stack: Stack, sql: Any
) -> None:
    job = submit(api, {**NOOP, "delay_seconds": 2})
    assert job["state"] == "waiting"
    assert job["waiting_for"]["kind"] == "timer" and job["waiting_for"]["key"] == "run_at"
    row = job_row(sql, job["id"])
    assert row["wake_sent_at"] is not None, "the wake-up within the cap is sent at once"
    assert count(sql, "outbox") == 0
    (event,) = sql.execute("SELECT * FROM job_events WHERE job_id = %s", (job["id"],)).fetchall()
    assert (event["from_state"], event["to_state"]) == (None, "waiting")
    assert event["detail"].startswith("accepted: runs at")

    asyncio.run(drain(stack, sql, [job["id"]]))
    row = job_row(sql, job["id"])
    assert row["state"] == JobState.SUCCEEDED
    assert row["started_at"] >= row["created_at"] + dt.timedelta(seconds=2)
    assert row["attempt"] == 1 and row["wait_kind"] is None


def test_run_at_in_the_past_runs_now_and_in_the_future_waits(api: Any, sql: Any) -> None:
    now = dt.datetime.now(dt.UTC)
    past = submit(api, {**NOOP, "run_at": (now - dt.timedelta(hours=1)).isoformat()})
    assert past["state"] == "queued" and past["waiting_for"] is None
    later = now + dt.timedelta(days=30)
    future = submit(api, {**NOOP, "run_at": later.isoformat().replace("+00:00", "Z")})
    assert future["state"] == "waiting"
    assert dt.datetime.fromisoformat(future["waiting_for"]["until"]) == later
    assert job_row(sql, future["id"])["wake_sent_at"] is None, "past the cap: the sweeper's"
    assert [r["job_id"] for r in sql.execute("SELECT job_id FROM outbox").fetchall()] == [
        uuid.UUID(past["id"])
    ]


BAD_TIMES = [
    ({"delay_seconds": 5, "run_at": "2030-01-01T00:00:00Z"}, "not both"),
    ({"delay_seconds": -1}, "body.delay_seconds"),
    ({"delay_seconds": 366 * 86400 + 1}, "allowed: 0 to"),
    ({"delay_seconds": "soon"}, "body.delay_seconds"),
    ({"run_at": "2030-01-01T00:00:00"}, "body.run_at"),
    ({"run_at": "tomorrow"}, "body.run_at"),
    ({"run_at": "2999-01-01T00:00:00Z"}, "at most a year"),
]


def test_bad_times_are_422_naming_the_field_and_write_nothing(api: Any, sql: Any) -> None:
    for extra, named in BAD_TIMES:
        resp = api.post("/v1/jobs", json={**NOOP, **extra})
        assert resp.status_code == 422, (extra, resp.text)
        assert named in resp.json()["detail"], (extra, resp.json())
        batch = api.post("/v1/jobs/batch", json={"jobs": [NOOP, {**NOOP, **extra}]})
        assert batch.status_code == 422, (extra, batch.text)
        assert "jobs" in batch.json()["detail"] and "1" in batch.json()["detail"]
    assert count(sql, "jobs") == 0


def test_the_idempotency_key_is_bound_to_when_the_job_runs(api: Any, sql: Any) -> None:
    first = submit(api, {**NOOP, "delay_seconds": 600}, **{"Idempotency-Key": "later-1"})
    replay = api.post(
        "/v1/jobs", json={**NOOP, "delay_seconds": 600}, headers={"Idempotency-Key": "later-1"}
    )
    assert replay.status_code == 202 and replay.json()["id"] == first["id"]
    assert replay.headers["Idempotent-Replayed"] == "true"
    for other in ({**NOOP, "delay_seconds": 60}, NOOP):
        resp = api.post("/v1/jobs", json=other, headers={"Idempotency-Key": "later-1"})
        assert resp.status_code == 409, resp.text
    assert count(sql, "jobs") == 1


def test_a_batch_mixes_delayed_and_immediate_jobs(api: Any, stack: Stack, sql: Any) -> None:
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)).isoformat()
    resp = api.post(
        "/v1/jobs/batch",
        json={
            "jobs": [
                NOOP,
                {**NOOP, "delay_seconds": 1},
                {**NOOP, "run_at": later},
                {**NOOP, "delay_seconds": 0},
            ]
        },
    )
    assert resp.status_code == 202, resp.text
    jobs = resp.json()["jobs"]
    assert [j["state"] for j in jobs] == ["queued", "waiting", "waiting", "queued"]
    ids = [j["id"] for j in jobs]
    assert count(sql, "outbox") == 2
    asyncio.run(drain(stack, sql, [ids[0], ids[1], ids[3]]))
    assert job_row(sql, ids[2])["state"] == JobState.WAITING


def test_a_delay_past_the_cap_is_sent_by_the_sweeper_when_it_comes_within_it(
    api_with: Any, stack: Stack, sql: Any
) -> None:
    """With TASKLEASE_MAX_MESSAGE_DELAY_SECONDS shortened to 1 s, a 3-second delay is past
    the cap: nothing is sent at submission; the sweeper sends it once it is due within it."""
    short = stack.with_settings(max_message_delay_seconds=1)
    api = api_with(max_message_delay_seconds=1)
    resp = api.post(body={**NOOP, "delay_seconds": 3})
    assert resp.status_code == 202, resp.text
    job_id = resp.json()["id"]
    assert job_row(sql, job_id)["wake_sent_at"] is None
    assert stack.queue_depth() == 0

    async def sweep_until_sent() -> None:
        async with engine_for(short) as engine:
            end = time.monotonic() + 15
            while time.monotonic() < end:
                if await wakeups.sweep(short, engine.db, engine.queue, limit=10):
                    return
                await asyncio.sleep(0.2)
        pytest.fail("the sweeper never sent the wake-up")

    asyncio.run(sweep_until_sent())
    assert job_row(sql, job_id)["wake_sent_at"] is not None
    asyncio.run(drain(stack, sql, [job_id]))
    assert job_row(sql, job_id)["state"] == JobState.SUCCEEDED


# --- what a job's answer and the list say of its runs, attempts, lease and wait --------


def test_a_job_that_ran_twice_and_waits_shows_runs_no_attempt_used_and_no_lease_owner(
    api: Any, stack: Stack, sql: Any
) -> None:
    """Issue 30 item 9: the answer's counts are runs (starts of the code) and attempt (the
    attempts used: a wait gives its attempt back). lease_owner is the live lease's holder:
    the row keeps the last worker's name, which is no lease."""
    job_id = submit(api, {"kind": "demo.nap", "payload": {"seconds": 1, "naps": 2}})["id"]
    for runs in (1, 2):
        asyncio.run(handle_once(stack))
        row = job_row(sql, job_id)
        assert (row["state"], row["runs"]) == (JobState.WAITING, runs), row
    assert row["lease_owner"] is not None  # the store keeps it, for the events
    later = submit(api, {**NOOP, "delay_seconds": 3600})["id"]

    job = api.get(f"/v1/jobs/{job_id}").json()
    assert (job["runs"], job["attempt"], job["max_attempts"]) == (2, 0, 5), job
    assert job["lease_owner"] is None, job

    # The list the web view reads says the same, and what each waiting job waits for and
    # until when, newest created first.
    page = api.get("/v1/jobs", params={"state": "waiting"}).json()
    assert [j["id"] for j in page["items"]] == [later, job_id]
    listed = page["items"][1]
    assert (listed["runs"], listed["attempt"], listed["lease_owner"]) == (2, 0, None)
    assert listed["waiting_for"]["kind"] == "timer" and listed["waiting_for"]["key"] == "nap-1"
    assert dt.datetime.fromisoformat(listed["waiting_for"]["until"]) == row["wake_at"]
    assert page["items"][0]["waiting_for"]["key"] == "run_at"


def test_a_running_job_whose_lease_expired_shows_no_lease_owner(
    api: Any, stack: Stack, sql: Any
) -> None:
    job_id = submit(api, NOOP)["id"]
    # What a worker killed while it ran leaves: the job running under a lease that ran out.
    sql.execute(
        "UPDATE jobs SET state = 'running', attempt = 1, runs = 1, lease_owner = 'gone-1', "
        "lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 hour' "
        "WHERE id = %s",
        (job_id,),
    )
    assert api.get(f"/v1/jobs/{job_id}").json()["lease_owner"] == "gone-1"
    sql.execute(
        "UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s", (job_id,)
    )
    job = api.get(f"/v1/jobs/{job_id}").json()
    assert job["state"] == "running" and job["lease_owner"] is None, job
