"""How a leased job's attempt ends, each write fenced by the lease token: a retry after
a backoff, a dead letter, a hand-back, or a plain transition (cancelled). A zombie whose
lease moved on changes nothing: every write here reports whether it took."""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import Unpack

from app import crashpoints, errors, metrics, store
from app.kinds.waits import Wait
from app.services import outbox, wakeups
from app.settings import aws_limits
from app.settings.config import Settings
from app.states import JobState
from app.store.records import Job
from app.transport import Transport
from app.worker import backoff, traces
from app.worker.leases import Lease

log = logging.getLogger(__name__)

# Visibility for a message whose lease is handed back: come back soon, not at once.
HANDBACK_VISIBILITY_SECONDS = 2
# How much of an error or a reason the row keeps.
MAX_ERROR_CHARS = 2000


def retry_delay(exc: Exception, attempt: int, settings: Settings) -> float:
    """Seconds before the next attempt: what a ``Retry(delay=...)`` asked for, else the
    backoff (exponential, full jitter, capped); never past SQS's visibility cap."""
    if isinstance(exc, errors.Retry) and exc.delay is not None:
        delay = float(exc.delay)
    else:
        delay = backoff.full_jitter(
            attempt, base=settings.backoff_base_seconds, cap=settings.backoff_cap_seconds
        )
    return min(delay, aws_limits.MAX_VISIBILITY_SECONDS)


