"""Failure as designed states: dead letters and redrive, cancellation, stalled leases.

Real PostgreSQL and a real SQS server over HTTP; the engine runs in this process.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from app import errors
from app.services import jobs, redrive, sweeper
from app.states import JobState
from app.store.sql import queries
from app.transport import codec
from tests import carrier
from tests.conftest import Stack, job_row
from tests.helpers import dlq_messages, engine_for, receive_records, submit

pytestmark = pytest.mark.integration

# The fake model fails this ticket's first call: dead-lettered with a budget of 1,
# it succeeds once redriven ("the cause is gone").
FLAKY_TICKET = {
    "ticket_id": "T-9",
    "subject": "[transient] Login loop",
    "body": "I cannot sign in.",
}


def is_localstack(stack: Stack) -> bool:
    return stack.sqs_target == "localstack"


async def drain(
    engine: Any, sql: Any, job_id: Any, until: set[JobState], rounds: int = 20
) -> dict[str, Any]:
    for _ in range(rounds):
        records = await receive_records(engine, wait=1)
        if records:
            await engine.handle({"Records": records}, None)
        row = job_row(sql, job_id)
        if JobState(row["state"]) in until:
            return row
    return job_row(sql, job_id)


async def dead_letter_one(stack: Stack, sql: Any) -> Any:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "support.triage", FLAKY_TICKET, max_attempts=1)
        await drain(engine, sql, job_id, {JobState.DEAD_LETTERED})
    row = job_row(sql, job_id)
    assert row["state"] == JobState.DEAD_LETTERED, row
    assert row["last_error"].startswith("attempts used up (1)")
    return job_id


@pytest.mark.asyncio
async def test_a_dead_lettered_job_redriven_by_id_succeeds_once_its_cause_is_gone(
    stack: Stack, sql: Any
) -> None:
    job_id = await dead_letter_one(stack, sql)

    async with engine_for(stack.settings) as engine:
        report = await redrive.redrive(stack.settings, engine.db, engine.queue, job_ids=[job_id])
        after_redrive = job_row(sql, job_id)
        final = await drain(engine, sql, job_id, {JobState.SUCCEEDED, JobState.DEAD_LETTERED})
    assert report.mode == "receive/send/delete"
    assert report.moved == 1 and report.reset == 1
    assert after_redrive["state"] == JobState.QUEUED and after_redrive["attempt"] == 0
    assert after_redrive["redrives"] == 1
    assert final["state"] == JobState.SUCCEEDED, final
    assert final["attempt"] == 1
    assert dlq_messages(stack, visibility=1) == []  # the dead letter was moved, not copied
    ok_calls = [c for c in stack.model_calls() if c["outcome"] == "ok"]
    assert len(ok_calls) == 1


@pytest.mark.asyncio
async def test_a_dry_run_redrive_changes_nothing(stack: Stack, sql: Any) -> None:
    job_id = await dead_letter_one(stack, sql)

    async with engine_for(stack.settings) as engine:
        report = await redrive.redrive(stack.settings, engine.db, engine.queue, dry_run=True)
    assert [r["id"] for r in report.selected] == [job_id]
    assert report.moved == 0
    assert job_row(sql, job_id)["state"] == JobState.DEAD_LETTERED
    assert len(dlq_messages(stack, visibility=1)) == 1


@pytest.mark.asyncio
async def test_a_whole_queue_redrive_uses_the_move_task_where_the_endpoint_has_one(
    stack: Stack, sql: Any
) -> None:
    """LocalStack (and AWS) implement StartMessageMoveTask; moto's server does not."""
    job_id = await dead_letter_one(stack, sql)

    async with engine_for(stack.settings) as engine:
        report = await redrive.redrive(stack.settings, engine.db, engine.queue)
        final = await drain(engine, sql, job_id, {JobState.SUCCEEDED}, rounds=30)
    assert report.mode == (
        "StartMessageMoveTask" if is_localstack(stack) else "receive/send/delete"
    )
    assert report.moved == 1
    assert final["state"] == JobState.SUCCEEDED, final
    assert final["attempt"] == 1  # the budget restarted
    assert final["redrives"] == 1


