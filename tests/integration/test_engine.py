"""The engine against real PostgreSQL and a real SQS server over HTTP, in this process."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from app.states import JobState
from app.transport import codec
from tests import carrier
from tests.conftest import Stack, job_row
from tests.helpers import engine_for, receive_records, routes, submit

pytestmark = pytest.mark.integration

TICKET = {"ticket_id": "T-1", "subject": "Refund please", "body": "I was charged twice."}


def events(sql: Any, job_id: Any) -> list[str]:
    rows = sql.execute(
        "SELECT to_state FROM job_events WHERE job_id = %s ORDER BY id", (job_id,)
    ).fetchall()
    return [r["to_state"] for r in rows]


@pytest.mark.asyncio
async def test_happy_path_runs_the_job_and_records_each_effect_once(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "support.triage", TICKET)
        records = await receive_records(engine)
        response = await engine.handle({"Records": records}, None)
    assert response == {"batchItemFailures": []}
    job = job_row(sql, job_id)
    assert job["state"] == JobState.SUCCEEDED
    assert job["attempt"] == 1
    assert job["result"]["category"] == "billing"
    assert events(sql, job_id) == ["queued", "leased", "running", "succeeded"]
    effects = sql.execute(
        "SELECT key FROM effects WHERE job_id = %s ORDER BY seq", (job_id,)
    ).fetchall()
    assert [e["key"] for e in effects] == ["triage", "post"]
    assert [c["outcome"] for c in stack.model_calls()] == ["ok"]


@pytest.mark.asyncio
async def test_duplicate_delivery_in_sequence_runs_the_job_once(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "support.triage", TICKET)
        records = await receive_records(engine)
        first = await engine.handle({"Records": records}, None)
        second = await engine.handle({"Records": records}, None)  # the same record again
    assert first == second == {"batchItemFailures": []}  # the late duplicate is deleted
    assert job_row(sql, job_id)["attempt"] == 1
    assert events(sql, job_id).count("succeeded") == 1
    assert len(stack.model_calls()) == 1


@pytest.mark.asyncio
async def test_duplicate_delivery_at_once_runs_the_job_once(stack: Stack, sql: Any) -> None:
    """Two workers hold copies of one job's message at the same moment."""
    slow = stack.with_settings(fake_model_latency_ms=500)

    async with (
        engine_for(slow) as a,
        engine_for(slow.model_copy(update={"worker_id": "other"})) as b,
    ):
        job_id = await submit(a, "support.triage", TICKET)
        await a.queue.send_jobs(routes(job_id))  # a second message for the same job
        records = await receive_records(a)
        while len(records) < 2:
            records += await receive_records(a)
        responses = await asyncio.gather(
            a.handle({"Records": [records[0]]}, None), b.handle({"Records": [records[1]]}, None)
        )
    failures = [len(r["batchItemFailures"]) for r in responses]
    assert sorted(failures) == [0, 1]  # the duplicate is left on the queue, not run
    assert job_row(sql, job_id)["state"] == JobState.SUCCEEDED
    assert job_row(sql, job_id)["attempt"] == 1
    assert len(stack.model_calls()) == 1
    assert (
        sql.execute("SELECT count(*) AS n FROM effects WHERE job_id = %s", (job_id,)).fetchone()[
            "n"
        ]
        == 2
    )


