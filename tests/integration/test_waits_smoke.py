"""Waits through the engine, in this process, against real PostgreSQL and SQS: a timer,
a callback and a fan-out run to the end, each holding no worker while it waits."""

from __future__ import annotations

from typing import Any

import pytest

from app.services import callbacks
from app.states import JobState
from tests.conftest import Stack, job_row
from tests.helpers import drain, engine_for, receive_records, submit

pytestmark = pytest.mark.integration


@pytest.mark.asyncio
async def test_a_nap_waits_without_a_worker_and_resumes(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.nap", {"seconds": 2})
        await engine.handle({"Records": await receive_records(engine)}, None)
        row = job_row(sql, job_id)
        assert row["state"] == JobState.WAITING
        assert row["wait_kind"] == "timer" and row["lease_token"] is None
        assert row["attempt"] == 0  # a wait uses no attempt
        await drain(engine, sql, [job_id])
    row = job_row(sql, job_id)
    assert row["state"] == JobState.SUCCEEDED, row
    assert row["attempt"] == 1 and row["runs"] == 2


@pytest.mark.asyncio
async def test_an_approval_waits_for_its_callback(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.approval", {"timeout_seconds": 600})
        await engine.handle({"Records": await receive_records(engine)}, None)
        assert job_row(sql, job_id)["state"] == JobState.WAITING
        token = await callbacks.token_for(engine.db, job_id, "approve")
        done = await callbacks.answer(engine.db, engine.queue, token, result={"ok": 1})
        assert done.job_woken
        with pytest.raises(Exception, match="already answered"):
            await callbacks.answer(engine.db, engine.queue, token, result={"ok": 2})
        await drain(engine, sql, [job_id])
    row = job_row(sql, job_id)
    assert row["state"] == JobState.SUCCEEDED
    assert row["result"] == {"approved": True, "answer": {"ok": 1}}


@pytest.mark.asyncio
async def test_a_fanout_gathers_its_children(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.fanout", {"children": 4, "at_least": 3, "fail": [1]})
        await drain(engine, sql, [job_id])
    row = job_row(sql, job_id)
    assert row["state"] == JobState.SUCCEEDED, row
    # At least 3 of 4, child 1 failing for good: the gather may return before the last
    # nap finishes, but never with the failure unseen once all three others succeeded.
    result = row["result"]
    assert result["children"] == 4 and result["succeeded"] >= 3, result
    assert (
        result["failed"] <= 1 and result["succeeded"] + result["failed"] + result["unfinished"] == 4
    )
    kids = sql.execute(
        "SELECT spawn_key, state FROM jobs WHERE parent_id = %s", (job_id,)
    ).fetchall()
    assert len(kids) == 4
    failing = next(k for k in kids if k["spawn_key"] == "child-1")
    assert failing["state"] in ("dead_lettered", "queued", "leased", "running", "retrying")
