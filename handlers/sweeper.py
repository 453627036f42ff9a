"""Lambda entry point for the scheduled sweeper (EventBridge schedule)."""

from __future__ import annotations

from typing import Any

from app.services import sweeper
from app.store import pool as db
from app.transport import sqs as queue
from handlers import runtime

settings = runtime.load_settings()
settings.need("database_url", "queue_url", "dlq_url")
_clients: tuple[db.Database, queue.Queue] | None = None


async def _get_clients() -> tuple[db.Database, queue.Queue]:
    global _clients
    if _clients is None:
        database = db.Database(settings.database, min_size=1, max_size=2)
        await database.open()
        sqs = queue.Queue(settings)
        await sqs.open()
        _clients = (database, sqs)
    return _clients


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        database, sqs = await _get_clients()
        report = await sweeper.sweep_once(settings, database, sqs)
        return {
            "stalled": report.stalled,
            "outbox_sent": report.outbox_sent,
            "resent": report.resent,
        }

    return runtime.run(go)
