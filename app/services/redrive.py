"""Dead letters: list them, and redrive them back to the source queue.

Three paths, one rule (the job row decides):
- A whole-queue redrive uses StartMessageMoveTask where the endpoint implements it
  (AWS, LocalStack), always naming the source queue as the destination. The moved
  messages keep their attributes; the marker and the generation on them make the
  claim restart the attempt budget, once per dead-lettering. This is also what a
  redrive from the AWS console does.
- A filtered redrive (--job, --kind, --limit), and any redrive where the endpoint
  has no move task (moto), walks the DLQ: for each matching message it resets the
  job (queued, attempt 0, a new generation), sends the message to the source
  queue and deletes it from the DLQ. A selected job whose message is not in the
  DLQ is reset with an outbox row, so it is sent anyway.
- POST /v1/jobs/{id}/redrive resets the job with an outbox row and sends; the
  stale dead letter is deleted later by the sweeper.

Every path honours the job's redrive budget (TASKLEASE_REDRIVE_BUDGET redrives within
TASKLEASE_REDRIVE_WINDOW_SECONDS): a reset past it is refused (the job stays
dead-lettered, its dead letter stays in the DLQ), and a moved message past it is
deleted unrun by the claim. ``force`` (the CLI's --force, the API's admin ?force=true)
redrives past the budget, and never through a move task, which cannot be forced.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app import errors, metrics, store
from app.services import jobs, outbox
from app.settings import aws_limits
from app.settings.config import Settings
from app.states import JobState
from app.store.records import Job, OutboxRow
from app.transport import Message, Transport, codec

Progress = Callable[[int, int | None], None]

MOVE_POLL_SECONDS = 0.5
# Messages the walk has looked at stay hidden this long, so one walk sees each once.
WALK_VISIBILITY_SECONDS = 30
MAX_LIST = 1000


@dataclass
class RedriveReport:
    mode: str
    selected: list[dict[str, Any]] = field(default_factory=list)
    moved: int = 0
    reset: int = 0
    sent_without_dead_letter: int = 0
    stale_deleted: int = 0
    left_in_dlq: int = 0
    dry_run: bool = False
    # Jobs past their redrive budget: left dead-lettered (with a move task: their
    # messages will be deleted unrun when claimed). --force redrives them.
    refused: list[uuid.UUID] = field(default_factory=list)


async def dead_letters(
    db: store.Database,
    *,
    scope: str | None,
    kind: str | None = None,
    job_ids: Sequence[uuid.UUID] | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    found = await _dead_letters(db, scope=scope, kind=kind, job_ids=job_ids, limit=limit)
    return [job.to_dict() for job in found]


async def _dead_letters(
    db: store.Database,
    *,
    scope: str | None,
    kind: str | None,
    job_ids: Sequence[uuid.UUID] | None,
    limit: int | None,
) -> list[Job]:
    return await store.dead_letters.listing(
        db, tenant=scope, kind=kind, job_ids=job_ids, limit=limit or MAX_LIST
    )


def past_budget(job: Job, budget: store.leases.RedriveBudget) -> bool:
    """Whether the job's redrives within the window used up its budget (for reports: the
    database decides at the redrive itself)."""
    since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=budget.window_seconds)
    return sum(1 for at in job.redriven_at if at > since) >= budget.budget


def refusal(job_id: uuid.UUID, budget: store.leases.RedriveBudget) -> str:
    """An operator's answer for a job past its redrive budget."""
    return (
        f"job {job_id} was not redriven: its redrive budget is used up ({budget.budget} "
        f"redrives within {budget.window_seconds} s, TASKLEASE_REDRIVE_BUDGET and "
        "TASKLEASE_REDRIVE_WINDOW_SECONDS)"
    )


async def reset(
    db: store.Database,
    queue: Transport,
    job_ids: Sequence[uuid.UUID],
    *,
    with_outbox: bool,
    detail: str,
    budget: store.leases.RedriveBudget,
    force: bool = False,
) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """Dead-lettered jobs back to queued with a fresh budget; with_outbox also sends them.
    (The jobs reset, the jobs refused because their redrive budget is used up.)"""
    if force:
        detail += " (forced past the redrive budget)"
    rows = await store.dead_letters.reset(
        db, job_ids, with_outbox=with_outbox, detail=detail, redrive=budget, force=force
    )
    metrics.count(metrics.REDRIVES, sum(1 for r in rows if not r.refused))
    if with_outbox:
        await outbox.send(
            db,
            queue,
            [OutboxRow(id=r.outbox_id, job_id=r.id) for r in rows if r.outbox_id is not None],
        )
    return [r.id for r in rows if not r.refused], [r.id for r in rows if r.refused]


