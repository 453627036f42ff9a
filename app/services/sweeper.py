"""The sweeper: schedules' due slots, stalled leases, unsent outbox rows, lost messages,
the DLQ's reconciliation.

Runs on a schedule (EventBridge -> handlers/sweeper.py on AWS, ``tasklease sweep``
locally). Every step is idempotent and safe to run from several places at once
(SKIP LOCKED); a duplicate message it sends is dropped by the claim.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass, field

from app import errors, metrics, store
from app.services import alerts, bulk, deadlines, outbox, parking, retention, schedules, wakeups
from app.settings import aws_limits
from app.settings.config import Settings
from app.states import JobState
from app.store.records import Job
from app.transport import Message, Transport, codec

log = logging.getLogger(__name__)

STALL_GRACE_SECONDS = 1.0
SWEEP_LIMIT = 500


@dataclass
class SweepReport:
    scheduled: int = 0  # jobs made for schedules' due slots
    stalled: int = 0
    outbox_sent: int = 0
    resent: int = 0
    dead_lettered: int = 0
    stale_dead_letters: int = 0
    wakeups: int = 0  # wake-up messages sent for waiting jobs (due within the cap, or lost)
    woken: int = 0  # waiting jobs answered but not woken: woken now
    orphans_cancelled: int = 0  # children of a cancelled parent the cancel missed
    released: int = 0  # parked jobs released (their tenant's window had room)
    pruned: int = 0  # finished jobs past their retention deleted (with their rows)
    deadlines: int = 0  # jobs no worker holds ended at their deadline (dead-lettered)
    bulk_resumed: int = 0  # bulk operations whose runner died, resumed from their cursor
    alerts: int = 0  # alerts delivered to every destination

    def __str__(self) -> str:
        return (
            f"scheduled={self.scheduled} stalled={self.stalled} "
            f"outbox_sent={self.outbox_sent} resent={self.resent} "
            f"dead_lettered={self.dead_lettered} stale_dead_letters={self.stale_dead_letters} "
            f"wakeups={self.wakeups} woken={self.woken} orphans_cancelled={self.orphans_cancelled} "
            f"released={self.released} pruned={self.pruned} deadlines={self.deadlines} "
            f"bulk_resumed={self.bulk_resumed} "
            f"alerts={self.alerts}"
        )


async def relay_outbox(settings: Settings, db: store.Database, queue: Transport) -> int:
    """Send outbox rows whose fast-path send did not happen, in batches of 10, through
    the API's send path: a failed send counts an attempt and keeps its error on the row.
    Stops at the first batch with a failure (the queue is likely down: the next sweep
    tries again)."""
    total = 0
    while True:
        async with db.transaction() as conn:
            rows = await store.outbox.take_unsent_txn(
                conn, grace=settings.outbox_grace_seconds, limit=aws_limits.MAX_BATCH
            )
            if not rows:
                return total
            sent = await outbox.send(db, queue, rows, txn=conn)
            total += len(sent)
            if len(sent) < len(rows):
                log.warning("outbox relay: send failed", extra={"count": len(rows) - len(sent)})
                return total


async def sweep_once(settings: Settings, db: store.Database, queue: Transport) -> SweepReport:
    report = SweepReport()
    # First, so that a due slot's job is sent at once; one the send misses is relayed below.
    report.scheduled = await schedules.materialise_due(settings, db, queue, limit=SWEEP_LIMIT)
    stalled = await store.leases.mark_stalled(db, grace=STALL_GRACE_SECONDS, limit=SWEEP_LIMIT)
    report.stalled = len(stalled)
    for job_id in stalled:
        log.warning("lease expired with no heartbeat", extra={"job_id": job_id, "state": "stalled"})
    report.orphans_cancelled = len(await store.waits.cancel_orphans(db, limit=SWEEP_LIMIT))
    # After the stalled leases are marked: a job whose worker died is ended in this pass.
    report.deadlines = await deadlines.sweep(db, queue, limit=SWEEP_LIMIT)
    report.woken = len(
        await store.waits.wake_answered(db, grace=settings.wake_grace_seconds, limit=SWEEP_LIMIT)
    )
    report.released = await parking.release_all(settings, db, queue)
    report.outbox_sent = await relay_outbox(settings, db, queue)
    report.wakeups = await wakeups.sweep(settings, db, queue, limit=SWEEP_LIMIT)
    lost = await store.leases.touch_lost(db, age=settings.lost_message_seconds, limit=SWEEP_LIMIT)
    if lost:
        failed = await queue.send_jobs(lost)
        report.resent = len(lost) - len(failed)
        log.info("re-sent messages for waiting jobs", extra={"count": report.resent})
    report.dead_lettered, report.stale_dead_letters = await reconcile_dlq(settings, db, queue)
    await store.model_limits.prune(db)  # provider budgets' past minutes and days
    if settings.prune_batches_per_sweep:
        try:
            pruned = await retention.prune(
                settings, db, max_batches=settings.prune_batches_per_sweep
            )
            report.pruned = pruned.jobs()
        except errors.StoreError as exc:  # the next pass prunes what this one could not
            log.warning("prune failed; the next sweep goes on: %s", exc)
    await store.gauges.fold(db)  # the counts by state: appended changes into the totals
    await store.charts.fold(db)  # the charts' appended rows into their buckets (0027)
    # The alerts of this pass's dead letters and stalls go out in this pass too.
    report.alerts = await alerts.sweep(settings, db)
    # Last, bounded in time (bulk.RESUME_SECONDS): a long bulk operation the sweeper runs
    # (always, under Lambda) never keeps the folds and alerts above from their turn, nor
    # runs the sweeper's function past its timeout (55 s).
    report.bulk_resumed = await bulk.resume(settings, db, queue)
    metrics.count(metrics.OUTBOX_RELAYED, report.outbox_sent)
    metrics.count(metrics.DEAD_LETTERS, report.dead_lettered, by="sweeper")
    metrics.count(metrics.SWEEPER_PASSES)
    return report


# A scan hides what it received this long at most: it makes each visible again as soon as
# it is done, so an operator, the console or a move task sees them again within seconds.
DLQ_SCAN_VISIBILITY_SECONDS = 30
# A scan looks at this many batches of 10 at most; the next one goes on from there.
DLQ_SCAN_BATCHES = 100
# A DLQ the database seems to account for is still looked into once per this many scan
# intervals (an hour by default), so a stale count never hides a message for long.
FULL_LOOK_EVERY = 12


@dataclass
class _Scan:
    """What one scan saw: each message once, and what it must make visible again."""

    seen: set[str] = field(default_factory=set)
    held: dict[str, str] = field(default_factory=dict)  # MessageId -> its newest handle
    explained: set[uuid.UUID] = field(default_factory=set)
    unaccounted: int = 0
    reconciled: int = 0
    deleted: int = 0


def _sent_before_last_redrive(message: Message, job: Job) -> bool:
    """A dead letter without our marker (SQS moved it itself) that was sent before the
    job's last redrive: the redrive (API, or a walk that sent the job anew) superseded it,
    so it must not dead-letter the job again."""
    sent = (message.get("Attributes") or {}).get("SentTimestamp")
    if not job.redriven_at or sent is None or not str(sent).isdigit():
        return False
    return dt.datetime.fromtimestamp(int(sent) / 1000, dt.UTC) < job.redriven_at[-1]


async def reconcile_dlq(
    settings: Settings, db: store.Database, queue: Transport
) -> tuple[int, int]:
    """Reconcile the DLQ from the database, looking into it only for what the database
    cannot tell. Each sweep asks the queue's depth (one request); only when the DLQ holds
    more messages than the database accounts for (one per dead-lettered job, plus what the
    last scan found unexplained), at most every TASKLEASE_DLQ_SCAN_INTERVAL_SECONDS across
    every sweeper, and never while a move task runs, does one sweeper receive them: jobs
    SQS moved there itself (no marker) become dead_lettered ("worker never finished");
    stale dead letters of finished or redriven jobs are deleted. Returns (reconciled,
    deleted)."""
    depth = sum((await queue.dead_letter_depth()).values())
    accounted = await store.sweeper_marks.dlq_accounted(
        db, depth=depth, retention=settings.dlq_retention_seconds
    )
    if depth == 0:
        return 0, 0
    every, mark = settings.dlq_scan_interval_seconds, store.sweeper_marks.SCAN
    if depth <= accounted:
        # The count can run high (a dead letter purged by hand): a DLQ that is not empty
        # is still looked into now and then, so nothing SQS moved there waits for long.
        every, mark = every * FULL_LOOK_EVERY, store.sweeper_marks.FULL_LOOK
    claimed = await store.sweeper_marks.claim_dlq_scan(db, every=every, mark=mark)
    if claimed is None:
        return 0, 0  # another sweeper looked (or looks) within the interval
    if await queue.move_running():
        # The messages are on their way back: receiving them would hide them from the task.
        await store.sweeper_marks.give_back_dlq_scan(db, claimed, mark=mark)
        return 0, 0
    scan = _Scan()
    try:
        await _scan(db, queue, scan)
    finally:
        # Whatever happened, nothing the scan received stays hidden.
        await queue.release_dead_letters(list(scan.held.values()))
    await store.sweeper_marks.dlq_scanned(db, unaccounted=scan.unaccounted)
    return scan.reconciled, scan.deleted


async def _scan(db: store.Database, queue: Transport, scan: _Scan) -> None:
    """Receive the DLQ's messages until it answers none or only ones seen already, or a
    move task starts."""
    for _ in range(DLQ_SCAN_BATCHES):
        messages = await queue.receive_dead_letters(
            max_messages=aws_limits.MAX_BATCH,
            wait_seconds=1,
            visibility=DLQ_SCAN_VISIBILITY_SECONDS,
        )
        fresh = [m for m in messages if m["MessageId"] not in scan.seen]
        scan.held.update((m["MessageId"], m["ReceiptHandle"]) for m in messages)
        if not fresh:
            return
        scan.seen.update(m["MessageId"] for m in fresh)
        await _reconcile(db, queue, fresh, scan)
        if await queue.move_running():
            return


async def _reconcile(
    db: store.Database, queue: Transport, messages: list[Message], scan: _Scan
) -> None:
    """One batch: mark the jobs SQS moved, delete stale dead letters, count the rest."""
    ids = codec.job_ids(messages)
    wanted = list(set(ids.values()))
    jobs = {job.id: job for job in await store.jobs.by_ids(db, wanted)} if wanted else {}
    to_mark: list[uuid.UUID] = []
    stale: dict[str, str] = {}  # MessageId -> handle
    for m in messages:
        job_id = ids.get(m["MessageId"])
        job = jobs.get(job_id) if job_id is not None else None
        if job is None:
            scan.unaccounted += 1  # not ours, or unknown: an operator looks at it
            continue
        attrs = m.get("MessageAttributes") or {}
        if job.state.terminal:
            stale[m["MessageId"]] = m["ReceiptHandle"]
            continue
        if codec.ATTR_DEAD_LETTERED_AT in attrs:
            gen = (attrs.get(codec.ATTR_GENERATION) or {}).get("StringValue")
            if gen is not None and gen.isdigit() and int(gen) < job.redrives:
                stale[m["MessageId"]] = m["ReceiptHandle"]  # from before a redrive
                continue
        elif _sent_before_last_redrive(m, job):
            stale[m["MessageId"]] = m["ReceiptHandle"]  # SQS moved it before a redrive
            continue
        elif job.state != JobState.DEAD_LETTERED:
            to_mark.append(job.id)
        if job.state == JobState.DEAD_LETTERED or job.id in to_mark:
            if job.id in scan.explained:
                scan.unaccounted += 1  # a second copy
            scan.explained.add(job.id)
        else:
            scan.unaccounted += 1  # a live job's: the database does not count it
    if to_mark:
        moved = await store.dead_letters.reconcile_moved(db, to_mark)
        scan.reconciled += len(moved)
        # A job left as it was (a live lease) is not counted by the database: nor here.
        scan.unaccounted += len(set(to_mark) - set(moved))
        for job_id in moved:
            log.warning(
                "moved to the DLQ by the redrive policy: worker never finished",
                extra={"job_id": job_id, "state": JobState.DEAD_LETTERED},
            )
    if stale:
        failed = set(await queue.delete_dead_letters(list(stale.values())))
        for message_id, handle in stale.items():
            if handle not in failed:
                scan.held.pop(message_id, None)
                scan.deleted += 1
