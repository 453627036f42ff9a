"""A SIGKILL after a delayed job's commit, before its wake-up was marked or sent (crash
point after_outbox_commit, which a delayed submission passes too): the job waits with
wake_sent_at NULL, and the sweeper sends its wake-up; it then runs once."""

from __future__ import annotations

from typing import Any

import pytest

from app.crashpoints import Point
from app.states import JobState
from tests.conftest import Stack
from tests.e2e.test_crash_points import died_by_sigkill
from tests.helpers import crash_env
from tests.invariants import check_invariants, wait_for_state

pytestmark = pytest.mark.e2e


def test_a_delayed_submission_killed_after_its_commit_is_woken_by_the_sweeper(
    stack: Stack, sql: Any
) -> None:
    # Given `tasklease submit --delay 1` dies after the commit, before the delayed send.
    proc = stack.spawn(
        "submit", "demo.noop", "--delay", "1", env=crash_env(Point.AFTER_OUTBOX_COMMIT)
    )
    worker = stack.worker(name="worker")
    died_by_sigkill(proc, "`tasklease submit --delay` armed at after_outbox_commit")
    (row,) = sql.execute("SELECT * FROM jobs").fetchall()
    assert (row["state"], row["wait_kind"], row["wait_key"]) == (
        JobState.WAITING,
        "timer",
        "run_at",
    )
    assert row["wake_sent_at"] is None, "the wake-up was marked before the crash point"
    assert stack.queue_depth() == 0

    # When the sweeper runs once (with the worker polling).
    sweep = stack.spawn("sweep", "--once", name="sweep")
    assert sweep.wait(60) == 0, sweep.log_path.read_text()  # type: ignore[attr-defined]

    # Then the job runs once, after its delay.
    done = wait_for_state(sql, row["id"], JobState.SUCCEEDED, timeout=60)
    assert done["attempt"] == 1 and done["runs"] == 1
    assert done["started_at"] >= row["wake_at"]
    assert worker.poll() is None
    check_invariants(sql, stack, [row["id"]])
