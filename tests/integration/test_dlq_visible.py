"""Issue 13 item 2: the sweeper leaves the dead-letter queue's messages visible.

The sweeper reconciles the DLQ from the database and receives from it only when the DLQ
holds messages the database does not account for, at most every
TASKLEASE_DLQ_SCAN_INTERVAL_SECONDS, never while a move task runs, and makes what it
received visible again at once. Real PostgreSQL, a real SQS server over HTTP (moto, or
LocalStack with TASKLEASE_TEST_SQS=localstack), the engine and the sweeper in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest

from app.services import redrive, sweeper
from app.states import JobState
from app.transport.redis_streams import RedisTransport
from app.worker.engine import Engine
from tests import carrier
from tests.conftest import Stack, job_row
from tests.helpers import dlq_messages, engine_for, receive_records, submit

pytestmark = pytest.mark.integration

DEAD_LETTERS = 3
MOVE_WAIT_SECONDS = 60


def ticket(n: int) -> dict[str, str]:
    """The fake model fails each ticket's first call: dead-lettered with a budget of 1,
    the job succeeds once redriven."""
    return {"ticket_id": f"T-{n}", "subject": "[transient] Login loop", "body": "No sign-in."}


async def settle(
    engine: Engine, sql: Any, job_ids: Iterable[Any], until: set[JobState], rounds: int = 40
) -> dict[Any, dict[str, Any]]:
    """Serve the source queue as Lambda would (successes deleted) until every job is in
    one of ``until``; the rows as they end."""
    ids = list(job_ids)
    for _ in range(rounds):
        rows = {job_id: job_row(sql, job_id) for job_id in ids}
        if all(JobState(row["state"]) in until for row in rows.values()):
            return rows
        records = await receive_records(engine, wait=1)
        if records:
            response = await engine.handle({"Records": records}, None)
            failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
            await engine.queue.delete_batch(
                [r["receiptHandle"] for r in records if r["messageId"] not in failed]
            )
    return {job_id: job_row(sql, job_id) for job_id in ids}


async def dead_letter_jobs(engine: Engine, sql: Any, n: int = DEAD_LETTERS) -> list[Any]:
    ids = [await submit(engine, "support.triage", ticket(i), max_attempts=1) for i in range(n)]
    rows = await settle(engine, sql, ids, {JobState.DEAD_LETTERED})
    assert all(row["state"] == JobState.DEAD_LETTERED for row in rows.values()), rows
    return ids


def dlq_counts(stack: Stack) -> tuple[int, int]:
    """(visible, in flight) on the DLQ."""
    d = carrier.depth(stack, stack.settings.dlq)
    return d["ApproximateNumberOfMessages"], d["ApproximateNumberOfMessagesNotVisible"]


def send_foreign_dead_letter(stack: Stack) -> None:
    """A message no dead-lettered job accounts for (another system's), on the DLQ."""
    carrier.send_raw(stack, "not ours", url=stack.settings.dlq)


def receive_with_counts(stack: Stack, expected: int) -> dict[str, str]:
    """MessageId -> ApproximateReceiveCount of the DLQ's messages, each received once."""
    found: dict[str, str] = {}
    for _ in range(5):
        for m in carrier.receive_raw(stack, stack.settings.dlq, visibility=30):
            found[m["MessageId"]] = m["Attributes"]["ApproximateReceiveCount"]
        if len(found) >= expected:
            break
    return found


# The Redis carrier's scripts (app/transport/redis_scripts.py), as the SQS calls they play.
REDIS_AS_SQS = {
    "TAKE": "ReceiveMessage",
    "DEPTH": "GetQueueAttributes",
    "CHANGE_VISIBILITY": "ChangeMessageVisibilityBatch",
    "DELETE": "DeleteMessageBatch",
    "MOVE_BACK": "SendMessageBatch",
}


@contextlib.contextmanager
def sqs_calls(engine: Engine) -> Any:
    """The SQS operations the engine's client calls (each API call once, retries aside);
    on Redis, the carrier's scripts, each named as the SQS operation it plays."""
    calls: list[str] = []
    queue = engine.queue
    if isinstance(queue, RedisTransport):
        script = queue._script

        async def counted(name: str, keys: list[str], args: list[Any]) -> Any:
            calls.append(REDIS_AS_SQS.get(name, name))
            return await script(name, keys, args)

        queue._script = counted  # type: ignore[method-assign]
        try:
            yield calls
        finally:
            del queue._script
        return

    def count(model: Any, **_: Any) -> None:
        calls.append(str(model.name))

    events = engine.queue.client.meta.events  # type: ignore[attr-defined]
    events.register("before-call.sqs", count)
    try:
        yield calls
    finally:
        events.unregister("before-call.sqs", count)


@pytest.mark.asyncio
async def test_sweeps_leave_the_dlq_visible_and_its_receive_count_does_not_climb(
    stack: Stack, sql: Any
) -> None:
    """Issue 13 item 2: every sweep received every dead letter with a short visibility, so
    the DLQ looked empty (ApproximateNumberOfMessages 0) and the receive count climbed."""
    async with engine_for(stack.settings) as engine:
        await dead_letter_jobs(engine, sql)
        for _ in range(5):
            await sweeper.sweep_once(stack.settings, engine.db, engine.queue)

    assert dlq_counts(stack) == (DEAD_LETTERS, 0)
    letters = receive_with_counts(stack, DEAD_LETTERS)
    # This receive is the first of each: no sweep received them.
    assert sorted(letters.values()) == ["1"] * DEAD_LETTERS


@pytest.mark.asyncio
async def test_an_idle_sweeper_makes_one_sqs_request_per_sweep(stack: Stack, sql: Any) -> None:
    """Issue 13 item 2: an idle deployment's sweeper asks the DLQ's depth once per sweep
    (GetQueueAttributes; once per priority's DLQ) and nothing else; it looks into the DLQ
    once for a message the database does not account for, and leaves everything visible."""
    async with engine_for(stack.settings) as engine:
        await dead_letter_jobs(engine, sql)
        send_foreign_dead_letter(stack)
        with sqs_calls(engine) as first:
            report = await sweeper.sweep_once(stack.settings, engine.db, engine.queue)
        with sqs_calls(engine) as idle:
            for _ in range(5):
                await sweeper.sweep_once(stack.settings, engine.db, engine.queue)

    assert (report.dead_lettered, report.stale_dead_letters) == (0, 0)
    assert "ReceiveMessage" in first  # the foreign message was looked at once…
    assert first[-1] == "ChangeMessageVisibilityBatch"  # …and made visible again
    assert idle == ["GetQueueAttributes"] * 5 * len(engine.queue.priorities())
    assert dlq_counts(stack) == (DEAD_LETTERS + 1, 0)


@pytest.mark.asyncio
async def test_concurrent_sweepers_look_into_the_dlq_once_per_interval(
    stack: Stack, sql: Any
) -> None:
    """Issue 13 item 2: the scan is claimed through PostgreSQL: of two sweepers sweeping
    at once, one receives; a message arriving after that scan waits for the interval."""
    async with engine_for(stack.settings) as a, engine_for(stack.settings) as b:
        await dead_letter_jobs(a, sql, 1)
        send_foreign_dead_letter(stack)
        with sqs_calls(a) as calls_a, sqs_calls(b) as calls_b:
            await asyncio.gather(
                sweeper.sweep_once(stack.settings, a.db, a.queue),
                sweeper.sweep_once(stack.settings, b.db, b.queue),
            )
            receives = (calls_a + calls_b).count("ReceiveMessage")
            send_foreign_dead_letter(stack)  # unaccounted, but the interval has not passed
            await sweeper.sweep_once(stack.settings, a.db, a.queue)
            await sweeper.sweep_once(stack.settings, b.db, b.queue)
    assert receives >= 1
    assert "ReceiveMessage" not in calls_a or "ReceiveMessage" not in calls_b
    assert (calls_a + calls_b).count("ReceiveMessage") == receives
    assert dlq_counts(stack) == (3, 0)


async def sweep_forever(stack: Stack, engine: Engine, sweeps: list[object]) -> None:
    """The sweeper, as fast as it goes (the local stack's runs every 2 s)."""
    while True:
        sweeps.append(await sweeper.sweep_once(stack.settings, engine.db, engine.queue))
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def sweeping(stack: Stack, engine: Engine) -> AsyncIterator[list[object]]:
    sweeps: list[object] = []
    task = asyncio.create_task(sweep_forever(stack, engine, sweeps))
    try:
        while len(sweeps) < 2 and not task.done():
            await asyncio.sleep(0.05)
        yield sweeps
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def wait_for_move(stack: Stack, dlq_arn: str) -> dict[str, Any]:
    deadline = time.monotonic() + MOVE_WAIT_SECONDS
    while True:
        [task] = stack.sqs.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=1)["Results"]
        if task["Status"] != "RUNNING" or time.monotonic() > deadline:
            return dict(task)
        time.sleep(0.2)


