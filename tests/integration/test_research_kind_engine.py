"""agent.research through the engine, in this process, against real PostgreSQL, SQS and
a webhook receiver: the token its notice carries answers the callback; no answer
escalates; a child that fails for good is tolerated."""

from __future__ import annotations

import http.server
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from app.services import callbacks
from app.states import JobState
from tests.conftest import Stack, job_row
from tests.helpers import engine_for, receive_records, serving, submit

pytestmark = pytest.mark.integration

FINISHED = ("succeeded", "dead_lettered", "cancelled")


async def drain_until(engine: Any, done: Any, *, deadline: float = 60) -> None:
    """Handle messages until ``done()`` (or the deadline passes)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end and not done():
        records = await receive_records(engine, wait=1)
        if records:
            await engine.handle({"Records": records}, None)


class Receiver(http.server.ThreadingHTTPServer):
    """A webhook receiver in this process (the stack's own takes seconds to start)."""

    def __init__(self) -> None:
        self.deliveries: list[dict[str, Any]] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                key = self.headers.get("idempotency-key")
                receiver.deliveries.append({"idempotency_key": key, "body": body})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    with serving(server):
        yield server


@pytest.mark.asyncio
async def test_the_notice_s_token_approves_and_the_job_posts_once(
    stack: Stack, sql: Any, receiver: Receiver
) -> None:
    payload = {"topic": "t", "post_delay_seconds": 1, "callback_base_url": "http://api.test"}
    async with engine_for(stack.with_settings(webhook_url=receiver.url)) as engine:
        job_id = await submit(engine, "agent.research", payload)

        def notified() -> bool:
            return any(d["body"]["event"] == "approval_requested" for d in receiver.deliveries)

        await drain_until(engine, notified)
        row = job_row(sql, job_id)
        assert row["state"] == JobState.WAITING and row["wait_kind"] == "callback", row
        (notice,) = [d for d in receiver.deliveries if d["body"]["event"] == "approval_requested"]
        token = notice["body"]["token"]
        assert notice["body"]["approve_url"] == f"http://api.test/v1/callbacks/{token}"
        assert notice["idempotency_key"] == f"{job_id}:notify:approve"
        assert token == await callbacks.token_for(engine.db, job_id, "approve")
        await callbacks.answer(engine.db, engine.queue, token, result={"approved": True})
        await drain_until(engine, lambda: job_row(sql, job_id)["state"] in FINISHED)
    row = job_row(sql, job_id)
    assert row["state"] == JobState.SUCCEEDED, row
    assert row["result"]["status"] == "posted" and row["result"]["answered"] >= 2
    assert row["attempt"] == 1  # three waits (children, callback, timer), no attempt used
    events = [d["body"]["event"] for d in receiver.deliveries]
    assert events.count("approval_requested") == 1 and events.count("published") == 1
    kids = sql.execute("SELECT kind FROM jobs WHERE parent_id = %s", (job_id,)).fetchall()
    assert [k["kind"] for k in kids] == ["agent.subquery"] * 3


@pytest.mark.asyncio
async def test_no_answer_escalates_and_a_failed_sub_query_is_tolerated(
    stack: Stack, sql: Any
) -> None:
    payload = {
        "topic": "t",
        "queries": ["a", "[permanent] b", "c"],  # the fake model refuses the second
        "approval_timeout_seconds": 1,
    }
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "agent.research", payload)
        await drain_until(engine, lambda: job_row(sql, job_id)["state"] in FINISHED)
    row = job_row(sql, job_id)
    assert row["state"] == JobState.SUCCEEDED, row
    assert row["result"]["status"] == "escalated"
    assert (row["result"]["answered"], row["result"]["failed"]) == (2, 1)
    effects = {
        r["key"] for r in sql.execute("SELECT key FROM effects WHERE job_id = %s", (job_id,))
    }
    assert {"escalate", "notify:approve", "draft-text"} <= effects and "post" not in effects
    cb = sql.execute("SELECT state FROM callbacks WHERE job_id = %s", (job_id,)).fetchone()
    assert cb["state"] == "timed_out"
