"""The worker engine: one SQS batch in, ``{"batchItemFailures": [...]}`` out.

Every message is a wake-up call; the job row decides. For each record: parse the
claim check, claim the job with a fresh fencing token (one statement), run the
kind's code with a heartbeat that extends the message's visibility and the row's
lease together, then write the outcome fenced by the token. A record is reported
as a failure (left on the queue) when its message must come back: a retry with
backoff, a lease handed back, a duplicate of a live lease, or a lost lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from app import aws_limits as limits
from app import batching, crashpoints, errors, kinds, store, transport
from app.config import Settings
from app.states import JobState
from app.store import Database
from app.store.records import Job
from app.transport import Transport, codec
from app.worker import backoff
from app.worker.context import LeasedContext

log = logging.getLogger(__name__)

# Visibility for a message whose lease is handed back: come back soon, not at once.
HANDBACK_VISIBILITY_SECONDS = 2
# Rows one batched claim, start or completion statement carries: a batch of records
# (10 at most) and what concurrent batches add while a statement is under way.
BATCH_STATEMENT_ROWS = 50


class LambdaContext(Protocol):
    def get_remaining_time_in_millis(self) -> int: ...


@dataclass
class Lease:
    """The live lease of one record's job, and why the heartbeat stopped the job, if it did."""

    job_id: uuid.UUID
    token: uuid.UUID
    receipt_handle: str
    received_at: float  # epoch seconds: SQS caps this receive's visibility at 12 h from here
    generation: int  # the job's redrive count, carried by its dead letter
    stop: errors.TaskleaseError | None = None
    beats: int = 0
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Claim:
    job_id: uuid.UUID
    token: uuid.UUID  # the fencing token this delivery's lease will carry
    generation: int | None  # a moved dead letter's generation, when this is a redrive


