"""Submitting jobs: validate them, admit and write them with their outbox rows in one
statement, then send their messages through the one outbox send path.

Reading and cancelling jobs live in ``app.services.jobs``, the send path in
``app.services.outbox``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import logging
import math
import uuid
from dataclasses import dataclass
from typing import Any

from app import crashpoints, errors, kinds, metrics, store
from app.kinds import flow as flow_control
from app.priorities import Priority
from app.services import auth, deadlines, flow, outbox, wakeups
from app.settings import bounds
from app.settings.config import Settings
from app.storable import unstorable
from app.store.jobs import NewRow
from app.store.records import Admission, OutboxRow
from app.transport import Transport

log = logging.getLogger(__name__)

DEFAULT_TENANT = "default"
MAX_IDEMPOTENCY_KEY = bounds.MAX_IDEMPOTENCY_KEY_CHARS
# Jobs one POST /v1/jobs/batch may carry (at most the default burst, so a batch fits it).
MAX_SUBMIT_BATCH = 100
# Retry-After for a tenant at its cap of unfinished jobs: jobs finish on their own time.
IN_FLIGHT_RETRY_AFTER_SECONDS = 5


@dataclass(frozen=True)
class Submitted:
    job: dict[str, Any]
    created: bool  # False: an earlier request with the same Idempotency-Key made it
    # True: not written; its key's active job answered instead (if_active drop_new).
    dropped: bool = False


@dataclass(frozen=True)
class NewJob:
    """One job as a caller asks for it."""

    kind: str
    payload: Any
    max_attempts: int | None = None
    timeout_seconds: int | None = None
    idempotency_key: str | None = None
    run_at: dt.datetime | None = None  # with a time zone; at most a year ahead
    delay_seconds: float | None = None  # 0 to a year; not both
    priority: str | None = None  # high, normal or low (None: normal)
    deadline: dt.datetime | None = None  # the whole run's (services/deadlines.py)
    deadline_seconds: float | None = None  # from its submission; not both
    # A re-run's or a fork's origin (app/services/reruns.py); a note for its first event.
    rerun_of: uuid.UUID | None = None
    forked_from: uuid.UUID | None = None
    fork_step: str | None = None
    note: str | None = None
    # Flow control (app/kinds/flow.py): the job's key (else its kind's key function's),
    # and what to do when a job of the key is active (else its kind's if_active).
    key: str | None = None
    if_active: str | None = None


def request_hash(
    kind: str,
    payload: Any,
    max_attempts: int,
    timeout_seconds: int,
    *,
    run_at: dt.datetime | None = None,
    delay_seconds: float | None = None,
    priority: str | None = None,
    deadline: str | float | None = None,
    origin: dict[str, str] | None = None,
    flow: dict[str, str] | None = None,
) -> str:
    """What an Idempotency-Key is bound to. When the job should run, and a priority other
    than normal, are part of the request (the same key asking for another time or
    priority is a 409), added only when asked for, so the hashes of requests without them
    are the ones stored before they existed."""
    request: dict[str, Any] = {
        "kind": kind,
        "payload": payload,
        "max_attempts": max_attempts,
        "timeout": timeout_seconds,
    }
    if run_at is not None:
        request["run_at"] = run_at.astimezone(dt.UTC).isoformat()
    if delay_seconds is not None:
        request["delay_seconds"] = delay_seconds
    if priority not in (None, Priority.NORMAL):
        request["priority"] = priority
    if deadline is not None:
        request["deadline"] = deadline
    if origin:  # a re-run's or a fork's: the same key for another job's re-run is a 409
        request["origin"] = origin
    if flow:  # a key or an if_active the submission gave
        request["flow"] = flow
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _origin(new: NewJob) -> dict[str, str] | None:
    """A re-run's or a fork's origin, as its Idempotency-Key is bound to it."""
    origin = {
        "rerun_of": new.rerun_of,
        "forked_from": new.forked_from,
        "fork_step": new.fork_step if new.forked_from is not None else None,
    }
    return {k: str(v) for k, v in origin.items() if v is not None} or None


def _check_timing(new: NewJob) -> None:
    """run_at or delay_seconds, not both, within a year; run_at with its time zone."""
    if new.run_at is not None and new.delay_seconds is not None:
        raise errors.BadRequest("give run_at or delay_seconds, not both")
    if new.delay_seconds is not None and not (
        math.isfinite(new.delay_seconds) and 0 <= new.delay_seconds <= bounds.MAX_DELAY_SECONDS
    ):
        raise errors.BadRequest(
            f"delay_seconds must be between 0 and {bounds.MAX_DELAY_SECONDS} (a year)"
        )
    if new.run_at is not None:
        if new.run_at.tzinfo is None or new.run_at.utcoffset() is None:
            raise errors.BadRequest(
                "run_at needs a time zone (ISO 8601 with Z or an offset, e.g. "
                "2026-12-24T18:00:00+01:00)"
            )
        latest = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=bounds.MAX_DELAY_SECONDS)
        if new.run_at > latest:
            raise errors.BadRequest("run_at must be at most a year from now")


async def submit(
    settings: Settings,
    db: store.Database,
    queue: Transport,
    *,
    kind: str,
    payload: Any,
    max_attempts: int | None = None,
    timeout_seconds: int | None = None,
    idempotency_key: str | None = None,
    tenant: str = DEFAULT_TENANT,
    sender: outbox.OutboxSender | None = None,
    key_id: str | None = None,
    run_at: dt.datetime | None = None,
    delay_seconds: float | None = None,
    priority: str | None = None,
    deadline: dt.datetime | None = None,
    deadline_seconds: float | None = None,
    key: str | None = None,
    if_active: str | None = None,
) -> Submitted:
    """Validate, write the job and its outbox row in one statement, commit, then send
    (a delayed job: written waiting on its timer, its wake-up sent delayed)."""
    new = NewJob(
        kind,
        payload,
        max_attempts,
        timeout_seconds,
        idempotency_key,
        run_at,
        delay_seconds,
        priority,
        deadline,
        deadline_seconds,
        key=key,
        if_active=if_active,
    )
    (submitted,) = await submit_many(
        settings, db, queue, [new], tenant=tenant, sender=sender, key_id=key_id
    )
    return submitted


def _priority(value: str | None) -> Priority:
    try:
        return Priority(value or Priority.NORMAL)
    except ValueError:
        raise errors.BadRequest(
            f"priority must be one of high, normal, low, not {value!r}"
        ) from None


def validated(settings: Settings, new: NewJob) -> NewRow:
    """The job checked (kind, payload, bounds, key, timing, priority) and ready for the
    insert, or BadRequest naming what is wrong; a spawned child and a schedule's job go
    through here too."""
    _check_timing(new)
    priority = _priority(new.priority)
    k = kinds.get(new.kind)
    deadline, deadline_seconds = deadlines.checked(
        new.deadline, new.deadline_seconds, k.deadline_seconds
    )
    problem = unstorable(new.payload)
    if problem:
        raise errors.BadRequest(f"payload: {problem}")
    parsed = k.parse(new.payload)
    attempts = new.max_attempts or k.max_attempts or settings.max_attempts
    timeout = new.timeout_seconds or k.timeout_seconds or settings.default_job_timeout_seconds
    if not 1 <= attempts < settings.max_receive_count:
        raise errors.BadRequest(
            f"max_attempts must be between 1 and {settings.max_receive_count - 1} "
            "(below the queue's maxReceiveCount)"
        )
    if not bounds.MIN_TIMEOUT_SECONDS <= timeout <= bounds.MAX_TIMEOUT_SECONDS:
        raise errors.BadRequest(
            f"timeout_seconds must be between {bounds.MIN_TIMEOUT_SECONDS} and "
            f"{bounds.MAX_TIMEOUT_SECONDS}"
        )
    key = new.idempotency_key
    if key is not None and not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
        raise errors.BadRequest(f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} characters")
    stored_payload = parsed.model_dump(mode="json", exclude_unset=True)
    flow_key = flow_control.key_of(k.name, k.flow, parsed, new.key)
    if_active = new.if_active or k.flow.if_active
    if if_active not in flow_control.IF_ACTIVE:
        raise errors.BadRequest(
            f"if_active must be one of {', '.join(flow_control.IF_ACTIVE)}, not {if_active!r}"
        )
    if new.if_active is not None and flow_key is None:
        raise errors.BadRequest(
            "if_active needs a key: give key, or submit a kind whose key function gives one"
        )
    debounce = k.flow.debounce_seconds if flow_key is not None else None
    if debounce is not None and (new.run_at is not None or new.delay_seconds is not None):
        raise errors.BadRequest(
            f"kind {k.name!r} debounces its jobs ({debounce:g} s after the last of a key's "
            "burst): give neither run_at nor delay_seconds"
        )
    concurrency = k.flow.concurrency
    if concurrency is None and if_active != "enqueue":
        concurrency = 1  # as the kind's own policy implies (app/kinds/flow.py)
    given = {"key": new.key, "if_active": new.if_active}
    digest = request_hash(
        new.kind,
        stored_payload,
        attempts,
        timeout,
        run_at=new.run_at,
        delay_seconds=new.delay_seconds,
        priority=priority,
        deadline=deadlines.hashed(new.deadline, new.deadline_seconds),
        origin=_origin(new),
        flow={name: value for name, value in given.items() if value is not None} or None,
    )
    rate = k.flow.rate if flow_key is not None else None
    return NewRow(
        uuid.uuid4(),
        new.kind,
        stored_payload,
        attempts,
        timeout,
        key,
        digest,
        run_at=new.run_at,
        delay_seconds=new.delay_seconds,
        priority=priority.value,
        deadline=deadline,
        deadline_seconds=deadline_seconds,
        rerun_of=new.rerun_of,
        forked_from=new.forked_from,
        fork_step=new.fork_step,
        note=new.note,
        flow_key=flow_key,
        key_concurrency=concurrency if flow_key is not None else None,
        key_rate=rate.limit if rate is not None else None,
        key_rate_seconds=rate.per_seconds if rate is not None else None,
        debounce_seconds=debounce,
        if_active=if_active if flow_key is not None else "enqueue",
    )


async def submit_many(
    settings: Settings,
    db: store.Database,
    queue: Transport,
    jobs: list[NewJob],
    *,
    tenant: str = DEFAULT_TENANT,
    sender: outbox.OutboxSender | None = None,
    key_id: str | None = None,
) -> list[Submitted]:
    """Validate every job, then admit and write them all (or none) with their outbox rows
    in one statement, commit, then send. One answer per job, in order. A bad job, an
    Idempotency-Key reused with another request, or a limit refuses the whole call.
    ``key_id``: the caller's API key, whose revocation the statement checks (a revoked
    key is Unauthorized, before anything else is answered and with nothing written)."""
    if not 1 <= len(jobs) <= MAX_SUBMIT_BATCH:
        raise errors.BadRequest(f"a batch holds 1 to {MAX_SUBMIT_BATCH} jobs, not {len(jobs)}")
    batch = len(jobs) > 1
    rows = _validated_batch(settings, jobs, batch)
    keyed: flow.KeyedInsertion | None = None
    positions: list[int] = []
    if any(flow.decides(r) for r in rows):
        # A kind that decides per key: its keys locked, looked at, replaced (services/flow.py).
        keyed = await flow.insert(
            db, rows, tenant=tenant, limits=limits(settings), key_id=key_id, batch=batch
        )
        if keyed.written is None:  # every job answered by its key's active job (drop_new)
            return [
                Submitted(job=j.to_dict(), created=False, dropped=True)
                for j in keyed.answered.values()
            ]
        written = keyed.written
        flow.after_commit(keyed, rows)
        positions = [i for i in range(len(rows)) if i not in keyed.answered]
        rows = [rows[i] for i in positions]
    else:
        written = await store.jobs.insert(
            db, rows, tenant=tenant, limits=limits(settings), key_id=key_id
        )
    verdict = written.admission
    if not verdict.key_ok:
        raise auth.invalid_key()  # revoked since this process verified it: no replay either
    if not written.fork_ok:
        raise errors.Conflict("the fork's step is no longer recorded (its job was pruned?)")
    for job in written.jobs:
        if job.forked_from is not None:  # its copied effects committed with it, unsent
            crashpoints.hit(crashpoints.Point.AFTER_FORK_INSERTED, job_id=job.id)
    made = {job.id: job for job in written.jobs}
    if verdict.conflict_ord is not None:
        _conflict(_position(keyed, positions, verdict.conflict_ord - 1), batch)
    pending = [r.idempotency_key for r in rows if r.id not in made and r.idempotency_key]
    earlier = (
        {j.idempotency_key: j for j in await store.jobs.by_idempotency_keys(db, tenant, pending)}
        if pending
        else {}
    )
    out: list[Submitted] = []
    for i, r in enumerate(rows):
        if r.id in made:
            out.append(Submitted(job=made[r.id].to_dict(), created=True))
            continue
        existing = earlier.get(r.idempotency_key) if r.idempotency_key is not None else None
        if existing is None:
            # Refused by admission (a replay found nothing to refuse).
            _refuse(verdict, batch)
            raise errors.StoreError("the job was neither written nor refused")  # pragma: no cover
        if existing.request_hash != r.request_hash:
            # A concurrent request took the key between the statement's look and its write.
            _conflict(_position(keyed, positions, i), batch)
        out.append(Submitted(job=existing.to_dict(), created=False))
    if keyed is not None and keyed.answered:
        # The jobs a policy answered with their key's active job (drop_new), in place.
        for i in sorted(keyed.answered):
            out.insert(i, Submitted(job=keyed.answered[i].to_dict(), created=False, dropped=True))
    for sub in out:
        metrics.count(
            metrics.SUBMISSIONS, kind=str(sub.job["kind"]), replay=str(not sub.created).lower()
        )
    if written.outbox:
        await send_after_commit(db, queue, written.outbox, sender)
    if written.delayed:
        await _send_delayed(settings, db, queue, written.delayed)
    return out


def _position(keyed: flow.KeyedInsertion | None, positions: list[int], index: int) -> int:
    """A written row's index in the request (a policy may have answered some before)."""
    return positions[index] if keyed is not None else index


