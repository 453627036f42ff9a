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
from typing import Any

from app import batching, crashpoints, errors, kinds, metrics, store, tracing, transport
from app.services import outbox, parking
from app.settings.config import Settings
from app.states import JobState
from app.store import Database
from app.store.records import Job
from app.transport import Transport, codec, secrets
from app.worker import (
    cancels,
    claimed,
    counting,
    deadlines,
    fairness,
    leases,
    outcomes,
    traces,
    unclaimed,
)
from app.worker.context import LeasedContext
from app.worker.leases import Claim, LambdaContext, Lease

log = logging.getLogger(__name__)

# Rows one batched claim, start or completion statement carries: a batch of records
# (10 at most) and what concurrent batches add while a statement is under way.
BATCH_STATEMENT_ROWS = 50


class Engine:
    """Built once per process (outside the Lambda handler) and reused across invocations."""

    def __init__(self, settings: Settings, db: Database, queue: Transport) -> None:
        self.settings = settings
        self.db = db
        self.queue = queue
        self.owner = settings.worker_id
        # Each kind's dependencies, built by the kind's own factory; closed with the engine.
        self.deps = kinds.Deps(settings)
        self.keeper = leases.Keeper(settings, db, queue)
        # One LISTEN connection: a cancel reaches a running job at once (worker/cancels.py).
        self.cancels = cancels.Listener(db, self.keeper)
        # Leases that ended with parked jobs of their tenant behind them (a success, a
        # failure's end, a cancel, a wait): each released as its record's handling ends.
        self._parked_behind: set[uuid.UUID] = set()
        self.outcomes = outcomes.Outcomes(settings, db, queue, self._parked_behind)
        self.claim_exports = traces.ClaimExports()  # the lease spans, exported at the claim
        # The records of a batch (and of concurrent batches) claim, start and succeed
        # together: one statement each instead of one per record.
        self.redrive_budget = store.leases.RedriveBudget.of(settings)
        self._claims: batching.Batcher[Claim, store.leases.Verdict | None] = batching.Batcher(
            self._claim_many, max_size=BATCH_STATEMENT_ROWS
        )
        self._starts: batching.Batcher[
            tuple[uuid.UUID, uuid.UUID, str], store.leases.Started | None
        ] = batching.Batcher(self._start_many, max_size=BATCH_STATEMENT_ROWS)
        self._successes: batching.Batcher[tuple[uuid.UUID, uuid.UUID, Any], bool] = (
            batching.Batcher(self._succeed_many, max_size=BATCH_STATEMENT_ROWS)
        )
        self._releases: batching.Batcher[str, None] = batching.Batcher(
            self._release_many, max_size=BATCH_STATEMENT_ROWS
        )

    @classmethod
    async def start(cls, settings: Settings) -> Engine:
        settings.need("database_url", "queue_url", "dlq_url")
        tracing.configure("tasklease-worker")  # a bad OTEL_* setting stops start-up
        kinds.load(settings)  # a TASKLEASE_KINDS module that does not import stops start-up
        db = Database(
            secrets.database_url(settings),
            min_size=settings.pool_min_size,
            max_size=settings.pool_max_size,
        )
        await db.open()
        queue = transport.create(settings)
        await queue.open()
        engine = cls(settings, db, queue)
        # Every version served side by side: a pinned old version's deps fail start-up too.
        await engine.deps.open(kinds.REGISTRY.every_version())
        return engine

    async def close(self) -> None:
        await self.cancels.stop()
        await self.deps.aclose()
        await self.queue.close()
        await self.db.close()

    # --- the batch -------------------------------------------------------------

    async def handle(
        self, event: Mapping[str, Any], context: LambdaContext | None
    ) -> dict[str, Any]:
        records = list(event.get("Records") or [])
        self.queue.remember(records)  # which queue each came from (priorities)
        async with self.cancels.invocation():
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
            await self.queue.send_raw_dead_letter(
                body, f"not a tasklease message: {exc}", attributes=codec.message_attributes(record)
            )
            return True

        token = uuid.uuid4()
        verdict = await self._claims.submit(Claim(job_id, token, codec.redrive_generation(record)))
        answered = time.time()  # after the claim: the database's clock was read before this
        if verdict is None:
            return await self._not_claimed(job_id, record, body)
        job = verdict.job
        if verdict.deferred:
            return await fairness.defer(self.settings, self.queue, record, verdict)
        if verdict.refused:
            # A redrive past the job's redrive budget: nothing runs, the message goes.
            fields = {"job_id": job_id, "kind": job.kind, "redrives": job.redrives}
            log.warning(
                "redrive refused: %s; message deleted unrun",
                self.redrive_budget.refusal(),
                extra={**fields, "state": JobState.DEAD_LETTERED},
            )
            crashpoints.hit(crashpoints.Point.AFTER_REDRIVE_REFUSED, **fields)
            return True
        try:
            with traces.attempt(record, job, self.owner, verdict.from_state):
                await self.claim_exports.export()
                return await self._claimed(
                    record, job, token, answered, context, verdict.from_state
                )
        finally:
            # The lease ended (or moved on): the tenant's window may have room for one of
            # its parked jobs (as the claim saw it, or the completion).
            if verdict.has_parked or job.id in self._parked_behind:
                self._parked_behind.discard(job.id)
                await fairness.release(self._releases, job.tenant)

    async def _claimed(
        self,
        record: Mapping[str, Any],
        job: Job,
        token: uuid.UUID,
        answered: float,
        context: LambdaContext | None,
        from_state: str | None,
    ) -> bool:
        """The job is claimed under ``token`` (from ``from_state``): end it unrun when its
        deadline has passed, dead-letter it when its budget is spent or its kind or payload
        is bad (app/worker/claimed.py), else run it."""
        lease = claimed.lease(record, job, token, answered, self.owner, from_state)
        if deadlines.passed_at_claim(job):  # a delivery past the deadline ends it unrun
            done = await deadlines.end(
                self.db, lease, job, JobState.LEASED, None, self._parked_behind
            )
            if done:
                await self.wake_parent(job)
            return done
        ready = await claimed.runnable(self.outcomes, lease, job, record, context)
        if isinstance(ready, bool):  # it ended at the claim
            return ready
        kind, payload = ready
        return await self._run(lease, job, kind, payload, context)

    async def _run(
        self,
        lease: Lease,
        job: Job,
        kind: kinds.Kind[Any, Any, Any],
        payload: Any,
        context: LambdaContext | None,
    ) -> bool:
        """Start the claimed job, run its code under the lease, and write how it ended."""
        job_id, token, fields = lease.job_id, lease.token, lease.fields
        started_job = await self._starts.submit((job_id, token, kind.version))
        if started_job is None:
            log.warning("lease lost before start", extra=fields)
            traces.outcome("lease_lost")
            return False
        ctx = LeasedContext(
            job_id=job_id,
            kind=job.kind,
            attempt=job.attempt,
            deps=await self.deps.get(kind),
            lease_token=token,
            lease_owner=self.owner,
            db=self.db,
            recorded={key: result for key, result, _ in started_job.steps},
            shapes={key: shape for key, _, shape in started_job.steps},
            version=kind.version,
            started_version=started_job.kind_version,
            settings=self.settings,
            send=self._send_outbox,
            clock_offset=lease.clock_offset,
        )
        log.debug("running", extra={**fields, "state": JobState.RUNNING})
        self.cancels.running(job_id)
        started = time.monotonic()
        try:
            result = await self.keeper.run(
                lease, lambda: _execute(kind, ctx, payload), job.timeout_seconds, context
            )
        except errors.DeadlinePassed:
            if done := await deadlines.end(
                self.db, lease, job, JobState.RUNNING, started, self._parked_behind
            ):
                await self.wake_parent(job)
            return done
        except errors.LeaseLost:
            log.warning("lease lost: stopping, writing nothing", extra=fields)
            traces.outcome("lease_lost")
            return False
        except errors.HandBack:
            return await self.outcomes.hand_back(lease)
        except errors.BudgetWait as waiting:
            return await self.outcomes.budget_wait(lease, waiting)
        except errors.Throttled as exc:
            done = await self.outcomes.throttled(lease, exc)
            if done:  # past TASKLEASE_MAX_THROTTLES: dead-lettered
                counting.ended(job, "dead_lettered", done, started)
                await self.wake_parent(job)
            else:
                counting.ran(job, "throttled", started, True)
            return done
        except errors.Suspend as suspended:
            done, cancelled = await self.outcomes.suspend(lease, suspended.wait)
            if cancelled:  # a cancel found as it suspended: its parent may be waiting on it
                traces.outcome("cancelled")
                await self.wake_parent(job)
            return counting.ran(job, "cancelled" if cancelled else "waiting", started, done)
        except errors.Cancelled:
            traces.outcome("cancelled")
            done = await self.outcomes.cancelled(lease)
            counting.ended(job, "cancelled", done, started)
            await self.wake_parent(job)
            return True
        except errors.PermanentError as exc:
            traces.outcome("dead_lettered", exc)
            done = await self.outcomes.dead_letter(lease, JobState.RUNNING, f"permanent: {exc}")
            counting.ended(job, "dead_lettered", done, started)
            await self.wake_parent(job)
            return done
        except (errors.StoreError, errors.QueueError):
            raise
        except Exception as exc:
            traces.outcome("failed", exc)  # outcomes.failed says retrying or dead_lettered
            done = await self.outcomes.failed(lease, job, exc)
            # True only when the last attempt's failure dead-lettered the job.
            if done:
                counting.ended(job, "dead_lettered", done, started)
            else:
                counting.ran(job, "retrying", started, True)
            await self.wake_parent(job)
            return done
        finally:
            metrics.count(metrics.EFFECTS, len(ctx.ran), kind=job.kind, how="run")
            metrics.count(metrics.EFFECTS, len(ctx.replayed), kind=job.kind, how="replayed")

        crashpoints.hit(crashpoints.Point.BEFORE_COMPLETION, **fields)
        if not await self._successes.submit((job_id, token, result)):
            log.warning("completion refused: lease lost", extra=fields)
            traces.outcome("lease_lost")
            return False
        traces.outcome("succeeded")
        log.info("succeeded", extra={**fields, "state": JobState.SUCCEEDED})
        counting.ended(job, "succeeded", True, started)
        await self.wake_parent(job)
        return True

    async def wake_parent(self, job: Job) -> None:
        """A child finished: its parent, if that woke it (in the finishing transaction, by
        the database's trigger), gets its message now rather than at the next relay."""
        if job.parent_id is None:
            return
        crashpoints.hit(crashpoints.Point.AFTER_CHILD_FINISHED, job_id=job.id, parent=job.parent_id)
        rows = await store.waits.unsent_of(self.db, job.parent_id)
        if rows:
            metrics.count(metrics.WAKEUPS, len(rows), path="child")
            tracing.job_event("job.wake children", job.parent_id, rows[0].trace_context)
            await self._send_outbox(rows)

    async def _send_outbox(self, rows: list[store.records.OutboxRow]) -> None:
        with contextlib.suppress(errors.QueueError):
            await outbox.send(self.db, self.queue, rows)

    async def _not_claimed(self, job_id: uuid.UUID, record: Mapping[str, Any], body: str) -> bool:
        return await unclaimed.handle(
            self.settings, self.db, self.queue, job_id, record, body, send=self._send_outbox
        )

    # --- the batched statements ------------------------------------------------

    async def _claim_many(self, claims: list[Claim]) -> list[store.leases.Verdict | None]:
        by_token = await store.leases.claim_batch(
            self.db,
            job_ids=[c.job_id for c in claims],
            tokens=[c.token for c in claims],
            generations=[c.generation for c in claims],
            owner=self.owner,
            lease_seconds=self.settings.visibility_timeout_seconds,
            redrive=self.redrive_budget,
            max_running=self.settings.max_running_per_tenant,
        )
        return [by_token.get(c.token) for c in claims]

    async def _start_many(
        self, items: list[tuple[uuid.UUID, uuid.UUID, str]]
    ) -> list[store.leases.Started | None]:
        by_token = await store.leases.start_batch(self.db, items)
        return [by_token.get(token) for _, token, _ in items]

    async def _release_many(self, tenants: list[str]) -> list[None]:
        await parking.release_parked(self.settings, self.db, self.queue, tenants)
        return [None] * len(tenants)

    async def _succeed_many(self, items: list[tuple[uuid.UUID, uuid.UUID, Any]]) -> list[bool]:
        done = await store.leases.succeed_batch(self.db, items)
        for job_id, token, _ in items:
            if done.get(token):
                self._parked_behind.add(job_id)
        return [token in done for _, token, _ in items]


async def _execute(kind: kinds.Kind[Any, Any, Any], ctx: LeasedContext, payload: Any) -> Any:
    """The kind's code, then its streamed output written: before the job's next
    transition, so a reader sees the output before the state that follows it."""
    try:
        result = await kind.execute(ctx, payload)
    except BaseException:
        await ctx.output.close(quiet=True)
        raise
    await ctx.output.close()
    return result
