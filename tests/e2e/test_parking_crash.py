"""A worker SIGKILLed right after it released a parked job (issue 16): the release is
committed (unparked, outbox row written), the message not sent. The outbox relay sends it
and the job runs once; nothing is lost, nothing runs twice."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app import store
from app.crashpoints import Point
from app.states import JobState
from tests.conftest import Stack, job_row
from tests.e2e.test_crash_points import died_by_sigkill, submit
from tests.e2e.test_wait_crash_points import sweep_once
from tests.helpers import crash_env
from tests.invariants import check_invariants, describe, wait_for_state

pytestmark = pytest.mark.e2e


async def cap_of_one(stack: Stack) -> None:
    async with store.connect(str(stack.settings.database_url)) as db:
        await store.tenants.set_limits(db, "acme", max_running=1)


@pytest.mark.asyncio
async def test_a_worker_killed_after_a_release_leaves_the_job_to_the_outbox_relay(
    stack: Stack, sql: Any
) -> None:
    # Given acme's window of 2 (cap 1 x 2) full, and a third job parked.
    await cap_of_one(stack)
    ids = [await submit(stack, "demo.noop", {}, tenant="acme") for _ in range(3)]
    assert [job_row(sql, i)["parked"] for i in ids] == [False, False, True]

    # When a worker armed at after_release ends a lease and releases the parked job.
    doomed = stack.worker(env=crash_env(Point.AFTER_RELEASE), name="doomed")
    await asyncio.to_thread(died_by_sigkill, doomed, "the worker armed at after_release")
    third = job_row(sql, ids[2])
    assert third["parked"] is False and third["state"] == JobState.QUEUED, describe(sql, ids[2])
    unsent = sql.execute(
        "SELECT count(*) AS n FROM outbox WHERE job_id = %s AND sent_at IS NULL", (ids[2],)
    ).fetchone()["n"]
    assert unsent == 1, "the release committed its outbox row; the message was never sent"

    # Then the relay sends it, a healthy worker runs everything, each job once.
    await asyncio.to_thread(sweep_once, stack)
    stack.worker(name="rescuer")
    for i in ids:
        row = await asyncio.to_thread(wait_for_state, sql, i, JobState.SUCCEEDED, timeout=60)
        assert row["attempt"] in (1, 2), describe(sql, i)
    assert job_row(sql, ids[2])["attempt"] == 1, "the released job ran once, first attempt"
    check_invariants(sql, stack, ids)
