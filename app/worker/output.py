"""A running job's streamed output (``ctx.progress``, ``ctx.emit``, a model answer's
chunks), written in batches fenced by the lease token.

An item waits at most ``FLUSH_SECONDS`` (or until ``FLUSH_ITEMS`` are waiting) before a
background write takes it: a kind that emits a token at a time costs one statement per
batch, not one per token. Writes are serialised, so readers see the items in the order
they were emitted. The engine closes the buffer when the attempt's code returns or fails
(``close``): what is still waiting is written before the job's next transition. Once the
job's cancel is asked for, nothing more is written (the fence refuses it: Cancelled).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

from app import crashpoints, errors, store
from app.kinds.output import Emitted

log = logging.getLogger(__name__)

FLUSH_SECONDS = 0.2
FLUSH_ITEMS = 100


class OutputBuffer:
    def __init__(self, db: store.Database, job_id: uuid.UUID, token: uuid.UUID) -> None:
        self._db = db
        self._job_id = job_id
        self._token = token
        self._pending: list[Emitted] = []
        self._lock = asyncio.Lock()
        self._later: asyncio.Task[None] | None = None
        # Why nothing more is written, once a write was refused: the lease moved on
        # (LeaseLost) or the job's cancel was asked for (Cancelled).
        self.refused: type[errors.LeaseLost | errors.Cancelled] | None = None

    async def add(self, item: Emitted) -> None:
        if self.refused is not None:
            raise self.refused()
        self._pending.append(item)
        if len(self._pending) >= FLUSH_ITEMS:
            await self.flush()
        elif self._later is None:
            self._later = asyncio.create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(FLUSH_SECONDS)
        self._later = None
        try:
            await self.flush()
        except errors.LeaseLost:
            log.warning("output refused: lease lost", extra={"job_id": self._job_id})
        except errors.Cancelled:
            log.info("output refused: cancel asked for", extra={"job_id": self._job_id})
        except Exception as exc:  # a background task: log it, never lose it
            # Kept: the next flush (or close) tries again, and close() raises what stays.
            log.warning("output not written yet: %s", exc, extra={"job_id": self._job_id})

    async def flush(self) -> None:
        """Write what is waiting, in one statement; LeaseLost (or Cancelled) when the
        fence refuses it."""
        async with self._lock:
            # A copy: items added while the write is awaited are not in it, and must stay.
            items = list(self._pending)
            if not items or self.refused is not None:
                return
            try:
                written = await store.streams.append(
                    self._db,
                    self._job_id,
                    self._token,
                    [store.streams.OutputItem(i.at, i.type, i.data, i.key, i.seq) for i in items],
                )
            except errors.Cancelled:
                del self._pending[: len(items)]
                self.refused = errors.Cancelled
                raise
            # Taken off only once written: a failed write keeps them for the next flush.
            del self._pending[: len(items)]
            if not written:
                self.refused = errors.LeaseLost
                raise errors.LeaseLost()
            if any(i.type == "chunk" for i in items):
                crashpoints.hit(crashpoints.Point.INSIDE_STREAM, job_id=self._job_id)

    async def close(self, *, quiet: bool = False) -> None:
        """Write what is waiting and stop the timer. ``quiet``: the attempt failed
        already, so a refused or failed write is logged, not raised."""
        if self._later is not None:
            self._later.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._later
            self._later = None
        try:
            await self.flush()
        except (errors.LeaseLost, errors.Cancelled, errors.StoreError) as exc:
            if not quiet:
                raise
            log.info(
                "output of a failed attempt not written: %r", exc, extra={"job_id": self._job_id}
            )
