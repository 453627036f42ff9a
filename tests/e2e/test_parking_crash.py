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

    # When a worker armed at after_release claims the first, parks the second (over the
    # cap), ends the first's lease and releases one parked job for the free slot.
    doomed = stack.worker(env=crash_env(Point.AFTER_RELEASE), name="doomed")
    await asyncio.to_thread(died_by_sigkill, doomed, "the worker armed at after_release")
    unsent = sql.execute(
        "SELECT job_id FROM outbox WHERE job_id = ANY(%s::uuid[]) AND sent_at IS NULL",
        ([str(i) for i in ids],),
    ).fetchall()
    assert len(unsent) == 1, "the release committed one outbox row; its message never went"
    released = job_row(sql, unsent[0]["job_id"])
    assert released["parked"] is False, describe(sql, released["id"])
    assert released["state"] == JobState.QUEUED, describe(sql, released["id"])

    # Then the relay sends it, a healthy worker runs everything, each job once.
    await asyncio.to_thread(sweep_once, stack)
    stack.worker(name="rescuer")
    for i in ids:
        row = await asyncio.to_thread(wait_for_state, sql, i, JobState.SUCCEEDED, timeout=60)
        assert row["attempt"] == 1, describe(sql, i)  # deferrals and releases use none
    check_invariants(sql, stack, ids)
