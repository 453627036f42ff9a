"""Parked jobs (issue 16, fairness): a tenant's jobs past its window on the queue (its
running cap x TASKLEASE_QUEUE_WINDOW_PER_SLOT) wait in PostgreSQL with no message, and
go out, oldest first, as its leases end; another tenant's jobs are never behind them."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from app import store
from app.services import parking, sweeper
from app.states import JobState
from tests.conftest import Stack, job_row
from tests.helpers import engine_for, handle_and_ack, receive_records, submit

pytestmark = pytest.mark.integration


def parked(sql: Any, ids: list[Any]) -> list[bool]:
    rows = sql.execute(
        "SELECT id, parked FROM jobs WHERE id = ANY(%s::uuid[])", ([str(i) for i in ids],)
    ).fetchall()
    by_id = {str(r["id"]): r["parked"] for r in rows}
    return [by_id[str(i)] for i in ids]


def on_queue(stack: Stack) -> int:
    return stack.queue_depth()


async def five_for_acme(engine: Any) -> list[Any]:
    """acme's cap 1, window 2: five jobs, the last three parked."""
    await store.tenants.set_limits(engine.db, "acme", max_running=1)
    return [await submit(engine, "demo.noop", {}, tenant="acme") for _ in range(5)]


@pytest.mark.asyncio
async def test_jobs_past_the_tenants_window_are_parked_with_no_message(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        ids = await five_for_acme(engine)
        beta = await submit(engine, "demo.noop", {}, tenant="beta")
    assert parked(sql, ids) == [False, False, True, True, True]
    assert parked(sql, [beta]) == [False], "another tenant's job is not held by acme's window"
    assert on_queue(stack) == 3, "acme's two and beta's one: no message for a parked job"
    unsent = sql.execute("SELECT count(*) AS n FROM outbox WHERE sent_at IS NULL").fetchone()
    assert unsent["n"] == 0, "a parked job has no outbox row either"
    detail = sql.execute("SELECT detail FROM job_events WHERE job_id = %s", (ids[2],)).fetchone()[
        "detail"
    ]
    assert detail.startswith("accepted, parked")
    assert {job_row(sql, i)["state"] for i in ids} == {JobState.QUEUED}


@pytest.mark.asyncio
async def test_each_lease_that_ends_releases_the_oldest_parked_job_until_all_ran(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        ids = await five_for_acme(engine)
        for _ in range(40):
            records = await receive_records(engine, wait=1)
            if records:
                await handle_and_ack(engine, records)
            if all(job_row(sql, i)["state"] == JobState.SUCCEEDED for i in ids):
                break
    rows = [job_row(sql, i) for i in ids]
    assert [r["state"] for r in rows] == [JobState.SUCCEEDED] * 5
    assert [r["attempt"] for r in rows] == [1] * 5
    assert not any(parked(sql, ids))
    released = sql.execute(
        "SELECT job_id FROM outbox WHERE job_id = ANY(%s::uuid[]) ORDER BY id",
        ([str(i) for i in ids[2:]],),
    ).fetchall()
    assert [str(r["job_id"]) for r in released] == [str(i) for i in ids[2:]], (
        "parked jobs went out oldest first"
    )


@pytest.mark.asyncio
async def test_the_sweeper_releases_into_free_slots_when_no_lease_ends(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        ids = await five_for_acme(engine)
        # The two with a message are cancelled before they run: no lease ends.
        for i in ids[:2]:
            assert await store.jobs.cancel_waiting(engine.db, uuid.UUID(str(i)), detail="test")
        report = await sweeper.sweep_once(engine.settings, engine.db, engine.queue)
        assert report.released == 1, "one for acme's one free slot"
        assert parked(sql, ids) == [False, False, False, True, True]
        # Nothing more fits until a lease ends; a second pass releases nothing.
        assert await parking.release_all(engine.settings, engine.db, engine.queue) == 0


@pytest.mark.asyncio
async def test_a_parked_job_is_not_resent_as_lost_and_cancels_at_once(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        ids = await five_for_acme(engine)
        sql.execute("UPDATE jobs SET updated_at = now() - interval '1 hour'")
        lost = await store.leases.touch_lost(engine.db, age=60, limit=100)
        assert sorted(str(r.job_id) for r in lost) == sorted(map(str, ids[:2]))
        assert await store.jobs.cancel_waiting(engine.db, uuid.UUID(str(ids[4])), detail="x")
    assert job_row(sql, ids[4])["state"] == JobState.CANCELLED
    # A cancelled parked job is never released.
    async with engine_for(stack.settings) as engine:
        for i in ids[:2]:
            await store.jobs.cancel_waiting(engine.db, uuid.UUID(str(i)), detail="test")
        assert await parking.release_all(engine.settings, engine.db, engine.queue) == 1
    assert parked(sql, ids) == [False, False, False, True, True]
    assert job_row(sql, ids[4])["state"] == JobState.CANCELLED


@pytest.mark.asyncio
async def test_a_job_claimed_before_the_flood_releases_when_it_succeeds(
    stack: Stack, sql: Any
) -> None:
    """The claim saw no parked job; the completion does, and releases one."""
    async with engine_for(stack.settings) as engine:
        await store.tenants.set_limits(engine.db, "acme", max_running=1)
        first = await submit(engine, "demo.sleep", {"seconds": 1.5}, tenant="acme")
        records = await receive_records(engine)
        running = asyncio.create_task(handle_and_ack(engine, records))
        wait_until = asyncio.get_running_loop().time() + 10
        while job_row(sql, first)["state"] != JobState.RUNNING:
            assert asyncio.get_running_loop().time() < wait_until, "the first job never ran"
            await asyncio.sleep(0.05)
        later = [await submit(engine, "demo.noop", {}, tenant="acme") for _ in range(2)]
        assert parked(sql, later) == [False, True], "the window (1 x 2) holds the first two"
        # The one with a message is cancelled: the first's slot, once free, is nobody's.
        assert await store.jobs.cancel_waiting(engine.db, uuid.UUID(str(later[0])), detail="x")
        await running
    assert job_row(sql, first)["state"] == JobState.SUCCEEDED
    assert parked(sql, later)[1] is False, "its success released the parked job"
    sent = sql.execute("SELECT sent_at FROM outbox WHERE job_id = %s", (later[1],)).fetchone()
    assert sent["sent_at"] is not None


@pytest.mark.asyncio
async def test_a_tenants_high_priority_job_is_released_before_its_older_normal_ones(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        ids = await five_for_acme(engine)  # two with a message, three parked (normal)
        high = await submit(engine, "demo.noop", {}, tenant="acme", priority="high")
        assert parked(sql, [high]) == [True], "the window is full for every priority"
        for i in ids[:2]:
            await store.jobs.cancel_waiting(engine.db, uuid.UUID(str(i)), detail="test")
        assert await parking.release_all(engine.settings, engine.db, engine.queue) == 1
    assert parked(sql, [high, *ids[2:]]) == [False, True, True, True]
