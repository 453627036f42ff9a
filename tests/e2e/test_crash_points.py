"""Every crash point (docs/explain/design.md#crash-points), one real SIGKILL each, then every invariant.

A process armed with ``TASKLEASE_CRASH_AT=<point>`` kills itself there (a real
SIGKILL, returncode -9); a healthy worker (and, for the unsent outbox row, one
sweep) picks the job up, and ``tests.invariants`` checks what was left behind.
The stack's visibility timeout is 4 s, so each rescue waits at least that long.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.crashpoints import Point
from app.services.schedules import slot_key
from app.states import JobState
from app.tools.stack import embedded
from tests import carrier, helpers
from tests.conftest import Stack, api_client, job_row, wait_for
from tests.e2e.test_auth_cli import cli
from tests.helpers import crash_env, dlq_messages
from tests.invariants import (
    check_invariants,
    deliveries,
    describe,
    effects,
    model_outcomes,
    redrive_and_check,
    timeline,
    wait_for_state,
)

pytestmark = pytest.mark.e2e

TICKET = {
    "ticket_id": "T-7",
    "subject": "App crashes on login",
    "body": "Since the update the app crashes with an error when I sign in.",
    "customer_email": "sam@example.com",
}
PERMANENT_TICKET = {**TICKET, "subject": "[permanent] App crashes on login"}


def webhook_starting(stack: Stack) -> Callable[[], None]:
    """Stack.webhook() without the wait, so the receiver and the first worker boot together
    (each process takes seconds to start on a 2-core runner); call the result before submitting."""
    port = embedded.free_port()
    proc = stack.spawn("webhook-receiver", "--port", str(port), name="webhook")
    url = f"http://127.0.0.1:{port}"
    stack.env["TASKLEASE_WEBHOOK_URL"] = f"{url}/hook"
    stack.settings = stack.with_settings(webhook_url=f"{url}/hook")
    return lambda: embedded.wait_for_http(f"{url}/deliveries", timeout=30, proc=proc)


async def submit(stack: Stack, kind: str, payload: dict[str, Any], **kw: Any) -> str:
    """The API's own submit path (service.submit), from this process."""
    async with helpers.engine_for(stack.settings) as engine:
        return str(await helpers.submit(engine, kind, payload, **kw))


def submit_now(stack: Stack, kind: str, payload: dict[str, Any], **kw: Any) -> str:
    """``submit`` for a test that runs no event loop of its own."""
    return asyncio.run(submit(stack, kind, payload, **kw))


def died_by_sigkill(proc: subprocess.Popen[bytes], what: str, timeout: float = 60) -> None:
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} never reached its crash point in {timeout:.0f} s")
    log = proc.log_path.read_text()[-3000:]  # type: ignore[attr-defined]
    assert code == -signal.SIGKILL, f"{what} exited {code}, not by SIGKILL:\n{log}"


def dlq_messages_for(stack: Stack, job_id: str) -> list[dict[str, Any]]:
    """The DLQ's messages for a job, looked at without hiding them (visibility 0)."""
    every = dlq_messages(stack, visibility=0, enough=lambda found: False)
    return [m for m in every if job_id in m["Body"]]


def claims_of(sql: Any, job_id: str) -> list[dict[str, Any]]:
    return [e for e in timeline(sql, job_id) if e["to_state"] == JobState.LEASED]


def queue_empty(stack: Stack) -> bool:
    d = carrier.depth(stack, stack.settings.queue)
    return d["ApproximateNumberOfMessages"] == d["ApproximateNumberOfMessagesNotVisible"] == 0


