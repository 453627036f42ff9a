"""The cancel notification against real PostgreSQL and SQS, with the engine in this
process: a notification for a job this worker does not run, or for one whose cancel
nobody asked for, changes nothing; a cancel
stops the fake model's stream at once (the lease is 30 s long: a heartbeat every 10 s
cannot explain it); a worker whose LISTEN connection was dropped reconnects, catches the
cancel it missed, and is notified again; and nothing is recorded after a cancel, by
whichever attempt, because the writes are fenced on the flag."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
from prometheus_client import REGISTRY

from app import batching, errors, store
from app.services import jobs
from app.states import JobState
from app.worker.context import LeasedContext
from app.worker.engine import Engine
from tests.conftest import Stack, job_row
from tests.helpers import engine_for, receive_records, submit
from tests.integration.test_output_buffer import running
from tests.invariants import chunks, describe, effects, timeline

# What this module checks does not depend on the carrier: it runs on moto only.
pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]

# Half the 10 s between heartbeats of a 30 s lease: only the notification can be this
# quick, with room for a reconnect (0.5 s) on a loaded 2-core runner.
WITHIN_SECONDS = 5.0
# A streamed answer (a word every 50 ms: 20 s), and a call that writes nothing for 20 s.
WRITE = ("demo.write", {"prompt": "p", "words": 400})
SLEEP = ("demo.sleep", {"seconds": 20})
# This database's LISTEN connections for cancels (the API's streams listen elsewhere).
LISTENER = (
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
    "AND query = 'LISTEN \"tasklease_cancel\"'"
)


def delivered(how: str) -> float:
    return REGISTRY.get_sample_value("tasklease_cancels_delivered_total", {"how": how}) or 0.0


async def until(check: Callable[[], Any], what: str, within: float = 15) -> Any:
    """wait_for for a test whose engine runs on this loop: polls without blocking it."""
    end = time.monotonic() + within
    while not (value := check()):
        if time.monotonic() > end:
            pytest.fail(f"timed out after {within:.0f} s waiting for {what}")
        await asyncio.sleep(0.05)
    return value


@asynccontextmanager
async def running_in_engine(
    stack: Stack, sql: Any, count: int, job: tuple[str, dict[str, Any]]
) -> AsyncIterator[tuple[Engine, list[Any]]]:
    """``count`` jobs running in an engine of this process, which listens."""
    settings = stack.with_settings(visibility_timeout_seconds=30, fake_model_chunk_ms=50)
    async with engine_for(settings) as engine:
        ids = [await submit(engine, *job) for _ in range(count)]
        records: list[dict[str, Any]] = []
        while len(records) < count:
            records += await receive_records(engine, wait=1)
        batch = asyncio.create_task(engine.handle({"Records": records}, None))
        for job_id in ids:
            await until(lambda j=job_id: job_row(sql, j)["state"] == JobState.RUNNING, "running")
        await until(engine.cancels.listening.is_set, "the listener")
        yield engine, ids
        await asyncio.wait_for(batch, 15)
        # As on Lambda (nothing started it for the process's life): it listened only while
        # the batch ran, so a frozen process holds no LISTEN connection.
        assert not engine.cancels.listening.is_set()
        await until(lambda: not sql.execute(LISTENER).fetchall(), "the listener closed")


async def cancelled_soon(sql: Any, job_id: Any, asked: float) -> None:
    await until(lambda: job_row(sql, job_id)["state"] == JobState.CANCELLED, "cancelled")
    took = time.monotonic() - asked
    assert took < WITHIN_SECONDS, (
        f"cancelled {took:.2f} s after the cancel\n{describe(sql, job_id)}"
    )
    ends = [e for e in timeline(sql, job_id) if e["to_state"] == JobState.CANCELLED]
    assert len(ends) == 1, describe(sql, job_id)


@pytest.mark.asyncio
async def test_a_notify_for_another_job_changes_nothing_and_a_cancel_stops_the_stream(
    stack: Stack, sql: Any
) -> None:
    async with running_in_engine(stack, sql, 1, WRITE) as (engine, [job_id]):
        await until(lambda: len(chunks(sql, job_id)) >= 3, "chunks streaming")
        # Given a job running in "another process" (a lease this engine does not hold).
        other = await submit(engine, "demo.noop", {})
        token = running(sql, other)
        notified = delivered("notify") + delivered("write")

        # When it is cancelled, and notifications name an unknown job, no job at all, and
        # this engine's job though nobody asked to cancel it (a forged or stale one).
        await jobs.cancel(engine.db, other, scope=None)
        for payload in (str(uuid.uuid4()), "not-a-job-id", str(job_id)):
            sql.execute("SELECT pg_notify('tasklease_cancel', %s)", (payload,))

        # Then this engine's job goes on streaming, and the other is left to its holder.
        seen = len(chunks(sql, job_id))
        await until(lambda: len(chunks(sql, job_id)) >= seen + 10, "more chunks")
        assert job_row(sql, job_id)["state"] == JobState.RUNNING
        row = job_row(sql, other)
        assert (row["state"], row["lease_token"], row["cancel_requested"]) == (
            JobState.RUNNING,
            token,
            True,
        )
        assert delivered("notify") + delivered("write") == notified

        # When its own job is cancelled, the fake model's stream stops at once (told by
        # the notification, or by its next output's write refused, 200 ms at most).
        asked = time.monotonic()
        await jobs.cancel(engine.db, job_id, scope=None)
        written = len(chunks(sql, job_id))
        await cancelled_soon(sql, job_id, asked)
        assert delivered("notify") + delivered("write") == notified + 1
        await asyncio.sleep(0.3)  # a word is 50 ms: a stream still going would show
        assert len(chunks(sql, job_id)) == written
        assert effects(sql, job_id) == []


@pytest.mark.asyncio
async def test_a_dropped_listen_connection_reconnects_and_still_cancels(
    stack: Stack, sql: Any
) -> None:
    # Jobs in a call that writes nothing: only the listener (or a heartbeat) can stop them.
    async with running_in_engine(stack, sql, 2, SLEEP) as (engine, [first, second]):
        [old] = sql.execute(LISTENER).fetchall()
        rechecked, notified = delivered("recheck"), delivered("notify")

        # When the listener's connection is killed, and a cancel comes while it is down.
        sql.execute("SELECT pg_terminate_backend(%s)", (old["pid"],))
        await until(lambda: not engine.cancels.listening.is_set(), "the listener to notice")
        asked = time.monotonic()
        await jobs.cancel(engine.db, first, scope=None)

        # Then it reconnects and finds that cancel by reading the running jobs' flags.
        await cancelled_soon(sql, first, asked)
        assert delivered("recheck") == rechecked + 1
        assert job_row(sql, second)["state"] == JobState.RUNNING

        # And the next cancel comes by notification again.
        await until(engine.cancels.listening.is_set, "the listener back")
        [new] = sql.execute(LISTENER).fetchall()
        assert new["pid"] != old["pid"]
        asked = time.monotonic()
        await jobs.cancel(engine.db, second, scope=None)
        await cancelled_soon(sql, second, asked)
        assert delivered("notify") == notified + 1


@pytest.mark.asyncio
async def test_nothing_is_recorded_after_a_cancel(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.noop", {})
        token = running(sql, job_id)
        holder = LeasedContext(
            job_id=job_id,
            kind="demo.noop",
            attempt=1,
            deps=None,
            lease_token=token,
            lease_owner="w",
            db=engine.db,
            recorded={},
            settings=engine.settings,
        )
        zombie = LeasedContext(
            job_id=job_id,
            kind="demo.noop",
            attempt=1,
            deps=None,
            lease_token=uuid.uuid4(),
            lease_owner="z",
            db=engine.db,
            recorded={},
            settings=engine.settings,
        )
        calls: list[str] = []

        async def call() -> str:
            calls.append("called")
            return "done"

        # Before the cancel the holder records; a zombie's record is refused as lease lost.
        assert await holder.effect("before", call) == "done"
        await holder.emit({"n": 1})
        await holder.output.flush()
        with pytest.raises(errors.LeaseLost):
            await zombie.effect("zombie", call)

        # After the cancel, neither an effect (its call has run) nor output is written.
        assert await store.jobs.request_cancel(engine.db, job_id)
        with pytest.raises(errors.Cancelled):
            await holder.effect("after", call)
        await holder.emit({"n": 2})
        with pytest.raises(errors.Cancelled):
            await holder.output.flush()
        with pytest.raises(errors.Cancelled):
            await holder.progress(0.5)
        item = store.streams.OutputItem(dt.datetime.now(dt.UTC), "output", {"n": 3})
        with pytest.raises(errors.Cancelled):
            await store.streams.append(engine.db, job_id, token, [item])

        assert [e["key"] for e in effects(sql, job_id)] == ["before"]
        rows = sql.execute("SELECT data FROM job_output WHERE job_id = %s", (job_id,)).fetchall()
        assert [r["data"] for r in rows] == [{"n": 1}]
        assert calls == ["called", "called", "called"]


@pytest.mark.asyncio
async def test_a_cancel_whose_notification_is_lost_stops_the_job_at_its_next_heartbeat(
    stack: Stack, sql: Any
) -> None:
    settings = stack.with_settings(visibility_timeout_seconds=2)  # a heartbeat every 0.7 s
    async with engine_for(settings) as engine:
        job_id = await submit(engine, *SLEEP)
        batch = asyncio.create_task(engine.handle({"Records": await receive_records(engine)}, None))
        await until(lambda: job_row(sql, job_id)["state"] == JobState.RUNNING, "running")
        await until(engine.cancels.listening.is_set, "the listener")
        beats = delivered("heartbeat")
        # The flag set with the triggers off: no notification is sent.
        sql.execute("SET session_replication_role = replica")
        sql.execute("UPDATE jobs SET cancel_requested = true WHERE id = %s", (job_id,))
        sql.execute("SET session_replication_role = DEFAULT")
        await asyncio.wait_for(batch, 5)
    assert job_row(sql, job_id)["state"] == JobState.CANCELLED
    assert delivered("heartbeat") == beats + 1


def test_the_trigger_notifies_a_cancel_of_a_leased_job_only(stack: Stack, sql: Any) -> None:
    """The API's and CLI's cancel, and a cancelled parent's trigger, notify the ids of the
    jobs under a live lease they ask to stop; a job cancelled at once is not notified."""

    async def given() -> tuple[Any, Any, Any]:
        async with engine_for(stack.settings) as engine:
            return tuple([await submit(engine, "demo.noop", {}) for _ in range(3)])

    parent, child, queued = asyncio.run(given())
    running(sql, child)
    sql.execute("UPDATE jobs SET parent_id = %s WHERE id = %s", (parent, child))
    with psycopg.connect(stack.database_url, autocommit=True) as listener:
        listener.execute("LISTEN tasklease_cancel")

        async def cancel(job_id: Any) -> None:
            async with store.connect(stack.database_url, max_size=1) as db:
                await jobs.cancel(db, job_id, scope=None)

        asyncio.run(cancel(queued))  # cancelled at once
        asyncio.run(cancel(parent))  # a queued parent: cancelled, its running child asked
        notes = [n.payload for n in listener.notifies(timeout=1, stop_after=2)]
    assert notes == [str(child)]
    assert job_row(sql, parent)["state"] == JobState.CANCELLED
    assert job_row(sql, child)["cancel_requested"] is True


@pytest.mark.asyncio
async def test_a_cancel_between_the_claim_and_the_start_is_not_left_to_the_heartbeat(
    stack: Stack, sql: Any
) -> None:
    settings = stack.with_settings(visibility_timeout_seconds=30)
    async with engine_for(settings) as engine:
        engine.cancels.start()  # as a local worker: listening before anything runs
        await until(engine.cancels.listening.is_set, "the listener")
        job_id = await submit(engine, *SLEEP)
        notified = delivered("notify")
        start = engine._start_many

        async def start_then_cancel(items: list[Any]) -> list[Any]:
            """The job is claimed and started; its cancel is notified before it runs here."""
            started = await start(items)
            await jobs.cancel(engine.db, job_id, scope=None)
            await until(lambda: job_id in engine.cancels._early, "the notification")
            return started

        engine._starts = batching.Batcher(start_then_cancel, max_size=10)
        asked = time.monotonic()
        await engine.handle({"Records": await receive_records(engine)}, None)
        await cancelled_soon(sql, job_id, asked)
        assert delivered("notify") == notified + 1


@pytest.mark.asyncio
async def test_a_cancel_whose_notification_is_lost_stops_a_stream_at_its_next_write(
    stack: Stack, sql: Any
) -> None:
    async with running_in_engine(stack, sql, 1, WRITE) as (_, [job_id]):
        await until(lambda: len(chunks(sql, job_id)) >= 3, "chunks streaming")
        writes = delivered("write")
        asked = time.monotonic()
        sql.execute("SET session_replication_role = replica")  # no trigger: no notification
        sql.execute("UPDATE jobs SET cancel_requested = true WHERE id = %s", (job_id,))
        sql.execute("SET session_replication_role = DEFAULT")
        written = len(chunks(sql, job_id))
        await cancelled_soon(sql, job_id, asked)
        assert delivered("write") == writes + 1
        assert len(chunks(sql, job_id)) == written