async def redrive_job(
    settings: Settings,
    db: store.Database,
    queue: Transport,
    job_id: uuid.UUID,
    *,
    scope: str | None,
    force: bool = False,
) -> dict[str, Any]:
    """One job, from the API: 409 unless it is dead-lettered and, unless ``force``, has
    redrive budget left."""
    job = await jobs.find(db, job_id, scope=scope)
    if job.state != JobState.DEAD_LETTERED:
        raise errors.Conflict(
            f"job {job_id} is {job.state}, not dead_lettered: only dead letters are redriven"
        )
    budget = store.leases.RedriveBudget.of(settings)
    done, refused = await reset(
        db,
        queue,
        [job_id],
        with_outbox=True,
        detail="redriven through the API",
        budget=budget,
        force=force,
    )
    if refused:
        raise errors.Conflict(
            refusal(job_id, budget) + "; an admin key can redrive it anyway with ?force=true"
        )
    if not done:
        raise errors.Conflict(f"job {job_id} changed state while being redriven")
    return await jobs.get_job(db, job_id, scope=scope)


async def redrive(
    settings: Settings,
    db: store.Database,
    queue: Transport,
    *,
    job_ids: Sequence[uuid.UUID] | None = None,
    kind: str | None = None,
    tenant: str | None = None,
    limit: int | None = None,
    dry_run: bool = False,
    force: bool = False,
    progress: Progress | None = None,
) -> RedriveReport:
    """The operator's redrive (CLI, admin API): every tenant unless ``tenant`` is given.
    Jobs past their redrive budget are refused (``report.refused``) unless ``force``."""
    budget = store.leases.RedriveBudget.of(settings)
    selected = await _dead_letters(db, scope=tenant, kind=kind, job_ids=job_ids, limit=limit)
    filtered = bool(job_ids or kind or tenant or limit)
    listed = [job.to_dict() for job in selected]
    predicted = [] if force else [job.id for job in selected if past_budget(job, budget)]
    if dry_run:
        return RedriveReport(mode="dry run", selected=listed, dry_run=True, refused=predicted)
    if not filtered and not force:
        handle = await queue.start_move()
        if handle is not None:
            # The claim enforces the budget: past it, a moved message is deleted unrun.
            report = RedriveReport(mode="StartMessageMoveTask", selected=listed, refused=predicted)
            report.moved = await _wait_for_move(queue, progress)
            metrics.count(metrics.REDRIVES, report.moved)
            return report
    walk = _Walk(db, queue, budget, force=force, filtered=filtered)
    return await walk.run(selected, progress)


async def _wait_for_move(queue: Transport, progress: Progress | None) -> int:
    while True:
        status = await queue.move_status()
        moved = int(status.get("ApproximateNumberOfMessagesMoved", 0))
        total = status.get("ApproximateNumberOfMessagesToMove")
        if progress:
            progress(moved, int(total) if total is not None else None)
        state = status.get("Status")
        if state == "COMPLETED":
            return moved
        if state in ("FAILED", "CANCELLED"):
            raise errors.QueueError(
                f"the message move task {state.lower()}: {status.get('FailureReason', 'no reason given')}"
            )
        await asyncio.sleep(MOVE_POLL_SECONDS)


def _sort(
    messages: list[Message],
    ids: dict[str, uuid.UUID],
    jobs: dict[uuid.UUID, Job],
    wanted: set[uuid.UUID],
    *,
    filtered: bool,
    report: RedriveReport,
) -> tuple[list[Message], list[str]]:
    """A batch of dead letters sorted: to move back, and the receipt handles of stale ones
    (their job finished since); the rest stay in the DLQ, counted in the report."""
    move: list[Message] = []
    stale: list[str] = []
    for m in messages:
        job_id = ids.get(m["MessageId"])
        if job_id is None:
            continue
        job = jobs.get(job_id)
        if job_id in wanted or (
            not filtered and job is not None and job.state == JobState.DEAD_LETTERED
        ):
            move.append(m)
        elif job is not None and job.state.terminal:
            stale.append(m["ReceiptHandle"])
        else:
            report.left_in_dlq += 1
    return move, stale