@pytest.mark.asyncio
async def test_transient_failure_retries_with_backoff_then_succeeds(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.flaky", {"fail_attempts": 1})
        first = await engine.handle({"Records": await receive_records(engine)}, None)
        after_first = job_row(sql, job_id)
        records: list[dict[str, Any]] = []
        for _ in range(10):  # the message comes back after the backoff
            records = await receive_records(engine, wait=1)
            if records:
                break
        second = await engine.handle({"Records": records}, None)
    assert len(first["batchItemFailures"]) == 1
    assert after_first["state"] == JobState.RETRYING
    assert "attempt 1 fails on purpose" in after_first["last_error"]
    assert second == {"batchItemFailures": []}
    job = job_row(sql, job_id)
    assert job["state"] == JobState.SUCCEEDED
    assert job["result"] == {"succeeded_on_attempt": 2}
    assert events(sql, job_id) == [
        "queued",
        "leased",
        "running",
        "retrying",
        "leased",
        "running",
        "succeeded",
    ]


@pytest.mark.asyncio
async def test_permanent_failure_lands_in_the_dlq_with_its_reason(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.flaky", {"permanent": True})
        response = await engine.handle({"Records": await receive_records(engine)}, None)
    assert response == {"batchItemFailures": []}  # the source message is deleted
    job = job_row(sql, job_id)
    assert job["state"] == JobState.DEAD_LETTERED
    assert job["dead_lettered_by"] == "engine"
    assert "permanent failure on purpose" in job["last_error"]
    msgs = carrier.receive_raw(stack, stack.settings.dlq, wait=2)
    assert len(msgs) == 1
    assert json.loads(msgs[0]["Body"]) == {"job_id": str(job_id), "v": 1}
    attrs = msgs[0]["MessageAttributes"]
    assert "permanent failure on purpose" in attrs[codec.ATTR_REASON]["StringValue"]
    assert codec.ATTR_DEAD_LETTERED_AT in attrs


@pytest.mark.asyncio
async def test_last_attempt_failing_dead_letters_the_job(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.flaky", {"fail_attempts": 5}, max_attempts=2)
        for _ in range(20):
            records = await receive_records(engine, wait=1)
            if records:
                await engine.handle({"Records": records}, None)
            if job_row(sql, job_id)["state"] == JobState.DEAD_LETTERED:
                break
    job = job_row(sql, job_id)
    assert job["state"] == JobState.DEAD_LETTERED
    assert job["attempt"] == 2
    assert job["last_error"].startswith("attempts used up (2)")


@pytest.mark.asyncio
async def test_a_zombie_workers_late_effect_and_completion_change_nothing(
    stack: Stack, sql: Any
) -> None:
    """Worker A's lease expires while it is paused; B takes over and finishes; A wakes up."""

    async with (
        engine_for(stack.settings) as a,
        engine_for(stack.with_settings(worker_id="b")) as b,
    ):
        job_id = await submit(a, "demo.noop", {})
        await receive_records(a)  # take the message off the queue; we claim by hand
        zombie_token = uuid.uuid4()
        claimed = await a.db.fetch(
            a_claim(),
            {
                "ids": [job_id],
                "tokens": [zombie_token],
                "generations": [None],
                "owner": "zombie",
                "lease_seconds": 0.2,
                **REDRIVE_BUDGET,
            },
        )
        assert claimed, "the zombie's claim"
        await a.db.fetch(q_start(), {"ids": [job_id], "tokens": [zombie_token], "versions": ["1"]})
        await asyncio.sleep(0.5)  # the zombie's lease expires
        await b.queue.send_jobs(routes(job_id))
        done = await b.handle({"Records": await receive_records(b)}, None)
        # The zombie wakes up and tries to write.
        effect = await a.db.fetch(
            q_record(),
            {
                "id": job_id,
                "token": zombie_token,
                "key": "late",
                "seq": 9,
                "result": jsonb({"from": "zombie"}),
                "model": None,
                "input_tokens": None,
                "output_tokens": None,
                "shape": "effect",
            },
        )
        finish = await a.db.fetch_one(
            q_finish(),
            {
                "id": job_id,
                "token": zombie_token,
                "to_state": "succeeded",
                "from_state": "running",
                "result": jsonb({"from": "zombie"}),
                "error": None,
                "delay": 0,
                "refund": 0,
                "dead_lettered_by": None,
                "detail": None,
            },
        )
    assert done == {"batchItemFailures": []}
    assert effect == []
    assert finish is None  # refused: no row ended, none to count
    job = job_row(sql, job_id)
    assert job["result"] == {"ok": True}
    assert job["attempt"] == 2
    assert (
        sql.execute("SELECT count(*) AS n FROM effects WHERE job_id = %s", (job_id,)).fetchone()[
            "n"
        ]
        == 0
    )
    assert events(sql, job_id).count("succeeded") == 1


@pytest.mark.asyncio
async def test_a_zombie_engine_stops_when_its_heartbeat_finds_the_lease_gone(
    stack: Stack, sql: Any
) -> None:
    """The engine itself, not a hand-made zombie: its heartbeat notices and it writes nothing."""
    settings = stack.with_settings(visibility_timeout_seconds=2)

    async with engine_for(settings) as a:
        job_id = await submit(a, "demo.sleep", {"seconds": 3, "steps": 1})
        records = await receive_records(a)
        task = asyncio.create_task(a.handle({"Records": records}, None))
        # Once A holds the lease (a fixed sleep could swap the token before A's claim).
        for _ in range(200):
            if job_row(sql, job_id)["state"] == JobState.RUNNING:
                break
            await asyncio.sleep(0.05)
        assert job_row(sql, job_id)["state"] == JobState.RUNNING
        # Another worker takes the lease (as if A's lease had expired): a new token.
        sql.execute(
            "UPDATE jobs SET lease_token = gen_random_uuid(), lease_owner = 'b' WHERE id = %s",
            (job_id,),
        )
        response = await task
    assert len(response["batchItemFailures"]) == 1  # left for the new holder
    job = job_row(sql, job_id)
    assert job["state"] == JobState.RUNNING
    assert job["lease_owner"] == "b"
    assert (
        sql.execute("SELECT count(*) AS n FROM effects WHERE job_id = %s", (job_id,)).fetchone()[
            "n"
        ]
        == 0
    )


@pytest.mark.asyncio
async def test_the_outbox_relay_sends_a_job_whose_first_send_failed(stack: Stack, sql: Any) -> None:
    from app.services import sweeper

    broken = carrier.broken_settings(stack)

    async with engine_for(broken) as engine:
        job_id = await submit(engine, "demo.noop", {})  # 202 even though the send failed
    unsent = sql.execute(
        "SELECT sent_at, send_attempts FROM outbox WHERE job_id = %s", (job_id,)
    ).fetchone()
    async with engine_for(stack.settings) as engine:
        sent = await sweeper.relay_outbox(stack.settings, engine.db, engine.queue)
        records = await receive_records(engine)
        response = await engine.handle({"Records": records}, None)
    assert unsent["sent_at"] is None
    assert unsent["send_attempts"] == 1
    assert sent == 1
    assert [json.loads(r["body"])["job_id"] for r in records] == [str(job_id)]
    assert response == {"batchItemFailures": []}
    assert job_row(sql, job_id)["state"] == JobState.SUCCEEDED


@pytest.mark.asyncio
async def test_messages_that_are_not_ours_go_to_the_dlq_and_the_batch_goes_on(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.noop", {})
        carrier.send_raw(stack, "not json")
        carrier.send_raw(stack, json.dumps({"job_id": str(uuid.uuid4()), "v": 1}))
        records: list[dict[str, Any]] = []
        while len(records) < 3:
            records += await receive_records(engine)
        response = await engine.handle({"Records": records}, None)
    assert response == {"batchItemFailures": []}
    assert job_row(sql, job_id)["state"] == JobState.SUCCEEDED
    reasons = []
    for _ in range(5):
        for m in carrier.receive_raw(stack, stack.settings.dlq):
            reasons.append(m["MessageAttributes"][codec.ATTR_REASON]["StringValue"])
        if len(reasons) == 2:
            break
    assert sorted(r.split(":")[0].split(" ")[0] for r in reasons) == ["not", "unknown"]


@pytest.mark.asyncio
async def test_a_lambda_running_out_of_time_hands_the_lease_back_without_using_an_attempt(
    stack: Stack, sql: Any
) -> None:
    class ShortContext:
        def __init__(self, seconds: float) -> None:
            import time

            self.deadline = time.monotonic() + seconds

        def get_remaining_time_in_millis(self) -> int:
            import time

            return int((self.deadline - time.monotonic()) * 1000)

    settings = stack.with_settings(handback_margin_seconds=0.5)

    async with engine_for(settings) as engine:
        job_id = await submit(engine, "demo.sleep", {"seconds": 0.4, "steps": 4})
        outcomes = []
        for _ in range(30):
            records = await receive_records(engine, wait=1)
            if not records:
                continue
            outcomes.append(await engine.handle({"Records": records}, ShortContext(1.5)))
            if job_row(sql, job_id)["state"] == JobState.SUCCEEDED:
                break
    job = job_row(sql, job_id)
    assert job["state"] == JobState.SUCCEEDED
    assert len(outcomes) >= 2, "the job needed more than one invocation"
    assert job["attempt"] == 1  # hand-backs used no attempt
    keys = [
        r["key"]
        for r in sql.execute("SELECT key FROM effects WHERE job_id = %s ORDER BY seq", (job_id,))
    ]
    assert keys == ["step-0", "step-1", "step-2", "step-3"]
    assert "queued" in events(sql, job_id)[1:]


# Named queries used by the zombie test to act as a paused worker would.
REDRIVE_BUDGET = {
    "redrive_budget": 3,
    "redrive_window": 86_400,
    "refusal": "budget used up",
    "max_running": 100,
}


def a_claim() -> Any:
    from app.store.sql import queries

    return queries["claim_batch"]


def q_start() -> Any:
    from app.store.sql import queries

    return queries["start_batch"]


def q_record() -> Any:
    from app.store.sql import queries

    return queries["record_effect"]


def q_finish() -> Any:
    from app.store.sql import queries

    return queries["finish"]


def jsonb(value: Any) -> Any:
    from psycopg.types.json import Jsonb

    return Jsonb(value)
