"""Schedules: a cron expression in a time zone that makes a job of a kind, with a payload,
at each slot. Create, read, list, pause, resume and delete them (the API and the CLI;
every read is scoped like a job's: a tenant, or None for an operator), and
``materialise_due``, the sweeper's step that makes each due slot's job.

Exactly one job per slot, however many sweepers run: a sweeper locks the schedule's row
(FOR UPDATE SKIP LOCKED), writes the slot's job through the submit path's insert (job,
event and outbox row in one statement) with the idempotency key
``schedule:<id>:<slot>``, and moves next_slot past now, all in one transaction; the
jobs' unique (tenant, idempotency key) is the backstop. A sweeper that comes late (the
sweeper stopped, a slot every minute and the sweep every five) makes only the latest due
slot's job: the slots before it are skipped, never made in a burst.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from app import crashpoints, errors, storable, store
from app.services import flow, submit
from app.services.cron import Cron
from app.settings import bounds
from app.settings.config import Settings
from app.store.jobs import NewRow
from app.store.records import OutboxRow, Schedule
from app.transport import Transport

log = logging.getLogger(__name__)

# How many of the next slots a schedule's view lists.
UPCOMING = 5
# How many due schedules one sweep makes slots for at most (the rest: the next sweep).
SWEEP_LIMIT = 500


@dataclass(frozen=True)
class ScheduleRequest:
    """A schedule as a caller asks for it."""

    cron: str
    timezone: str
    kind: str
    payload: Any
    name: str | None = None
    max_attempts: int | None = None
    timeout_seconds: int | None = None


def slot_key(schedule_id: uuid.UUID, slot: dt.datetime) -> str:
    """The idempotency key of a slot's job: one job per (schedule, slot), in UTC so that
    the two 01:30s of a night the clock goes back are two keys."""
    return f"schedule:{schedule_id}:{slot.astimezone(dt.UTC).isoformat()}"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def view(schedule: Schedule) -> dict[str, Any]:
    """The schedule's columns, what its cron says in words, and its next slots in its
    time zone (none while paused: a resume starts from the next slot after it)."""
    try:
        cron = Cron.parse(schedule.cron, schedule.timezone)
    except errors.BadRequest:  # its time zone left the tz database: the sweeper disables it
        return {**schedule.to_dict(), "description": "", "upcoming": []}
    upcoming: list[dt.datetime] = []
    if schedule.enabled and schedule.next_slot is not None:
        first = schedule.next_slot.astimezone(cron.zone)
        upcoming = [first, *cron.upcoming(first, UPCOMING - 1)]
    return {**schedule.to_dict(), "description": cron.describe(), "upcoming": upcoming}


def _checked_name(name: str | None) -> str | None:
    if name is None:
        return None
    if not 1 <= len(name) <= bounds.MAX_SCHEDULE_NAME_CHARS:
        raise errors.BadRequest(f"name: 1 to {bounds.MAX_SCHEDULE_NAME_CHARS} characters")
    problem = storable.unstorable(name)
    if problem:
        raise errors.BadRequest(f"name: {problem}")
    return name


async def create(
    settings: Settings, db: store.Database, request: ScheduleRequest, *, tenant: str
) -> dict[str, Any]:
    """Validate the cron, the time zone, the kind and its payload (the submit path's own
    checks) and write the schedule, first slot after now; nothing is written when any
    of them is wrong (BadRequest naming the field). A name the tenant already gave
    another schedule is a Conflict."""
    for what, text in (("cron", request.cron), ("timezone", request.timezone)):
        problem = storable.unstorable(text)
        if problem:
            raise errors.BadRequest(f"{what}: {problem}")
    cron = Cron.parse(request.cron, request.timezone)
    name = _checked_name(request.name)
    row = submit.validated(
        settings,
        submit.NewJob(request.kind, request.payload, request.max_attempts, request.timeout_seconds),
    )
    first = cron.after(_now())
    if first is None:
        raise errors.BadRequest(f"cron: {request.cron!r} names no time in the next 50 years")
    made = await store.schedules.insert(
        db,
        store.schedules.NewSchedule(
            id=uuid.uuid4(),
            tenant=tenant,
            name=name,
            cron=cron.expr,
            timezone=request.timezone,
            kind=row.kind,
            payload=row.payload,
            max_attempts=request.max_attempts,
            timeout_seconds=request.timeout_seconds,
            next_slot=first,
        ),
    )
    if made is None:
        raise errors.Conflict(f"name: this tenant already has a schedule named {name!r}")
    return view(made)


async def find(db: store.Database, schedule_id: uuid.UUID, *, scope: str | None) -> Schedule:
    """The schedule, if the caller may see it. Another tenant's is NotFound, as for jobs."""
    found = await store.schedules.get(db, schedule_id, scope)
    if found is None:
        raise errors.NotFound(f"no schedule {schedule_id}")
    return found


