"""Priorities and fair queues against the real servers: each priority's messages on its own
queue in the tenant's message group, a dead letter on the paired DLQ and back on its queue
after a redrive, a bad priority refused with nothing written, and the local event source
serving the queues by weight."""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import uuid
from typing import Any

import pytest

from app import client, transport
from app.priorities import Priority
from app.services import redrive
from app.transport import codec
from app.worker.event_source_mapping import EventSource, to_record
from tests import carrier
from tests.conftest import Stack
from tests.helpers import count, engine_for, handle_and_ack, receive_records, submit

pytestmark = pytest.mark.integration

NOOP = {"kind": "demo.noop", "payload": {}}


def on_queue(stack: Stack, url: str) -> list[dict[str, Any]]:
    """Every message on a queue with its system attributes, left visible for the next look."""
    seen: dict[str, dict[str, Any]] = {}
    for _ in range(5):
        got = carrier.receive_raw(stack, url, wait=0, visibility=0)
        fresh = [m for m in got if m["MessageId"] not in seen]
        if not fresh:
            break
        seen.update((m["MessageId"], m) for m in fresh)
    return list(seen.values())


def job_ids_on(stack: Stack, url: str) -> set[uuid.UUID]:
    return set(codec.job_ids(on_queue(stack, url)).values())


def queues(stack: Stack) -> dict[Priority, str]:
    return {p: stack.settings.queue_for(p) for p in Priority}


def dlqs(stack: Stack) -> dict[Priority, str]:
    return {p: stack.settings.dlq_for(p) for p in Priority}


def test_each_priority_lands_on_its_queue_in_its_tenants_group(stack: Stack, api: Any) -> None:
    assert len(set(queues(stack).values())) == 3, "the test stack wires three queues"
    wanted: dict[Priority, set[uuid.UUID]] = collections.defaultdict(set)
    for p in Priority:
        resp = api.post("/v1/jobs", json={**NOOP, "priority": p.value})
        assert resp.status_code == 202, resp.text
        assert resp.json()["priority"] == p.value
        wanted[p].add(uuid.UUID(resp.json()["id"]))
    resp = api.post("/v1/jobs", json=NOOP)  # no priority: normal
    assert resp.json()["priority"] == "normal"
    wanted[Priority.NORMAL].add(uuid.UUID(resp.json()["id"]))
    batch = api.post(
        "/v1/jobs/batch", json={"jobs": [{**NOOP, "priority": "low"}, {**NOOP, "priority": "high"}]}
    )
    assert batch.status_code == 202, batch.text
    low, high = batch.json()["jobs"]
    wanted[Priority.LOW].add(uuid.UUID(low["id"]))
    wanted[Priority.HIGH].add(uuid.UUID(high["id"]))
    assert api.get(f"/v1/jobs/{high['id']}").json()["priority"] == "high"

    for p, url in queues(stack).items():
        messages = on_queue(stack, url)
        assert set(codec.job_ids(messages).values()) == wanted[p], p
        # SQS fair queues: the tenant is each message's group.
        assert {m["Attributes"].get("MessageGroupId") for m in messages} == {"acme"}


@pytest.mark.parametrize("bad", ["urgent", "HIGH", 1, None])
def test_a_bad_priority_is_a_422_naming_the_field_and_writes_nothing(
    stack: Stack, api: Any, sql: Any, bad: Any
) -> None:
    one = api.post("/v1/jobs", json={**NOOP, "priority": bad})
    assert one.status_code == 422, one.text
    assert "priority" in one.text
    batch = api.post("/v1/jobs/batch", json={"jobs": [NOOP, {**NOOP, "priority": bad}]})
    assert batch.status_code == 422, batch.text
    assert "priority" in batch.text and "jobs" in batch.text
    assert count(sql, "jobs") == 0 and count(sql, "outbox") == 0
    assert all(not on_queue(stack, url) for url in queues(stack).values())


