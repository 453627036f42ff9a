"""Cancels of running jobs: the channel migration 0016's trigger notifies when a job under
a live lease is asked to stop, and which of a worker's attempts were asked."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence

from app.store import streams
from app.store.pool import Database, q

CHANNEL = "tasklease_cancel"


def listen(url: str, ready: asyncio.Event | None = None) -> AsyncIterator[str]:
    """The ids of jobs asked to stop, as they are asked (see ``streams.listen``)."""
    return streams.listen(url, ready, channel=CHANNEL)


async def requested(db: Database, held: Sequence[tuple[uuid.UUID, uuid.UUID]]) -> set[uuid.UUID]:
    """Of the (job id, lease token) pairs in ``held``, the jobs still leased under that
    token whose cancel was asked for."""
    if not held:
        return set()
    rows = await db.fetch(
        q("cancels_requested"),
        {"ids": [job for job, _ in held], "tokens": [token for _, token in held]},
    )
    return {row["id"] for row in rows}
