"""State a job publishes, against real PostgreSQL: GET /v1/jobs/{id}/state (all keys, one
key, 404s), the long poll that answers when a key changes, the stream's ``state`` event,
and the fence (a stale lease token writes nothing)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from app import errors, store
from app.settings import bounds
from app.store.state import Published
from app.worker.context import LeasedContext
from tests.conftest import Stack, bearer, run
from tests.integration.test_api_waits import drain, submit
from tests.integration.test_output_buffer import running
from tests.integration.test_streams import caught_up

pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]


async def publish(stack: Stack, job_id: str, token: uuid.UUID, key: str, value: Any) -> Published:
    assert stack.settings.database_url
    async with store.connect(stack.settings.database_url, max_size=1) as db:
        return await store.state.publish(
            db, uuid.UUID(job_id), token, key, value, max_keys=bounds.MAX_STATE_KEYS
        )


def state_events(api: Any, sql: Any, job_id: str) -> list[Any]:
    """The job's state events read from its stream, once it shows every row written (a
    transaction elsewhere on the server may hold the latest back a moment)."""
    head = caught_up(api, sql, job_id)
    page = api.get(f"/v1/jobs/{job_id}/stream", params={"after": "0", "wait": 0}).json()
    assert page["next"] == head
    return [e["data"] for e in page["events"] if e["type"] == "state"]


def test_a_finished_job_s_state_reads_whole_and_by_key(stack: Stack, api: Any, sql: Any) -> None:
    job = submit(api, {"kind": "demo.publish", "payload": {"steps": 2}})
    run(drain(stack, sql, [job["id"]]))
    items = api.get(f"/v1/jobs/{job['id']}/state").json()["items"]
    assert [(i["key"], i["value"], i["version"], i["attempt"]) for i in items] == [
        ("done", 2, 2, 1),
        ("phase", "finished", 2, 1),
    ]
    assert all(i["updated_at"] for i in items)
    one = api.get(f"/v1/jobs/{job['id']}/state/phase")
    assert one.status_code == 200 and one.json()["value"] == "finished"
    # Each change went on the stream, in order.
    assert state_events(api, sql, job["id"]) == [
        {"key": "phase", "value": "working", "version": 1},
        {"key": "done", "value": 1, "version": 1},
        {"key": "done", "value": 2, "version": 2},
        {"key": "phase", "value": "finished", "version": 2},
    ]


def test_404s_name_the_key_and_hide_another_tenant_s_job(stack: Stack, api: Any, sql: Any) -> None:
    job = submit(api, {"kind": "demo.noop", "payload": {}})
    assert api.get(f"/v1/jobs/{job['id']}/state").json() == {"items": []}
    unset = api.get(f"/v1/jobs/{job['id']}/state/plan")
    assert unset.status_code == 404 and "'plan'" in unset.json()["detail"]
    other = bearer(stack.key("globex"))
    for path in ("state", "state/plan"):
        resp = api.get(f"/v1/jobs/{job['id']}/{path}", headers=other)
        assert resp.status_code == 404, resp.text
        assert "plan" not in resp.json()["detail"]  # nothing about the job's keys
    missing = api.get(f"/v1/jobs/{uuid.uuid4()}/state")
    assert missing.status_code == 404
    too_long = api.get(f"/v1/jobs/{job['id']}/state/{'k' * (bounds.MAX_STATE_KEY_CHARS + 1)}")
    assert too_long.status_code == 422


def test_a_stale_lease_token_writes_nothing(stack: Stack, api: Any, sql: Any) -> None:
    job = submit(api, {"kind": "demo.noop", "payload": {}})
    token = running(sql, job["id"])
    zombie = run(publish(stack, job["id"], uuid.uuid4(), "plan", "stale"))
    assert (zombie.fenced, zombie.version, zombie.changed) == (False, None, False)
    assert sql.execute("SELECT count(*) AS n FROM published_state").fetchone()["n"] == 0
    assert sql.execute("SELECT count(*) AS n FROM job_output").fetchone()["n"] == 0
    held = run(publish(stack, job["id"], token, "plan", "fresh"))
    assert (held.fenced, held.version, held.changed) == (True, 1, True)
    # The same value again changes nothing: no version, no stream row.
    again = run(publish(stack, job["id"], token, "plan", "fresh"))
    assert (again.fenced, again.version, again.changed) == (True, 1, False)
    assert sql.execute("SELECT count(*) AS n FROM job_output").fetchone()["n"] == 1
    # A cancel asked for refuses the holder too.
    sql.execute("UPDATE jobs SET cancel_requested = true WHERE id = %s", (job["id"],))
    cancelled = run(publish(stack, job["id"], token, "plan", "after the cancel"))
    assert (cancelled.fenced, cancelled.cancelled) == (False, True)
    assert api.get(f"/v1/jobs/{job['id']}/state/plan").json()["value"] == "fresh"


def test_a_new_key_past_the_job_s_keys_is_refused(stack: Stack, api: Any, sql: Any) -> None:
    job = submit(api, {"kind": "demo.noop", "payload": {}})
    token = running(sql, job["id"])
    sql.execute(
        "INSERT INTO published_state (job_id, key, value, version, attempt) "
        "SELECT %s, 'k' || i, '1', 1, 1 FROM generate_series(1, %s) AS i",
        (job["id"], bounds.MAX_STATE_KEYS),
    )
    full = run(publish(stack, job["id"], token, "one-more", 1))
    assert (full.fenced, full.room, full.changed) == (True, False, False)
    known = run(publish(stack, job["id"], token, "k1", 2))
    assert (known.room, known.version, known.changed) == (True, 2, True)


def test_the_long_poll_answers_when_the_key_changes(stack: Stack, api: Any, sql: Any) -> None:
    job = submit(api, {"kind": "demo.noop", "payload": {}})
    token = running(sql, job["id"])
    url = f"/v1/jobs/{job['id']}/state/plan"
    # Unset, and nothing comes within the wait: 404 naming the key.
    assert api.get(url, params={"after_version": 0, "wait": 0.2}).status_code == 404
    run(publish(stack, job["id"], token, "plan", "draft"))
    # Past the version asked: at once.
    assert api.get(url, params={"after_version": 0, "wait": 20}).json()["version"] == 1
    # Not past it within the wait: what it holds.
    assert api.get(url, params={"after_version": 1, "wait": 0.2}).json()["version"] == 1

    result: dict[str, Any] = {}
    asked = threading.Event()

    def poll() -> None:
        asked.set()
        result["resp"] = api.get(url, params={"after_version": 1, "wait": 20})

    waiter = threading.Thread(target=poll)
    waiter.start()
    asked.wait(5)
    run(publish(stack, job["id"], token, "plan", "final"))
    waiter.join(25)
    assert not waiter.is_alive()
    resp = result["resp"]
    assert resp.status_code == 200, resp.text
    assert (resp.json()["value"], resp.json()["version"]) == ("final", 2)
    assert state_events(api, sql, job["id"]) == [
        {"key": "plan", "value": "draft", "version": 1},
        {"key": "plan", "value": "final", "version": 2},
    ]


def test_the_long_poll_of_a_finished_job_answers_at_once(stack: Stack, api: Any, sql: Any) -> None:
    job = submit(api, {"kind": "demo.publish", "payload": {"steps": 1}})
    run(drain(stack, sql, [job["id"]]))
    resp = api.get(f"/v1/jobs/{job['id']}/state/done", params={"after_version": 5, "wait": 20})
    assert resp.status_code == 200 and resp.json()["version"] == 1
    assert resp.elapsed.total_seconds() < 10


async def worker_publishes(
    stack: Stack, job_id: str, token: uuid.UUID, key: str, value: Any
) -> None:
    """ctx.set_state as a worker's attempt runs it (LeasedContext), under ``token``."""
    assert stack.settings.database_url
    async with store.connect(stack.settings.database_url, max_size=1) as db:
        ctx = LeasedContext(
            job_id=uuid.UUID(job_id),
            kind="demo.noop",
            attempt=1,
            deps=None,
            lease_token=token,
            lease_owner="test",
            db=db,
            recorded={},
        )
        await ctx.set_state(key, value)


def test_a_worker_that_lost_its_lease_stops_and_a_misuse_writes_nothing(
    stack: Stack, api: Any, sql: Any
) -> None:
    job = submit(api, {"kind": "demo.noop", "payload": {}})
    token = running(sql, job["id"])
    with pytest.raises(errors.LeaseLost):
        run(worker_publishes(stack, job["id"], uuid.uuid4(), "plan", "zombie"))
    with pytest.raises(errors.PermanentError, match="MAX_STATE_VALUE_BYTES"):
        run(worker_publishes(stack, job["id"], token, "plan", "x" * bounds.MAX_STATE_VALUE_BYTES))
    assert sql.execute("SELECT count(*) AS n FROM published_state").fetchone()["n"] == 0
    run(worker_publishes(stack, job["id"], token, "plan", ["a", "b"]))
    assert api.get(f"/v1/jobs/{job['id']}/state/plan").json()["value"] == ["a", "b"]
