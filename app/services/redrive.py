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
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app import aws_limits, errors, store
from app.config import Settings
from app.services import jobs, outbox
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


async def reset(
    db: store.Database,
    queue: Transport,
    job_ids: Sequence[uuid.UUID],
    *,
    with_outbox: bool,
    detail: str,
) -> list[uuid.UUID]:
    """Dead-lettered jobs back to queued with a fresh budget; with_outbox also sends them."""
    redriven = await store.dead_letters.reset(db, job_ids, with_outbox=with_outbox, detail=detail)
    if with_outbox:
        await outbox.send(
            db,
            queue,
            [OutboxRow(id=r.outbox_id, job_id=r.id) for r in redriven if r.outbox_id is not None],
        )
    return [r.id for r in redriven]


async def redrive_job(
    db: store.Database, queue: Transport, job_id: uuid.UUID, *, scope: str | None
) -> dict[str, Any]:
    """One job, from the API: 409 unless it is dead-lettered."""
    job = await jobs.find(db, job_id, scope=scope)
    if job.state != JobState.DEAD_LETTERED:
        raise errors.Conflict(
            f"job {job_id} is {job.state}, not dead_lettered: only dead letters are redriven"
        )
    if not await reset(db, queue, [job_id], with_outbox=True, detail="redriven through the API"):
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
    progress: Progress | None = None,
) -> RedriveReport:
    """The operator's redrive (CLI, admin API): every tenant unless ``tenant`` is given."""
    selected = await _dead_letters(db, scope=tenant, kind=kind, job_ids=job_ids, limit=limit)
    filtered = bool(job_ids or kind or tenant or limit)
    listed = [job.to_dict() for job in selected]
    if dry_run:
        return RedriveReport(mode="dry run", selected=listed, dry_run=True)
    if not filtered:
        handle = await queue.start_move()
        if handle is not None:
            report = RedriveReport(mode="StartMessageMoveTask", selected=listed)
            report.moved = await _wait_for_move(queue, progress)
            return report
    return await _walk(db, queue, selected, filtered=filtered, progress=progress)


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


async def _move(
    db: store.Database,
    queue: Transport,
    move: list[Message],
    ids: dict[str, uuid.UUID],
    report: RedriveReport,
) -> set[uuid.UUID]:
    """Reset the jobs, send their dead letters back, delete the ones sent from the DLQ;
    the ids of the jobs whose dead letter moved."""
    move_ids = list({ids[m["MessageId"]] for m in move})
    report.reset += len(
        await reset(db, queue, move_ids, with_outbox=False, detail="redriven from the DLQ")
    )
    failed = set(await queue.send_moved(move))
    sent = [m for m in move if m["MessageId"] not in failed]
    await queue.delete_dead_letters([m["ReceiptHandle"] for m in sent])
    report.moved += len(sent)
    return {ids[m["MessageId"]] for m in sent}


async def _walk(
    db: store.Database,
    queue: Transport,
    selected: list[Job],
    *,
    filtered: bool,
    progress: Progress | None,
) -> RedriveReport:
    report = RedriveReport(mode="receive/send/delete", selected=[j.to_dict() for j in selected])
    wanted = {job.id for job in selected}
    found: set[uuid.UUID] = set()
    total = len(wanted)
    while not filtered or found != wanted:
        messages = await queue.receive_dead_letters(
            max_messages=aws_limits.MAX_BATCH,
            wait_seconds=1,
            visibility=WALK_VISIBILITY_SECONDS,
        )
        if not messages:
            break
        ids = codec.job_ids(messages)
        report.left_in_dlq += len(messages) - len(ids)  # not ours: an operator looks at them
        states = (
            {job.id: job for job in await store.jobs.by_ids(db, list(set(ids.values())))}
            if ids
            else {}
        )
        move, stale = _sort(messages, ids, states, wanted, filtered=filtered, report=report)
        if move:
            found.update(await _move(db, queue, move, ids, report))
            total = max(total, len(found))
        if stale:
            await queue.delete_dead_letters(stale)
            report.stale_deleted += len(stale)
        if progress:
            progress(len(found), total or None)
    # Selected jobs whose dead letter was not found (expired, purged, never sent): send anyway.
    missing = [job.id for job in selected if job.id not in found]
    if missing:
        anew = await reset(
            db, queue, missing, with_outbox=True, detail="redriven: no dead letter found, sent anew"
        )
        report.sent_without_dead_letter = len(anew)
        report.reset += len(anew)
    if progress:
        progress(len(found) + report.sent_without_dead_letter, len(selected) or None)
    return report
