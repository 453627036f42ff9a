"""Messages on the queue that are not ours, sent to a real SQS server and handled by the
real engine in one batch with a real job: each foreign message goes to the DLQ exactly as
it came, with a reason naming what is wrong with it, and is deleted from the source (the
handler does not list it in batchItemFailures); the job in the same batch still runs."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from app.states import JobState
from app.transport import codec
from tests import carrier
from tests.conftest import Stack, job_row
from tests.helpers import engine_for, receive_records, submit

pytestmark = pytest.mark.integration

REASON = codec.ATTR_REASON


def foreign_messages(decoy: uuid.UUID, stranger: uuid.UUID) -> dict[str, tuple[str, list[str]]]:
    """name -> (body, what its reason must say). ``decoy`` is a job that exists and waits:
    the messages with a wrong version name it, so accepting one would run it. ``stranger``
    is a job this database has never seen (another deployment's). Odd spacing and key
    order show that the DLQ gets the body as it came, not a re-serialized copy."""
    return {
        "not JSON": ("job please: " + str(decoy), ["not a tasklease message", "not JSON"]),
        "a JSON array": (
            json.dumps([{"job_id": str(decoy), "v": 1}]),
            ["not a JSON object but an array"],
        ),
        "version 2": (
            f'{{"v": 2, "job_id": "{decoy}"}}',
            ["message version 2 is not 1"],
        ),
        "version true": (
            f'{{"job_id":"{decoy}","v":true}}',
            ["message version true is a boolean, not the integer 1"],
        ),
        "version 1.0": (
            f'{{ "job_id" : "{decoy}" , "v" : 1.0 }}',
            ["message version 1.0 is a decimal number, not the integer 1"],
        ),
        "no job_id": ('{"v": 1, "id": "x"}', ["no valid job_id", '"job_id" is missing']),
        "a job_id that is no UUID": (
            '{"job_id": "job-42", "v": 1}',
            ["no valid job_id", '"job-42" is not a UUID'],
        ),
        "another deployment's job": (
            json.dumps({"job_id": str(stranger), "v": 1}),
            [f"unknown job id {stranger}", "no such job"],
        ),
    }


def dead_letters(stack: Stack, expected: int) -> list[dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for _ in range(10):
        for m in carrier.receive_raw(stack, stack.settings.dlq, visibility=30):
            found[m["MessageId"]] = m
        if len(found) >= expected:
            break
    return list(found.values())


def messages_on(stack: Stack, url: str) -> int:
    d = carrier.depth(stack, url)
    return d["ApproximateNumberOfMessages"] + d["ApproximateNumberOfMessagesNotVisible"]


@pytest.mark.asyncio
async def test_foreign_messages_go_to_the_dlq_with_a_reason_and_the_job_in_their_batch_runs(
    stack: Stack, sql: Any
) -> None:
    stranger = uuid.uuid4()

    async with engine_for(stack.settings) as engine:
        # Given: a job that waits with no message of its own on the queue (the decoy),
        decoy = await submit(engine, "demo.noop", {})
        own = await receive_records(engine)
        assert [json.loads(r["body"])["job_id"] for r in own] == [str(decoy)]
        await engine.queue.delete_batch([r["receiptHandle"] for r in own])
        # a job to run, and the foreign messages, all on the queue.
        job_id = await submit(engine, "demo.noop", {})
        foreign = foreign_messages(decoy, stranger)
        for body, _ in foreign.values():
            carrier.send_raw(stack, body)
        records: dict[str, dict[str, Any]] = {}
        for _ in range(10):
            for r in await receive_records(engine):
                records[r["messageId"]] = r
            if len(records) == len(foreign) + 1:
                break
        batch = list(records.values())
        assert len(batch) == len(foreign) + 1 <= 10  # one batch, as Lambda would send it

        # When: the engine handles the batch,
        response = await engine.handle({"Records": batch}, None)
        # and the event source deletes what the response does not list (as Lambda's
        # event source mapping and app/worker/event_source_mapping.py do).
        failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
        undeleted = await engine.queue.delete_batch(
            [r["receiptHandle"] for r in batch if r["messageId"] not in failed]
        )

    # Then: no record is left for a retry, and the source queue is empty,
    assert response == {"batchItemFailures": []}
    assert undeleted == []
    assert messages_on(stack, stack.settings.queue) == 0
    # the job in the batch ran, and the one the wrong versions named did not.
    assert job_row(sql, job_id)["state"] == JobState.SUCCEEDED
    waiting = job_row(sql, decoy)
    assert (waiting["state"], waiting["attempt"]) == (JobState.QUEUED, 0)

    # Each foreign message is on the DLQ once, its body as it came, with its reason.
    letters = dead_letters(stack, len(foreign))
    by_body = {m["Body"]: m for m in letters}
    assert len(letters) == len(by_body) == len(foreign)
    for name, (body, says) in foreign.items():
        assert body in by_body, f"{name}: not on the DLQ with its body untouched"
        attrs = by_body[body].get("MessageAttributes") or {}
        reason = attrs[REASON]["StringValue"]
        for words in says:
            assert words in reason, f"{name}: reason {reason!r} does not say {words!r}"
        # Not marked as one of our dead letters: moved back, it must not pass for a redrive.
        assert codec.ATTR_DEAD_LETTERED_AT not in attrs, name


@pytest.mark.asyncio
async def test_a_foreign_message_the_dlq_refuses_is_left_on_the_queue_not_lost(
    stack: Stack, sql: Any
) -> None:
    """Deleting a foreign message is safe only once its copy is on the DLQ."""
    broken = carrier.broken_dlq_settings(stack)

    async with engine_for(broken) as engine:
        job_id = await submit(engine, "demo.noop", {})
        carrier.send_raw(stack, "[not ours]")
        records: dict[str, dict[str, Any]] = {}
        for _ in range(10):
            for r in await receive_records(engine):
                records[r["messageId"]] = r
            if len(records) == 2:
                break
        batch = list(records.values())
        response = await engine.handle({"Records": batch}, None)
    foreign = [r["messageId"] for r in batch if r["body"] == "[not ours]"]
    assert len(foreign) == 1
    assert response == {"batchItemFailures": [{"itemIdentifier": foreign[0]}]}
    assert job_row(sql, job_id)["state"] == JobState.SUCCEEDED