async def get(db: store.Database, schedule_id: uuid.UUID, *, scope: str | None) -> dict[str, Any]:
    return view(await find(db, schedule_id, scope=scope))


async def list_schedules(
    db: store.Database, *, scope: str | None, limit: int = 50
) -> list[dict[str, Any]]:
    """The caller's schedules (None: every tenant's), newest first."""
    if not 1 <= limit <= bounds.MAX_PAGE:
        raise errors.BadRequest(f"limit must be between 1 and {bounds.MAX_PAGE}")
    return [view(s) for s in await store.schedules.page(db, tenant=scope, limit=limit)]


async def pause(db: store.Database, schedule_id: uuid.UUID, *, scope: str | None) -> dict[str, Any]:
    """No slot makes a job until it is resumed (pausing a paused schedule changes nothing)."""
    paused = await store.schedules.pause(db, schedule_id, scope)
    if paused is None:
        raise errors.NotFound(f"no schedule {schedule_id}")
    return view(paused)


async def resume(
    db: store.Database, schedule_id: uuid.UUID, *, scope: str | None
) -> dict[str, Any]:
    """Enabled again from the first slot after now: the slots of the pause make no job.
    A schedule that is not paused keeps its next slot."""
    found = await find(db, schedule_id, scope=scope)
    following = Cron.parse(found.cron, found.timezone).after(_now())
    if following is None:
        raise errors.Conflict(f"schedule {schedule_id}: its cron names no time in 50 years")
    resumed = await store.schedules.resume(db, schedule_id, scope, next_slot=following)
    if resumed is None:  # deleted meanwhile
        raise errors.NotFound(f"no schedule {schedule_id}")
    return view(resumed)


async def delete(db: store.Database, schedule_id: uuid.UUID, *, scope: str | None) -> None:
    """Gone; the jobs it made stay."""
    if not await store.schedules.delete(db, schedule_id, scope):
        raise errors.NotFound(f"no schedule {schedule_id}")


# --- the sweeper's step ------------------------------------------------------------


@dataclass
class _Slot:
    """What one due schedule came to."""

    outbox: list[OutboxRow] = field(default_factory=list)  # the slot's new job's message
    deferred: bool = False  # left due: the tenant is over its limits
    # Its kind decides per key (services/flow.py): what the policy did, counted (and
    # its crash points hit) once the transaction committed.
    keyed: tuple[flow.KeyedInsertion, NewRow] | None = None


async def materialise_due(
    settings: Settings, db: store.Database, queue: Transport, *, limit: int = SWEEP_LIMIT
) -> int:
    """Make the job of each due schedule's latest due slot, one transaction per schedule,
    then send their messages (a send that fails is the outbox relay's). Returns the jobs
    made."""
    made: list[OutboxRow] = []
    # Each schedule is taken once per sweep (whatever its cron answers, a sweep cannot
    # loop on one), and a tenant over its limits once: its other schedules wait too, and
    # do not use up the sweep's takes meant for other tenants.
    skip: list[uuid.UUID] = []
    over: list[str] = []
    for _ in range(limit):
        taken: Schedule | None = None
        try:
            async with db.transaction() as conn:
                due = await store.schedules.take_due_txn(conn, skip=skip, skip_tenants=over)
                if due is None:
                    break
                taken = due.schedule
                slot = await _make_slot_txn(settings, conn, due)
        except errors.StoreError:
            raise
        except Exception:
            if taken is None:
                raise
            # One schedule's failure (a kind's validator that raises) is its own: the
            # sweep goes on with the others and with its other steps.
            log.exception("schedule skipped this sweep", extra={"schedule_id": taken.id})
            skip.append(taken.id)
            continue
        skip.append(due.schedule.id)
        if slot.keyed is not None:
            flow.after_commit(slot.keyed[0], [slot.keyed[1]])
        if slot.deferred:
            over.append(due.schedule.tenant)
        for row in slot.outbox:
            # Committed: the job and the schedule's next slot; the message is not sent.
            crashpoints.hit(
                crashpoints.Point.AFTER_SCHEDULE_MATERIALISED,
                schedule_id=due.schedule.id,
                job_id=row.job_id,
            )
        made.extend(slot.outbox)
    if made:
        await submit.send_after_commit(db, queue, made, None)
    return len(made)