# What the row shows the moment the armed worker died there, and the attempt that finishes.
AT_DEATH: dict[Point, tuple[JobState, int, list[str], int]] = {
    # point: (state, attempt, recorded effects, final attempt)
    Point.AFTER_RECEIVE: (JobState.QUEUED, 0, [], 1),
    Point.AFTER_CLAIM: (JobState.LEASED, 1, [], 2),
    Point.INSIDE_EFFECT: (JobState.RUNNING, 1, [], 2),
    Point.AFTER_EFFECT: (JobState.RUNNING, 1, ["triage"], 2),
    Point.BEFORE_COMPLETION: (JobState.RUNNING, 1, ["triage", "post"], 2),
    Point.AFTER_COMPLETION: (JobState.SUCCEEDED, 1, ["triage", "post"], 1),
}


# The waits' crash points have their own tests (tests/e2e/test_wait_crash_points.py).
WAIT_POINTS = frozenset(
    {
        Point.AFTER_SUSPEND,
        Point.AFTER_WAKE_MARKED,
        Point.AFTER_CALLBACK_ANSWER,
        Point.AFTER_CHILD_FINISHED,
    }
)
# A streamed answer's point has its own test too (tests/e2e/test_stream_crash.py), and
# so have a throttle's (tests/e2e/test_throttle_crash.py), a release of parked jobs
# (tests/e2e/test_parking_crash.py), the cancel notification's
# (tests/e2e/test_cancel_reaches_call.py), a prune batch's (tests/e2e/test_prune_crash.py)
# the messages' (tests/e2e/test_message_crash_points.py), published state's
# (tests/e2e/test_state_crash.py), a fork's (tests/e2e/test_fork_crash.py), a bulk
# action's batch (tests/e2e/test_bulk_crash.py), a deadline's, a worker's and the
# sweeper's (tests/e2e/test_deadline_crash.py), an alert's delivery
# (tests/e2e/test_alert_crash.py), a pinned job's hand-back (tests/e2e/test_version_crash.py),
# a migration's online part (tests/e2e/test_migrate_crash.py) and flow control by key's
# (tests/e2e/test_flow_crash.py).
OWN_TESTS = frozenset(
    {
        Point.AFTER_MESSAGE_SENT,
        Point.AFTER_MESSAGE_TAKEN,
        Point.BEFORE_DEADLINE_END,
        Point.AFTER_DEADLINE_SWEPT,
        Point.INSIDE_STREAM,
        Point.AFTER_THROTTLE,
        Point.AFTER_RELEASE,
        Point.AFTER_CANCEL_NOTIFY,
        Point.AFTER_PRUNE_BATCH,
        Point.AFTER_BULK_BATCH,
        Point.AFTER_BULK_RERUNS,
        Point.AFTER_STATE_PUBLISHED,
        Point.AFTER_FORK_INSERTED,
        Point.BEFORE_ALERT_SENT,
        Point.AFTER_ALERT_SENT,
        Point.DURING_ONLINE_MIGRATION,
        Point.AFTER_VERSION_HANDED_BACK,
        Point.AFTER_KEY_RELEASE,
        Point.AFTER_DEBOUNCE_REPLACED,
        Point.AFTER_ACTIVE_CANCELLED,
    }
)
HERE = [p for p in Point if p not in WAIT_POINTS and p not in OWN_TESTS]


@pytest.mark.parametrize("point", HERE, ids=[p.value for p in HERE])
@pytest.mark.asyncio
async def test_a_process_killed_at_a_crash_point_leaves_every_invariant_standing(
    stack: Stack, sql: Any, point: Point
) -> None:
    webhook_up = webhook_starting(stack)
    if point == Point.AFTER_OUTBOX_COMMIT:
        killed_after_the_outbox_commit(stack, sql, webhook_up)
    elif point == Point.BEFORE_SENDS_RECORDED:
        killed_before_the_send_was_recorded(stack, sql, webhook_up)
    elif point == Point.WHILE_DEAD_LETTERING:
        await killed_while_dead_lettering(stack, sql, webhook_up)
    elif point == Point.AFTER_REDRIVE_REFUSED:
        await killed_after_a_redrive_refusal(stack, sql, webhook_up)
    elif point == Point.AFTER_SCHEDULE_MATERIALISED:
        killed_after_a_schedule_materialised(stack, sql, webhook_up)
    else:
        await killed_in_the_worker(stack, sql, point, webhook_up)