class _Walk:
    """A redrive by receive/send/delete: the DLQ walked once, each chosen job reset (within
    its redrive budget, or forced) and its dead letter moved back."""

    def __init__(
        self,
        db: store.Database,
        queue: Transport,
        budget: store.leases.RedriveBudget,
        *,
        force: bool,
        filtered: bool,
    ) -> None:
        self.db = db
        self.queue = queue
        self.budget = budget
        self.force = force
        self.filtered = filtered
        # Dead letters received and neither moved nor deleted: made visible again at the
        # end, so the walk leaves the DLQ as visible as it found it.
        self.held: set[str] = set()

    async def _reset(
        self, job_ids: list[uuid.UUID], report: RedriveReport, *, with_outbox: bool, detail: str
    ) -> list[uuid.UUID]:
        done, refused = await reset(
            self.db,
            self.queue,
            job_ids,
            with_outbox=with_outbox,
            detail=detail,
            budget=self.budget,
            force=self.force,
        )
        report.reset += len(done)
        report.refused.extend(r for r in refused if r not in report.refused)
        return done

    async def _move(
        self, move: list[Message], ids: dict[str, uuid.UUID], report: RedriveReport
    ) -> set[uuid.UUID]:
        """Reset the jobs, send their dead letters back, delete the ones sent from the DLQ;
        the ids of the jobs whose dead letter moved. A refused job's stays in the DLQ."""
        move_ids = list({ids[m["MessageId"]] for m in move})
        done = set(
            await self._reset(move_ids, report, with_outbox=False, detail="redriven from the DLQ")
        )
        sendable = [m for m in move if ids[m["MessageId"]] in done]
        report.left_in_dlq += len(move) - len(sendable)
        failed = set(await self.queue.send_moved(sendable))
        sent = [m for m in sendable if m["MessageId"] not in failed]
        await self.queue.delete_dead_letters([m["ReceiptHandle"] for m in sent])
        self.held.difference_update(m["ReceiptHandle"] for m in sent)
        report.moved += len(sent)
        return {ids[m["MessageId"]] for m in sent}

    async def run(self, selected: list[Job], progress: Progress | None) -> RedriveReport:
        try:
            return await self._run(selected, progress)
        finally:
            if self.held:
                await self.queue.release_dead_letters(sorted(self.held))

    async def _run(self, selected: list[Job], progress: Progress | None) -> RedriveReport:
        db, queue, filtered = self.db, self.queue, self.filtered
        report = RedriveReport(mode="receive/send/delete", selected=[j.to_dict() for j in selected])
        wanted = {job.id for job in selected}
        found: set[uuid.UUID] = set()
        total = len(wanted)
        while not filtered or found | set(report.refused) != wanted:
            messages = await queue.receive_dead_letters(
                max_messages=aws_limits.MAX_BATCH,
                wait_seconds=1,
                visibility=WALK_VISIBILITY_SECONDS,
            )
            if not messages:
                break
            self.held.update(m["ReceiptHandle"] for m in messages)
            ids = codec.job_ids(messages)
            report.left_in_dlq += len(messages) - len(ids)  # not ours: an operator looks at them
            states = (
                {job.id: job for job in await store.jobs.by_ids(db, list(set(ids.values())))}
                if ids
                else {}
            )
            move, stale = _sort(messages, ids, states, wanted, filtered=filtered, report=report)
            if move:
                found.update(await self._move(move, ids, report))
                total = max(total, len(found))
            if stale:
                await queue.delete_dead_letters(stale)
                self.held.difference_update(stale)
                report.stale_deleted += len(stale)
            if progress:
                progress(len(found), total or None)
        # Selected jobs whose dead letter was not found (expired, purged, never sent): send
        # anyway, within their redrive budget.
        missing = [job.id for job in selected if job.id not in found | set(report.refused)]
        if missing:
            before = report.reset
            await self._reset(
                missing,
                report,
                with_outbox=True,
                detail="redriven: no dead letter found, sent anew",
            )
            report.sent_without_dead_letter = report.reset - before
        if progress:
            progress(len(found) + report.sent_without_dead_letter, len(selected) or None)
        return report