async def _make_slot_txn(settings: Settings, conn: store.Conn, due: store.schedules.Due) -> _Slot:
    """The due schedule's latest slot made (or why not), and its next slot moved past
    now, inside the caller's transaction, which holds the schedule's row."""
    s = due.schedule
    assert s.next_slot is not None  # the take asks next_slot <= now
    try:
        cron = Cron.parse(s.cron, s.timezone)
    except errors.BadRequest as exc:  # the time zone left the tz database
        await store.schedules.advance_txn(
            conn, s.id, next_slot=None, slot=None, job_id=None, error=str(exc)
        )
        log.warning("schedule disabled: %s", exc, extra={"schedule_id": s.id})
        return _Slot()
    # The latest slot at or before now: a stretch the sweepers missed makes one job.
    slot = max(cron.latest(due.now) or s.next_slot, s.next_slot)
    following = cron.after(due.now)
    try:
        row = submit.validated(
            settings,
            submit.NewJob(
                s.kind, s.payload, s.max_attempts, s.timeout_seconds, slot_key(s.id, slot)
            ),
        )
    except errors.BadRequest as exc:
        # The kind is gone from this deployment, or refuses the payload now: this slot
        # makes no job (visible on the schedule), the next ones try again.
        await store.schedules.advance_txn(
            conn, s.id, next_slot=following, slot=None, job_id=None, error=f"{_at(slot)}: {exc}"
        )
        log.warning("schedule slot made no job: %s", exc, extra={"schedule_id": s.id})
        return _Slot()
    keyed: flow.KeyedInsertion | None = None
    if flow.decides(row):
        # Its kind decides per key at submission (if_active, debounce): the slot's job
        # is one more submission of its key, the policy applied as the API applies it.
        try:
            keyed = await flow.insert_txn(
                conn,
                [row],
                tenant=s.tenant,
                limits=submit.limits(settings),
                key_id=None,
                batch=False,
            )
        except errors.Conflict as exc:  # if_active reject: nothing was written
            await store.schedules.advance_txn(
                conn, s.id, next_slot=following, slot=slot, job_id=None, error=f"{_at(slot)}: {exc}"
            )
            return _Slot()
        if keyed.written is None:  # if_active drop_new: its key's active job stands
            (active,) = keyed.answered.values()
            await store.schedules.advance_txn(
                conn,
                s.id,
                next_slot=following,
                slot=slot,
                job_id=None,
                error=f"{_at(slot)}: dropped, its key's job {active.id} is active (if_active "
                "drop_new)",
            )
            return _Slot(keyed=(keyed, row))
        written = keyed.written
    else:
        written = await store.jobs.insert_txn(
            conn, [row], tenant=s.tenant, limits=submit.limits(settings), key_id=None
        )
    verdict = written.admission
    if written.jobs:
        (job,) = written.jobs
        await store.schedules.advance_txn(
            conn, s.id, next_slot=following, slot=slot, job_id=job.id, error=None
        )
        log.info("schedule slot made its job", extra={"schedule_id": s.id, "job_id": job.id})
        return _Slot(outbox=written.outbox, keyed=(keyed, row) if keyed is not None else None)
    if verdict.conflict_ord is not None:
        error: str | None = (
            f"{_at(slot)}: the tenant used the key {row.idempotency_key!r} for another job"
        )
    elif not (verdict.rate_ok and verdict.flight_ok):
        # Counted like any submission of the tenant's: the slot waits for the next sweep
        # (a later slot due by then supersedes it, as any missed slot).
        await store.schedules.note_error_txn(
            conn, s.id, f"{_at(slot)}: waiting, the tenant is over its job limits"
        )
        return _Slot(deferred=True)
    else:
        error = None  # the slot's job exists already (an earlier sweep made it)
    await store.schedules.advance_txn(
        conn, s.id, next_slot=following, slot=slot, job_id=None, error=error
    )
    return _Slot()


def _at(slot: dt.datetime) -> str:
    return f"slot {slot.astimezone(dt.UTC).isoformat()}"
