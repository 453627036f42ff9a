"""`tasklease prune` SIGKILLed right after a batch committed (issue 18): that batch is
gone whole, with every row of its jobs, the rest is whole, and a second run finishes the
work. A prune never leaves a job without its events, or events without their job."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.crashpoints import Point
from tests.conftest import Stack
from tests.e2e.test_crash_points import died_by_sigkill
from tests.helpers import crash_env
from tests.retention_data import (
    ROWS_OF_ONE_JOB,
    counts_by_scan,
    counts_maintained,
    old_job,
    rows_of,
)

pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]

WHOLE = ROWS_OF_ONE_JOB


@pytest.mark.asyncio
async def test_a_prune_killed_after_a_batch_leaves_whole_jobs_and_a_rerun_finishes(
    stack: Stack, sql: Any
) -> None:
    # Given five succeeded jobs finished 40 days ago (kept 30), and one finished today.
    old = [old_job(sql, "succeeded", 40 + i) for i in range(5)]
    recent = old_job(sql, "succeeded", 0.5)
    env = {"TASKLEASE_PRUNE_BATCH_SIZE": "2"}

    # When a prune armed at after_prune_batch deletes its first batch and dies.
    doomed = stack.spawn("prune", env=env | crash_env(Point.AFTER_PRUNE_BATCH), name="prune")
    await asyncio.to_thread(died_by_sigkill, doomed, "the prune armed at after_prune_batch")

    # Then the two oldest are gone with all their rows, the others are whole.
    per_job = {i: rows_of(sql, [i]) for i in [*old, recent]}
    gone = [i for i, rows in per_job.items() if rows["jobs"] == 0]
    assert sorted(gone, key=old.index) == old[-2:], per_job  # oldest finished first
    for job_id, rows in per_job.items():
        assert rows in (WHOLE, dict.fromkeys(WHOLE, 0)), (job_id, rows)
    assert counts_maintained(sql) == counts_by_scan(sql)

    # And a second run finishes the work and keeps the recent one.
    rerun = stack.spawn("prune", env=env, name="prune")
    assert await asyncio.to_thread(rerun.wait, 60) == 0, rerun.log_path.read_text()
    assert rows_of(sql, old)["jobs"] == 0
    assert rows_of(sql, [recent]) == WHOLE
    assert counts_maintained(sql) == counts_by_scan(sql)
