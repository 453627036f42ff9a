"""Cancellation that reaches the call: a running job whose cancel is asked for stops
within moments, not at its next heartbeat.

Migration 0016's trigger notifies ``tasklease_cancel`` with the job's id in the
transaction that asks (the API, the CLI, a cancelled parent's children). Each worker
process holds one LISTEN connection (``Listener``); a notification for a job this process
runs cancels that attempt's task (``Keeper.stop``): the model call's HTTP request is
closed with it, and the engine marks the job cancelled, fenced by its lease token. A
notification for a job this process does not run changes nothing, and one for a job it
runs is only a cue: the flag is read under the attempt's lease token first (any role
that can connect may NOTIFY, and a late one may name an attempt that came after).

A notification sent while the connection was down is gone: once it is back, the running
attempts' flags are read once. The heartbeat still sees the flag too, the backstop when
the listener cannot connect. Effects and output are fenced on the flag in the database
(no write after a cancel), whichever way the worker learns of it.

A local worker listens for its whole life (``start``). On Lambda a process may be
frozen between invocations, and a listening session whose client never reads holds back
the cleanup of PostgreSQL's notification queue (NOTIFY fails once it is full): there the connection is opened when an invocation starts and closed when it
ends (``invocation``), and only for an invocation that runs a job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator

from app import crashpoints, errors, store
from app.worker.leases import Keeper

log = logging.getLogger(__name__)

# Pauses before connecting again after the connection failed: doubling up to the cap.
FIRST_RETRY_SECONDS = 0.5
MAX_RETRY_SECONDS = 10.0
# A notification for a job not running here is kept this long (and at most this many):
# the job may be between its claim and its start here (the cancel came in that moment).
EARLY_SECONDS = 10.0
EARLY_MAX = 1000


class Listener:
    """One process's LISTEN connection for cancels, and the attempts it stops."""

    def __init__(self, db: store.Database, keeper: Keeper) -> None:
        self._db = db
        self._keeper = keeper
        self._task: asyncio.Task[None] | None = None
        self._for_life = False
        self._invocations = 0
        self._early: dict[uuid.UUID, float] = {}  # notified, not running here: when
        self._checks: set[asyncio.Task[None]] = set()
        self.listening = asyncio.Event()  # set while LISTEN holds (for tests and logs)

    def start(self) -> None:
        """Listen from now until ``stop`` (a process that is never frozen)."""
        self._for_life = True
        self._ensure()

    def running(self, job_id: uuid.UUID) -> None:
        """``job_id`` starts running in this process (its Keeper.run follows at once):
        listen, if not yet (inside ``invocation``); if its cancel was notified while it
        was being claimed, check it once the attempt is registered."""
        self._ensure()
        notified = self._early.pop(job_id, None)
        if notified is not None and time.monotonic() - notified < EARLY_SECONDS:
            check = asyncio.create_task(self._stop_asked([job_id], how="notify"))
            self._checks.add(check)
            check.add_done_callback(self._checks.discard)

    @contextlib.asynccontextmanager
    async def invocation(self) -> AsyncIterator[None]:
        """Keep listening, once ``running`` started it, until this block (a batch: a Lambda
        invocation) and every other one running beside it ended."""
        self._invocations += 1
        try:
            yield
        finally:
            self._invocations -= 1
            if self._invocations == 0 and not self._for_life:
                await self.stop()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:  # a listener that failed must not fail the batch it served
                log.exception("cancel listener failed")
        self.listening.clear()

    def _ensure(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="tasklease-cancel-listener")

    async def _run(self) -> None:
        delay = FIRST_RETRY_SECONDS
        while True:
            ready = asyncio.Event()
            recheck = asyncio.create_task(self._recheck_once(ready))
            try:
                async for payload in store.cancels.listen(self._db.url, ready):
                    delay = FIRST_RETRY_SECONDS
                    await self._notified(payload)
            except errors.StoreError as exc:
                log.warning("cancel listener lost its connection: %s", exc)
            except Exception:  # never let it die quietly: the heartbeat alone would be left
                log.exception("cancel listener failed; connecting again")
            finally:
                self.listening.clear()
                recheck.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await recheck
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_RETRY_SECONDS)

    async def _recheck_once(self, ready: asyncio.Event) -> None:
        """Once LISTEN holds: stop the running attempts whose cancel came while it did not."""
        await ready.wait()
        self.listening.set()
        await self._stop_asked(list(self._keeper.running), how="recheck")

    async def _notified(self, payload: str) -> None:
        try:
            job_id = uuid.UUID(payload)
        except ValueError:
            log.warning("cancel notification that is not a job id: %r", payload[:100])
            return
        if job_id in self._keeper.running:
            await self._stop_asked([job_id], how="notify")
        else:  # another process's job, one that ended here, or one about to start here
            now = time.monotonic()
            if len(self._early) >= EARLY_MAX:
                self._early = {j: t for j, t in self._early.items() if now - t < EARLY_SECONDS}
            if len(self._early) < EARLY_MAX:
                self._early[job_id] = now

    async def _stop_asked(self, job_ids: list[uuid.UUID], *, how: str) -> None:
        """Stop the attempts of ``job_ids`` running here whose cancel was asked for."""
        held = [(j, r.lease.token) for j in job_ids if (r := self._keeper.running.get(j))]
        try:
            asked = await store.cancels.requested(self._db, held)
        except errors.StoreError as exc:
            # The heartbeat reads the flag too: it stops them then.
            log.warning("cancel listener could not read the running jobs' flags: %s", exc)
            return
        for job_id in asked:
            if how == "notify":
                crashpoints.hit(crashpoints.Point.AFTER_CANCEL_NOTIFY, job_id=job_id)
            self._keeper.stop(job_id, errors.Cancelled(), how=how)
