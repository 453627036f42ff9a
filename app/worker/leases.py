"""A delivery's lease while its job runs: the heartbeat that extends the row and the
message's visibility together, and the hand-back before Lambda's 15 minutes or SQS's
12-hour visibility cap run out (docs/explain/design.md#leases)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from app import errors, metrics, store
from app.priorities import Route
from app.settings import aws_limits
from app.settings.config import Settings
from app.transport import Transport

log = logging.getLogger(__name__)


class LambdaContext(Protocol):
    def get_remaining_time_in_millis(self) -> int: ...


@dataclass(frozen=True)
class Claim:
    job_id: uuid.UUID
    token: uuid.UUID  # the fencing token this delivery's lease will carry
    generation: int | None  # a moved dead letter's generation, when this is a redrive


@dataclass
class Lease:
    """The live lease of one record's job, and why the heartbeat stopped the job, if it did."""

    job_id: uuid.UUID
    token: uuid.UUID
    receipt_handle: str
    received_at: float  # epoch seconds: SQS caps this receive's visibility at 12 h from here
    generation: int  # the job's redrive count, carried by its dead letter
    clock_offset: float = 0.0  # seconds the database's clock is ahead of this process's
    traceparent: str | None = None  # the job's trace context, carried by its dead letter
    route: Route | None = None  # where the job's messages go (None: the normal queue)
    # The run's deadline in this process's time.time() (None: none): the attempt is
    # stopped then, as a cancel stops it (errors.DeadlinePassed).
    deadline: float | None = None
    stop: errors.TaskleaseError | None = None
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def to(self) -> Route:
        """The job's route (a lease made without one: the normal queue, no group)."""
        return self.route or Route(self.job_id, "")


def time_to_hand_back(lease: Lease, context: LambdaContext | None, settings: Settings) -> float:
    """Seconds until the invocation (or SQS's 12-hour visibility cap) runs too short."""
    margin = settings.handback_margin_seconds
    cap_left = lease.received_at + aws_limits.MAX_VISIBILITY_SECONDS - time.time()
    left = cap_left - settings.visibility_timeout_seconds - margin
    if context is not None:
        left = min(left, context.get_remaining_time_in_millis() / 1000 - margin)
    return left


@dataclass(frozen=True)
class Running:
    """An attempt this process runs: its lease and the task running its code."""

    lease: Lease
    task: asyncio.Task[Any]


class Keeper:
    """Runs a job's code under its lease: a heartbeat beside it, a timeout around it."""

    def __init__(self, settings: Settings, db: store.Database, queue: Transport) -> None:
        self.settings = settings
        self.db = db
        self.queue = queue
        # The attempts running in this process, by job: what a cancel notification stops
        # (app/worker/cancels.py).
        self.running: dict[uuid.UUID, Running] = {}

    def stop(self, job_id: uuid.UUID, stop: errors.TaskleaseError, *, how: str) -> bool:
        """Stop this process's running attempt of ``job_id`` (``run`` raises ``stop``);
        False when it runs none, or that attempt is ending already."""
        running = self.running.get(job_id)
        return running is not None and self._stop(running, stop, how=how)

    @staticmethod
    def _stop(running: Running, stop: errors.TaskleaseError, *, how: str) -> bool:
        if running.task.done() or running.lease.stop is not None:
            return False
        running.lease.stop = stop
        running.task.cancel()
        if isinstance(stop, errors.Cancelled):
            metrics.count(metrics.CANCELS, how=how)
            log.info("stopping: cancel asked for (%s)", how, extra=running.lease.fields)
        elif isinstance(stop, errors.DeadlinePassed):
            log.info("stopping: the run's deadline passed", extra=running.lease.fields)
        return True

    async def run(
        self,
        lease: Lease,
        code: Callable[[], Awaitable[Any]],
        timeout_seconds: int,
        context: LambdaContext | None,
    ) -> Any:
        """``code()``'s result; LeaseLost, Cancelled or HandBack when the heartbeat (or a
        cancel notification: ``stop``) stopped it, DeadlinePassed at the lease's deadline;
        JobError when it ran past ``timeout_seconds``."""

        async def execute() -> Any:
            async with asyncio.timeout(timeout_seconds):
                return await code()

        job_task = asyncio.create_task(execute())
        running = self.running[lease.job_id] = Running(lease, job_task)
        beat = asyncio.create_task(self._heartbeat(running, context))
        watch = asyncio.create_task(self._deadline(running)) if lease.deadline else None
        try:
            return await job_task
        except errors.Cancelled:
            if lease.stop is None:  # not stopped from outside: a fenced write was refused
                metrics.count(metrics.CANCELS, how="write")
            raise
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if lease.stop is not None and not (current and current.cancelling()):
                raise lease.stop from None
            raise
        except TimeoutError as exc:
            raise errors.JobError(f"timed out after {timeout_seconds} s") from exc
        finally:
            if self.running.get(lease.job_id) is running:
                del self.running[lease.job_id]
            for task in (beat, watch):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    async def _deadline(self, running: Running) -> None:
        """At the run's deadline, stop the attempt (the engine then writes the end)."""
        await asyncio.sleep(max(0.0, (running.lease.deadline or 0.0) - time.time()))
        self._stop(running, errors.DeadlinePassed(), how="deadline")

    async def _heartbeat(self, running: Running, context: LambdaContext | None) -> None:
        """Extend the lease row and the message's visibility together, until the job ends."""
        s, lease, job_task = self.settings, running.lease, running.task
        interval = s.visibility_timeout_seconds / s.heartbeats_per_lease
        while not job_task.done():
            await asyncio.sleep(min(interval, max(0.0, time_to_hand_back(lease, context, s))))
            if job_task.done():
                return
            stop = await self._beat(lease, context)
            if stop is not None:
                self._stop(running, stop, how="heartbeat")
                return

    async def _beat(
        self, lease: Lease, context: LambdaContext | None
    ) -> errors.TaskleaseError | None:
        """One heartbeat; what stops the job, if something does."""
        s = self.settings
        if time_to_hand_back(lease, context, s) <= 0:
            return errors.HandBack()
        try:
            beat = await store.leases.heartbeat(
                self.db, lease.job_id, lease.token, lease_seconds=s.visibility_timeout_seconds
            )
        except errors.StoreError as exc:
            # Keep going: the lease is still ours until it expires; the next beat retries.
            log.warning("heartbeat could not reach the database: %s", exc, extra=lease.fields)
            return None
        if beat is None:
            return errors.LeaseLost()
        if beat.cancel_requested:
            return errors.Cancelled()
        try:
            await self.queue.change_visibility(lease.receipt_handle, s.visibility_timeout_seconds)
        except errors.QueueError as exc:
            log.warning("heartbeat could not extend visibility: %s", exc, extra=lease.fields)
        return None