class Engine:
    """Built once per process (outside the Lambda handler) and reused across invocations."""

    def __init__(self, settings: Settings, db: Database, queue: Transport) -> None:
        self.settings = settings
        self.db = db
        self.queue = queue
        self.owner = settings.worker_id
        # Each kind's dependencies, built by the kind's own factory; closed with the engine.
        self.deps = kinds.Deps(settings)
        # The records of a batch (and of concurrent batches) claim, start and succeed
        # together: one statement each instead of one per record.
        self._claims: batching.Batcher[Claim, Job | None] = batching.Batcher(
            self._claim_many, max_size=BATCH_STATEMENT_ROWS
        )
        self._starts: batching.Batcher[
            tuple[uuid.UUID, uuid.UUID], list[tuple[str, Any]] | None
        ] = batching.Batcher(self._start_many, max_size=BATCH_STATEMENT_ROWS)
        self._successes: batching.Batcher[tuple[uuid.UUID, uuid.UUID, Any], bool] = (
            batching.Batcher(self._succeed_many, max_size=BATCH_STATEMENT_ROWS)
        )

    @classmethod
    async def start(cls, settings: Settings) -> Engine:
        settings.need("database_url", "queue_url", "dlq_url")
        kinds.load(settings)  # a TASKLEASE_KINDS module that does not import stops start-up
        db = Database(
            settings.database, min_size=settings.pool_min_size, max_size=settings.pool_max_size
        )
        await db.open()
        queue = transport.create(settings)
        await queue.open()
        engine = cls(settings, db, queue)
        await engine.deps.open(kinds.REGISTRY.values())
        return engine

    async def close(self) -> None:
        await self.deps.aclose()
        await self.queue.close()
        await self.db.close()

    # --- the batch -------------------------------------------------------------

    async def handle(
        self, event: Mapping[str, Any], context: LambdaContext | None
    ) -> dict[str, Any]:
        records = list(event.get("Records") or [])
        outcomes = await asyncio.gather(
            *(self._guarded(r, context) for r in records), return_exceptions=False
        )
        failures = [
            {"itemIdentifier": r["messageId"]}
            for r, ok in zip(records, outcomes, strict=True)
            if not ok
        ]
        return {"batchItemFailures": failures}

    async def _guarded(self, record: Mapping[str, Any], context: LambdaContext | None) -> bool:
        """True: delete the message. False: leave it; it comes back after its visibility."""
        try:
            return await self.process(record, context)
        except (errors.StoreError, errors.QueueError) as exc:
            # The database or the queue is down: leave the message; it comes back.
            log.error("record left on the queue: %s", exc, extra={"state": "infrastructure"})
            return False
        except Exception:
            log.exception("record left on the queue: unexpected error")
            return False

    # --- one record ------------------------------------------------------------

    async def process(self, record: Mapping[str, Any], context: LambdaContext | None) -> bool:
        body = str(record.get("body", ""))
        try:
            job_id = codec.parse_body(body)
        except errors.BadRequest as exc:
            log.warning("message is not a tasklease job: %s; sent to the DLQ", exc)
            await self.queue.send_raw_dead_letter(body, f"not a tasklease message: {exc}")
            return True

        token = uuid.uuid4()
        job = await self._claims.submit(Claim(job_id, token, codec.redrive_generation(record)))
        if job is None:
            return await self._not_claimed(job_id, record, body)
        fields = {
            "job_id": job_id,
            "kind": job.kind,
            "attempt": job.attempt,
            "lease_owner": self.owner,
        }
        log.info("claimed", extra={**fields, "state": JobState.LEASED})
        crashpoints.hit(crashpoints.Point.AFTER_CLAIM, **fields)
        lease = Lease(
            job_id=job_id,
            token=token,
            receipt_handle=str(record.get("receiptHandle", "")),
            received_at=time.time(),
            generation=job.redrives,
            fields=fields,
        )

        if job.attempt > job.max_attempts:
            # Every earlier attempt died without finishing (a crash, a kill, a timeout).
            reason = f"worker never finished: attempt budget of {job.max_attempts} used up" + (
                f"; last error: {job.last_error}" if job.last_error else ""
            )
            return await self._dead_letter(lease, JobState.LEASED, reason)
        try:
            kind = kinds.get(job.kind)
            payload = kind.parse(job.payload)
        except errors.BadRequest as exc:
            return await self._dead_letter(lease, JobState.LEASED, str(exc))

        recorded = await self._starts.submit((job_id, token))
        if recorded is None:
            log.warning("lease lost before start", extra=fields)
            return False
        ctx = LeasedContext(
            job_id=job_id,
            kind=job.kind,
            attempt=job.attempt,
            deps=await self.deps.get(kind),
            lease_token=token,
            lease_owner=self.owner,
            db=self.db,
            recorded={k: v for k, v in recorded},
        )
        log.info("running", extra={**fields, "state": JobState.RUNNING})
        try:
            result = await self._run_leased(lease, kind, ctx, payload, job.timeout_seconds, context)
        except errors.LeaseLost:
            log.warning("lease lost: stopping, writing nothing", extra=fields)
            return False
        except errors.HandBack:
            return await self._hand_back(lease)
        except errors.Cancelled:
            await self._finish(lease, JobState.CANCELLED, detail="cancelled while running")
            return True
        except errors.PermanentError as exc:
            return await self._dead_letter(lease, JobState.RUNNING, f"permanent: {exc}")
        except (errors.StoreError, errors.QueueError):
            raise
        except Exception as exc:
            return await self._failed(lease, job, exc)

        crashpoints.hit(crashpoints.Point.BEFORE_COMPLETION, **fields)
        if not await self._successes.submit((job_id, token, result)):
            log.warning("completion refused: lease lost", extra=fields)
            return False
        log.info("succeeded", extra={**fields, "state": JobState.SUCCEEDED})
        return True

    async def _not_claimed(self, job_id: uuid.UUID, record: Mapping[str, Any], body: str) -> bool:
        job = await store.jobs.get(self.db, job_id)
        if job is None:
            # Not a job of this deployment (another one's queue, or a hand-made message).
            log.warning("message names an unknown job; sent to the DLQ", extra={"job_id": job_id})
            await self.queue.send_raw_dead_letter(
                body, f"unknown job id {job_id}: this deployment's database has no such job"
            )
            return True
        state = job.state
        fields = {"job_id": job_id, "kind": job.kind, "state": state}
        if state in (JobState.SUCCEEDED, JobState.CANCELLED, JobState.DEAD_LETTERED):
            # A late duplicate, or the source message of a dead-lettering cut short.
            log.info("late duplicate deleted", extra=fields)
            return True
        if job.cancel_requested:
            await store.jobs.cancel_waiting(self.db, job_id, detail="cancelled before it ran")
            log.info("cancelled before it ran", extra=fields)
            return True
        if state in (JobState.LEASED, JobState.RUNNING) and job.lease_expires_at is not None:
            # A live lease held by another worker: a duplicate delivery. Keep this copy
            # hidden until that lease would expire, so it is the backup if the holder dies.
            remaining = job.lease_expires_at.timestamp() - time.time()
            handle = str(record.get("receiptHandle", ""))
            with contextlib.suppress(errors.QueueError):
                await self.queue.change_visibility(handle, max(1.0, remaining + 1))
            log.info("duplicate delivery of a leased job left alone", extra=fields)
            return False
        log.warning("job not claimable; message left", extra=fields)
        return False

    # --- running under a lease -------------------------------------------------

    async def _run_leased(
        self,
        lease: Lease,
        kind: kinds.Kind[Any, Any, Any],
        ctx: LeasedContext,
        payload: Any,
        timeout_seconds: int,
        context: LambdaContext | None,
    ) -> Any:
        async def execute() -> Any:
            async with asyncio.timeout(timeout_seconds):
                return await kind.execute(ctx, payload)

        job_task = asyncio.create_task(execute())
        beat = asyncio.create_task(self._heartbeat(lease, job_task, context))
        try:
            return await job_task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if lease.stop is not None and not (current and current.cancelling()):
                raise lease.stop from None
            raise
        except TimeoutError as exc:
            raise errors.JobError(f"timed out after {timeout_seconds} s") from exc
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

    async def _heartbeat(
        self, lease: Lease, job_task: asyncio.Task[Any], context: LambdaContext | None
    ) -> None:
        """Extend the lease row and the message's visibility together, until the job ends."""
        s = self.settings
        interval = s.visibility_timeout_seconds / s.heartbeats_per_lease
        while not job_task.done():
            wait = interval
            stop_in = self._time_to_hand_back(lease, context)
            if stop_in is not None:
                wait = min(wait, max(0.0, stop_in))
            await asyncio.sleep(wait)
            if job_task.done():
                return
            stop_in = self._time_to_hand_back(lease, context)
            if stop_in is not None and stop_in <= 0:
                lease.stop = errors.HandBack()
                job_task.cancel()
                return
            try:
                beat = await store.leases.heartbeat(
                    self.db, lease.job_id, lease.token, lease_seconds=s.visibility_timeout_seconds
                )
            except errors.StoreError as exc:
                # Keep going: the lease is still ours until it expires; the next beat retries.
                log.warning("heartbeat could not reach the database: %s", exc, extra=lease.fields)
                continue
            if beat is None:
                lease.stop = errors.LeaseLost()
                job_task.cancel()
                return
            if beat.cancel_requested:
                lease.stop = errors.Cancelled()
                job_task.cancel()
                return
            try:
                await self.queue.change_visibility(
                    lease.receipt_handle, s.visibility_timeout_seconds
                )
            except errors.QueueError as exc:
                log.warning("heartbeat could not extend visibility: %s", exc, extra=lease.fields)
            lease.beats += 1

    def _time_to_hand_back(self, lease: Lease, context: LambdaContext | None) -> float | None:
        """Seconds until the invocation (or SQS's 12-hour visibility cap) runs too short."""
        margin = self.settings.handback_margin_seconds
        left: list[float] = []
        if context is not None:
            left.append(context.get_remaining_time_in_millis() / 1000 - margin)
        cap_left = lease.received_at + limits.MAX_VISIBILITY_SECONDS - time.time()
        left.append(cap_left - self.settings.visibility_timeout_seconds - margin)
        return min(left) if left else None

    # --- the batched statements ------------------------------------------------

    async def _claim_many(self, claims: list[Claim]) -> list[Job | None]:
        by_token = await store.leases.claim_batch(
            self.db,
            job_ids=[c.job_id for c in claims],
            tokens=[c.token for c in claims],
            generations=[c.generation for c in claims],
            owner=self.owner,
            lease_seconds=self.settings.visibility_timeout_seconds,
        )
        return [by_token.get(c.token) for c in claims]

    async def _start_many(
        self, items: list[tuple[uuid.UUID, uuid.UUID]]
    ) -> list[list[tuple[str, Any]] | None]:
        by_token = await store.leases.start_batch(self.db, items)
        return [by_token.get(token) for _, token in items]

    async def _succeed_many(self, items: list[tuple[uuid.UUID, uuid.UUID, Any]]) -> list[bool]:
        done = await store.leases.succeed_batch(self.db, items)
        return [token in done for _, token, _ in items]

    # --- outcomes --------------------------------------------------------------

    async def _finish(
        self,
        lease: Lease,
        to_state: JobState,
        *,
        from_state: JobState = JobState.RUNNING,
        result: Any = None,
        error: str | None = None,
        delay: float = 0,
        refund: int = 0,
        dead_lettered_by: str | None = None,
        detail: str | None = None,
    ) -> bool:
        return await store.leases.finish(
            self.db,
            lease.job_id,
            lease.token,
            to_state=to_state,
            from_state=from_state,
            result=result,
            error=error,
            delay=delay,
            refund=refund,
            dead_lettered_by=dead_lettered_by,
            detail=detail,
        )

    async def _failed(self, lease: Lease, job: Job, exc: Exception) -> bool:
        message = f"{type(exc).__name__}: {exc}"[:2000]
        if job.attempt >= job.max_attempts:
            return await self._dead_letter(
                lease, JobState.RUNNING, f"attempts used up ({job.attempt}): {message}"
            )
        s = self.settings
        delay = getattr(exc, "delay", None)
        if delay is None:
            delay = backoff.full_jitter(
                job.attempt, base=s.backoff_base_seconds, cap=s.backoff_cap_seconds
            )
        delay = min(float(delay), limits.MAX_VISIBILITY_SECONDS)
        if not await self._finish(
            lease, JobState.RETRYING, error=message, delay=delay, detail=message
        ):
            return False
        # The message comes back after the backoff; until then nobody sees it.
        with contextlib.suppress(errors.QueueError):
            await self.queue.change_visibility(lease.receipt_handle, delay)
        log.info(
            "retrying: %s",
            message,
            extra={**lease.fields, "state": JobState.RETRYING, "delay": round(delay, 3)},
        )
        return False

    async def _dead_letter(self, lease: Lease, from_state: JobState, reason: str) -> bool:
        """Send a new, marked message to the DLQ, mark the row, then delete the source."""
        await self.queue.send_dead_letter(lease.job_id, reason, generation=lease.generation)
        crashpoints.hit(crashpoints.Point.WHILE_DEAD_LETTERING, **lease.fields)
        changed = await self._finish(
            lease,
            JobState.DEAD_LETTERED,
            from_state=from_state,
            error=reason[:2000],
            dead_lettered_by="engine",
            detail=reason[:2000],
        )
        if not changed:
            log.warning("dead-lettering refused: lease lost", extra=lease.fields)
            return False
        log.warning(
            "dead-lettered: %s", reason, extra={**lease.fields, "state": JobState.DEAD_LETTERED}
        )
        return True

    async def _hand_back(self, lease: Lease) -> bool:
        """Out of time: give the lease back without using an attempt; effects resume it."""
        if await self._finish(
            lease,
            JobState.QUEUED,
            refund=1,
            detail="lease handed back: invocation running out of time",
        ):
            with contextlib.suppress(errors.QueueError):
                await self.queue.change_visibility(
                    lease.receipt_handle, HANDBACK_VISIBILITY_SECONDS
                )
            log.info("lease handed back", extra={**lease.fields, "state": JobState.QUEUED})
        return False
