"""The SQS carrier against a real SQS-compatible server (moto's, or LocalStack with
TASKLEASE_TEST_SQS=localstack), through the Transport contract only: create the queues,
send, receive, change visibility, delete, dead-letter, move back, depth. No database."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from app import errors, transport
from app.priorities import Route
from app.settings.config import Settings
from app.transport import Transport, codec

pytestmark = pytest.mark.integration

VISIBILITY = 30


async def _queues() -> Settings:
    """Settings naming a new pair of queues, made through the transport itself."""
    name = f"tl-transport-{uuid.uuid4().hex[:10]}"
    async with transport.connect(Settings(visibility_timeout_seconds=VISIBILITY)) as t:
        urls = await t.create_queues(name)
        again = await t.create_queues(name)  # creating finds the existing pair
    assert again == urls
    assert urls.queue_url.endswith(name) and urls.dlq_url.endswith(f"{name}-dlq")
    return Settings(
        queue_url=urls.queue_url, dlq_url=urls.dlq_url, visibility_timeout_seconds=VISIBILITY
    )


async def _receive_all(t: Transport, expected: int, *, dead: bool = False) -> list[dict[str, Any]]:
    """Receive until ``expected`` messages came (SQS may answer a long poll with fewer)."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 20
    while len(got) < expected and time.monotonic() < deadline:
        receive = t.receive_dead_letters if dead else t.receive
        got += await receive(max_messages=10, wait_seconds=1)
    return got


def _visible(depth: dict[str, int]) -> int:
    return depth["ApproximateNumberOfMessages"]


async def _round_trip() -> None:
    settings = await _queues()
    a, b = uuid.uuid4(), uuid.uuid4()
    async with transport.connect(settings) as t:
        assert (await t.source_arn()).endswith(settings.queue.rsplit("/", 1)[-1])
        assert await t.send_jobs([Route(a, "acme"), Route(b, "acme")]) == []
        assert _visible(await t.depth()) == 2

        received = await _receive_all(t, 2)
        assert set(codec.job_ids(received).values()) == {a, b}
        assert (await t.depth())["ApproximateNumberOfMessagesNotVisible"] == 2

        # The lease ends early: the message comes back, and is deleted with the other.
        by_job = {codec.parse_body(m["Body"]): m for m in received}
        await t.change_visibility(by_job[a]["ReceiptHandle"], 0)
        again = await _receive_all(t, 1)
        assert [codec.parse_body(m["Body"]) for m in again] == [a]
        handles = [again[0]["ReceiptHandle"], by_job[b]["ReceiptHandle"]]
        assert await t.delete_batch(handles) == []
        assert sum((await t.depth()).values()) == 0

        await _dead_letters(t, a)


async def _dead_letters(t: Transport, job: uuid.UUID) -> None:
    """Dead-letter one job and one foreign body, then move the job's letter back."""
    await t.send_dead_letter(Route(job, "acme"), "permanent failure on purpose", generation=2)
    await t.send_raw_dead_letter('{"not": "ours"}', "not a tasklease message")
    assert _visible(await t.dead_letter_depth()) == 2

    letters = await _receive_all(t, 2, dead=True)
    ours = [m for m in letters if codec.job_ids([m])]
    foreign = [m for m in letters if not codec.job_ids([m])]
    assert len(ours) == 1 and len(foreign) == 1
    assert foreign[0]["Body"] == '{"not": "ours"}'
    assert codec.attribute(foreign[0], codec.ATTR_REASON) == "not a tasklease message"
    assert not codec.is_marked(foreign[0])
    assert codec.attribute(ours[0], codec.ATTR_REASON) == "permanent failure on purpose"
    assert codec.attribute(ours[0], codec.ATTR_JOB_ID) == str(job)
    assert codec.redrive_generation(ours[0]) == 2

    # The receive/send/delete path the redrive walks.
    assert await t.send_moved(ours) == []
    assert await t.delete_dead_letters([ours[0]["ReceiptHandle"]]) == []
    moved = await _receive_all(t, 1)
    assert [codec.parse_body(m["Body"]) for m in moved] == [job]
    assert codec.redrive_generation(moved[0]) == 2  # the marker came along
    assert await t.delete_batch([moved[0]["ReceiptHandle"]]) == []

    # The server-side move: a handle where the server implements it, None where not (moto).
    handle = await t.start_move()
    assert handle is None or handle
    if handle:
        assert (await t.move_status()).get("Status")


def test_the_sqs_carrier_round_trip(aws_env: dict[str, str]) -> None:
    asyncio.run(_round_trip())


async def _delayed() -> None:
    settings = await _queues()
    job = uuid.uuid4()
    async with transport.connect(settings) as t:
        # A fraction of a second rounds up: a wake-up is never earlier than asked.
        assert await t.send_jobs([Route(job, "acme")], delay_seconds=0.2) == []
        assert (await t.depth())["ApproximateNumberOfMessagesDelayed"] == 1
        assert await t.receive(max_messages=10, wait_seconds=0) == []
        woken = await _receive_all(t, 1)
        assert [codec.parse_body(m["Body"]) for m in woken] == [job]


def test_a_delayed_wake_up_comes_later(aws_env: dict[str, str]) -> None:
    asyncio.run(_delayed())


async def _missing_queue(settings: Settings) -> None:
    async with transport.connect(settings) as t:
        await t.depth()


def test_a_failed_call_is_a_queue_error_naming_the_operation(aws_env: dict[str, str]) -> None:
    endpoint = aws_env["AWS_ENDPOINT_URL_SQS"]
    settings = Settings(queue_url=f"{endpoint}/000000000000/tl-no-such-queue-{uuid.uuid4().hex}")
    operation = "SQS get_queue_attributes"
    if aws_env.get("TASKLEASE_TRANSPORT") == "redis":  # a stream is made by its first write
        settings = Settings(
            queue_url="tl-unreachable",
            dlq_url="tl-unreachable-dlq",
            redis_url="redis://127.0.0.1:9/0",
        )
        operation = "Redis DEPTH"
    with pytest.raises(errors.QueueError, match=operation):
        asyncio.run(_missing_queue(settings))
