"""A lease that ends any way (dead-lettered, cancelled, past its deadline), not only a
success, releases the parked job behind it at once (issue 35): its key's next job, or its
tenant's, goes out as the worker writes the end, not at the sweeper's next pass. Each
first job's claim saw no parked job (the job behind it was parked after), so only the
end's own look can release it; no sweep runs in these tests."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from app import store
from app.services import jobs
from app.states import JobState
from tests.conftest import Stack, job_row
from tests.helpers import drain, engine_for, handle_and_ack, receive_records, submit
from tests.integration.test_cancel_notify import until
from tests.invariants import describe

pytestmark = pytest.mark.integration


def released_and_sent(sql: Any, job_id: Any, rows: int) -> None:
    """Unparked, with its release's outbox row sent (``rows``: with its submission's)."""
    row = job_row(sql, job_id)
    assert (row["state"], row["parked"]) == (JobState.QUEUED, False), describe(sql, job_id)
    sent = sql.execute(
        "SELECT sent_at FROM outbox WHERE job_id = %s ORDER BY id", (job_id,)
    ).fetchall()
    assert [r["sent_at"] is not None for r in sent] == [True] * rows, (
        "released by the ending lease, its message sent"
    )


async def first_and_parked_behind(
    engine: Any, sql: Any, first: dict[str, Any], behind: dict[str, Any], **kw: Any
) -> tuple[Any, Any, asyncio.Task[None]]:
    """Two jobs of one conversation delivered in one batch: the first runs, the second is
    parked behind its key by the same claim (whose has_parked saw no parked job yet)."""
    a = await submit(engine, "demo.converse", first, **kw)
    b = await submit(engine, "demo.converse", behind)
    records: list[dict[str, Any]] = []
    for _ in range(10):
        records += await receive_records(engine, wait=1)
        if len(records) >= 2:
            break
    assert len(records) == 2, records
    batch = asyncio.create_task(handle_and_ack(engine, records))
    await until(lambda: job_row(sql, b)["parked"], "the second parked behind its key")
    return a, b, batch


@pytest.mark.asyncio
async def test_a_cancelled_run_releases_its_keys_next_job_at_once(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.with_settings(visibility_timeout_seconds=30)) as engine:
        a, b, batch = await first_and_parked_behind(
            engine, sql, {"conversation": "c", "seconds": 60}, {"conversation": "c", "seconds": 0}
        )
        await until(lambda: job_row(sql, a)["state"] == JobState.RUNNING, "the first running")
        await until(engine.cancels.listening.is_set, "the cancel listener")
        await jobs.cancel(engine.db, uuid.UUID(str(a)), scope=None)
        await asyncio.wait_for(batch, 30)
        assert job_row(sql, a)["state"] == JobState.CANCELLED, describe(sql, a)
        released_and_sent(sql, b, 2)  # submitted, released
        await drain(engine, sql, [b])
    row = job_row(sql, b)
    assert (row["state"], row["attempt"]) == (JobState.SUCCEEDED, 1), describe(sql, b)


@pytest.mark.asyncio
async def test_a_run_ended_by_its_deadline_releases_its_keys_next_job_at_once(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.with_settings(visibility_timeout_seconds=30)) as engine:
        a, b, batch = await first_and_parked_behind(
            engine,
            sql,
            {"conversation": "d", "seconds": 60},
            {"conversation": "d", "seconds": 0},
            deadline_seconds=5,
        )
        await asyncio.wait_for(batch, 30)
        row = job_row(sql, a)
        assert (row["state"], row["dead_lettered_by"]) == (JobState.DEAD_LETTERED, "deadline")
        released_and_sent(sql, b, 2)  # submitted, released
        await drain(engine, sql, [b])
    assert job_row(sql, b)["state"] == JobState.SUCCEEDED, describe(sql, b)


@pytest.mark.asyncio
async def test_a_dead_lettered_run_releases_its_tenants_parked_job_at_once(
    stack: Stack, sql: Any
) -> None:
    """acme's cap 1 (window 2): the first job runs, then fails for good; the job parked
    past the window meanwhile goes out as the dead letter is written."""
    async with engine_for(stack.settings) as engine:
        await store.tenants.set_limits(engine.db, "acme", max_running=1)
        first = await submit(
            engine, "demo.sleep", {"seconds": 1, "steps": 2, "fail_at": 1}, tenant="acme"
        )
        records = await receive_records(engine)
        running = asyncio.create_task(handle_and_ack(engine, records))
        await until(lambda: job_row(sql, first)["state"] == JobState.RUNNING, "the first running")
        later = [await submit(engine, "demo.noop", {}, tenant="acme") for _ in range(2)]
        assert [job_row(sql, i)["parked"] for i in later] == [False, True]
        # The one with a message is cancelled: the first's slot, once free, is the other's.
        assert await store.jobs.cancel_waiting(engine.db, uuid.UUID(str(later[0])), detail="x")
        await asyncio.wait_for(running, 30)
        assert job_row(sql, first)["state"] == JobState.DEAD_LETTERED, describe(sql, first)
        released_and_sent(sql, later[1], 1)  # parked at submission
        await drain(engine, sql, [later[1]])
    assert job_row(sql, later[1])["state"] == JobState.SUCCEEDED
