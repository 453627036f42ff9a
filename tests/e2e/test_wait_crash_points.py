"""The waits' crash points, one real SIGKILL each, then the recovery and every invariant.

A process armed with ``TASKLEASE_CRASH_AT=<point>`` kills itself there; another worker
(and, where the dead process left a message unsent, a sweep) finishes the job, and
``tests.invariants`` checks what was left behind: no effect twice, no double completion,
the job finished, nothing left waiting whose condition is met.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from app.crashpoints import Point
from app.states import JobState
from tests.conftest import Stack, job_row
from tests.e2e.test_crash_points import WAIT_POINTS, died_by_sigkill, submit, submit_now
from tests.helpers import crash_env
from tests.invariants import check_invariants, describe, effects, timeline, wait_for_state

pytestmark = pytest.mark.e2e


def keys(sql: Any, job_id: Any) -> list[str]:
    return [f["key"] for f in effects(sql, job_id)]


def unsent(sql: Any, job_id: Any) -> int:
    return int(
        sql.execute(
            "SELECT count(*) AS n FROM outbox WHERE job_id = %s AND sent_at IS NULL", (job_id,)
        ).fetchone()["n"]
    )


def sweep_once(stack: Stack) -> None:
    sweep = stack.spawn("sweep", "--once", name="sweep")
    assert sweep.wait(60) == 0, sweep.log_path.read_text()


def test_every_wait_crash_point_has_a_sigkill_test_here() -> None:
    tested = {
        Point.AFTER_SUSPEND,
        Point.AFTER_WAKE_MARKED,
        Point.AFTER_CALLBACK_ANSWER,
        Point.AFTER_CHILD_FINISHED,
    }
    assert tested == WAIT_POINTS


@pytest.mark.asyncio
async def test_a_worker_killed_after_suspending_leaves_the_job_waiting_and_it_resumes(
    stack: Stack, sql: Any
) -> None:
    # Given a worker armed to die once a job is waiting, before its wake-up is sent.
    doomed = stack.worker(env=crash_env(Point.AFTER_SUSPEND), name="doomed")
    job_id = await submit(stack, "demo.nap", {"seconds": 1})
    died_by_sigkill(doomed, "the worker armed at after_suspend")
    row = job_row(sql, job_id)
    assert (row["state"], row["wait_kind"], row["attempt"], row["runs"]) == (
        JobState.WAITING,
        "timer",
        0,
        1,
    ), describe(sql, job_id)
    assert row["lease_token"] is None and keys(sql, job_id) == ["sleep:nap-0"]
    check_invariants(sql, stack, [job_id], settled=False)

    # Then its undeleted message comes back to a healthy worker, which wakes it once due.
    stack.worker(name="rescuer")
    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    assert (row["attempt"], row["runs"]) == (1, 2), describe(sql, job_id)
    assert keys(sql, job_id) == ["sleep:nap-0", "woke-0"]
    check_invariants(sql, stack, [job_id])


@pytest.mark.asyncio
async def test_a_sweeper_killed_after_marking_a_wake_up_sent_sends_it_again_later(
    stack: Stack, sql: Any
) -> None:
    # Given a timer past the (shortened) delay cap, so only the sweeper can wake it...
    stack.env.update(
        {
            "TASKLEASE_MAX_MESSAGE_DELAY_SECONDS": "1",
            "TASKLEASE_WAKE_GRACE_SECONDS": "1",
            "TASKLEASE_SWEEP_INTERVAL_SECONDS": "0.5",
        }
    )
    stack.worker(name="worker")
    job_id = await submit(stack, "demo.nap", {"seconds": 3})
    row = wait_for_state(sql, job_id, JobState.WAITING, timeout=60)
    assert row["wake_sent_at"] is None, describe(sql, job_id)
    # ...and a sweeper that dies once it marked the wake-up sent, before sending it.
    doomed = stack.spawn("sweep", env=crash_env(Point.AFTER_WAKE_MARKED), name="doomed-sweep")
    died_by_sigkill(doomed, "the sweeper armed at after_wake_marked")
    row = job_row(sql, job_id)
    assert row["state"] == JobState.WAITING and row["wake_sent_at"] is not None
    check_invariants(sql, stack, [job_id], settled=False)

    # Then a healthy sweeper finds it overdue past the grace and sends it again.
    stack.spawn("sweep", name="sweep")
    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    assert row["runs"] == 2, describe(sql, job_id)
    woke = [e["detail"] for e in timeline(sql, job_id) if e["from_state"] == JobState.WAITING]
    assert woke == ["woken: due"], describe(sql, job_id)
    check_invariants(sql, stack, [job_id])


ANSWER = """
import asyncio, sys, uuid
from app import store, transport
from app.settings import config
from app.services import callbacks

