"""Lambda entry point for the scheduled sweeper (EventBridge schedule)."""

from __future__ import annotations

import dataclasses
from typing import Any

from app import kinds, store, tracing, transport
from app.services import sweeper
from app.transport import Transport, secrets
from handlers import runtime

settings = runtime.load_settings()
settings.need("database_url", "queue_url", "dlq_url")
tracing.configure("tasklease-sweeper")
kinds.load(settings)  # schedules make jobs of these kinds: a bad or empty list is said now
# Kept open while the process is warm: each scheduled invocation reuses them.
_clients: tuple[store.Database, Transport] | None = None


async def _get_clients() -> tuple[store.Database, Transport]:
    global _clients
    if _clients is None:
        database = store.Database(secrets.database_url(settings), min_size=1, max_size=2)
        await database.open()
        queue = transport.create(settings)
        await queue.open()
        _clients = (database, queue)
    return _clients


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        database, queue = await _get_clients()
        report = await sweeper.sweep_once(settings, database, queue)
        return dataclasses.asdict(report)

    try:
        return runtime.run(go)
    finally:
        tracing.flush()  # the process may be frozen once this returns
