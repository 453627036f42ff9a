"""A run's deadline under SIGKILL (issue 32): a worker killed as it ends a job at its
deadline, and a sweeper killed once it ended one, each a real process killed by a real
signal against the real stack; then the recovery and every invariant (6: no job past
its deadline unfinished after the drain)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.crashpoints import Point
from app.states import JobState
from tests import deadline_kinds
from tests.conftest import Stack, job_row, wait_for
from tests.e2e.test_crash_points import died_by_sigkill, submit
from tests.helpers import crash_env
from tests.invariants import check_invariants, describe, wait_for_state

pytestmark = pytest.mark.e2e


@pytest.fixture
def kinds_here(stack: Stack) -> Iterator[None]:
    """The deadline test kinds, in the workers (TASKLEASE_KINDS) and in this process."""
    stack.env["TASKLEASE_KINDS"] = f"{stack.env['TASKLEASE_KINDS']},{deadline_kinds.MODULE}"
    with deadline_kinds.registered():
        yield


def children(sql: Any, job_id: str) -> list[dict[str, Any]]:
    return list(sql.execute("SELECT * FROM jobs WHERE parent_id = %s", (job_id,)).fetchall())


def assert_ended_by_deadline(sql: Any, job_id: str) -> None:
    row = job_row(sql, job_id)
    assert (row["dead_lettered_by"], row["last_error"]) == ("deadline", "deadline passed"), (
        describe(sql, job_id)
    )
    kids = children(sql, job_id)
    assert kids and all(k["state"] == JobState.CANCELLED for k in kids), kids


@pytest.mark.asyncio
async def test_a_worker_killed_as_it_ends_a_running_job_at_its_deadline(
    stack: Stack, sql: Any, kinds_here: None
) -> None:
    # Given a worker armed to die once it stopped a running attempt at the deadline, before
    # it wrote the end.
    doomed = stack.worker(env=crash_env(Point.BEFORE_DEADLINE_END), name="doomed")
    # Polling before the job is submitted: a worker still starting when the deadline
    # passed would end the job at its claim (unrun, no child), not as it runs.
    assert doomed.ready_path is not None
    wait_for(doomed.ready_path.exists, what="the armed worker polling the queue")
    job_id = await submit(stack, "test.deadline_busy", {"seconds": 600}, deadline_seconds=3)
    died_by_sigkill(doomed, "the worker armed at before_deadline_end")
    row = job_row(sql, job_id)
    assert row["state"] == JobState.RUNNING and row["lease_token"] is not None, describe(
        sql, job_id
    )
    check_invariants(sql, stack, [job_id], settled=False)

    # Then the job's lease runs out and it is ended by whoever finds it first: a healthy
    # worker's claim of the redelivered message, or the sweeper (stalled, then past its
    # deadline). Its child is cancelled with it.
    stack.env["TASKLEASE_SWEEP_INTERVAL_SECONDS"] = "0.5"
    stack.worker(name="rescuer")
    stack.start_sweeper()
    wait_for_state(sql, job_id, JobState.DEAD_LETTERED, timeout=60)
    assert_ended_by_deadline(sql, job_id)
    check_invariants(sql, stack, [job_id, *(k["id"] for k in children(sql, job_id))])


@pytest.mark.asyncio
async def test_a_sweeper_killed_once_it_ended_a_waiting_job_at_its_deadline(
    stack: Stack, sql: Any, kinds_here: None
) -> None:
    # Given a job waiting on a callback with a child napping, and no worker left to claim
    # its wake-up at the deadline...
    worker = stack.worker(name="worker")
    # Polling before the job is submitted: its 3 s deadline must not be spent on the
    # worker's start-up (2.2 s of it on LocalStack, and more under load).
    assert worker.ready_path is not None
    wait_for(worker.ready_path.exists, what="the worker polling the queue")
    job_id = await submit(stack, "test.deadline_parent", {}, deadline_seconds=3)
    wait_for(
        lambda: (
            job_row(sql, job_id)["wait_kind"] == "callback"
            and [k["state"] for k in children(sql, job_id)] == [JobState.WAITING]
        ),
        what="the job waiting on its callback, its child napping",
    )
    stack.stop_processes([worker])
    # ...a sweeper armed to die once it committed the jobs it ended at their deadline.
    stack.env["TASKLEASE_SWEEP_INTERVAL_SECONDS"] = "0.5"
    doomed = stack.spawn("sweep", env=crash_env(Point.AFTER_DEADLINE_SWEPT), name="doomed-sweep")
    died_by_sigkill(doomed, "the sweeper armed at after_deadline_swept")
    # The end and its children's are one commit: all there, though it died right after.
    assert job_row(sql, job_id)["state"] == JobState.DEAD_LETTERED
    assert_ended_by_deadline(sql, job_id)
    row = job_row(sql, job_id)
    assert (row["finished_at"] - row["deadline"]).total_seconds() < 30, describe(sql, job_id)

    # Then the healthy workers and sweeper find nothing more to do with it.
    stack.worker(name="after")
    sweep = stack.spawn("sweep", "--once", name="sweep")
    assert sweep.wait(60) == 0, sweep.log_path.read_text()
    check_invariants(sql, stack, [job_id, *(k["id"] for k in children(sql, job_id))])