@pytest.mark.only_on("localstack")  # StartMessageMoveTask: moto and Redis have none
@pytest.mark.asyncio
async def test_a_move_task_started_while_the_sweeper_runs_moves_every_dead_letter(
    stack: Stack, sql: Any
) -> None:
    """Issue 13 item 2: with the sweeper running, a redrive started as the AWS console
    starts it (StartMessageMoveTask from the DLQ to the source queue) moved nothing: the
    sweeper held every dead letter in flight. LocalStack only: moto has no move task."""

    def arn(url: str) -> str:
        attrs = stack.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        return str(attrs["Attributes"]["QueueArn"])

    async with engine_for(stack.settings) as engine, engine_for(stack.settings) as sweeps_with:
        job_ids = await dead_letter_jobs(engine, sql)
        send_foreign_dead_letter(stack)  # something for the sweeper to look at
        async with sweeping(stack, sweeps_with) as sweeps:
            stack.sqs.start_message_move_task(
                SourceArn=arn(stack.settings.dlq), DestinationArn=arn(stack.settings.queue)
            )
            task = wait_for_move(stack, arn(stack.settings.dlq))
            swept_during_the_move = len(sweeps)
            # The dead letters are back on the source queue: the jobs run again, each with
            # a fresh attempt budget (docs/explain/design.md#dead-letters), while the sweeper runs.
            rows = await settle(engine, sql, job_ids, {JobState.SUCCEEDED})

    assert task["Status"] == "COMPLETED", task
    assert task["ApproximateNumberOfMessagesMoved"] == DEAD_LETTERS + 1, task
    assert swept_during_the_move >= 2
    for row in rows.values():
        assert row["state"] == JobState.SUCCEEDED, row
        assert row["attempt"] == 1 and row["redrives"] == 1, row
    # The foreign message came back to the DLQ (the worker sent it there again); no
    # dead letter of ours is left.
    letters = dlq_messages(stack, visibility=30, enough=lambda found: len(found) >= 1)
    assert [m["Body"] for m in letters] == ["not ours"]