@pytest.mark.asyncio
async def test_a_redrive_from_outside_tasklease_like_the_aws_console_also_works(
    stack: Stack, sql: Any
) -> None:
    """Another client of the carrier moves the dead letter back: the marker attribute makes it a redrive."""
    job_id = await dead_letter_one(stack, sql)
    if is_localstack(stack):
        arn = lambda url: stack.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        stack.sqs.start_message_move_task(
            SourceArn=arn(stack.settings.dlq), DestinationArn=arn(stack.settings.queue)
        )
    else:  # what the console's "redrive to a custom destination" does, by hand
        msgs = dlq_messages(stack, visibility=1)
        assert len(msgs) == 1
        carrier.send_raw(stack, msgs[0]["Body"], msgs[0]["MessageAttributes"])
        carrier.delete_raw(stack, msgs[0]["ReceiptHandle"], url=stack.settings.dlq)

    async with engine_for(stack.settings) as engine:
        final = await drain(engine, sql, job_id, {JobState.SUCCEEDED}, rounds=30)
    assert final["state"] == JobState.SUCCEEDED, final
    assert final["attempt"] == 1 and final["redrives"] == 1


@pytest.mark.asyncio
async def test_a_stale_copy_of_an_old_dead_letter_does_not_run_the_job_again(
    stack: Stack, sql: Any
) -> None:
    job_id = await dead_letter_one(stack, sql)
    old = dlq_messages(stack, visibility=1)[0]

    async with engine_for(stack.settings) as engine:
        await redrive.redrive(stack.settings, engine.db, engine.queue, job_ids=[job_id])
        await drain(engine, sql, job_id, {JobState.SUCCEEDED})
        # The old dead letter, marker and all, arrives on the source queue once more.
        carrier.send_raw(stack, old["Body"], old["MessageAttributes"])
        records = await receive_records(engine)
        response = await engine.handle({"Records": records}, None)
    assert response == {"batchItemFailures": []}  # deleted as a late duplicate
    row = job_row(sql, job_id)
    assert row["state"] == JobState.SUCCEEDED and row["redrives"] == 1
    succeeded = sql.execute(
        "SELECT count(*) AS n FROM job_events WHERE job_id = %s AND to_state = 'succeeded'",
        (job_id,),
    ).fetchone()["n"]
    assert succeeded == 1


@pytest.mark.asyncio
async def test_a_message_sqs_moved_by_its_redrive_policy_is_reconciled_and_can_be_redriven(
    stack: Stack, sql: Any
) -> None:
    """The backstop: a message that never reached a claim ends in the DLQ with no marker."""

    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.noop", {})
        await receive_records(engine)  # the source message is taken and never claimed…
        # …the carrier's backstop moved it (SQS's redrive policy; on Redis, TAKE's count)
        carrier.send_raw(stack, codec.body_for(job_id), url=stack.settings.dlq)
        report = await sweeper.sweep_once(stack.settings, engine.db, engine.queue)
        reconciled = job_row(sql, job_id)
        await redrive.redrive(stack.settings, engine.db, engine.queue)
        final = await drain(engine, sql, job_id, {JobState.SUCCEEDED}, rounds=30)
    assert report.dead_lettered == 1
    assert reconciled["state"] == JobState.DEAD_LETTERED
    assert reconciled["dead_lettered_by"] == "sweeper"
    assert "worker never finished" in reconciled["last_error"]
    assert final["state"] == JobState.SUCCEEDED, final