class Outcomes:
    def __init__(
        self,
        settings: Settings,
        db: store.Database,
        queue: Transport,
        parked_behind: set[uuid.UUID] | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.queue = queue
        # The jobs whose lease ended with parked jobs of their tenant behind them: the
        # engine releases one as the lease ends (a failure or a cancel frees a slot, or
        # its key, as a success does), not at the sweeper's next pass.
        self.parked_behind = parked_behind if parked_behind is not None else set()

    async def finish(
        self,
        lease: Lease,
        to_state: JobState,
        *,
        from_state: JobState = JobState.RUNNING,
        **change: Unpack[store.leases.Change],
    ) -> bool:
        """One fenced transition (store.leases.finish); whether it took."""
        done = await store.leases.finish(
            self.db, lease.job_id, lease.token, to_state=to_state, from_state=from_state, **change
        )
        if done is not None and done.has_parked:
            self.parked_behind.add(lease.job_id)
        return done is not None

    async def cancelled(self, lease: Lease) -> bool:
        """The job stopped for a cancel asked for while it ran: end it cancelled. When the
        fenced write is refused because the lease ran out and the sweeper marked the job
        stalled meanwhile, no claim will take it again (it is flagged) and no lost-message
        look re-sends it: cancel it as one no live lease holds. A job another writer
        ended already stays as it is. Whether this call ended it."""
        if await self.finish(lease, JobState.CANCELLED, detail="cancelled while running"):
            return True
        return await store.jobs.cancel_waiting(
            self.db, lease.job_id, detail="cancelled while running (its lease had run out)"
        )

    async def failed(self, lease: Lease, job: Job, exc: Exception) -> bool:
        """A transient failure: retry after a backoff, or dead-letter on the last attempt."""
        message = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
        if job.attempt >= job.max_attempts:
            return await self.dead_letter(
                lease, JobState.RUNNING, f"attempts used up ({job.attempt}): {message}"
            )
        delay = retry_delay(exc, job.attempt, self.settings)
        if not await self.finish(
            lease, JobState.RETRYING, error=message, delay=delay, detail=message
        ):
            return False
        metrics.count(metrics.RETRIES, kind=str(lease.fields.get("kind")))
        traces.outcome("retrying")
        # The message comes back after the backoff; until then nobody sees it.
        with contextlib.suppress(errors.QueueError):
            await self.queue.change_visibility(lease.receipt_handle, delay)
        log.info(
            "retrying: %s",
            message,
            extra={**lease.fields, "state": JobState.RETRYING, "delay": round(delay, 3)},
        )
        return False

    async def throttled(self, lease: Lease, exc: errors.Throttled) -> bool:
        """The provider throttled the call: retry after its delay (capped; jittered when
        it gave none) without using an attempt, or dead-letter the job past
        TASKLEASE_MAX_THROTTLES. True when it was dead-lettered."""
        s = self.settings
        cap = s.max_throttles
        if exc.delay is None:
            delay = backoff.equal_jitter(s.throttle_delay_seconds)
        else:
            delay = min(max(exc.delay, 0.0), s.max_throttle_delay_seconds)
        message = f"throttled by {exc.by()}: {exc}"[:MAX_ERROR_CHARS]
        done = await store.model_limits.throttle(
            self.db,
            lease.job_id,
            lease.token,
            delay=delay,
            cap=cap,
            error=message,
            detail=f"throttled by {exc.by()}, retry in {delay:.1f} s",
        )
        if not done.held:
            log.warning("throttle refused: lease lost", extra=lease.fields)
            return False
        metrics.count(metrics.THROTTLES, provider=exc.provider, model=exc.model)
        if not done.throttled:
            return await self.dead_letter(
                lease,
                JobState.RUNNING,
                f"throttled too often: {done.throttles} throttles, the cap "
                f"(TASKLEASE_MAX_THROTTLES={cap}); last by {exc.by()}: {exc}",
            )
        traces.outcome("throttled")
        crashpoints.hit(crashpoints.Point.AFTER_THROTTLE, **lease.fields)
        with contextlib.suppress(errors.QueueError):
            await self.queue.change_visibility(lease.receipt_handle, delay)
        log.info(
            "throttled by %s: retry in %.1f s, no attempt used",
            exc.by(),
            delay,
            extra={**lease.fields, "state": JobState.RETRYING, "delay": round(delay, 3)},
        )
        return False

    async def budget_wait(self, lease: Lease, exc: errors.BudgetWait) -> bool:
        """Over a model budget: the lease handed back with the budget's delay, no attempt
        used (a hand-back, not a failure)."""
        delay = min(max(exc.delay, 1.0), aws_limits.MAX_VISIBILITY_SECONDS)
        if await self.finish(
            lease, JobState.QUEUED, refund=1, detail=f"waiting for a budget: {exc}"
        ):
            with contextlib.suppress(errors.QueueError):
                await self.queue.change_visibility(lease.receipt_handle, delay)
            log.info(
                "waiting for a budget: %s", exc, extra={**lease.fields, "state": JobState.QUEUED}
            )
            traces.outcome("handed_back")
        return False

    async def dead_letter(self, lease: Lease, from_state: JobState, reason: str) -> bool:
        """Send a new, marked message to the DLQ, mark the row, then delete the source."""
        traces.outcome("dead_lettered")
        await self.queue.send_dead_letter(
            lease.to, reason, generation=lease.generation, traceparent=lease.traceparent
        )
        crashpoints.hit(crashpoints.Point.WHILE_DEAD_LETTERING, **lease.fields)
        changed = await self.finish(
            lease,
            JobState.DEAD_LETTERED,
            from_state=from_state,
            error=reason[:MAX_ERROR_CHARS],
            dead_lettered_by="engine",
            detail=reason[:MAX_ERROR_CHARS],
        )
        if not changed:
            log.warning("dead-lettering refused: lease lost", extra=lease.fields)
            return False
        metrics.count(metrics.DEAD_LETTERS, by="engine")
        log.warning(
            "dead-lettered: %s", reason, extra={**lease.fields, "state": JobState.DEAD_LETTERED}
        )
        return True

    async def hand_back(
        self,
        lease: Lease,
        *,
        from_state: JobState = JobState.RUNNING,
        detail: str = "lease handed back: invocation running out of time",
        visibility: int = HANDBACK_VISIBILITY_SECONDS,
    ) -> bool:
        """Give the lease back without using an attempt (out of time, by default; effects
        resume it); its message comes back after ``visibility`` seconds."""
        if await self.finish(
            lease, JobState.QUEUED, from_state=from_state, refund=1, detail=detail
        ):
            with contextlib.suppress(errors.QueueError):
                await self.queue.change_visibility(lease.receipt_handle, visibility)
            log.info("lease handed back", extra={**lease.fields, "state": JobState.QUEUED})
            traces.outcome("handed_back")
        return False

    async def suspend(self, lease: Lease, wait: Wait) -> tuple[bool, bool]:
        """The job waits: running -> waiting (the attempt given back), then the wake-up
        sent when the timer or deadline is within SQS's delay cap, or the job's message
        sent at once when its condition was met meanwhile. The message is deleted.
        (whether it took, whether it found a cancel asked for and so cancelled the job)."""
        cap = self.settings.max_message_delay_seconds
        detail = f"waiting for {wait.describe()}"
        done = await store.waits.suspend(
            self.db,
            lease.job_id,
            lease.token,
            wait_kind=wait.kind,
            wait_key=wait.key,
            wake_at=wait.wake_at,
            rule=wait.rule.to_json() if wait.rule is not None else None,
            cap=cap,
            detail=detail,
        )
        if not done.changed:
            log.warning("suspend refused: lease lost", extra=lease.fields)
            return False, False
        if done.has_parked:
            self.parked_behind.add(lease.job_id)
        if done.cancelled:  # counted by the store (app/store/endings.py)
            log.info("cancelled while running", extra={**lease.fields, "state": JobState.CANCELLED})
            return True, True
        log.info(detail, extra={**lease.fields, "state": JobState.WAITING})
        traces.waiting(wait)
        crashpoints.hit(crashpoints.Point.AFTER_SUSPEND, **lease.fields)
        if done.woken:
            with contextlib.suppress(errors.QueueError):
                await outbox.send(
                    self.db, self.queue, await store.waits.unsent_of(self.db, lease.job_id)
                )
        elif done.send_now:
            with contextlib.suppress(errors.QueueError):
                await wakeups.send(
                    self.queue,
                    [(lease.to, done.delay)],
                    path="suspend",
                    traces={str(lease.job_id): lease.traceparent},
                )
        return True, False
