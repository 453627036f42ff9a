"""Messages to a job over HTTP, in this process against real PostgreSQL and SQS: a job
waiting on a topic is woken in the transaction that stores the message; the job reads
its messages in order per topic, each once; an Idempotency-Key delivers a retried POST
once; a finished job is 409 naming its state, another tenant's job 404; the limits."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from app.settings import bounds
from app.states import JobState
from tests.conftest import Stack, bearer, job_row
from tests.helpers import count
from tests.integration.test_api_waits import drain, handle_once, submit

pytestmark = pytest.mark.integration

CHAT = {"kind": "demo.chat", "payload": {"messages": 3}}


def post(api: Any, job_id: str, topic: str, body: Any, **headers: str) -> Any:
    return api.post(
        f"/v1/jobs/{job_id}/messages", json={"topic": topic, "body": body}, headers=headers
    )


def waiting_chat(api: Any, stack: Stack, sql: Any) -> str:
    job_id = submit(api, CHAT)["id"]
    asyncio.run(handle_once(stack))
    assert job_row(sql, job_id)["state"] == JobState.WAITING
    return str(job_id)


def test_a_message_wakes_the_job_in_its_transaction_and_each_is_read_once_in_order(
    api: Any, stack: Stack, sql: Any
) -> None:
    job_id = waiting_chat(api, stack, sql)
    waiting = api.get(f"/v1/jobs/{job_id}").json()["waiting_for"]
    assert (waiting["kind"], waiting["key"], waiting["until"]) == ("message", "user", None)

    first = post(api, job_id, "user", {"text": "a"})
    assert first.status_code == 201, first.text
    assert first.json()["job_woken"] is True and first.json()["consumed_at"] is None
    # Woken in the transaction that stored the message: now() is the transaction's start,
    # the same in the message, the job's row and its outbox row.
    row = job_row(sql, job_id)
    assert row["state"] == JobState.QUEUED
    (event,) = sql.execute(
        "SELECT detail FROM job_events WHERE job_id = %s AND from_state = 'waiting'",
        (job_id,),
    ).fetchall()
    stored = sql.execute("SELECT created_at FROM job_messages WHERE job_id = %s", (job_id,))
    box = sql.execute("SELECT created_at FROM outbox WHERE job_id = %s ORDER BY id DESC", (job_id,))
    at = stored.fetchone()["created_at"]
    assert row["updated_at"] == box.fetchone()["created_at"] == at
    assert event["detail"] == "message on user"

    # Sent while it is queued: stored, nobody to wake; another topic is not read.
    for topic, text in (("other", "x"), ("user", "b"), ("user", "c")):
        sent = post(api, job_id, topic, {"text": text})
        assert sent.status_code == 201 and sent.json()["job_woken"] is False, sent.text
    asyncio.run(drain(stack, sql, [job_id]))
    result = job_row(sql, job_id)["result"]
    assert [a["reply"] for a in result["answers"]] == [
        f"you said: {{'text': '{t}'}}" for t in "abc"
    ]
    listed = api.get(f"/v1/jobs/{job_id}/messages").json()
    assert [(m["topic"], m["body"]["text"]) for m in listed] == [
        ("user", "a"),
        ("other", "x"),
        ("user", "b"),
        ("user", "c"),
    ]
    assert [m["consumed_at"] is not None for m in listed] == [True, False, True, True]
    consumed = sql.execute(
        "SELECT consumed_by FROM job_messages WHERE job_id = %s AND topic = 'user' ORDER BY id",
        (job_id,),
    ).fetchall()
    assert [c["consumed_by"] for c in consumed] == [f"receive:user:{n}" for n in (1, 2, 3)]


def test_an_idempotency_key_delivers_a_retried_post_once(api: Any, stack: Stack, sql: Any) -> None:
    job_id = waiting_chat(api, stack, sql)
    first = post(api, job_id, "user", {"n": 1}, **{"Idempotency-Key": "k-1"})
    again = post(api, job_id, "user", {"n": 1}, **{"Idempotency-Key": "k-1"})
    assert first.status_code == again.status_code == 201, again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert again.json()["id"] == first.json()["id"] and again.json()["job_woken"] is False
    other = post(api, job_id, "user", {"n": 2}, **{"Idempotency-Key": "k-1"})
    assert other.status_code == 409, other.text
    assert "Idempotency-Key 'k-1' was used for another message" in other.json()["detail"]
    assert count(sql, "job_messages") == 1


def test_a_finished_job_is_409_with_its_state_and_another_tenants_job_404(
    api: Any, stack: Stack, sql: Any
) -> None:
    job_id = submit(api, {"kind": "demo.noop", "payload": {}})["id"]
    asyncio.run(drain(stack, sql, [job_id]))
    done = post(api, job_id, "user", "hi")
    assert done.status_code == 409, done.text
    assert done.json() == {"detail": f"job {job_id} is succeeded: it takes no messages"}

    waiting = waiting_chat(api, stack, sql)
    other = bearer(stack.key("globex"))
    refused = post(api, waiting, "user", "hi", **other)
    assert refused.status_code == 404 and refused.json() == {"detail": f"no job {waiting}"}
    assert api.get(f"/v1/jobs/{waiting}/messages", headers=other).status_code == 404
    assert count(sql, "job_messages") == 0
    assert job_row(sql, waiting)["state"] == JobState.WAITING


def test_the_limits_are_4xx_naming_them_and_store_nothing(
    api: Any, stack: Stack, sql: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = waiting_chat(api, stack, sql)
    big = post(api, job_id, "user", "x" * bounds.MAX_MESSAGE_BYTES)
    assert big.status_code == 422, big.text
    assert f"over the limit of {bounds.MAX_MESSAGE_BYTES} bytes" in big.json()["detail"]
    assert "MAX_MESSAGE_BYTES" in big.json()["detail"]
    for bad in (
        {"topic": "", "body": 1},
        {"topic": "x" * 101},
        {"body": 1},
        {"topic": "t", "x": 1},
    ):
        resp = api.post(f"/v1/jobs/{job_id}/messages", json=bad)
        assert resp.status_code == 422, (bad, resp.text)
    nul = post(api, job_id, "user", {"text": "a\x00b"})
    assert nul.status_code == 422 and "NUL" in nul.json()["detail"], nul.text
    assert count(sql, "job_messages") == 0

    monkeypatch.setattr(bounds, "MAX_MESSAGES_PER_JOB", 2)
    assert [post(api, job_id, "other", n).status_code for n in range(2)] == [201, 201]
    full = post(api, job_id, "other", 3)
    assert full.status_code == 409, full.text
    assert full.json()["detail"] == (
        f"job {job_id} has 2 messages, the most one job may be sent (MAX_MESSAGES_PER_JOB = 2)"
    )
    assert count(sql, "job_messages") == 2


def running(sql: Any, job_id: str, token: uuid.UUID) -> None:
    """The job as a worker holding its lease leaves it."""
    sql.execute(
        "UPDATE jobs SET state = 'running', attempt = 1, lease_token = %s, "
        "lease_expires_at = now() + interval '1 minute' WHERE id = %s",
        (token, job_id),
    )


def test_a_message_stored_while_the_job_ran_wakes_it_as_it_suspends(
    api: Any, stack: Stack, sql: Any
) -> None:
    """The race between a receive that found nothing and the suspension that follows: a
    message committed in between is seen by the suspending transaction (wake_if_met), so
    the job is queued again at once, not left waiting with a message unread."""
    from app import store

    job_id = submit(api, {"kind": "demo.noop", "payload": {}})["id"]
    token = uuid.uuid4()
    running(sql, job_id, token)
    assert post(api, job_id, "user", "meanwhile").json()["job_woken"] is False
    other = post(api, job_id, "other", "not this topic")
    assert other.status_code == 201, other.text

    async def suspend(topic: str) -> Any:
        assert stack.settings.database_url is not None
        async with store.connect(stack.settings.database_url, min_size=1, max_size=1) as db:
            return await store.waits.suspend(
                db,
                uuid.UUID(job_id),
                token,
                wait_kind="message",
                wait_key=topic,
                wake_at=None,
                rule=None,
                cap=900,
                detail=f"waiting for message on {topic}",
            )

    done = asyncio.run(suspend("user"))
    assert done.changed and done.woken, done
    row = job_row(sql, job_id)
    assert row["state"] == JobState.QUEUED and row["wait_kind"] is None
    (event,) = sql.execute(
        "SELECT detail FROM job_events WHERE job_id = %s AND from_state = 'waiting'", (job_id,)
    ).fetchall()
    assert event["detail"] == "woken at once: waiting for message on user"

    # Running again, it suspends on a topic with nothing unread: it waits.
    running(sql, job_id, token)
    sql.execute(
        "UPDATE job_messages SET consumed_at = now(), consumed_by = 'receive:user:1' "
        "WHERE topic = 'user'"
    )
    done = asyncio.run(suspend("user"))
    assert done.changed and not done.woken
    assert job_row(sql, job_id)["state"] == JobState.WAITING


def test_a_receive_past_its_timeout_ends_the_wait_on_a_real_worker(
    api: Any, stack: Stack, sql: Any
) -> None:
    """The deadline's path is a callback's: wake_at is the deadline, the wake-up comes at
    it, and the run records the time-out (demo.chat catches ReceiveTimedOut)."""
    job_id = submit(api, {"kind": "demo.chat", "payload": {"messages": 1, "timeout_seconds": 1}})[
        "id"
    ]
    asyncio.run(handle_once(stack))
    waiting = api.get(f"/v1/jobs/{job_id}").json()["waiting_for"]
    assert (waiting["kind"], waiting["key"]) == ("message", "user")
    assert waiting["until"] is not None
    asyncio.run(drain(stack, sql, [job_id]))
    row = job_row(sql, job_id)
    assert row["result"] == {"answers": [], "timed_out": True}
    late = post(api, job_id, "user", "too late")
    assert late.status_code == 409 and "is succeeded" in late.json()["detail"]