@pytest.mark.asyncio
async def test_the_api_redrive_resets_the_budget_and_the_sweeper_deletes_the_stale_dead_letter(
    stack: Stack, sql: Any
) -> None:
    job_id = await dead_letter_one(stack, sql)

    async with engine_for(stack.settings) as engine:
        job = await redrive.redrive_job(stack.settings, engine.db, engine.queue, job_id, scope=None)
        final = await drain(engine, sql, job_id, {JobState.SUCCEEDED})
        report = await sweeper.sweep_once(stack.settings, engine.db, engine.queue)
        with pytest.raises(errors.Conflict, match="not dead_lettered"):
            await redrive.redrive_job(stack.settings, engine.db, engine.queue, job_id, scope=None)
    assert job["state"] == JobState.QUEUED and job["attempt"] == 0
    assert final["state"] == JobState.SUCCEEDED
    assert report.stale_dead_letters == 1
    assert dlq_messages(stack, visibility=1) == []


@pytest.mark.asyncio
async def test_cancelling_a_queued_job_is_immediate_and_its_message_is_then_dropped(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.noop", {})
        cancelled = await jobs.cancel(engine.db, job_id, scope=None)
        response = await engine.handle({"Records": await receive_records(engine)}, None)
        with pytest.raises(errors.Conflict, match="already cancelled"):
            await jobs.cancel(engine.db, job_id, scope=None)
    assert cancelled["state"] == JobState.CANCELLED
    assert response == {"batchItemFailures": []}
    row = job_row(sql, job_id)
    assert row["state"] == JobState.CANCELLED and row["attempt"] == 0 and row["result"] is None


@pytest.mark.asyncio
async def test_cancelling_a_running_job_stops_it_at_its_next_heartbeat(
    stack: Stack, sql: Any
) -> None:
    # Heartbeats every 2 s (a third of the lease): the cancel reaches the job within
    # that, long before its 10 s of steps end. The lease leaves 4 s of slack for a late
    # heartbeat: with a 2 s lease a loaded machine let it lapse, and a cancel of a job
    # whose lease has lapsed ends it at once (cancel_waiting), not at its heartbeat.
    settings = stack.with_settings(visibility_timeout_seconds=6)

    async with engine_for(settings) as engine:
        job_id = await submit(engine, "demo.sleep", {"seconds": 1, "steps": 10})
        task = asyncio.create_task(engine.handle({"Records": await receive_records(engine)}, None))
        while job_row(sql, job_id)["state"] != JobState.RUNNING:
            await asyncio.sleep(0.05)
        requested = await jobs.cancel(engine.db, job_id, scope=None)
        response = await task
    assert requested["state"] == JobState.RUNNING and requested["cancel_requested"] is True
    assert response == {"batchItemFailures": []}
    row = job_row(sql, job_id)
    assert row["state"] == JobState.CANCELLED
    steps = sql.execute(
        "SELECT count(*) AS n FROM effects WHERE job_id = %s", (job_id,)
    ).fetchone()["n"]
    assert steps < 10


@pytest.mark.asyncio
async def test_cancelling_a_finished_job_is_a_conflict_and_changes_nothing(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.noop", {})
        await engine.handle({"Records": await receive_records(engine)}, None)
        with pytest.raises(errors.Conflict, match="already succeeded"):
            await jobs.cancel(engine.db, job_id, scope=None)
    row = job_row(sql, job_id)
    assert row["state"] == JobState.SUCCEEDED and row["cancel_requested"] is False


@pytest.mark.asyncio
async def test_the_sweeper_marks_an_expired_lease_stalled_and_the_job_resumes_when_its_message_returns(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.noop", {})
        [record] = await receive_records(engine)
        # A worker claimed it and died: its lease expired, its message is still out.
        sql.execute(
            "UPDATE jobs SET state = 'running', attempt = 1, lease_owner = 'dead-worker', "
            "lease_token = gen_random_uuid(), lease_expires_at = now() - interval '5 seconds' WHERE id = %s",
            (job_id,),
        )
        report = await sweeper.sweep_once(stack.settings, engine.db, engine.queue)
        stalled = job_row(sql, job_id)
        response = await engine.handle({"Records": [record]}, None)  # the message comes back
    assert report.stalled == 1
    assert stalled["state"] == JobState.STALLED
    detail = sql.execute(
        "SELECT detail FROM job_events WHERE job_id = %s AND to_state = 'stalled'", (job_id,)
    ).fetchone()["detail"]
    assert "dead-worker" in detail
    assert response == {"batchItemFailures": []}
    row = job_row(sql, job_id)
    assert row["state"] == JobState.SUCCEEDED and row["attempt"] == 2


@pytest.mark.asyncio
async def test_a_dead_letter_keeps_the_jobs_generation_in_its_attributes(
    stack: Stack, sql: Any
) -> None:
    job_id = await dead_letter_one(stack, sql)
    [msg] = dlq_messages(stack, visibility=1)
    assert json.loads(msg["Body"])["job_id"] == str(job_id)
    assert msg["MessageAttributes"][codec.ATTR_GENERATION]["StringValue"] == "0"
    assert uuid.UUID(msg["MessageAttributes"][codec.ATTR_JOB_ID]["StringValue"]) == job_id


class _LeaseEndsBetween:
    """The API's Database, with a worker's write landing between cancel's two statements."""

    def __init__(self, db: Any, worker_write: Any) -> None:
        self.db, self.worker_write = db, worker_write
        self.cancels = 0

    async def transact(self, work: Any) -> Any:
        # A cancel's statements run in a transaction each (with what its trigger ended
        # below): cancel_waiting first, then request_cancel.
        out = await self.db.transact(work)
        self.cancels += 1
        if self.cancels == 1:
            await self.worker_write()
        return out

    async def fetch_one(self, query: Any, params: Any = None) -> Any:
        return await self.db.fetch_one(query, params)

    async def fetch(self, query: Any, params: Any = None) -> Any:
        return await self.db.fetch(query, params)


@pytest.mark.asyncio
async def test_a_cancel_whose_lease_ends_between_its_two_statements_is_not_lost(
    stack: Stack, sql: Any
) -> None:
    """Found by the state machine: cancel_waiting fails (a live lease), the worker then
    writes 'retrying', and request_cancel finds no lease either. The cancel used to be
    answered 200 and lost: the job ran again."""

    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.flaky", {"fail_attempts": 1}, max_attempts=3)
        token = uuid.uuid4()
        claim = {"ids": [job_id], "tokens": [token], "owner": "w", "lease_seconds": 30}
        claim |= {
            "redrive_budget": 3,
            "redrive_window": 86_400,
            "refusal": "budget used up",
            "max_running": 100,
        }
        await engine.db.fetch(queries["claim_batch"], {**claim, "generations": [None]})
        await engine.db.fetch(
            queries["start_batch"], {"ids": [job_id], "tokens": [token], "versions": ["1"]}
        )

        async def worker_fails() -> None:  # what the engine's _failed writes
            await engine.db.fetch_one(
                queries["finish"],
                {
                    "id": job_id,
                    "token": token,
                    "to_state": "retrying",
                    "from_state": "running",
                    "result": None,
                    "error": "boom",
                    "delay": 0,
                    "refund": 0,
                    "dead_lettered_by": None,
                    "detail": "boom",
                },
            )

        answer = await jobs.cancel(_LeaseEndsBetween(engine.db, worker_fails), job_id, scope=None)
    assert answer["state"] == JobState.CANCELLED
    assert job_row(sql, job_id)["state"] == JobState.CANCELLED


@pytest.mark.asyncio
async def test_a_redrive_supersedes_a_cancel_asked_for_while_the_job_ran(
    stack: Stack, sql: Any
) -> None:
    """A cancel accepted while the job ran, then the job failed permanently: it is
    dead-lettered with cancel_requested set. A redrive is the newer request: it runs."""
    job_id = await dead_letter_one(stack, sql)
    sql.execute("UPDATE jobs SET cancel_requested = true WHERE id = %s", (job_id,))

    async with engine_for(stack.settings) as engine:
        job = await redrive.redrive_job(stack.settings, engine.db, engine.queue, job_id, scope=None)
        final = await drain(engine, sql, job_id, {JobState.SUCCEEDED, JobState.CANCELLED})
    assert job["cancel_requested"] is False
    assert final["state"] == JobState.SUCCEEDED