def limits(settings: Settings) -> store.jobs.Limits:
    """The deployment's default limits (a tenant's overrides win over them in the insert)."""
    return store.jobs.Limits(
        rate_per_second=settings.rate_limit_per_second,
        burst=settings.rate_limit_burst,
        max_in_flight=settings.max_jobs_in_flight,
        max_running=settings.max_running_per_tenant,
        window_per_slot=settings.queue_window_per_slot,
    )


def _validated_batch(settings: Settings, jobs: list[NewJob], batch: bool) -> list[NewRow]:
    """Each job validated, with its index in the message; no key twice in one batch."""
    rows: list[NewRow] = []
    for i, new in enumerate(jobs):
        try:
            rows.append(validated(settings, new))
        except errors.BadRequest as exc:
            raise errors.BadRequest(f"jobs[{i}]: {exc}" if batch else str(exc)) from exc
        first = next(
            (j for j, r in enumerate(rows[:-1]) if r.idempotency_key == new.idempotency_key),
            None,
        )
        if new.idempotency_key is not None and first is not None:
            raise errors.BadRequest(
                f"jobs[{i}]: idempotency_key {new.idempotency_key!r} is also jobs[{first}]'s: "
                "each job of a batch needs its own"
            )
    return rows


def _conflict(index: int, batch: bool) -> None:
    where = f"jobs[{index}]: " if batch else ""
    raise errors.Conflict(
        f"{where}Idempotency-Key was already used with a different request body; "
        "use a new key for a new job"
    )