async def killed_in_the_worker(
    stack: Stack, sql: Any, point: Point, webhook_up: Callable[[], None]
) -> None:
    assert point in AT_DEATH, f"crash point {point} is new: add what the row shows to AT_DEATH"
    state, attempt, recorded, final_attempt = AT_DEATH[point]
    # Given a worker armed to die at the point, and a triage job for it.
    doomed = stack.worker(env=crash_env(point), name="doomed")
    webhook_up()
    job_id = await submit(stack, "support.triage", TICKET)
    # When it dies there.
    died_by_sigkill(doomed, f"the worker armed at {point}")
    row = job_row(sql, job_id)
    assert (row["state"], row["attempt"]) == (state, attempt), describe(sql, job_id)
    assert [f["key"] for f in effects(sql, job_id)] == recorded, describe(sql, job_id)
    if point == Point.INSIDE_EFFECT:
        # The outside call returned; the process died before the insert.
        assert model_outcomes(stack, f"{job_id}:triage") == ["ok"]

    # Then a healthy worker finishes it (or, after completion, drops the leftover message).
    stack.worker(name="rescuer")
    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    if point == Point.AFTER_COMPLETION:
        wait_for(
            lambda: queue_empty(stack),
            timeout=60,
            what="the leftover message of a finished job to be deleted",
        )
    row = job_row(sql, job_id)
    assert row["attempt"] == final_attempt, describe(sql, job_id)
    assert row["result"]["delivered"] is True
    assert [f["key"] for f in effects(sql, job_id)] == ["triage", "post"]
    expected_ok = 2 if point == Point.INSIDE_EFFECT else 1
    assert model_outcomes(stack, f"{job_id}:triage") == ["ok"] * expected_ok
    assert deliveries(stack) == {f"{job_id}:post": 1}
    check_invariants(sql, stack, [job_id], allow_effect_window=point == Point.INSIDE_EFFECT)


def killed_after_the_outbox_commit(stack: Stack, sql: Any, webhook_up: Callable[[], None]) -> None:
    # Given `tasklease submit` dies after the commit, before the send.
    proc = stack.spawn(
        "submit",
        "support.triage",
        "--payload",
        json.dumps(TICKET),
        env=crash_env(Point.AFTER_OUTBOX_COMMIT),
        name="submit",
    )
    died_by_sigkill(proc, "`tasklease submit` armed at after_outbox_commit")
    rows = sql.execute(
        "SELECT j.id, j.state, o.sent_at FROM jobs j JOIN outbox o ON o.job_id = j.id"
    ).fetchall()
    assert len(rows) == 1, rows
    assert rows[0]["state"] == JobState.QUEUED
    assert rows[0]["sent_at"] is None, "the message was sent before the crash point"
    relayed_once_and_succeeded(stack, sql, str(rows[0]["id"]), webhook_up)


