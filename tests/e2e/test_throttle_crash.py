"""A worker SIGKILLed right after a throttle's transition (the after_throttle crash
point: the row says retrying with its attempt given back, the message's visibility not
yet set to the provider's delay): the message comes back after its lease, a second
worker runs the job, and the throttle still used no attempt."""

from __future__ import annotations

from typing import Any

import pytest

from app.crashpoints import Point
from app.states import JobState
from tests.conftest import Stack, job_row
from tests.e2e.test_crash_points import TICKET, died_by_sigkill, submit
from tests.helpers import crash_env
from tests.invariants import check_invariants, describe, model_outcomes, timeline, wait_for_state

pytestmark = pytest.mark.e2e

THROTTLED_ONCE = {**TICKET, "subject": "[throttle:1] App crashes on login"}
RETRY_AFTER = {"TASKLEASE_FAKE_MODEL_RETRY_AFTER_SECONDS": "1"}


@pytest.mark.asyncio
async def test_a_worker_killed_after_a_throttle_leaves_the_job_to_the_next_attempt_one(
    stack: Stack, sql: Any
) -> None:
    # Given a worker armed to die once a throttle is written, and a job its provider
    # throttles once.
    doomed = stack.worker(env={**crash_env(Point.AFTER_THROTTLE), **RETRY_AFTER}, name="doomed")
    job_id = await submit(stack, "support.triage", THROTTLED_ONCE)
    # When it dies there: the row says retrying, the attempt given back, the throttle
    # counted and the timeline says by whom.
    died_by_sigkill(doomed, "the worker armed at after_throttle")
    row = job_row(sql, job_id)
    assert (row["state"], row["attempt"], row["throttles"]) == (JobState.RETRYING, 0, 1), describe(
        sql, job_id
    )
    assert timeline(sql, job_id)[-1]["detail"].startswith("throttled by fake (fake-triage-1): 429")

    # Then a healthy worker gets the message back (its lease's visibility) and the job
    # succeeds with attempt 1: the throttle used none.
    stack.worker(env=RETRY_AFTER, name="rescuer")
    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    assert (row["attempt"], row["throttles"]) == (1, 1), describe(sql, job_id)
    assert model_outcomes(stack, f"{job_id}:triage") == ["throttled", "ok"]
    check_invariants(sql, stack, [job_id])
