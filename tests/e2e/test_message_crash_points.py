"""Messages to a job under real SIGKILLs (issue 32): the two crash points of messages, and
the "done when" of the issue: a kind looping on ``ctx.receive("user")`` answers three
messages sent at different moments (one while it waits, one while it runs, one after its
worker was killed) exactly once each and in order.

Real worker processes, killed by the crash points' SIGKILL; real PostgreSQL and SQS (moto
server), as tests/conftest.py starts them; ``tests.invariants`` checks what is left.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from app.crashpoints import Point
from app.services import messages
from app.states import JobState
from app.worker.engine import Engine
from tests.conftest import Stack, job_row, wait_for
from tests.e2e.test_crash_points import died_by_sigkill, submit, submit_now
from tests.e2e.test_wait_crash_points import keys, killed_running, sweep_once, unsent
from tests.helpers import crash_env, engine_for
from tests.invariants import check_invariants, describe, wait_for_state

pytestmark = pytest.mark.e2e


async def send(engine: Engine, job_id: str, text: str) -> messages.Sent:
    """POST /v1/jobs/{id}/messages's service, from this process (its engine opened before:
    a send right after a look at the job's state must not wait for a pool to open)."""
    return await messages.send(
        engine.db, engine.queue, uuid.UUID(job_id), scope=None, topic="user", body=text
    )


def consumed(sql: Any, job_id: str) -> list[tuple[str, str | None]]:
    rows = sql.execute(
        "SELECT body, consumed_by FROM job_messages WHERE job_id = %s ORDER BY id", (job_id,)
    ).fetchall()
    return [(r["body"], r["consumed_by"]) for r in rows]


@pytest.mark.asyncio
async def test_three_messages_at_three_moments_are_answered_once_each_in_order(
    stack: Stack, sql: Any
) -> None:
    # Given demo.chat (three answers, each taking 2 s) on a worker that dies once it has
    # taken its second message, before the receive is recorded (after_message_taken).
    doomed = stack.worker(
        env=crash_env(f"{Point.AFTER_MESSAGE_TAKEN}@receive:user:2"), name="doomed"
    )
    job_id = await submit(stack, "demo.chat", {"messages": 3, "work_seconds": 2}, timeout_seconds=5)
    wait_for_state(sql, job_id, JobState.WAITING, timeout=60)
    async with engine_for(stack.settings) as engine:
        await answered_once_each(stack, sql, engine, job_id, doomed)


async def answered_once_each(
    stack: Stack, sql: Any, engine: Engine, job_id: str, doomed: Any
) -> None:

    # One while it waits: stored and the job woken in that transaction.
    first = await send(engine, job_id, "one")
    assert first.created and first.job_woken, describe(sql, job_id)
    # One while it runs (answering the first): stored, nobody to wake.
    wait_for(lambda: "receive:user:1" in keys(sql, job_id), timeout=60, what="the first read")
    assert job_row(sql, job_id)["state"] == JobState.RUNNING, describe(sql, job_id)
    second = await send(engine, job_id, "two")
    assert second.created and not second.job_woken

    # The worker dies having taken "two": marked consumed by receive:user:2, not recorded.
    died_by_sigkill(doomed, "the worker armed at after_message_taken@receive:user:2")
    assert consumed(sql, job_id) == [("one", "receive:user:1"), ("two", "receive:user:2")]
    assert "receive:user:2" not in keys(sql, job_id) and "answer-1" not in keys(sql, job_id)
    check_invariants(sql, stack, [job_id], settled=False)

    # One after the kill; then a healthy worker takes the job over once its lease is gone.
    third = await send(engine, job_id, "three")
    assert third.created and not third.job_woken
    stack.worker(name="rescuer")
    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=90)

    # Each answered once, in order: the replay took "two" again (its key), not "three".
    answers = row["result"]["answers"]
    assert [a["message"] for a in answers] == [
        first.message.id,
        second.message.id,
        third.message.id,
    ]
    assert [a["reply"] for a in answers] == [f"you said: {t}" for t in ("one", "two", "three")]
    recorded = keys(sql, job_id)
    for step in ("answer-0", "answer-1", "answer-2", *(f"receive:user:{n}" for n in (1, 2, 3))):
        assert recorded.count(step) == 1, (step, describe(sql, job_id))
    assert consumed(sql, job_id) == [
        ("one", "receive:user:1"),
        ("two", "receive:user:2"),
        ("three", "receive:user:3"),
    ]
    check_invariants(sql, stack, [job_id])


SEND = """
import asyncio, sys, uuid
from app import store, transport
from app.settings import config
from app.services import messages

async def main() -> None:
    settings = config.load()
    db = store.Database(settings.database_url)
    await db.open()
    queue = transport.create(settings)
    await queue.open()
    await messages.send(db, queue, uuid.UUID(sys.argv[1]), scope=None, topic="user", body="hi")

asyncio.run(main())
"""


def test_a_sender_killed_after_its_commit_wakes_the_job_through_the_outbox(
    stack: Stack, sql: Any
) -> None:
    # Given a job waiting on the topic "user"...
    stack.worker(name="worker")
    job_id = submit_now(stack, "demo.chat", {"messages": 1})
    wait_for_state(sql, job_id, JobState.WAITING, timeout=60)
    # ...sent a message by a process that dies after the commit, before the job's message.
    killed_running(stack, SEND, str(job_id), Point.AFTER_MESSAGE_SENT)
    # The message and the wake committed together: queued, its message to send unsent.
    assert job_row(sql, job_id)["state"] == JobState.QUEUED, describe(sql, job_id)
    assert unsent(sql, job_id) == 1 and consumed(sql, job_id) == [("hi", None)]
    check_invariants(sql, stack, [job_id], settled=False)

    # Then one sweep relays the outbox and the job reads the message once.
    sweep_once(stack)
    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    assert [a["reply"] for a in row["result"]["answers"]] == ["you said: hi"]
    assert row["runs"] == 2 and unsent(sql, job_id) == 0
    assert consumed(sql, job_id) == [("hi", "receive:user:1")]
    check_invariants(sql, stack, [job_id])