@pytest.mark.asyncio
async def test_a_dead_letter_goes_to_its_queues_dlq_and_a_redrive_brings_it_back(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        job = await submit(
            engine, "demo.flaky", {"permanent": True}, tenant="acme", priority="high"
        )
        await handle_and_ack(engine, await receive_records(engine, priority="high"))
        assert sql.execute("SELECT state FROM jobs WHERE id = %s", (job,)).fetchone()["state"] == (
            "dead_lettered"
        )
        letters = on_queue(stack, dlqs(stack)[Priority.HIGH])
        assert set(codec.job_ids(letters).values()) == {job}
        assert letters[0]["Attributes"].get("MessageGroupId") == "acme"
        assert not on_queue(stack, dlqs(stack)[Priority.NORMAL])
        # The dead-letter views see every DLQ.
        assert (await engine.queue.dead_letter_depth())["ApproximateNumberOfMessages"] == 1

        report = await redrive.redrive(stack.settings, engine.db, engine.queue)
        assert (report.moved, report.refused) == (1, [])
        # Back on the high queue, its own; nothing on the normal one, nothing left dead.
        assert job_ids_on(stack, queues(stack)[Priority.HIGH]) == {job}
        assert not on_queue(stack, queues(stack)[Priority.NORMAL])
        assert not on_queue(stack, dlqs(stack)[Priority.HIGH])


def leased_order(sql: Any) -> list[str]:
    """The priorities of the jobs in the order they were leased."""
    return [
        r["priority"]
        for r in sql.execute(
            "SELECT j.priority FROM job_events e JOIN jobs j ON j.id = e.job_id"
            " WHERE e.to_state = 'leased' ORDER BY e.at, e.id"
        ).fetchall()
    ]


@pytest.mark.asyncio
async def test_the_event_source_serves_the_queues_by_weight(stack: Stack, sql: Any) -> None:
    # One message per batch and one poller: each batch is one turn of the weighting.
    settings = stack.with_settings(batch_size=1, priority_weights="high=6,normal=3,low=1")
    async with engine_for(settings) as engine:
        for p in Priority:
            for _ in range(10):
                await submit(engine, "demo.noop", {}, tenant="acme", priority=p.value)
        await EventSource(settings, engine).run(concurrency=1, max_batches=30)
    order = leased_order(sql)
    assert len(order) == 30
    # While every queue has work: six high, three normal, one low in each ten turns.
    assert collections.Counter(order[:10]) == {"high": 6, "normal": 3, "low": 1}
    assert order.index("low") < 10, "low is not starved behind the others"
    assert {r["state"] for r in sql.execute("SELECT state FROM jobs").fetchall()} == {"succeeded"}


@pytest.mark.asyncio
async def test_a_busy_poller_watches_an_empty_queue_instead_of_short_polling_it(
    stack: Stack, sql: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: twenty jobs on normal only, and one poller taking a job a batch.
    settings = stack.with_settings(batch_size=1, priority_weights="high=6,normal=3,low=1")
    short_polls: collections.Counter[str] = collections.Counter()
    async with engine_for(settings) as engine:
        for _ in range(20):
            await submit(engine, "demo.noop", {}, tenant="acme")
        real = engine.queue.receive
        high: list[str] = []

        async def counted(*, max_messages: int, wait_seconds: int, priority: Priority) -> Any:
            if wait_seconds == 0:
                short_polls[priority.value] += 1
                if priority is Priority.NORMAL and short_polls["normal"] == 5:
                    # ...and a high job arriving while the poller is busy.
                    high.append(
                        await submit(engine, "demo.noop", {}, tenant="acme", priority="high")
                    )
            return await real(
                max_messages=max_messages, wait_seconds=wait_seconds, priority=priority
            )

        monkeypatch.setattr(engine.queue, "receive", counted)
        await EventSource(settings, engine).run(concurrency=1, max_batches=21)

    # Then every job ran; an empty queue was short-polled once (high twice: once more
    # after its long poll brought the high job), not on each of the turns that began with
    # it (six in ten for high), and the high job that came while the poller was busy was
    # taken by high's long poll before normal's work was done.
    assert {r["state"] for r in sql.execute("SELECT state FROM jobs").fetchall()} == {"succeeded"}
    assert short_polls["high"] <= 2 and short_polls["low"] <= 1, short_polls
    assert short_polls["normal"] >= 20
    order = leased_order(sql)
    assert len(order) == 21 and order[-1] == "normal", order
    assert len(high) == 1


@pytest.mark.asyncio
async def test_a_lambda_record_is_re_timed_on_the_queue_it_came_from(stack: Stack) -> None:
    """On Lambda the event source mapping receives, not the transport: the record's
    eventSourceARN tells it which queue a receipt handle belongs to (SQS refuses another
    queue's handle)."""
    high = stack.settings.queue_for(Priority.HIGH)
    carrier.send_raw(stack, codec.body_for(uuid.uuid4()), url=high)
    (message,) = carrier.receive_raw(stack, high, visibility=60)
    arn = stack.carrier(lambda t: t.source_arn(Priority.HIGH))
    record = to_record(message, queue_arn=arn, region="us-east-1")
    async with transport.connect(stack.settings) as fresh:  # a cold start: it knows nothing
        fresh.remember([record])
        await fresh.change_visibility(record["receiptHandle"], 0)
    assert job_ids_on(stack, high) == {codec.parse_body(message["Body"])}  # visible again


@pytest.mark.asyncio
async def test_a_high_jobs_children_are_high_and_sent_to_the_high_queue(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        parent = await submit(
            engine, "demo.fanout", {"children": 2}, tenant="acme", priority="high"
        )
        await handle_and_ack(engine, await receive_records(engine, priority="high"))
    kids = {
        r["id"]: r["priority"]
        for r in sql.execute("SELECT id, priority FROM jobs WHERE parent_id = %s", (parent,))
    }
    assert len(kids) == 2 and set(kids.values()) == {"high"}
    assert job_ids_on(stack, queues(stack)[Priority.HIGH]) == set(kids)
    assert not on_queue(stack, queues(stack)[Priority.NORMAL])


def test_the_client_and_the_cli_submit_with_a_priority(stack: Stack, sql: Any) -> None:
    url = stack.api()
    with client.Client(url, stack.key("acme")) as api:
        low = api.submit("demo.noop", {}, priority="low")
        (high,) = api.submit_many(
            [client.JobRequest(kind="demo.noop", payload={}, priority="high")]
        )
        assert api.get(low.id).priority == client.Priority.LOW
    assert (low.priority, high.priority) == (client.Priority.LOW, client.Priority.HIGH)
    cli = [sys.executable, "-m", "app.cli", "submit", "demo.noop", "--tenant", "acme"]
    made = subprocess.run(
        [*cli, "--priority", "high"], env=stack.env, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    by_cli = uuid.UUID(made.stdout.strip())
    shown = subprocess.run(
        [sys.executable, "-m", "app.cli", "jobs", "show", str(by_cli)],
        env=stack.env,
        capture_output=True,
        text=True,
    )
    assert re.search(r"priority\s*│\s*high", shown.stdout), shown.stdout
    bad = subprocess.run(
        [*cli, "--priority", "urgent"], env=stack.env, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "urgent" in bad.stderr, bad.stderr
    assert job_ids_on(stack, queues(stack)[Priority.HIGH]) == {high.id, by_cli}
    assert job_ids_on(stack, queues(stack)[Priority.LOW]) == {low.id}
    assert count(sql, "jobs") == 3
