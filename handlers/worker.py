"""Lambda entry point for the SQS event source mapping (ReportBatchItemFailures on).

The engine is built once per process, outside the handler, on first use.
"""

from __future__ import annotations

from typing import Any

from app import tracing
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
        return await engine.handle(event, context)

    try:
        return runtime.run(go)
    finally:
        # The process may be frozen once this returns: the invocation's spans go now.
        tracing.flush()
