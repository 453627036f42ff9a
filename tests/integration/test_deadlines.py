"""A run's deadline (issue 32) against real PostgreSQL and SQS, in this process: bad
values refused at submit with nothing written, the kind's default, and for each state
the deadline can find a job in, the job ended dead-lettered ("deadline passed") with
its children cancelled, by the sweeper (no worker holds it) or by a worker (at the claim,
while it runs, or at the end of a wait the deadline cut short)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from app import store
from app.services import deadlines as deadline_service
from app.services import redrive
from app.states import JobState
from tests import deadline_kinds as deadline_kinds_module
from tests.conftest import Stack, job_row
from tests.helpers import drain, engine_for, handle_and_ack, receive_records, submit
from tests.integration.conftest import written

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def deadline_kinds() -> Iterator[None]:
    """tests/deadline_kinds.py's kinds, registered for this module's tests only."""
    with deadline_kinds_module.registered():
        yield


def past_deadline(sql: Any, *job_ids: Any) -> None:
    """Move the jobs' deadlines to a second ago (what waiting for them would do)."""
    sql.execute(
        "UPDATE jobs SET deadline = now() - interval '1 second' WHERE id = ANY(%s::uuid[])",
        ([str(j) for j in job_ids],),
    )


def assert_ended(sql: Any, job_id: Any) -> dict[str, Any]:
    row = job_row(sql, job_id)
    assert row["state"] == JobState.DEAD_LETTERED, row
    assert row["dead_lettered_by"] == "deadline" and row["last_error"] == "deadline passed"
    assert row["finished_at"] is not None and row["lease_token"] is None
    assert row["wait_kind"] is None
    kids = sql.execute("SELECT state FROM jobs WHERE parent_id = %s", (job_id,)).fetchall()
    assert all(k["state"] == JobState.CANCELLED for k in kids), kids
    return row


# --- submit ------------------------------------------------------------------------


def test_bad_deadlines_are_refused_naming_the_field(stack: Stack, sql: Any, api: Any) -> None:
    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat()
    bad = [
        ({"deadline": "2020-01-01T00:00:00Z"}, "deadline"),
        ({"deadline": soon, "deadline_seconds": 60}, "deadline"),
        ({"deadline_seconds": 0}, "deadline_seconds"),
        ({"deadline_seconds": 367 * 86_400}, "deadline_seconds"),
        ({"deadline": "2099-01-01T00:00:00Z"}, "deadline"),
        ({"deadline": "2030-01-01T00:00:00"}, "deadline"),
    ]
    before = written(sql)
    for extra, field in bad:
        resp = api.post("/v1/jobs", json={"kind": "demo.noop", "payload": {}, **extra})
        assert resp.status_code == 422, (extra, resp.text)
        assert field in resp.json()["detail"], (extra, resp.text)
        batch = {"jobs": [{"kind": "demo.noop", "payload": {}, **extra}]}
        resp = api.post("/v1/jobs/batch", json=batch)
        assert resp.status_code == 422 and field in resp.json()["detail"], (extra, resp.text)
    assert written(sql) == before


def test_the_deadline_is_stored_shown_and_defaulted_by_the_kind(stack: Stack, api: Any) -> None:
    at = (dt.datetime.now(dt.UTC) + dt.timedelta(days=2)).replace(microsecond=0)
    resp = api.post(
        "/v1/jobs", json={"kind": "demo.noop", "payload": {}, "deadline": at.isoformat()}
    )
    assert resp.status_code == 202, resp.text
    shown = api.get(f"/v1/jobs/{resp.json()['id']}").json()
    assert dt.datetime.fromisoformat(shown["deadline"]) == at
    resp = api.post("/v1/jobs", json={"kind": "demo.noop", "payload": {}, "deadline_seconds": 60})
    deadline = dt.datetime.fromisoformat(resp.json()["deadline"])
    created = dt.datetime.fromisoformat(resp.json()["created_at"])
    assert deadline - created == dt.timedelta(seconds=60)
    resp = api.post("/v1/jobs", json={"kind": "test.deadline_default", "payload": {}})
    job = resp.json()
    assert dt.datetime.fromisoformat(job["deadline"]) - dt.datetime.fromisoformat(
        job["created_at"]
    ) == dt.timedelta(seconds=120)
    resp = api.post("/v1/jobs", json={"kind": "demo.noop", "payload": {}})
    assert resp.json()["deadline"] is None


# --- the sweeper: the jobs no worker holds -------------------------------------------