def killed_before_the_send_was_recorded(
    stack: Stack, sql: Any, webhook_up: Callable[[], None]
) -> None:
    # Given the API (a long-running one, which marks sent rows a moment after it
    # answered) dies once the message is sent, before the row says so.
    stack.start_api(name="api", env=crash_env(Point.BEFORE_SENDS_RECORDED))
    api = stack.procs[-1]
    with api_client(stack.api_url, stack.key()) as client:
        try:
            answer = client.post("/v1/jobs", json={"kind": "support.triage", "payload": TICKET})
        except httpx.TransportError:
            # It answers before it marks (tests/integration/test_api.py shows that); only
            # a process stalled past the mark's linger mid-answer dies before answering.
            answer = None
    died_by_sigkill(api, "the API armed at before_sends_recorded")
    rows = sql.execute("SELECT o.job_id, o.sent_at FROM outbox o").fetchall()
    assert len(rows) == 1, rows
    job_id = str(rows[0]["job_id"])
    if answer is not None:
        assert (answer.status_code, answer.json()["id"]) == (202, job_id), answer.text
    assert [r["sent_at"] for r in rows] == [None], "the row was marked before the crash point"
    assert stack.queue_depth() == 1, "the message was not sent before the crash point"
    # When the relay sends it again (its row says unsent), the job has two messages:
    # it runs once, the second message is dropped, and the row ends marked sent.
    webhook_up()
    sweep = stack.spawn("sweep", "--once", name="sweep")
    assert sweep.wait(60) == 0, sweep.log_path.read_text()  # type: ignore[attr-defined]
    wait_for(lambda: stack.queue_depth() == 2, timeout=10, what="the relay's second message")
    stack.worker(name="worker")
    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    assert row["attempt"] == 1
    sent = sql.execute("SELECT sent_at FROM outbox WHERE job_id = %s", (job_id,)).fetchall()
    assert [r["sent_at"] is not None for r in sent] == [True]
    wait_for(lambda: queue_empty(stack), timeout=60, what="the second message to be dropped")
    assert deliveries(stack) == {f"{job_id}:post": 1}
    check_invariants(sql, stack, [job_id])


def relayed_once_and_succeeded(
    stack: Stack, sql: Any, job_id: str, webhook_up: Callable[[], None]
) -> None:
    """A committed job whose message was never sent: a worker runs and the sweeper
    relays the outbox once; the job is sent once and succeeds once."""
    webhook_up()
    stack.worker(name="worker")
    sweep = stack.spawn("sweep", "--once", name="sweep")
    assert sweep.wait(60) == 0, sweep.log_path.read_text()  # type: ignore[attr-defined]
    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    assert row["attempt"] == 1
    sent = sql.execute("SELECT sent_at FROM outbox WHERE job_id = %s", (job_id,)).fetchall()
    assert [r["sent_at"] is not None for r in sent] == [True]
    assert deliveries(stack) == {f"{job_id}:post": 1}
    check_invariants(sql, stack, [job_id])


async def killed_while_dead_lettering(
    stack: Stack, sql: Any, webhook_up: Callable[[], None]
) -> None:
    # Given a permanently failing job and a worker armed to die mid dead-lettering.
    doomed = stack.worker(env=crash_env(Point.WHILE_DEAD_LETTERING), name="doomed")
    webhook_up()
    job_id = await submit(stack, "support.triage", PERMANENT_TICKET)
    died_by_sigkill(doomed, "the worker armed at while_dead_lettering")
    row = job_row(sql, job_id)
    # The DLQ message is sent; the row is not marked yet.
    assert (row["state"], row["attempt"]) == (JobState.RUNNING, 1), describe(sql, job_id)
    assert len(dlq_messages_for(stack, job_id)) == 1

    # When a healthy worker gets the source message back: it runs the job again, which
    # fails permanently again and is dead-lettered for good.
    stack.worker(name="rescuer")
    row = wait_for_state(sql, job_id, JobState.DEAD_LETTERED, timeout=60)
    assert row["attempt"] == 2
    assert row["dead_lettered_by"] == "engine"
    assert "permanent" in row["last_error"]
    # Each dead-lettering sent its own marked message: two for this one job.
    letters = dlq_messages_for(stack, job_id)
    assert len(letters) == 2, letters
    assert all("tasklease-dead-lettered-at" in m["MessageAttributes"] for m in letters)
    wait_for(lambda: queue_empty(stack), timeout=30, what="the source message to be deleted")
    assert model_outcomes(stack, f"{job_id}:triage") == ["permanent", "permanent"]
    check_invariants(sql, stack, [job_id])

    # Then, once the cause is gone (an operator fixes the ticket), a redrive succeeds,
    # and the second dead letter of the same job runs nothing again.
    sql.execute(
        "UPDATE jobs SET payload = jsonb_set(payload, '{subject}', to_jsonb(%s::text)) "
        "WHERE id = %s",
        (TICKET["subject"], job_id),
    )
    row = redrive_and_check(stack, sql, job_id)
    assert row["result"]["delivered"] is True
    # Both dead letters went back; the copy that arrives after the success is dropped.
    assert dlq_messages_for(stack, job_id) == []
    wait_for(lambda: queue_empty(stack), timeout=30, what="the second redriven copy to be dropped")
    assert len(claims_of(sql, job_id)) == 3  # the doomed, the rescuer, the redrive
    assert model_outcomes(stack, f"{job_id}:triage") == ["permanent", "permanent", "ok"]
    assert deliveries(stack) == {f"{job_id}:post": 1}
    check_invariants(sql, stack, [job_id])


