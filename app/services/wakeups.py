"""Sending wake-up messages for waiting jobs: one per job, delayed until its due time
(within SQS's 15-minute cap). The database decides whether a job is due when the
message comes; a message that comes early is re-delayed, a lost one re-sent by the
sweeper (``due_wakeups``)."""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

from app import crashpoints, metrics, store
from app.priorities import Route
from app.settings.config import Settings
from app.transport import Transport

log = logging.getLogger(__name__)


async def send(
    queue: Transport,
    wakeups: Sequence[tuple[Route, float]],
    *,
    path: str = "engine",
    traces: Mapping[str, str | None] | None = None,
) -> int:
    """Send each job's wake-up (to its route: its priority's queue) with its delay (rounded up to whole seconds, so a timer is
    never woken before it is due) and its trace context where ``traces`` has it; returns
    how many were sent. A failed send is left to the sweeper, which re-sends a wake-up
    overdue by TASKLEASE_WAKE_GRACE_SECONDS."""
    by_delay: dict[int, list[Route]] = defaultdict(list)
    for route, delay in wakeups:
        by_delay[math.ceil(max(0.0, delay))].append(route)
    sent = 0
    for delay, ids in sorted(by_delay.items()):
        failed = await queue.send_jobs(ids, delay_seconds=delay, traces=traces)
        sent += len(ids) - len(failed)
        if failed:
            log.warning(
                "wake-up send failed; the sweeper re-sends it", extra={"count": len(failed)}
            )
    metrics.count(metrics.WAKEUPS, sent, path=path)
    return sent


async def sweep(settings: Settings, db: store.Database, queue: Transport, *, limit: int) -> int:
    """The sweeper's part: wake-ups now within the delay cap, and overdue ones lost."""
    due = await store.waits.due_wakeups(
        db,
        cap=settings.max_message_delay_seconds,
        grace=settings.wake_grace_seconds,
        limit=limit,
    )
    if not due:
        return 0
    crashpoints.hit(crashpoints.Point.AFTER_WAKE_MARKED, count=len(due))
    return await send(queue, due, path="sweeper")
