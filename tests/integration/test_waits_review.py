"""Waits, as a review found them wanting: an answer racing a suspension, a cancel asked
for while the job ran and then suspended, a deadlock between two statements, waiting
jobs and the tenant's cap, an answered wait repaired by its next message."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest

from app import errors, store
from app.services import callbacks, outbox
from app.states import JobState
from tests.conftest import Stack, job_row
from tests.helpers import drain, engine_for, handle_and_ack, receive_records, routes, submit
from tests.invariants import check_invariants, describe

pytestmark = pytest.mark.integration


async def waiting_for_approval(engine: Any, sql: Any) -> tuple[Any, str]:
    job_id = await submit(engine, "demo.approval", {"timeout_seconds": 600})
    await handle_and_ack(engine, await receive_records(engine))
    assert job_row(sql, job_id)["state"] == JobState.WAITING, describe(sql, job_id)
    return job_id, await callbacks.token_for(engine.db, job_id, "approve")


def back_to_running(sql: Any, job_id: Any, *, cancel: bool = False) -> uuid.UUID:
    """The job as its worker holds it just before it suspends (a live lease)."""
    token = uuid.uuid4()
    sql.execute(
        "UPDATE jobs SET state = 'running', lease_token = %s, lease_owner = 'w',"
        " lease_expires_at = now() + interval '60 s', wait_kind = NULL, wait_key = NULL,"
        " wake_at = NULL, attempt = attempt + 1, cancel_requested = %s WHERE id = %s",
        (token, cancel, job_id),
    )
    sql.execute(
        "INSERT INTO job_events (job_id, from_state, to_state, attempt, worker)"
        " SELECT id, 'waiting'::job_state, 'leased'::job_state, attempt, 'w' FROM jobs WHERE id = %s"
        " UNION ALL SELECT id, 'leased'::job_state, 'running'::job_state, attempt, 'w'"
        " FROM jobs WHERE id = %s",
        (job_id, job_id),
    )
    return token


async def suspend_on_callback(engine: Any, job_id: Any, token: uuid.UUID) -> Any:
    row = await store.waits.callback_of(engine.db, job_id, "approve")
    assert row is not None
    return await store.waits.suspend(
        engine.db,
        job_id,
        token,
        wait_kind="callback",
        wait_key="approve",
        wake_at=row.deadline,
        rule=None,
        cap=engine.settings.max_message_delay_seconds,
        detail="waiting for callback approve",
    )


@pytest.mark.asyncio
async def test_an_answer_and_a_suspension_meet_on_the_jobs_row_lock(
    stack: Stack, sql: Any, database_url: str
) -> None:
    """The answer takes the job's row lock first, as a suspension does: with the row held,
    the answer waits (before: it went ahead on a snapshot that could miss the suspension,
    and the job stayed waiting with its answer in)."""
    async with engine_for(stack.settings) as engine:
        job_id, token = await waiting_for_approval(engine, sql)
        lease = back_to_running(sql, job_id)
        holder = await psycopg.AsyncConnection.connect(database_url)
        try:
            await holder.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (job_id,))
            answering = asyncio.create_task(
                callbacks.answer(engine.db, engine.queue, token, result={"ok": True})
            )
            suspending = asyncio.create_task(suspend_on_callback(engine, job_id, lease))
            await asyncio.sleep(1.0)
            assert not answering.done(), "the answer did not wait for the job's row"
            await holder.commit()
        finally:
            await holder.close()
        answered, suspended = await asyncio.gather(answering, suspending)
        assert suspended.changed
        # Whichever committed second saw the other: the job is queued with its answer.
        row = job_row(sql, job_id)
        assert row["state"] == JobState.QUEUED, describe(sql, job_id)
        assert answered.job_woken or suspended.woken
        # The worker's suspend sends the woken job's message itself (outcomes.suspend).
        await outbox.send(engine.db, engine.queue, await store.waits.unsent_of(engine.db, job_id))
        await drain(engine, sql, [job_id])
    assert job_row(sql, job_id)["result"] == {"approved": True, "answer": {"ok": True}}
    check_invariants(sql, stack, [job_id])


@pytest.mark.asyncio
async def test_a_job_cancelled_while_it_ran_is_cancelled_when_it_would_wait(
    stack: Stack, sql: Any
) -> None:
    """A waiting job with a cancel asked for was never woken nor claimed again."""
    async with engine_for(stack.settings) as engine:
        job_id, _ = await waiting_for_approval(engine, sql)
        lease = back_to_running(sql, job_id, cancel=True)
        suspended = await suspend_on_callback(engine, job_id, lease)
    assert suspended.changed and suspended.cancelled
    row = job_row(sql, job_id)
    assert row["state"] == JobState.CANCELLED, describe(sql, job_id)
    assert row["wait_kind"] is None and row["lease_token"] is None


@pytest.mark.asyncio
async def test_a_statement_that_loses_a_deadlock_is_run_again(
    stack: Stack, database_url: str
) -> None:
    """Two statements locking the same rows in opposite orders (two batches finishing
    children of the same parents): the victim's statement is run again, not failed."""
    db = store.Database(database_url, min_size=1, max_size=2)
    await db.open()
    other = await psycopg.AsyncConnection.connect(database_url, autocommit=False)
    try:
        await other.execute("SELECT pg_advisory_xact_lock(7002)")
        victim = asyncio.create_task(
            db.fetch(
                "SELECT pg_advisory_xact_lock(7001), pg_sleep(0.3),"
                " pg_advisory_xact_lock(7002), 'done' AS outcome"
            )
        )
        await asyncio.sleep(0.8)  # the statement holds 7001 and has waited on 7002 since 0.3 s
        # This session now waits on 7001: a deadlock, and the statement waited first, so
        # the detector picks it.
        await other.execute("SELECT pg_advisory_xact_lock(7001)")
        await other.commit()
        rows = await asyncio.wait_for(victim, 30)
    finally:
        await other.close()
        await db.close()
    assert [r["outcome"] for r in rows] == ["done"]