@pytest.mark.asyncio
async def test_the_invariant_checker_fails_on_what_it_guards_against(
    stack: Stack, sql: Any
) -> None:
    """A checker that cannot fail proves nothing: forge each violation on a finished job."""

    async with helpers.engine_for(stack.settings) as engine:
        job_id = str(await helpers.submit(engine, "demo.noop", {}))
        records = await helpers.receive_records(engine)
        await engine.handle({"Records": records}, None)
    check_invariants(sql, stack, [job_id])  # the honest run passes

    # A second completion, a zombie's effect after the end, a lost outbox row.
    sql.execute(
        "INSERT INTO job_events (job_id, from_state, to_state, attempt, worker) "
        "VALUES (%s, 'running', 'succeeded', 1, 'zombie')",
        (job_id,),
    )
    sql.execute(
        "INSERT INTO effects (job_id, key, seq, result, attempt, worker) "
        "VALUES (%s, 'late', 0, '{}', 7, 'zombie')",
        (job_id,),
    )
    sql.execute("DELETE FROM outbox WHERE job_id = %s", (job_id,))
    # Messages read out of order: the newer one first, and under another topic's receive.
    sql.execute(
        "INSERT INTO job_messages (job_id, topic, body, request_hash, consumed_at, consumed_by) "
        "VALUES (%(id)s, 'user', '1', 'h', NULL, NULL), "
        "(%(id)s, 'user', '2', 'h', now(), 'receive:other:1')",
        {"id": job_id},
    )
    with pytest.raises(pytest.fail.Exception) as failed:
        check_invariants(sql, stack, [job_id])
    message = str(failed.value)
    for expected in (
        "2: completed 2 times",
        "3: effect 'late' written by attempt 7 (zombie)",
        "3: effects ['late'] carry an attempt above any claimed (1)",
        "3: effects ['late'] recorded after the job had succeeded",
        "after the job was succeeded",
        "5: no outbox row",
        "6: on 'user', a message was read before an older one",
        "6: on 'user', a message read by another topic's receive",
    ):
        assert expected in message, message


