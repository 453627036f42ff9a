"""Who runs the jobs (docs/explain/design.md#workers): a long-running worker process writes
its row in ``workers`` when it starts, refreshes it every TASKLEASE_WORKER_HEARTBEAT_SECONDS
(one UPSERT: last seen, the jobs it runs now; never a round trip per job) and marks it
stopped on a clean stop. A SIGKILL leaves the row as it was: silent past
TASKLEASE_WORKER_GONE_SECONDS, it reads as gone.

On Lambda there is no long-lived process to heartbeat: each invocation adds one to its
execution environment's row (keyed by the function and its log stream), beside the batch,
not in front of it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from app import __version__, errors, store
from app.settings.config import Settings

log = logging.getLogger(__name__)


def process_identity(settings: Settings) -> store.workers.Identity:
    """A fresh id per start: a restarted worker with the same TASKLEASE_WORKER_ID is a new row."""
    return store.workers.Identity(
        id=str(uuid.uuid4()),
        name=settings.worker_id,
        host=socket.gethostname(),
        pid=os.getpid(),
        carrier=settings.transport,
        version=__version__,
    )


class Presence:
    """A worker process's row: registered, kept fresh, marked stopped."""

    def __init__(self, settings: Settings, db: store.Database, running: Callable[[], int]) -> None:
        self.settings = settings
        self.db = db
        self.running = running
        self.me = process_identity(settings)
        self._task: asyncio.Task[None] | None = None

    async def beat(self) -> bool:
        """One UPSERT; whether it was written (a database outage is logged, not raised:
        the jobs matter more than the row, and the next beat tries again)."""
        try:
            await store.workers.beat(self.db, self.me, running=self.running())
        except errors.StoreError as exc:
            log.warning("worker heartbeat not written: %s", exc)
            return False
        return True

    async def _beating(self) -> None:
        while True:
            await asyncio.sleep(self.settings.worker_heartbeat_seconds)
            await self.beat()

    @contextlib.asynccontextmanager
    async def kept(self) -> AsyncIterator[None]:
        """Registered for the block, heartbeating beside it; stopped when it ends."""
        await self.beat()
        log.info("worker registered", extra={"lease_owner": self.me.name})
        self._task = asyncio.create_task(self._beating(), name="tasklease-worker-heartbeat")
        try:
            yield
        finally:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            try:
                await store.workers.stopped(self.db, self.me.id)
            except errors.StoreError as exc:
                log.warning("worker stop not written (it will read as gone): %s", exc)


def lambda_identity(context: Any) -> store.workers.Identity:
    """A Lambda execution environment: its function and log stream (one per environment)."""
    function = str(
        getattr(context, "function_name", None)
        or os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "tasklease-worker")
    )
    stream = str(
        getattr(context, "log_stream_name", None)
        or os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME", socket.gethostname())
    )
    return store.workers.Identity(
        id=f"lambda:{function}:{stream}",
        name=function,
        host=stream,
        pid=os.getpid(),
        carrier="sqs",
        version=__version__,
    )


async def lambda_invoked(db: store.Database, context: Any, messages: int) -> None:
    """Count one invocation on its environment's row; never fails the batch."""
    try:
        await store.workers.lambda_invoked(db, lambda_identity(context), messages=messages)
    except errors.StoreError as exc:
        log.warning("invocation not recorded: %s", exc)