@pytest.mark.asyncio
async def test_waiting_jobs_count_toward_the_tenants_cap_on_unfinished_jobs(
    stack: Stack, sql: Any
) -> None:
    capped = stack.settings.model_copy(update={"max_jobs_in_flight": 1})
    async with engine_for(capped) as engine:
        await submit(engine, "demo.noop", {}, delay_seconds=3600)
        with pytest.raises(errors.TooManyRequests, match="unfinished"):
            await submit(engine, "demo.noop", {})
    assert sql.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1


@pytest.mark.asyncio
async def test_an_answered_wait_still_waiting_is_woken_by_its_next_message(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        job_id, _ = await waiting_for_approval(engine, sql)
        # The answer is in, but nothing woke the job (a lost race, as before the fix).
        sql.execute(
            "UPDATE callbacks SET state = 'succeeded', result = '{\"ok\": 1}', answered_at = now()"
            " WHERE job_id = %s",
            (job_id,),
        )
        await engine.queue.send_jobs(routes(job_id))  # a duplicate, or the deadline's wake-up
        await drain(engine, sql, [job_id])
    row = job_row(sql, job_id)
    assert row["state"] == JobState.SUCCEEDED, describe(sql, job_id)
    assert row["result"] == {"approved": True, "answer": {"ok": 1}}


@pytest.mark.asyncio
async def test_a_wake_up_sends_only_the_row_its_write_made(stack: Stack, sql: Any) -> None:
    """An answer wakes the job and sends one message, not one more for an older row not
    marked yet (a long-running API marks its sent rows a moment after it answers): that
    row was sent, and sending it again was a second message for the job."""
    async with engine_for(stack.settings) as engine:
        job_id, token = await waiting_for_approval(engine, sql)
        # The submission's row as the API leaves it between its send and its mark.
        sql.execute("UPDATE outbox SET sent_at = NULL WHERE job_id = %s", (job_id,))
        answered = await callbacks.answer(engine.db, engine.queue, token, result={"ok": True})
        assert answered.job_woken
        records = await receive_records(engine, wait=1)
        records += await receive_records(engine, wait=1)
        ours = [r for r in records if str(job_id) in r["body"]]
        assert len(ours) == 1, records
        rows = sql.execute(
            "SELECT sent_at IS NOT NULL AS sent FROM outbox WHERE job_id = %s ORDER BY id",
            (job_id,),
        ).fetchall()
        assert [r["sent"] for r in rows] == [False, True], rows
        await handle_and_ack(engine, records)
        await drain(engine, sql, [job_id])
    assert job_row(sql, job_id)["state"] == JobState.SUCCEEDED, describe(sql, job_id)
    check_invariants(sql, stack, [job_id])
