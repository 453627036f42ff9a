"""Lambda entry point for the SQS event source mapping (ReportBatchItemFailures on).

The engine is built once per process, outside the handler, on first use.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app import tracing
from app.worker import presence
from app.worker.engine import Engine
from handlers import runtime

settings = runtime.load_settings()
_engine: Engine | None = None


async def _get_engine() -> Engine:
    global _engine
    if _engine is None:
        _engine = await Engine.start(settings)
    return _engine


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        engine = await _get_engine()
        # The environment's row in workers, counted beside the batch (one UPSERT per
        # invocation, not per message), so it adds no wait in front of the jobs.
        seen = asyncio.create_task(
            presence.lambda_invoked(engine.db, context, len(event.get("Records") or []))
        )
        try:
            return await engine.handle(event, context)
        finally:
            await seen

    try:
        return runtime.run(go)
    finally:
        # The process may be frozen once this returns: the invocation's spans go now.
        tracing.flush()