@pytest.mark.only_on("localstack")  # StartMessageMoveTask: moto and Redis have none
@pytest.mark.asyncio
async def test_a_scan_that_is_due_waits_while_a_move_task_runs(stack: Stack, sql: Any) -> None:
    """Issue 13 item 2: a sweeper that would look into the DLQ receives nothing while a
    move task runs on it (it would hide the messages from the task), and looks after."""

    def arn(url: str) -> str:
        attrs = stack.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        return str(attrs["Attributes"]["QueueArn"])

    foreign = 5
    for _ in range(foreign):  # unaccounted: a scan is due
        send_foreign_dead_letter(stack)
    async with engine_for(stack.settings) as engine:
        stack.sqs.start_message_move_task(
            SourceArn=arn(stack.settings.dlq),
            DestinationArn=arn(stack.settings.queue),
            MaxNumberOfMessagesPerSecond=1,
        )
        with sqs_calls(engine) as during:
            await sweeper.sweep_once(stack.settings, engine.db, engine.queue)
        [after_sweep] = stack.sqs.list_message_move_tasks(
            SourceArn=arn(stack.settings.dlq), MaxResults=1
        )["Results"]
        task = wait_for_move(stack, arn(stack.settings.dlq))
        for _ in range(foreign):  # the moved messages, dead-lettered again as foreign
            send_foreign_dead_letter(stack)
        with sqs_calls(engine) as later:
            await sweeper.sweep_once(stack.settings, engine.db, engine.queue)

    assert after_sweep["Status"] == "RUNNING", after_sweep  # so it ran during the sweep
    assert "ListMessageMoveTasks" in during and "ReceiveMessage" not in during
    assert task["Status"] == "COMPLETED" and task["ApproximateNumberOfMessagesMoved"] == foreign
    assert "ReceiveMessage" in later  # the scan was given back, not spent


