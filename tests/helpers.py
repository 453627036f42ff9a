"""Small helpers the tests share: an engine in this process, records as Lambda sends them,
counts of rows and messages, the environment that arms a crash point."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from http.server import HTTPServer
from typing import TYPE_CHECKING, Any

from app.crashpoints import CONSENT
from app.priorities import Priority, Route
from app.settings.config import Settings
from app.worker import event_source_mapping as eventsource
from app.worker.engine import Engine

if TYPE_CHECKING:
    from tests.conftest import Stack

QUEUE_ARN = "arn:aws:sqs:us-east-1:000000000000:test"


def routes(*job_ids: Any, tenant: str = "acme", priority: str = "normal") -> list[Route]:
    """Where the messages of these jobs go (for a test that sends one by hand)."""
    return [Route.of(j, tenant, priority) for j in job_ids]


def count(sql: Any, table: str) -> int:
    return int(sql.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"])


def queue_depth(stack: Stack) -> int:
    """Messages on the test's source queue, visible or in flight."""
    return stack.queue_depth()


@contextlib.contextmanager
def serving(server: HTTPServer) -> Iterator[None]:
    """Serve ``server`` on a thread of its own until the block ends, then close it."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def crash_env(point: str) -> dict[str, str]:
    """The environment that makes a process SIGKILL itself at ``point``."""
    return {"TASKLEASE_CRASH_AT": str(point), "TASKLEASE_ALLOW_CRASH_POINTS": CONSENT}


def dlq_messages(
    stack: Stack,
    *,
    rounds: int = 3,
    visibility: int | None = None,
    enough: Callable[[list[dict[str, Any]]], bool] | None = None,
) -> list[dict[str, Any]]:
    """The DLQ's messages with their attributes, each once: up to ``rounds`` receives of a
    second, until ``enough(found)`` (by default: until a receive finds nothing)."""
    seen: dict[str, dict[str, Any]] = {}
    for _ in range(rounds):
        got: list[dict[str, Any]] = stack.carrier(
            lambda t: t.receive_dead_letters(max_messages=10, wait_seconds=1, visibility=visibility)
        )
        seen.update((m["MessageId"], m) for m in got)
        if enough(list(seen.values())) if enough is not None else not got:
            break
    return list(seen.values())


@contextlib.asynccontextmanager
async def engine_for(settings: Settings) -> AsyncIterator[Engine]:
    engine = await Engine.start(settings)
    try:
        yield engine
    finally:
        await engine.close()


async def receive_records(
    engine: Engine, *, max_messages: int = 10, wait: int = 2, priority: str = "normal"
) -> list[dict[str, Any]]:
    messages = await engine.queue.receive(
        max_messages=max_messages, wait_seconds=wait, priority=Priority(priority)
    )
    return [eventsource.to_record(m, queue_arn=QUEUE_ARN, region="us-east-1") for m in messages]


FINISHED = ("succeeded", "dead_lettered", "cancelled")


async def drain(engine: Engine, sql: Any, job_ids: list[Any], *, deadline: float = 30) -> None:
    """Handle messages in this process until every job is finished (or the deadline passes:
    the caller's assertions then say what is not)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        states = sql.execute(
            "SELECT state FROM jobs WHERE id = ANY(%s::uuid[])", ([str(j) for j in job_ids],)
        ).fetchall()
        if len(states) == len(job_ids) and all(r["state"] in FINISHED for r in states):
            return
        records = await receive_records(engine, wait=1)
        if records:
            await handle_and_ack(engine, records)


async def handle_and_ack(engine: Engine, records: list[dict[str, Any]]) -> None:
    """Handle a batch and delete the messages it did not report as failures, as the event
    source mapping (Lambda's, or the worker's) does: a message the engine is done with must
    not come back after its visibility timeout as an extra wake-up."""
    response = await engine.handle({"Records": records}, None)
    failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
    done = [r["receiptHandle"] for r in records if r["messageId"] not in failed]
    if done:
        await engine.queue.delete_batch(done)


async def submit(engine: Engine, kind: str, payload: dict[str, Any], **kw: Any) -> Any:
    from app.services import submit as service

    submitted = await service.submit(
        engine.settings, engine.db, engine.queue, kind=kind, payload=payload, **kw
    )
    return submitted.job["id"]


def close_api_handler(module: Any) -> None:
    """After a test of handlers.api through Mangum: Mangum runs each invocation on the
    thread's event loop and the app keeps its pool open across warm invocations, so close
    the pool first, then the loop Mangum made; the next test cold-starts the module."""
    loop = asyncio.get_event_loop_policy().get_event_loop()
    loop.run_until_complete(module.app.state.runtime.close())
    loop.close()
    asyncio.set_event_loop(None)
    sys.modules.pop("handlers.api", None)
