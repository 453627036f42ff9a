"""Small helpers the integration tests share: an engine in this process, records as Lambda sends them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from app.config import Settings
from app.worker import event_source_mapping as eventsource
from app.worker.engine import Engine

QUEUE_ARN = "arn:aws:sqs:us-east-1:000000000000:test"


@contextlib.asynccontextmanager
async def engine_for(settings: Settings) -> AsyncIterator[Engine]:
    engine = await Engine.start(settings)
    try:
        yield engine
    finally:
        await engine.close()


async def receive_records(
    engine: Engine, *, max_messages: int = 10, wait: int = 2
) -> list[dict[str, Any]]:
    messages = await engine.sqs.receive(max_messages=max_messages, wait_seconds=wait)
    return [eventsource.to_record(m, queue_arn=QUEUE_ARN, region="us-east-1") for m in messages]


async def submit(engine: Engine, kind: str, payload: dict[str, Any], **kw: Any) -> Any:
    from app.services import submit as service

    submitted = await service.submit(
        engine.settings, engine.db, engine.sqs, kind=kind, payload=payload, **kw
    )
    return submitted.job["id"]