async def moved_by_sqs(stack: Stack, engine: Engine) -> Any:
    """A queued job whose message SQS moved to the DLQ itself (the redrive policy, after
    maxReceiveCount receives that never reached a claim): no marker on it."""
    job_id = await submit(engine, "demo.noop", {})
    [message] = carrier.receive_raw(stack)
    carrier.send_raw(stack, message["Body"], url=stack.settings.dlq)
    carrier.delete_raw(stack, message["ReceiptHandle"])
    return job_id


@pytest.mark.asyncio
async def test_a_redrive_of_a_job_sqs_moved_is_not_undone_by_the_next_look(
    stack: Stack, sql: Any
) -> None:
    """Issue 13 item 2 (review): a job the sweeper dead-lettered after SQS moved its
    message, redriven through the API, left that unmarked message in the DLQ; the next
    look took the job (queued again) for one SQS had just moved and dead-lettered it again.
    A message sent before the job's last redrive is stale: deleted, the job left alone."""
    settings = stack.with_settings(dlq_scan_interval_seconds=1)
    async with engine_for(settings) as engine:
        job_id = await moved_by_sqs(stack, engine)
        report = await sweeper.sweep_once(settings, engine.db, engine.queue)
        assert report.dead_lettered == 1
        assert job_row(sql, job_id)["dead_lettered_by"] == "sweeper"
        await redrive.redrive_job(settings, engine.db, engine.queue, job_id, scope=None)
        await asyncio.sleep(1.2)  # the scan interval
        report = await sweeper.sweep_once(settings, engine.db, engine.queue)

    assert (report.dead_lettered, report.stale_dead_letters) == (0, 1)
    assert job_row(sql, job_id)["state"] == JobState.QUEUED
    assert dlq_counts(stack) == (0, 0)


@pytest.mark.asyncio
async def test_a_dlq_the_database_seems_to_account_for_is_still_looked_into_now_and_then(
    stack: Stack, sql: Any
) -> None:
    """Issue 13 item 2 (review): dead letters deleted by hand leave the database counting
    more than the DLQ holds; a message SQS then moved itself looked accounted for, and
    no sweeper looked for as long as the DLQ's retention. A DLQ that is not empty is
    looked into once per FULL_LOOK_EVERY scan intervals whatever the count says."""
    settings = stack.with_settings(dlq_scan_interval_seconds=1)
    async with engine_for(settings) as engine:
        await dead_letter_jobs(engine, sql, 1)
        for letter in dlq_messages(stack, visibility=30):  # purged by hand
            carrier.delete_raw(stack, letter["ReceiptHandle"], url=settings.dlq)
        job_id = await moved_by_sqs(stack, engine)
        sql.execute("UPDATE sweeper_marks SET at = now() WHERE name = 'dlq_full_look'")
        await asyncio.sleep(1.2)
        quiet = await sweeper.sweep_once(settings, engine.db, engine.queue)
        assert job_row(sql, job_id)["state"] == JobState.QUEUED  # the count hides it…
        # …until the full look is due (FULL_LOOK_EVERY intervals later).
        sql.execute("UPDATE sweeper_marks SET at = '-infinity' WHERE name = 'dlq_full_look'")
        report = await sweeper.sweep_once(settings, engine.db, engine.queue)

    assert quiet.dead_lettered == 0
    assert report.dead_lettered == 1
    assert job_row(sql, job_id)["state"] == JobState.DEAD_LETTERED
    assert dlq_counts(stack) == (1, 0)  # the look left the message visible