async def killed_after_a_redrive_refusal(
    stack: Stack, sql: Any, webhook_up: Callable[[], None]
) -> None:
    """Issue 13 item 1: a worker dies after refusing a redrive past the budget, before the
    message is deleted: the message comes back and is refused again, never run."""
    # Given a permanently failing job, dead-lettered, with no redrive budget at all...
    budget = {"TASKLEASE_REDRIVE_BUDGET": "0"}
    first = stack.worker(env=budget, name="first")
    webhook_up()
    job_id = await submit(stack, "support.triage", PERMANENT_TICKET)
    wait_for_state(sql, job_id, JobState.DEAD_LETTERED, timeout=60)
    wait_for(lambda: queue_empty(stack), timeout=30, what="the source message to be deleted")
    first.terminate()
    first.wait(30)
    # ...whose dead letter a tool moves back, attributes and all.
    (letter,) = dlq_messages_for(stack, job_id)
    carrier.send_raw(stack, letter["Body"], letter["MessageAttributes"])
    carrier.delete_raw(stack, letter["ReceiptHandle"], url=stack.settings.dlq)

    # When a worker dies after refusing it, before deleting the message.
    doomed = stack.worker(env={**budget, **crash_env(Point.AFTER_REDRIVE_REFUSED)}, name="doomed")
    died_by_sigkill(doomed, "the worker armed at after_redrive_refused")
    row = job_row(sql, job_id)
    assert row["state"] == JobState.DEAD_LETTERED, describe(sql, job_id)
    assert row["last_error"].startswith("redrive budget used up"), describe(sql, job_id)
    assert not queue_empty(stack), "the refused message was deleted before the crash point"

    # Then a healthy worker refuses it again and deletes it; the job never ran again.
    stack.worker(env=budget, name="rescuer")
    wait_for(lambda: queue_empty(stack), timeout=60, what="the refused message to be deleted")
    row = job_row(sql, job_id)
    assert (row["state"], row["runs"], row["redrives"]) == (JobState.DEAD_LETTERED, 1, 0)
    assert model_outcomes(stack, f"{job_id}:triage") == ["permanent"]
    assert dlq_messages_for(stack, job_id) == []
    check_invariants(sql, stack, [job_id])

    # And once the cause is gone, an operator's redrive (within the default budget) runs it.
    stack.env.pop("TASKLEASE_REDRIVE_BUDGET", None)
    sql.execute(
        "UPDATE jobs SET payload = jsonb_set(payload, '{subject}', to_jsonb(%s::text)) "
        "WHERE id = %s",
        (TICKET["subject"], job_id),
    )
    row = redrive_and_check(stack, sql, job_id)
    assert row["result"]["delivered"] is True
    assert model_outcomes(stack, f"{job_id}:triage") == ["permanent", "ok"]
    check_invariants(sql, stack, [job_id])


def killed_after_a_schedule_materialised(
    stack: Stack, sql: Any, webhook_up: Callable[[], None]
) -> None:
    """A sweeper dies once a schedule's slot made its job and moved next_slot (committed
    together), before the job's message is sent: the next sweep relays the message and
    makes no second job for the slot."""
    # Given a schedule whose slot is due (several minutes late), and whose next slot is
    # a year away: a test that crosses a minute's edge must not see a second slot due.
    code, out, err = cli(
        stack,
        "schedules",
        "create",
        "--cron",
        "0 0 1 1 *",
        "--kind",
        "support.triage",
        "--payload",
        json.dumps(TICKET),
        "--tenant",
        "acme",
    )
    assert code == 0, err
    schedule_id = out.strip()
    sql.execute(
        "UPDATE schedules SET next_slot = date_trunc('minute', now()) - interval '3 minutes' "
        "WHERE id = %s",
        (schedule_id,),
    )

    # When `tasklease sweep` dies at the crash point.
    doomed = stack.spawn(
        "sweep", "--once", env=crash_env(Point.AFTER_SCHEDULE_MATERIALISED), name="sweep"
    )
    died_by_sigkill(doomed, "`tasklease sweep` armed at after_schedule_materialised")
    rows = sql.execute(
        "SELECT j.id, j.state, j.idempotency_key, o.sent_at FROM jobs j "
        "JOIN outbox o ON o.job_id = j.id"
    ).fetchall()
    assert len(rows) == 1, rows
    (made,) = rows
    assert (made["state"], made["sent_at"]) == (JobState.QUEUED, None)
    schedule = sql.execute("SELECT * FROM schedules WHERE id = %s", (schedule_id,)).fetchone()
    assert schedule["last_job_id"] == made["id"]
    assert made["idempotency_key"] == slot_key(schedule["id"], schedule["last_slot"])
    assert schedule["next_slot"] > schedule["last_slot"]

    # Then another sweep sends its message and makes no second job; a worker runs it once.
    relayed_once_and_succeeded(stack, sql, str(made["id"]), webhook_up)
    assert sql.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1