async def main() -> None:
    settings = config.load()
    db = store.Database(settings.database_url)
    await db.open()
    queue = transport.create(settings)
    await queue.open()
    token = await callbacks.token_for(db, uuid.UUID(sys.argv[1]), "approve")
    await callbacks.answer(db, queue, token, result={"by": "sam"})

asyncio.run(main())
"""


def killed_running(stack: Stack, script: str, arg: str, point: Point) -> None:
    """Run ``script`` (python -c, with ``arg``) in the stack's environment, armed at
    ``point``: it must die there by SIGKILL."""
    proc = subprocess.run(
        [sys.executable, "-c", script, arg],
        env={**stack.env, **crash_env(point)},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -9, proc.stderr.decode()[-3000:]


def test_an_answer_killed_after_its_commit_wakes_the_job_through_the_outbox(
    stack: Stack, sql: Any
) -> None:
    # Given a job waiting for its approval...
    stack.worker(name="worker")
    job_id = submit_now(stack, "demo.approval", {"timeout_seconds": 600})
    wait_for_state(sql, job_id, JobState.WAITING, timeout=60)
    # ...answered by a process that dies after the commit, before sending the job's message.
    killed_running(stack, ANSWER, str(job_id), Point.AFTER_CALLBACK_ANSWER)
    row = job_row(sql, job_id)
    assert row["state"] == JobState.QUEUED, describe(sql, job_id)
    assert unsent(sql, job_id) == 1
    cb = sql.execute("SELECT state, result FROM callbacks WHERE job_id = %s", (job_id,)).fetchone()
    assert (cb["state"], cb["result"]) == ("succeeded", {"by": "sam"})
    check_invariants(sql, stack, [job_id], settled=False)

    # Then one sweep relays the outbox and the job runs on with the answer.
    sweep_once(stack)
    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    assert row["result"] == {"approved": True, "answer": {"by": "sam"}}
    assert row["runs"] == 2 and unsent(sql, job_id) == 0
    assert keys(sql, job_id) == ["callback:approve", "notify:approve"]  # notified once
    check_invariants(sql, stack, [job_id])


@pytest.mark.asyncio
async def test_a_worker_killed_after_a_child_finished_leaves_its_parent_woken(
    stack: Stack, sql: Any
) -> None:
    # Given a worker that dies once a child's finish is committed (waking its parent)...
    doomed = stack.worker(env=crash_env(Point.AFTER_CHILD_FINISHED), name="doomed")
    parent = await submit(stack, "demo.fanout", {"children": 1, "child_seconds": 1})
    died_by_sigkill(doomed, "the worker armed at after_child_finished")
    (child,) = [r["id"] for r in sql.execute("SELECT id FROM jobs WHERE parent_id = %s", (parent,))]
    assert job_row(sql, child)["state"] == JobState.SUCCEEDED, describe(sql, child)
    # ...the parent was woken in that transaction; its message is not sent.
    assert job_row(sql, parent)["state"] == JobState.QUEUED, describe(sql, parent)
    assert unsent(sql, parent) == 1
    check_invariants(sql, stack, [parent, child], settled=False)

    # Then a sweep relays it and a healthy worker gathers the child once.
    stack.worker(name="rescuer")
    sweep_once(stack)
    row = wait_for_state(sql, parent, JobState.SUCCEEDED, timeout=60)
    assert row["result"] == {"children": 1, "succeeded": 1, "failed": 0, "unfinished": 0}
    assert keys(sql, parent) == ["spawn:child-0", "gather:children"]
    assert job_row(sql, child)["runs"] == 2  # its nap, then its wake: not run again
    check_invariants(sql, stack, [parent, child])