@pytest.mark.asyncio
async def test_the_sweeper_ends_each_unheld_state_past_its_deadline(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        db, queue = engine.db, engine.queue
        far = {"deadline_seconds": 3600}
        queued = await submit(engine, "demo.noop", {}, **far)
        parked = await submit(engine, "demo.noop", {}, **far)
        sql.execute("UPDATE jobs SET parked = true WHERE id = %s", (parked,))
        timer = await submit(engine, "demo.nap", {"seconds": 600}, **far)
        callback = await submit(engine, "test.deadline_parent", {}, **far)
        children = await submit(engine, "demo.fanout", {"children": 2, "child_seconds": 600}, **far)
        retrying = await submit(engine, "demo.flaky", {"fail_attempts": 5}, max_attempts=3, **far)
        stalled = await submit(engine, "demo.noop", {}, **far)
        delayed = await submit(engine, "demo.noop", {}, delay_seconds=600, **far)
        ran = [timer, callback, children, retrying]
        for _ in range(6):  # each runs to its wait or its first failure
            records = await receive_records(engine, wait=1)
            mine = [r for r in records if r["body"] and any(str(j) in r["body"] for j in ran)]
            if mine:
                await handle_and_ack(engine, mine)
            rows = {job_row(sql, j)["state"] for j in ran}
            if rows <= {JobState.WAITING, JobState.RETRYING}:
                break
        assert job_row(sql, retrying)["state"] == JobState.RETRYING
        assert {job_row(sql, j)["wait_kind"] for j in (timer, callback, children)} == {
            "timer",
            "callback",
            "children",
        }
        sql.execute(
            "UPDATE jobs SET state = 'stalled', lease_token = gen_random_uuid(), "
            "lease_expires_at = now() - interval '1 minute' WHERE id = %s",
            (stalled,),
        )
        everyone = [queued, parked, timer, callback, children, retrying, stalled, delayed]
        kids = [
            r["id"]
            for r in sql.execute(
                "SELECT id FROM jobs WHERE parent_id = ANY(%s::uuid[])",
                ([str(j) for j in everyone],),
            ).fetchall()
        ]
        assert len(kids) == 3
        past_deadline(sql, *everyone)
        assert await deadline_service.sweep(db, queue, limit=500) == len(everyone)
        for job_id in everyone:
            assert_ended(sql, job_id)
        for kid in kids:
            assert job_row(sql, kid)["state"] == JobState.CANCELLED
        assert await deadline_service.sweep(db, queue, limit=500) == 0
        assert await store.deadlines.past(db, grace=0) == []
        # Redriven by an operator: it runs again, with no deadline.
        budget = store.leases.RedriveBudget.of(stack.settings)
        await redrive.reset(db, queue, [queued], with_outbox=True, detail="test", budget=budget)
        row = job_row(sql, queued)
        assert row["state"] == JobState.QUEUED and row["deadline"] is None, row


# --- a worker: the jobs it holds -------------------------------------------------------


@pytest.mark.asyncio
async def test_a_delivery_past_the_deadline_ends_the_job_at_the_claim(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.noop", {}, deadline_seconds=3600)
        past_deadline(sql, job_id)
        await handle_and_ack(engine, await receive_records(engine))
        row = assert_ended(sql, job_id)
        assert row["runs"] == 0  # never ran
        events = sql.execute(
            "SELECT detail FROM job_events WHERE job_id = %s ORDER BY id", (job_id,)
        ).fetchall()
        assert events[-1]["detail"] == "deadline passed (ended by its worker)"


@pytest.mark.asyncio
async def test_a_running_attempt_is_stopped_at_the_deadline(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "test.deadline_busy", {"seconds": 600}, deadline_seconds=2)
        await drain(engine, sql, [job_id], deadline=30)
        row = assert_ended(sql, job_id)
        took = (row["finished_at"] - row["created_at"]).total_seconds()
        assert 2 <= took < 10, took
        # The attempt stopped inside its step: "work" was never recorded.
        keys = {
            r["key"] for r in sql.execute("SELECT key FROM effects WHERE job_id = %s", (job_id,))
        }
        assert "started" in keys and "work" not in keys


@pytest.mark.asyncio
async def test_a_sleep_past_the_deadline_wakes_at_the_deadline(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.nap", {"seconds": 600}, deadline_seconds=3)
        await handle_and_ack(engine, await receive_records(engine))
        row = job_row(sql, job_id)
        assert row["state"] == JobState.WAITING and row["wake_at"] == row["deadline"], row
        await drain(engine, sql, [job_id], deadline=30)  # no sweeper: the wake-up ends it
        row = assert_ended(sql, job_id)
        assert (row["finished_at"] - row["created_at"]).total_seconds() < 10


@pytest.mark.asyncio
async def test_done_when_a_job_waiting_on_a_callback_ends_at_its_deadline_with_its_children(
    stack: Stack, sql: Any
) -> None:
    """Issue 32's done-when: deadline_seconds=5, waiting on a callback (an hour's), a child
    napping: at 5 s the job is dead-lettered "deadline passed" and its child cancelled."""
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "test.deadline_parent", {}, deadline_seconds=5)
        for _ in range(5):  # the parent to its wait, the child to its nap
            await handle_and_ack(engine, await receive_records(engine, wait=1))
            kids = sql.execute("SELECT state FROM jobs WHERE parent_id = %s", (job_id,)).fetchall()
            if (
                job_row(sql, job_id)["wait_kind"] == "callback"
                and kids
                and all(k["state"] == JobState.WAITING for k in kids)
            ):
                break
        assert job_row(sql, job_id)["wait_kind"] == "callback"
        await drain(engine, sql, [job_id], deadline=30)
        row = assert_ended(sql, job_id)
        took = (row["finished_at"] - row["created_at"]).total_seconds()
        assert 5 <= took < 12, took
        kid = sql.execute("SELECT * FROM jobs WHERE parent_id = %s", (job_id,)).fetchone()
        assert kid["state"] == JobState.CANCELLED and kid["finished_at"] == row["finished_at"]