async def send_after_commit(
    db: store.Database, queue: Transport, rows: list[OutboxRow], sender: outbox.OutboxSender | None
) -> None:
    """The fast path: the jobs are committed; send their messages now. A failed send is
    the outbox relay's to retry: the caller still gets its 202."""
    for row in rows:
        crashpoints.hit(crashpoints.Point.AFTER_OUTBOX_COMMIT, job_id=row.job_id)
    try:
        if sender is not None:
            await asyncio.gather(*(sender.send(row) for row in rows))
        else:
            await outbox.send(db, queue, rows)
    except errors.TaskleaseError as exc:
        log.warning(
            "fast-path send failed; the outbox relay will send it: %s",
            exc,
            extra={"job_id": rows[0].job_id, "count": len(rows)},
        )


async def _send_delayed(
    settings: Settings, db: store.Database, queue: Transport, job_ids: list[uuid.UUID]
) -> None:
    """The delayed jobs are committed, waiting on their timers: the wake-ups due within
    SQS's delay cap go now with their delay; later ones are the sweeper's, as is any this
    process dies before sending (their wake_sent_at is NULL until marked here)."""
    for job_id in job_ids:
        crashpoints.hit(crashpoints.Point.AFTER_OUTBOX_COMMIT, job_id=job_id)
    try:
        due = await store.jobs.mark_delayed_wakeups(
            db, job_ids, cap=settings.max_message_delay_seconds
        )
        if due:
            await wakeups.send(queue, due, path="submit")
    except errors.TaskleaseError as exc:
        log.warning(
            "delayed wake-up not sent; the sweeper will send it: %s",
            exc,
            extra={"job_id": job_ids[0], "count": len(job_ids)},
        )


def _refuse(verdict: Admission, batch: bool = False) -> None:
    """429 for a refused admission, with when to come back; a batch that could never fit
    the tenant's burst is a 422 instead (waiting would not help)."""
    wanted = verdict.wanted
    if not verdict.rate_ok:
        if wanted > verdict.burst:
            raise errors.BadRequest(
                f"this batch has {wanted} new jobs, more than this tenant's burst of "
                f"{verdict.burst}: send at most {verdict.burst} per request"
            )
        wait = math.ceil(float(verdict.wait_seconds or 1))
        raise errors.TooManyRequests(
            f"rate limit: this tenant may submit {verdict.rate:g} jobs per second"
            + (f" (this batch asks for {wanted})" if batch else ""),
            retry_after=wait,
        )
    if not verdict.flight_ok:
        raise errors.TooManyRequests(
            f"this tenant has too many unfinished jobs for {wanted} more: its limit is "
            f"{verdict.max_in_flight}; submit more as they finish"
            if batch
            else f"this tenant already has {verdict.max_in_flight} unfinished jobs, its "
            "limit; submit more as they finish",
            retry_after=IN_FLIGHT_RETRY_AFTER_SECONDS,
        )
